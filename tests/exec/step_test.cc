#include "exec/step.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "exec/communicator.h"
#include "exec/cp_attention.h"
#include "exec/cpu_backend.h"
#include "planner/iteration.h"
#include "planner/lower.h"
#include "planner/stack.h"
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

Plan TinyPlan(const char* model, int tp, int pp, int dp, int layers = 0, int cp = 1,
              const char* stack = "") {
  PlanKnobs k;
  k.stack = stack;
  k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/" + model + ".yaml";
  k.cluster = "dgx-h100:1:" + std::to_string(tp * cp * pp * dp);
  k.tp = tp, k.pp = pp, k.dp = dp, k.cp = cp;
  k.seq_len = 16;
  k.micro_batch = 4;
  k.global_batch = 16;
  Plan plan = MakePlan(k);
  if (layers > 0) plan.model.layers = layers;
  return plan;
}

// Every rank ran and passed its check: each tensor it compared is within the tolerance.
void ExpectPassed(const std::vector<Result<ExecuteResult>>& results) {
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(r->passed);
  }
  for (const TensorCheck& c : results[0]->checks) EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
}

// Runs `iteration` of `plan` on tp x pp x dp threads, one rank each; returns every rank's result.
std::vector<Result<ExecuteResult>> RunRanks(
    const Plan& plan, const Iteration& iteration, const ExecuteOptions& options = [] {
      ExecuteOptions o;
      o.check = true;
      return o;
    }()) {
  const int ranks = plan.tp * plan.cp * plan.pp * plan.dp;
  LocalGroup group(ranks);
  std::vector<std::optional<Result<ExecuteResult>>> results(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      results[r].emplace(ExecuteIteration(plan, iteration, group.member(r), options));
      if (!results[r]->ok()) group.Stop();  // the others would wait for this rank forever
    });
  for (std::thread& t : threads) t.join();
  std::vector<Result<ExecuteResult>> out;
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

Iteration IterationOf(const Plan& plan) {
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  EXPECT_TRUE(it.ok()) << it.message();
  return std::move(it).value();
}

// The iteration without op `drop` (its dependants lose that dependency).
Iteration Without(const Iteration& it, int32_t drop) {
  Iteration out = it;
  out.schedule = Schedule();
  for (const Tensor& t : it.schedule.tensors()) out.schedule.AddTensor(t);
  std::vector<int32_t> id(it.schedule.size(), -1);
  for (size_t i = 0; i < it.schedule.size(); ++i) {
    if (static_cast<int32_t>(i) == drop) continue;
    const Op& op = it.schedule.ops()[i];
    std::vector<int32_t> deps;
    for (int32_t d : it.schedule.deps(op))
      if (id[d] >= 0) deps.push_back(id[d]);
    id[i] = out.schedule.Add(op, deps, it.schedule.reads(op), it.schedule.writes(op));
  }
  return out;
}

int32_t FirstOf(const Iteration& it, OpFunc func) {
  for (size_t i = 0; i < it.schedule.size(); ++i)
    if (it.schedule.ops()[i].func == func) return static_cast<int32_t>(i);
  return -1;
}

TEST(StepTest, RanksArePlacedTpInnermost) {
  Plan plan = TinyPlan("tiny-gpt", 2, 2, 2);
  // tp-dp-pp: world = tp + 2 (dp + 2 pp).
  EXPECT_EQ(CoordsOf(plan, 5), (RankCoords{1, 1, 0}));
  EXPECT_EQ(CoordsOf(plan, 2), (RankCoords{0, 0, 1}));
  plan.placement = Placement::kTpPpDp;  // world = tp + 2 (pp + 2 dp)
  EXPECT_EQ(CoordsOf(plan, 2), (RankCoords{0, 1, 0}));
  EXPECT_EQ(CoordsOf(plan, 5), (RankCoords{1, 0, 1}));
  for (Placement placement : {Placement::kTpDpPp, Placement::kTpPpDp}) {
    plan.placement = placement;
    for (int r = 0; r < 8; ++r) EXPECT_EQ(WorldRank(plan, CoordsOf(plan, r)), r);
  }
}

