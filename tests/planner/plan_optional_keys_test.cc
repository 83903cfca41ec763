// The keys a plan writes only when they differ from their default (or the stack's), so that
// other plans keep their YAML: each reads back, and a bad value names its key and line.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "planner/plan.h"
#include "tests/planner/example_plan.h"

namespace domino {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PlanToYamlTest, GradReduceIsWrittenOnlyWhenThePlanSetsIt) {
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_FALSE(plain->grad_reduce.has_value());
  EXPECT_THAT(PlanToYaml(*plain), HasSubstr("distributed_optimizer: false}\n"));
  Result<Plan> set = ParsePlan(Edit({{"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  grad_reduce: param\n"}}),
                               "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->grad_reduce, std::optional<GradReduce>(GradReduce::kParam));
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("distributed_optimizer: false, grad_reduce: param}\n"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->grad_reduce, set->grad_reduce);
  // A value outside the three names the key, its line and the allowed values.
  Result<Plan> bad = ParsePlan(Edit({{"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  grad_reduce: bf16\n"}}),
                               "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:21"));
  EXPECT_THAT(bad.message(), HasSubstr("grad_reduce"));
  EXPECT_THAT(bad.message(), HasSubstr("fp16-param"));
}

TEST(PlanToYamlTest, GradSyncIsWrittenOnlyWhenThePlanSetsIt) {
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_FALSE(plain->grad_sync.has_value());
  EXPECT_EQ(plain->gradient_sync(), plain->stack.grad_sync);
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("grad_sync")));
  Result<Plan> set = ParsePlan(Edit({{"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  grad_sync: megatron\n"}}),
                               "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->gradient_sync(), GradSync::kMegatron);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("distributed_optimizer: false, grad_sync: megatron}\n"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->grad_sync, set->grad_sync);
  Result<Plan> bad = ParsePlan(Edit({{"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  grad_sync: aligned\n"}}),
                               "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:21"));
  EXPECT_THAT(bad.message(), HasSubstr("grad_sync"));
  EXPECT_THAT(bad.message(), HasSubstr("megatron-aligned"));
}

TEST(PlanToYamlTest, RecomputeLayersIsWrittenOnlyWhenSetAndReadsBack) {
  Result<Plan> set = ParsePlan(
      Edit({{"  recompute: none\n", "  recompute: full\n  recompute_layers: 5\n"}}), "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->recompute_layers, 5);
  EXPECT_TRUE(set->recomputes_layer(4));
  EXPECT_FALSE(set->recomputes_layer(5));
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("memory: {recompute: full, recompute_layers: 5, distributed_"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->recompute_layers, 5);
  Result<Plan> bad = ParsePlan(
      Edit({{"  recompute: none\n", "  recompute: none\n  recompute_layers: 5\n"}}), "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("memory.recompute_layers"));
  EXPECT_THAT(bad.message(), HasSubstr("recompute: full"));
}

TEST(PlanToYamlTest, CrossEntropyIsWrittenOnlyWhenSetAndReadsBack) {
  Result<Plan> set = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  cross_entropy: megatron-fused\n"}}),
      "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->cross_entropy, std::optional<CrossEntropy>(CrossEntropy::kMegatronFused));
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, cross_entropy: megatron-fused}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->cross_entropy, set->cross_entropy);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("cross_entropy")));
  Result<Plan> bad =
      ParsePlan(Edit({{"  global_batch: 16\n", "  global_batch: 16\n  cross_entropy: liger\n"}}),
                "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:8"));
  EXPECT_THAT(bad.message(), HasSubstr("megatron-fused"));
}

TEST(PlanToYamlTest, AttentionIsWrittenOnlyWhenSetAndReadsBack) {
  Result<Plan> set = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  attention: flash2\n"}}), "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->attention, std::optional<AttentionKernel>(AttentionKernel::kFlash2));
  EXPECT_EQ(set->attention_kernel(), AttentionKernel::kFlash2);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, attention: flash2}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->attention, set->attention);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_FALSE(plain->attention.has_value());
  EXPECT_EQ(plain->attention_kernel(), plain->stack.attention);  // unset: the stack's
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("attention")));
  Result<Plan> bad = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  attention: flash3\n"}}), "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:8"));
  EXPECT_THAT(bad.message(), HasSubstr("flash2"));
}

