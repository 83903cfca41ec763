#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/lower.h"
#include "planner/memory_model.h"
#include "tests/planner/test_plans.h"

// The lowering as each software stack runs its kernels (planner/catalog/stacks): the loss, the
// activation and the rotary embedding's passes, and when the backward's collectives launch.
namespace domino {
namespace {

using testing_util::LowerOk;
using testing_util::MakePlan;
using testing_util::PlanKnobs;

TEST(LowerStackTest, TheLossMovesTheBytesOfItsStacksCrossEntropy) {
  // gpt3-2.7b's vocab 50257 padded to 128 x tp = 1024: 50 x 1024 = 51200 columns, 6400 a rank;
  // 4 x 256 tokens, bf16. Megatron's vocab-parallel cross-entropy: 38 bytes per logit forward
  // (fp32 copy, max, subtract, exp, sum, divide), 14 backward (scale, cast back); domino's own
  // kernels: one read forward, a read and a write backward.
  const double logits = 1024.0 * 6400;
  for (const auto& [stack, forward, backward] :
       {std::tuple{"megatron-core", 38.0, 14.0}, std::tuple{"megatron-2021", 38.0, 14.0},
        std::tuple{"domino", 2.0, 4.0}}) {
    SCOPED_TRACE(stack);
    PlanKnobs k;
    k.stack = stack;
    Result<Schedule> s = LowerStage(MakePlan(k), LowerOptions{-1, true, true, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    int seen = 0;
    for (const Op& op : s->ops()) {
      if (op.func == OpFunc::kLoss) {
        EXPECT_DOUBLE_EQ(op.bytes, forward * logits);
        ++seen;
      }
      if (op.func == OpFunc::kLossGrad) {
        EXPECT_DOUBLE_EQ(op.bytes, backward * logits);
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2);
  }
  // A plan's own loss kernels over megatron-core's: Megatron-Core's --cross-entropy-loss-fusion
  // (cast with the max 2 + 4, subtract/exp/sum 8, divide 8; backward 4 + 2) and TE's Triton
  // kernels (read, read and write in place: 6; scale in place: 4). A soft cap on the logits
  // (Gemma 2's) adds its three kernels' passes, 6 x 2 bytes, and their autograd's 7 x 2, to each,
  // unless the stack's loss kernels take it as they go (fused_logit_softcap: nothing more).
  for (const bool fused_cap : {false, true})
    for (const double cap : {0.0, 30.0})
      for (const auto& [loss, forward, backward] :
           {std::tuple{CrossEntropy::kMegatronFused, 22.0, 6.0},
            std::tuple{CrossEntropy::kTe, 6.0, 4.0}, std::tuple{CrossEntropy::kFused, 2.0, 4.0},
            std::tuple{CrossEntropy::kVocabParallel, 38.0, 14.0}}) {
        SCOPED_TRACE(fmt::format("{} cap {} fused {}", CrossEntropyName(loss), cap, fused_cap));
        Plan plan = MakePlan(PlanKnobs{});
        plan.cross_entropy = loss;
        plan.model.logit_softcap = cap;
        plan.stack.fused_logit_softcap = fused_cap;
        Result<Schedule> s = LowerStage(plan, LowerOptions{-1, true, true, true, true});
        ASSERT_TRUE(s.ok()) << s.message();
        const double capped = cap > 0 && !fused_cap ? 1 : 0;
        for (const Op& op : s->ops()) {
          if (op.func == OpFunc::kLoss) {
            EXPECT_DOUBLE_EQ(op.bytes, (forward + capped * 12) * logits);
          }
          if (op.func == OpFunc::kLossGrad) {
            EXPECT_DOUBLE_EQ(op.bytes, (backward + capped * 14) * logits);
          }
        }
      }
}

TEST(LowerStackTest, TheEmbeddingGradientIsDenseWhereTheStackRunsFEmbedding) {
  // gpt3-2.7b at tp 8: 6400 of the 51200 padded vocabulary rows a rank, hidden 2560, 4 x 256
  // tokens, bf16. Every stack reads the micro-batch's gradient rows and writes as many (2 x 1024
  // x 2560 x 2 bytes); the Megatron-derived stacks also zero-fill the rank's 6400 x 2560 table in
  // bf16 and add it into main_grad (bf16 read, fp32 read and write): 2 + 2 + 8 = 12 bytes a table
  // element, or 8 with bf16 gradients (memory.grad_reduce: param), once per micro-batch, so each
  // of two row slices carries half of it. The executor's kernel adds the rows in place.
  const double rows = 2.0 * 1024 * 2560 * 2, table = 6400.0 * 2560;
  for (const auto& [stack, row_split, grad_reduce, per_element] :
       {std::tuple{"megatron-core", 1, GradReduce::kFp16Param, 12.0},
        std::tuple{"megatron-core", 1, GradReduce::kParam, 8.0},
        std::tuple{"megatron-core", 2, GradReduce::kFp16Param, 12.0},
        std::tuple{"megatron-2021", 1, GradReduce::kFp16Param, 12.0},
        std::tuple{"deepspeed-domino", 2, GradReduce::kFp16Param, 12.0},
        std::tuple{"domino", 1, GradReduce::kFp32, 0.0}}) {
    SCOPED_TRACE(fmt::format("{} p {} {}", stack, row_split, GradReduceName(grad_reduce)));
    PlanKnobs k;
    k.stack = stack;
    k.row_split = row_split;
    if (row_split > 1) k.scope = OverlapScope::kIntraLayer;
    Plan plan = MakePlan(k);
    plan.grad_reduce = grad_reduce;
    Result<Schedule> s = LowerStage(plan, LowerOptions{-1, true, true, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    int seen = 0;
    for (const Op& op : s->ops()) {
      if (op.func != OpFunc::kEmbedGrad) continue;
      EXPECT_DOUBLE_EQ(op.bytes, (rows + per_element * table) / row_split);
      ++seen;
    }
    EXPECT_EQ(seen, row_split);
  }
}

TEST(LowerStackTest, TheActivationMovesTheBytesOfItsKernels) {
  // gpt3-2.7b's MLP (ffn 10240, biases) at tp 8: 1280 columns a rank, 4 x 256 tokens, bf16; one
  // pass over the activation is 1024 x 1280 x 2 bytes. GeLU with the bias fused (megatron-core):
  // read and write forward, two reads and a write backward; unfused (domino), the bias is two
  // more passes forward. Squared ReLU on megatron-core: relu and pow forward (4 passes) plus the
  // bias (2); backward pow's gradient (7) and relu's (3); the domino stack's own kernels: one pass
  // each way, the bias its own. The gated units read [gate | up] (2 passes) and write one, the
  // bias over both halves (4); backward they read both and the gradient and write both (5).
  // Megatron-Core fuses SwiGLU with its bias, and runs GeGLU as its unfused glu(): 7 passes
  // forward (the gate's GeLU, a copy of up, the product) plus the bias's 4, and 13 backward.
  const double pass = 1024.0 * 1280 * 2;
  for (const auto& [stack, activation, forward, backward] :
       {std::tuple{"megatron-core", Activation::kGelu, 2.0, 3.0},
        std::tuple{"domino", Activation::kGelu, 4.0, 3.0},
        std::tuple{"megatron-core", Activation::kSquaredRelu, 6.0, 10.0},
        std::tuple{"domino", Activation::kSquaredRelu, 4.0, 3.0},
        std::tuple{"megatron-core", Activation::kSwiglu, 3.0, 5.0},
        std::tuple{"domino", Activation::kSwiglu, 7.0, 5.0},
        std::tuple{"megatron-core", Activation::kGeglu, 11.0, 13.0},
        std::tuple{"domino", Activation::kGeglu, 7.0, 5.0}}) {
    SCOPED_TRACE(std::string(stack) + " " + std::string(ActivationName(activation)));
    PlanKnobs k;
    k.stack = stack;
    Plan plan = MakePlan(k);
    plan.model.activation = activation;
    ASSERT_TRUE(plan.model.bias);
    Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    int seen = 0;
    for (const Op& op : s->ops()) {
      if (op.func == OpFunc::kAct) {
        EXPECT_DOUBLE_EQ(op.bytes, forward * pass);
        ++seen;
      }
      if (op.func == OpFunc::kActGrad) {
        EXPECT_DOUBLE_EQ(op.bytes, backward * pass);
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2);
  }
  // Megatron-Core's unfused GeGLU keeps the gate's GeLU and the copy of up for the product's
  // backward: 2 + 2 bytes a token and MLP column more than SwiGLU, which keeps 2 more than GeLU
  // (fc1's output is twice as wide). The domino stack's GeGLU keeps what SwiGLU keeps.
  for (const char* stack : {"megatron-core", "domino"}) {
    SCOPED_TRACE(stack);
    PlanKnobs k;
    k.stack = stack;
    Plan plan = MakePlan(k);
    std::map<Activation, double> kept;
    for (Activation a : {Activation::kGelu, Activation::kSwiglu, Activation::kGeglu}) {
      plan.model.activation = a;
      kept[a] = EstimateMemory(plan).activation_bytes;
    }
    const double geglu_over_swiglu = kept[Activation::kGeglu] - kept[Activation::kSwiglu];
    const double swiglu_over_gelu = kept[Activation::kSwiglu] - kept[Activation::kGelu];
    EXPECT_GT(swiglu_over_gelu, 0);
    EXPECT_DOUBLE_EQ(geglu_over_swiglu, std::string(stack) == "domino" ? 0 : 2 * swiglu_over_gelu);
  }
}

TEST(LowerStackTest, EachResidualBranchRunsItsDropoutBothWays) {
  // gpt3-2.7b's layers (hidden 2560) at tp 8 without SP on megatron-core (bias, dropout and add
  // fused), two of them: one pass over a residual is 1024 tokens x 2560 x 2 bytes. The residual
  // adds read two passes and write one; a branch's dropout adds its 1-byte mask forward, and
  // backward an op of its own (kDropout1Grad, kDropout2Grad) after the one that writes the
  // residual gradient (ln2's backward, layer 1's ln1 backward for layer 0's MLP, the stack's
  // output gradient for layer 1's: no head): a pass that reads the gradient and the mask and
  // writes the gradient the branch takes into a tensor of its own, which the branch's row-parallel
  // GEMM reads. training.mlp_dropout false keeps the attention branch's only (TE's getting-started
  // layer).
  const double pass = 1024.0 * 2560 * 2, mask = pass / 2;
  struct Case {
    std::optional<bool> dropout, mlp_dropout;
    double attn, mlp;  // 0 or 1: the branch runs a dropout
  };
  for (const Case& c : {Case{false, std::nullopt, 0, 0}, Case{true, std::nullopt, 1, 1},
                        Case{true, false, 1, 0}, Case{true, true, 1, 1}}) {
    SCOPED_TRACE(fmt::format("dropout {} mlp_dropout {}", *c.dropout,
                             c.mlp_dropout ? fmt::format("{}", *c.mlp_dropout) : "unset"));
    Plan plan = MakePlan(PlanKnobs{});
    plan.dropout = c.dropout;
    plan.mlp_dropout = c.mlp_dropout;
    ASSERT_FALSE(CheckPlanRules(plan).has_value());
    Result<Schedule> s = LowerStage(plan, LowerOptions{2, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    std::map<std::pair<OpFunc, int>, double> bytes;  // by op and layer
    for (const Op& op : s->ops()) bytes[{op.func, op.tags.layer}] += op.bytes;
    const double grad = 2 * pass + mask;
    for (int l = 0; l < 2; ++l) {
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidual1, l}]), 3 * pass + c.attn * mask) << l;
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kLn2Grad, l}]), 6 * pass) << l;
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kLn1Grad, l}]), 6 * pass) << l;
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kDropout1Grad, l}]), c.attn * grad) << l;
      EXPECT_DOUBLE_EQ((bytes[{OpFunc::kDropout2Grad, l}]), c.mlp * grad) << l;
    }
    EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidual2, 0}]), 3 * pass + c.mlp * mask);
    EXPECT_DOUBLE_EQ((bytes[{OpFunc::kResidualGrad, 1}]), pass);
    // Each dropout's backward reads the residual gradient and writes the one its branch's GEMMs
    // read: proj's input gradient takes layer l's dropout1 gradient, fc2's its dropout2 gradient
    // (without dropout: mid's gradient, and the layer output's: the next layer's x's or the
    // stack's output's).
    for (const Op& op : s->ops()) {
      if (op.func != OpFunc::kProjGradInput && op.func != OpFunc::kFc2GradInput) continue;
      const bool proj = op.func == OpFunc::kProjGradInput;
      const TensorRole& read = s->tensors()[s->reads(op)[0].tensor].role;
      EXPECT_TRUE(read.gradient) << RoleName(read);
      if (proj) {
        EXPECT_EQ(read.slot, c.attn > 0 ? TensorSlot::kDropout1 : TensorSlot::kMid);
      } else if (c.mlp > 0) {
        EXPECT_EQ(read.slot, TensorSlot::kDropout2) << RoleName(read);
      } else {
        EXPECT_NE(read.slot, TensorSlot::kDropout2) << RoleName(read);
      }
      if (read.slot == TensorSlot::kDropout1 || read.slot == TensorSlot::kDropout2) {
        EXPECT_EQ(read.layer, op.tags.layer);
      }
    }
  }
  // Without dropout there is no MLP dropout to turn off.
  Plan none = MakePlan(PlanKnobs{});
  none.dropout = false;
  none.mlp_dropout = false;
  const std::optional<PlanRuleFailure> rule = CheckPlanRules(none);
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ(rule->key, "training.mlp_dropout");
  EXPECT_EQ(rule->rule,
            "says whether the MLP's hidden dropout runs, and the plan runs no dropout "
            "(training.dropout false)");
}

