#include "exec/execute.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/communicator.h"
#include "exec/cpu_backend.h"
#include "exec/cpu_kernels.h"
#include "exec/cuda_device.h"
#include "exec/interpreter.h"
#include "planner/lower.h"
#include "tests/exec/execute_test_util.h"
#include "tests/planner/test_plans.h"

// The executor on the layer stack: every strategy against the single-rank reference, schedules
// that must fail the check, the timeline, and the launches it must refuse.

namespace domino::exec {
namespace {

using execute_testing::DecomposedPlan;
using execute_testing::DecomposedStrategy;
using execute_testing::kDecomposed;
using execute_testing::kStrategies;
using execute_testing::LowerOk;
using execute_testing::ModelPath;
using execute_testing::OneRankPlan;
using execute_testing::PrimaryTensor;
using execute_testing::RunRanks;
using execute_testing::Strategy;
using execute_testing::TinyPlan;
using execute_testing::Without;
using testing_util::MakePlan;
using testing_util::PlanKnobs;

TEST(ExecuteTest, EveryStrategyMatchesTheReference) {
  // tiny-gemma2's stack ends in its top layer's post-norm: the output is mid plus that.
  for (const char* model : {"tiny-gpt", "tiny-llama", "tiny-gemma2"}) {
    for (int tp : {2, 4}) {
      for (const Strategy& st : kStrategies) {
        SCOPED_TRACE(testing::Message() << model << " tp " << tp << " " << st.name);
        Plan plan = TinyPlan(model, tp, st);
        std::vector<Result<ExecuteResult>> results = RunRanks(plan, LowerOk(plan), tp);
        for (int r = 0; r < tp; ++r) {
          ASSERT_TRUE(results[r].ok()) << results[r].message();
          EXPECT_TRUE(results[r]->passed) << "rank " << r;
        }
        const std::vector<TensorCheck>& checks = results[0]->checks;
        // The output, the input gradient and each layer's weights (and post-norms' gains).
        ASSERT_EQ(checks.size(), 2u + (plan.model.post_norms ? 8 : 6) * plan.model.layers);
        for (const TensorCheck& c : checks) {
          EXPECT_TRUE(c.ok) << c.name << ": rel error " << c.rel_error;
          EXPECT_GT(c.reference_max, 0) << c.name << " is all zero: nothing was compared";
        }
        EXPECT_TRUE(results[1]->checks.empty());
      }
    }
  }
}

TEST(ExecuteTest, EveryDecomposedStrategyMatchesTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    for (int tp : {2, 4}) {
      for (const DecomposedStrategy& st : kDecomposed) {
        SCOPED_TRACE(testing::Message() << model << " tp " << tp << " " << st.name);
        Plan plan = DecomposedPlan(model, tp, st);
        Schedule schedule = LowerOk(plan);
        int parts = 0;
        for (const Op& op : schedule.ops()) parts += op.parts > 1 ? 1 : 0;
        EXPECT_GT(parts, 0) << "nothing was decomposed";
        std::vector<Result<ExecuteResult>> results = RunRanks(plan, schedule, tp);
        for (int r = 0; r < tp; ++r) {
          ASSERT_TRUE(results[r].ok()) << results[r].message();
          EXPECT_TRUE(results[r]->passed) << "rank " << r;
        }
        for (const TensorCheck& c : results[0]->checks)
          EXPECT_TRUE(c.ok) << c.name << ": rel error " << c.rel_error;
      }
    }
  }
}

TEST(ExecuteTest, ALoweringThatDropsOneAllReduceFailsTheCheck) {
  Plan plan = TinyPlan("tiny-gpt", 2, kStrategies[3]);  // row split 2, inter-layer
  Schedule schedule = LowerOk(plan);
  int32_t victim = -1;
  for (size_t i = 0; i < schedule.size() && victim < 0; ++i)
    if (schedule.ops()[i].collective == CollectiveOp::kAllReduce) victim = static_cast<int32_t>(i);
  ASSERT_GE(victim, 0);
  Schedule broken = Without(schedule, victim);
  ASSERT_EQ(broken.size(), schedule.size() - 1);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, broken, 2);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_FALSE(r->passed);
  }
  int differing = 0;
  for (const TensorCheck& c : results[0]->checks) differing += c.ok ? 0 : 1;
  EXPECT_GT(differing, 0);
  // The intact schedule passes with the same seed and ranks: the drop is what broke it.
  std::vector<Result<ExecuteResult>> intact = RunRanks(plan, schedule, 2);
  ASSERT_TRUE(intact[0].ok());
  EXPECT_TRUE(intact[0]->passed);
}