TEST(StepTest, ContextParallelRanksSitBesideTheirTpGroup) {
  const Plan plan = TinyPlan("tiny-llama", 2, 2, 1, 0, /*cp=*/2);
  // tp-cp-dp-pp: world = tp + 2 (cp + 2 (dp + 1 pp)).
  EXPECT_EQ(CoordsOf(plan, 3), (RankCoords{1, 0, 0, 1}));
  EXPECT_EQ(CoordsOf(plan, 6), (RankCoords{0, 1, 0, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(WorldRank(plan, CoordsOf(plan, r)), r);
  EXPECT_EQ(RanksText(plan), "tp 2 x cp 2 x pp 2 x dp 1");
}

TEST(StepTest, ContextParallelTokensAreLoadBalancedChunks) {
  // seq 16 over cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(CpPosition(0, 16, 2, 0), 0);
  EXPECT_EQ(CpPosition(3, 16, 2, 0), 3);
  EXPECT_EQ(CpPosition(4, 16, 2, 0), 12);
  EXPECT_EQ(CpPosition(7, 16, 2, 0), 15);
  EXPECT_EQ(CpPosition(0, 16, 2, 1), 4);
  EXPECT_EQ(CpPosition(4, 16, 2, 1), 8);
  EXPECT_EQ(CpPosition(7, 16, 2, 1), 11);
}

TEST(StepTest, ContextParallelStepMatchesTheReference) {
  // Every CP comm type on tiny-llama (causal, grouped-query attention: 8 heads over 4 key/value
  // heads): the schedule has its transfers or collectives, and the loss, gradients and weights
  // match the single rank. TP 2 beside the ring and a2a (2 heads a rank over cp 2), row slices
  // under all_gather (each slice gathers its own keys), a2a+p2p's groups of 2 around a ring of 2.
  // And on tiny-gemma2, whose layer 0 attends within a sliding window of 5 tokens across the
  // ranks' chunks and whose scores are soft-capped, on the executor's own stack (which runs any
  // of them over a window, and a soft cap under context parallelism).
  struct Case {
    CpComm comm;
    int tp, cp, row_split;
    OpFunc moves;  // the op that moves the keys
  };
  const Case cases[] = {{CpComm::kP2p, 2, 2, 1, OpFunc::kCpSendRecv},
                        {CpComm::kAllGather, 1, 2, 2, OpFunc::kCpAllGather},
                        {CpComm::kA2a, 2, 2, 1, OpFunc::kCpAllToAll},
                        {CpComm::kA2a, 1, 4, 1, OpFunc::kCpAllToAll},
                        {CpComm::kA2aP2p, 1, 4, 1, OpFunc::kCpSendRecv}};
  for (const char* model : {"tiny-llama", "tiny-gemma2"}) {
    for (const Case& k : cases) {
      SCOPED_TRACE(model);
      Plan plan = TinyPlan(model, k.tp, 1, 1, 0, k.cp,
                           std::string_view(model) == "tiny-gemma2" ? "domino" : "");
      plan.cp_comm = k.comm;
      plan.row_split = k.row_split;
      ASSERT_FALSE(CheckPlanRules(plan).has_value()) << CheckPlanRules(plan)->rule;
      Result<Schedule> pass =
          LowerStage(plan, LowerOptions{plan.model.layers, true, true, true, true});
      ASSERT_TRUE(pass.ok()) << pass.message();
      int moves = 0, trades = 0;
      for (const Op& op : pass->ops()) {
        moves += op.func == k.moves;
        trades += op.func == OpFunc::kCpAllToAll;
      }
      EXPECT_GT(moves, 0) << CpCommName(k.comm);
      EXPECT_EQ(trades > 0, k.comm == CpComm::kA2a || k.comm == CpComm::kA2aP2p);
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
      for (const auto& r : results) {
        ASSERT_TRUE(r.ok()) << CpCommName(k.comm) << ": " << r.message();
        EXPECT_TRUE(r->passed) << CpCommName(k.comm) << " tp " << k.tp << " cp " << k.cp;
      }
      ASSERT_EQ(results[0]->losses.size(), 2u);
      EXPECT_LT(results[0]->losses[1], results[0]->losses[0]);
      for (const TensorCheck& c : results[0]->checks)
        EXPECT_TRUE(c.ok) << CpCommName(k.comm) << " " << c.name << " " << c.rel_error;
    }
  }
}

// Attention dropout under context parallelism: each comm type's core drops, by the masks' places
// in the whole step (the micro-batch's sequences, the TP rank's and a2a's share of the heads, the
// query's and key's positions), what the reference's single rank drops.
TEST(StepTest, ContextParallelAttentionDropsWhatOneRankDrops) {
  struct Case {
    CpComm comm;
    int tp, cp, row_split;
  };
  for (const Case& k : {Case{CpComm::kP2p, 2, 2, 1}, Case{CpComm::kAllGather, 1, 2, 2},
                        Case{CpComm::kA2a, 2, 2, 1}, Case{CpComm::kA2aP2p, 1, 4, 1}}) {
    SCOPED_TRACE(CpCommName(k.comm));
    Plan plan = TinyPlan("tiny-llama", k.tp, 1, 1, 0, k.cp);
    plan.cp_comm = k.comm;
    plan.row_split = k.row_split;
    plan.dropout = true;
    ASSERT_FALSE(CheckPlanRules(plan).has_value()) << CheckPlanRules(plan)->rule;
    ExpectPassed(RunRanks(plan, IterationOf(plan)));
  }
}

TEST(StepTest, ContextParallelHostWorkIsEachQueryAgainstTheKeysBeforeIt) {
  // tiny-llama (8 heads of 8) at seq 16 over cp 2, 4 sequences in 2 row slices: 2 sequences x 8
  // local queries x 8 keys on average x 8 heads x 4 x 8 = 32,768 operations a core.
  Plan plan = TinyPlan("tiny-llama", 1, 1, 1, 0, /*cp=*/2);
  plan.row_split = 2;
  EXPECT_DOUBLE_EQ(CpAttention::HostFlopsPerCore(plan), 2.0 * 8 * 8 * 8 * 4 * 8);
  EXPECT_LT(CpAttention::HostFlopsPerCore(plan), CpAttention::kMaxHostFlopsPerCore);
}

TEST(StepTest, DroppingARingTransferFailsTheCheck) {
  // Without layer 0's first forward transfer, each rank's second ring step sees its own keys
  // again instead of its neighbour's: the attention, hence the loss, is wrong.
  const Plan plan = TinyPlan("tiny-llama", 1, 1, 1, 0, /*cp=*/2);
  ExecuteOptions options;
  options.check = true;
  options.steps = 1;
  std::atomic<int> dropped = 0;  // the ranks' threads count
  options.alter_chunk = [&dropped](Schedule& s) {
    Schedule out;
    for (const Tensor& t : s.tensors()) out.AddTensor(t);
    std::vector<int32_t> id(s.size(), -1);
    bool done = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const Op& op = s.ops()[i];
      if (!done && op.func == OpFunc::kCpSendRecv && op.tags.layer == 0 &&
          op.tags.phase == Phase::kForward) {
        done = true;
        continue;
      }
      std::vector<int32_t> deps;
      for (int32_t d : s.deps(op))
        if (id[d] >= 0) deps.push_back(id[d]);
      id[i] = out.Add(op, deps, s.reads(op), s.writes(op));
    }
    dropped += done;
    s = std::move(out);
  };
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan), options);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_FALSE(r->passed);
  }
  EXPECT_EQ(dropped, 2);                                                 // on both ranks
  EXPECT_FALSE(results[0]->checks[0].ok) << results[0]->checks[0].name;  // the loss
}

