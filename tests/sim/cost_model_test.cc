#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/planner/test_plans.h"
#include "tests/sim/cost_model_test_util.h"

// The cost model's compute: GEMM tiles, waves and their fp8 casts, weight-gradient accumulation,
// elementwise passes and launches, and the attention kernels (its communication:
// cost_model_comm_test.cc).
namespace domino::sim {
namespace {

using cost_model_test::Gemm;
using cost_model_test::kMiB;
using cost_model_test::TpCollective;

TEST(CostModelTest, GemmTilesAndWavesOnH100) {
  Plan plan = testing_util::MakePlan({});  // gpt3-2.7b, dgx-h100:1, tp 8
  CostModel model(plan, {});
  EXPECT_EQ(model.device().sms, 132);
  EXPECT_DOUBLE_EQ(model.device().hbm_GBps, 3350 * 0.88);

  // 640 tiles of 128 x 128 on 132 SMs with k = 2560 >= gemm_stream_k_min_k (2048): stream-K
  // splits each tile into ceil(2560 / 64) = 40 units, spread over every SM.
  OpCost c = model.Cost(Gemm(4096, 2560, 2560));
  EXPECT_EQ(c.tiles, 32 * 20 * 40);
  // One tile: 2 * 128 * 128 * (k + 192) FLOPs at 989e6 * 0.84 / 132 FLOP/us per SM
  // (an H100's 16-bit main loop at full clock).
  const double tile_us = 2.0 * 128 * 128 * (2560 + 192) / (989e6 * 0.84 / 132);
  EXPECT_NEAR(tile_us, 14.328367701863355, 1e-9);
  EXPECT_NEAR(c.wave_us, tile_us / 40, 1e-12);
  EXPECT_EQ(c.launch_us, 4 + 4);  // launch + gemm_fixed_us
  EXPECT_EQ(c.hbm_bytes, 2.0 * (4096 * 2560 * 2 + 2560 * 2560));
  EXPECT_FALSE(c.is_comm);
  // 25,600 units are ceil(25600 / 132) = 194 rounds; compute-bound (memory ~ 18 us), then the
  // last round's 124 units write their share of C (4096 x 2560 in 16 bits) after their main loops.
  EXPECT_DOUBLE_EQ(c.tile_epilogue_bytes * c.tiles, 4096.0 * 2560 * 2);
  const double bytes_per_us = 3350 * 0.88 * 1e3;
  const double last_c_us = 4096.0 * 2560 * 2 * (25600 - 193 * 132) / 25600 / bytes_per_us;
  EXPECT_NEAR(c.alone_us, 8 + 194 * tile_us / 40 + last_c_us, 1e-9);
  EXPECT_NEAR(c.alone_us, 77.52704088456645, 1e-9);

  // A row slice of 80 tiles would leave 52 SMs idle in its one wave (a tile and its C: 19.2 us);
  // tiles half as wide are 160, more than the SMs, which stream-K balances at 0.7 of the rate:
  // 6,400 units of 40 k-steps' worth each, 49 rounds, the last of 64 units (16.5 us).
  OpCost slice = model.Cost(Gemm(512, 2560, 2560));
  EXPECT_EQ(slice.tiles, 4 * 40 * 40);
  const double half_tile_us = 2.0 * 128 * 64 * (2560 + 192) / (989e6 * 0.84 * 0.7 / 132);
  const double slice_c_us = 512.0 * 2560 * 2 * (6400 - 48 * 132) / 6400 / bytes_per_us;
  EXPECT_NEAR(slice.alone_us, 8 + 49 * half_tile_us / 40 + slice_c_us, 1e-9);
  EXPECT_LT(slice.alone_us - 4, 4 + tile_us + 512.0 * 2560 * 2 / bytes_per_us);
  // A short inner dimension keeps whole tiles in waves: 640 tiles, 5 waves, the last of 112.
  OpCost short_k = model.Cost(Gemm(4096, 2560, 1024));
  EXPECT_EQ(short_k.tiles, 640);
  EXPECT_NEAR(short_k.alone_us,
              8 + 5 * 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132) +
                  4096.0 * 2560 * 2 * 112 / 640 / bytes_per_us,
              1e-9);

