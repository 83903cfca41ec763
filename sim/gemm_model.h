#ifndef DOMINO_SIM_GEMM_MODEL_H_
#define DOMINO_SIM_GEMM_MODEL_H_

#include "hardware/hardware_spec.h"
#include "sim/op_cost.h"

namespace domino::sim {

// The GEMM model: how long cuBLAS takes for C[m,n] = A[m,k] B[k,n] on one GPU, in the engine's
// terms (OpCost: work units spread over the SMs it gets, and HBM bytes), so that a GEMM beside a
// collective loses SMs as a real one does.
//
// Output tiles are gemm_tile_m x gemm_tile_n; one SM computes a tile in
//   2 tile_m tile_n (k + gemm_tile_overhead_k) / (tflops_ceiling / sms)
// (its main loop at the ceiling, plus prologue and epilogue worth gemm_tile_overhead_k k-steps).
// Tiles run in waves over the SMs: ceil(tiles / sms) waves, so a narrow slice that leaves SMs idle
// in its last wave pays for it (wave quantization). From k >= gemm_stream_k_min_k with more tiles
// than SMs, cuBLAS balances the work in k-steps of 64 over every SM (stream-K), and only the last
// k-step is quantized. The memory side of the roofline is A and B in `in_bytes` per element, C in
// `out_bytes` over achieved HBM bandwidth, but the last wave's share of C: its tiles write it
// after their main loops, with no wave left to hide it behind, so it follows the roofline
// (OpCost::tile_epilogue_bytes; XLA's H100 table shows it in kernels of one wave and a short k).
// A kernel also takes gemm_fixed_us (ramp up and down) beyond its body; the launch is the
// caller's.
//
// The library picks its kernel per shape (cuBLAS's heuristics, XLA's and Triton's autotuners):
// the model prices each of these and takes the fastest alone, the full tile unsplit on a tie:
//  - tiles gemm_tile_m x gemm_tile_n;
//  - tiles half as wide, their main loop at gemm_half_tile_rate of the full tile's (smaller tiles
//    reuse each operand load less), twice as many of them: fewer idle SMs in a last wave;
//  - with at most half as many tiles as SMs and k >= gemm_stream_k_min_k, each tile split into
//    s = 2 .. floor(sms / tiles) pieces of k (no shorter than 64 k-steps; split-K), each piece
//    paying the tile's prologue and epilogue, the s partial tiles of fp32 written to HBM and read
//    back by the reduction, which takes gemm_split_k_fixed_us more.
//
// Sources for the constants: docs/validation/measurements.yaml, category gemm (MAMF best shapes,
// the per-shape cuBLASLt tables, and XLA's per-shape H100 table, which measures the small
// shapes: 256-4096 in m, n and k, where the kernel choice shows); `domino validate --category
// gemm` checks them.
struct GemmEstimate {
  OpCost cost;          // units as `tiles`, one unit's time on one SM as `wave_us`, hbm_bytes
  double fixed_us = 0;  // gemm_fixed_us (and gemm_split_k_fixed_us when split): add to the launch
  double tile_n = 0;    // the chosen kernel's tile width: gemm_tile_n, or half of it
  double main_loop_tflops = 0;  // its main loop's rate: the ceiling, times gemm_half_tile_rate
  double output_tiles = 0;      // tiles of C; cost.tiles has as many units, or more with stream-K
  bool stream_k = false;        // each tile cut into units of 64 k-steps
  // Each tile cut into this many pieces of k (1: none): at most floor(sms / tiles) and one per
  // 64 k-steps, from k >= gemm_stream_k_min_k.
  int split_k = 1;
};

// `tflops_ceiling`: the dense peak of the GEMM's dtype times the main-loop efficiency
// (GemmCeilingTflops), or a calibrated figure.
// `batch` GEMMs of that shape in one kernel (a strided batch: each its own A, B and C) run
// batch x the tiles.
GemmEstimate EstimateGemm(const GpuSpec& gpu, double tflops_ceiling, double m, double n, double k,
                          double in_bytes, double out_bytes, double batch = 1);

// The peak of `dtype` times max_gemm_efficiency (16-bit) or fp8_gemm_efficiency (fp8).
double GemmCeilingTflops(const GpuSpec& gpu, Dtype dtype);

// How a GEMM fares beside a collective that holds SMs (GpuSpec::gemm_cta_tiles, sim/engine.h).
// A collective launched during it waits for its end (`blocks_comm`): the GEMM's CTAs not yet
// running go first. One launched before it leaves CTAs of it waiting for an SM: they start when
// the collective ends or the first CTAs finish, whichever comes first, and still have their
// share to do (`tail_share` of the body). Below gemm_persistent_cta_waves waves of CTAs of
// gemm_cta_tiles output tiles, cuBLAS runs one persistent CTA per SM (`persistent_ctas`): only
// those beyond the SMs the collective leaves are late, the others run their tiles meanwhile, and
// the late ones hold floor(waves) / ceil(waves) of the body (all of it under one wave). Above,
// the GEMM stalls a CTA's share, 1 / waves, and then runs on the SMs left.
// Short main loops (k < gemm_stream_k_min_k) retire CTAs quickly: no tail. Split-K runs one CTA
// per piece, all in one wave, as the persistent CTAs below one wave do. `g` is the kernel
// EstimateGemm chose; the CTA waves count tiles of gemm_tile_m x gemm_tile_n whichever width it
// chose.
struct GemmContention {
  double tail_share = 0;
  bool blocks_comm = false;
  // Persistent kernels (below gemm_persistent_cta_waves): their CTAs, one per SM at most
  // (OpCost::persistent_ctas); 0 otherwise.
  double persistent_ctas = 0;

