#ifndef DOMINO_TESTS_PLANNER_TEST_PLANS_H_
#define DOMINO_TESTS_PLANNER_TEST_PLANS_H_

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "planner/lower.h"
#include "planner/plan.h"

namespace domino::testing_util {

// The knobs the planner and simulator tests vary; everything else keeps Plan's defaults.
struct PlanKnobs {
  std::string model = "gpt3-2.7b";
  std::string cluster = "dgx-h100:1";
  int tp = 8;
  int pp = 1;
  int dp = 1;
  int virtual_stages = 1;
  bool distributed_optimizer = false;
  std::string stack = "";  // "": the default
  int seq_len = 256;
  int micro_batch = 4;
  int global_batch = 4;
  int row_split = 1;
  int col_split = 1;
  OverlapScope scope = OverlapScope::kNone;
  bool sequence_parallel = false;
  OverlapMethod method = OverlapMethod::kDomino;
  int chunks = 0;     // 0: tp
  int cp = 1;         // tests initialize the fields above in order
  int rs_chunks = 0;  // 0: the stack's
};

// A resolved plan; fails the test (and returns the unresolved plan) when it breaks a rule.
inline Plan MakePlan(const PlanKnobs& k) {
  Plan plan;
  plan.model_ref = k.model;
  plan.cluster_ref = k.cluster;
  plan.tp = k.tp;
  plan.cp = k.cp;
  plan.pp = k.pp;
  plan.dp = k.dp;
  plan.virtual_stages = k.virtual_stages;
  plan.distributed_optimizer = k.distributed_optimizer;
  if (!k.stack.empty()) plan.stack_ref = k.stack;
  plan.seq_len = k.seq_len;
  plan.micro_batch = k.micro_batch;
  plan.global_batch = k.global_batch;
  plan.row_split = k.row_split;
  plan.col_split = k.col_split;
  plan.scope = k.scope;
  plan.sequence_parallel = k.sequence_parallel;
  plan.method = k.method;
  plan.chunks = k.chunks;
  plan.rs_chunks = k.rs_chunks;
  Status status = ResolvePlan(plan);
  EXPECT_TRUE(status.ok()) << status.message();
  return plan;
}

// gpt3-2.7b (32 layers) on `stages` x `dp` GPUs of one node, tp 1, `m` micro-batches of 1.
inline Plan PipelinePlan(int stages, int chunks, int m, int dp = 1) {
  PlanKnobs k;
  k.tp = 1;
  k.pp = stages;
  k.dp = dp;
  k.virtual_stages = chunks;
  k.cluster = "dgx-h100:1:" + std::to_string(stages * dp);
  k.micro_batch = 1;
  k.global_batch = m * dp;
  return MakePlan(k);
}

// The schedule of MakePlan(knobs); fails the test (and returns an empty schedule) when lowering
// does.
inline Schedule LowerOk(const PlanKnobs& knobs) {
  Result<Schedule> s = Lower(MakePlan(knobs));
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule();
}

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_PLANNER_TEST_PLANS_H_