  // A partial tile counts whole.
  EXPECT_EQ(model.Cost(Gemm(129, 1, 64)).tiles, 2);
}

// A GEMM beside a collective (GemmContentionOf): the H100's kernels keep their SMs to the end
// from k >= 2048; a piece of a decomposed collective's GEMM runs on the SMs its collective leaves
// (Transformer Engine's sms - comm_sms): no tail, and it lets collectives in.
TEST(CostModelTest, GemmsCarryTheirLateCtasTail) {
  Plan plan = testing_util::MakePlan({});  // gpt3-2.7b, dgx-h100:1, tp 8
  CostModel model(plan, {});
  // 640 tiles: 2.42 waves of 2-tile CTAs, under 3: one persistent CTA per SM, the late ones
  // with 2 of the kernel's 3 rounds.
  OpCost c = model.Cost(Gemm(4096, 2560, 2560));
  EXPECT_NEAR(c.tail_share, 2.0 / 3, 1e-12);
  EXPECT_TRUE(c.blocks_comm);
  // 2560 tiles: 9.7 waves of CTAs, one CTA's share.
  c = model.Cost(Gemm(8192, 5120, 2560));
  EXPECT_NEAR(c.tail_share, 2.0 * 132 / 2560, 1e-12);
  // A piece of a decomposed collective's GEMM runs on the SMs its collective leaves.
  Op piece = Gemm(4096, 2560, 2560);
  piece.tags.chunk = 1;
  c = model.Cost(piece);
  EXPECT_EQ(c.tail_share, 0.0);
  EXPECT_FALSE(c.blocks_comm);
  // Under Transformer Engine's decomposed overlap the GEMMs of its bulk overlaps (a weight
  // gradient beside the input gradient's reduce-scatter) take every SM: they keep their tail.
  testing_util::PlanKnobs te;
  te.sequence_parallel = true;
  te.method = OverlapMethod::kDecomposed;
  Op wgrad = Gemm(4096, 2560, 2560);
  wgrad.func = OpFunc::kFc1GradWeight;
  EXPECT_NEAR(CostModel(testing_util::MakePlan(te), {}).Cost(wgrad).tail_share, 2.0 / 3, 1e-12);
  // Short k: no tail, but its CTAs still go before a collective launched after it.
  EXPECT_EQ(model.Cost(Gemm(4096, 2560, 1024)).tail_share, 0.0);
  EXPECT_TRUE(model.Cost(Gemm(4096, 2560, 1024)).blocks_comm);
  EXPECT_EQ(model.Cost(TpCollective(CollectiveOp::kAllReduce, 4 * kMiB)).tail_share, 0.0);
}

TEST(CostModelTest, APrecisionTheGpuLacksFallsBackToOneItHas) {
  // An older GPU: no bf16 (peak 0, "unsupported"). The GEMM must run at the fp16 peak, not at a
  // zero peak that made every op last forever (the simulator spun without end).
  Plan plan = testing_util::MakePlan({});
  plan.cluster.node.gpu.peak_tflops[static_cast<int>(Dtype::kBf16)] = 0;
  plan.precision = Dtype::kBf16;
  CostModel model(plan, {});
  Plan fp16 = testing_util::MakePlan({});
  fp16.precision = Dtype::kFp16;
  const OpCost c = model.Cost(Gemm(4096, 2560, 2560));
  EXPECT_TRUE(std::isfinite(c.alone_us));
  EXPECT_GT(c.alone_us, 0);
  EXPECT_DOUBLE_EQ(c.alone_us, CostModel(fp16, {}).Cost(Gemm(4096, 2560, 2560)).alone_us);
  // No 16-bit type at all: tf32, then fp32, whose peak a GPU file must give.
  plan.cluster.node.gpu.peak_tflops[static_cast<int>(Dtype::kFp16)] = 0;
  plan.cluster.node.gpu.peak_tflops[static_cast<int>(Dtype::kTf32)] = 0;
  EXPECT_TRUE(std::isfinite(CostModel(plan, {}).Cost(Gemm(4096, 2560, 2560)).alone_us));
}

TEST(CostModelTest, Fp8GemmsQuantizeTheirOperandAndTheLmHeadStays16Bit) {
  Plan plan = testing_util::MakePlan({});
  Plan bf16 = plan;
  plan.precision = Dtype::kFp8;
  bf16.precision = Dtype::kBf16;
  const CostModel fp8_model(plan, {}), bf16_model(bf16, {});
  auto gemm = [](OpFunc func, int8_t col_chunk = -1) {
    Op op = Gemm(4096, 2560, 2560);
    op.func = func;
    op.tags.col_chunk = col_chunk;
    return op;
  };
  // The output layer runs in 16-bit: as under bf16, op for op.
  for (OpFunc f : {OpFunc::kLmHead, OpFunc::kLmHeadGradInput, OpFunc::kLmHeadGradWeight})
    EXPECT_DOUBLE_EQ(fp8_model.Cost(gemm(f)).alone_us, bf16_model.Cost(gemm(f)).alone_us);
  // A forward or input-gradient GEMM first quantizes its m x k operand, a kernel's launch (4 us)
  // and bytes at 3350 * 0.88 GB/s. Delayed scaling (the default): the attention output and the
  // grad outputs are cast, 2 bytes read and two 1-byte copies written, and so is the FC2 input
  // (Megatron-Core's own activation writes 16 bits: the stack's fp8_cast norm); the QKV and FC1
  // inputs are the norm's, written in fp8 by it (a byte less) and transposed (2 bytes): 1 byte an
  // element (no sequence parallelism here).
  const double operand = 4096.0 * 2560;
  auto quantize_us = [&](double bytes, int launches = 1) {
    return 4.0 * launches + operand * bytes / (3350 * 0.88 * 1e3);
  };
  const double weight_grad_us = fp8_model.Cost(gemm(OpFunc::kFc1GradWeight)).alone_us;
  EXPECT_LT(weight_grad_us, bf16_model.Cost(gemm(OpFunc::kFc1GradWeight)).alone_us);
  for (OpFunc f : {OpFunc::kQkv, OpFunc::kFc1})
    EXPECT_NEAR(fp8_model.Cost(gemm(f)).alone_us, weight_grad_us + quantize_us(1), 1e-9);
  for (OpFunc f : {OpFunc::kFc2, OpFunc::kProj, OpFunc::kQkvGradInput, OpFunc::kProjGradInput,
                   OpFunc::kFc1GradInput, OpFunc::kFc2GradInput})
    EXPECT_NEAR(fp8_model.Cost(gemm(f)).alone_us, weight_grad_us + quantize_us(4), 1e-9);
  // Current scaling: the norm finds the amax and writes 16 bits, which a cast reads (4 bytes);
  // the others take an amax pass of their own first (6 bytes, two launches).
  Plan current = plan;
  current.fp8_recipe = Fp8Recipe::kCurrent;
  const CostModel current_model(current, {});
  for (OpFunc f : {OpFunc::kQkv, OpFunc::kFc1})
    EXPECT_NEAR(current_model.Cost(gemm(f)).alone_us, weight_grad_us + quantize_us(4), 1e-9);
  for (OpFunc f : {OpFunc::kFc2, OpFunc::kProj, OpFunc::kFc2GradInput})
    EXPECT_NEAR(current_model.Cost(gemm(f)).alone_us, weight_grad_us + quantize_us(6, 2), 1e-9);
  // Under sequence parallelism a norm writes 1 / tp of the rows its GEMM gathers: delayed, the
  // QKV input costs 2 - 1/8 bytes an element at tp 8; the FC2 input, not gathered, still 4.
  Plan sp = plan;
  sp.sequence_parallel = true;
  const CostModel sp_model(sp, {});
  ASSERT_EQ(sp.tp, 8);
  EXPECT_NEAR(sp_model.Cost(gemm(OpFunc::kQkv)).alone_us, weight_grad_us + quantize_us(2 - 1.0 / 8),
              1e-9);
  EXPECT_NEAR(sp_model.Cost(gemm(OpFunc::kFc2)).alone_us, weight_grad_us + quantize_us(4), 1e-9);
  // Column chunks of one input gradient share chunk 0's quantized operand.
  EXPECT_NEAR(fp8_model.Cost(gemm(OpFunc::kFc1GradInput, 0)).alone_us,
              weight_grad_us + quantize_us(4), 1e-9);
  EXPECT_DOUBLE_EQ(fp8_model.Cost(gemm(OpFunc::kFc1GradInput, 1)).alone_us, weight_grad_us);
  // Under bf16 nothing is quantized.
  EXPECT_DOUBLE_EQ(bf16_model.Cost(gemm(OpFunc::kFc1)).alone_us,
                   bf16_model.Cost(gemm(OpFunc::kFc1GradWeight)).alone_us);
}

// Megatron-LM 2021 adds each weight gradient into the accumulated one in a pass of its own
// (StackSpec::fused_wgrad_accumulation false): fp16 gradients through AccumulateGrad on every
// contribution but the first of an iteration (6 bytes a weight element), fp32 ones into main_grad
// on every one (10 bytes); Megatron-Core's GEMM adds them itself.
TEST(CostModelTest, UnfusedWeightGradientAccumulationIsAPassAfterTheGemm) {
  Op wgrad = Gemm(2560, 10240, 4096);
  wgrad.func = OpFunc::kFc1GradWeight;
  Op dgrad = wgrad;
  dgrad.func = OpFunc::kFc1GradInput;
  auto pass_us = [&](const Plan& plan) {
    const CostModel model(plan, {});
    return model.Cost(wgrad).alone_us - model.Cost(dgrad).alone_us;
  };
  const double weight = 2560.0 * 10240, hbm = 3350 * 0.88 * 1e3;  // H100, GB/s as bytes per us
  testing_util::PlanKnobs knobs{.stack = "megatron-2021", .micro_batch = 1, .global_batch = 4};
  Plan fp16 = testing_util::MakePlan(knobs);  // 4 micro-batches
  fp16.precision = Dtype::kFp16;
  ASSERT_EQ(fp16.micro_batches(), 4);
  EXPECT_NEAR(pass_us(fp16), 4 + weight * 6 * 3 / 4 / hbm, 1e-9);
  Plan bf16 = fp16;
  bf16.precision = Dtype::kBf16;  // gradients in fp32 (Megatron forces it for bf16)
  EXPECT_NEAR(pass_us(bf16), 4 + weight * 10 / hbm, 1e-9);
  // One micro-batch: AccumulateGrad stores the one fp16 gradient, no pass runs.
  Plan one = testing_util::MakePlan({.stack = "megatron-2021"});
  one.precision = Dtype::kFp16;
  EXPECT_DOUBLE_EQ(pass_us(one), 0);
  EXPECT_NEAR(pass_us(testing_util::MakePlan(knobs)), pass_us(bf16), 1e-9);  // bf16 by default
  knobs.stack = "megatron-core";
  EXPECT_DOUBLE_EQ(pass_us(testing_util::MakePlan(knobs)), 0);
}

// DeepSpeed-Domino's sliced MLP multiplies by its weights with torch.matmul: autograd sums the
// two slices' gradients (6 bytes a weight element in fp16) and the local DDP's hook adds the sum
// into main_grad every micro-batch (6 bytes in fp16; 10 in bf16, main_grad fp32), a pass after
// each slice's GEMM worth half of both. QKV and the projection add in the GEMM, and so does every
// GEMM of the unsliced layer (Megatron-LM's own) and of other stacks.
TEST(CostModelTest, DeepSpeedDominosSlicedMlpAccumulatesItsGradientsInPasses) {
  Op wgrad = Gemm(2560, 10240, 2048);
  auto pass_us = [&](const Plan& plan, OpFunc func, OpFunc input) {
    const CostModel model(plan, {});
    Op w = wgrad, d = wgrad;
    w.func = func;
    d.func = input;
    return model.Cost(w).alone_us - model.Cost(d).alone_us;
  };
  const double weight = 2560.0 * 10240, hbm = 3350 * 0.88 * 1e3;  // H100, GB/s as bytes per us
  testing_util::PlanKnobs knobs{.stack = "deepspeed-domino", .micro_batch = 2, .global_batch = 8};
  knobs.row_split = 2;
  Plan fp16 = testing_util::MakePlan(knobs);
  fp16.precision = Dtype::kFp16;
  ASSERT_EQ(fp16.micro_batches(), 4);
  for (OpFunc func : {OpFunc::kFc1GradWeight, OpFunc::kFc2GradWeight})
    EXPECT_NEAR(pass_us(fp16, func, OpFunc::kFc1GradInput), 4 + weight * (6 + 6) / 2 / hbm, 1e-9);
  EXPECT_DOUBLE_EQ(pass_us(fp16, OpFunc::kQkvGradWeight, OpFunc::kQkvGradInput), 0);
  Plan bf16 = fp16;
  bf16.precision = Dtype::kBf16;
  EXPECT_NEAR(pass_us(bf16, OpFunc::kFc1GradWeight, OpFunc::kFc1GradInput),
              4 + weight * (6 + 10) / 2 / hbm, 1e-9);
  Plan whole = fp16;
  whole.row_split = 1;
  EXPECT_DOUBLE_EQ(pass_us(whole, OpFunc::kFc1GradWeight, OpFunc::kFc1GradInput), 0);
  knobs.stack = "megatron-core";
  EXPECT_DOUBLE_EQ(
      pass_us(testing_util::MakePlan(knobs), OpFunc::kFc1GradWeight, OpFunc::kFc1GradInput), 0);
}

TEST(CostModelTest, NarrowSlicesLoseEfficiency) {
  Plan plan = testing_util::MakePlan({});
  CostModel model(plan, {});
  auto us_per_flop = [&](const Op& op) { return model.Cost(op).alone_us / op.flops; };
  const double full = us_per_flop(Gemm(4096, 2560, 2560));
  EXPECT_GT(us_per_flop(Gemm(4096, 2560 / 4, 2560)), full);  // column chunk: 160 tiles, 2 waves
  EXPECT_GT(us_per_flop(Gemm(4096 / 8, 2560, 2560)), full);  // row slice: 80 tiles, 1 wave
  EXPECT_GT(us_per_flop(Gemm(4096, 2560, 256)), full);       // short inner dimension
  // Slicing never makes the total faster: p slices cost at least the whole.
  for (int p : {2, 4, 8})
    EXPECT_GE(p * model.Cost(Gemm(4096 / p, 2560, 2560)).alone_us,
              model.Cost(Gemm(4096, 2560, 2560)).alone_us);
}

TEST(CostModelTest, ElementwiseAndLaunchOverhead) {
  Plan plan = testing_util::MakePlan({});
  Op op;
  op.kind = OpKind::kElementwise;
  op.bytes = 3350 * 0.88 * 1e3 * 10;  // 10 us of achieved HBM bandwidth
  OpCost eager = CostModel(plan, {}).Cost(op);
  EXPECT_NEAR(eager.alone_us, 4 + 10, 1e-9);
  EXPECT_EQ(eager.tiles, 0);
  CostOptions graphs;
  graphs.cuda_graphs = true;
  EXPECT_NEAR(CostModel(plan, graphs).Cost(op).alone_us, 1 + 10, 1e-9);
  // The plan's training.cuda_graphs does the same, and the options' choice overrides it.
  plan.cuda_graphs = true;
  EXPECT_NEAR(CostModel(plan, {}).Cost(op).alone_us, 1 + 10, 1e-9);
  CostOptions eager_launches;
  eager_launches.cuda_graphs = false;
  EXPECT_NEAR(CostModel(plan, eager_launches).Cost(op).alone_us, 4 + 10, 1e-9);
}

TEST(CostModelTest, FlashAttentionTilesPayTheirOverheadKeys) {
  // A 128-query tile of a causal sequence of s takes s/2 + overhead keys of the main loop: on an
  // H100 forward 0.59 of 989 TFLOP/s with 184 keys, backward (2.5x the work) 0.53 with 500.
  Plan plan = testing_util::MakePlan({});
  ASSERT_EQ(plan.stack.attention, AttentionKernel::kFlash);
  const CostModel model(plan, {});
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 2, op.seq_len = 8192, op.heads = 4, op.kv_heads = 4, op.head_dim = 128;
  const OpCost forward = model.Cost(op);
  EXPECT_EQ(forward.tiles, 2 * 4 * 64);
  const double sm_rate = 989e6 / 132;  // FLOP per us per SM at the dense peak
  EXPECT_NEAR(forward.wave_us, 4.0 * 128 * (4096 + 184) * 128 / (sm_rate * 0.59), 1e-9);
  op.tags.phase = Phase::kBackward;
  EXPECT_NEAR(model.Cost(op).wave_us, 2.5 * 4.0 * 128 * (4096 + 500) * 128 / (sm_rate * 0.53),
              1e-9);
  // The rate a whole forward achieves (causal FLOPs over the time of its tiles on every SM):
  // 558.4 TFLOP/s at 8k and 535.4 at 4k, within 1% of cuDNN's on an H200 (562.5 and 536.0).
  const auto forward_tflops = [&](int64_t seq) {
    op.tags.phase = Phase::kForward;
    op.seq_len = seq;
    const OpCost c = model.Cost(op);
    return 4.0 * 128 * (seq / 2.0) * 128 * 132 / c.wave_us / 1e6;
  };
  EXPECT_NEAR(forward_tflops(8192), 558.4, 0.1);
  EXPECT_NEAR(forward_tflops(4096), 535.4, 0.1);
  EXPECT_NEAR(forward_tflops(8192), 562.5, 0.01 * 562.5);
  EXPECT_NEAR(forward_tflops(4096), 536.0, 0.01 * 536.0);
}

TEST(CostModelTest, FlashAttention2TakesTheGpusFlash2Constants) {
  // A plan that runs FlashAttention-2 (training.attention flash2, as NVTE_FUSED_ATTN=0 has
  // Transformer Engine do on Hopper): the H100's flash2 constants, forward 0.327 with 56 overhead
  // keys and backward 0.332 with 526, where cuDNN's flash kernel takes 0.59/184 and 0.53/500.
  Plan plan = testing_util::MakePlan({});
  plan.attention = AttentionKernel::kFlash2;
  const CostModel model(plan, {});
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 2, op.seq_len = 8192, op.heads = 4, op.kv_heads = 4, op.head_dim = 128;
  const double sm_rate = 989e6 / 132;
  const OpCost forward = model.Cost(op);
  EXPECT_EQ(forward.tiles, 2 * 4 * 64);
  EXPECT_NEAR(forward.wave_us, 4.0 * 128 * (4096 + 56) * 128 / (sm_rate * 0.327), 1e-9);
  op.tags.phase = Phase::kBackward;
  EXPECT_NEAR(model.Cost(op).wave_us, 2.5 * 4.0 * 128 * (4096 + 526) * 128 / (sm_rate * 0.332),
              1e-9);
  // 8k forward over the whole GPU: 319.0 TFLOP/s, within 1.1% of the H200's 322.5.
  op.tags.phase = Phase::kForward;
  EXPECT_NEAR(4.0 * 128 * 4096 * 128 * 132 / forward.wave_us / 1e6, 319.0, 0.1);
  // The stack's kernel, cuDNN's, is faster.
  plan.attention.reset();
  EXPECT_EQ(plan.attention_kernel(), AttentionKernel::kFlash);
  EXPECT_LT(CostModel(plan, {}).Cost(op).wave_us, forward.wave_us);
  // An A100's flash kernel is FlashAttention-2: flash2 prices the same.
  Plan a100 = testing_util::MakePlan({.cluster = "dgx-a100:1"});
  const double a100_flash = CostModel(a100, {}).Cost(op).wave_us;
  a100.attention = AttentionKernel::kFlash2;
  EXPECT_EQ(CostModel(a100, {}).Cost(op).wave_us, a100_flash);
}

TEST(CostModelTest, UnfusedAttentionWithFp32ScoresPricesTheExecutorsPasses) {
  // The executor's attention (stack domino) keeps its scores in fp32 and recomputes P in the
  // backward; the same stack with 16-bit scores kept from the forward is the reference.
  Plan plan = testing_util::MakePlan({.stack = "domino"});
  ASSERT_TRUE(plan.stack.fp32_scores);
  Plan kept = plan;
  kept.stack.fp32_scores = false;
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 4, op.seq_len = 2048, op.heads = 5, op.kv_heads = 5, op.head_dim = 128;
  op.bytes = 2.0 * 4 * 2048 * 5 * 128 * 4;  // Q, K, V and O
  const double cells = 4.0 * 5 * 2048 * 2048;
  const double hbm = 3350 * 0.88 * 1e3;  // bytes per us
  const CostModel fp32(plan, {}), half(kept, {});
  // Forward: 20 bytes a score against 8 (S written, the fused softmax's read and write, PV's
  // read, in 16-bit), on the same two products.
  EXPECT_NEAR(fp32.Cost(op).alone_us - half.Cost(op).alone_us, cells * (20 - 8) / hbm, 1e-6);
  // Backward: 50 bytes against 14, and a fifth product (QK^T again): one more GEMM of the
  // scores' batch, 20 heads x 256 tiles on 132 SMs.
  op.tags.phase = Phase::kBackward;
  const OpCost gemm = half.Cost(Gemm(2048, 2048, 128));  // one head's QK^T, in bf16
  ASSERT_EQ(gemm.tiles, 256);
  const double extra_gemm_us =
      (std::ceil(20.0 * 256 * 5 / 132) - std::ceil(20.0 * 256 * 4 / 132)) * gemm.wave_us;
  EXPECT_NEAR(fp32.Cost(op).alone_us - half.Cost(op).alone_us,
              extra_gemm_us + cells * (50 - 14) / hbm, 1e-6);
}

// A soft cap on the attention's scores (Gemma 2's): PyTorch's three kernels over the 16-bit
// scores in unfused attention, 6 passes forward and 7 backward; nothing more inside the executor's
// softmax (fused_attention_softcap); megatron-core's FlexAttention at FlashAttention-2's rates.
TEST(CostModelTest, ASoftCapOnTheScoresIsPricedAsTheStackRunsIt) {
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 2, op.seq_len = 2048, op.heads = 4, op.kv_heads = 4, op.head_dim = 128;
  op.bytes = 2.0 * 2 * 2048 * 4 * 128 * 4;
  const double cells = 2.0 * 4 * 2048 * 2048;
  const double hbm = 3350 * 0.88 * 1e3;  // bytes per us
  Plan unfused = testing_util::MakePlan({});
  unfused.attention = AttentionKernel::kUnfused;
  Plan capped = unfused;
  capped.model.attention_softcap = 50;
  for (const Phase phase : {Phase::kForward, Phase::kBackward}) {
    op.tags.phase = phase;
    const double passes = phase == Phase::kForward ? 6 : 7;
    EXPECT_NEAR(CostModel(capped, {}).Cost(op).alone_us - CostModel(unfused, {}).Cost(op).alone_us,
                cells * passes * 2 / hbm, 1e-6);
  }
  Plan domino = testing_util::MakePlan({.stack = "domino"});
  Plan domino_capped = domino;
  domino_capped.model.attention_softcap = 50;
  ASSERT_TRUE(domino_capped.stack.fused_attention_softcap);
  EXPECT_EQ(CostModel(domino_capped, {}).Cost(op).alone_us,
            CostModel(domino, {}).Cost(op).alone_us);
  // megatron-core: FlexAttention, priced as FlashAttention-2, slower than its own cuDNN kernel.
  Plan core = testing_util::MakePlan({});
  Plan flex = core, flash2 = core;
  flex.model.attention_softcap = 50;
  ASSERT_EQ(flex.attention_kernel(), AttentionKernel::kFlex);
  flash2.attention = AttentionKernel::kFlash2;
  EXPECT_EQ(CostModel(flex, {}).Cost(op).wave_us, CostModel(flash2, {}).Cost(op).wave_us);
  EXPECT_GT(CostModel(flex, {}).Cost(op).wave_us, CostModel(core, {}).Cost(op).wave_us);
}

}  // namespace
}  // namespace domino::sim
