#include "sim/gemm_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace domino::sim {
namespace {

constexpr double kStreamKStep = 64;  // k-steps a stream-K unit covers

// The pieces of k each of `tiles` output tiles (of every GEMM of a batch) is split into
// (GemmEstimate::split_k).
int SplitKOf(const GpuSpec& gpu, double tiles, double k) {
  if (!(k >= gpu.gemm_stream_k_min_k) || !(tiles > 0) || 2 * tiles > gpu.sms) return 1;
  return static_cast<int>(std::min(std::floor(gpu.sms / tiles), std::ceil(k / kStreamKStep)));
}

// The FLOPs' worth of time one SM spends on a piece of a tile `tile_n` wide: its share of k (one
// of `split` pieces) and the tile's prologue and epilogue.
double PieceFlops(const GpuSpec& gpu, double tile_n, double k, int split) {
  return 2.0 * gpu.gemm_tile_m * tile_n * (k / split + gpu.gemm_tile_overhead_k);
}

// One kernel the library could run: `tiles` tiles `tile_n` wide (of every GEMM of the batch),
// their main loop at `main_loop_tflops`, each tile cut into `split` pieces of k (1: none; at most
// SplitKOf's).
GemmEstimate PriceKernel(const GpuSpec& gpu, double main_loop_tflops, double m, double n, double k,
                         double in_bytes, double out_bytes, double batch, double tile_n,
                         double tiles, int split) {
  GemmEstimate out;
  const double flops_per_sm_us = main_loop_tflops * 1e6 / gpu.sms;
  out.tile_n = tile_n;
  out.main_loop_tflops = main_loop_tflops;
  out.output_tiles = tiles;
  out.stream_k = k >= gpu.gemm_stream_k_min_k && tiles > gpu.sms;
  out.split_k = out.stream_k ? 1 : split;
  out.cost.hbm_bytes = batch * ((m * k + k * n) * in_bytes + m * n * out_bytes);
  out.fixed_us = gpu.gemm_fixed_us;
  out.cost.wave_us = PieceFlops(gpu, tile_n, k, out.split_k) / flops_per_sm_us;
  out.cost.tiles = tiles * out.split_k;
  if (out.stream_k) {
    const double steps = std::ceil(k / kStreamKStep);
    out.cost.tiles = tiles * steps;
    out.cost.wave_us /= steps;
  } else if (out.split_k > 1) {
    out.cost.hbm_bytes += 2 * out.split_k * batch * m * n * 4;  // fp32 partials written, read back
    out.fixed_us += gpu.gemm_split_k_fixed_us;
  }
  // C, written a unit's share at a time after its main loop.
  if (out.cost.tiles > 0) out.cost.tile_epilogue_bytes = batch * m * n * out_bytes / out.cost.tiles;
  return out;
}

// The kernel alone on the GPU, as the library's heuristics and autotuners time it.
double AloneUs(const GpuSpec& gpu, const GemmEstimate& g) {
  return g.fixed_us + g.cost.BodyUs(gpu.sms, gpu.hbm_GBps * gpu.hbm_efficiency);
}

}  // namespace

double GemmCeilingTflops(const GpuSpec& gpu, Dtype dtype) {
  const double efficiency =
      dtype == Dtype::kFp8 ? gpu.fp8_gemm_efficiency : gpu.max_gemm_efficiency;
  return gpu.peak(dtype) * efficiency;
}

