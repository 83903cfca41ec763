// What every exporter of planner/export.h must do: name each target, be deterministic, and map
// each of the plan's settings to the framework's own (or say how its run would differ).
#include "planner/export.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "planner/plan.h"
#include "tests/planner/export_test_plans.h"

namespace domino {
namespace {

using export_test::Export;
using export_test::kGpt27bRowSplit;
using export_test::kLlama8b3dFullRecompute;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Export, EveryTargetIsNamedAndDeterministic) {
  ASSERT_EQ(ExportTargetNames().size(), 4u);
  for (const auto& [name, target] : ExportTargetNames()) {
    Result<std::string> first = Export(kGpt27bRowSplit, target);
    ASSERT_TRUE(first.ok()) << name << ": " << first.message();
    EXPECT_EQ(first->substr(0, 2), "# ") << name;
    EXPECT_EQ(*first, *Export(kGpt27bRowSplit, target)) << name;
  }
}

// A plan from a search stopped early (ParsePlanTest.ASearchStoppedEarlyIsRead) exports as any
// other, its second line saying so.
TEST(Export, APlanOfAStoppedSearchSaysItIsPartial) {
  const std::string yaml = std::string(kGpt27bRowSplit) + "search: {stopped_by: SIGINT}\n";
  for (const auto& [name, target] : ExportTargetNames()) {
    Result<std::string> text = Export(yaml.c_str(), target);
    ASSERT_TRUE(text.ok()) << name << ": " << text.message();
    const std::string whole = *Export(kGpt27bRowSplit, target);
    const size_t second = whole.find('\n') + 1;
    EXPECT_EQ(*text, whole.substr(0, second) +
                         "# partial: the best plan of a `domino plan` search stopped by SIGINT, "
                         "before it covered its space; a whole search may find a faster one\n" +
                         whole.substr(second))
        << name;
    EXPECT_THAT(whole, Not(HasSubstr("# partial"))) << name;
  }
}

TEST(Export, BaselinePlanDiffersInNothingForMegatron) {
  std::string yaml = kGpt27bRowSplit;
  yaml.replace(yaml.find("row_split: 2"), 12, "row_split: 1");
  yaml.replace(yaml.find("inter-layer"), 11, "none");
  Result<std::string> text = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_THAT(*text, Not(HasSubstr("# differs")));
}

// llama3-8b, tp 8 with sequence parallelism and decomposed collective-matmul overlap: Transformer
// Engine's --tp-comm-overlap and torchtitan's async TP.
constexpr const char* kLlama8bDecomposed = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 1}
parallel: {tp: 8, sequence_parallel: true}
overlap: {method: decomposed, chunks: 4}
)yaml";

