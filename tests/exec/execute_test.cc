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
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

std::string ModelPath(const char* name) {
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
constexpr Strategy kStrategies[] = {
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

Plan TinyPlan(const char* model, int tp, const Strategy& st) {
  PlanKnobs k;
  k.model = ModelPath(model);
  k.cluster = "dgx-h100:1:" + std::to_string(tp);
  k.tp = tp;
  k.seq_len = 16;
  k.micro_batch = 12;  // divisible by every p above
  k.global_batch = 12;
  k.row_split = st.p;
  k.col_split = st.q;
  k.scope = st.scope;
  k.sequence_parallel = st.sp;
  return MakePlan(k);
}

// Runs `schedule` of `plan` on `ranks` threads, one rank each; returns every rank's result.
std::vector<Result<ExecuteResult>> RunRanks(const Plan& plan, const Schedule& schedule, int ranks) {
  LocalGroup group(ranks);
  std::vector<std::optional<Result<ExecuteResult>>> results(ranks);
  std::vector<std::thread> threads;
  ExecuteOptions options;
  options.check = true;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back(
        [&, r] { results[r].emplace(ExecuteSchedule(plan, schedule, group.member(r), options)); });
  }
  for (std::thread& t : threads) t.join();
  std::vector<Result<ExecuteResult>> out;
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

Schedule LowerOk(const Plan& plan) {
  Result<Schedule> s = Lower(plan);
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule{};
}

TEST(ExecuteTest, EveryStrategyMatchesTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
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
        ASSERT_EQ(checks.size(), 2u + 6 * plan.model.layers);  // output, input grad, weights
        for (const TensorCheck& c : checks) {
          EXPECT_TRUE(c.ok) << c.name << ": rel error " << c.rel_error;
          EXPECT_GT(c.reference_max, 0) << c.name << " is all zero: nothing was compared";
        }
        EXPECT_TRUE(results[1]->checks.empty());
      }
    }
  }
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
constexpr DecomposedStrategy kDecomposed[] = {
    {"decomposed", OverlapMethod::kDecomposed, 1, 0, OverlapScope::kNone},
    {"decomposed-8", OverlapMethod::kDecomposed, 1, 8, OverlapScope::kNone},
    {"decomposed-3", OverlapMethod::kDecomposed, 1, 3, OverlapScope::kIntraLayer},
    {"both", OverlapMethod::kBoth, 2, 0, OverlapScope::kInterLayer},
    {"both-3", OverlapMethod::kBoth, 2, 3, OverlapScope::kInterLayer},
};