TEST(LowerStackTest, RotaryPositionsRotateQAndKAsTheStackRunsThem) {
  // gpt3-2.7b at tp 8: 4 query and 4 key heads of 80 a rank, 4 x 256 tokens, bf16: one pass over
  // Q and K is 1024 x 8 x 80 x 2 bytes. Transformer Engine's fused kernel (megatron-core) and the
  // executor's (domino) read and write them, 2 passes each way; PyTorch's unfused rotation
  // (deepspeed-domino) 10; a stack that says none runs none, and learned positions none anywhere.
  // The ops carry the attention's shape: 4 sequences of 256 local tokens, 4 + 4 heads of 80.
  const double pass = 1024.0 * 8 * 80 * 2;
  for (const auto& [stack, none, positions, passes] :
       {std::tuple{"megatron-core", false, Positions::kRotary, 2.0},
        std::tuple{"deepspeed-domino", false, Positions::kRotary, 10.0},
        std::tuple{"domino", false, Positions::kRotary, 2.0},
        std::tuple{"megatron-core", true, Positions::kRotary, 0.0},  // a stack's `rope: none`
        std::tuple{"megatron-core", false, Positions::kLearned, 0.0},
        std::tuple{"megatron-core", false, Positions::kByNorm, 0.0}}) {  // LayerNorm: learned
    SCOPED_TRACE(std::string(stack) + " " + std::string(PositionsName(positions)));
    PlanKnobs k;
    k.stack = stack;
    Plan plan = MakePlan(k);
    plan.model.positions = positions;
    if (none) plan.stack.rope = RopeKernel::kNone;
    Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<OpFunc> order;  // the attention block's compute ops, in schedule order
    for (const Op& op : s->ops()) {
      if (op.func == OpFunc::kRope || op.func == OpFunc::kRopeGrad) {
        EXPECT_DOUBLE_EQ(op.bytes, passes * pass);
        EXPECT_EQ(std::tuple(op.sequences, op.seq_len, op.heads, op.kv_heads, op.head_dim),
                  std::tuple(4, 256, 4, 4, 80));
      }
      if (op.func == OpFunc::kQkv || op.func == OpFunc::kRope || op.func == OpFunc::kAttn ||
          op.func == OpFunc::kAttnGrad || op.func == OpFunc::kRopeGrad ||
          op.func == OpFunc::kQkvGradInput)
        order.push_back(op.func);
    }
    if (passes > 0) {
      EXPECT_EQ(order, (std::vector{OpFunc::kQkv, OpFunc::kRope, OpFunc::kAttn, OpFunc::kAttnGrad,
                                    OpFunc::kRopeGrad, OpFunc::kQkvGradInput}));
    } else {
      EXPECT_EQ(order, (std::vector{OpFunc::kQkv, OpFunc::kAttn, OpFunc::kAttnGrad,
                                    OpFunc::kQkvGradInput}));
    }
  }
}