TEST(StepTest, ReferencePlanIsOneRankWithTheSameBatch) {
  Plan plan = TinyPlan("tiny-gpt", 2, 2, 2);
  plan.distributed_optimizer = true;
  const Plan ref = StepReferencePlan(plan);
  EXPECT_EQ(ref.tp * ref.pp * ref.dp, 1);
  EXPECT_EQ(ref.model.layers, plan.model.layers);
  EXPECT_EQ(ref.global_batch, plan.global_batch);
  EXPECT_EQ(ref.micro_batches(), plan.micro_batches() * plan.dp);  // 4 = 2 x 2
  EXPECT_FALSE(ref.distributed_optimizer);
}

TEST(StepTest, ThreeDStepMatchesTheReference) {
  // tp 2 x pp 2 x dp 2 on 8 threads: both steps' losses, every gradient and updated weight.
  const Plan plan = TinyPlan("tiny-llama", 2, 2, 2);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(r->passed);
  }
  const ExecuteResult& r0 = *results[0];
  ASSERT_EQ(r0.losses.size(), 2u);
  EXPECT_LT(r0.losses[1], r0.losses[0]);  // Adam lowered the loss
  // 2 losses, then a gradient and an updated value for each of the 2 x 6 layer tensors, the
  // embedding, the final norm and the untied LM head.
  EXPECT_EQ(r0.checks.size(), 2u + 2u * (12 + 3));
  for (const TensorCheck& c : r0.checks) EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
  // Every rank timed its stage's ops only.
  const Schedule& s = r0.schedule;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.ops()[i].stage != 0 && s.ops()[i].func != OpFunc::kEmbeddingAllReduce) {
      EXPECT_EQ(r0.timeline.ops[i].end_us, 0.0) << s.Label(static_cast<int32_t>(i));
    }
  }
}