TEST(Export, DecomposedOverlapMapsToEachFrameworksCommOverlap) {
  Result<std::string> megatron = Export(kLlama8bDecomposed, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--tp-comm-overlap"));
  // 4 all-gather chunks where TE cuts into tp = 8 is said; its 4 reduce-scatter pieces (the
  // megatron-core stack's) are TE's own.
  EXPECT_THAT(*megatron, HasSubstr("# differs: decomposed overlap in 4 chunks: Transformer Engine "
                                   "cuts each all-gather into tp (8) chunks"));
  EXPECT_THAT(*megatron, Not(HasSubstr("decomposed reduce-scatter")));
  Result<std::string> nemo = Export(kLlama8bDecomposed, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  ub_tp_comm_overlap: true\n"));
  Result<std::string> titan = Export(kLlama8bDecomposed, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("enable_async_tensor_parallel = true\n"));
  // torchtitan refuses async TP without the model compiled.
  EXPECT_THAT(*titan,
              HasSubstr("\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n"));
  // Async TP cuts its reduce-scatter into tp (8) pieces, not the stack's 4.
  EXPECT_THAT(*titan, HasSubstr("# differs: decomposed reduce-scatter in 4 pieces: torchtitan's "
                                "async TP cuts it into 8"));
  Result<std::string> deepspeed = Export(kLlama8bDecomposed, ExportTarget::kDeepSpeed);
  ASSERT_FALSE(deepspeed.ok());
  EXPECT_THAT(deepspeed.message(), HasSubstr("decomposed collective-matmul overlap (it has none)"));
  // A decomposed plan is no Megatron baseline.
  Result<Plan> plan = ParsePlan(kLlama8bDecomposed, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_FALSE(plan->is_baseline());
}

// Llama 3.1 405B on pp 8 x vp 8 as Megatron-Bridge splits it: the embedding and the loss count
// as a layer each (128 units, 2 per chunk).
constexpr const char* kLlama405bEnds = R"yaml(model: llama3-405b
cluster: dgx-h100:64
precision: bf16
training: {seq_len: 8192, micro_batch: 1, global_batch: 256}
parallel: {tp: 8, cp: 2, pp: 8, dp: 4, sequence_parallel: true, virtual_stages: 8, pipeline_split: ends}
memory: {distributed_optimizer: true}
)yaml";

// The same model counting layers only, on pp 16 without interleaving: 7, 8 x 14, 7 layers.
std::string Llama405bUneven() {
  std::string yaml = kLlama405bEnds;
  yaml.replace(yaml.find(", virtual_stages: 8, pipeline_split: ends"), 41, "");
  yaml.replace(yaml.find("pp: 8, dp: 4"), 12, "pp: 16, dp: 2");
  return yaml;
}

TEST(Export, APipelineSplitThatCountsTheEndsMapsToEachFramework) {
  Result<std::string> megatron = Export(kLlama405bEnds, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--num-layers-per-virtual-pipeline-stage 2 \\\n"));
  EXPECT_THAT(*megatron, HasSubstr("--account-for-embedding-in-pipeline-split \\\n"));
  EXPECT_THAT(*megatron, HasSubstr("--account-for-loss-in-pipeline-split \\\n"));
  Result<std::string> titan = Export(kLlama405bEnds, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("pipeline_parallel_layers_per_stage = 2\n"
                                "pipeline_parallel_first_stage_less_layers = 1\n"
                                "pipeline_parallel_last_stage_less_layers = 1\n"));
  Result<std::string> nemo = Export(kLlama405bEnds, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  account_for_embedding_in_pipeline_split: true\n"
                               "  account_for_loss_in_pipeline_split: true\n"));
  EXPECT_THAT(*nemo, Not(HasSubstr("# differs: pipeline_split")));
  // One end counted: NeMo takes it only where the layers alone cut evenly over the stages and
  // chunks, and says it refuses this one (31 layers and the loss over pp 2 x 2 chunks).
  Result<Plan> one_end = ParsePlan(kLlama8b3dFullRecompute, "plan.yaml");
  ASSERT_TRUE(one_end.ok()) << one_end.message();
  one_end->model.layers = 31;
  one_end->pipeline_split = PipelineSplit::kLoss;
  ASSERT_FALSE(CheckPlanRules(*one_end).has_value()) << CheckPlanRules(*one_end)->rule;
  Result<std::string> nemo_loss = ExportPlan(*one_end, ExportTarget::kNemo);
  ASSERT_TRUE(nemo_loss.ok()) << nemo_loss.message();
  EXPECT_THAT(*nemo_loss, HasSubstr("  account_for_loss_in_pipeline_split: true\n"));
  EXPECT_THAT(*nemo_loss, HasSubstr("# differs: pipeline_split loss: NeMo counts the ends in the "
                                    "split only when it counts both, or when the 31 layers alone "
                                    "cut evenly over pp 2 x 2 chunks; it refuses this one\n"));
  one_end->model.layers = 32, one_end->pipeline_split = PipelineSplit::kLayers;
  Result<std::string> nemo_layers = ExportPlan(*one_end, ExportTarget::kNemo);
  ASSERT_TRUE(nemo_layers.ok()) << nemo_layers.message();
  EXPECT_THAT(*nemo_layers, Not(HasSubstr("pipeline_split")));
  // Counting layers only, uneven stages: torchtitan puts the remainder elsewhere, and says so.
  const std::string uneven = Llama405bUneven();
  Result<std::string> titan_uneven = Export(uneven.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan_uneven.ok()) << titan_uneven.message();
  EXPECT_THAT(*titan_uneven, HasSubstr("# differs: uneven stages: torchtitan gives the 14 layers "
                                       "left over by pp 16 to the first stages"));
  EXPECT_THAT(*titan_uneven, HasSubstr("pipeline_parallel_first_stage_less_layers = 0\n"));
}

TEST(Export, TheGradientTypeIsSaidWhereTheFrameworkWouldPickAnother) {
  // llama3-8b 3D with bf16 gradients (memory.grad_reduce: param): Megatron reduces bf16 gradients
  // in fp32 unless --grad-reduce-in-bf16, NeMo's distributed optimizer takes grad_sync_dtype,
  // torchtitan reduces in float32 unless told; the fp32 default says nothing to Megatron.
  std::string bf16(kLlama8b3dFullRecompute);
  bf16.replace(bf16.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, grad_reduce: param}");
  Result<std::string> megatron = Export(bf16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--grad-reduce-in-bf16"));
  Result<std::string> nemo = Export(bf16.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("    grad_sync_dtype: bf16\n"));
  Result<std::string> titan = Export(bf16.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("# differs: gradients reduced in 16 bits: torchtitan reduces them "
                                "in float32 (mixed_precision_reduce takes only \"float32\")\n"));
  EXPECT_THAT(*titan, Not(HasSubstr("mixed_precision_reduce =")));
  // Without the distributed optimizer NeMo's fused_adam reduces in fp32, and says so.
  std::string replicated = bf16;
  replicated.replace(replicated.find("distributed_optimizer: true"), 27,
                     "distributed_optimizer: false");
  Result<std::string> fused_adam = Export(replicated.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(fused_adam.ok()) << fused_adam.message();
  EXPECT_THAT(*fused_adam, HasSubstr("# differs: gradients reduced in 16 bits: NeMo's fused_adam "
                                     "reduces them in its fp32 main-gradient buffers"));
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kMegatron);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("--grad-reduce-in-bf16")));
  EXPECT_THAT(*plain, Not(HasSubstr("--accumulate-allreduce-grads-in-fp32")));
  // fp16 under megatron-core reduces in fp16, as Megatron does by default; fp32 gradients need
  // --accumulate-allreduce-grads-in-fp32.
  std::string fp16(kLlama8b3dFullRecompute);
  fp16.replace(fp16.find("precision: bf16"), 15, "precision: fp16");
  Result<std::string> half = Export(fp16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(half.ok()) << half.message();
  EXPECT_THAT(*half, Not(HasSubstr("--grad-reduce-in-bf16")));
  EXPECT_THAT(*half, Not(HasSubstr("--accumulate-allreduce-grads-in-fp32")));
  fp16.replace(fp16.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, grad_reduce: fp32}");
  Result<std::string> full = Export(fp16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_THAT(*full, HasSubstr("--accumulate-allreduce-grads-in-fp32"));
}

TEST(Export, DpOverlapIsTheStacksAndLaunchesTheLastGradientsAsItsGradSync) {
  // llama3-8b 3D, dp 2 with the distributed optimizer, on megatron-core (both overlaps,
  // megatron-aligned): Megatron-LM's flags, its aligned launch its default; NeMo 1's distributed
  // Adam keys. NeMo 2.0's DDP hooks (megatron) are --no-align-grad-reduce, and NeMo 1 has no such
  // launch; layer by layer on every stage no Megatron DDP runs.
  const std::string aligned(kLlama8b3dFullRecompute);
  Result<std::string> megatron = Export(aligned.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--use-distributed-optimizer \\\n--overlap-grad-reduce \\\n"
                                   "--overlap-param-gather \\\n"));
  EXPECT_THAT(*megatron, Not(HasSubstr("align")));
  Result<std::string> nemo = Export(aligned.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("    overlap_grad_sync: true\n    overlap_param_sync: true\n"));
  EXPECT_THAT(*nemo, Not(HasSubstr("differs: grad_sync")));
  auto with = [&](const char* sync) {
    std::string text(kLlama8b3dFullRecompute);
    text.replace(text.find("distributed_optimizer: true}"), 28,
                 fmt::format("distributed_optimizer: true, grad_sync: {}}}", sync));
    return text;
  };
  const std::string hooks = with("megatron");
  megatron = Export(hooks.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--overlap-grad-reduce \\\n--no-align-grad-reduce \\\n"));
  nemo = Export(hooks.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: grad_sync megatron: NeMo 1 launches"));
  const std::string layer = with("layer");
  megatron = Export(layer.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("# differs: grad_sync layer: Megatron-Core's DDP keeps one"));
  // The executor's own stack overlaps neither.
  std::string own(kLlama8b3dFullRecompute);
  own.replace(own.find("precision: bf16"), 15, "stack: domino\nprecision: bf16");
  megatron = Export(own.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, Not(HasSubstr("--overlap-")));
}

TEST(Export, ABf16AdamStateIsNemosOptimDtypeAndADifferenceElsewhere) {
  // Apex's DistributedFusedAdam (NeMo's distributed_fused_adam) takes the state's type;
  // Megatron-LM, DeepSpeed and torchtitan keep fp32 master weights, and the export says so.
  std::string bf16(kLlama8b3dFullRecompute);
  bf16.replace(bf16.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, optimizer_dtype: bf16}");
  Result<std::string> nemo = Export(bf16.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("    name: distributed_fused_adam\n"));
  EXPECT_THAT(*nemo, HasSubstr("    dtype: bf16\n"));
  EXPECT_THAT(*nemo, Not(HasSubstr("differs: optimizer_dtype")));
  Result<std::string> megatron = Export(bf16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("# differs: optimizer_dtype bf16: Megatron-LM keeps fp32 master "
                                   "weights"));
  Result<std::string> titan = Export(bf16.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("# differs: optimizer_dtype bf16: torchtitan's AdamW"));
  // DeepSpeed-Domino runs one GPU group without a distributed optimizer: its own plan.
  const std::string domino = std::string(kGpt27bRowSplit) + "memory: {optimizer_dtype: bf16}\n";
  Result<std::string> deepspeed = Export(domino.c_str(), ExportTarget::kDeepSpeed);
  ASSERT_TRUE(deepspeed.ok()) << deepspeed.message();
  EXPECT_THAT(*deepspeed, HasSubstr("# differs: optimizer_dtype bf16: DeepSpeed's"));
  // The fp32 default says nothing anywhere.
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kNemo);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("dtype: bf16")));
  EXPECT_THAT(*plain, Not(HasSubstr("optimizer_dtype")));
}

TEST(Export, FsdpMapsToEachFrameworksFullSharding) {
  std::string fsdp(kLlama8b3dFullRecompute);
  fsdp.replace(fsdp.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, fsdp: true}");
  Result<std::string> megatron = Export(fsdp.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--use-distributed-optimizer \\\n--use-megatron-fsdp \\\n"
                                   "--data-parallel-sharding-strategy optim_grads_params \\\n"
                                   "--ckpt-format fsdp_dtensor"));
  Result<std::string> nemo = Export(fsdp.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: fsdp: not set here"));
  // torchtitan's FSDP is what the plan asks for: no line says otherwise.
  Result<std::string> titan = Export(fsdp.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("data_parallel_shard_degree = 2\n"));
  EXPECT_THAT(*titan, Not(HasSubstr("torchtitan runs FSDP")));
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kTorchtitan);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, HasSubstr("# differs: the distributed optimizer: torchtitan runs FSDP"));
  EXPECT_THAT(*plain, Not(HasSubstr("fsdp")));
}

