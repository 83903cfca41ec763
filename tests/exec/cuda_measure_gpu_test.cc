// Needs a GPU: labelled `gpu`, skips cleanly without one. The measurements of exec/cuda_ops.h
// (GEMM throughput in every element type and in fp8, the soak, launch overhead, events, HBM
// bandwidth) and the emulated collective: its duration, its SMs and its HBM traffic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "tests/exec/cuda_ops_gpu_fixture.h"

namespace domino::exec {
namespace {

#if DOMINO_HAVE_CUDA

using cuda::DType;
using gpu_test::CudaOpsTest;
using gpu_test::CudaOpsTypedTest;
using gpu_test::Matrix;
using gpu_test::Msg;

TEST_P(CudaOpsTypedTest, MeasuresGemmThroughput) {
  double tflops = 0;
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(context_, 1024, 1024, 1024, 2, 3, false, &tflops)), "");
  EXPECT_GT(tflops, 0.0);
  double skinny = 0;  // not square: the operands' shapes follow m, n and k
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(context_, 4096, 64, 256, 1, 3, false, &skinny)), "");
  EXPECT_GT(skinny, 0.0);
  EXPECT_NE(Msg(cuda::MeasureGemmTflops(context_, 0, 8, 8, 1, 1, false, &tflops)), "");
}

// fp8 through cuBLASLt where the GPU has it (compute capability 8.9 or later): a large square
// GEMM runs faster than the 16-bit one; a shape with m off the multiples of 16 is refused.
TEST_F(CudaOpsTest, MeasuresFp8GemmThroughput) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  double fp8 = 0, bf16 = 0;
  // bf16 first, each after 20 warm-up runs: the clocks have ramped up before either is timed.
  cuda::Context* bf16_context = nullptr;
  ASSERT_EQ(Msg(cuda::Create(0, DType::kBf16, &bf16_context)), "");
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(bf16_context, 4096, 4096, 4096, 20, 10, false, &bf16)), "");
  cuda::Destroy(bf16_context);
  const Status e = cuda::MeasureGemmTflops(context_, 4096, 4096, 4096, 20, 10, true, &fp8);
  if (!e.ok() && e.message().find("compute capability") != std::string::npos)
    GTEST_SKIP() << e.message();
  ASSERT_EQ(Msg(e), "");
  EXPECT_GT(fp8, bf16) << "fp8 " << fp8 << " TFLOP/s, bf16 " << bf16;
  EXPECT_NE(Msg(cuda::MeasureGemmTflops(context_, 1000, 1024, 1024, 1, 1, true, &fp8)), "");
  std::vector<double> soak;
  ASSERT_EQ(Msg(cuda::SoakGemm(context_, 1024, 0.2, 0.1, true, &soak)), "");
  EXPECT_EQ(soak.size(), 2u);
}

// Chains of empty kernels, launched one by one and from a graph: each kernel adds some
// microseconds, far from none and from the 100 a stalled launch path would take.
TEST_F(CudaOpsTest, MeasuresLaunchOverhead) {
  cuda::LaunchOverhead launch;
  ASSERT_EQ(Msg(cuda::MeasureLaunchUs(context_, 500, 3, &launch)), "");
  EXPECT_GT(launch.eager_us, 0.0);
  EXPECT_LT(launch.eager_us, 100.0);
  EXPECT_GT(launch.graph_us, 0.0);
  EXPECT_LT(launch.graph_us, 100.0);
  EXPECT_NE(Msg(cuda::MeasureLaunchUs(context_, 0, 3, &launch)), "");
  // The context stays usable: the capture ended.
  ASSERT_EQ(Msg(cuda::MeasureLaunchUs(context_, 10, 1, &launch)), "");
}

TEST_F(CudaOpsTest, SoakGemmReportsEachWindow) {
  std::vector<double> tflops;
  ASSERT_EQ(Msg(cuda::SoakGemm(context_, 1024, 0.3, 0.1, false, &tflops)), "");
  ASSERT_EQ(tflops.size(), 3u);
  for (double t : tflops) EXPECT_GT(t, 0.0);
  EXPECT_NE(Msg(cuda::SoakGemm(context_, 1024, 0.1, 0.3, false, &tflops)), "") << "window > soak";
}

TEST_F(CudaOpsTest, EventsTimeAGemm) {
  ASSERT_EQ(Msg(cuda::CreateEvents(context_, 2)), "");
  const Matrix a = Make(256, 256), b = Make(256, 256), c = Make(256, 256);
  ASSERT_EQ(Msg(cuda::RecordEvent(context_, 0, true)), "");
  ASSERT_EQ(Msg(cuda::Gemm(context_, a.view, false, b.view, false, c.view, false)), "");
  ASSERT_EQ(Msg(cuda::RecordEvent(context_, 1, true)), "");
  ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");
  float ms = -1.0f;
  ASSERT_EQ(Msg(cuda::ElapsedMs(context_, 0, 1, &ms)), "");
  EXPECT_GE(ms, 0.0f);
  EXPECT_NE(Msg(cuda::RecordEvent(context_, 2, false)), "") << "event 2 does not exist";
}

