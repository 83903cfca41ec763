// The evaluators and the starting plan that the search's tests share (search_test.cc,
// search_space_test.cc).
#ifndef DOMINO_TESTS_SIM_SEARCH_TEST_UTIL_H_
#define DOMINO_TESTS_SIM_SEARCH_TEST_UTIL_H_

#include <gtest/gtest.h>

#include "planner/search.h"
#include "sim/predict.h"

namespace domino::search_test {

// The planner's evaluator without bounds: each plan simulated (`calls` counts them).
class Simulator : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override {
    ++calls;
    Result<sim::Prediction> p = sim::Predict(plan);
    if (!p.ok()) return p.error();
    return p->figures;
  }
  int calls = 0;
};

// The planner's evaluator: the pipeline lower bound that prunes whole configurations, and each
// plan's own bound (its passes with TP time) that prunes it before its iteration is simulated.
class BoundedSimulator : public Simulator {
 public:
  double LowerBoundMs(const Plan& plan) override {
    Result<double> bound = sim::IdealLowerBoundMs(plan);
    EXPECT_TRUE(bound.ok()) << bound.message();
    return bound.ok() ? *bound : 0;
  }
  double PlanLowerBoundMs(const Plan& plan) override {
    Result<double> bound = sim::LowerBoundMs(plan);
    EXPECT_TRUE(bound.ok()) << bound.message();
    return bound.ok() ? *bound : 0;
  }
};

// A plan of `model` on `cluster` that satisfies the rules (every GPU a data-parallel rank), for a
// search to start from.
inline Plan Base(const char* model, const char* cluster, int global_batch, int seq_len = 1024) {
  Plan plan;
  plan.model_ref = model;
  plan.cluster_ref = cluster;
  plan.tp = 1;
  plan.dp = 0;  // resolved below
  plan.seq_len = seq_len;
  plan.micro_batch = 1;
  plan.global_batch = global_batch;
  plan.dp = 1;
  plan.pp = 1;
  // Resolve the model and cluster with a plan that satisfies the rules, whatever the search does.
  Result<ClusterSpec> cluster_spec = LoadCluster(cluster);
  EXPECT_TRUE(cluster_spec.ok());
  plan.dp = cluster_spec->total_gpus();
  plan.global_batch = global_batch;
  Status status = ResolvePlan(plan);
  EXPECT_TRUE(status.ok()) << status.message();
  return plan;
}

}  // namespace domino::search_test

#endif  // DOMINO_TESTS_SIM_SEARCH_TEST_UTIL_H_