// The hidden dropout on the residual branches across the pipeline: stage 0 hands its top layer's
// mid and MLP output on, and their sum takes the MLP branch's dropout as the reference's residual
// add does (placed by each token's place in the step, under SP each TP rank's shard of each row
// slice), and the gradient that comes back runs through the same masks. Both steps' losses,
// every gradient and updated weight match one rank's; without the MLP branch's dropout the loss
// moves.
TEST(StepTest, TheResidualBranchesDropoutCrossesThePipeline) {
  for (const bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sp" : "no sp");
    Plan plan = TinyPlan("tiny-llama", 2, 2, 1);
    plan.sequence_parallel = sp;
    plan.row_split = 2;
    plan.dropout = true;
    ASSERT_FALSE(CheckPlanRules(plan).has_value()) << CheckPlanRules(plan)->rule;
    const std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
    ASSERT_NO_FATAL_FAILURE(ExpectPassed(results));
    Plan attention_only = plan;
    attention_only.mlp_dropout = false;
    std::vector<Result<ExecuteResult>> other =
        RunRanks(attention_only, IterationOf(attention_only));
    ASSERT_TRUE(other[0].ok()) << other[0].message();
    ASSERT_FALSE(results[0]->losses.empty() || other[0]->losses.empty());
    EXPECT_GT(std::fabs(results[0]->losses[0] - other[0]->losses[0]), 1e-6);
  }
}

// The gains of the norms a model has besides each layer's two, with and without SP: their
// gradients are partial sums over TP, and both steps' losses, the gradients and the updated gains
// match one rank's.
// - tiny-qwen3 (a norm on each of its 8 query and 4 key heads) at tp 2 x dp 2: each TP rank
//   normalizes half the heads.
// - tiny-gemma2 (post-norms, a window on layer 0) at tp 2 x pp 2: under SP each TP rank
//   normalizes its own tokens; stage 0 hands its layer's mid and normalized MLP output on and
//   takes the gradient of their sum back through the post-norm's backward.
TEST(StepTest, ExtraNormsGainsAreSummedOverTpAndUpdated) {
  struct Case {
    const char* model;
    int pp, dp;
    const char* gain;  // in the names of the gains' checks
    int checks;        // a gradient and an updated value for each layer's gains
  };
  for (const Case& k : {Case{"tiny-qwen3", 1, 2, "qk_norm.w", 2 * 2},
                        Case{"tiny-gemma2", 2, 1, "post_norm", 2 * 2 * 2}}) {
    for (const bool sp : {false, true}) {
      SCOPED_TRACE(testing::Message() << k.model << " sp " << sp);
      Plan plan = TinyPlan(k.model, 2, k.pp, k.dp);
      plan.sequence_parallel = sp;
      std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
      for (const auto& r : results) {
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_TRUE(r->passed);
      }
      int gains = 0;
      for (const TensorCheck& c : results[0]->checks) {
        EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
        gains += c.name.find(k.gain) != std::string::npos;
      }
      EXPECT_EQ(gains, k.checks);
    }
  }
}

