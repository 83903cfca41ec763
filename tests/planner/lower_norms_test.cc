#include <gtest/gtest.h>

#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "models/model_counts.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "planner/stack.h"
#include "tests/planner/test_plans.h"

// The norms a model runs besides each layer's two: a QK-norm (ModelSpec::qk_norm, Qwen3's and
// Gemma 3's q_norm and k_norm), its ops, its tensors, the activations it keeps and its gains; and
// post-norms (ModelSpec::post_norms, Gemma 2's and Gemma 3's), their ops and what they keep; and
// the memory of a soft cap on the logits (ModelSpec::logit_softcap), whose passes the loss ops
// carry (lower_stack_test.cc).
namespace domino {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

TEST(LowerNormsTest, ANormOnEachHeadOfQAndKRunsBetweenQkvAndTheRotaryEmbeddings) {
  // gpt3-2.7b at tp 8 with rotary positions: 4 query heads and 4 key heads of 80 a rank, 4 x 256
  // tokens in bf16, in one slice or two. A pass over Q and K of a slice is 1024 / p x 640 x 2
  // bytes: the norm reads and writes them (2 passes), its backward reads them and their gradients
  // and writes the input's (3).
  for (int p : {1, 2}) {
    SCOPED_TRACE(p);
    PlanKnobs k;
    k.row_split = p;
    Plan plan = MakePlan(k);
    plan.model.positions = Positions::kRotary;
    plan.model.qk_norm = true;
    Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    const double pass = 1024.0 / p * 640 * 2;
    std::vector<OpFunc> order;  // slice 0's attention ops in schedule order
    int norms = 0, grads = 0;
    for (const Op& op : s->ops()) {
      if (op.func == OpFunc::kQkNorm || op.func == OpFunc::kQkNormGrad) {
        const bool backward = op.func == OpFunc::kQkNormGrad;
        (backward ? grads : norms) += 1;
        EXPECT_EQ(op.kind, OpKind::kElementwise);
        EXPECT_DOUBLE_EQ(op.bytes, (backward ? 3 : 2) * pass);
        EXPECT_EQ(std::tuple(op.heads, op.kv_heads, op.head_dim), std::tuple(4, 4, 80));
        // Q and K of the slice's rows in QKV (or its gradient), and the kept input.
        const std::span<const TensorUse> reads = s->reads(op), writes = s->writes(op);
        ASSERT_EQ(reads.size(), backward ? 3u : 2u);
        ASSERT_EQ(writes.size(), backward ? 3u : 2u);
        const TensorUse& qk_of_qkv = backward ? reads[1] : reads[0];
        EXPECT_EQ(qk_of_qkv.view.col_begin, 0);
        EXPECT_EQ(qk_of_qkv.view.col_end, 640);
        EXPECT_EQ(qk_of_qkv.view.row_end - qk_of_qkv.view.row_begin, 1024 / p);
        EXPECT_EQ(writes[0].tensor, qk_of_qkv.tensor);  // in place
        EXPECT_EQ(writes[0].view, qk_of_qkv.view);
      }
      if (op.tags.row_slice > 0) continue;
      for (OpFunc f :
           {OpFunc::kQkv, OpFunc::kQkNorm, OpFunc::kRope, OpFunc::kAttn, OpFunc::kAttnGrad,
            OpFunc::kRopeGrad, OpFunc::kQkNormGrad, OpFunc::kQkvGradInput})
        if (op.func == f) order.push_back(f);
    }
    EXPECT_EQ(norms, p);
    EXPECT_EQ(grads, p);
    EXPECT_EQ(order, (std::vector{OpFunc::kQkv, OpFunc::kQkNorm, OpFunc::kRope, OpFunc::kAttn,
                                  OpFunc::kAttnGrad, OpFunc::kRopeGrad, OpFunc::kQkNormGrad,
                                  OpFunc::kQkvGradInput}));
  }
  // Without qk_norm: none.
  Result<Schedule> plain = LowerStage(MakePlan({}), LowerOptions{1, false, false, true, true});
  ASSERT_TRUE(plain.ok()) << plain.message();
  for (const Op& op : plain->ops())
    EXPECT_TRUE(op.func != OpFunc::kQkNorm && op.func != OpFunc::kQkNormGrad);
}

TEST(LowerNormsTest, ItsTensorsMapOntoTheWholeModelsQAndK) {
  // tp 8: a rank's kept Q and K are 320 + 320 columns of the whole model's 2560 + 2560; the two
  // gains, 80 each, are whole on every rank and their gradient a partial sum over TP (each rank
  // normalizes its own heads).
  PlanKnobs k;
  Plan plan = MakePlan(k);
  plan.model.qk_norm = true;
  Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, false, true, true});
  ASSERT_TRUE(s.ok()) << s.message();
  auto find = [&](TensorKind kind, bool gradient) {
    TensorRole role;
    role.kind = kind, role.slot = TensorSlot::kQkNorm, role.gradient = gradient, role.layer = 0;
    const int32_t id = FindTensor(s->tensors(), role);
    EXPECT_GE(id, 0) << RoleName(role);
    return id >= 0 ? s->tensors()[id] : Tensor{};
  };
  const Tensor kept = find(TensorKind::kActivation, false);
  EXPECT_EQ(RoleName(kept.role), "l0.qk_norm");
  EXPECT_EQ(std::tuple(kept.rows, kept.cols, kept.shard, kept.part_cols),
            std::tuple(int64_t{1024}, int64_t{640}, Shard::kQkCols, int64_t{320}));
  EXPECT_EQ(WholeShape(kept, 8).cols, 5120);
  EXPECT_EQ(WholeIndex(kept, 3, 8, 5, 7).cols, 3 * 320 + 7);           // Q
  EXPECT_EQ(WholeIndex(kept, 3, 8, 5, 320 + 7).cols, 2560 + 960 + 7);  // K
  const Tensor gains = find(TensorKind::kNormWeight, false);
  EXPECT_EQ(RoleName(gains.role), "l0.qk_norm.w");
  EXPECT_EQ(std::tuple(gains.rows, gains.cols, gains.shard),
            std::tuple(int64_t{1}, int64_t{160}, Shard::kReplicated));
  EXPECT_EQ(find(TensorKind::kNormWeight, true).shard, Shard::kPartialSum);
  EXPECT_EQ(find(TensorKind::kActivation, true).shard, Shard::kQkCols);
}