Plan DecomposedPlan(const char* model, int tp, const DecomposedStrategy& st) {
  PlanKnobs k;
  k.model = ModelPath(model);
  k.cluster = "dgx-h100:1:" + std::to_string(tp);
  k.tp = tp;
  k.seq_len = 16;
  k.micro_batch = 12;
  k.global_batch = 12;
  k.row_split = st.p;
  k.scope = st.scope;
  k.sequence_parallel = true;
  k.method = st.method;
  k.chunks = st.chunks;
  return MakePlan(k);
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

// A copy of `schedule` without op `drop`; ops that depended on it depend on its dependencies.
Schedule Without(const Schedule& schedule, int32_t drop) {
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

// A copy of `schedule` whose every tensor has another name: prefixed and suffixed, so that no
// name matches a lowering's, whole or at either end.
Schedule Renamed(const Schedule& schedule) {
  Schedule out;
  for (const Tensor& t : schedule.tensors()) {
    Tensor renamed = t;
    renamed.name = "renamed/" + t.name + "/" + std::to_string(out.tensors().size());
    out.AddTensor(std::move(renamed));
  }
  for (const Op& op : schedule.ops())
    out.Add(op, schedule.deps(op), schedule.reads(op), schedule.writes(op));
  return out;
}

// Names are labels: the executor and its check find tensors by role, so a schedule whose tensors
// are all renamed runs and matches the reference as the lowered one does.
TEST(ExecuteTest, RenamedTensorsStillMatchTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    for (const Strategy& st : {kStrategies[10], kStrategies[12]}) {  // 2D; SP with row split
      SCOPED_TRACE(testing::Message() << model << " " << st.name);
      Plan plan = TinyPlan(model, 2, st);
      Schedule renamed = Renamed(LowerOk(plan));
      ASSERT_EQ(renamed.FindTensor("l0.x"), -1);
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, renamed, 2);
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(results[r].ok()) << results[r].message();
        EXPECT_TRUE(results[r]->passed) << "rank " << r;
      }
      const std::vector<TensorCheck>& checks = results[0]->checks;
      ASSERT_EQ(checks.size(), 2u + 6 * plan.model.layers);
      for (const TensorCheck& c : checks) {
        EXPECT_TRUE(c.ok) << c.name << ": rel error " << c.rel_error;
        EXPECT_GT(c.reference_max, 0) << c.name << " is all zero: nothing was compared";
      }
      // Weight checks carry the executed schedule's names.
      EXPECT_EQ(checks[2].name.rfind("renamed/l0.", 0), 0u) << checks[2].name;
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

// --- The whole model: embedding, layers, final norm, LM head, loss ----------------------------

Schedule LowerModel(const Plan& plan) {
  Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule{};
}

// Output, loss, embedding gradient, six per layer, final norm, and the LM head's when untied.
size_t ModelChecks(const Plan& plan) {
  return 3u + 6 * plan.model.layers + 1 + (plan.model.tied_embeddings ? 0 : 1);
}

TEST(ExecuteTest, TheWholeModelMatchesTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    for (int tp : {1, 2, 4}) {
      // Baseline, row split 2, 2D, SP, SP with row split.
      for (int s : {0, 3, 10, 1, 12}) {
        const Strategy& st = kStrategies[s];
        SCOPED_TRACE(testing::Message() << model << " tp " << tp << " " << st.name);
        Plan plan = TinyPlan(model, tp, st);
        std::vector<Result<ExecuteResult>> results = RunRanks(plan, LowerModel(plan), tp);
        for (int r = 0; r < tp; ++r) {
          ASSERT_TRUE(results[r].ok()) << results[r].message();
          EXPECT_TRUE(results[r]->passed) << "rank " << r;
          // Every rank holds the whole loss after its all-reduce.
          ASSERT_TRUE(results[r]->loss.has_value());
          EXPECT_NEAR(*results[r]->loss, *results[0]->loss, 1e-6);
        }
        const std::vector<TensorCheck>& checks = results[0]->checks;
        ASSERT_EQ(checks.size(), ModelChecks(plan));
        EXPECT_EQ(checks[1].name, "loss");
        EXPECT_EQ(checks[2].name, "embed.w.grad");
        EXPECT_EQ(checks[2].rows, plan.model.vocab);
        for (const TensorCheck& c : checks) {
          EXPECT_TRUE(c.ok) << c.name << ": rel error " << c.rel_error;
          EXPECT_GT(c.reference_max, 0) << c.name << " is all zero: nothing was compared";
        }
      }
    }
  }
}

TEST(ExecuteTest, ASquaredReluModelMatchesTheReference) {
  // tiny-gpt with Nemotron-4's MLP activation, relu(x)^2, at tp 2 with row split 2 and SP: the
  // sharded run's loss and every gradient match the single rank's, and they differ from GeLU's.
  for (int s : {0, 12}) {
    const Strategy& st = kStrategies[s];
    SCOPED_TRACE(st.name);
    Plan plan = TinyPlan("tiny-gpt", 2, st);
    plan.model.activation = Activation::kSquaredRelu;
    std::vector<Result<ExecuteResult>> results = RunRanks(plan, LowerModel(plan), 2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].message();
      EXPECT_TRUE(results[r]->passed) << "rank " << r;
    }
    for (const TensorCheck& c : results[0]->checks) EXPECT_TRUE(c.ok) << c.name;
    Plan gelu = TinyPlan("tiny-gpt", 2, st);
    std::vector<Result<ExecuteResult>> other = RunRanks(gelu, LowerModel(gelu), 2);
    ASSERT_TRUE(other[0].ok()) << other[0].message();
    ASSERT_TRUE(results[0]->loss && other[0]->loss);
    EXPECT_NE(*results[0]->loss, *other[0]->loss);
  }
}

