#include "planner/profile.h"

#include <gtest/gtest.h>

#include "planner/lower.h"
#include "sim/cost_model.h"
#include "tests/planner/test_plans.h"

namespace domino {
namespace {

TEST(ProfileTest, RoundTripsAndPricesTheOpsItMeasured) {
  Plan plan = testing_util::MakePlan({});
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  const Op* gemm = nullptr;
  const Op* allreduce = nullptr;
  for (const Op& op : s->ops()) {
    if (!gemm && op.kind == OpKind::kGemm) gemm = &op;
    if (!allreduce && op.collective == CollectiveOp::kAllReduce) allreduce = &op;
  }
  ASSERT_TRUE(gemm && allreduce);
  HardwareProfile profile;
  profile.device = "cpu";
  profile.backend = "cpu";
  profile.contention = false;
  profile.compute_us[OpSignature(*gemm)] = 123.5;
  profile.collectives.push_back({"allreduce", plan.tp, allreduce->bytes / 2, 10});
  profile.collectives.push_back({"allreduce", plan.tp, allreduce->bytes * 2, 40});
  Result<HardwareProfile> back = ParseProfile(ProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->compute_us.at(OpSignature(*gemm)), 123.5);
  EXPECT_FALSE(back->contention);
  EXPECT_EQ(back->gemm_tflops, 0);  // not measured: not written
  profile.gemm_tflops = 812.25;
  profile.hbm_GBps = 4123.5;
  profile.kernel_launch_us = 2.375;
  profile.graph_launch_us = 0.625;
  profile.contention_samples.push_back({OpSignature(*gemm), 16, 350.5, 100.25, 131.5});
  Result<HardwareProfile> gpu = ParseProfile(ProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(gpu.ok()) << gpu.message();
  EXPECT_EQ(gpu->gemm_tflops, 812.25);
  EXPECT_EQ(gpu->hbm_GBps, 4123.5);
  EXPECT_EQ(gpu->kernel_launch_us, 2.375);
  EXPECT_EQ(gpu->graph_launch_us, 0.625);
  ASSERT_EQ(gpu->contention_samples.size(), 1u);
  EXPECT_EQ(gpu->contention_samples[0].op, OpSignature(*gemm));
  EXPECT_EQ(gpu->contention_samples[0].ctas, 16);
  EXPECT_EQ(gpu->contention_samples[0].hbm_GBps, 350.5);
  EXPECT_EQ(gpu->contention_samples[0].alone_us, 100.25);
  EXPECT_EQ(gpu->contention_samples[0].beside_us, 131.5);
  EXPECT_TRUE(gpu->gemm_soak_tflops.empty());
  EXPECT_TRUE(gpu->gemm_samples.empty());
  profile.gemm_soak_tflops = {790.25, 741.5};
  profile.gemm_samples.push_back({802816, 192, 768, 650.75});
  Result<HardwareProfile> soaked = ParseProfile(ProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(soaked.ok()) << soaked.message() << "\n" << ProfileToYaml(profile);
  EXPECT_EQ(soaked->gemm_soak_tflops, (std::vector<double>{790.25, 741.5}));
  ASSERT_EQ(soaked->gemm_samples.size(), 1u);
  EXPECT_EQ(soaked->gemm_samples[0].m, 802816);
  EXPECT_EQ(soaked->gemm_samples[0].n, 192);
  EXPECT_EQ(soaked->gemm_samples[0].k, 768);
  EXPECT_EQ(soaked->gemm_samples[0].tflops, 650.75);
  EXPECT_FALSE(soaked->gemm_samples[0].fp8);
  // The fp8 soak and samples beside, and why fp8 stopped (a message with YAML's specials).
  profile.gemm_soak_fp8_tflops = {1350.5, 1290.25};
  profile.gemm_samples.push_back({1024, 2145, 1024, 410.5, /*fp8=*/true});
  profile.gemm_fp8_error = "measure gemm (fp8) 1024x9216x14336: cuBLASLt has no fp8 kernel: #1";
  Result<HardwareProfile> fp8 = ParseProfile(ProfileToYaml(profile), "p.yaml");
  ASSERT_TRUE(fp8.ok()) << fp8.message() << "\n" << ProfileToYaml(profile);
  EXPECT_EQ(fp8->gemm_soak_tflops, (std::vector<double>{790.25, 741.5}));
  EXPECT_EQ(fp8->gemm_soak_fp8_tflops, (std::vector<double>{1350.5, 1290.25}));
  ASSERT_EQ(fp8->gemm_samples.size(), 2u);
  EXPECT_FALSE(fp8->gemm_samples[0].fp8);
  EXPECT_TRUE(fp8->gemm_samples[1].fp8);
  EXPECT_EQ(fp8->gemm_samples[1].n, 2145);
  EXPECT_EQ(fp8->gemm_fp8_error, profile.gemm_fp8_error);

  sim::CostOptions options;
  options.profile = &*back;
  sim::CostModel model(plan, options);
  sim::OpCost g = model.Cost(*gemm);
  EXPECT_EQ(g.alone_us, 123.5);
  // bytes halfway between the samples in log terms: linear interpolation between 10 and 40 us
  // at bytes / 2 and bytes * 2 gives 10 + 30 * (1 - 0.5) / (2 - 0.5) = 20.
  sim::OpCost ar = model.Cost(*allreduce);
  EXPECT_NEAR(ar.alone_us, 20, 1e-9);
  EXPECT_EQ(ar.ctas, 0);  // no contention on a device that runs one op at a time
  EXPECT_EQ(ar.hbm_bytes, 0);
  // An op the profile lacks keeps the model's price.
  sim::CostModel plain(plan, {});
  for (const Op& op : s->ops()) {
    if (op.kind == OpKind::kElementwise) {
      EXPECT_EQ(model.Cost(op).alone_us, plain.Cost(op).alone_us);
      break;
    }
  }
}

const Op* FirstGemm(const Schedule& s) {
  for (const Op& op : s.ops())
    if (op.kind == OpKind::kGemm) return &op;
  return nullptr;
}

// A GPU profile (contention: true) prices a measured GEMM at its measured time alone, and keeps
// the model's shape of it, scaled, so that it still slows down beside a collective.
TEST(ProfileTest, MeasuredGpuOpsKeepTheirContentionShape) {
  Plan plan = testing_util::MakePlan({});
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  const Op* gemm = FirstGemm(*s);
  ASSERT_TRUE(gemm);
  sim::CostModel plain(plan, {});
  const sim::OpCost modelled = plain.Cost(*gemm);
  HardwareProfile profile;
  profile.device = "NVIDIA H200";
  profile.backend = "cuda";
  profile.compute_us[OpSignature(*gemm)] = 2 * modelled.alone_us;
  sim::CostOptions options;
  options.profile = &profile;
  sim::OpCost g = sim::CostModel(plan, options).Cost(*gemm);
  const sim::DeviceResources device = plain.device();
  EXPECT_DOUBLE_EQ(g.alone_us, 2 * modelled.alone_us);
  EXPECT_EQ(g.tiles, modelled.tiles);
  EXPECT_EQ(g.launch_us, modelled.launch_us);
  // The body doubles plus one launch: 2 (launch + body) = launch + 2 body + launch.
  EXPECT_NEAR(g.launch_us + g.BodyUs(device.sms, device.hbm_GBps), g.alone_us, 1e-9);
  EXPECT_NEAR(g.wave_us,
              modelled.wave_us * (2 * modelled.alone_us - modelled.launch_us) /
                  (modelled.alone_us - modelled.launch_us),
              1e-9);
  // Its bytes scale as its waves do, the last wave's C among them.
  ASSERT_GT(modelled.tile_epilogue_bytes, 0);
  EXPECT_NEAR(g.tile_epilogue_bytes / modelled.tile_epilogue_bytes,
              g.hbm_bytes / modelled.hbm_bytes, 1e-12);
  EXPECT_NEAR(g.hbm_bytes / modelled.hbm_bytes, g.wave_us / modelled.wave_us, 1e-12);
  // With a few SMs and half the bandwidth left beside a collective it is slower than alone.
  EXPECT_GT(g.BodyUs(4, device.hbm_GBps / 2), g.BodyUs(device.sms, device.hbm_GBps));
}

// A calibrated device's measured GEMM throughput and HBM bandwidth replace the spec's for the ops
// the profile lacks: half the throughput prices a GEMM as a GPU with half the main-loop
// efficiency would (the kernel the model picks at that rate, its waves twice as long when it is
// the same one); a measured bandwidth is the engine's.
TEST(ProfileTest, MeasuredPeakAndBandwidthPriceTheOpsItLacks) {
  Plan plan = testing_util::MakePlan({});
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  const Op* gemm = FirstGemm(*s);
  ASSERT_TRUE(gemm);
  const GpuSpec& gpu = plan.cluster.node.gpu;
  HardwareProfile profile;
  profile.device = "NVIDIA H200";
  profile.backend = "cuda";
  profile.gemm_tflops = 0.5 * gpu.peak(plan.precision) * gpu.max_gemm_efficiency;
  profile.hbm_GBps = 1234;
  sim::CostOptions options;
  options.profile = &profile;
  Plan halved = plan;
  halved.cluster.node.gpu.max_gemm_efficiency *= 0.5;
  sim::CostModel calibrated(plan, options), plain(plan, {}), slower(halved, {});
  const sim::OpCost c = calibrated.Cost(*gemm), p = plain.Cost(*gemm), h = slower.Cost(*gemm);
  EXPECT_NEAR(c.wave_us, h.wave_us, 1e-9);
  EXPECT_EQ(c.tiles, h.tiles);
  EXPECT_GT(c.BodyUs(gpu.sms, 1234), 1.5 * p.BodyUs(gpu.sms, gpu.hbm_GBps * gpu.hbm_efficiency));
  EXPECT_EQ(calibrated.device().hbm_GBps, 1234);
}

// Measured launch overheads replace the GPU's: an elementwise op costs the measured eager launch
// plus its HBM time, and the graph's when the plan's kernels run from CUDA graphs.
TEST(ProfileTest, MeasuredLaunchOverheadsReplaceTheGpus) {
  Plan plan = testing_util::MakePlan({});
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  const Op* elementwise = nullptr;
  for (const Op& op : s->ops())
    if (!elementwise && op.kind == OpKind::kElementwise) elementwise = &op;
  ASSERT_TRUE(elementwise);
  const GpuSpec& gpu = plan.cluster.node.gpu;
  HardwareProfile profile;
  profile.device = "NVIDIA H200";
  profile.backend = "cuda";
  profile.kernel_launch_us = 2.5;
  profile.graph_launch_us = 0.75;
  sim::CostOptions options;
  options.profile = &profile;
  const sim::CostModel plain(plan, {}), calibrated(plan, options);
  EXPECT_EQ(plain.Cost(*elementwise).launch_us, gpu.kernel_launch_us);
  EXPECT_EQ(calibrated.Cost(*elementwise).launch_us, 2.5);
  EXPECT_NEAR(plain.Cost(*elementwise).alone_us - calibrated.Cost(*elementwise).alone_us,
              gpu.kernel_launch_us - 2.5, 1e-9);
  options.cuda_graphs = true;
  EXPECT_EQ(sim::CostModel(plan, options).Cost(*elementwise).launch_us, 0.75);
  // Not measured (0): the GPU's figure.
  profile.graph_launch_us = 0;
  EXPECT_EQ(sim::CostModel(plan, options).Cost(*elementwise).launch_us, gpu.graph_launch_us);
}

// Found by fuzz_profile: a signature with a quote did not survive ProfileToYaml.
TEST(ProfileTest, AwkwardTextRoundTrips) {
  HardwareProfile p;
  p.device = "cpu \"quoted\" \\ back";
  p.backend = "cpu";
  p.compute_us["qkv|m=92|n=96|k=64|seqs=1|seq=16|heads=4|kv=4|dim=16|bytes=0"] = 1.5;
  Result<HardwareProfile> back = ParseProfile(ProfileToYaml(p), "p.yaml");
  ASSERT_TRUE(back.ok()) << back.message() << "\n" << ProfileToYaml(p);
  EXPECT_EQ(back->device, p.device);
  EXPECT_EQ(back->compute_us, p.compute_us);
}

// An op signature as OpSignature writes it.
const std::string kQkv = "\"qkv|m=92|n=96|k=64|seqs=1|seq=16|heads=4|kv=4|dim=16|bytes=0\"";

TEST(ProfileTest, BadProfilesNameLineAndKey) {
  for (const char* text :
       {"device: cpu\nbackend: cpu\ncompute:\n  - [qkv]\n",
        "device: cpu\nbackend: cpu\ncollectives:\n  - [broadcast, 2, 10, 1]\n",
        "device: cpu\nbackend: cpu\ncollectives:\n  - [allreduce, 0, 10, 1]\n",
        "device: cpu\nbackend: cpu\ncompute:\n"
        "  - [\"qkv|m=92|n=96|k=64|seqs=1|seq=16|heads=4|kv=4|dim=16|bytes=0\", .nan]\n",
        "device: cpu\nbackend: cpu\ngemm_samples:\n  - [1024, 0, 8, 1]\n",
        "device: cpu\nbackend: cpu\ngemm_samples:\n  - [1024, 1.5, 8, 1]\n",
        "device: cpu\nbackend: cpu\ngemm_samples:\n  - [1024, 8, 1]\n",
        "device: cpu\nbackend: cpu\ngemm_soak_tflops:\n  - -3\n",
        "device: cpu\nbackend: cpu\ngemm_soak_fp8_tflops:\n  - x\n",
        "device: cpu\nbackend: cpu\ngemm_samples:\n  - [16, 8, 16, 1, fp16]\n",
        "device: cpu\nbackend: cpu\ngemm_samples:\n  - [16, 8, 16, 1, fp8, 2]\n",
        "device: cpu\nbackend: cpu\ncontention: true\nkernel_launch_us: -1\n",
        "device: cpu\nbackend: cpu\ncontention: true\ngraph_launch_us: x\n"}) {
    Result<HardwareProfile> p = ParseProfile(text, "p.yaml");
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.message().find("p.yaml:4:"), std::string::npos) << p.message();
  }
  // What no calibrate run writes: a signature of no op, one twice, a day's time and more, and a
  // graph launch dearer than a launch.
  const std::string head = "device: cpu\nbackend: cpu\ncompute:\n";
  for (const auto& [text, rule] : std::initializer_list<std::pair<std::string, const char*>>{
           {head + "  - [\"zzz|m=1|n=1|k=1|seqs=0|seq=0|heads=0|kv=0|dim=0|bytes=0\", 1]\n",
            "p.yaml:4:6: compute: unknown op function 'zzz'"},
           {head + "  - [\"qkv|m=-16|n=1|k=1|seqs=0|seq=0|heads=0|kv=0|dim=0|bytes=0\", 1]\n",
            "p.yaml:4:6: compute: an op signature is"},
           {head + "  - [\"qkv|m=1|n=1|k=1\", 1]\n", "p.yaml:4:6: compute: an op signature is"},
           {head + "  - [" + kQkv + ", 1]\n  - [" + kQkv + ", 2]\n",
            "p.yaml:5:6: compute: 'qkv|m=92|n=96|k=64|seqs=1|seq=16|heads=4|kv=4|dim=16|bytes=0' "
            "is given twice"},
           {head + "  - [" + kQkv + ", 1e300]\n", "p.yaml:4:"},
           {"device: cpu\nbackend: cpu\ncollectives:\n  - [allreduce, 2, 10, 1]\n"
            "  - [allreduce, 2, 10, 3]\n",
            "p.yaml:5:5: collectives: allreduce over 2 ranks of 10 bytes is given twice"},
           {"device: cpu\nbackend: cpu\nkernel_launch_us: 1\ngraph_launch_us: 5\n",
            "p.yaml:4:18: graph_launch_us: must be at most kernel_launch_us (1), got 5"}}) {
    Result<HardwareProfile> p = ParseProfile(text, "p.yaml");
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.message().find(rule), std::string::npos) << p.message();
  }
  Result<HardwareProfile> typo =
      ParseProfile("device: cpu\nbackend: cpu\ncontension: true\n", "p.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.message().find("contention"), std::string::npos) << typo.message();
}

}  // namespace
}  // namespace domino
