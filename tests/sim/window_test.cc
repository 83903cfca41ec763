// Sliding attention windows as a plan prices them (Plan::WindowedLayer): the attention kernels'
// keys (CausalKeys), the model FLOPs that count them, the chunks that carry them through a
// pipeline (ChunkWindowedLayers) and the bounds that must stay below the iterations they bound.
#include <gtest/gtest.h>

#include <vector>

#include "models/model_counts.h"
#include "sim/cost_model.h"
#include "sim/predict.h"
#include "tests/models/tiny_models.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

// GPT-3 2.7B (32 layers, 32 heads of 80) at tp 8 on one DGX H100, one sequence of `seq_len`.
Plan Sequence(int seq_len, int cp = 1, const std::string& stack = "") {
  PlanKnobs k;
  k.stack = stack;
  k.seq_len = seq_len, k.micro_batch = 1, k.global_batch = 1;
  if (cp > 1) k.tp = 8 / cp, k.cp = cp;
  return MakePlan(k);
}

TEST(WindowTest, CausalKeysByHand) {
  EXPECT_DOUBLE_EQ(CausalKeys(8, 0), 4);    // no window: half the sequence
  EXPECT_DOUBLE_EQ(CausalKeys(8, 4), 3);    // 4 - 4^2 / (2 * 8)
  EXPECT_DOUBLE_EQ(CausalKeys(8, 8), 4);    // a window as long as the sequence changes nothing
  EXPECT_DOUBLE_EQ(CausalKeys(8, 100), 4);  // nor a longer one
  EXPECT_DOUBLE_EQ(CausalKeys(32768, 4096), 3840);
  // A chunk of queries 3072 .. 4096 of a longer sequence: 3584 keys without a window; with 2048,
  // queries 1536 .. 2048 see 1792 on average and the next 512 see 2048: 1920.
  EXPECT_DOUBLE_EQ(CausalKeys(1024, 0, 3072), 3584);
  EXPECT_DOUBLE_EQ(CausalKeys(1024, 2048, 1536), 1920);
  EXPECT_DOUBLE_EQ(CausalKeys(1024, 1024, 4096), 1024);  // past the window: all of it
}

TEST(WindowTest, ModelFlopsCountTheWindowOnItsLayers) {
  // Tiny GPT: 6N = 9696, two layers 8 wide. At seq 16 the causal count is 12 * (2 * 8) * 8 =
  // 1536; a window of 4 on layer 0 alone (every 2) takes its 8 keys to 4 - 16/32 = 3.5: 12 *
  // 11.5 * 8 = 1104. The full count ignores the mask and the window (Megatron-LM's convention).
  ModelSpec model = testing_models::TinyGpt();
  model.window = AttentionWindow{.tokens = 4, .every = 2};
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(model, 16, AttentionCount::kCausal), 9696.0 + 1536.0);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(model, 16, AttentionCount::kCausalWindow),
                   9696.0 + 1104.0);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(model, 16), 9696.0 + 3072.0);
}

TEST(WindowTest, AWindowedTileAttendsToItsWindow) {
  // A 128-query tile of 8192 causal tokens under a window of 1024 takes 1024 - 1024^2 / 16384 =
  // 960 keys of the main loop, plus the H100's 184 overhead keys (cost_model_test's
  // FlashAttentionTilesPayTheirOverheadKeys: 4096 + 184 without the window).
  const Plan plan = Sequence(8192);  // the cost model keeps a reference to its plan
  const CostModel model(plan, {});
  Op op;
  op.kind = OpKind::kAttention;
  op.sequences = 2, op.seq_len = 8192, op.heads = 4, op.kv_heads = 4, op.head_dim = 128;
  op.window = 1024;
  const double sm_rate = 989e6 / 132;
  EXPECT_NEAR(model.Cost(op).wave_us, 4.0 * 128 * (960 + 184) * 128 / (sm_rate * 0.59), 1e-9);
  op.tags.phase = Phase::kBackward;
  EXPECT_NEAR(model.Cost(op).wave_us, 2.5 * 4.0 * 128 * (960 + 500) * 128 / (sm_rate * 0.53), 1e-9);
}

