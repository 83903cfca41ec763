#include "planner/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tests/planner/example_plan.h"

namespace domino {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(PlanToYamlTest, DecomposedOverlapRoundTripsAndDominoPlansStayAsTheyWere) {
  Result<Plan> domino = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(domino.ok()) << domino.message();
  EXPECT_EQ(domino->method, OverlapMethod::kDomino);
  EXPECT_EQ(domino->decomposed_chunks(), 1);
  EXPECT_THAT(PlanToYaml(*domino),
              HasSubstr("overlap: {row_split: 2, col_split: 1, scope: inter-layer}\n"));
  Result<Plan> both =
      ParsePlan(Edit({{"sequence_parallel: false", "sequence_parallel: true"},
                      {"scope: inter-layer", "scope: inter-layer\n  method: both\n  chunks: 8"}}),
                "plan.yaml");
  ASSERT_TRUE(both.ok()) << both.message();
  EXPECT_EQ(both->method, OverlapMethod::kBoth);
  EXPECT_EQ(both->decomposed_chunks(), 8);
  std::string yaml = PlanToYaml(*both);
  EXPECT_THAT(yaml, HasSubstr("scope: inter-layer, method: both, chunks: 8}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->method, OverlapMethod::kBoth);
  EXPECT_EQ(back->chunks, 8);
  EXPECT_EQ(PlanToYaml(*back), yaml);
  Plan ce = *both;
  ce.copy_engine = true;
  std::string ce_yaml = PlanToYaml(ce);
  EXPECT_THAT(ce_yaml, HasSubstr("method: both, chunks: 8, copy_engine: true}"));
  Result<Plan> ce_back = ParsePlan(ce_yaml, "ce.yaml");
  ASSERT_TRUE(ce_back.ok()) << ce_back.message();
  EXPECT_EQ(ce_back->copy_engine, std::optional<bool>(true));
  // Said false, it is written and read back false (NCCL parts under a stack that copies).
  ce.copy_engine = false;
  std::string nccl_yaml = PlanToYaml(ce);
  EXPECT_THAT(nccl_yaml, HasSubstr("method: both, chunks: 8, copy_engine: false}"));
  Result<Plan> nccl_back = ParsePlan(nccl_yaml, "nccl.yaml");
  ASSERT_TRUE(nccl_back.ok()) << nccl_back.message();
  EXPECT_EQ(nccl_back->copy_engine, std::optional<bool>(false));
  EXPECT_FALSE(nccl_back->copy_engine_parts());
  // Without chunks, decomposed overlap cuts each collective into tp parts.
  Plan eight = *both;
  eight.chunks = 0;
  eight.tp = 8;
  EXPECT_EQ(eight.decomposed_chunks(), 8);
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
  EXPECT_THAT(yaml, Not(HasSubstr("measured:")));
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
      {"heads", Edit({{"dgx-h100:4", "dgx-h100:1:6"}, {"tp: 32", "tp: 6"}}),
       "plan.yaml:9:", "parallel.tp", "heads (64)"},
      {"row_split_divides_micro_batch", Edit({{"row_split: 2", "row_split: 3"}}),
       "plan.yaml:15:", "overlap.row_split", "must divide micro_batch (16)"},
      {"col_split_divides_hidden", Edit({{"col_split: 1", "col_split: 3"}}),
       "plan.yaml:16:", "overlap.col_split", "hidden (5120)"},
      {"layers",
       Edit({{"dgx-h100:4", "dgx-h100:2"},
             {"tp: 32", "tp: 8"},
             {"pp: 1", "pp: 2"},
             {"virtual_stages: 1", "virtual_stages: 3"}}),
       "plan.yaml:13:", "parallel.virtual_stages", "40 layers"},
      {"interleaving_needs_whole_rounds",
       Edit({{"dgx-h100:4", "dgx-h100:2"},
             {"tp: 32", "tp: 8"},
             {"pp: 1", "pp: 2"},
             {"virtual_stages: 1", "virtual_stages: 2"},
             {"global_batch: 16", "global_batch: 48"}}),
       "plan.yaml:13:", "parallel.virtual_stages", "multiple of pp (2)"},
      {"global_batch", Edit({{"global_batch: 16", "global_batch: 24"}}),
       "plan.yaml:7:", "training.global_batch", "global_batch (24)"},
      {"inter_layer_needs_rows", Edit({{"row_split: 2", "row_split: 1"}}),
       "plan.yaml:17:", "overlap.scope", "row_split >= 2"},
      {"row_split_at_most_16", Edit({{"row_split: 2", "row_split: 17"}}),
       "plan.yaml:15:", "overlap.row_split", "between 1 and 16"},
      {"precision_the_gpu_lacks", Edit({{"dgx-h100:4", "dgx-a100:4"}, {"bf16", "fp8"}}),
       "plan.yaml:3:", "precision", "has no fp8 peak"},
      {"too_much_work",
       Edit(
           {{"global_batch: 16", "global_batch: 16777216"}, {"micro_batch: 16", "micro_batch: 2"}}),
       "plan.yaml:7:", "training.global_batch", "layer passes"},
      {"col_split_with_sp",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"},
             {"col_split: 1", "col_split: 2"}}),
       "plan.yaml:16:", "overlap.col_split", "sequence_parallel"},
      {"decomposed_needs_tp",
       Edit({{"tp: 32", "tp: 1"},
             {"dp: 1", "dp: 32"},
             {"micro_batch: 16", "micro_batch: 1"},
             {"global_batch: 16", "global_batch: 32"},
             {"row_split: 2", "row_split: 1"},
             {"scope: inter-layer", "scope: none\n  method: decomposed"}}),
       "plan.yaml:18:", "overlap.method", "with tp 1 there are none: it needs parallel.tp >= 2"},
      {"decomposed_needs_sp", Edit({{"scope: inter-layer", "scope: inter-layer\n  method: both"}}),
       "plan.yaml:18:", "overlap.method", "sequence_parallel: true"},
      {"decomposed_without_row_split",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"},
             {"scope: inter-layer", "scope: inter-layer\n  method: decomposed\n  chunks: 4"}}),
       "plan.yaml:18:", "overlap.method", "method both decomposes each row slice"},
      {"chunks_divide_a_slice",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"},
             {"scope: inter-layer", "scope: inter-layer\n  method: both\n  chunks: 5"}}),
       "plan.yaml:19:", "overlap.chunks", "tokens of a row slice"},
      {"chunks_need_a_decomposed_method",
       Edit({{"scope: inter-layer", "scope: inter-layer\n  chunks: 4"}}),
       "plan.yaml:18:", "overlap.chunks", "method decomposed or both"},
      {"chunks_at_most_16",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"},
             {"scope: inter-layer", "scope: inter-layer\n  method: both\n  chunks: 32"}}),
       "plan.yaml:19:", "overlap.chunks", "between 1 and 16"},
      {"rs_chunks_divide_a_slice",
       Edit({{"sequence_parallel: false", "sequence_parallel: true"},
             {"scope: inter-layer",
              "scope: inter-layer\n  method: both\n  chunks: 4\n  rs_chunks: 5"}}),
       "plan.yaml:20:", "overlap.rs_chunks", "tokens of a row slice"},
      {"rs_chunks_need_a_decomposed_method",
       Edit({{"scope: inter-layer", "scope: inter-layer\n  rs_chunks: 4"}}),
       "plan.yaml:18:", "overlap.rs_chunks", "method decomposed or both"},
      {"copy_engine_needs_a_decomposed_method",
       Edit({{"scope: inter-layer", "scope: inter-layer\n  copy_engine: true"}}),
       "plan.yaml:18:", "overlap.copy_engine", "method decomposed or both"},
      {"misspelt_key", Edit({{"row_split: 2", "row_splt: 2"}}), "plan.yaml:15:", "overlap.row_splt",
       "did you mean 'row_split'?"},
      {"unknown_scope", Edit({{"scope: inter-layer", "scope: inter"}}),
       "plan.yaml:17:", "overlap.scope", "'inter'"},
      {"unknown_model", Edit({{"gpt3-13b", "gpt3-14b"}}), "plan.yaml:1:", "model", "gpt3-14b"},
      {"bad_cluster", Edit({{"dgx-h100:4", "dgx-h100:four"}}), "plan.yaml:2:", "cluster",
       "node count"},
      {"unknown_node", Edit({{"dgx-h100:4", "dgx-h900:4"}}), "plan.yaml:2:", "cluster",
       "unknown node"},
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
  // No parallel section: tp takes the cluster's 6 GPUs, which do not divide gpt3-13b's 64 heads.
  Result<Plan> plan = ParsePlan(
      "model: gpt3-13b\ncluster: dgx-h100:1:6\ntraining: {seq_len: 1024}\n", "short.yaml");
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.message(), ::testing::StartsWith("short.yaml:"));
  EXPECT_THAT(plan.message(), HasSubstr("parallel.tp"));
  EXPECT_THAT(plan.message(), HasSubstr("tp (6) must divide the model's heads (64)"));
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
  // FSDP shards over DP x CP and shards the optimizer state too.
  p = good, p.tp = 16, p.dp = 2, p.global_batch = 32, p.fsdp = true;
  EXPECT_EQ(key_of(p), "memory.fsdp");  // without the distributed optimizer
  p.distributed_optimizer = true;
  EXPECT_EQ(key_of(p), "ok");
  p = good, p.fsdp = true, p.distributed_optimizer = true;  // dp 1: nothing to shard over
  EXPECT_EQ(key_of(p), "memory.fsdp");
  // A count of recomputed layers needs full recompute, and at most the model's layers.
  p = good, p.recompute_layers = 4;
  EXPECT_EQ(key_of(p), "memory.recompute_layers");
  p.recompute = Recompute::kFull;
  EXPECT_EQ(key_of(p), "ok");
  p.recompute_layers = good.model.layers + 1;
  EXPECT_EQ(key_of(p), "memory.recompute_layers");
}

