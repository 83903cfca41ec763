// Kernel choices a plan makes over its stack's (training.softmax, training.fp8_cast): each
// priced as the bytes its kernels move, worked out by hand against the stack's own.
#include <gtest/gtest.h>

#include "planner/lower.h"
#include "planner/plan.h"
#include "sim/cost_model.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

constexpr double kHbmBytesPerUs = 3350 * 0.88 * 1e3;  // an H100's HBM as the catalog achieves it

// One unfused attention core of 4 sequences x 2048 tokens x 5 heads.
Op UnfusedAttention(Phase phase) {
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 4, op.seq_len = 2048, op.heads = 5, op.kv_heads = 5, op.head_dim = 128;
  op.bytes = 2.0 * 4 * 2048 * 5 * 128 * 4;  // Q, K, V and O
  op.tags.phase = phase;
  return op;
}

TEST(LayerKernelsTest, UnfusedSoftmaxKernelsMoveTheScoresOncePerKernel) {
  Plan plan = testing_util::MakePlan({.stack = "megatron-2021"});
  ASSERT_EQ(plan.attention_kernel(), AttentionKernel::kUnfused);
  ASSERT_TRUE(plan.stack.fused_softmax);
  ASSERT_EQ(plan.softmax_kernels(), SoftmaxKernels::kFused);  // unset: the stack's
  Plan three = plan, two = plan;
  three.softmax = SoftmaxKernels::kScaleMaskSoftmax;
  two.softmax = SoftmaxKernels::kScaleSoftmax;
  const CostModel fused_model(plan, {}), three_model(three, {}), two_model(two, {});
  const double cells = 4.0 * 5 * 2048 * 2048;
  // Forward, in 16-bit scores: one kernel reads and writes them (4 bytes a score); scale, mask and
  // softmax each do (12); without the mask, the scale and the softmax (8). The products and the
  // other passes are the same.
  const Op forward = UnfusedAttention(Phase::kForward);
  const double fused_us = fused_model.Cost(forward).alone_us;
  EXPECT_NEAR(three_model.Cost(forward).alone_us - fused_us, cells * (12 - 4) / kHbmBytesPerUs,
              1e-6);
  EXPECT_NEAR(two_model.Cost(forward).alone_us - fused_us, cells * (8 - 4) / kHbmBytesPerUs, 1e-6);
  // Backward: the softmax's gradient reads P and dP and writes dS (6 bytes), and the scale's own
  // kernel reads and writes dS once more (4): 10 with or without a mask, against 6 fused.
  const Op backward = UnfusedAttention(Phase::kBackward);
  const double fused_back_us = fused_model.Cost(backward).alone_us;
  EXPECT_NEAR(three_model.Cost(backward).alone_us - fused_back_us,
              cells * (10 - 6) / kHbmBytesPerUs, 1e-6);
  EXPECT_DOUBLE_EQ(two_model.Cost(backward).alone_us, three_model.Cost(backward).alone_us);
  // A stack whose softmax is unfused runs the three kernels unless the plan says otherwise.
  Plan unfused_stack = plan;
  unfused_stack.stack.fused_softmax = false;
  EXPECT_EQ(unfused_stack.softmax_kernels(), SoftmaxKernels::kScaleMaskSoftmax);
  EXPECT_DOUBLE_EQ(CostModel(unfused_stack, {}).Cost(forward).alone_us,
                   three_model.Cost(forward).alone_us);
}

TEST(LayerKernelsTest, SoftmaxIsUnfusedAttentionsChoice) {
  Plan flash = testing_util::MakePlan({});  // megatron-core: flash attention
  flash.softmax = SoftmaxKernels::kScaleSoftmax;
  std::optional<PlanRuleFailure> failure = CheckPlanRules(flash);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "training.softmax");
  EXPECT_NE(failure->rule.find("the plan's attention is flash"), std::string::npos)
      << failure->rule;
  flash.attention = AttentionKernel::kUnfused;
  EXPECT_FALSE(CheckPlanRules(flash).has_value());
  // The executor's attention keeps fp32 scores in kernels of its own.
  Plan executor = testing_util::MakePlan({.stack = "domino"});
  executor.softmax = SoftmaxKernels::kScaleMaskSoftmax;
  failure = CheckPlanRules(executor);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "training.softmax");
  EXPECT_NE(failure->rule.find("fp32_scores"), std::string::npos) << failure->rule;
}