TEST(WindowTest, APlanPricesTheWindowWhereItsStackRunsIt) {
  auto predict = [](Plan plan, int window) {
    plan.model.window = AttentionWindow{.tokens = window};
    Result<Prediction> p = Predict(plan);
    EXPECT_TRUE(p.ok()) << p.message();
    return p.ok() ? *p : Prediction{};
  };
  // megatron-core at cp 1: the window's attention is about a quarter of the full one, the rest
  // of the iteration the same.
  const Prediction full = predict(Sequence(8192), 0), windowed = predict(Sequence(8192), 1024);
  const int attention = static_cast<int>(OpClass::kAttention);
  EXPECT_LT(windowed.figures.iteration_ms, full.figures.iteration_ms);
  EXPECT_NEAR(windowed.busy_ms[attention] / full.busy_ms[attention], 0.3, 0.05);
  EXPECT_NEAR(full.figures.iteration_ms - windowed.figures.iteration_ms,
              full.busy_ms[attention] - windowed.busy_ms[attention], 0.1 * full.busy_ms[attention]);
  // A window as long as the sequence, a stack that runs none, and context parallelism's ring all
  // price full causal attention.
  EXPECT_EQ(predict(Sequence(8192), 8192).figures.iteration_ms, full.figures.iteration_ms);
  EXPECT_EQ(predict(Sequence(8192, 1, "deepspeed-domino"), 1024).figures.iteration_ms,
            predict(Sequence(8192, 1, "deepspeed-domino"), 0).figures.iteration_ms);
  Plan ring = Sequence(8192, 2);
  ring.stack.te_cp_comm_types = false;  // a stack that runs only the ring
  EXPECT_EQ(predict(ring, 1024).figures.iteration_ms, predict(ring, 0).figures.iteration_ms);
  // megatron-core's context parallelism runs the window as a2a (cp 2 divides the heads): priced.
  Plan a2a = Sequence(8192, 2);
  a2a.model.window = AttentionWindow{.tokens = 1024};
  EXPECT_EQ(a2a.cp_communication(), CpComm::kA2a);
  EXPECT_LT(predict(Sequence(8192, 2), 1024).figures.iteration_ms,
            predict(Sequence(8192, 2), 0).figures.iteration_ms);
}

TEST(WindowTest, MfuStaysBelowOneAtLongSequences) {
  // At a million tokens a window of 4096 leaves a small share of the causal attention: the model
  // FLOPs count what the kernels compute, so MFU stays a fraction.
  Plan plan = Sequence(1 << 20);
  plan.model.window = AttentionWindow{.tokens = 4096};
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_GT(p->figures.mfu, 0.1);
  EXPECT_LE(p->figures.mfu, 1.0);
}

TEST(WindowTest, ChunksCarryTheirWindowedLayersAndTheBoundsHold) {
  // 32 layers on 2 stages of 2 chunks, 8 each; a window from layer 5 on: 3, 8, 8 and 8 of them.
  PlanKnobs k;
  k.tp = 2, k.pp = 2, k.dp = 2, k.virtual_stages = 2;
  k.seq_len = 4096, k.micro_batch = 1, k.global_batch = 8;
  Plan plan = MakePlan(k);
  plan.model.window = AttentionWindow{.tokens = 512, .first_layer = 5};
  EXPECT_EQ(ChunkWindowedLayers(plan), (std::vector<int>{3, 8, 8, 8}));
  Result<double> ideal = IdealLowerBoundMs(plan), bound = LowerBoundMs(plan);
  Result<Prediction> predicted = Predict(plan);
  ASSERT_TRUE(ideal.ok() && bound.ok() && predicted.ok());
  EXPECT_LE(*ideal, *bound * (1 + 1e-12));
  EXPECT_LE(*bound, predicted->figures.iteration_ms * (1 + 1e-12));
  // The windowed plan is faster than the same plan without, and each chunk's pass is its own:
  // the first chunk (3 windowed layers) takes longer than the others.
  Plan unwindowed = plan;
  unwindowed.model.window = {};
  Result<Prediction> full = Predict(unwindowed);
  ASSERT_TRUE(full.ok());
  EXPECT_LT(predicted->figures.iteration_ms, full->figures.iteration_ms);
  EXPECT_EQ(ChunkWindowedLayers(unwindowed), (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace domino::sim