TEST(LowerStackTest, TheCopiesAroundTheAttentionAreTheFrameworks) {
  // gpt3-2.7b at tp 8: 4 query heads of 80 a rank and 4 key and value heads (multi-head) or 1 (8
  // groups), 4 x 256 tokens, bf16: a pass over one head's columns of a slice is 1024 / p x 80 x 2
  // bytes. Each case lists the layer's copies in schedule order, each with the tensor it copies
  // (QKV before the core, the context after it, QKV's gradient backward) and its size in such
  // passes:
  // - megatron-core, fused attention: Q of a grouped-query model (4 heads) and V of a rotary one
  //   (1 or 4), read and written; backward all of QKV (4 + 2 g heads) twice whenever it copied;
  //   nothing for multi-head attention with learned positions;
  // - unfused attention (megatron-core with the plan's kernel, megatron-2021): the context after
  //   the core, and the concatenation backward;
  // - deepspeed-domino: QKV permuted before the core and the context after it; backward the
  //   concatenation and the reshape's copy with row slices, the concatenation without;
  // - domino: none.
  struct Case {
    const char* stack;
    int kv_heads;
    Positions positions;
    std::optional<AttentionKernel> attention;
    int row_split;
    std::vector<std::pair<std::string, double>> copies;
  };
  const Case cases[] = {
      {"megatron-core", 32, Positions::kRotary, {}, 1, {{"l0.qkv", 2 * 4.0}, {"l0.qkv.grad", 24}}},
      {"megatron-core", 8, Positions::kRotary, {}, 1, {{"l0.qkv", 2 * 5.0}, {"l0.qkv.grad", 12}}},
      {"megatron-core", 8, Positions::kLearned, {}, 1, {{"l0.qkv", 2 * 4.0}, {"l0.qkv.grad", 12}}},
      {"megatron-core", 32, Positions::kLearned, {}, 1, {}},
      {"megatron-core",
       32,
       Positions::kLearned,
       AttentionKernel::kUnfused,
       1,
       {{"l0.ctx", 2 * 4.0}, {"l0.qkv.grad", 24}}},
      {"megatron-2021", 32, Positions::kLearned, {}, 1, {{"l0.ctx", 2 * 4.0}, {"l0.qkv.grad", 24}}},
      {"deepspeed-domino",
       32,
       Positions::kRotary,
       {},
       2,
       {{"l0.qkv", 24},
        {"l0.ctx", 8},
        {"l0.qkv", 24},
        {"l0.ctx", 8},
        {"l0.qkv.grad", 48},
        {"l0.qkv.grad", 48}}},
      {"deepspeed-domino",
       32,
       Positions::kRotary,
       {},
       1,
       {{"l0.qkv", 24}, {"l0.ctx", 8}, {"l0.qkv.grad", 24}}},
      {"domino", 8, Positions::kRotary, {}, 1, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} kv_heads {} {} p {}", c.stack, c.kv_heads,
                             PositionsName(c.positions), c.row_split));
    PlanKnobs k;
    k.stack = c.stack;
    k.row_split = c.row_split;
    if (c.row_split > 1) k.scope = OverlapScope::kIntraLayer;
    Plan plan = MakePlan(k);
    SCOPED_TRACE(AttentionCopiesName(plan.stack.attention_copies));
    plan.model.kv_heads = c.kv_heads;
    plan.model.positions = c.positions;
    plan.attention = c.attention;
    Result<Schedule> s = LowerStage(plan, LowerOptions{1, false, false, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    const double pass = 1024.0 / c.row_split * 80 * 2;
    std::vector<std::pair<std::string, double>> copies;
    for (const Op& op : s->ops()) {
      if (op.func != OpFunc::kAttnCopy && op.func != OpFunc::kAttnCopyGrad) continue;
      const std::string tensor = RoleName(s->tensors()[s->reads(op)[0].tensor].role);
      EXPECT_EQ(op.func == OpFunc::kAttnCopyGrad, tensor == "l0.qkv.grad");
      copies.emplace_back(tensor, op.bytes / pass);
    }
    EXPECT_EQ(copies, c.copies);
  }
}

