#ifndef DOMINO_TESTS_EXEC_EXECUTE_TEST_UTIL_H_
#define DOMINO_TESTS_EXEC_EXECUTE_TEST_UTIL_H_

// What the executor's tests share (execute_test.cc: the layer stack; execute_model_test.cc: the
// whole model): the tiny plans of every strategy, a run of them on threads, one rank each, with
// the numeric check, and a schedule with one op taken out.

#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "exec/communicator.h"
#include "exec/execute.h"
#include "planner/lower.h"
#include "tests/planner/test_plans.h"

namespace domino::exec::execute_testing {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

inline std::string ModelPath(const char* name) {
  return std::string(DOMINO_SOURCE_DIR) + "/models/examples/" + name + ".yaml";
}

struct Strategy {
  const char* name;
  int p, q;
  OverlapScope scope;
  bool sp;
};

// Every strategy the executor must get right: baseline, SP, row split p = 1..4 in both scopes,
// column split, 2D, SP with row split.
inline constexpr Strategy kStrategies[] = {
    {"baseline", 1, 1, OverlapScope::kNone, false},
    {"sp", 1, 1, OverlapScope::kNone, true},
    {"row1-intra", 1, 1, OverlapScope::kIntraLayer, false},
    {"row2-inter", 2, 1, OverlapScope::kInterLayer, false},
    {"row2-intra", 2, 1, OverlapScope::kIntraLayer, false},
    {"row3-inter", 3, 1, OverlapScope::kInterLayer, false},
    {"row4-inter", 4, 1, OverlapScope::kInterLayer, false},
    {"row4-intra", 4, 1, OverlapScope::kIntraLayer, false},
    {"col2", 1, 2, OverlapScope::kIntraLayer, false},
    {"col4", 1, 4, OverlapScope::kIntraLayer, false},
    {"2d-inter", 2, 2, OverlapScope::kInterLayer, false},
    {"2d-intra", 2, 4, OverlapScope::kIntraLayer, false},
    {"sp-row2", 2, 1, OverlapScope::kInterLayer, true},
};

// `model` on tp GPUs of one node, one micro-batch of 12 sequences of 16 tokens (12: divisible by
// every p above).
inline PlanKnobs TinyKnobs(const char* model, int tp) {
  PlanKnobs k;
  k.model = ModelPath(model);
  k.cluster = "dgx-h100:1:" + std::to_string(tp);
  k.tp = tp;
  k.seq_len = 16;
  k.micro_batch = 12;
  k.global_batch = 12;
  return k;
}

inline Plan TinyPlan(const char* model, int tp, const Strategy& st) {
  PlanKnobs k = TinyKnobs(model, tp);
  k.row_split = st.p;
  k.col_split = st.q;
  k.scope = st.scope;
  k.sequence_parallel = st.sp;
  return MakePlan(k);
}

// Runs `schedule` of `plan` on `ranks` threads, one rank each; returns every rank's result.
inline std::vector<Result<ExecuteResult>> RunRanks(const Plan& plan, const Schedule& schedule,
                                                   int ranks) {
  LocalGroup group(ranks);
  std::vector<std::optional<Result<ExecuteResult>>> results(ranks);
  std::vector<std::thread> threads;
  ExecuteOptions options;
  options.check = true;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      results[r].emplace(ExecuteSchedule(plan, schedule, group.member(r), options));
      if (!results[r]->ok()) group.Stop();  // the others would wait for this rank forever
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<Result<ExecuteResult>> out;
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

// One rank, two sequences of 8 tokens: the plan the finite-difference checks perturb.
inline Plan OneRankPlan(const char* model) {
  PlanKnobs k;
  k.model = ModelPath(model);
  k.cluster = "dgx-h100:1:1";
  k.tp = 1;
  k.seq_len = 8;
  k.micro_batch = 2;
  k.global_batch = 2;
  return MakePlan(k);
}

// The id of `schedule`'s primary tensor of this role in `layer` (-1: the model's ends); an
// expectation fails when there is none.
inline int32_t PrimaryTensor(const Schedule& schedule, TensorKind kind, TensorSlot slot, int layer,
                             bool gradient = false) {
  const int32_t i = FindTensor(
      schedule.tensors(),
      TensorRole{kind, slot, gradient, TensorForm::kPrimary, static_cast<int16_t>(layer), -1});
  EXPECT_GE(i, 0) << RoleName(TensorRole{kind, slot, gradient});
  return i;
}

inline Schedule LowerOk(const Plan& plan) {
  Result<Schedule> s = Lower(plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule{};
}

// Decomposed collective-matmul overlap, alone and on Domino's row slices, with chunks = tp (the
// default, TE's ring), more chunks than ranks, and a count that does not align with the shards.
struct DecomposedStrategy {
  const char* name;
  OverlapMethod method;
  int p;
  int chunks;  // 0: tp
  OverlapScope scope;
};
inline constexpr DecomposedStrategy kDecomposed[] = {
    {"decomposed", OverlapMethod::kDecomposed, 1, 0, OverlapScope::kNone},
    {"decomposed-8", OverlapMethod::kDecomposed, 1, 8, OverlapScope::kNone},
    {"decomposed-3", OverlapMethod::kDecomposed, 1, 3, OverlapScope::kIntraLayer},
    {"both", OverlapMethod::kBoth, 2, 0, OverlapScope::kInterLayer},
    {"both-3", OverlapMethod::kBoth, 2, 3, OverlapScope::kInterLayer},
};

inline Plan DecomposedPlan(const char* model, int tp, const DecomposedStrategy& st) {
  PlanKnobs k = TinyKnobs(model, tp);
  k.row_split = st.p;
  k.scope = st.scope;
  k.sequence_parallel = true;
  k.method = st.method;
  k.chunks = st.chunks;
  return MakePlan(k);
}

// A copy of `schedule` without op `drop`; ops that depended on it depend on its dependencies.
inline Schedule Without(const Schedule& schedule, int32_t drop) {
  Schedule out;
  for (const Tensor& t : schedule.tensors()) out.AddTensor(t);
  std::vector<int32_t> remap(schedule.size(), -1);
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op& op = schedule.ops()[i];
    if (static_cast<int32_t>(i) == drop) continue;
    std::vector<int32_t> deps;
    for (int32_t d : schedule.deps(op)) {
      if (d == drop) {
        for (int32_t dd : schedule.deps(schedule.op(drop)))
          if (remap[dd] >= 0) deps.push_back(remap[dd]);
      } else if (remap[d] >= 0) {
        deps.push_back(remap[d]);
      }
    }
    std::span<const TensorUse> reads = schedule.reads(op), writes = schedule.writes(op);
    remap[i] = out.Add(op, deps, reads, writes);
  }
  return out;
}

}  // namespace domino::exec::execute_testing

#endif  // DOMINO_TESTS_EXEC_EXECUTE_TEST_UTIL_H_
