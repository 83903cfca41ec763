#include "planner/memory_model.h"

#include <gtest/gtest.h>

#include <vector>

#include "planner/iteration.h"
#include "tests/planner/test_plans.h"

namespace domino {
namespace {

// A tiny GPT: 2 layers, h 64, 4 heads, ffn 256, vocab 100, learned positions of 32 rows.
// Parameters per layer: QKV 64*192 + proj 64*64 + MLP 2*64*256 = 49152 matmul, biases
// 192 + 64 + 256 + 64 = 576, two LayerNorms 2*128 = 256: 49984; two layers 99968.
// Embedding 100*64 = 6400, positions 32*64 = 2048.
Plan TinyPlan() {
  Plan plan;
  plan.model.name = "tiny";
  plan.model.layers = 2;
  plan.model.hidden = 64;
  plan.model.heads = 4;
  plan.model.kv_heads = 4;
  plan.model.ffn = 256;
  plan.model.vocab = 100;
  plan.model.seq_len = 32;
  plan.model.activation = Activation::kGelu;
  plan.model.norm = Norm::kLayerNorm;
  plan.model.bias = true;
  plan.model.tied_embeddings = true;
  plan.seq_len = 32;
  plan.micro_batch = 4;
  plan.global_batch = 4;
  plan.tp = 2;
  plan.pp = 1;
  plan.dp = 1;
  plan.dropout = true;  // Korthikanti et al.'s layer: hidden and attention dropout
  return plan;
}

// s*b*h = 32*4*64 = 8192 bytes per unit below.

TEST(MemoryModelTest, WeightsAndOptimizerTake18BytesPerParameter) {
  Plan plan = TinyPlan();
  // (99968 layer + 6400 embedding) / tp 2 = 53184 parameters, 18 bytes each; learned
  // positions are replicated and, as in Megatron's count, left out.
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 18);
  plan.distributed_optimizer = true;  // dp 1: 6 + 12/1 = 18, no saving
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 18);
  plan.dp = 2;
  plan.global_batch = 8;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 12);
  plan.distributed_optimizer = false;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 18);
}

TEST(MemoryModelTest, GradientsTakeTheStacksReduceType) {
  Plan plan = TinyPlan();
  // fp16 parameters under a stack that reduces fp16 gradients in fp16 (Megatron-LM's default):
  // 2 + 2 + 12 = 16 bytes per parameter; with bf16 the same stack keeps fp32 gradients (18).
  plan.stack.grad_reduce = GradReduce::kFp16Param;
  plan.precision = Dtype::kFp16;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 16);
  plan.precision = Dtype::kBf16;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 18);
  // A plan's own grad_reduce overrides the stack's: bf16 gradients (--grad-reduce-in-bf16).
  plan.grad_reduce = GradReduce::kParam;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 16);
  plan.grad_reduce = GradReduce::kFp32;
  plan.precision = Dtype::kFp16;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 18);
}

TEST(MemoryModelTest, ABf16AdamStateTakesSixBytes) {
  Plan plan = TinyPlan();
  // Master weights, m and v in bf16 (Apex DistributedFusedAdam's dtype bf16): 2 + 4 + 6 = 12
  // bytes per parameter instead of 18; the distributed optimizer shards the 6 over dp 2 (3), and
  // bf16 gradients take 2 of the rest: 2 + 2 + 3 = 7.
  plan.optimizer_dtype = Dtype::kBf16;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 12);
  plan.distributed_optimizer = true;
  plan.dp = 2;
  plan.global_batch = 8;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 9);
  plan.grad_reduce = GradReduce::kParam;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 7);
  // FSDP shards all of it: (2 + 2 + 6) / 2 = 5 per parameter, plus two gathered 16-bit layers
  // and one layer's bf16 gradients (49984 / tp 2 = 24992 parameters, 2 * 2 + 2 bytes each).
  plan.fsdp = true;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 53184.0 * 5 + 24992.0 * 6);
  // The optimizer step moves 2 + 2 + 6 + 2 + 6 bytes a parameter, 18 fewer than in fp32.
  EXPECT_EQ(AdamBytesPerParam(plan), 18);
  plan.optimizer_dtype = Dtype::kFp32;
  EXPECT_EQ(AdamBytesPerParam(plan), 30);
}