TEST(LowerNormsTest, ItKeepsItsInputAndAddsTwoGainsALayer) {
  // gpt3-2.7b at tp 8, 4 x 256 tokens, flash attention: the norm keeps Q and K as they came, 2 x
  // (2560 + 2560) bytes a token over 8 ranks: 1024 x 1280 bytes a layer.
  PlanKnobs k;
  Plan plan = MakePlan(k);
  const MemoryEstimate plain = EstimateMemory(plan, /*flash_attention=*/true);
  plan.model.qk_norm = true;
  const MemoryEstimate normed = EstimateMemory(plan, /*flash_attention=*/true);
  EXPECT_DOUBLE_EQ(normed.activation_bytes - plain.activation_bytes, 32 * 1024.0 * 1280);
  // Its gains: a LayerNorm's scale and shift over a head (80) for Q and for K; an RMSNorm's scale.
  for (const auto& [norm, gains] :
       {std::tuple{Norm::kLayerNorm, 4 * 80}, {Norm::kRmsNorm, 2 * 80}}) {
    ModelSpec m = plan.model;
    m.norm = norm;
    m.qk_norm = false;
    const int64_t without = CountParameters(m).per_layer;
    m.qk_norm = true;
    EXPECT_EQ(CountParameters(m).per_layer - without, gains);
  }
}

