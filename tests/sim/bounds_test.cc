// The search's lower bounds (sim/bounds.cc, declared in sim/predict.h): the ideal bound of a
// configuration and each plan's own, against the iterations they bound.
#include <gtest/gtest.h>

#include "planner/search.h"
#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

// GPT-3 2.7B at tp 2 on one DGX H100: `pp` stages of `v` chunks, 4 / pp DP ranks, seq 1024,
// 8 micro-batches of 2 per DP rank.
Plan OnOneNode(int pp, int v) {
  PlanKnobs k;
  k.tp = 2, k.pp = pp, k.dp = 4 / pp, k.virtual_stages = v;
  k.seq_len = 1024, k.micro_batch = 2, k.global_batch = 8 * k.dp;
  return MakePlan(k);
}

TEST(BoundsTest, APlansBoundLiesBetweenTheIdealBoundAndItsIteration) {
  // Each plan's own bound (its passes with their TP collectives) lies between the ideal bound and
  // its simulated iteration, over pipelines, interleaving, DP with and without the distributed
  // optimizer, FSDP, SP, row and column splits and decomposed overlap.
  struct Case {
    int pp, v, p, q;
    bool sp, distopt;
    OverlapMethod method;
    bool fsdp = false;
  };
  const Case cases[] = {
      {1, 1, 1, 1, false, false, OverlapMethod::kDomino},
      {1, 1, 2, 1, true, true, OverlapMethod::kDomino},
      {1, 1, 1, 2, false, false, OverlapMethod::kDomino},
      {2, 1, 1, 1, true, true, OverlapMethod::kDomino},
      {2, 1, 2, 2, false, false, OverlapMethod::kDomino},
      {2, 2, 1, 1, true, false, OverlapMethod::kDomino},
      {4, 1, 2, 1, true, true, OverlapMethod::kDomino},
      {2, 1, 1, 1, true, false, OverlapMethod::kDecomposed},
      {4, 2, 1, 1, false, true, OverlapMethod::kDomino},
      {1, 1, 1, 1, true, true, OverlapMethod::kDomino, true},
      {2, 1, 2, 1, false, true, OverlapMethod::kDomino, true},
      {2, 2, 1, 1, true, true, OverlapMethod::kDecomposed, true},
  };
  for (const Case& c : cases) {
    Plan plan = OnOneNode(c.pp, c.v);
    plan.row_split = c.p, plan.col_split = c.q;
    plan.scope = c.p > 1   ? OverlapScope::kInterLayer
                 : c.q > 1 ? OverlapScope::kIntraLayer
                           : OverlapScope::kNone;
    plan.sequence_parallel = c.sp, plan.distributed_optimizer = c.distopt, plan.fsdp = c.fsdp;
    plan.method = c.method;
    ASSERT_TRUE(ResolvePlan(plan).ok()) << DescribeCandidate(plan);
    Result<double> ideal = IdealLowerBoundMs(plan), bound = LowerBoundMs(plan);
    Result<Prediction> predicted = Predict(plan);
    ASSERT_TRUE(ideal.ok() && bound.ok() && predicted.ok()) << DescribeCandidate(plan);
    EXPECT_LE(*ideal, *bound * (1 + 1e-12)) << DescribeCandidate(plan);
    EXPECT_LE(*bound, predicted->figures.iteration_ms * (1 + 1e-12)) << DescribeCandidate(plan);
    // Not loose: the passes are most of an iteration.
    EXPECT_GT(*bound, 0.5 * predicted->figures.iteration_ms) << DescribeCandidate(plan);
  }
}

TEST(BoundsTest, TheIdealBoundIsBelowEveryIdeal) {
  // Over pipelines, interleaving, data parallelism and slicings, the bound never exceeds the
  // simulated ideal, and with a pipeline it is not loose.
  for (int pp : {1, 2, 4}) {
    for (int v : {1, 2}) {
      if (pp == 1 && v > 1) continue;
      for (int p : {1, 2}) {
        Plan plan = OnOneNode(pp, v);
        plan.row_split = p;
        plan.scope = p > 1 ? OverlapScope::kInterLayer : OverlapScope::kNone;
        ASSERT_TRUE(ResolvePlan(plan).ok());
        Result<double> bound = IdealLowerBoundMs(plan);
        Result<Prediction> predicted = Predict(plan);
        ASSERT_TRUE(bound.ok() && predicted.ok());
        EXPECT_GT(*bound, 0);
        EXPECT_LE(*bound, predicted->figures.ideal_ms * (1 + 1e-12)) << pp << v << p;
        if (pp > 1) {
          EXPECT_GT(*bound, 0.5 * predicted->figures.ideal_ms);
        }
      }
    }
  }
}

TEST(BoundsTest, FsdpsBoundCountsTheDpStream) {
  // GPT-3 2.7B, tp 1 x dp 16 over two nodes: FSDP's gathers and reduce-scatters cross
  // InfiniBand every micro-batch, so the dp-comm stream, not the passes, bounds the iteration.
  // The bound stays below the ideal (TP free) and the iteration, and above the passes' bound.
  PlanKnobs k;
  k.cluster = "dgx-h100:2", k.tp = 1, k.dp = 16, k.distributed_optimizer = true;
  k.seq_len = 1024, k.micro_batch = 2, k.global_batch = 4 * 16;
  Plan plan = MakePlan(k);
  Result<double> sharded_optimizer = IdealLowerBoundMs(plan);
  plan.fsdp = true;
  Result<double> ideal = IdealLowerBoundMs(plan), bound = LowerBoundMs(plan);
  Result<Prediction> predicted = Predict(plan);
  ASSERT_TRUE(sharded_optimizer.ok() && ideal.ok() && bound.ok() && predicted.ok());
  // The passes alone bound the distributed optimizer's plan (115.6 ms on this model); FSDP's
  // stream (129.7 ms) bounds this one.
  EXPECT_GT(*ideal, 1.1 * *sharded_optimizer);
  EXPECT_LE(*ideal, predicted->figures.ideal_ms * (1 + 1e-12));
  EXPECT_LE(*bound, predicted->figures.iteration_ms * (1 + 1e-12));
  EXPECT_GT(*ideal, 0.7 * predicted->figures.ideal_ms);  // not loose
}

}  // namespace
}  // namespace domino::sim
