#include "sim/gemm_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/sim/catalog_gpu.h"

namespace domino::sim {
namespace {

using testing_util::CatalogGpu;

// The kernel beside a collective, as the cost model prices it: the one EstimateGemm picks at the
// 16-bit ceiling.
GemmContention ContentionOf(const GpuSpec& gpu, double m, double n, double k) {
  const GemmEstimate g = EstimateGemm(gpu, GemmCeilingTflops(gpu, Dtype::kBf16), m, n, k, 2, 2);
  return GemmContentionOf(gpu, g, m, n, k);
}

// Hand-computed: 12 x 11 tiles of 128 x 128 fill the 132 SMs in one wave (no stream-K), each
// 2 * 128 * 128 * (1024 + 192) FLOPs at 989e6 * 0.84 / 132 FLOP/us (an H100's 16-bit main loop
// at full clock), plus 4 us; memory (6.0 MB) is faster. In one wave every tile writes its part of C
// (4.3 MB in 16 bits) after its main loop, with nothing left to hide it behind. Tiles half as
// wide would take two waves at 0.7 of the rate: the full tile it is.
TEST(GemmModelTest, OneWaveByHand) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const double tile_us = 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132);
  const double c_us = 1536.0 * 1408 * 2 / (3350 * 0.88 * 1e3);
  const GemmKernel bf16 = GemmKernelParts(h100, Dtype::kBf16, 1536, 1408, 1024);
  EXPECT_EQ(bf16.tile_n, 128);
  EXPECT_EQ(bf16.tiles, 132);
  EXPECT_NEAR(bf16.us, 4 + tile_us + c_us, 1e-9);
  // fp8 runs at 0.68 of its own (twice as high) peak; its output is 16-bit too.
  const double fp8_tile_us = 2.0 * 128 * 128 * (1024 + 192) / (1979e6 * 0.68 / 132);
  EXPECT_NEAR(GemmKernelUs(h100, Dtype::kFp8, 1536, 1408, 1024), 4 + fp8_tile_us + c_us, 1e-9);
}

// 1024^3 is 8 x 8 = 64 tiles of 128 x 128: one wave that leaves 68 of the 132 SMs idle. Tiles
// half as wide are 128, one wave too, each half the FLOPs at 0.7 of the rate: 0.71 of the time,
// which the library takes (XLA's H100 table: 9.09 us, 3% faster).
TEST(GemmModelTest, HalfTilesFillTheSMsAFullTileLeavesIdle) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const GemmKernel k = GemmKernelParts(h100, Dtype::kBf16, 1024, 1024, 1024);
  EXPECT_EQ(k.tile_n, 64);
  EXPECT_EQ(k.tiles, 128);
  EXPECT_EQ(k.waves, 1);
  EXPECT_NEAR(k.ceiling_tflops, 989 * 0.84 * 0.7, 1e-9);
  const double c_us = 1024.0 * 1024 * 2 / (3350 * 0.88 * 1e3);
  const double half_us = 4 + 2.0 * 128 * 64 * (1024 + 192) / (989e6 * 0.84 * 0.7 / 132) + c_us;
  const double full_us = 4 + 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132) + c_us;
  EXPECT_NEAR(k.us, half_us, 1e-9);
  EXPECT_LT(k.us, full_us);
  EXPECT_NEAR(k.us, 9.09, 0.35);
  // A GPU file with gemm_half_tile_rate 0 has the full tile alone.
  GpuSpec full_only = h100;
  full_only.gemm_half_tile_rate = 0;
  EXPECT_NEAR(GemmKernelUs(full_only, Dtype::kBf16, 1024, 1024, 1024), full_us, 1e-9);
}

// A skinny GEMM is bound by its bytes: A and B in 8-bit, C in 16-bit, over 0.88 of 3350 GB/s.
// Every tile width moves the same bytes: the full tile keeps the tie.
TEST(GemmModelTest, SkinnyShapesAreMemoryBound) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const double m = 802816, n = 192, k = 768;
  const double bytes = (m * k + k * n) * 1 + m * n * 2;
  const GemmKernel skinny = GemmKernelParts(h100, Dtype::kFp8, m, n, k);
  EXPECT_NEAR(skinny.us, 4 + bytes / (3350 * 0.88 * 1e3), 1e-6);
  EXPECT_EQ(skinny.tile_n, 128);
}