TEST_F(CudaOpsTest, EmulatedCollectiveLastsItsDurationWhenAlone) {
  const double bytes = 64.0 * (1 << 20);
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  ASSERT_EQ(Msg(cuda::CreateEvents(context_, 2)), "");
  auto time_ms = [&](double hbm_bytes, double micros) {
    float ms = -1.0f;
    EXPECT_EQ(Msg(cuda::RecordEvent(context_, 0, true)), "");
    EXPECT_EQ(Msg(cuda::EmulateCollective(context_, 8, hbm_bytes, micros)), "");
    EXPECT_EQ(Msg(cuda::RecordEvent(context_, 1, true)), "");
    EXPECT_EQ(Msg(cuda::Synchronize(context_)), "");
    EXPECT_EQ(Msg(cuda::ElapsedMs(context_, 0, 1, &ms)), "");
    return ms;
  };
  time_ms(bytes, 200.0);  // warm-up
  std::vector<float> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(time_ms(bytes, 200.0));
  std::sort(runs.begin(), runs.end());
  EXPECT_GE(runs[2], 0.9f * 0.2f);
  EXPECT_LE(runs[2], 1.5f * 0.2f);
  const float spin = time_ms(0.0, 100.0);  // no traffic: waits out the duration
  EXPECT_GE(spin, 0.9f * 0.1f);
  EXPECT_LE(spin, 1.5f * 0.1f);
  EXPECT_EQ(Msg(cuda::EmulateCollective(context_, 8, 0.0, 0.0)), "");
  EXPECT_NE(Msg(cuda::EmulateCollective(context_, 8, 1e16, 10.0)), "") << "absurd traffic";
}

// Each block takes an SM of its own (its shared memory leaves no room for a second), so a
// collective of n CTAs holds n SMs, as NCCL's would; %smid says where each block ran.
TEST_F(CudaOpsTest, EmulatedCollectiveHoldsOneSmPerCta) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  const int sms = (*devices)[0].sms;
  const double bytes = 256.0 * (1 << 20);
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  for (int ctas : {1, 16, 32, std::min(64, sms)}) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, ctas, bytes, 0.0, &probe)), "");
    EXPECT_EQ(probe.distinct_sms, ctas) << ctas << " CTAs";
    std::cout << ctas << " CTAs: " << probe.GBps << " GB/s on " << probe.distinct_sms << " SMs\n";
  }
}

// Its traffic is HBM traffic: a transfer far smaller than L2, repeated, still runs no faster than
// a device-to-device copy (streaming loads and stores, each call elsewhere in a scratch buffer
// far larger than L2), and on every SM it streams at a good part of that.
TEST_F(CudaOpsTest, EmulatedCollectiveTrafficIsHbmTraffic) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  const int sms = (*devices)[0].sms;
  double hbm_GBps = 0;
  ASSERT_EQ(Msg(cuda::MeasureHbmGBps(context_, size_t{1} << 30, 5, &hbm_GBps)), "");
  const double bytes = 16.0 * (1 << 20);  // a third of an H100's or H200's L2
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  std::vector<double> GBps;
  for (int i = 0; i < 20; ++i) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, sms, bytes * 16, 0.0, &probe)), "");
    GBps.push_back(probe.GBps);
  }
  std::sort(GBps.begin(), GBps.end());
  std::cout << "emulated collective on " << sms << " SMs: " << GBps[GBps.size() / 2]
            << " GB/s; device-to-device copy " << hbm_GBps << " GB/s\n";
  // L2 hits would read 2-3x HBM's rate; a run's write-back absorbed in L2 can lift one a little.
  EXPECT_LE(GBps[GBps.size() / 2], 1.1 * hbm_GBps) << "faster than HBM: L2 hits";
  EXPECT_LE(GBps.back(), 1.3 * hbm_GBps) << "faster than HBM: L2 hits";
  EXPECT_GE(GBps[GBps.size() / 2], 0.5 * hbm_GBps);
  std::vector<double> small;
  for (int i = 0; i < 20; ++i) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, sms, bytes, 0.0, &probe)), "");
    small.push_back(probe.GBps);
  }
  std::sort(small.begin(), small.end());
  EXPECT_LE(small[small.size() / 2], 1.1 * hbm_GBps) << "a small transfer, repeated: L2 hits";
  EXPECT_LE(small.back(), 1.3 * hbm_GBps) << "a small transfer, repeated: L2 hits";
}

TEST_F(CudaOpsTest, MeasuresHbmBandwidth) {
  double GBps = 0;
  ASSERT_EQ(Msg(cuda::MeasureHbmGBps(context_, size_t{64} << 20, 3, &GBps)), "");
  EXPECT_GT(GBps, 0.0);
}

#endif  // DOMINO_HAVE_CUDA

}  // namespace
}  // namespace domino::exec
