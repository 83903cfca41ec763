#include "planner/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace domino {
namespace {

using ::testing::HasSubstr;

// DESIGN.md's example plan, written with one key per line so that every error names a distinct
// line. Line numbers are given on the right.
constexpr std::string_view kExamplePlan =
    "model: gpt3-13b\n"              // 1
    "cluster: dgx-h100:4\n"          // 2
    "precision: bf16\n"              // 3
    "training:\n"                    // 4
    "  seq_len: 1024\n"              // 5
    "  micro_batch: 16\n"            // 6
    "  global_batch: 16\n"           // 7
    "parallel:\n"                    // 8
    "  tp: 32\n"                     // 9
    "  pp: 1\n"                      // 10
    "  dp: 1\n"                      // 11
    "  sequence_parallel: false\n"   // 12
    "  virtual_stages: 1\n"          // 13
    "overlap:\n"                     // 14
    "  row_split: 2\n"               // 15
    "  col_split: 1\n"               // 16
    "  scope: inter-layer\n"         // 17
    "memory:\n"                      // 18
    "  recompute: none\n"            // 19
    "  distributed_optimizer: false\n";  // 20

// kExamplePlan with each `from` replaced by its `to` (each must occur once).
std::string Edit(std::initializer_list<std::pair<std::string_view, std::string_view>> edits) {
  std::string text(kExamplePlan);
  for (const auto& [from, to] : edits) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

TEST(ParsePlanTest, DesignExampleParses) {
  constexpr std::string_view kFlow =
      "model: gpt3-13b            # catalog name or path\n"
      "cluster: dgx-h100:4\n"
      "precision: bf16\n"
      "training: {seq_len: 1024, micro_batch: 16, global_batch: 16}\n"
      "parallel: {tp: 32, pp: 1, dp: 1, sequence_parallel: false, virtual_stages: 1}\n"
      "overlap: {row_split: 2, col_split: 1, scope: inter-layer}\n"
      "memory: {recompute: none, distributed_optimizer: false}\n";
  Result<Plan> plan = ParsePlan(kFlow, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->model.name, "gpt3-13b");
  EXPECT_EQ(plan->model.layers, 40);
  EXPECT_EQ(plan->cluster.total_gpus(), 32);
  EXPECT_EQ(plan->tp, 32);
  EXPECT_EQ(plan->seq_len, 1024);
  EXPECT_EQ(plan->micro_batch, 16);
  EXPECT_EQ(plan->global_batch, 16);
  EXPECT_EQ(plan->row_split, 2);
  EXPECT_EQ(plan->col_split, 1);
  EXPECT_EQ(plan->scope, OverlapScope::kInterLayer);
  EXPECT_EQ(plan->micro_batches(), 1);
  EXPECT_FALSE(plan->is_baseline());
  EXPECT_FALSE(plan->predicted.has_value());

  Result<Plan> block = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(block.ok()) << block.message();
  EXPECT_EQ(PlanToYaml(*block), PlanToYaml(*plan));
}

TEST(ParsePlanTest, SeqLenDefaultsToTheModels) {
  Result<Plan> plan = ParsePlan(Edit({{"  seq_len: 1024\n", ""}}), "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->seq_len, 2048);
}

TEST(PlanToYamlTest, RoundTripsEveryField) {
  Plan plan;
  plan.model_ref = "llama2-7b";
  plan.cluster_ref = "dgx-h100:2";
  plan.precision = Dtype::kFp16;
  plan.seq_len = 2048;
  plan.micro_batch = 4;
  plan.global_batch = 32;
  plan.tp = 8;
  plan.pp = 2;
  plan.dp = 1;
  plan.sequence_parallel = true;
  plan.virtual_stages = 2;
  plan.row_split = 4;
  plan.col_split = 1;
  plan.scope = OverlapScope::kIntraLayer;
  plan.recompute = Recompute::kSelective;
  plan.distributed_optimizer = true;
  ASSERT_TRUE(ResolvePlan(plan).ok());

  std::string yaml = PlanToYaml(plan, "written by a test\nsecond line");
  EXPECT_EQ(yaml, PlanToYaml(plan, "written by a test\nsecond line"));  // deterministic
  EXPECT_THAT(yaml, ::testing::StartsWith("# written by a test\n# second line\n"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message() << "\n" << yaml;
  EXPECT_EQ(back->model_ref, plan.model_ref);
  EXPECT_EQ(back->cluster_ref, plan.cluster_ref);
  EXPECT_EQ(back->precision, plan.precision);
  EXPECT_EQ(back->seq_len, plan.seq_len);
  EXPECT_EQ(back->micro_batch, plan.micro_batch);
  EXPECT_EQ(back->global_batch, plan.global_batch);
  EXPECT_EQ(back->tp, plan.tp);
  EXPECT_EQ(back->pp, plan.pp);
  EXPECT_EQ(back->dp, plan.dp);
  EXPECT_EQ(back->sequence_parallel, plan.sequence_parallel);
  EXPECT_EQ(back->virtual_stages, plan.virtual_stages);
  EXPECT_EQ(back->row_split, plan.row_split);
  EXPECT_EQ(back->col_split, plan.col_split);
  EXPECT_EQ(back->scope, plan.scope);
  EXPECT_EQ(back->recompute, plan.recompute);
  EXPECT_EQ(back->distributed_optimizer, plan.distributed_optimizer);
  EXPECT_EQ(PlanToYaml(*back), PlanToYaml(plan));
}

TEST(PlanToYamlTest, PredictedBlockReadsBack) {
  Result<Plan> plan = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  // Values representable in the writer's fixed decimals, so the round trip is exact.
  PlanFigures f{.iteration_ms = 812.5,
                .ideal_ms = 700.25,
                .exposed_comm_ms = 112.25,
                .hidden_comm_fraction = 0.75,
                .tokens_per_s = 20164.5,
                .tflops_per_gpu = 310.5,
                .mfu = 0.3125,
                .memory_gib_per_gpu = 41.25};
  plan->predicted = f;
  std::string yaml = PlanToYaml(*plan);
  EXPECT_THAT(yaml, HasSubstr("predicted:\n  iteration_ms: 812.5000\n"));
  EXPECT_THAT(yaml, ::testing::Not(HasSubstr("measured:")));
  Result<Plan> back = ParsePlan(yaml, "report.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_TRUE(back->predicted.has_value());
  EXPECT_FALSE(back->measured.has_value());
  EXPECT_EQ(back->predicted->iteration_ms, f.iteration_ms);
  EXPECT_EQ(back->predicted->ideal_ms, f.ideal_ms);
  EXPECT_EQ(back->predicted->exposed_comm_ms, f.exposed_comm_ms);
  EXPECT_EQ(back->predicted->hidden_comm_fraction, f.hidden_comm_fraction);
  EXPECT_EQ(back->predicted->tokens_per_s, f.tokens_per_s);
  EXPECT_EQ(back->predicted->tflops_per_gpu, f.tflops_per_gpu);
  EXPECT_EQ(back->predicted->mfu, f.mfu);
  EXPECT_EQ(back->predicted->memory_gib_per_gpu, f.memory_gib_per_gpu);
  EXPECT_EQ(PlanToYaml(*back), yaml);
}

// One rule a user can break, and where the error must point.
struct BadPlan {
  const char* name;
  std::string text;
  std::string where;  // "plan.yaml:LINE:"
  std::string key;
  std::string rule;  // a fragment of the rule's wording
};

std::vector<BadPlan> BadPlans() {
  return {
      {"gpus", Edit({{"tp: 32", "tp: 16"}}), "plan.yaml:9:", "parallel.tp", "32 GPUs"},
      {"heads", Edit({{"dgx-h100:4", "dgx-h100:1:6"}, {"tp: 32", "tp: 6"}}), "plan.yaml:9:",
       "parallel.tp", "heads (64)"},
      {"row_split_divides_micro_batch", Edit({{"row_split: 2", "row_split: 3"}}), "plan.yaml:15:",
       "overlap.row_split", "must divide micro_batch (16)"},
      {"col_split_divides_hidden", Edit({{"col_split: 1", "col_split: 3"}}), "plan.yaml:16:",
       "overlap.col_split", "hidden (5120)"},
      {"layers", Edit({{"dgx-h100:4", "dgx-h100:2"}, {"tp: 32", "tp: 8"}, {"pp: 1", "pp: 2"},
                       {"virtual_stages: 1", "virtual_stages: 3"}}),
       "plan.yaml:13:", "parallel.virtual_stages", "40 layers"},
      {"interleaving_needs_whole_rounds",
       Edit({{"dgx-h100:4", "dgx-h100:2"}, {"tp: 32", "tp: 8"}, {"pp: 1", "pp: 2"},
             {"virtual_stages: 1", "virtual_stages: 2"}, {"global_batch: 16", "global_batch: 48"}}),
       "plan.yaml:13:", "parallel.virtual_stages", "multiple of pp (2)"},
      {"global_batch", Edit({{"global_batch: 16", "global_batch: 24"}}), "plan.yaml:7:",
       "training.global_batch", "global_batch (24)"},
      {"inter_layer_needs_rows", Edit({{"row_split: 2", "row_split: 1"}}), "plan.yaml:17:",
       "overlap.scope", "row_split >= 2"},
      {"row_split_at_most_16", Edit({{"row_split: 2", "row_split: 17"}}), "plan.yaml:15:",
       "overlap.row_split", "at most 16"},
      {"col_split_with_sp",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"}, {"col_split: 1", "col_split: 2"}}),
       "plan.yaml:16:", "overlap.col_split", "sequence_parallel"},
      {"misspelt_key", Edit({{"row_split: 2", "row_splt: 2"}}), "plan.yaml:15:", "overlap.row_splt",
       "did you mean 'row_split'?"},
      {"unknown_scope", Edit({{"scope: inter-layer", "scope: inter"}}), "plan.yaml:17:",
       "overlap.scope", "'inter'"},
      {"unknown_model", Edit({{"gpt3-13b", "gpt3-14b"}}), "plan.yaml:1:", "model", "gpt3-14b"},
      {"bad_cluster", Edit({{"dgx-h100:4", "dgx-h100:four"}}), "plan.yaml:2:", "cluster", "node count"},
      {"unknown_node", Edit({{"dgx-h100:4", "dgx-h900:4"}}), "plan.yaml:2:", "cluster", "unknown node"},
  };
}

TEST(ParsePlanTest, EveryRuleNamesFileLineAndKey) {
  for (const BadPlan& bad : BadPlans()) {
    SCOPED_TRACE(bad.name);
    Result<Plan> plan = ParsePlan(bad.text, "plan.yaml");
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.message(), ::testing::StartsWith(bad.where));
    EXPECT_THAT(plan.message(), HasSubstr(" " + bad.key + ": "));
    EXPECT_THAT(plan.message(), HasSubstr(bad.rule));
    // One line a user can act on.
    EXPECT_EQ(plan.message().find('\n'), std::string::npos) << plan.message();
  }
}

TEST(ParsePlanTest, RuleOnAKeyNotInTheFileNamesTheKey) {
  // No parallel section: tp defaults to 32, which does not fit one node.
  Result<Plan> plan = ParsePlan(
      "model: gpt3-13b\ncluster: dgx-h100:1\ntraining: {seq_len: 1024}\n", "short.yaml");
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.message(), ::testing::StartsWith("short.yaml:"));
  EXPECT_THAT(plan.message(), HasSubstr("parallel.tp"));
  EXPECT_THAT(plan.message(), HasSubstr("8 GPUs"));
}

TEST(CheckPlanRulesTest, ReportsTheKeyOfEachRule) {
  Result<Plan> parsed = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  const Plan good = *parsed;
  EXPECT_FALSE(CheckPlanRules(good).has_value());

  auto key_of = [](Plan plan) {
    std::optional<PlanRuleFailure> failure = CheckPlanRules(plan);
    return failure ? failure->key : std::string("ok");
  };
  Plan p = good;
  p.dp = 2;
  EXPECT_EQ(key_of(p), "parallel.tp");
  p = good, p.micro_batch = 3, p.row_split = 1, p.scope = OverlapScope::kNone;
  EXPECT_EQ(key_of(p), "training.global_batch");
  p = good, p.col_split = 17;
  EXPECT_EQ(key_of(p), "overlap.col_split");
  p = good, p.sequence_parallel = true, p.seq_len = 1000;
  EXPECT_EQ(key_of(p), "parallel.sequence_parallel");
  p = good, p.sequence_parallel = true;
  EXPECT_EQ(key_of(p), "ok");
  p = good, p.virtual_stages = 2;
  EXPECT_EQ(key_of(p), "parallel.virtual_stages");
  p = good, p.model.kv_heads = 8;  // GQA with fewer kv heads than tp
  EXPECT_EQ(key_of(p), "parallel.tp");
  p = good, p.model.ffn = 20480 + 16;  // not a multiple of 32
  EXPECT_EQ(key_of(p), "parallel.tp");
}

TEST(ResolvePlanTest, FailsOnUnknownModelAndBrokenRules) {
  Plan plan;
  plan.model_ref = "no-such-model";
  EXPECT_FALSE(ResolvePlan(plan).ok());
  plan.model_ref = "gpt3-13b";
  plan.cluster_ref = "dgx-h100:1";  // tp 32 on 8 GPUs
  Status status = ResolvePlan(plan);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), ::testing::StartsWith("parallel.tp: "));
  plan.tp = 8;
  EXPECT_TRUE(ResolvePlan(plan).ok());
}

TEST(LoadPlanTest, MissingFileIsAnError) {
  Result<Plan> plan = LoadPlan(::testing::TempDir() + "/no_such_plan.yaml");
  EXPECT_FALSE(plan.ok());
}

}  // namespace
}  // namespace domino