// The published ceilings (FACTS.md; docs/validation/measurements.yaml, category gemm).
TEST(GemmModelTest, BestShapesReachThePublishedCeilings) {
  // Every GPU's 16-bit main loop at full clock is 0.84 of its peak (a training step's power limit
  // is priced apart: sim/predict.h PowerClock).
  for (const char* name : {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "gh200", "b200"}) {
    const GpuSpec gpu = CatalogGpu(name);
    EXPECT_NEAR(GemmCeilingTflops(gpu, Dtype::kBf16), 0.84 * gpu.peak(Dtype::kBf16), 1e-9) << name;
  }
  // XLA's H100 table: 4096^3 at 783.3 TFLOP/s, a fixed shape the model meets within 2%.
  const double xla = GemmKernelTflops(CatalogGpu("h100-sxm"), Dtype::kBf16, 4096, 4096, 4096);
  EXPECT_GT(xla, 783.3 * 0.98);
  EXPECT_LT(xla, 783.3);
  // ml-engineering MAMF: H100 SXM bf16 best 794.5 TFLOP/s at 2048 x 2048 x 13312, within 1%.
  const double mamf = GemmKernelTflops(CatalogGpu("h100-sxm"), Dtype::kBf16, 2048, 2048, 13312);
  EXPECT_NEAR(mamf, 794.5, 794.5 * 0.01);
  // One H200 measured 769-798 TFLOP/s on 8192^3 bf16 in a short benchmark: the model sits at
  // most 3.5% above its mean.
  const double h200 = GemmKernelTflops(CatalogGpu("h200-sxm"), Dtype::kBf16, 8192, 8192, 8192);
  EXPECT_GT(h200, 769);
  EXPECT_LT(h200, 783.5 * 1.035);
  // Never above the main-loop ceiling, never above peak.
  for (const char* name : {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"}) {
    const GpuSpec gpu = CatalogGpu(name);
    for (double size : {256.0, 1024.0, 4096.0, 16384.0, 65536.0})
      EXPECT_LE(GemmKernelTflops(gpu, Dtype::kBf16, size, size, size),
                GemmCeilingTflops(gpu, Dtype::kBf16))
          << name << " " << size;
  }
}

// The kernel's parts add up to its time: 12 x 12 = 144 tiles on 132 SMs are two waves, the last
// 12/132 full; with k = 8192 stream-K cuts each tile in 128 units of 64 k-steps (18,432 units,
// 140 waves, the last 84/132 full).
TEST(GemmModelTest, PartsSayWhereTheTimeGoes) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const GemmKernel two = GemmKernelParts(h100, Dtype::kBf16, 128 * 12, 128 * 12, 1024);
  EXPECT_EQ(two.tiles, 144);
  EXPECT_FALSE(two.stream_k);
  EXPECT_EQ(two.waves, 2);
  EXPECT_NEAR(two.last_wave_fill, 12.0 / 132, 1e-12);
  EXPECT_EQ(two.tile_n, 128);  // half as wide: 288 tiles, three waves at 0.7 of the rate
  EXPECT_NEAR(two.ceiling_tflops, 989 * 0.84, 1e-9);
  const double tile_us = 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132);
  EXPECT_NEAR(two.compute_us, 2 * tile_us, 1e-9);
  // The last wave's 12 tiles write their C after their main loops: 12/144 of it.
  const double bytes_per_us = 3350 * 0.88 * 1e3;
  EXPECT_NEAR(two.epilogue_us, 1536.0 * 1536 * 2 * 12 / 144 / bytes_per_us, 1e-9);
  EXPECT_NEAR(two.memory_us + two.epilogue_us,
              (2.0 * 1536 * 1024 * 2 + 1536.0 * 1536 * 2) / bytes_per_us, 1e-9);
  EXPECT_EQ(two.fixed_us, 4);
  EXPECT_NEAR(two.us, 4 + two.compute_us + two.epilogue_us, 1e-9);
  const GemmKernel sk = GemmKernelParts(h100, Dtype::kBf16, 128 * 12, 128 * 12, 8192);
  EXPECT_TRUE(sk.stream_k);
  EXPECT_EQ(sk.units, 144 * 128);
  EXPECT_EQ(sk.waves, 140);
  EXPECT_NEAR(sk.last_wave_fill, (144.0 * 128 - 139 * 132) / 132, 1e-12);
  // Skinny: the operands' bytes bound it.
  const GemmKernel skinny = GemmKernelParts(h100, Dtype::kFp8, 802816, 192, 768);
  EXPECT_GT(skinny.memory_us, skinny.compute_us);
  EXPECT_NEAR(skinny.us, 4 + skinny.memory_us + skinny.epilogue_us, 1e-9);
}