TEST(CheckPlanRulesTest, APipelineSplitThatCountsTheEndsMustCutEvenly) {
  Plan plan;
  plan.model_ref = "llama3-405b";
  plan.cluster_ref = "dgx-h100:64";
  plan.seq_len = 8192;
  plan.tp = 8, plan.cp = 2, plan.pp = 8, plan.dp = 4;
  plan.micro_batch = 1, plan.global_batch = 256;
  plan.virtual_stages = 8;
  Status layers_only = ResolvePlan(plan);
  ASSERT_FALSE(layers_only.ok());
  EXPECT_THAT(layers_only.message(),
              HasSubstr("parallel.virtual_stages: pp*virtual_stages = 8*8 must divide the "
                        "model's 126 layers (or, with parallel.pipeline_split ends"));
  plan.pipeline_split = PipelineSplit::kEnds;  // 128 units: 2 per chunk
  ASSERT_TRUE(ResolvePlan(plan).ok());
  plan.pipeline_split = PipelineSplit::kLoss;  // 127 units
  std::optional<PlanRuleFailure> failure = CheckPlanRules(plan);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "parallel.pipeline_split");
  EXPECT_EQ(failure->rule,
            "pipeline_split loss counts 127 units (126 layers + the loss); pp*virtual_stages = "
            "8*8 must divide them");
  // 6 layers + 2 ends in 8 chunks of 1: the first and the last would hold no layer.
  plan.model.layers = 6;
  plan.pp = 2, plan.virtual_stages = 4, plan.pipeline_split = PipelineSplit::kEnds;
  failure = CheckPipelineSplit(plan);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->rule,
            "pipeline_split ends leaves the first or the last of 8 model chunks (1 units each) "
            "without a transformer layer");
  plan.virtual_stages = 2;  // 4 chunks of 2
  EXPECT_FALSE(CheckPipelineSplit(plan).has_value());
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