TEST(LowerStackTest, TheBackwardCollectiveWaitsForTheWeightGradientOnlyWhereTheStackSaysSo) {
  // gpt3-2.7b at tp 8, scope none, whole batch (q = 1) or two column chunks (q = 2). Megatron-Core
  // launches a column-parallel linear's input-gradient all-reduce (of a chunk) right after that
  // chunk's GEMM and runs the weight gradient under it; 2021 Megatron-LM (wgrad_overlaps_tp_comm
  // false) launches it after the weight gradient; DeepSpeed-Domino does so for fc1 of its sliced
  // layer only (sliced_fc1_wgrad_overlaps_tp_comm false; two row slices, scope none).
  const auto is = [](const Op& op, std::initializer_list<OpFunc> funcs) {
    return std::find(funcs.begin(), funcs.end(), op.func) != funcs.end();
  };
  for (const auto& [stack, qkv_overlap, sliced_fc1_overlap] :
       {std::tuple{"megatron-core", true, true}, std::tuple{"megatron-2021", false, false},
        std::tuple{"deepspeed-domino", true, false}}) {
    for (const auto& [p, q] : {std::pair{1, 1}, {1, 2}, {2, 1}}) {
      SCOPED_TRACE(testing::Message() << stack << " p=" << p << " q=" << q);
      const bool fc1_overlap = p > 1 ? sliced_fc1_overlap : qkv_overlap;
      PlanKnobs k;
      k.stack = stack;
      k.row_split = p;
      k.col_split = q;
      ASSERT_EQ(MakePlan(k).stack.wgrad_overlaps_tp_comm, qkv_overlap);
      const Schedule s = LowerOk(k);
      const auto n = static_cast<int32_t>(s.size());
      int checked = 0;
      for (int32_t c = 0; c < n; ++c) {
        const Op& comm = s.op(c);
        if (comm.kind != OpKind::kCollective || comm.tags.phase != Phase::kBackward) continue;
        int32_t gemm = c - 1;  // the GEMM issued last before the collective
        while (gemm >= 0 && s.op(gemm).kind != OpKind::kGemm) --gemm;
        ASSERT_GE(gemm, 0) << s.Label(c);
        const Op& before = s.op(gemm);
        EXPECT_EQ(before.tags.layer, comm.tags.layer) << s.Label(c);
        const bool qkv = is(before, {OpFunc::kQkvGradInput, OpFunc::kQkvGradWeight});
        if (qkv ? qkv_overlap : fc1_overlap) {
          EXPECT_TRUE(is(before, {OpFunc::kQkvGradInput, OpFunc::kFc1GradInput})) << s.Label(gemm);
          EXPECT_EQ(before.tags.col_chunk, comm.tags.col_chunk) << s.Label(gemm);
        } else {
          EXPECT_TRUE(is(before, {OpFunc::kQkvGradWeight, OpFunc::kFc1GradWeight}))
              << s.Label(gemm);
        }
        const auto deps = s.deps(comm);
        EXPECT_EQ(std::vector<int32_t>(deps.begin(), deps.end()), std::vector<int32_t>{gemm})
            << s.Label(c);
        ++checked;
      }
      EXPECT_EQ(checked, 2 * 32 * p * q);  // qkv and fc1 in 32 layers, per slice and chunk
    }
  }
}