TEST(MemoryModelTest, TensorParallelActivations) {
  Plan plan = TinyPlan();
  // sbh (10 + 24/t + 5as/(ht)) = 8192 * (10 + 12 + 5*4*32/128) = 8192 * 27 per layer.
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/false).activation_bytes, 8192.0 * 27 * 2);
  // Flash attention keeps no scores: 8192 * 22.
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/true).activation_bytes, 8192.0 * 22 * 2);
  plan.recompute = Recompute::kSelective;
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 8192.0 * 22 * 2);
  plan.recompute = Recompute::kFull;  // only the layer input: 2 sbh
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 8192.0 * 2 * 2);
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 2 * 2);
  // Recomputing the first layer only: 2 sbh for it, 27 sbh for the other.
  plan.recompute_layers = 1;
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 8192.0 * (2 + 27));
  plan.recompute_layers = 2;  // both: as full
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 8192.0 * 2 * 2);
}

TEST(MemoryModelTest, WithoutDropoutNoMaskIsKept) {
  Plan plan = TinyPlan();
  plan.dropout = false;
  // The two hidden masks go (10 -> 8) and of the scores only the softmax's output stays (5as/h ->
  // 2as/h): sbh (8 + 24/t + 2as/(ht)) = 8192 * (8 + 12 + 2*4*32/128) = 8192 * 22 per layer.
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/false).activation_bytes, 8192.0 * 22 * 2);
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/true).activation_bytes, 8192.0 * 20 * 2);
  // With SP: sbh/t (32 + 2as/h) = 4096 * (32 + 4) per layer.
  plan.sequence_parallel = true;
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 4096.0 * 36 * 2);
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 32 * 2);
  // A stack without dropout (megatron-core's) keeps none unless the plan asks for it.
  plan.dropout.reset();
  plan.stack.dropout = false;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 32 * 2);
  plan.stack.dropout = true;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 34 * 2);
  // Dropout after the attention only (training.mlp_dropout false): one mask of the two.
  plan.mlp_dropout = false;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 33 * 2);
}

TEST(MemoryModelTest, ASoftCapOnTheScoresKeepsItsTanhUnlessTheSoftmaxTakesIt) {
  Plan plan = TinyPlan();
  plan.model.attention_softcap = 50;
  // PyTorch's tanh keeps its 16-bit output for the backward, 2as/h more over the scores:
  // sbh (10 + 24/t + 7as/(ht)) = 8192 * (10 + 12 + 7*4*32/128) = 8192 * 29 per layer.
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/false).activation_bytes, 8192.0 * 29 * 2);
  EXPECT_EQ(EstimateMemory(plan, /*flash_attention=*/true).activation_bytes, 8192.0 * 22 * 2);
  plan.stack.fused_attention_softcap = true;  // inside the softmax's kernels: nothing more
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 8192.0 * 27 * 2);
}

TEST(MemoryModelTest, Fp8LinearsKeepTheirInputsInFp8) {
  Plan plan = TinyPlan();
  plan.precision = Dtype::kFp8;
  // The QKV and fc1 inputs 1 byte each (whole part 10 -> 8), fc2's input ffn/h 2 -> 1 (MLP 16 ->
  // 12), the projection's fp8 copy of the attention's output +1: split 4 + 4 + 12 + 1 = 21.
  // sbh (8 + 21/2) = 8192 * 18.5 per layer with flash attention, against 22 in 16 bits.
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 18.5 * 2);
  plan.sequence_parallel = true;  // sbh/t (8 + 21) = 4096 * 29
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 29 * 2);
  // Full recompute keeps the 16-bit layer input only, as in bf16.
  plan.recompute = Recompute::kFull;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 2 * 2);
}

