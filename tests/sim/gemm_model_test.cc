#include "sim/gemm_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace domino::sim {
namespace {

GpuSpec Gpu(const char* name) {
  Result<GpuSpec> gpu = LoadGpu(name);
  EXPECT_TRUE(gpu.ok()) << gpu.message();
  return gpu.ok() ? *gpu : GpuSpec{};
}

double Tflops(const GpuSpec& gpu, Dtype dtype, double m, double n, double k) {
  return 2 * m * n * k / (GemmKernelUs(gpu, dtype, m, n, k) * 1e6);
}

// Hand-computed: 8 x 8 tiles (64 <= 132 SMs: one wave, no stream-K), each 2 * 128 * 128 *
// (1024 + 192) FLOPs at 989e6 * 0.84 / 132 FLOP/us, plus 3 us; memory (6 MiB) is faster.
TEST(GemmModelTest, OneWaveByHand) {
  const GpuSpec h100 = Gpu("h100-sxm");
  const double tile_us = 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132);
  EXPECT_NEAR(GemmKernelUs(h100, Dtype::kBf16, 1024, 1024, 1024), 3 + tile_us, 1e-9);
  // fp8 runs at 0.68 of its own (twice as high) peak.
  const double fp8_tile_us = 2.0 * 128 * 128 * (1024 + 192) / (1979e6 * 0.68 / 132);
  EXPECT_NEAR(GemmKernelUs(h100, Dtype::kFp8, 1024, 1024, 1024), 3 + fp8_tile_us, 1e-9);
}

// A skinny GEMM is bound by its bytes: A and B in 8-bit, C in 16-bit, over 0.88 of 3350 GB/s.
TEST(GemmModelTest, SkinnyShapesAreMemoryBound) {
  const GpuSpec h100 = Gpu("h100-sxm");
  const double m = 802816, n = 192, k = 768;
  const double bytes = (m * k + k * n) * 1 + m * n * 2;
  EXPECT_NEAR(GemmKernelUs(h100, Dtype::kFp8, m, n, k), 3 + bytes / (3350 * 0.88 * 1e3), 1e-6);
}

// The published ceilings (FACTS.md; docs/validation/measurements.yaml, category gemm).
TEST(GemmModelTest, BestShapesReachThePublishedCeilings) {
  // ml-engineering MAMF: H100 SXM bf16 best 794.5 TFLOP/s at 2048 x 2048 x 13312.
  EXPECT_NEAR(Tflops(Gpu("h100-sxm"), Dtype::kBf16, 2048, 2048, 13312), 794.5, 0.03 * 794.5);
  // One H200 measured 769-798 TFLOP/s on 8192^3 bf16.
  const double h200 = Tflops(Gpu("h200-sxm"), Dtype::kBf16, 8192, 8192, 8192);
  EXPECT_GT(h200, 769 * 0.97);
  EXPECT_LT(h200, 798 * 1.03);
  // Never above the main-loop ceiling, never above peak.
  for (const char* name : {"a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"}) {
    const GpuSpec gpu = Gpu(name);
    for (double size : {256.0, 1024.0, 4096.0, 16384.0, 65536.0})
      EXPECT_LE(Tflops(gpu, Dtype::kBf16, size, size, size), GemmCeilingTflops(gpu, Dtype::kBf16))
          << name << " " << size;
  }
}

// Wave quantization: a shape one tile wider than the SMs take in one wave takes two.
TEST(GemmModelTest, APartialWaveCostsAWholeOne) {
  const GpuSpec h100 = Gpu("h100-sxm");
  // 12 x 11 = 132 tiles, then 12 x 12 = 144 (compute-bound: a few MB each).
  const double one = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11, 1024);
  const double two = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11 + 1, 1024);
  EXPECT_NEAR(two - 3, 2 * (one - 3), 1e-9);
  // With a long inner dimension stream-K spreads the extra tiles' k-steps over every SM.
  const double sk_one = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11, 8192);
  const double sk_two = GemmKernelUs(h100, Dtype::kBf16, 128 * 12, 128 * 11 + 1, 8192);
  EXPECT_LT(sk_two - 3, 1.15 * (sk_one - 3));
  EXPECT_GT(sk_two, sk_one);
}

}  // namespace
}  // namespace domino::sim