// Heads wider than fused kernels take (FlashAttention 2's and cuDNN's 256) run the stack's
// attention unfused; a plan that asks for a fused kernel there is refused at its key.
TEST(PlanToYamlTest, HeadsWiderThanFusedKernelsTakeRunUnfused) {
  constexpr std::string_view kWide =
      "model: {name: w, layers: 2, hidden: 1024, heads: 32, kv_heads: 32, head_dim: 512, ffn: "
      "4096, vocab: 1000, seq_len: 1024, activation: swiglu, norm: rmsnorm}";
  Result<Plan> wide = ParsePlan(Edit({{"model: gpt3-13b", kWide}}), "plan.yaml");
  ASSERT_TRUE(wide.ok()) << wide.message();
  EXPECT_EQ(wide->stack.attention, AttentionKernel::kFlash);
  EXPECT_EQ(wide->attention_kernel(), AttentionKernel::kUnfused);
  EXPECT_THAT(PlanToYaml(*wide), Not(HasSubstr("attention")));
  Result<Plan> flash =
      ParsePlan(Edit({{"model: gpt3-13b", kWide},
                      {"  global_batch: 16\n", "  global_batch: 16\n  attention: flash\n"}}),
                "plan.yaml");
  ASSERT_FALSE(flash.ok());
  EXPECT_THAT(flash.message(),
              HasSubstr("training.attention: flash kernels take heads up to 256 wide "
                        "(FlashAttention 2's and cuDNN's); the model's are 512"));
  std::string at256(kWide);
  at256.replace(at256.find("head_dim: 512"), 13, "head_dim: 256");
  Result<Plan> fits = ParsePlan(Edit({{"model: gpt3-13b", at256}}), "plan.yaml");
  ASSERT_TRUE(fits.ok()) << fits.message();
  EXPECT_EQ(fits->attention_kernel(), AttentionKernel::kFlash);
  // Context parallelism rings fused kernels only (Transformer Engine).
  Result<Plan> ring = ParsePlan(
      Edit({{"model: gpt3-13b", kWide}, {"  tp: 32\n", "  tp: 16\n  cp: 2\n"}}), "plan.yaml");
  ASSERT_FALSE(ring.ok());
  EXPECT_THAT(ring.message(),
              HasSubstr("parallel.cp: context parallelism needs Transformer Engine's fused "
                        "attention (it runs no other under it); the plan's attention is "
                        "unfused (its heads, 512 wide, are too wide for the fused kernels)"));
  EXPECT_TRUE(ParsePlan(Edit({{"model: gpt3-13b", at256}, {"  tp: 32\n", "  tp: 16\n  cp: 2\n"}}),
                        "plan.yaml")
                  .ok());
}