TEST(MemoryModelTest, SequenceParallelActivations) {
  Plan plan = TinyPlan();
  plan.sequence_parallel = true;
  // sbh/t (34 + 5as/h) = 4096 * (34 + 5*4*32/64) = 4096 * 44 per layer.
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 4096.0 * 44 * 2);
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 34 * 2);
  plan.recompute = Recompute::kSelective;
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 4096.0 * 34 * 2);
  plan.recompute = Recompute::kFull;  // 2 sbh / t
  EXPECT_EQ(EstimateMemory(plan, false).activation_bytes, 4096.0 * 2 * 2);
}

TEST(MemoryModelTest, GroupedQueriesShrinkAndAGatedMlpGrowsALayer) {
  Plan plan = TinyPlan();
  // One KV head of 4 (K and V 2 * 1/4 each) and a gated MLP of ffn 4h (6 * 4 bytes): the split
  // part is 2 + 2 + 1 + 24 = 29 instead of 24, the whole part stays 10:
  // sbh (10 + 29/2) = 8192 * 24.5 per layer with flash attention.
  plan.model.kv_heads = 1;
  plan.model.activation = Activation::kSwiglu;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 24.5 * 2);
  plan.sequence_parallel = true;  // sbh/t (10 + 29) = 4096 * 39
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 39 * 2);
  plan.model.activation = Activation::kGelu;  // 2 + 2 + 1 + 16 = 21: 4096 * 31
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 4096.0 * 31 * 2);
}

TEST(MemoryModelTest, HeadsWiderThanHiddenOverHeadsWidenQAndTheAttentionsOutput) {
  Plan plan = TinyPlan();
  // 4 heads of 32 over h 64: Q and the attention's output 2 + 2 times 128/64, K and V 2 each
  // times 128/64: the split part is 8 + 8 + 16 = 32 instead of 24: sbh (10 + 32/2) = 8192 * 26
  // per layer with flash attention, against 22 with heads of 16.
  plan.model.head_dim = 32;
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 26 * 2);
  // And a layer's QKV 64 x 192 wider (3 x 64 x 64 weights, 3 x 64 biases), proj 64 rows longer.
  plan.model.head_dim = 0;
  const double narrow = EstimateMemory(plan, true).weights_and_optimizer_bytes;
  plan.model.head_dim = 32;
  const double per_param = 18;  // 16-bit weights, fp32 gradients, fp32 master, m and v
  EXPECT_EQ(EstimateMemory(plan, true).weights_and_optimizer_bytes - narrow,
            2 * (3 * 64 * 64 + 64 * 64 + 3 * 64) * per_param / plan.tp);
}

TEST(MemoryModelTest, TheLastStageHoldsTheLmHeadInputAndTheLogits) {
  Plan plan = TinyPlan();
  // 4 bytes per token of the hidden state and of the vocabulary, over tp:
  // 32 * 4 * 4 * (64 + 100) / 2 = 41984 bytes, one micro-batch's.
  EXPECT_EQ(EstimateMemory(plan, true).output_bytes, 41984);
  plan.pp = 2;
  plan.global_batch = 16;
  // The first stage holds more (its embedding and two micro-batches in flight) and has no LM head.
  EXPECT_EQ(EstimateMemory(plan, true).output_bytes, 0);
  // One micro-batch in flight on each stage, each with one layer and the (tied) embedding or its
  // copy: the last, with the logits of a vast vocabulary besides, is the most loaded.
  plan.model.vocab = 100000;
  plan.global_batch = 4;
  const MemoryEstimate last = EstimateMemory(plan, true);
  EXPECT_EQ(last.output_bytes, 32.0 * 4 * 4 * (64 + 100000) / 2);
}