// Wave quantization: a shape one tile wider than the SMs take in one wave takes two.
TEST(GemmModelTest, APartialWaveCostsAWholeOne) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  // 12 x 11 = 132 tiles, then 12 x 12 = 144 (compute-bound: a few MB each).
  const GemmKernel one = GemmKernelParts(h100, Dtype::kBf16, 128 * 12, 128 * 11, 1024);
  const GemmKernel two = GemmKernelParts(h100, Dtype::kBf16, 128 * 12, 128 * 11 + 1, 1024);
  EXPECT_NEAR(two.compute_us, 2 * one.compute_us, 1e-9);
  // One wave writes all of its C after its main loops, two only their last wave's 12 tiles.
  EXPECT_NEAR(two.us - two.epilogue_us, one.us - one.epilogue_us + one.compute_us, 1e-9);
  EXPECT_GT(two.us, one.us);
  // With a long inner dimension stream-K spreads the extra tiles' k-steps over every SM.
  const double sk_one = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11, 8192);
  const double sk_two = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11 + 1, 8192);
  EXPECT_LT(sk_two - 4, 1.15 * (sk_one - 4));
  EXPECT_GT(sk_two, sk_one);
}

// Split-K: 256 x 256 x 4096 is 2 x 2 = 4 tiles of 128 x 128, or 2 x 4 = 8 half as wide, on 132
// SMs. Each piece of a split pays the tile's overhead (192 k-steps), the partials' fp32 traffic
// (2 x 256 x 256 x 4 bytes a piece) and 1.5 us of reduction. The fastest: 8 half tiles in 8
// pieces, 64 CTAs, the partials' bytes now the bound (7 pieces: compute 2.9 us against 2.7 of
// memory; 9: 2.4 against 3.1).
TEST(GemmModelTest, FewTilesOverALongKSplitK) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const double bytes_per_us = 3350 * 0.88 * 1e3;
  const GemmKernel sk = GemmKernelParts(h100, Dtype::kBf16, 256, 256, 4096);
  EXPECT_EQ(sk.tile_n, 64);
  EXPECT_EQ(sk.split_k, 8);
  EXPECT_FALSE(sk.stream_k);
  EXPECT_EQ(sk.units, 8 * 8);
  EXPECT_EQ(sk.waves, 1);
  const double piece_us = 2.0 * 128 * 64 * (4096.0 / 8 + 192) / (989e6 * 0.84 * 0.7 / 132);
  EXPECT_NEAR(sk.compute_us, piece_us, 1e-9);
  // A and B, C (written after the one wave's main loops) and the partials.
  const double operands = 2.0 * 256 * 4096 * 2 + 256.0 * 256 * 2;
  const double bytes = operands + 2.0 * 8 * 256 * 256 * 4;
  EXPECT_NEAR(sk.epilogue_us, 256.0 * 256 * 2 / bytes_per_us, 1e-9);
  EXPECT_NEAR(sk.memory_us + sk.epilogue_us, bytes / bytes_per_us, 1e-9);
  EXPECT_EQ(sk.fixed_us, 4 + 1.5);
  EXPECT_NEAR(sk.us, 5.5 + std::max(piece_us, sk.memory_us) + sk.epilogue_us, 1e-9);
  // Faster than the full tile in floor(132 / 4) = 33 pieces (the partials, 17 MB, bound it: 12.8
  // us) and than one SM per full tile (26 us); XLA's table measured 6.4 us.
  const double full_33_us = 5.5 + (operands + 2.0 * 33 * 256 * 256 * 4) / bytes_per_us;
  const double one_sm_per_tile_us = 4 + 2.0 * 128 * 128 * (4096 + 192) / (989e6 * 0.84 / 132);
  EXPECT_LT(sk.us, full_33_us);
  EXPECT_LT(sk.us, 0.5 * one_sm_per_tile_us);
  EXPECT_GT(sk.us, 6.4);
  // No split where a short k leaves nothing to balance (k < gemm_stream_k_min_k), where the tiles
  // fill more than half the SMs (80 tiles, or 160 half as wide, which stream-K balances), or
  // where stream-K balances more tiles than SMs.
  EXPECT_EQ(GemmKernelParts(h100, Dtype::kBf16, 256, 256, 1024).split_k, 1);
  EXPECT_EQ(GemmKernelParts(h100, Dtype::kBf16, 1024, 1280, 4096).split_k, 1);
  EXPECT_EQ(GemmKernelParts(h100, Dtype::kBf16, 2048, 2048, 4096).split_k, 1);
  const GemmKernel two = GemmKernelParts(h100, Dtype::kBf16, 1024, 1024, 4096);  // 64 tiles
  EXPECT_EQ(two.split_k, 2);
  EXPECT_EQ(two.tile_n, 128);
  // Beside a collective, the pieces are the CTAs: one wave, every one of them late if held.
  const GemmContention c = ContentionOf(h100, 256, 256, 4096);
  EXPECT_EQ(c.persistent_ctas, 8 * 8);
  EXPECT_EQ(c.tail_share, 1.0);
}