TEST(CheckPlanRulesTest, BoundsComeFirstAndNothingOverflows) {
  Result<Plan> parsed = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  const Plan good = *parsed;
  auto failure_of = [](Plan plan) {
    std::optional<PlanRuleFailure> failure = CheckPlanRules(plan);
    return failure ? failure->key + ": " + failure->rule : std::string("ok");
  };
  // Values that once divided by zero (pp * virtual_stages wrapping to 0) or sized a vector of
  // 2^31 stages: refused by their bound, as a plan file would be.
  Plan p = good;
  p.pp = 4, p.virtual_stages = 1073741824;
  EXPECT_EQ(failure_of(p), "parallel.virtual_stages: must be between 1 and 1024, got 1073741824");
  p = good, p.virtual_stages = 2147483647;
  EXPECT_THAT(failure_of(p), HasSubstr("parallel.virtual_stages: must be between 1 and 1024"));
  p = good, p.global_batch = 1000000000;
  EXPECT_EQ(failure_of(p), "training.global_batch: must be between 1 and 16777216, got 1000000000");
  p = good, p.tp = 0;
  EXPECT_EQ(failure_of(p), "parallel.tp: must be a positive integer, got 0");
  p = good, p.row_split = 17;
  EXPECT_EQ(failure_of(p), "overlap.row_split: must be between 1 and 16, got 17");
  // Within the bounds but too much work: 10^7 sequences in micro-batches of 16 over 40 layers.
  p = good, p.global_batch = 10000000, p.micro_batch = 16;
  EXPECT_THAT(failure_of(p),
              ::testing::StartsWith("training.global_batch: 625000 micro-batch(es)"));
  EXPECT_EQ(CheckBound(kVirtualStagesBound, 1024), std::nullopt);
  EXPECT_EQ(CheckBound(kVirtualStagesBound, 0), "must be a positive integer, got 0");
}