TEST(MemoryModelTest, PipelineStageHoldsItsLayersAndMicroBatchesInFlight) {
  Plan plan = TinyPlan();
  plan.pp = 2;
  plan.global_batch = 16;  // 4 micro-batches: the first stage holds pp = 2 of them
  MemoryEstimate m = EstimateMemory(plan, true);
  // One layer per stage: 99968/2/2 + 6400/2 = 28192 parameters.
  EXPECT_EQ(m.weights_and_optimizer_bytes, 28192.0 * 18);
  EXPECT_EQ(m.activation_bytes, 8192.0 * 22 * 1 * 2);
  // Besides, the CUDA context's half GiB.
  EXPECT_EQ(m.cuda_context_bytes, 0.5 * (1 << 30));
  EXPECT_EQ(m.total_bytes(), 28192.0 * 18 + 8192.0 * 22 * 2 + 0.5 * (1 << 30));
  plan.global_batch = 4;  // a single micro-batch: one in flight
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 22);
}

TEST(MemoryModelTest, UntiedLmHeadLivesOnTheOnlyStage) {
  Plan plan = TinyPlan();
  plan.model.tied_embeddings = false;
  // pp 1: the one stage holds the embedding and the LM head, 6400/2 more parameters.
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, (53184.0 + 3200) * 18);
  // pp 2: the first stage has no LM head.
  plan.pp = 2;
  EXPECT_EQ(EstimateMemory(plan).weights_and_optimizer_bytes, 28192.0 * 18);
}

TEST(MemoryModelTest, MoreTensorParallelismNeverNeedsMore) {
  Plan plan = TinyPlan();
  for (bool sp : {false, true}) {
    plan.sequence_parallel = sp;
    plan.tp = 1;
    double previous = EstimateMemory(plan, false).total_bytes();
    for (int tp : {2, 4}) {
      plan.tp = tp;
      double now = EstimateMemory(plan, false).total_bytes();
      EXPECT_LT(now, previous) << "tp " << tp << " sp " << sp;
      previous = now;
    }
  }
}

}  // namespace
}  // namespace domino