TEST(Export, WhatTheModelsFileSaysAndItsSpecLeavesOutIsADifferenceEverywhere) {
  // An imported Gemma 2's post-norms (ModelSpec::approximations), which no field states and no
  // target launches: every target names it.
  Result<Plan> plan = ParsePlan(kGpt27bRowSplit, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  plan->model.approximations = {
      {ModelFeature::kNone, "post-norms (Gemma 2)", "with the norms before only"}};
  for (ExportTarget target : {ExportTarget::kMegatron, ExportTarget::kNemo,
                              ExportTarget::kDeepSpeed, ExportTarget::kTorchtitan}) {
    Result<std::string> text = ExportPlan(*plan, target);
    ASSERT_TRUE(text.ok()) << text.message();
    EXPECT_THAT(*text, HasSubstr("# differs: model gpt3-2.7b: post-norms (Gemma 2): priced and "
                                 "exported with the norms before only\n"));
  }
}

TEST(Export, SettingsTheFrameworkRefusesTogetherAreDifferences) {
  Result<Plan> plan = ParsePlan(kLlama8b3dFullRecompute, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  // Interleaving over 2 stages without overlapping the transfers: Megatron-LM needs pp > 2.
  Plan p = *plan;
  p.overlap_p2p = false;
  Result<std::string> two = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(two.ok()) << two.message();
  EXPECT_THAT(*two, Not(HasSubstr("--no-overlap-p2p-communication")));
  EXPECT_THAT(*two, HasSubstr("# differs: overlap_p2p false over 2 stages: Megatron-LM runs the "
                              "interleaved schedule without overlapping its transfers only over "
                              "more than 2 stages"));
  p.pp = 4, p.dp = 1, p.virtual_stages = 2;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  Result<std::string> four = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(four.ok()) << four.message();
  EXPECT_THAT(*four, HasSubstr("--no-overlap-p2p-communication"));
  EXPECT_THAT(*four, Not(HasSubstr("overlap_p2p false")));
  // A stack that overlaps the parameter gather but not the gradient reduction: both frameworks
  // take the one only with the other.
  Plan q = *plan;
  q.stack.overlap_grad_reduce = false;
  ASSERT_TRUE(q.stack.overlap_param_gather);
  Result<std::string> megatron = ExportPlan(q, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, Not(HasSubstr("\n--overlap-param-gather")));
  EXPECT_THAT(*megatron, HasSubstr("# differs: the parameter gather overlapped without the "
                                   "gradient reduction: Megatron-LM takes --overlap-param-gather "
                                   "only with --overlap-grad-reduce"));
  Result<std::string> nemo = ExportPlan(q, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, Not(HasSubstr("overlap_param_sync: true")));
  EXPECT_THAT(*nemo, HasSubstr("# differs: the parameter gather overlapped without the gradient "
                               "reduction: NeMo takes overlap_param_sync only with "
                               "overlap_grad_sync"));
}

TEST(Export, RecomputingSomeLayersIsMegatronsBlockMethod) {
  std::string some(kLlama8b3dFullRecompute);
  some.replace(some.find("recompute: full"), 15, "recompute: full, recompute_layers: 3");
  Result<std::string> megatron = Export(some.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--recompute-granularity full \\\n--recompute-method block "
                                   "\\\n--recompute-num-layers 3"));
  Result<std::string> nemo = Export(some.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  activations_checkpoint_method: block\n"
                               "  activations_checkpoint_num_layers: 3\n"));
  Result<std::string> titan = Export(some.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("# differs: recompute_layers 3"));
}