TEST(CheckPlanRulesTest, PrecisionNeedsAPeakOnTheGpu) {
  Result<Plan> parsed = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  Plan p = *parsed;
  p.cluster.node.gpu.peak_tflops[static_cast<int>(Dtype::kBf16)] = 0;  // an older GPU
  std::optional<PlanRuleFailure> failure = CheckPlanRules(p);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "precision");
  EXPECT_THAT(failure->rule, HasSubstr("has no bf16 peak"));
  // fp8 on an A100 is refused, not priced as bf16 under an fp8 label.
  Result<Plan> a100 = ParsePlan(Edit({{"dgx-h100:4", "dgx-a100:4"}, {"bf16", "fp8"}}), "a.yaml");
  ASSERT_FALSE(a100.ok());
  EXPECT_THAT(a100.message(), HasSubstr("a.yaml:3:12: precision: the a100"));
}

// Writes `text` to `dir`/`name`, creating `dir`.
std::string WriteFile(const std::filesystem::path& dir, const std::string& name,
                      const std::string& text) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

TEST(PlanToYamlTest, FilePathsAreAbsoluteAndQuotedSoThePlanLoadsAnywhere) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::path(::testing::TempDir()) / ("plan_paths_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path work = root / "work", elsewhere = root / "elsewhere";
  fs::create_directories(elsewhere);
  const std::string model_text =
      "name: m\nlayers: 4\nhidden: 256\nheads: 8\nffn: 1024\nvocab: 1000\nseq_len: 128\n"
      "activation: gelu\nnorm: layernorm\n";
  const fs::path old_cwd = fs::current_path();
  for (const std::string name : {"[x].yaml", "a: b #c.yaml", "quote\"and\\backslash.yaml"}) {
    SCOPED_TRACE(name);
    WriteFile(work, name, model_text);
    fs::current_path(work);
    Plan plan;
    plan.model_ref = name;  // relative to the working directory, as typed
    plan.cluster_ref = "dgx-h100:1:1";
    plan.tp = 1, plan.micro_batch = 1, plan.global_batch = 1, plan.seq_len = 128;
    plan.row_split = 1, plan.scope = OverlapScope::kNone;
    Status resolved = ResolvePlan(plan);
    ASSERT_TRUE(resolved.ok()) << resolved.message();
    const std::string yaml = PlanToYaml(plan);
    EXPECT_THAT(yaml, HasSubstr("model: \"" + (work / "").string()));
    EXPECT_THAT(yaml, HasSubstr("cluster: dgx-h100:1:1\n"));  // catalog names stay bare
    EXPECT_THAT(yaml, HasSubstr("stack: " + std::string(kDefaultStack) + "\n"));
    fs::current_path(elsewhere);
    Result<Plan> back = ParsePlan(yaml, "back.yaml");
    fs::current_path(old_cwd);
    ASSERT_TRUE(back.ok()) << back.message() << "\n" << yaml;
    EXPECT_EQ(back->model_ref, fs::absolute(work / name).string());
    EXPECT_EQ(back->model.hidden, 256);
  }
  // A node file in NODE:COUNT keeps its form, with the node made absolute.
  const std::string node =
      "name: n\ngpu: h100-sxm\ngpus_per_node: 8\nnvlink: {GBps_per_direction: 450, efficiency: "
      "0.81}\nnvls: false\nnics: 8\nnetwork: {GBps_per_direction: 50, efficiency: 0.93}\n";
  WriteFile(work, "n #1.yaml", node);
  fs::current_path(work);
  Plan plan;
  plan.cluster_ref = "n #1.yaml:1";
  plan.tp = 8;
  plan.micro_batch = 16, plan.global_batch = 16;
  Status resolved = ResolvePlan(plan);
  const std::string yaml = PlanToYaml(plan);
  fs::current_path(elsewhere);
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  fs::current_path(old_cwd);
  ASSERT_TRUE(resolved.ok()) << resolved.message();
  ASSERT_TRUE(back.ok()) << back.message() << "\n" << yaml;
  EXPECT_EQ(back->cluster_ref, (work / "n #1.yaml").string() + ":1");
  fs::remove_all(root);
}

