#include "tools/plan_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace domino::cli {
namespace {

// Parses `args` as a command's plan flags would be and builds the plan.
Result<Plan> Build(std::vector<std::string> args) {
  CLI::App app;
  PlanFlags flags;
  AddPlanFlags(&app, &flags, /*with_plan_file=*/true);
  args.insert(args.begin(), "domino");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return BuildPlan(flags);
}

// --cp sets context parallelism; an unset tp spans the GPUs left by cp, pp and dp.
TEST(PlanFlagsTest, CpTakesItsShareOfTheGpus) {
  Result<Plan> plan = Build({"--cp", "2", "--dp", "2", "--seq-len", "4096"});
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->cp, 2);
  EXPECT_EQ(plan->tp, 8);  // 32 GPUs / (cp 2 x dp 2)
  Result<Plan> odd = Build({"--cp", "4", "--tp", "8", "--seq-len", "1004"});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("parallel.cp: context parallelism cuts each sequence into 2*cp = 8"),
            std::string::npos)
      << odd.message();
}

// The defaults do not depend on which other flags are given: naming the default model or
// cluster changes nothing, and another model or cluster changes only itself and tp.
TEST(PlanFlagsTest, DefaultsAreTheSameWhateverSubsetIsGiven) {
  Result<Plan> none = Build({});
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_EQ(none->model_ref, "gpt3-13b");
  EXPECT_EQ(none->cluster_ref, "dgx-h100:4");
  EXPECT_EQ(none->seq_len, 1024);
  EXPECT_EQ(none->micro_batch, 16);
  EXPECT_EQ(none->global_batch, 16);
  EXPECT_EQ(none->tp, 32);
  EXPECT_FALSE(none->sequence_parallel);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--model", "gpt3-13b"},
                                             {"--cluster", "dgx-h100:4"},
                                             {"--model", "gpt3-13b", "--cluster", "dgx-h100:4"},
                                             {"--stack", "megatron-core"},
                                             {"--precision", "bf16"}}) {
    Result<Plan> same = Build(args);
    ASSERT_TRUE(same.ok()) << args[0] << ": " << same.message();
    EXPECT_EQ(PlanToYaml(*same), PlanToYaml(*none)) << args[0];
  }
  Result<Plan> other = Build({"--model", "gpt3-2.7b", "--cluster", "dgx-h100:1"});
  ASSERT_TRUE(other.ok()) << other.message();
  EXPECT_EQ(other->seq_len, 1024);     // once the model's 2048
  EXPECT_EQ(other->micro_batch, 16);   // once 1
  EXPECT_EQ(other->global_batch, 16);  // once 1
  EXPECT_EQ(other->tp, 8);
}

// The derived defaults follow one rule: tp spans the GPUs left by pp and dp, and the global
// batch is one micro-batch per DP rank.
TEST(PlanFlagsTest, DerivedDefaultsFollowTheGivenDegrees) {
  Result<Plan> dp = Build({"--dp", "2"});
  ASSERT_TRUE(dp.ok()) << dp.message();
  EXPECT_EQ(dp->tp, 16);
  EXPECT_EQ(dp->global_batch, 32);
  Result<Plan> mb = Build({"--micro-batch", "4", "--pp", "2", "--dp", "2"});
  ASSERT_TRUE(mb.ok()) << mb.message();
  EXPECT_EQ(mb->tp, 8);
  EXPECT_EQ(mb->global_batch, 8);
  Result<Plan> given = Build({"--global-batch", "64"});
  ASSERT_TRUE(given.ok()) << given.message();
  EXPECT_EQ(given->global_batch, 64);
  // A product above the bound is refused by the bound's rule, never wrapped around.
  Result<Plan> huge = Build({"--micro-batch", "1048576", "--dp", "32"});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("global_batch"), std::string::npos) << huge.message();
}

// --sp, --copy-engine and --distributed-optimizer are switches: alone they turn the feature on,
// --no-NAME and --NAME=false turn it off, and a value after a space is not theirs.
TEST(PlanFlagsTest, BooleanFlagsAreSwitches) {
  Result<Plan> on = Build({"--sp", "--distributed-optimizer", "--dp", "2"});
  ASSERT_TRUE(on.ok()) << on.message();
  EXPECT_TRUE(on->sequence_parallel);
  EXPECT_TRUE(on->distributed_optimizer);
  for (const char* off : {"--no-sp", "--sp=false", "--sp=0", "--sp=no"}) {
    Result<Plan> plan = Build({off});
    ASSERT_TRUE(plan.ok()) << off << ": " << plan.message();
    EXPECT_FALSE(plan->sequence_parallel) << off;
  }
  Result<Plan> copy = Build({"--sp", "--method", "decomposed", "--chunks", "4", "--copy-engine"});
  ASSERT_TRUE(copy.ok()) << copy.message();
  EXPECT_EQ(copy->copy_engine, std::optional<bool>(true));
  // --no-copy-engine says false; no flag leaves it to the stack (CostModelTest).
  Result<Plan> nccl =
      Build({"--sp", "--method", "decomposed", "--chunks", "4", "--no-copy-engine"});
  ASSERT_TRUE(nccl.ok()) << nccl.message();
  EXPECT_EQ(nccl->copy_engine, std::optional<bool>(false));
  EXPECT_FALSE(nccl->copy_engine_parts());
  Result<Plan> unset = Build({"--sp", "--method", "decomposed", "--chunks", "4"});
  ASSERT_TRUE(unset.ok()) << unset.message();
  EXPECT_FALSE(unset->copy_engine.has_value());
  EXPECT_THROW((void)Build({"--sp", "true"}), CLI::ExtrasError);
  EXPECT_THROW((void)Build({"--sp", "--no-sp"}), CLI::ArgumentMismatch);
  EXPECT_THROW((void)Build({"--sp=maybe"}), CLI::ValidationError);
}

}  // namespace
}  // namespace domino::cli