TEST(StepTest, Fp8AmaxReductionsHaveNothingToDoHere) {
  // The executor runs fp8 as bf16: the megatron-core stack's amax reductions (delayed scaling's
  // over the stage, current scaling's over TP with SP) are in its passes and are skipped.
  for (const Fp8Recipe recipe : {Fp8Recipe::kDelayed, Fp8Recipe::kCurrent}) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    Plan plan = TinyPlan("tiny-llama", 2, 2, 2);
    plan.precision = Dtype::kFp8;
    plan.fp8_recipe = recipe;
    plan.sequence_parallel = true;
    ASSERT_TRUE(plan.stack.fp8_amax_reduction);
    Result<Schedule> pass = LowerStage(plan, LowerOptions{-1, true, true, true, true});
    ASSERT_TRUE(pass.ok()) << pass.message();
    int reductions = 0;
    for (const Op& op : pass->ops()) reductions += op.func == OpFunc::kAmaxAllReduce;
    EXPECT_GT(reductions, 0);
    std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_TRUE(r->passed);
    }
  }
}

TEST(StepTest, TheStacksCopiesAroundTheAttentionHaveNothingToDoHere) {
  // tiny-llama (rotary, grouped queries) on the megatron-core stack: its passes hold the copies
  // Megatron-Core makes of Q and V and the concatenation of their gradients (kAttnCopy), which the
  // executor's attention does not need and skips; the ranks still match the reference.
  Plan plan = TinyPlan("tiny-llama", 2, 2, 2);
  ASSERT_EQ(plan.stack.attention_copies, AttentionCopies::kMegatron);
  Result<Schedule> pass = LowerStage(plan, LowerOptions{-1, true, true, true, true});
  ASSERT_TRUE(pass.ok()) << pass.message();
  int copies = 0;
  for (const Op& op : pass->ops())
    copies += op.func == OpFunc::kAttnCopy || op.func == OpFunc::kAttnCopyGrad;
  EXPECT_GT(copies, 0);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, IterationOf(plan));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(r->passed);
  }
}

TEST(StepTest, InterleavedDistributedOptimizerWithOverlappedBuckets) {
  // Two chunks per stage; buckets released layer by layer under the last backward and parameters
  // gathered under the first forward (Megatron-Core's overlap), sharded optimizer.
  Plan plan = TinyPlan("tiny-gpt", 1, 2, 2, /*layers=*/4);
  plan.virtual_stages = 2;
  plan.distributed_optimizer = true;
  plan.stack.overlap_grad_reduce = plan.stack.overlap_param_gather = true;
  const Iteration it = IterationOf(plan);
  bool pieces = false;
  for (const Op& op : it.schedule.ops()) pieces |= op.kind == OpKind::kPass && op.layer_begin >= 0;
  EXPECT_TRUE(pieces);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, it);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(r->passed);
  }
  for (const TensorCheck& c : results[0]->checks) EXPECT_TRUE(c.ok) << c.name;
}