// A soft cap on the attention's scores runs the stack's capped_attention where its own kernel is
// fused and takes no cap: Megatron-Bridge's FlexAttention on megatron-core, its unfused attention
// when dropout runs; a plan's own kernel wins. Neither runs under context parallelism.
TEST(PlanToYamlTest, ASoftCappedAttentionRunsTheStacksCappedKernel) {
  constexpr std::string_view kCapped =
      "model: {name: c, layers: 2, hidden: 1024, heads: 8, kv_heads: 8, head_dim: 256, ffn: "
      "4096, vocab: 1000, seq_len: 1024, activation: geglu, norm: rmsnorm, attention_softcap: 50}";
  Result<Plan> capped = ParsePlan(Edit({{"model: gpt3-13b", kCapped},
                                        {"  tp: 32\n", "  tp: 8\n"},
                                        {"dgx-h100:4", "dgx-h100:1\nstack: megatron-core"}}),
                                  "plan.yaml");
  ASSERT_TRUE(capped.ok()) << capped.message();
  EXPECT_EQ(capped->stack.attention, AttentionKernel::kFlash);
  EXPECT_EQ(capped->stack.capped_attention, AttentionKernel::kFlex);
  EXPECT_EQ(capped->attention_kernel(), AttentionKernel::kFlex);
  Plan dropout = *capped;
  dropout.dropout = true;
  EXPECT_EQ(dropout.attention_kernel(), AttentionKernel::kUnfused);
  Plan own = *capped;
  own.attention = AttentionKernel::kFlash2;
  EXPECT_EQ(own.attention_kernel(), AttentionKernel::kFlash2);
  Plan uncapped = *capped;
  uncapped.model.attention_softcap = 0;
  EXPECT_EQ(uncapped.attention_kernel(), AttentionKernel::kFlash);
  // The executor's stack runs its unfused kernels, cap or not.
  Result<Plan> domino = ParsePlan(Edit({{"model: gpt3-13b", kCapped},
                                        {"  tp: 32\n", "  tp: 8\n"},
                                        {"dgx-h100:4", "dgx-h100:1\nstack: domino"}}),
                                  "plan.yaml");
  ASSERT_TRUE(domino.ok()) << domino.message();
  EXPECT_EQ(domino->attention_kernel(), AttentionKernel::kUnfused);
  EXPECT_TRUE(domino->stack.fused_attention_softcap);
  Result<Plan> ring = ParsePlan(Edit({{"model: gpt3-13b", kCapped},
                                      {"  tp: 32\n", "  tp: 4\n  cp: 2\n"},
                                      {"dgx-h100:4", "dgx-h100:1\nstack: megatron-core"}}),
                                "plan.yaml");
  ASSERT_FALSE(ring.ok());
  EXPECT_THAT(ring.message(),
              HasSubstr("parallel.cp: context parallelism needs Transformer Engine's fused "
                        "attention (it runs no other under it); the plan's attention is flex (the "
                        "model's attention_softcap, which the fused kernels do not take)"));
}

TEST(PlanToYamlTest, CudaGraphsAreWrittenOnlyWhenSetAndReadBack) {
  Result<Plan> set = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  cuda_graphs: true\n"}}), "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->cuda_graphs, std::optional<bool>(true));
  EXPECT_TRUE(set->launches_from_graphs());
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, cuda_graphs: true}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->cuda_graphs, set->cuda_graphs);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  // Unset: the stack's, and not written.
  EXPECT_EQ(plain->launches_from_graphs(), plain->stack.cuda_graphs);
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("cuda_graphs")));
  Result<Plan> bad = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  cuda_graphs: 2\n"}}), "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:8"));
  EXPECT_THAT(bad.message(), HasSubstr("cuda_graphs"));
}

TEST(PlanToYamlTest, DropoutAndItsFusionAreWrittenOnlyWhenSetAndReadBack) {
  Result<Plan> set = ParsePlan(Edit({{"  global_batch: 16\n",
                                      "  global_batch: 16\n  dropout: true\n"
                                      "  fused_bias_dropout_add: false\n"}}),
                               "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->dropout, std::optional<bool>(true));
  EXPECT_TRUE(set->applies_dropout());
  EXPECT_FALSE(set->fuses_bias_dropout_add());
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, dropout: true, fused_bias_dropout_add: false}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->dropout, set->dropout);
  EXPECT_EQ(back->fused_bias_dropout_add, set->fused_bias_dropout_add);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_FALSE(plain->dropout.has_value());
  // Unset: the stack's.
  EXPECT_EQ(plain->applies_dropout(), plain->stack.dropout);
  EXPECT_EQ(plain->fuses_bias_dropout_add(), plain->stack.fused_bias_dropout_add);
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("dropout")));
  Result<Plan> bad = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  dropout: 0.1\n"}}), "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:8"));
  EXPECT_THAT(bad.message(), HasSubstr("dropout"));
  // The MLP's dropout, turned off: written, read back, and only where the plan has dropout.
  Result<Plan> attention_only =
      ParsePlan(Edit({{"  global_batch: 16\n",
                       "  global_batch: 16\n  dropout: true\n  mlp_dropout: false\n"}}),
                "plan.yaml");
  ASSERT_TRUE(attention_only.ok()) << attention_only.message();
  EXPECT_TRUE(attention_only->branch_dropout(true));
  EXPECT_FALSE(attention_only->branch_dropout(false));
  const std::string written = PlanToYaml(*attention_only);
  EXPECT_THAT(written, HasSubstr("dropout: true, mlp_dropout: false"));
  Result<Plan> again = ParsePlan(written, "back.yaml");
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->mlp_dropout, std::optional<bool>(false));
  EXPECT_TRUE(plain->branch_dropout(false) == plain->applies_dropout());
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("mlp_dropout")));
}