// Dropping any one part of a decomposed all-gather or reduce-scatter leaves rows of some rank
// never moved: the check must fail, whichever part it is.
TEST(ExecuteTest, ADecomposedScheduleThatDropsOneChunksTransferFailsTheCheck) {
  Plan plan = DecomposedPlan("tiny-gpt", 2, kDecomposed[0]);
  Schedule schedule = LowerOk(plan);
  for (CollectiveOp kind : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    for (int part : {0, 1}) {
      SCOPED_TRACE(testing::Message()
                   << (kind == CollectiveOp::kAllGather ? "all-gather" : "reduce-scatter")
                   << " part " << part);
      int32_t victim = -1;
      for (size_t i = 0; i < schedule.size() && victim < 0; ++i) {
        const Op& op = schedule.ops()[i];
        if (op.collective == kind && op.parts > 1 && op.part == part)
          victim = static_cast<int32_t>(i);
      }
      ASSERT_GE(victim, 0);
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, Without(schedule, victim), 2);
      for (auto& r : results) {
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_FALSE(r->passed);
      }
    }
  }
  std::vector<Result<ExecuteResult>> intact = RunRanks(plan, schedule, 2);
  ASSERT_TRUE(intact[0].ok());
  EXPECT_TRUE(intact[0]->passed);
}

TEST(ExecuteTest, TimelineCoversEveryOpInIssueOrder) {
  Plan plan = TinyPlan("tiny-gpt", 2, kStrategies[3]);
  Schedule schedule = LowerOk(plan);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, schedule, 2);
  ASSERT_TRUE(results[0].ok());
  const Timeline& t = results[0]->timeline;
  ASSERT_EQ(t.ops.size(), schedule.size());
  for (size_t i = 0; i < t.ops.size(); ++i) {
    EXPECT_LE(t.ops[i].start_us, t.ops[i].end_us);
    if (i > 0) {
      EXPECT_GE(t.ops[i].start_us, t.ops[i - 1].end_us);
    }
  }
  EXPECT_GT(t.end_us(), 0);
}

TEST(ExecuteTest, CommunicatorMustMatchTheTpGroup) {
  Plan plan = TinyPlan("tiny-gpt", 2, kStrategies[0]);
  SelfCommunicator self;
  Result<ExecuteResult> r = Execute(plan, self, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("2 ranks"), std::string::npos) << r.message();
}

// --comm emulate plays one rank alone: it refuses a launched group, --check, and a rank outside
// the TP group, before it looks for a GPU.
TEST(ExecuteTest, EmulatedCollectivesRunOneRankWithoutCheck) {
  Plan plan = TinyPlan("tiny-gpt", 2, kStrategies[3]);
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kEmulate;
  LocalGroup group(2);
  Result<ExecuteResult> launched = Execute(plan, group.member(0), options);
  ASSERT_FALSE(launched.ok());
  EXPECT_NE(launched.message().find("2 ranks were launched"), std::string::npos)
      << launched.message();
  SelfCommunicator self;
  options.check = true;
  Result<ExecuteResult> checked = Execute(plan, self, options);
  ASSERT_FALSE(checked.ok());
  EXPECT_NE(checked.message().find("the check needs real collectives"), std::string::npos)
      << checked.message();
  options.check = false;
  options.emulate_rank = 2;
  Result<ExecuteResult> outside = Execute(plan, self, options);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.message().find("rank 2 to emulate is not a rank"), std::string::npos)
      << outside.message();
}

// Without a GPU (or without CUDA in the build) the CUDA backend says so instead of running.
TEST(ExecuteTest, CudaBackendWithoutAGpuSaysSo) {
  if (ListCudaDevices().ok()) GTEST_SKIP() << "a GPU is visible";
  Plan plan = TinyPlan("tiny-gpt", 1, kStrategies[0]);
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  SelfCommunicator self;
  Result<ExecuteResult> r = Execute(plan, self, options);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.message().find("no CUDA GPU is visible") != std::string::npos ||
              r.message().find("no CUDA support") != std::string::npos)
      << r.message();
}