TEST(StepTest, FsdpStepsMatchTheReference) {
  // Parameters gathered per layer before each forward and backward piece, each micro-batch's
  // gradients reduce-scattered after its backward piece: dp 2 alone; tp 2 x pp 2 x dp 2 with
  // sequence parallelism (norm gains' partial sums) and the tied embedding synced between the
  // stages' shards; two chunks per stage over pp 2 x dp 2; dp 1 x cp 2 (the replicas are the CP
  // ranks).
  struct Case {
    const char* model;
    int tp, pp, dp, layers, v, cp;
    bool sp;
  };
  const Case cases[] = {{"tiny-gpt", 1, 1, 2, 0, 1, 1, false},
                        {"tiny-llama", 2, 2, 2, 0, 1, 1, true},
                        {"tiny-gpt", 1, 2, 2, 4, 2, 1, false},
                        {"tiny-llama", 1, 1, 1, 0, 1, 2, false}};
  for (const Case& k : cases) {
    Plan plan = TinyPlan(k.model, k.tp, k.pp, k.dp, k.layers, k.cp);
    plan.virtual_stages = k.v;
    plan.sequence_parallel = k.sp;
    plan.distributed_optimizer = true;
    plan.fsdp = true;
    ASSERT_FALSE(CheckPlanRules(plan).has_value()) << CheckPlanRules(plan)->rule;
    const Iteration it = IterationOf(plan);
    int gathers = 0, reduces = 0;
    for (const Op& op : it.schedule.ops()) {
      gathers += op.func == OpFunc::kFsdpAllGather;
      reduces += op.func == OpFunc::kFsdpReduceScatter;
      EXPECT_NE(op.func, OpFunc::kDpAllGather);
    }
    // Every layer gathered for each micro-batch's forward and backward, reduced after each
    // backward: 2 and 1 per layer and micro-batch.
    const int layers = plan.model.layers, m = plan.micro_batches();
    EXPECT_EQ(gathers, 2 * layers * m) << k.model << " pp " << k.pp;
    EXPECT_EQ(reduces, layers * m);
    std::vector<Result<ExecuteResult>> results = RunRanks(plan, it);
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_TRUE(r->passed) << k.model << " tp " << k.tp << " pp " << k.pp << " dp " << k.dp;
    }
    ASSERT_EQ(results[0]->losses.size(), 2u);
    EXPECT_LT(results[0]->losses[1], results[0]->losses[0]);
    for (const TensorCheck& c : results[0]->checks)
      EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
  }
}

TEST(StepTest, DroppingAnFsdpGatherOrReduceScatterFailsTheCheck) {
  // Without layer 1's first reduce-scatter, one micro-batch's part of its gradient is missing;
  // without the gather before step 2's first forward of layer 0, that forward runs step 1's
  // weights; each fails the check (the first leaves the loss of step 1 right).
  Plan plan = TinyPlan("tiny-gpt", 1, 1, 2);
  plan.distributed_optimizer = true;
  plan.fsdp = true;
  const Iteration it = IterationOf(plan);
  int32_t reduce = -1, gather = -1;
  for (size_t i = 0; i < it.schedule.size(); ++i) {
    const Op& op = it.schedule.ops()[i];
    if (reduce < 0 && op.func == OpFunc::kFsdpReduceScatter && op.tags.layer == 1)
      reduce = static_cast<int32_t>(i);
    if (gather < 0 && op.func == OpFunc::kFsdpAllGather && op.tags.layer == 0)
      gather = static_cast<int32_t>(i);
  }
  ASSERT_GE(reduce, 0);
  ASSERT_GE(gather, 0);
  ExecuteOptions one;
  one.check = true;
  one.steps = 1;
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, Without(it, reduce), one);
  ASSERT_TRUE(results[0].ok()) << results[0].message();
  EXPECT_FALSE(results[0]->passed);
  EXPECT_TRUE(results[0]->checks[0].ok) << results[0]->checks[0].name;  // the loss
  results = RunRanks(plan, Without(it, gather));                        // two steps
  ASSERT_TRUE(results[0].ok()) << results[0].message();
  EXPECT_FALSE(results[0]->passed);
  EXPECT_TRUE(results[0]->checks[0].ok);   // step 1's loss: the initial weights are everywhere
  EXPECT_FALSE(results[0]->checks[1].ok);  // step 2's: layer 0 ran stale weights
}

TEST(StepTest, ASplitThatCountsTheEndsRunsChunksOfUnequalLayers) {
  // 6 layers + the embedding + the loss in pp 2 x vp 2 chunks of 2 units: 1, 2, 2, 1 layers, the
  // tied embedding synced between the first and the last chunk's stages.
  Plan plan = TinyPlan("tiny-gpt", 1, 2, 1, /*layers=*/6);
  plan.virtual_stages = 2;
  plan.pipeline_split = PipelineSplit::kEnds;
  ASSERT_FALSE(CheckPlanRules(plan).has_value());
  const Iteration it = IterationOf(plan);
  ASSERT_EQ(it.virtual_stages.size(), 4u);
  EXPECT_EQ(it.virtual_stages[0].layers, 1);
  EXPECT_EQ(it.virtual_stages[1].layers, 2);
  EXPECT_EQ(it.virtual_stages[3].layers, 1);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, it);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(r->passed);
  }
  ASSERT_FALSE(results[0]->checks.empty());
  for (const TensorCheck& c : results[0]->checks) EXPECT_TRUE(c.ok) << c.name << " " << c.rel_error;
}