TEST(Export, TheLossKernelsMapToEachFrameworksFusion) {
  for (const auto& [loss, megatron, nemo] :
       {std::tuple{"megatron-fused", "--cross-entropy-fusion-impl native",
                   "  cross_entropy_loss_fusion: true\n"},
        std::tuple{"te", "--cross-entropy-fusion-impl te", "# differs: cross_entropy te:"}}) {
    SCOPED_TRACE(loss);
    std::string yaml(kLlama8b3dFullRecompute);
    yaml.replace(yaml.find("global_batch: 16}"), 17,
                 std::string("global_batch: 16, cross_entropy: ") + loss + "}");
    Result<std::string> m = Export(yaml.c_str(), ExportTarget::kMegatron);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_THAT(*m, HasSubstr("--cross-entropy-loss-fusion \\\n"));
    EXPECT_THAT(*m, HasSubstr(megatron));
    Result<std::string> n = Export(yaml.c_str(), ExportTarget::kNemo);
    ASSERT_TRUE(n.ok()) << n.message();
    EXPECT_THAT(*n, HasSubstr(nemo));
  }
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kNemo);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("cross_entropy")));
}

TEST(Export, AnAttentionKernelThePlanChoosesIsWrittenOrNamedAsADifference) {
  std::string yaml(kLlama8b3dFullRecompute);
  yaml.replace(yaml.find("global_batch: 16}"), 17, "global_batch: 16, attention: flash2}");
  Result<std::string> m = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, HasSubstr("--attention-backend flash \\\n"));
  Result<std::string> n = Export(yaml.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, HasSubstr("  attention_backend: flash\n"));
  Result<std::string> t = Export(yaml.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, HasSubstr("# differs: attention flash2: torchtitan's attention is PyTorch's"));
  // Left to the stack, no export names an attention kernel.
  for (ExportTarget target :
       {ExportTarget::kMegatron, ExportTarget::kNemo, ExportTarget::kTorchtitan}) {
    Result<std::string> plain = Export(kLlama8b3dFullRecompute, target);
    ASSERT_TRUE(plain.ok()) << plain.message();
    EXPECT_THAT(*plain, Not(HasSubstr("attention-backend")));
    EXPECT_THAT(*plain, Not(HasSubstr("attention_backend")));
    EXPECT_THAT(*plain, Not(HasSubstr("attention flash")));
  }
}