GemmEstimate EstimateGemm(const GpuSpec& gpu, double tflops_ceiling, double m, double n, double k,
                          double in_bytes, double out_bytes, double batch) {
  // The fastest of the kernels, the full tile unsplit first (it wins ties).
  GemmEstimate best;
  double best_us = std::numeric_limits<double>::infinity();
  for (const bool half : {false, true}) {
    if (half && !(gpu.gemm_half_tile_rate > 0)) break;
    const double tile_n = half ? gpu.gemm_tile_n / 2.0 : gpu.gemm_tile_n;
    const double rate = half ? tflops_ceiling * gpu.gemm_half_tile_rate : tflops_ceiling;
    const double tiles = batch * std::ceil(m / gpu.gemm_tile_m) * std::ceil(n / tile_n);
    const int max_split = SplitKOf(gpu, tiles, k);
    for (int split = 1; split <= max_split; ++split) {
      // No kernel beats its FLOPs spread evenly over every SM; that bound only grows with the
      // split (each piece pays the tile's overhead), so no later split can win either.
      const double fixed = gpu.gemm_fixed_us + (split > 1 ? gpu.gemm_split_k_fixed_us : 0.0);
      if (fixed + tiles * split * PieceFlops(gpu, tile_n, k, split) / (rate * 1e6) >= best_us)
        break;
      const GemmEstimate g =
          PriceKernel(gpu, rate, m, n, k, in_bytes, out_bytes, batch, tile_n, tiles, split);
      if (const double us = AloneUs(gpu, g); us < best_us) best = g, best_us = us;
    }
  }
  return best;
}

GemmContention GemmContentionOf(const GpuSpec& gpu, const GemmEstimate& g, double m, double n,
                                double k) {
  GemmContention out;
  if (!(gpu.gemm_cta_tiles > 0)) return out;
  out.blocks_comm = true;
  if (k < gpu.gemm_stream_k_min_k) return out;
  const double tiles = std::ceil(m / gpu.gemm_tile_m) * std::ceil(n / gpu.gemm_tile_n);
  if (g.split_k > 1) {
    out.persistent_ctas = g.cost.tiles;  // at most the SMs: one wave
    out.tail_share = 1.0;
    return out;
  }
  const double cta_waves = tiles / (gpu.gemm_cta_tiles * gpu.sms);
  if (cta_waves >= gpu.gemm_persistent_cta_waves) {
    out.tail_share = std::min(1.0, 1 / cta_waves);
  } else {
    // Persistent: CTA i takes tiles i, i + sms, ...; the late ones, launched last, are the last
    // indices and hold floor(waves) tiles of the ceil(waves) the kernel takes. The others run
    // their tiles meanwhile (OpCost::persistent_ctas).
    out.persistent_ctas = std::min<double>(gpu.sms, std::ceil(tiles / gpu.gemm_cta_tiles));
    out.tail_share = cta_waves < 1 ? 1.0 : std::floor(cta_waves) / std::ceil(cta_waves);
  }
  return out;
}

GemmKernel GemmKernelParts(const GpuSpec& gpu, Dtype dtype, double m, double n, double k,
                           double batch) {
  GemmKernel out;
  const GemmEstimate g =
      EstimateGemm(gpu, GemmCeilingTflops(gpu, dtype), m, n, k, DtypeBytes(dtype), 2, batch);
  out.ceiling_tflops = g.main_loop_tflops;
  out.tile_n = g.tile_n;
  out.tiles = g.output_tiles;
  out.units = g.cost.tiles;
  out.stream_k = g.stream_k;
  out.split_k = g.split_k;
  out.unit_us = g.cost.wave_us;
  out.waves = std::ceil(out.units / gpu.sms);
  out.last_wave_fill = (out.units - (out.waves - 1) * gpu.sms) / gpu.sms;
  out.compute_us = out.waves * out.unit_us;
  const double bytes_per_us = gpu.hbm_GBps * gpu.hbm_efficiency * 1e3;
  const double last_epilogue = g.cost.LastEpilogueBytes(gpu.sms, out.waves);
  out.memory_us = (g.cost.hbm_bytes - last_epilogue) / bytes_per_us;
  out.epilogue_us = last_epilogue / bytes_per_us;
  out.fixed_us = g.fixed_us;
  // The body as the engine prices it (OpCost::BodyUs), so that this is the simulated kernel.
  out.us = AloneUs(gpu, g);
  return out;
}

double GemmKernelUs(const GpuSpec& gpu, Dtype dtype, double m, double n, double k, double batch) {
  return GemmKernelParts(gpu, dtype, m, n, k, batch).us;
}

double GemmKernelTflops(const GpuSpec& gpu, Dtype dtype, double m, double n, double k,
                        double batch) {
  return 2 * batch * m * n * k / (GemmKernelUs(gpu, dtype, m, n, k, batch) * 1e6);
}

}  // namespace domino::sim