TEST(PlanToYamlTest, Fp8RecipeIsWrittenOnlyWhenSetAndNeedsFp8) {
  Result<Plan> set =
      ParsePlan(Edit({{"precision: bf16\n", "precision: fp8\n"},
                      {"  global_batch: 16\n", "  global_batch: 16\n  fp8_recipe: current\n"}}),
                "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->fp8_recipe, std::optional<Fp8Recipe>(Fp8Recipe::kCurrent));
  EXPECT_EQ(set->fp8_scaling(), Fp8Recipe::kCurrent);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, fp8_recipe: current}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->fp8_recipe, set->fp8_recipe);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(plain->fp8_scaling(), Fp8Recipe::kDelayed);  // unset: delayed
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("fp8_recipe")));
  // A recipe for a plan that is not fp8 is refused, naming the key.
  Result<Plan> bf16 = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  fp8_recipe: delayed\n"}}), "plan.yaml");
  ASSERT_FALSE(bf16.ok());
  EXPECT_THAT(bf16.message(), HasSubstr("training.fp8_recipe"));
  EXPECT_THAT(bf16.message(), HasSubstr("needs precision fp8"));
  Result<Plan> bad =
      ParsePlan(Edit({{"precision: bf16\n", "precision: fp8\n"},
                      {"  global_batch: 16\n", "  global_batch: 16\n  fp8_recipe: mxfp8\n"}}),
                "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:8"));
  EXPECT_THAT(bad.message(), HasSubstr("current"));
}

TEST(PlanToYamlTest, SoftmaxAndFp8CastAreWrittenOnlyWhenSetAndReadBack) {
  Result<Plan> set =
      ParsePlan(Edit({{"precision: bf16\n", "precision: fp8\n"},
                      {"  global_batch: 16\n",
                       "  global_batch: 16\n  attention: unfused\n  softmax: scale-softmax\n"
                       "  fp8_cast: linear\n"}}),
                "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->softmax_kernels(), SoftmaxKernels::kScaleSoftmax);
  EXPECT_EQ(set->fp8_casts(), Fp8Cast::kLinear);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("global_batch: 16, attention: unfused, softmax: scale-softmax, "
                              "fp8_cast: linear}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->softmax, set->softmax);
  EXPECT_EQ(back->fp8_cast, set->fp8_cast);
  // Unset: the stack's (megatron-core's norm writes fp8, its own activation 16 bits).
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(plain->softmax_kernels(), SoftmaxKernels::kFused);
  EXPECT_EQ(plain->fp8_casts(), Fp8Cast::kNorm);
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("softmax")));
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("fp8_cast")));
  // The softmax's kernels are unfused attention's; a value outside the three names its line.
  Result<Plan> flash = ParsePlan(
      Edit({{"  global_batch: 16\n", "  global_batch: 16\n  softmax: scale-mask-softmax\n"}}),
      "plan.yaml");
  ASSERT_FALSE(flash.ok());
  EXPECT_THAT(flash.message(), HasSubstr("training.softmax"));
  EXPECT_THAT(flash.message(), HasSubstr("the plan's attention is flash"));
  Result<Plan> bad =
      ParsePlan(Edit({{"  global_batch: 16\n",
                       "  global_batch: 16\n  attention: unfused\n  softmax: online\n"}}),
                "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:9"));
  EXPECT_THAT(bad.message(), HasSubstr("scale-softmax"));
}

