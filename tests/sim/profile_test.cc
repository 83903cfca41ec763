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

// Found by fuzz_profile: a signature with a quote did not survive ProfileToYaml.
TEST(ProfileTest, AwkwardTextRoundTrips) {
  HardwareProfile p;
  p.device = "cpu \"quoted\" \\ back";
  p.backend = "cpu";
  p.compute_us["qkv|m=92\"|n=\\|tab\there"] = 1.5;
  Result<HardwareProfile> back = ParseProfile(ProfileToYaml(p), "p.yaml");
  ASSERT_TRUE(back.ok()) << back.message() << "\n" << ProfileToYaml(p);
  EXPECT_EQ(back->device, p.device);
  EXPECT_EQ(back->compute_us, p.compute_us);
}

TEST(ProfileTest, BadProfilesNameLineAndKey) {
  for (const char* text : {"device: cpu\nbackend: cpu\ncompute:\n  - [qkv]\n",
                           "device: cpu\nbackend: cpu\ncollectives:\n  - [broadcast, 2, 10, 1]\n",
                           "device: cpu\nbackend: cpu\ncollectives:\n  - [allreduce, 0, 10, 1]\n",
                           "device: cpu\nbackend: cpu\ncompute:\n  - [qkv, .nan]\n"}) {
    Result<HardwareProfile> p = ParseProfile(text, "p.yaml");
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.message().find("p.yaml:4:"), std::string::npos) << p.message();
  }
  Result<HardwareProfile> typo = ParseProfile("device: cpu\nbackend: cpu\ncontension: true\n", "p.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.message().find("contention"), std::string::npos) << typo.message();
}

}  // namespace
}  // namespace domino
