#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "exec/communicator.h"
#include "exec/cpu_backend.h"
#include "exec/cpu_kernels.h"
#include "exec/execute.h"
#include "exec/interpreter.h"
#include "planner/lower.h"
#include "tests/exec/execute_test_util.h"

// The executor on the whole model: embedding, layers, final norm, LM head and loss, against the
// single-rank reference, with collectives dropped, and its gradients against finite differences.

namespace domino::exec {
namespace {

using execute_testing::DecomposedPlan;
using execute_testing::DecomposedStrategy;
using execute_testing::kDecomposed;
using execute_testing::kStrategies;
using execute_testing::OneRankPlan;
using execute_testing::PrimaryTensor;
using execute_testing::RunRanks;
using execute_testing::Strategy;
using execute_testing::TinyPlan;
using execute_testing::Without;

Schedule LowerModel(const Plan& plan) {
  Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule{};
}

// Output, loss, embedding gradient, six per layer (one more with a QK-norm, two with post-norms),
// final norm, and the LM head's when untied.
size_t ModelChecks(const Plan& plan) {
  const int per_layer = 6 + (plan.model.qk_norm ? 1 : 0) + (plan.model.post_norms ? 2 : 0);
  return 3u + per_layer * plan.model.layers + 1 + (plan.model.tied_embeddings ? 0 : 1);
}

TEST(ExecuteTest, TheWholeModelMatchesTheReference) {
  for (const char* model : {"tiny-gpt", "tiny-llama", "tiny-qwen3", "tiny-gemma2"}) {
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

// tiny-gemma2's sliding window (layer 0) and soft cap on the logits change what the executor
// computes: the loss moves without either, and with the window as wide as the sequence the
// attention is the full causal one.
TEST(ExecuteTest, TheSlidingWindowAndTheSoftCapsAreRun) {
  auto loss = [](const Plan& plan) {
    Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<Result<ExecuteResult>> results = RunRanks(plan, *s, plan.tp);
    EXPECT_TRUE(results[0].ok() && results[0]->loss.has_value());
    return results[0].ok() && results[0]->loss ? *results[0]->loss : 0.0;
  };
  for (int tp : {1, 2}) {
    SCOPED_TRACE(testing::Message() << "tp " << tp);
    const Plan plan = TinyPlan("tiny-gemma2", tp, kStrategies[0]);
    ASSERT_EQ(plan.model.window.tokens, 5);
    ASSERT_TRUE(plan.model.window.Covers(0) && !plan.model.window.Covers(1));
    const double base = loss(plan);
    Plan full = plan, wide = plan, uncapped = plan, scores_uncapped = plan;
    full.model.window = {};
    wide.model.window.tokens = plan.seq_len - 1;
    uncapped.model.logit_softcap = 0;
    scores_uncapped.model.attention_softcap = 0;
    EXPECT_GT(std::fabs(loss(full) - base), 1e-6);
    EXPECT_DOUBLE_EQ(loss(wide), loss(full));
    EXPECT_GT(std::fabs(loss(uncapped) - base), 1e-3);
    EXPECT_GT(std::fabs(loss(scores_uncapped) - base), 1e-6);
  }
}

// A plan with dropout: the executor drops the attention's probabilities and each residual
// branch's output by masks that hang on each element's place in the whole step (exec/dropout.h),
// so every TP rank, row slice, column split and sequence-parallel shard drops what the single
// rank of the reference drops, and the run passes; the loss moves, and moves again without the
// MLP branch's dropout.
TEST(ExecuteTest, TheDropoutsArePlacedByTheWholeStep) {
  for (int s : {0, 3, 10, 12}) {
    const Strategy& st = kStrategies[s];
    SCOPED_TRACE(st.name);
    Plan plan = TinyPlan("tiny-llama", 2, st);
    plan.dropout = true;
    std::vector<Result<ExecuteResult>> results = RunRanks(plan, LowerModel(plan), 2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].message();
      EXPECT_TRUE(results[r]->passed) << "rank " << r;
    }
    for (const TensorCheck& c : results[0]->checks)
      EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
    Plan none = plan;
    none.dropout = false;
    std::vector<Result<ExecuteResult>> plain = RunRanks(none, LowerModel(none), 2);
    ASSERT_TRUE(plain[0].ok()) << plain[0].message();
    ASSERT_TRUE(results[0]->loss && plain[0]->loss);
    EXPECT_GT(std::fabs(*results[0]->loss - *plain[0]->loss), 1e-6);
    Plan attention_branch = plan;
    attention_branch.mlp_dropout = false;
    std::vector<Result<ExecuteResult>> fewer =
        RunRanks(attention_branch, LowerModel(attention_branch), 2);
    ASSERT_TRUE(fewer[0].ok()) << fewer[0].message();
    EXPECT_TRUE(fewer[0]->passed);
    ASSERT_TRUE(fewer[0]->loss);
    EXPECT_GT(std::fabs(*results[0]->loss - *fewer[0]->loss), 1e-6);
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
  // tiny-qwen3's heads are wider than hidden / heads: QKV writes 8 x 16 + 2 x 4 x 16 columns and
  // proj reads 128; its Q and K go through a norm on each head. tiny-gemma2's layer 0 attends
  // within a sliding window, its attention's and MLP's outputs are normalized before their
  // residual adds, and its logits are soft-capped. With dropout (tiny-llama, and tiny-gemma2,
  // whose branches' dropouts come after their post-norms), the masks are fixed functions of where
  // each element sits, so the loss is as differentiable as without: the attention's and both
  // residual branches' backward must take the forward's masks.
  struct Case {
    const char* model;
    bool dropout;
  };
  for (const Case& c :
       {Case{"tiny-gpt", false}, Case{"tiny-llama", false}, Case{"tiny-qwen3", false},
        Case{"tiny-gemma2", false}, Case{"tiny-llama", true}, Case{"tiny-gemma2", true}}) {
    const char* model = c.model;
    SCOPED_TRACE(testing::Message() << model << (c.dropout ? " with dropout" : ""));
    Plan plan = OneRankPlan(model);
    plan.dropout = c.dropout;
    FillOffsets fill;
    SetDropout(plan, &fill);
    Schedule s = LowerModel(plan);
    auto id = [&](TensorKind kind, TensorSlot slot, int layer, bool gradient = false) {
      return PrimaryTensor(s, kind, slot, layer, gradient);
    };
    using enum TensorSlot;
    constexpr TensorKind weight = TensorKind::kWeight, norm = TensorKind::kNormWeight;
    const int32_t stats = id(TensorKind::kLoss, kLmHead, -1);
    SelfCommunicator self;
    auto run = [&](int32_t t, int64_t e, float delta, std::unique_ptr<CpuBackend>* keep) {
      auto backend = std::make_unique<CpuBackend>(s, plan.model, 0, 1, /*seed=*/7, fill);
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
                                 {weight, kQkv, 0, 5},
                                 {weight, kProj, 1, plan.model.q_hidden() * h - 3},
                                 {norm, kLn1, 0, 3}};
    if (!plan.model.tied_embeddings) probes.push_back({weight, kLmHead, -1, 9 * h + 4});
    if (plan.model.post_norms) {  // both gains, and a weight whose gradient crosses one
      probes.push_back({norm, kPostNorm1, 0, 6});
      probes.push_back({norm, kPostNorm2, 1, 9});
      probes.push_back({weight, kFc1, 0, 13});
    }
    if (plan.model.qk_norm) {  // Q's gain, then K's
      const int64_t d = plan.model.head_width();
      probes.push_back({norm, kQkNorm, 0, 3});
      probes.push_back({norm, kQkNorm, 1, d + 5});
      // Row 1, column 7 of K: through K's norm.
      const int64_t qkv_cols = plan.model.q_hidden() + 2 * plan.model.kv_hidden();
      probes.push_back({weight, kQkv, 1, qkv_cols + plan.model.q_hidden() + 7});
    }
    for (const Probe& probe : probes) {
      const int32_t t = id(probe.kind, probe.slot, probe.layer),
                    g = id(probe.kind, probe.slot, probe.layer, /*gradient=*/true);
      const float step = 1e-2f;
      const double numeric =
          (run(t, probe.element, step, nullptr) - run(t, probe.element, -step, nullptr)) /
          (2.0 * step);
      const double analytic = base->data(g)[probe.element];
      EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1e-1, std::fabs(numeric)))
          << RoleName(s.tensors()[g].role) << "[" << probe.element << "]";
    }
  }
}

}  // namespace
}  // namespace domino::exec