TEST(ExecuteTest, TheWholeModelWithDecomposedOverlapMatchesTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    for (const DecomposedStrategy& st : {kDecomposed[0], kDecomposed[4]}) {
      SCOPED_TRACE(testing::Message() << model << " " << st.name);
      Plan plan = DecomposedPlan(model, 2, st);
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, LowerModel(plan), 2);
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(results[r].ok()) << results[r].message();
        EXPECT_TRUE(results[r]->passed) << "rank " << r;
      }
    }
  }
}

// The index of the first collective that reads (or, `writes`, writes) a tensor of role `role`.
int32_t CollectiveOn(const Schedule& s, const TensorRole& role, bool writes = false) {
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    if (op.kind != OpKind::kCollective) continue;
    for (const TensorUse& u : writes ? s.writes(op) : s.reads(op))
      if (s.tensors()[u.tensor].role == role) return static_cast<int32_t>(i);
  }
  return -1;
}

// Each collective the model's ends add carries something the reference needs: the embedding's
// partial rows, the loss's per-rank log-sum-exp and label logit, the LM head's input gradient,
// and (SP) the first layer's input gradient gathered for the embedding's backward. Dropping any
// one must fail the check.
TEST(ExecuteTest, DroppingACollectiveOfTheModelsEndsFailsTheCheck) {
  struct Victim {
    const char* what;
    int strategy;  // index into kStrategies
    TensorRole role;
    bool writes;
  };
  TensorRole embed_partial{TensorKind::kActivation, TensorSlot::kEmbedding};
  embed_partial.slice = 0;
  const TensorRole loss{TensorKind::kLoss, TensorSlot::kLmHead};
  const TensorRole head_dgrad{TensorKind::kActivation, TensorSlot::kFinalNorm, true};
  const TensorRole gathered_dx{TensorKind::kActivation, TensorSlot::kX, true, TensorForm::kGathered,
                               0};
  for (const Victim& v : {Victim{"embedding all-reduce", 0, embed_partial, false},
                          Victim{"embedding reduce-scatter (SP)", 1, embed_partial, false},
                          Victim{"loss all-reduce", 0, loss, false},
                          Victim{"loss all-reduce of slice 0", 3, loss, false},
                          Victim{"LM head input-gradient all-reduce", 0, head_dgrad, false},
                          Victim{"embedding gradient all-gather (SP)", 1, gathered_dx, true}}) {
    for (const char* model : {"tiny-gpt", "tiny-llama"}) {
      SCOPED_TRACE(testing::Message() << model << ": without the " << v.what);
      Plan plan = TinyPlan(model, 2, kStrategies[v.strategy]);
      Schedule schedule = LowerModel(plan);
      const int32_t victim = CollectiveOn(schedule, v.role, v.writes);
      ASSERT_GE(victim, 0);
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, Without(schedule, victim), 2);
      for (auto& r : results) {
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_FALSE(r->passed);
      }
    }
  }
}

TEST(ExecuteTest, TheWholeModelRunsWithOnePipelineStageAndReplicaOnTheCpu) {
  Plan plan = TinyPlan("tiny-gpt", 2, kStrategies[0]);
  EXPECT_EQ(DefaultExtent(plan, BackendKind::kCpu), Extent::kModel);
  EXPECT_EQ(DefaultExtent(plan, BackendKind::kCuda), Extent::kLayerStack);
  Result<Extent> parsed = ParseExtent("layers");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, Extent::kLayerStack);
  EXPECT_EQ(ExtentName(Extent::kModel), "model");
  EXPECT_EQ(ExtentName(Extent::kStep), "step");
  EXPECT_FALSE(ParseExtent("stage").ok());
  plan.pp = 2;  // whole training steps (exec/step.h) on the CPU, the layer stack on a GPU
  EXPECT_EQ(DefaultExtent(plan, BackendKind::kCpu), Extent::kStep);
  EXPECT_EQ(DefaultExtent(plan, BackendKind::kCuda), Extent::kLayerStack);
  EXPECT_FALSE(LowerForExecution(plan, Extent::kStep).ok());
  Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pp 2"), std::string::npos) << s.message();
}