namespace domino {
namespace {

TEST(MemoryModelTest, InterleavingHoldsMoreMicroBatches) {
  Plan plan = TinyPlan();
  plan.model.layers = 4;
  plan.pp = 2;
  plan.global_batch = 16;  // 4 micro-batches
  // Two layers per stage, pp = 2 micro-batches in flight on the first stage.
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 22 * 2 * 2);
  plan.virtual_stages = 2;  // times 1 + (pp - 1) / (pp * v) = 1.25
  EXPECT_EQ(EstimateMemory(plan, true).activation_bytes, 8192.0 * 22 * 2 * 2 * 1.25);
}

TEST(MemoryModelTest, UnevenStagesTakeTheMostLoaded) {
  Plan plan = TinyPlan();
  plan.model.layers = 5;
  plan.pp = 2;
  plan.global_batch = 4;  // one micro-batch: one in flight everywhere
  ASSERT_EQ(ChunkLayers(plan), (std::vector<int>{2, 3}));
  // The last stage's three layers and its copy of the tied embedding outweigh the first's two
  // plus the embedding: 3 * 49984 / 2 + 3200 = 78176 parameters against 2 * 49984 / 2 + 3200 =
  // 53184.
  ASSERT_TRUE(plan.model.tied_embeddings);
  MemoryEstimate m = EstimateMemory(plan, true);
  EXPECT_EQ(m.weights_and_optimizer_bytes, 78176.0 * 18);
  EXPECT_EQ(m.activation_bytes, 8192.0 * 22 * 3);
}

TEST(ChunkLayersTest, RemainderGoesToTheMiddleStages) {
  Plan plan = TinyPlan();
  plan.model.layers = 126;
  plan.pp = 16;
  std::vector<int> want(16, 8);
  want.front() = want.back() = 7;  // Llama 3 405B's layout
  EXPECT_EQ(ChunkLayers(plan), want);
  plan.model.layers = 96;
  plan.pp = 8;
  plan.virtual_stages = 3;
  EXPECT_EQ(ChunkLayers(plan), std::vector<int>(24, 4));
}

TEST(ChunkLayersTest, ASplitThatCountsTheEndsGivesTheirChunksALayerLess) {
  Plan plan = TinyPlan();
  // Llama 3.1 405B as Megatron-Bridge splits it: 126 + 2 = 128 units in 64 chunks of 2.
  plan.model.layers = 126;
  plan.pp = 8;
  plan.virtual_stages = 8;
  plan.pipeline_split = PipelineSplit::kEnds;
  std::vector<int> want(64, 2);
  want.front() = want.back() = 1;
  EXPECT_EQ(ChunkLayers(plan), want);
  // The embedding alone: 31 + 1 = 32 units on 4 stages, the first one layer short.
  plan.model.layers = 31;
  plan.pp = 4;
  plan.virtual_stages = 1;
  plan.pipeline_split = PipelineSplit::kEmbedding;
  EXPECT_EQ(ChunkLayers(plan), (std::vector<int>{7, 8, 8, 8}));
  plan.pipeline_split = PipelineSplit::kLoss;
  EXPECT_EQ(ChunkLayers(plan), (std::vector<int>{8, 8, 8, 7}));
  // One stage holds both ends and every layer.
  plan.model.layers = 5;
  plan.pp = 1;
  plan.pipeline_split = PipelineSplit::kEnds;
  EXPECT_EQ(ChunkLayers(plan), std::vector<int>{5});
}

TEST(MemoryModelTest, DecomposedOverlapAddsTransformerEnginesUserbuffers) {
  // Ten buffers of s*b*h elements (8192), two bytes each in bf16; under fp8 the six all-gather
  // buffers take one byte. Domino's slicing allocates none.
  Plan plan = TinyPlan();
  plan.sequence_parallel = true;
  const double domino = EstimateMemory(plan).total_bytes();
  EXPECT_EQ(EstimateMemory(plan).comm_buffer_bytes, 0);
  plan.method = OverlapMethod::kDecomposed;
  EXPECT_EQ(EstimateMemory(plan).comm_buffer_bytes, 8192.0 * 10 * 2);
  EXPECT_EQ(EstimateMemory(plan).total_bytes(), domino + 8192.0 * 10 * 2);
  plan.method = OverlapMethod::kBoth;
  EXPECT_EQ(EstimateMemory(plan).comm_buffer_bytes, 8192.0 * 10 * 2);
  plan.precision = Dtype::kFp8;
  EXPECT_EQ(EstimateMemory(plan).comm_buffer_bytes, 8192.0 * (4 * 2 + 6 * 1));
}

// Unfused attention keeps its scores for the backward: the memory estimate of a plan that runs it
// is the one with them, whoever asks (the search, the sweep, simulate).
TEST(MemoryModelTest, CountsThePlansOwnAttention) {
  testing_util::PlanKnobs k;
  k.stack = "megatron-2021";
  const Plan unfused = testing_util::MakePlan(k);
  ASSERT_EQ(unfused.attention_kernel(), AttentionKernel::kUnfused);
  EXPECT_EQ(EstimateMemory(unfused).total_bytes(),
            EstimateMemory(unfused, /*flash_attention=*/false).total_bytes());
  EXPECT_GT(EstimateMemory(unfused).total_bytes(),
            EstimateMemory(unfused, /*flash_attention=*/true).total_bytes());
  const Plan flash = testing_util::MakePlan(testing_util::PlanKnobs{});
  EXPECT_EQ(EstimateMemory(flash).total_bytes(),
            EstimateMemory(flash, /*flash_attention=*/true).total_bytes());
}

}  // namespace
}  // namespace domino