// How `domino plan`'s search stopped, for people (Plan::search_stopped): by a signal (the plan
// marked partial) or at its timeout. A value the writer never writes says only that the search
// stopped (nothing of it reaches a message raw); a whole search says nothing.
TEST(ParsePlanTest, ASearchStoppedEarlyIsRead) {
  const std::string base = "model: gpt3-2.7b\ncluster: dgx-h100:1\n";
  for (const auto& [search, stopped] : std::initializer_list<std::pair<const char*, const char*>>{
           {"search:\n  evaluated: 12\n  stopped_by: SIGINT  # partial\n", "by SIGINT"},
           {"search: {evaluated: 3, stopped_by: SIGTERM}\n", "by SIGTERM"},
           {"search: {stopped_at_timeout_s: 2.5, evaluated: 40}\n", "at its 2.5 s timeout"},
           {"search: {stopped_by: \"x\\ny\"}\n", "by a signal"},
           {"search: {stopped_at_timeout_s: [1]}\n", "at its timeout"},
           {"search: {evaluated: 12, rejected: 0, pruned: 3}\n", ""},
           {"", ""}}) {
    Result<Plan> plan = ParsePlan(base + search, "plan.yaml");
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_EQ(plan->search_stopped, stopped) << search;
  }
}

TEST(LoadPlanTest, MissingFileIsAnError) {
  Result<Plan> plan = LoadPlan(::testing::TempDir() + "/no_such_plan.yaml");
  EXPECT_FALSE(plan.ok());
}

}  // namespace
}  // namespace domino

namespace domino {
namespace {

TEST(PlanFileTest, UnsetTpAndGlobalBatchFollowTheRestAsTheFlagsDo) {
  // 8 GPUs, dp 2, micro-batch 2: tp takes the 4 GPUs left, the global batch one micro-batch per
  // DP rank.
  Result<Plan> plan = ParsePlan(
      "model: gpt3-2.7b\ncluster: dgx-h100:1\ntraining: {micro_batch: 2}\nparallel: {dp: 2}\n",
      "p.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->tp, 4);
  EXPECT_EQ(plan->global_batch, 4);
  // Given, they stay as given.
  plan = ParsePlan(
      "model: gpt3-2.7b\ncluster: dgx-h100:1\ntraining: {micro_batch: 2, global_batch: 8}\n"
      "parallel: {tp: 8}\n",
      "p.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->tp, 8);
  EXPECT_EQ(plan->global_batch, 8);
  // cp * pp * dp that does not divide the GPUs: one line naming the key and the rule.
  plan = ParsePlan("model: gpt3-2.7b\ncluster: dgx-h100:1\nparallel: {dp: 3}\n", "p.yaml");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("p.yaml:3:11: parallel: tp is not given, and cp*pp*dp = 1*1*3 = 3 "
                                "does not divide the cluster's 8 GPUs"),
            std::string::npos)
      << plan.message();
}

}  // namespace
}  // namespace domino