// A strided batch runs its GEMMs' tiles together: 4 x 256 x 256 x 4096 is 32 tiles half as
// wide, split in 3 pieces of k (the fastest: more would make the partials the bound); each GEMM
// reads its own A and B and writes its own C.
TEST(GemmModelTest, ABatchRunsItsGemmsTilesTogether) {
  const GpuSpec h100 = CatalogGpu("h100-sxm");
  const GemmKernel batch = GemmKernelParts(h100, Dtype::kBf16, 256, 256, 4096, 4);
  EXPECT_EQ(batch.tile_n, 64);
  EXPECT_EQ(batch.tiles, 32);
  EXPECT_EQ(batch.split_k, 3);
  EXPECT_EQ(batch.units, 32 * 3);
  const double bytes = 4 * (2.0 * 256 * 4096 * 2 + 256.0 * 256 * 2) + 2.0 * 3 * 4 * 256 * 256 * 4;
  EXPECT_NEAR(batch.memory_us + batch.epilogue_us, bytes / (3350 * 0.88 * 1e3), 1e-9);
  EXPECT_NEAR(batch.epilogue_us, 4 * 256.0 * 256 * 2 / (3350 * 0.88 * 1e3), 1e-9);
  EXPECT_NEAR(GemmKernelTflops(h100, Dtype::kBf16, 256, 256, 4096, 4),
              2.0 * 4 * 256 * 256 * 4096 / (batch.us * 1e6), 1e-9);
  // A batch of one is the GEMM; a batch of tiles that fills the SMs runs as one large GEMM would.
  EXPECT_EQ(GemmKernelUs(h100, Dtype::kBf16, 1024, 1024, 1024, 1),
            GemmKernelUs(h100, Dtype::kBf16, 1024, 1024, 1024));
  EXPECT_NEAR(GemmKernelParts(h100, Dtype::kBf16, 2048, 2048, 1024, 2).compute_us,
              GemmKernelParts(h100, Dtype::kBf16, 4096, 2048, 1024).compute_us, 1e-9);
}

// Beside a collective (GemmContentionOf): an H200 runs CTAs of 2 output tiles, one persistent
// CTA per SM below 3 waves of them.
TEST(GemmModelTest, ContentionTailsByHand) {
  const GpuSpec h200 = CatalogGpu("h200-sxm");
  // 32 x 20 = 640 tiles: 640 / (2 x 132) = 2.42 waves of CTAs, persistent: the late CTAs hold
  // 2 tiles of the 3 the kernel takes.
  GemmContention c = ContentionOf(h200, 4096, 2560, 5120);
  EXPECT_NEAR(c.tail_share, 2.0 / 3, 1e-12);
  EXPECT_TRUE(c.blocks_comm);
  // 16 x 16 = 256 tiles: 0.97 waves, the late CTAs' one tile is the whole body.
  EXPECT_EQ(ContentionOf(h200, 2048, 2048, 13312).tail_share, 1.0);
  // 32 x 32 = 1024 tiles: 3.88 waves, one CTA's share of the body.
  c = ContentionOf(h200, 4096, 4096, 4096);
  EXPECT_NEAR(c.tail_share, 2.0 * 132 / 1024, 1e-12);
  EXPECT_TRUE(c.blocks_comm);
  // A short main loop (k < gemm_stream_k_min_k) retires its CTAs quickly: no tail, but a
  // collective launched during it still waits behind its CTAs.
  c = ContentionOf(h200, 4096, 2560, 1024);
  EXPECT_EQ(c.tail_share, 0.0);
  EXPECT_TRUE(c.blocks_comm);
  // A GPU without the keys (A100: not measured) keeps the SMs-only model.
  c = ContentionOf(CatalogGpu("a100-sxm-80gb"), 4096, 2560, 5120);
  EXPECT_EQ(c.tail_share, 0.0);
  EXPECT_FALSE(c.blocks_comm);
}

}  // namespace
}  // namespace domino::sim
