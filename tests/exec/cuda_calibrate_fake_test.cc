// `domino calibrate` on the CUDA backend of the fake GPU (fake_cuda_ops.cc): every distinct op
// timed alone and beside an emulated collective, the device's HBM and launch overheads, the soak
// and the GEMM shapes (16-bit and fp8), random operands and batched collectives. The fake times
// ops by fixed rules, so the expected times are exact.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "exec/calibrate.h"
#include "exec/communicator.h"
#include "planner/lower.h"
#include "tests/exec/fake_cuda_ops.h"
#include "tests/exec/fake_gpu_test_util.h"

namespace domino::exec {
namespace {

using fake_test::TinyPlan;
using fake_test::TwoRankStandIn;

// Calibration times each distinct op alone with events, measures the device, and times the
// largest GEMM and memory-bound op beside an emulated collective (the fake's streams do not
// contend, so beside equals alone here).
TEST(CudaCalibrationFakeTest, CalibrationTimesEveryDistinctOp) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  CalibrateOptions options;
  options.repeats = 3;
  options.beside = EmulatedCollective{16, 1e6, 100};
  std::vector<size_t> beats;  // the watchdog's
  options.measured = [&beats](size_t n) { beats.push_back(n); };
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(profile->backend, "cuda");
  EXPECT_EQ(profile->device, "fake GPU");
  EXPECT_TRUE(profile->contention);
  EXPECT_TRUE(profile->collectives.empty());  // one rank: no collectives to time
  EXPECT_EQ(profile->gemm_tflops, fake::kPeakTflops);
  EXPECT_EQ(profile->hbm_GBps, fake::kHbmGBps);
  EXPECT_EQ(profile->kernel_launch_us, fake::kLaunchUs);
  // Random values fill the tensors: none but the token ids is computed and uploaded first.
  EXPECT_EQ(fake::Counters().uploads, fake::Counters().f32_uploads);
  EXPECT_EQ(profile->graph_launch_us, fake::kGraphLaunchUs);
  EXPECT_TRUE(profile->gemm_soak_tflops.empty());  // no soak asked for
  EXPECT_TRUE(profile->gemm_samples.empty());
  // The device's peak: 8192^3, 10 warm-up runs, the mean of 20.
  ASSERT_EQ(fake::Counters().gemm_shapes.size(), 1u);
  EXPECT_EQ(fake::Counters().gemm_shapes[0], (std::array<int64_t, 6>{8192, 8192, 8192, 10, 20, 0}));
  EXPECT_EQ(fake::Counters().soaks + fake::Counters().fp8_soaks, 0);
  // The layer stack's ops and the model's ends' (embedding, final norm, LM head, loss), timed
  // on a second runner: one layer with both ends.
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(ends.ok());
  std::set<std::string> signatures;
  for (const Schedule* schedule : {&*s, &*ends}) {
    for (const Op& op : schedule->ops()) {
      if (op.kind == OpKind::kCollective) continue;
      signatures.insert(OpSignature(op));
      ASSERT_TRUE(profile->compute_us.count(OpSignature(op))) << OpSignature(op);
      if (op.kind == OpKind::kGemm) {
        EXPECT_NEAR(profile->compute_us.at(OpSignature(op)),
                    fake::kLaunchUs + op.flops * fake::kUsPerFlop, 1e-3);
      }
    }
  }
  EXPECT_EQ(profile->compute_us.size(), signatures.size());
  // The layer stack's runner is gone before the ends' is made.
  EXPECT_EQ(fake::Counters().most_live_contexts, 1);
  EXPECT_EQ(fake::Counters().live_contexts, 0);
  for (const char* end : {"embed|", "lm_head|", "loss|", "loss.grad|"})
    EXPECT_TRUE(std::any_of(signatures.begin(), signatures.end(), [&](const std::string& sig) {
      return sig.rfind(end, 0) == 0;
    })) << end;
  ASSERT_EQ(profile->contention_samples.size(), 2u);
  for (const auto& c : profile->contention_samples) {
    EXPECT_EQ(c.ctas, 16);
    EXPECT_NEAR(c.hbm_GBps, 1e6 / 100 * 1e-3, 1e-9);
    EXPECT_NEAR(c.beside_us, c.alone_us, 1e-3);
  }
  // One beat per measurement: each distinct op, the GEMM peak, HBM, the launch overheads and the
  // two contention samples.
  ASSERT_EQ(beats.size(), signatures.size() + 5);
  for (size_t i = 0; i < beats.size(); ++i) EXPECT_EQ(beats[i], i + 1);
}

// A soak runs before anything is timed and keeps each second's TFLOP/s; GEMM shapes are timed
// as mamf-finder times them (half as many warm-up runs as timed ones, 100 timed runs for the
// short shapes, about a quarter of a second's worth for the long ones, never under 10).
TEST(CudaCalibrationFakeTest, CalibrationSoaksAndTimesGemmShapes) {
  const Plan plan = TinyPlan(1, OverlapScope::kNone);
  CalibrateOptions options;
  options.repeats = 1;
  options.soak_seconds = 3.5;  // three whole windows of one second
  options.gemm_shapes = {
      {1024, 1024, 1024}, {16384, 16384, 16384}, {802816, 192, 768}, {32768, 32768, 32768}};
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(
      profile->gemm_soak_tflops,
      (std::vector<double>{fake::kPeakTflops, fake::kPeakTflops * 0.99, fake::kPeakTflops * 0.98}));
  ASSERT_EQ(profile->gemm_samples.size(), 4u);
  EXPECT_EQ(profile->gemm_samples[1].m, 16384);
  EXPECT_EQ(profile->gemm_samples[2].n, 192);
  EXPECT_EQ(profile->gemm_samples[2].tflops, fake::kPeakTflops);
  // At 400 TFLOP/s 1024^3 takes 5.4 us: 100 runs; 16384^3 22 ms: 11 (a quarter of a second);
  // 802816 x 192 x 768 0.59 ms: 100; 32768^3 176 ms: the floor of 10.
  const auto& calls = fake::Counters().gemm_shapes;
  ASSERT_EQ(calls.size(), 5u);  // the four shapes, then the peak
  EXPECT_EQ(calls[0], (std::array<int64_t, 6>{1024, 1024, 1024, 50, 100, 0}));
  EXPECT_EQ(calls[1], (std::array<int64_t, 6>{16384, 16384, 16384, 5, 11, 0}));
  EXPECT_EQ(calls[2], (std::array<int64_t, 6>{802816, 192, 768, 50, 100, 0}));
  EXPECT_EQ(calls[3], (std::array<int64_t, 6>{32768, 32768, 32768, 5, 10, 0}));
  EXPECT_EQ(fake::Counters().soaks, 1);
  EXPECT_EQ(fake::Counters().fp8_soaks, 0);  // not asked for
  EXPECT_TRUE(profile->gemm_soak_fp8_tflops.empty());
}

// --fp8-gemms: the soak and the shapes again in fp8, after the 16-bit ones; a shape whose m or k
// is off the multiples of 16 stays 16-bit only, one without an fp8 kernel is skipped (and said)
// while the later ones are measured; each is told as it is measured.
TEST(CudaCalibrationFakeTest, CalibrationRepeatsTheGemmsInFp8) {
  const Plan plan = TinyPlan(1, OverlapScope::kNone);
  CalibrateOptions options;
  options.repeats = 1;
  options.soak_seconds = 2;
  options.fp8_gemms = true;
  options.gemm_shapes = {{1024, 1024, 1024},
                         {1000, 1024, 1024},
                         {1024, fake::kNoFp8KernelN, 1024},
                         {1024, 2145, 1024}};
  std::vector<std::string> told;
  options.progress = [&](const std::string& line) { told.push_back(line); };
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(fake::Counters().soaks, 1);
  EXPECT_EQ(fake::Counters().fp8_soaks, 1);
  EXPECT_EQ(profile->gemm_soak_fp8_tflops,
            (std::vector<double>{2 * fake::kPeakTflops, 2 * fake::kPeakTflops * 0.99}));
  EXPECT_EQ(profile->gemm_fp8_error,
            "1024x7x1024: CUDA backend: cuBLASLt has no fp8 kernel for this shape");
  // Four 16-bit, two fp8 (1000 is not 16 k; n = 7 has no fp8 kernel).
  ASSERT_EQ(profile->gemm_samples.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(profile->gemm_samples[i].fp8) << i;
  EXPECT_TRUE(profile->gemm_samples[4].fp8);
  EXPECT_EQ(profile->gemm_samples[4].m, 1024);
  EXPECT_EQ(profile->gemm_samples[5].n, 2145);
  EXPECT_EQ(profile->gemm_samples[5].tflops, 2 * fake::kPeakTflops);
  // The soaks, the shapes, the launch overheads, the model's ends.
  ASSERT_EQ(told.size(), 2u + 7u + 1u + 1u);
  EXPECT_EQ(told[1],
            "soak fp8 8192^3: 1000.0 TFLOP/s in the first second, 990.0 in the last "
            "(-1.0%)");
  EXPECT_EQ(told[7],
            "gemm 1024x7x1024 fp8: not measured (CUDA backend: cuBLASLt has no fp8 kernel for this "
            "shape)");
  EXPECT_EQ(told[8], "gemm 1024x2145x1024 fp8: 1000.0 TFLOP/s");
  EXPECT_EQ(told[9],
            "kernel launch: 2.00 us per kernel launched one by one, 0.50 from a CUDA graph");
  Result<Schedule> layers = Lower(plan);
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(layers.ok() && ends.ok());
  std::set<std::string> stack, ends_only;
  for (const Op& op : layers->ops()) stack.insert(OpSignature(op));
  for (const Op& op : ends->ops())
    if (op.kind != OpKind::kCollective && !stack.count(OpSignature(op)))
      ends_only.insert(OpSignature(op));
  EXPECT_EQ(told[10], "the model's ends (embedding, final norm, LM head, loss): " +
                          std::to_string(ends_only.size()) + " more compute ops timed");
}

// Calibration times ops on random operands (every tensor filled before timing) and collectives
// as nccl-tests does, in batches on the GPU.
TEST(CudaCalibrationFakeTest, CalibrationFillsRandomOperandsAndBatchesCollectives) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  TwoRankStandIn host;
  CalibrateOptions options;
  options.repeats = 3;
  Result<HardwareProfile> profile = CalibrateCuda(plan, host, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  // Each collective of the layer stack and of the model's ends (the loss's and the embedding's
  // all-reduces) once, distinct by kind and size; every tensor of both filled with random values
  // but the token ids and labels.
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(ends.ok());
  EXPECT_GE(fake::Counters().random_fills,
            static_cast<int>(s->tensors().size() + ends->tensors().size()) - 2);
  std::set<std::pair<std::string, double>> distinct;
  for (const Schedule* schedule : {&*s, &*ends})
    for (const Op& op : schedule->ops())
      if (op.kind == OpKind::kCollective)
        distinct.emplace(CollectiveKindName(op.collective), op.bytes);
  std::set<std::pair<std::string, double>> timed;
  for (const auto& c : profile->collectives) timed.emplace(c.kind, c.bytes);
  EXPECT_EQ(timed, distinct);
  EXPECT_EQ(profile->collectives.size(), distinct.size());
  for (const auto& c : profile->collectives) EXPECT_NEAR(c.us, fake::kNcclUs, 1e-3) << c.kind;
}

}  // namespace
}  // namespace domino::exec