TEST(PlanToYamlTest, FsdpIsWrittenOnlyWhenOnAndReadsBack) {
  Result<Plan> set = ParsePlan(
      Edit({{"  tp: 32\n", "  tp: 16\n"},
            {"  dp: 1\n", "  dp: 2\n"},
            {"  global_batch: 16\n", "  global_batch: 32\n"},
            {"  distributed_optimizer: false\n", "  distributed_optimizer: true\n  fsdp: true\n"}}),
      "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_TRUE(set->fsdp);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml,
              HasSubstr("memory: {recompute: none, distributed_optimizer: true, fsdp: true}"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_TRUE(back->fsdp);
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("fsdp")));
  // Without the distributed optimizer, loading names the key and its line.
  Result<Plan> bad = ParsePlan(Edit({{"  tp: 32\n", "  tp: 16\n"},
                                     {"  dp: 1\n", "  dp: 2\n"},
                                     {"  global_batch: 16\n", "  global_batch: 32\n"},
                                     {"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  fsdp: true\n"}}),
                               "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:21"));
  EXPECT_THAT(bad.message(), HasSubstr("memory.fsdp"));
  EXPECT_THAT(bad.message(), HasSubstr("distributed_optimizer: true"));
}

TEST(PlanToYamlTest, APipelineSplitIsWrittenOnlyWhenItCountsAnEnd) {
  Result<Plan> plan = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->pipeline_split, PipelineSplit::kLayers);
  EXPECT_THAT(PlanToYaml(*plan), Not(HasSubstr("pipeline_split")));
  for (PipelineSplit split :
       {PipelineSplit::kEmbedding, PipelineSplit::kLoss, PipelineSplit::kEnds}) {
    Plan p = *plan;
    p.pipeline_split = split;
    const std::string yaml = PlanToYaml(p);
    EXPECT_THAT(yaml, HasSubstr(fmt::format(", pipeline_split: {}}}", PipelineSplitName(split))));
    Result<Plan> back = ParsePlan(yaml, "back.yaml");
    ASSERT_TRUE(back.ok()) << back.message() << "\n" << yaml;
    EXPECT_EQ(back->pipeline_split, split);
  }
  Result<Plan> bad = ParsePlan(
      Edit({{"virtual_stages: 1", "virtual_stages: 1\n  pipeline_split: both"}}), "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("parallel.pipeline_split"));
  EXPECT_THAT(bad.message(), HasSubstr("layers"));
}

TEST(PlanToYamlTest, ABf16OptimizerStateIsWrittenOnlyWhenSetAndReadsBack) {
  Result<Plan> plain = ParsePlan(kExamplePlan, "plan.yaml");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(plain->optimizer_dtype, Dtype::kFp32);
  EXPECT_THAT(PlanToYaml(*plain), Not(HasSubstr("optimizer_dtype")));
  Result<Plan> set =
      ParsePlan(Edit({{"  distributed_optimizer: false\n",
                       "  distributed_optimizer: false\n  optimizer_dtype: bf16\n"}}),
                "plan.yaml");
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->optimizer_dtype, Dtype::kBf16);
  const std::string yaml = PlanToYaml(*set);
  EXPECT_THAT(yaml, HasSubstr("distributed_optimizer: false, optimizer_dtype: bf16}\n"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->optimizer_dtype, Dtype::kBf16);
  // fp8 is a type, but no optimizer keeps its whole state in it.
  Result<Plan> bad = ParsePlan(Edit({{"  distributed_optimizer: false\n",
                                      "  distributed_optimizer: false\n  optimizer_dtype: fp8\n"}}),
                               "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:21"));
  EXPECT_THAT(bad.message(), HasSubstr("optimizer_dtype"));
  EXPECT_THAT(bad.message(), HasSubstr("bf16"));
}

}  // namespace
}  // namespace domino