Op FrameworkGemm(OpFunc func) {
  Op op;
  op.kind = OpKind::kGemm;
  op.func = func;
  op.m = 4096, op.n = 2560, op.k = 2560;
  op.flops = 2.0 * op.m * op.n * op.k;
  op.bytes = 2.0 * (op.m * op.k + op.k * op.n + op.m * op.n);
  return op;
}

TEST(LayerKernelsTest, Fp8InputsANormOrActivationLeavesIn16BitsAreCastByTheLinear) {
  Plan norm = testing_util::MakePlan({});  // gpt3-2.7b, tp 8, no sequence parallelism
  norm.precision = Dtype::kFp8;
  // megatron-core: TE's LayerNormLinear for QKV and fc1, Megatron's own activation before fc2.
  ASSERT_EQ(norm.fp8_casts(), Fp8Cast::kNorm);
  Plan both = norm, linear = norm;
  both.fp8_cast = Fp8Cast::kNormAndActivation;
  linear.fp8_cast = Fp8Cast::kLinear;
  const CostModel norm_model(norm, {}), both_model(both, {}), linear_model(linear, {});
  const double operand = 4096.0 * 2560;
  auto us = [](const CostModel& model, OpFunc f) { return model.Cost(FrameworkGemm(f)).alone_us; };
  // Delayed scaling: a norm or activation writing fp8 leaves a transpose, 1 byte an element past
  // its 16-bit pass; cast by the linear, a kernel reads 2 bytes and writes the two fp8 copies, 4.
  const double cast_us = operand * (4 - 1) / kHbmBytesPerUs;
  for (OpFunc f : {OpFunc::kQkv, OpFunc::kFc1}) {
    EXPECT_DOUBLE_EQ(us(norm_model, f), us(both_model, f));
    EXPECT_NEAR(us(linear_model, f) - us(both_model, f), cast_us, 1e-9);
  }
  EXPECT_NEAR(us(norm_model, OpFunc::kFc2) - us(both_model, OpFunc::kFc2), cast_us, 1e-9);
  EXPECT_DOUBLE_EQ(us(linear_model, OpFunc::kFc2), us(norm_model, OpFunc::kFc2));
  // What no norm or activation writes is cast the same way by each.
  for (OpFunc f : {OpFunc::kProj, OpFunc::kFc2GradInput, OpFunc::kFc1GradWeight}) {
    EXPECT_DOUBLE_EQ(us(linear_model, f), us(both_model, f));
    EXPECT_DOUBLE_EQ(us(norm_model, f), us(both_model, f));
  }
  // Sequence parallelism at tp 8: the linear casts the rank's eighth of the rows (2 bytes read, 1
  // written), gathers them and transposes the gathered copy (2), one more kernel (4 us): QKV's
  // 3/8 + 2 bytes an element against the norm's 2 - 1/8; fc2's input is not gathered.
  Plan sp_both = both, sp_linear = linear;
  sp_both.sequence_parallel = sp_linear.sequence_parallel = true;
  ASSERT_EQ(sp_linear.tp, 8);
  const CostModel sp_both_model(sp_both, {}), sp_linear_model(sp_linear, {});
  EXPECT_NEAR(us(sp_linear_model, OpFunc::kQkv) - us(sp_both_model, OpFunc::kQkv),
              4.0 + operand * ((3.0 / 8 + 2) - (2 - 1.0 / 8)) / kHbmBytesPerUs, 1e-9);
  EXPECT_NEAR(us(sp_linear_model, OpFunc::kFc2) - us(sp_both_model, OpFunc::kFc2), cast_us, 1e-9);
  // Current scaling: an amax pass before the cast, 6 bytes and two kernels, against the norm's
  // fused amax and a cast, 4 and one.
  Plan current_both = both, current_linear = linear;
  current_both.fp8_recipe = current_linear.fp8_recipe = Fp8Recipe::kCurrent;
  EXPECT_NEAR(us(CostModel(current_linear, {}), OpFunc::kFc1) -
                  us(CostModel(current_both, {}), OpFunc::kFc1),
              4.0 + operand * (6 - 4) / kHbmBytesPerUs, 1e-9);
  // Only fp8 plans say how fp8 inputs are cast.
  Plan bf16 = linear;
  bf16.precision = Dtype::kBf16;
  std::optional<PlanRuleFailure> failure = CheckPlanRules(bf16);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "training.fp8_cast");
}

}  // namespace
}  // namespace domino::sim