TEST(LowerNormsTest, PostNormsAreOpsOfTheirOwnBeforeEachResidualAddAndAfterItsGradient) {
  // gpt3-2.7b's layers (hidden 2560) at tp 8 without SP on megatron-core, two of them, without
  // dropout: one pass over a residual is 1024 tokens x 2560 x 2 bytes. A post-norm reads the
  // branch's output and writes it normalized for the add (2 passes: post_norm1 before residual1,
  // post_norm2 before residual2 or, at the top of a stack without the head, for the next stage);
  // backward it reads that output and the gradient the branch takes and writes the gradient of the
  // output (3 passes), which the row-parallel GEMM's input gradient reads. The residual ops and
  // the norms' backward keep their own bytes.
  const double pass = 1024.0 * 2560 * 2;
  for (bool post : {false, true}) {
    SCOPED_TRACE(post);
    Plan plan = MakePlan(PlanKnobs{});
    plan.dropout = false;
    plan.model.post_norms = post;
    Result<Schedule> s = LowerStage(plan, LowerOptions{2, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    std::map<std::pair<OpFunc, int>, double> bytes;  // by op and layer
    std::map<std::pair<OpFunc, int>, int> count;
    for (const Op& op : s->ops()) {
      bytes[{op.func, op.tags.layer}] += op.bytes;
      ++count[{op.func, op.tags.layer}];
    }
    for (int l = 0; l < 2; ++l) {
      SCOPED_TRACE(l);
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidual1, l}]), 3 * pass);
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kLn2Grad, l}]), 6 * pass);
      for (OpFunc f : {OpFunc::kPostNorm1, OpFunc::kPostNorm2})
        EXPECT_DOUBLE_EQ((bytes[{f, l}]), post ? 2 * pass : 0);
      for (OpFunc f : {OpFunc::kPostNorm1Grad, OpFunc::kPostNorm2Grad}) {
        EXPECT_DOUBLE_EQ((bytes[{f, l}]), post ? 3 * pass : 0);
        EXPECT_EQ((count[{f, l}]), post ? 1 : 0);
      }
    }
    EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidual2, 0}]), 3 * pass);
    EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidualGrad, 1}]), pass);
    // What reads what: the adds take the normalized outputs, and proj's and fc2's input
    // gradients the post-norms' gradients.
    auto reads = [&](OpFunc func, int layer, TensorSlot slot, bool gradient) {
      for (const Op& op : s->ops()) {
        if (op.func != func || op.tags.layer != layer) continue;
        for (const TensorUse& u : s->reads(op)) {
          const TensorRole& r = s->tensors()[u.tensor].role;
          if (r.slot == slot && r.gradient == gradient && r.kind == TensorKind::kActivation)
            return true;
        }
      }
      return false;
    };
    EXPECT_EQ(reads(OpFunc::kResidual1, 1, TensorSlot::kPostNorm1, false), post);
    EXPECT_EQ(reads(OpFunc::kResidual2, 0, TensorSlot::kPostNorm2, false), post);
    EXPECT_EQ(reads(OpFunc::kProjGradInput, 0, TensorSlot::kPostNorm1, true), post);
    EXPECT_EQ(reads(OpFunc::kFc2GradInput, 1, TensorSlot::kPostNorm2, true), post);
    EXPECT_EQ(reads(OpFunc::kFc2GradInput, 1, TensorSlot::kOut, true), !post);
  }
  // With the head: residual2 takes the top layer's normalized MLP output, and the final norm's
  // gradient goes through the post-norm's backward.
  Plan plan = MakePlan(PlanKnobs{});
  plan.model.post_norms = true;
  Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, true, true, true});
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<OpFunc> order;
  for (const Op& op : s->ops())
    if (op.func == OpFunc::kPostNorm2 || op.func == OpFunc::kResidual2 ||
        op.func == OpFunc::kFinalNormGrad || op.func == OpFunc::kPostNorm2Grad ||
        op.func == OpFunc::kFc2GradInput)
      order.push_back(op.func);
  EXPECT_EQ(order,
            (std::vector<OpFunc>{OpFunc::kPostNorm2, OpFunc::kResidual2, OpFunc::kFinalNormGrad,
                                 OpFunc::kPostNorm2Grad, OpFunc::kFc2GradInput}));
}

TEST(LowerNormsTest, PostNormsKeepTheirInputsAndAddTwoNormsALayer) {
  // gpt3-2.7b at tp 8, 4 x 256 tokens: each post-norm keeps its input, 2 bytes a token and hidden
  // unit, whole on every rank without SP (1024 x 2560 x 4 bytes a layer for the two) and split by
  // SP.
  for (bool sp : {false, true}) {
    PlanKnobs k;
    k.sequence_parallel = sp;
    Plan plan = MakePlan(k);
    const double plain = EstimateMemory(plan, /*flash_attention=*/true).activation_bytes;
    plan.model.post_norms = true;
    EXPECT_DOUBLE_EQ(EstimateMemory(plan, /*flash_attention=*/true).activation_bytes - plain,
                     32 * 1024.0 * 2560 * 4 / (sp ? 8 : 1))
        << sp;
  }
  ModelSpec m = MakePlan({}).model;  // LayerNorm: a scale and a shift each
  const int64_t without = CountParameters(m).per_layer;
  m.post_norms = true;
  EXPECT_EQ(CountParameters(m).per_layer - without, 2 * 2 * 2560);
}

TEST(LowerNormsTest, ALogitSoftCapKeepsItsTanhsOutput) {
  // gpt3-2.7b at tp 8, 4 x 256 tokens: the cap's tanh keeps its 16-bit output, 2 bytes a logit of
  // the rank's 50257 / 8 vocabulary.
  Plan plan = MakePlan({});
  const double plain = EstimateMemory(plan).output_bytes;
  plan.model.logit_softcap = 30;
  EXPECT_DOUBLE_EQ(EstimateMemory(plan).output_bytes - plain, 1024.0 * 50257 * 2 / 8);
  // Loss kernels that take the cap as they read the logits keep nothing of it: the backward takes
  // the tanh again (StackSpec::fused_logit_softcap, the executor's).
  plan.stack.fused_logit_softcap = true;
  EXPECT_DOUBLE_EQ(EstimateMemory(plan).output_bytes, plain);
  Result<StackSpec> executor = LoadStack("domino");
  ASSERT_TRUE(executor.ok()) << executor.message();
  EXPECT_TRUE(executor->fused_logit_softcap);
}

}  // namespace
}  // namespace domino