TEST(ExecuteTest, SingleRankRunEqualsItsReference) {
  PlanKnobs k;
  k.model = ModelPath("tiny-llama");
  k.cluster = "dgx-h100:1:1";
  k.tp = 1;
  k.seq_len = 16;
  k.micro_batch = 4;
  k.global_batch = 4;
  k.row_split = 2;
  k.scope = OverlapScope::kInterLayer;
  Plan plan = MakePlan(k);
  SelfCommunicator self;
  ExecuteOptions options;
  options.check = true;
  Result<ExecuteResult> r = Execute(plan, self, options);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->passed);
  // Same kernels in the same order on the same rows: row slices only split the GEMMs' rows, so
  // the output is bit-identical (gradients add slice by slice and may round differently).
  EXPECT_EQ(r->checks[0].name, "output");
  EXPECT_EQ(r->checks[0].max_abs_error, 0);
}

// The reference itself must compute true gradients, or every check would compare two wrong
// answers: the input and weight gradients of loss = sum(output * output gradient) against
// central differences, through the whole lowered stack (residuals, norms, attention, MLP).
TEST(ExecuteTest, ReferenceGradientsMatchFiniteDifferences) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    SCOPED_TRACE(model);
    Plan plan = OneRankPlan(model);
    Schedule s = LowerOk(plan);
    const int top = plan.model.layers - 1;
    auto id = [&](TensorKind kind, TensorSlot slot, int layer, bool gradient = false) {
      return PrimaryTensor(s, kind, slot, layer, gradient);
    };
    using enum TensorSlot;
    constexpr TensorKind value = TensorKind::kActivation, weight = TensorKind::kWeight,
                         norm = TensorKind::kNormWeight, input = TensorKind::kInput;
    SelfCommunicator self;
    // Runs the stack with tensor `t` element `e` moved by `delta`; returns the loss (and the
    // backend, for the gradients of the unperturbed run).
    auto run = [&](int32_t t, int64_t e, float delta, std::unique_ptr<CpuBackend>* keep) {
      auto backend = std::make_unique<CpuBackend>(s, plan.model, 0, 1, /*seed=*/7);
      backend->mutable_data(t)[e] += delta;
      EXPECT_TRUE(Interpret(s, *backend, self).ok());
      const auto& mid = backend->data(id(value, kMid, top));
      const auto& fc2 = backend->data(id(value, kFc2, top));
      const auto& g = backend->data(id(value, kOut, top, /*gradient=*/true));
      double loss = 0;
      for (size_t i = 0; i < g.size(); ++i) loss += (double{mid[i]} + fc2[i]) * g[i];
      if (keep) *keep = std::move(backend);
      return loss;
    };
    std::unique_ptr<CpuBackend> base;
    run(id(input, kX, 0), 0, 0.0f, &base);
    struct Probe {
      TensorKind kind;
      TensorSlot slot;
      int layer;
    };
    for (const Probe& probe :
         {Probe{input, kX, 0}, Probe{weight, kQkv, 0}, Probe{norm, kLn1, 0}, Probe{weight, kFc1, 1},
          Probe{weight, kProj, 1}, Probe{norm, kLn2, 1}, Probe{weight, kFc2, 0}}) {
      const int32_t t = id(probe.kind, probe.slot, probe.layer),
                    g = id(probe.kind, probe.slot, probe.layer, /*gradient=*/true);
      const int64_t n = static_cast<int64_t>(base->data(t).size());
      for (int64_t e : {int64_t{0}, n / 3, n - 1}) {
        const float h = 1e-2f;
        double numeric = (run(t, e, h, nullptr) - run(t, e, -h, nullptr)) / (2.0 * h);
        double analytic = base->data(g)[e];
        EXPECT_NEAR(analytic, numeric, 2e-2 * std::max(1.0, std::fabs(numeric)))
            << RoleName(s.tensors()[g].role) << "[" << e << "]";
      }
    }
  }
}

TEST(ReferencePlanTest, IsUnshardedAndUnsliced) {
  Plan plan = TinyPlan("tiny-gpt", 4, kStrategies[12]);
  Plan ref = ReferencePlan(plan);
  EXPECT_EQ(ref.tp, 1);
  EXPECT_EQ(ref.row_split, 1);
  EXPECT_EQ(ref.col_split, 1);
  EXPECT_FALSE(ref.sequence_parallel);
  EXPECT_EQ(ref.scope, OverlapScope::kNone);
  EXPECT_EQ(ref.micro_batch, plan.micro_batch);
  EXPECT_FALSE(CheckPlanRules(ref).has_value());
}

}  // namespace
}  // namespace domino::exec
