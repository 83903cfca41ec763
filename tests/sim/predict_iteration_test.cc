// A whole iteration as the simulator predicts it: the pipeline bubble and transfers, the busy
// time of every chunk, DP reduction and the optimizer, recompute, determinism.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/predict.h"
#include "tests/planner/test_plans.h"
#include "tests/sim/predict_ok.h"

namespace domino::sim {
namespace {

using testing_util::PredictOk;

Plan ThreeD(int pp, int dp, int v = 1, Recompute recompute = Recompute::kNone,
            bool distopt = false) {
  Plan plan;
  plan.model_ref = "gpt3-2.7b";
  plan.cluster_ref = "dgx-h100:" + std::to_string(pp * dp);
  plan.tp = 8;
  plan.pp = pp;
  plan.dp = dp;
  plan.virtual_stages = v;
  plan.seq_len = 1024;
  plan.micro_batch = 1;
  plan.global_batch = 8 * dp;  // 8 micro-batches per DP rank
  plan.recompute = recompute;
  plan.distributed_optimizer = distopt;
  Status status = ResolvePlan(plan);
  EXPECT_TRUE(status.ok()) << status.message();
  return plan;
}

void ExpectBreakdownAddsUp(const Prediction& p) {
  const IterationBreakdown& b = p.breakdown;
  EXPECT_NEAR(b.compute_ms + b.exposed_tp_ms + b.bubble_ms + b.exposed_pp_ms + b.exposed_dp_ms +
                  b.optimizer_ms,
              p.figures.iteration_ms, 1e-6 * p.figures.iteration_ms);
  for (double part : {b.compute_ms, b.exposed_tp_ms, b.bubble_ms, b.exposed_pp_ms, b.exposed_dp_ms,
                      b.optimizer_ms})
    EXPECT_GE(part, -1e-9);
  EXPECT_LE(p.figures.ideal_ms, p.figures.iteration_ms + 1e-9);
  EXPECT_LE(p.figures.iteration_ms, p.serial_ms + 1e-9);
}

TEST(PredictIterationTest, PipelineBubbleAndTransfersAppear) {
  Prediction one = PredictOk(ThreeD(1, 1));
  Prediction two = PredictOk(ThreeD(2, 1));
  ExpectBreakdownAddsUp(one);
  ExpectBreakdownAddsUp(two);
  EXPECT_EQ(one.breakdown.bubble_ms, 0);
  EXPECT_EQ(one.breakdown.exposed_pp_ms, 0);
  EXPECT_GT(two.breakdown.bubble_ms, 0);
  EXPECT_GT(two.breakdown.exposed_pp_ms, 0);
  // Half the layers per stage: the iteration shrinks, but by less than half (the bubble).
  EXPECT_LT(two.figures.iteration_ms, one.figures.iteration_ms);
  EXPECT_GT(two.figures.iteration_ms, 0.5 * one.figures.iteration_ms);
  // 1F1B's bubble on 2 stages and 8 micro-batches is about (p-1)/(m+p-1) = 1/9 of the stage time.
  const double stage =
      two.breakdown.compute_ms + two.breakdown.exposed_tp_ms + two.breakdown.bubble_ms;
  EXPECT_NEAR(two.breakdown.bubble_ms / stage, 1.0 / 9, 0.03);
}

TEST(PredictIterationTest, InterleavingShrinksTheBubble) {
  Prediction plain = PredictOk(ThreeD(4, 1));
  Prediction inter = PredictOk(ThreeD(4, 1, 2));
  ExpectBreakdownAddsUp(inter);
  EXPECT_LT(inter.breakdown.bubble_ms, plain.breakdown.bubble_ms);
}

TEST(PredictIterationTest, BusyTimeCountsEveryChunkOfTheFirstStage) {
  // 6 layers on pp 2: split evenly, stage 0 runs 3 layers behind the embedding in one chunk;
  // split counting the ends in vp 2, chunks of 1 and 2 layers, the embedding in front of the
  // first. The same GEMMs and attention at the same clock (the power limit off), so the same time.
  Plan even = ThreeD(2, 1);
  Plan ends = ThreeD(2, 1, 2);
  ends.pipeline_split = PipelineSplit::kEnds;
  for (Plan* plan : {&even, &ends}) {
    plan->model.layers = 6;
    plan->cluster.node.gpu.power_duty_knee = 1;
    ASSERT_FALSE(CheckPlanRules(*plan).has_value());
  }
  const Prediction a = PredictOk(even);
  const Prediction b = PredictOk(ends);
  for (OpClass c : {OpClass::kGemm, OpClass::kAttention}) {
    SCOPED_TRACE(OpClassName(c));
    const double busy = a.busy_ms[static_cast<int>(c)];
    EXPECT_GT(busy, 0);
    EXPECT_NEAR(b.busy_ms[static_cast<int>(c)], busy, 1e-9 * busy);
  }
}

TEST(PredictIterationTest, DataParallelReductionAndOptimizer) {
  Prediction alone = PredictOk(ThreeD(1, 1));
  Prediction dp = PredictOk(ThreeD(1, 4));
  Prediction dist = PredictOk(ThreeD(1, 4, 1, Recompute::kNone, true));
  ExpectBreakdownAddsUp(dp);
  ExpectBreakdownAddsUp(dist);
  EXPECT_EQ(alone.dp_comm_ms, 0);
  EXPECT_GT(dp.dp_comm_ms, 0);
  EXPECT_GT(dp.breakdown.exposed_dp_ms, 0);  // the last bucket is reduced after the backward
  // The distributed optimizer steps a quarter of the parameters (plus one launch).
  EXPECT_NEAR(dist.breakdown.optimizer_ms, dp.breakdown.optimizer_ms / 4, 0.01);
}

TEST(PredictIterationTest, RecomputeAddsForwardWork) {
  Prediction none = PredictOk(ThreeD(2, 1));
  Prediction selective = PredictOk(ThreeD(2, 1, 1, Recompute::kSelective));
  Prediction full = PredictOk(ThreeD(2, 1, 1, Recompute::kFull));
  EXPECT_LT(none.figures.iteration_ms, selective.figures.iteration_ms);
  EXPECT_LT(selective.figures.iteration_ms, full.figures.iteration_ms);
  int recomputed = 0;
  for (const Op& op : full.schedule.ops()) recomputed += op.tags.phase == Phase::kRecompute;
  EXPECT_GT(recomputed, 0);
  // Model FLOPs leave recompute out: the same tokens/s would mean the same TFLOP/s.
  EXPECT_NEAR(full.figures.tflops_per_gpu * full.figures.iteration_ms,
              none.figures.tflops_per_gpu * none.figures.iteration_ms,
              1e-6 * none.figures.tflops_per_gpu * none.figures.iteration_ms);
  EXPECT_GT(full.figures.memory_gib_per_gpu, 0);
  EXPECT_LT(full.figures.memory_gib_per_gpu, none.figures.memory_gib_per_gpu);
}

TEST(PredictIterationTest, RecomputingSomeLayersSitsBetweenNoneAndAll) {
  // GPT-3 2.7B on pp 2 (16 layers a stage): full recompute of the first 4 layers of each stage
  // (Megatron's block method) redoes exactly 4/16 of what recomputing all 16 redoes, its time and
  // memory fall between none and all, and recompute_layers equal to the stage's layers is all.
  Plan all = ThreeD(2, 1, 1, Recompute::kFull);
  Plan four = all;
  four.recompute_layers = 4;
  Plan sixteen = all;
  sixteen.recompute_layers = 16;
  const Prediction none = PredictOk(ThreeD(2, 1));
  const Prediction some = PredictOk(four), full = PredictOk(all), whole = PredictOk(sixteen);
  auto redone = [](const Prediction& p) {
    int n = 0;
    std::set<int> layers;
    for (const Op& op : p.schedule.ops())
      if (op.tags.phase == Phase::kRecompute) {
        ++n;
        layers.insert(op.tags.layer);
      }
    return std::make_pair(n, layers);
  };
  const auto [some_ops, some_layers] = redone(some);
  const auto [full_ops, full_layers] = redone(full);
  EXPECT_EQ(some_ops * 4, full_ops);
  EXPECT_EQ(some_layers, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(full_layers.size(), 16u);
  EXPECT_LT(none.figures.iteration_ms, some.figures.iteration_ms);
  EXPECT_LT(some.figures.iteration_ms, full.figures.iteration_ms);
  EXPECT_GT(some.figures.memory_gib_per_gpu, full.figures.memory_gib_per_gpu);
  EXPECT_LT(some.figures.memory_gib_per_gpu, none.figures.memory_gib_per_gpu);
  EXPECT_EQ(whole.figures.iteration_ms, full.figures.iteration_ms);
  EXPECT_EQ(whole.figures.memory_gib_per_gpu, full.figures.memory_gib_per_gpu);
}

TEST(PredictIterationTest, DeterministicAcrossRuns) {
  Plan plan = ThreeD(2, 2, 2, Recompute::kSelective, true);
  Prediction a = PredictOk(plan), b = PredictOk(plan);
  EXPECT_EQ(a.figures.iteration_ms, b.figures.iteration_ms);
  EXPECT_EQ(a.breakdown.bubble_ms, b.breakdown.bubble_ms);
  EXPECT_EQ(a.breakdown.exposed_dp_ms, b.breakdown.exposed_dp_ms);
}

}  // namespace
}  // namespace domino::sim