// The whole model's reference must compute true gradients of its loss, the mean cross-entropy:
// the embedding (rows of tokens the micro-batch holds), a layer's weights, the final norm and
// the LM head (tied: the embedding's gradient also carries the head's part) against central
// differences.
TEST(ExecuteTest, TheWholeModelsGradientsMatchFiniteDifferences) {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    SCOPED_TRACE(model);
    PlanKnobs k;
    k.model = ModelPath(model);
    k.cluster = "dgx-h100:1:1";
    k.tp = 1;
    k.seq_len = 8;
    k.micro_batch = 2;
    k.global_batch = 2;
    Plan plan = MakePlan(k);
    Schedule s = LowerModel(plan);
    auto id = [&](TensorKind kind, TensorSlot slot, int layer, bool gradient = false) {
      int32_t i = FindTensor(s.tensors(), TensorRole{kind, slot, gradient, TensorForm::kPrimary,
                                                     static_cast<int16_t>(layer), -1});
      EXPECT_GE(i, 0) << RoleName(TensorRole{kind, slot, gradient});
      return i;
    };
    using enum TensorSlot;
    constexpr TensorKind weight = TensorKind::kWeight, norm = TensorKind::kNormWeight;
    const int32_t stats = id(TensorKind::kLoss, kLmHead, -1);
    SelfCommunicator self;
    auto run = [&](int32_t t, int64_t e, float delta, std::unique_ptr<CpuBackend>* keep) {
      auto backend = std::make_unique<CpuBackend>(s, plan.model, 0, 1, /*seed=*/7);
      backend->mutable_data(t)[e] += delta;
      EXPECT_TRUE(Interpret(s, *backend, self).ok());
      const Tensor& st = s.tensors()[stats];
      const double loss = cpu::MeanCrossEntropy(
          cpu::ConstMat(backend->data(stats).data(), st.rows, st.cols, st.cols));
      if (keep) *keep = std::move(backend);
      return loss;
    };
    std::unique_ptr<CpuBackend> base;
    run(id(norm, kFinalNorm, -1), 0, 0.0f, &base);
    const int64_t h = plan.model.hidden;
    const int64_t token = static_cast<int64_t>(
        base->data(id(TensorKind::kInput, kEmbedding, -1))[3]);  // a row the lookup reads
    struct Probe {
      TensorKind kind;
      TensorSlot slot;
      int layer;
      int64_t element;
    };
    std::vector<Probe> probes = {{weight, kEmbedding, -1, token * h},
                                 {weight, kEmbedding, -1, token * h + h - 1},
                                 {weight, kEmbedding, -1, 5 * h + 2},  // the head's part only
                                 {norm, kFinalNorm, -1, 7},
                                 {weight, kFc2, 1, 11},
                                 {norm, kLn1, 0, 3}};
    if (!plan.model.tied_embeddings) probes.push_back({weight, kLmHead, -1, 9 * h + 4});
    for (const Probe& probe : probes) {
      const int32_t t = id(probe.kind, probe.slot, probe.layer),
                    g = id(probe.kind, probe.slot, probe.layer, /*gradient=*/true);
      const float step = 1e-2f;
      const double numeric =
          (run(t, probe.element, step, nullptr) - run(t, probe.element, -step, nullptr)) /
          (2.0 * step);
      const double analytic = base->data(g)[probe.element];
      EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1e-1, std::fabs(numeric)))
          << s.tensors()[g].name << "[" << probe.element << "]";
    }
  }
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
    PlanKnobs k;
    k.model = ModelPath(model);
    k.cluster = "dgx-h100:1:1";
    k.tp = 1;
    k.seq_len = 8;
    k.micro_batch = 2;
    k.global_batch = 2;
    Plan plan = MakePlan(k);
    Schedule s = LowerOk(plan);
    const int top = plan.model.layers - 1;
    auto id = [&](TensorKind kind, TensorSlot slot, int layer, bool gradient = false) {
      int32_t i = FindTensor(s.tensors(), TensorRole{kind, slot, gradient, TensorForm::kPrimary,
                                                     static_cast<int16_t>(layer), -1});
      EXPECT_GE(i, 0) << RoleName(TensorRole{kind, slot, gradient});
      return i;
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
            << s.tensors()[g].name << "[" << e << "]";
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
