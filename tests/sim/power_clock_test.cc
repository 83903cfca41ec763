#include <gtest/gtest.h>

#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

GpuSpec PowerLimited(double knee, double slope) {
  GpuSpec gpu;
  gpu.power_duty_knee = knee;
  gpu.power_duty_slope = slope;
  return gpu;
}

TEST(PowerClockTest, ByHand) {
  const GpuSpec hopper = PowerLimited(0.6, 0.375);
  EXPECT_DOUBLE_EQ(PowerClock(hopper, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(PowerClock(hopper, 0.6), 1.0);
  EXPECT_DOUBLE_EQ(PowerClock(hopper, 0.76), 1.0 - 0.375 * 0.16);  // 0.94
  EXPECT_DOUBLE_EQ(PowerClock(hopper, 1.0), 0.85);
  EXPECT_DOUBLE_EQ(PowerClock(PowerLimited(0, 0), 1.0), 1.0);  // no limit
  EXPECT_DOUBLE_EQ(PowerClock(PowerLimited(0, 1), 1.0), 0.0);  // never below 0
}

// GPT-3 13B on one DGX-H100 at TP 8, no overlap (GEMMs about 56% of the iteration), on a GPU
// whose clock falls from a GEMM share of 0.3.
Plan GemmBoundPlan() {
  PlanKnobs k;
  k.model = "gpt3-13b";
  k.cluster = "dgx-h100:1";
  k.tp = 8;
  k.seq_len = 2048;
  k.micro_batch = 8;
  k.global_batch = 16;
  Plan plan = MakePlan(k);
  plan.cluster.node.gpu.power_duty_knee = 0.3;
  return plan;
}

Prediction PredictedOrFail(const Plan& plan, const CostOptions& options = {}) {
  Result<Prediction> p = Predict(plan, options);
  EXPECT_TRUE(p.ok()) << p.message();
  return p.ok() ? std::move(p).value() : Prediction{};
}

TEST(PowerClockTest, AGemmBoundPlanRunsAtTheClockItsFullClockShareSets) {
  Plan plan = GemmBoundPlan();
  Plan unlimited = plan;
  unlimited.cluster.node.gpu.power_duty_slope = 0;
  const Prediction free = PredictedOrFail(unlimited);
  EXPECT_DOUBLE_EQ(free.tensor_clock, 1.0);
  EXPECT_DOUBLE_EQ(free.gemm_duty_unheld, 0.0);
  ASSERT_GT(free.gemm_duty, plan.cluster.node.gpu.power_duty_knee);

  const Prediction held = PredictedOrFail(plan);
  EXPECT_DOUBLE_EQ(held.gemm_duty_unheld, free.gemm_duty);
  EXPECT_DOUBLE_EQ(held.tensor_clock, PowerClock(plan.cluster.node.gpu, free.gemm_duty));
  EXPECT_LT(held.tensor_clock, 1.0);
  // The same as the unlimited GPU run at that clock; slower than at the full one, but by less
  // than every GEMM and attention slowed by it would make it.
  CostOptions at_clock;
  at_clock.tensor_clock = held.tensor_clock;
  const Prediction same = PredictedOrFail(unlimited, at_clock);
  EXPECT_DOUBLE_EQ(same.figures.iteration_ms, held.figures.iteration_ms);
  EXPECT_GT(held.figures.iteration_ms, free.figures.iteration_ms);
  EXPECT_LT(held.figures.iteration_ms, free.figures.iteration_ms / held.tensor_clock);
  // Longer GEMMs fill more of the iteration; the invariants hold at the lower clock.
  EXPECT_GT(held.gemm_duty, free.gemm_duty);
  EXPECT_LE(held.figures.ideal_ms, held.figures.iteration_ms);
  EXPECT_LE(held.figures.iteration_ms, held.serial_ms);
}

TEST(PowerClockTest, APlanBelowTheKneeKeepsTheFullClock) {
  Plan plan = GemmBoundPlan();
  plan.cluster.node.gpu.power_duty_knee = 1.0;
  const Prediction p = PredictedOrFail(plan);
  EXPECT_DOUBLE_EQ(p.tensor_clock, 1.0);
  EXPECT_GT(p.gemm_duty, 0.0);
  EXPECT_LE(p.gemm_duty, 1.0);
}

}  // namespace
}  // namespace domino::sim