TEST(Export, AnFp8RecipeIsWrittenOrNamedAsADifference) {
  std::string yaml(kLlama8b3dFullRecompute);
  yaml.replace(yaml.find("precision: bf16"), 15, "precision: fp8");
  Result<std::string> delayed = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(delayed.ok()) << delayed.message();
  EXPECT_THAT(*delayed, Not(HasSubstr("--fp8-recipe")));  // Megatron-LM's default
  Result<std::string> titan_delayed = Export(yaml.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan_delayed.ok()) << titan_delayed.message();
  EXPECT_THAT(*titan_delayed, HasSubstr("# differs: fp8_recipe delayed: torchtitan's float8"));
  yaml.replace(yaml.find("global_batch: 16}"), 17, "global_batch: 16, fp8_recipe: current}");
  Result<std::string> m = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, HasSubstr("--fp8-format hybrid \\\n--fp8-recipe tensorwise"));
  Result<std::string> n = Export(yaml.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, HasSubstr("# differs: fp8_recipe current: megatron_gpt_config.yaml"));
  Result<std::string> t = Export(yaml.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, Not(HasSubstr("fp8_recipe")));
}

TEST(Export, UnfusedSoftmaxAndFp8CastsAreWrittenOrNamedAsDifferences) {
  // Unfused attention with its scale, mask and softmax unfused: Megatron's switch for it.
  std::string yaml(kLlama8b3dFullRecompute);
  yaml.replace(yaml.find("global_batch: 16}"), 17,
               "global_batch: 16, attention: unfused, softmax: scale-mask-softmax}");
  Result<std::string> m = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, HasSubstr("--no-masked-softmax-fusion"));
  Result<std::string> n = Export(yaml.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, HasSubstr("  masked_softmax_fusion: false\n"));
  Result<std::string> t = Export(yaml.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, HasSubstr("# differs: softmax scale-mask-softmax: torchtitan has no switch"));
  // Without a mask no framework's GPT runs it.
  yaml.replace(yaml.find("scale-mask-softmax"), 18, "scale-softmax");
  m = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, Not(HasSubstr("--no-masked-softmax-fusion")));
  EXPECT_THAT(*m, HasSubstr("# differs: softmax scale-softmax: Megatron-LM's GPT attention masks"));
  // fp8 inputs: Megatron-Core's norms write QKV's and fc1's, fc2's linear casts its own (the
  // megatron-core stack's norm); torchao's float8 linears cast every one (linear).
  std::string fp8(kLlama8b3dFullRecompute);
  fp8.replace(fp8.find("precision: bf16"), 15, "precision: fp8");
  n = Export(fp8.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, Not(HasSubstr("fp8_cast")));
  t = Export(fp8.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, HasSubstr("# differs: fp8_cast norm: torchtitan casts as fp8_cast linear does"));
  fp8.replace(fp8.find("global_batch: 16}"), 17, "global_batch: 16, fp8_cast: linear}");
  n = Export(fp8.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, HasSubstr("# differs: fp8_cast linear: NeMo casts as fp8_cast norm does "
                            "(Megatron-Core's layers: TELayerNormColumnParallelLinear"));
  t = Export(fp8.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, Not(HasSubstr("fp8_cast")));
  // Left to the stack, nothing is said.
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kMegatron);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("softmax")));
  EXPECT_THAT(*plain, Not(HasSubstr("fp8_cast")));  // bf16
}