  // Writes these into the GEMM's cost (OpCost::tail_share, blocks_comm, persistent_ctas).
  void ApplyTo(OpCost& cost) const {
    cost.tail_share = tail_share;
    cost.blocks_comm = blocks_comm;
    cost.persistent_ctas = persistent_ctas;
  }
};
GemmContention GemmContentionOf(const GpuSpec& gpu, const GemmEstimate& g, double m, double n,
                                double k);

// One kernel alone on the whole GPU, as a benchmark that launches GEMMs back to back measures it
// (no launch overhead): inputs of `dtype`, a 16-bit output. Its parts say where the time goes:
// `compute_us` is ceil(units / sms) waves of `unit_us`, `memory_us` the HBM traffic but the last
// wave's share of C, the body the larger of the two and then `epilogue_us`, the last wave's C
// written after its main loops (OpCost::tile_epilogue_bytes), and the kernel `fixed_us` more.
struct GemmKernel {
  double tile_n = 0;      // the chosen kernel's tile width (EstimateGemm)
  double tiles = 0;       // output tiles of gemm_tile_m x tile_n (of every GEMM of a batch)
  bool stream_k = false;  // balanced in k-steps of 64 over every SM (units = tiles x steps)
  int split_k = 1;        // pieces of k per tile (units = tiles x split_k); 1: none
  double units = 0, unit_us = 0;
  double waves = 0;           // ceil(units / sms)
  double last_wave_fill = 0;  // share of the SMs the last wave keeps busy
  double ceiling_tflops = 0;  // the main loop's rate (GemmCeilingTflops, for half tiles times
                              // gemm_half_tile_rate)
  double compute_us = 0, memory_us = 0, epilogue_us = 0, fixed_us = 0;
  double us = 0;  // fixed_us + max(compute_us, memory_us) + epilogue_us
};
// `batch`: a strided batch of that many GEMMs in one kernel (EstimateGemm).
GemmKernel GemmKernelParts(const GpuSpec& gpu, Dtype dtype, double m, double n, double k,
                           double batch = 1);
// GemmKernelParts(...).us.
double GemmKernelUs(const GpuSpec& gpu, Dtype dtype, double m, double n, double k,
                    double batch = 1);
// 2 batch m n k over GemmKernelUs: the TFLOP/s a GEMM benchmark would read.
double GemmKernelTflops(const GpuSpec& gpu, Dtype dtype, double m, double n, double k,
                        double batch = 1);

}  // namespace domino::sim

#endif  // DOMINO_SIM_GEMM_MODEL_H_