TEST(LowerStackTest, TheReduceScatterComesInTheStacksPiecesUnlessThePlanSays) {
  // gpt3-2.7b at tp 8 with decomposed overlap, 4 x 256 tokens: the all-gathers in tp = 8 parts
  // (TE's ring exchange); proj and fc2 with their reduce-scatters in the megatron-core stack's 4
  // pieces (TE's pipeline, num_splits 4), in the domino stack's as many as the all-gathers, or in
  // the plan's rs_chunks.
  for (const auto& [stack, rs_chunks, pieces] :
       {std::tuple{"megatron-core", 0, 4}, std::tuple{"domino", 0, 8},
        std::tuple{"megatron-core", 2, 2}, std::tuple{"domino", 16, 16}}) {
    SCOPED_TRACE(testing::Message() << stack << " rs_chunks " << rs_chunks);
    PlanKnobs k;
    k.stack = stack;
    k.sequence_parallel = true;
    k.method = OverlapMethod::kDecomposed;
    k.rs_chunks = rs_chunks;
    const Plan plan = MakePlan(k);
    EXPECT_EQ(plan.decomposed_chunks(), 8);
    EXPECT_EQ(plan.decomposed_rs_chunks(), pieces);
    const Schedule s = LowerOk(k);
    int gathers = 0, scatters = 0, projs = 0;
    for (const Op& op : s.ops()) {
      if (op.tags.layer != 0 || op.tags.phase != Phase::kForward) continue;
      if (op.func == OpFunc::kProj) {
        EXPECT_EQ(op.m, 1024 / pieces);
        EXPECT_EQ(op.tags.chunk, projs++);
      }
      if (op.collective == CollectiveOp::kReduceScatter) {
        EXPECT_EQ(op.parts, pieces);
        EXPECT_EQ(op.part, scatters % pieces);
        EXPECT_EQ(op.bytes, 1024.0 * 2560 * 2 / pieces);
        // Part j reduces the rows proj's piece j wrote.
        const Op& gemm = s.op(s.deps(op)[0]);
        EXPECT_EQ(s.writes(gemm)[0].view.row_begin, 1024 / pieces * op.part);
        ++scatters;
      }
      if (op.collective == CollectiveOp::kAllGather) {
        EXPECT_EQ(op.parts, 8);
        ++gathers;
      }
    }
    EXPECT_EQ(projs, pieces);
    EXPECT_EQ(scatters, 2 * pieces);  // after proj and after fc2
    EXPECT_EQ(gathers, 2 * 8);        // before QKV and before fc1
  }
}