TEST(StepTest, DroppingAPipelineSendFailsTheCheck) {
  const Plan plan = TinyPlan("tiny-gpt", 1, 2, 1);
  const Iteration it = IterationOf(plan);
  const int32_t send = FirstOf(it, OpFunc::kPpSend);
  ASSERT_GE(send, 0);
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, Without(it, send));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_FALSE(r->passed);
  }
  // The first micro-batch's activation never reached stage 1: the loss is wrong from step 1.
  EXPECT_FALSE(results[0]->checks[0].ok) << results[0]->checks[0].name;
}

TEST(StepTest, DroppingADpBucketFailsTheCheck) {
  const Plan plan = TinyPlan("tiny-gpt", 1, 1, 2);
  const Iteration it = IterationOf(plan);
  int32_t bucket = -1;
  for (size_t i = 0; i < it.schedule.size(); ++i) {
    const Op& op = it.schedule.ops()[i];
    if (op.func == OpFunc::kDpAllReduce && op.tags.layer == 1) bucket = static_cast<int32_t>(i);
  }
  ASSERT_GE(bucket, 0);
  ExecuteOptions options;
  options.check = true;
  options.steps = 1;  // a second step would carry layer 1's error into layer 0's gradients
  std::vector<Result<ExecuteResult>> results = RunRanks(plan, Without(it, bucket), options);
  ASSERT_TRUE(results[0].ok()) << results[0].message();
  EXPECT_FALSE(results[0]->passed);
  // The loss comes before any reduction; layer 1's gradient (one replica's half of the batch) and
  // updated weights differ, layer 0's do not.
  for (const TensorCheck& c : results[0]->checks) {
    if (c.name == "loss (step 1)" || c.name.starts_with("l0.")) {
      EXPECT_TRUE(c.ok) << c.name;
    }
    if (c.name.starts_with("l1.") && c.name.find(".w") != std::string::npos) {
      EXPECT_FALSE(c.ok) << c.name;
    }
  }
}

TEST(StepTest, RefusesAWrongRankCount) {
  const Plan plan = TinyPlan("tiny-gpt", 1, 2, 2);
  LocalGroup group(2);
  std::vector<std::optional<Result<ExecuteResult>>> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { results[r].emplace(ExecuteStep(plan, group.member(r), {})); });
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(results[0]->ok());
  EXPECT_NE(results[0]->message().find("tp 1 x pp 2 x dp 2 = 4 ranks; 2 were launched"),
            std::string::npos)
      << results[0]->message();
}

TEST(StepTest, RunsOnTheCpuOrOnTheGpuThroughTheHostOrNccl) {
  const Plan plan = TinyPlan("tiny-gpt", 1, 1, 1);
  SelfCommunicator self;
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kEmulate;
  options.extent = Extent::kStep;
  Result<ExecuteResult> r = Execute(plan, self, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(),
            "whole steps on the CUDA backend move their data through the launch communicator "
            "(--comm mpi) or NCCL (--comm nccl), not emulated collectives");
  // On the CPU, a one-rank plan's step runs (the reference itself) and passes its check.
  options.backend = BackendKind::kCpu;
  options.check = true;
  r = Execute(plan, self, options);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->passed);
  EXPECT_EQ(DefaultExtent(plan, BackendKind::kCpu), Extent::kModel);
  EXPECT_EQ(DefaultExtent(TinyPlan("tiny-gpt", 1, 2, 1), BackendKind::kCpu), Extent::kStep);
  EXPECT_EQ(DefaultExtent(TinyPlan("tiny-gpt", 1, 2, 1), BackendKind::kCuda), Extent::kLayerStack);
}

}  // namespace
}  // namespace domino::exec