TEST(Export, DropoutAndItsFusionAreWrittenAsThePlanRunsThem) {
  // The megatron-core stack runs no dropout, where Megatron-LM and NeMo default to 0.1.
  Result<std::string> m = Export(kLlama8b3dFullRecompute, ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, HasSubstr("--hidden-dropout 0 \\\n--attention-dropout 0 \\\n"));
  EXPECT_THAT(*m, Not(HasSubstr("--no-bias-dropout-fusion")));
  Result<std::string> n = Export(kLlama8b3dFullRecompute, ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, HasSubstr("  hidden_dropout: 0.0\n  attention_dropout: 0.0\n"));
  EXPECT_THAT(*n, Not(HasSubstr("bias_dropout_add_fusion")));
  Result<std::string> t = Export(kLlama8b3dFullRecompute, ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, Not(HasSubstr("dropout")));
  // With dropout on, unfused: Megatron's defaults, its fusion off; torchtitan's Llama has none.
  std::string yaml(kLlama8b3dFullRecompute);
  yaml.replace(yaml.find("global_batch: 16}"), 17,
               "global_batch: 16, dropout: true, fused_bias_dropout_add: false}");
  m = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_THAT(*m, Not(HasSubstr("-dropout 0")));
  EXPECT_THAT(*m, HasSubstr("--no-bias-dropout-fusion"));
  n = Export(yaml.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_THAT(*n, Not(HasSubstr("_dropout: 0.0")));
  EXPECT_THAT(*n, HasSubstr("  bias_dropout_add_fusion: false\n"));
  t = Export(yaml.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_THAT(*t, HasSubstr("dropout"));
}

TEST(Export, UnevenStagesTellMegatronHowTheyAreCut) {
  // 126 layers on pp 16: 7, 8 x 14, 7 (equal middle stages): the first and last stage's counts.
  const std::string uneven = Llama405bUneven();
  Result<std::string> megatron = Export(uneven.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--decoder-first-pipeline-num-layers 7 \\\n"
                                   "--decoder-last-pipeline-num-layers 7 \\\n"));
  Result<std::string> nemo = Export(uneven.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  num_layers_in_first_pipeline_stage: 7\n"
                               "  num_layers_in_last_pipeline_stage: 7\n"));
  EXPECT_THAT(*nemo, Not(HasSubstr("# differs: uneven")));
  // 29 layers on pp 4: 7, 8, 7, 7, whose middle stages differ: a layout.
  Result<Plan> plan = ParsePlan(kLlama8b3dFullRecompute, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  Plan p = *plan;
  p.pp = 4, p.dp = 1, p.virtual_stages = 1, p.global_batch = p.micro_batch * 4;
  p.model.layers = 29;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  ASSERT_EQ(ChunkLayers(p), (std::vector<int>{7, 8, 7, 7}));
  Result<std::string> layout = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(layout.ok()) << layout.message();
  EXPECT_THAT(*layout, HasSubstr("--pipeline-model-parallel-layout \"Et*7|t*8|t*7|t*7L\""));
  EXPECT_THAT(*layout, Not(HasSubstr("--decoder-first-pipeline-num-layers")));
  // NeMo checks that the middle stages are equal: it cannot run these, and says so.
  Result<std::string> nemo_layout = ExportPlan(p, ExportTarget::kNemo);
  ASSERT_TRUE(nemo_layout.ok()) << nemo_layout.message();
  EXPECT_THAT(*nemo_layout, HasSubstr("# differs: uneven stages (\"Et*7|t*8|t*7|t*7L\"): NeMo "
                                      "checks"));
  EXPECT_THAT(*nemo_layout, Not(HasSubstr("num_layers_in_first_pipeline_stage")));
  // Over 2 stages NeMo takes the first stage's count alone (its check divides by the stages
  // left): 9 layers on pp 2 are 4 and 5.
  p.pp = 2, p.dp = 2, p.model.layers = 9;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  Result<std::string> two = ExportPlan(p, ExportTarget::kNemo);
  ASSERT_TRUE(two.ok()) << two.message();
  EXPECT_THAT(*two, HasSubstr(fmt::format("  num_layers_in_first_pipeline_stage: {}\n",
                                          ChunkLayers(p).front())));
  EXPECT_THAT(*two, Not(HasSubstr("num_layers_in_last_pipeline_stage")));
  // Even stages need neither.
  p.model.layers = 32;
  Result<std::string> even = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(even.ok()) << even.message();
  EXPECT_THAT(*even, Not(HasSubstr("pipeline-num-layers")));
  EXPECT_THAT(*even, Not(HasSubstr("layout")));
}

TEST(Export, SquaredReluMapsToEachFramework) {
  // A Nemotron-4-like MLP (LayerNorm, no gating, relu(x)^2): Megatron's --squared-relu, NeMo's
  // activation key; DeepSpeed-Domino's GPT script and torchtitan's Llama say what they run instead.
  constexpr const char* kSquared =
      R"yaml(model: {name: sq, layers: 2, hidden: 256, heads: 8, ffn: 1024, vocab: 1000, seq_len: 128, activation: squared-relu, norm: layernorm, bias: false, tied_embeddings: false}
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 128, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";
  Result<std::string> megatron = Export(kSquared, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--squared-relu"));
  EXPECT_THAT(*megatron, Not(HasSubstr("--swiglu")));
  // Without biases Megatron-LM turns the bias-activation fusion off itself; with them it must be
  // told (Megatron-Core fuses only GeLU and SwiGLU).
  EXPECT_THAT(*megatron, Not(HasSubstr("--no-bias-gelu-fusion")));
  std::string biased(kSquared);
  biased.replace(biased.find("bias: false"), 11, "bias: true");
  Result<std::string> megatron_biased = Export(biased.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron_biased.ok()) << megatron_biased.message();
  EXPECT_THAT(*megatron_biased, HasSubstr("--squared-relu"));
  EXPECT_THAT(*megatron_biased, HasSubstr("--no-bias-gelu-fusion"));
  Result<std::string> nemo = Export(kSquared, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  activation: squared-relu\n"));
  EXPECT_THAT(*nemo, HasSubstr("  bias_activation_fusion: false\n"));
  Result<std::string> deepspeed = Export(kSquared, ExportTarget::kDeepSpeed);
  ASSERT_TRUE(deepspeed.ok()) << deepspeed.message();
  EXPECT_THAT(*deepspeed,
              HasSubstr("# differs: squared-ReLU MLP: DeepSpeed-Domino's layers run GeLU (over "
                        "ffn 1024)\n"));
  EXPECT_THAT(*deepspeed, Not(HasSubstr("--squared-relu")));
  EXPECT_THAT(*deepspeed, HasSubstr("--disable-bias-linear"));
  EXPECT_THAT(*deepspeed, HasSubstr("--untie-embeddings-and-output-weights"));
  Result<std::string> titan = Export(kSquared, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("a squared-ReLU MLP"));
  EXPECT_THAT(*titan, Not(HasSubstr("a GeLU MLP")));
}

}  // namespace
}  // namespace domino