TEST(LowerStackTest, Fp8AmaxesAreReducedWhereTransformerEngineReducesThem) {
  // gpt3-2.7b (32 layers) at tp 8 with SP, 4 x 256 tokens, the whole model as one chunk.
  PlanKnobs k;
  k.sequence_parallel = true;
  auto lower = [&](Dtype precision, std::optional<Fp8Recipe> recipe, bool reduce) {
    Plan plan = MakePlan(k);
    plan.precision = precision;
    plan.fp8_recipe = recipe;
    plan.stack.fp8_amax_reduction = reduce;
    Result<Schedule> s = LowerStage(plan, LowerOptions{-1, true, true, true, true});
    EXPECT_TRUE(s.ok()) << s.message();
    return s.ok() ? std::move(s).value() : Schedule();
  };
  ASSERT_TRUE(MakePlan(k).stack.fp8_amax_reduction);  // the megatron-core stack's
  // Delayed scaling: one reduction over the stage's GPUs after the layers' forward (three amaxes
  // per GEMM, four GEMMs a layer: 32 x 12 floats) and one after their backward (two per GEMM),
  // each on the compute stream and followed by the update kernel (amax, history, scale and its
  // inverse: 16 bytes per tensor).
  const Schedule delayed = lower(Dtype::kFp8, std::nullopt, true);
  std::vector<const Op*> reductions, updates;
  for (size_t i = 0; i < delayed.size(); ++i) {
    const Op& op = delayed.ops()[i];
    if (op.func == OpFunc::kAmaxAllReduce) {
      reductions.push_back(&op);
      EXPECT_EQ(op.stream, Stream::kCompute);
      EXPECT_EQ(op.group, Group::kStage);
      EXPECT_EQ(op.collective, CollectiveOp::kAllReduce);
      ASSERT_LT(i + 1, delayed.size());
      EXPECT_EQ(delayed.ops()[i + 1].func, OpFunc::kAmaxUpdate);
    }
    if (op.func == OpFunc::kAmaxUpdate) updates.push_back(&op);
  }
  ASSERT_EQ(reductions.size(), 2u);
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(reductions[0]->tags.phase, Phase::kForward);
  EXPECT_EQ(reductions[0]->tags.layer, 31);
  EXPECT_DOUBLE_EQ(reductions[0]->bytes, 32 * 12 * 4.0);
  EXPECT_DOUBLE_EQ(updates[0]->bytes, 32 * 12 * 16.0);
  EXPECT_EQ(reductions[1]->tags.phase, Phase::kBackward);
  EXPECT_EQ(reductions[1]->tags.layer, 0);
  EXPECT_DOUBLE_EQ(reductions[1]->bytes, 32 * 8 * 4.0);
  EXPECT_DOUBLE_EQ(updates[1]->bytes, 32 * 8 * 16.0);
  // The forward's reduction comes after the top layer's fc2 and before the LM head.
  int fc2 = -1, reduce = -1, head = -1;
  for (size_t i = 0; i < delayed.size(); ++i) {
    const Op& op = delayed.ops()[i];
    if (op.func == OpFunc::kFc2 && op.tags.layer == 31) fc2 = static_cast<int>(i);
    if (op.func == OpFunc::kAmaxAllReduce && reduce < 0) reduce = static_cast<int>(i);
    if (op.func == OpFunc::kLmHead) head = static_cast<int>(i);
  }
  EXPECT_LT(fc2, reduce);
  EXPECT_LT(reduce, head);

  // Current scaling: no history, but each tensor scaled before its SP all-gather takes the
  // maximum of its amax over TP first, one float: QKV's and fc1's inputs forward, proj's and
  // fc2's output gradients backward; the gather waits for it.
  const Schedule current = lower(Dtype::kFp8, Fp8Recipe::kCurrent, true);
  int forward = 0, backward = 0;
  for (size_t i = 0; i < current.size(); ++i) {
    const Op& op = current.ops()[i];
    EXPECT_NE(op.func, OpFunc::kAmaxUpdate);
    if (op.func != OpFunc::kAmaxAllReduce) continue;
    EXPECT_EQ(op.group, Group::kTp);
    EXPECT_EQ(op.stream, Stream::kCompute);
    EXPECT_DOUBLE_EQ(op.bytes, 4.0);
    (op.tags.phase == Phase::kForward ? forward : backward)++;
    bool gathered = false;
    for (size_t j = i + 1; j < current.size() && !gathered; ++j) {
      const Op& next = current.ops()[j];
      if (next.collective != CollectiveOp::kAllGather) continue;
      for (int32_t d : current.deps(next)) gathered |= d == static_cast<int32_t>(i);
    }
    EXPECT_TRUE(gathered) << current.Label(static_cast<int32_t>(i));
  }
  EXPECT_EQ(forward, 2 * 32);
  EXPECT_EQ(backward, 2 * 32);

  // None in 16 bits, nor on a stack that keeps its scales per GPU.
  for (const Schedule& s :
       {lower(Dtype::kBf16, std::nullopt, true), lower(Dtype::kFp8, std::nullopt, false),
        lower(Dtype::kFp8, Fp8Recipe::kCurrent, false)})
    for (const Op& op : s.ops()) {
      EXPECT_NE(op.func, OpFunc::kAmaxAllReduce);
      EXPECT_NE(op.func, OpFunc::kAmaxUpdate);
    }
}

}  // namespace
}  // namespace domino
