// Context parallelism's four comm types (Plan::cp_communication): which one a plan runs, the
// rules that refuse one, how all_gather, a2a and a2a+p2p lower (planner/lower_attention.cc), and
// what they cost beside the p2p ring.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "hardware/collective_cost.h"
#include "models/model_counts.h"
#include "planner/lower.h"
#include "planner/search.h"
#include "sim/cost_model.h"
#include "sim/groups.h"
#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

// gpt3-2.7b (32 heads of 80, hidden 2560) at tp 2 x cp `cp` over one node, one sequence of
// `seq_len` tokens, sequence parallel.
Plan CpPlan(int cp, int seq_len = 8192, const std::string& stack = "",
            const std::string& cluster = "dgx-h100:1") {
  PlanKnobs k;
  k.cluster = cluster;
  k.tp = 2, k.cp = cp, k.dp = (cluster == "dgx-h100:1" ? 8 : 16) / (2 * cp);
  k.stack = stack;
  k.seq_len = seq_len, k.micro_batch = 1, k.global_batch = k.dp;
  k.sequence_parallel = true;
  return MakePlan(k);
}

Plan WithComm(Plan plan, CpComm comm) {
  plan.cp_comm = comm;
  return plan;
}

Schedule LowerAll(const Plan& plan) {
  Result<Schedule> s = LowerStage(plan, LowerOptions{plan.model.layers, true, true, true, true});
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? std::move(s).value() : Schedule{};
}

std::map<OpFunc, int> CountFuncs(const Schedule& s) {
  std::map<OpFunc, int> count;
  for (const Op& op : s.ops()) ++count[op.func];
  return count;
}

TEST(CpCommTest, TheRingUnlessTheStackRunsAWindowOfTheModels) {
  Plan plan = CpPlan(2);
  EXPECT_EQ(plan.cp_communication(), CpComm::kP2p);
  // A window megatron-core's kernels run: a2a, where cp divides the rank's 16 heads.
  plan.model.window = AttentionWindow{.tokens = 1024};
  EXPECT_EQ(plan.cp_communication(), CpComm::kA2a);
  EXPECT_TRUE(plan.prices_window());
  // One key/value head a rank: all_gather.
  plan.model.kv_heads = 2;
  EXPECT_EQ(plan.cp_communication(), CpComm::kAllGather);
  // A stack that runs only the ring keeps it, and prices the window as full causal attention.
  Plan own = CpPlan(2, 8192, "domino");
  own.model.window = AttentionWindow{.tokens = 1024};
  EXPECT_EQ(own.cp_communication(), CpComm::kP2p);
  EXPECT_FALSE(own.prices_window());
  // The plan's word wins.
  EXPECT_EQ(WithComm(CpPlan(2), CpComm::kAllGather).cp_communication(), CpComm::kAllGather);
}

// The rule `plan` breaks, which must be one of `key`'s.
std::string RuleOf(const Plan& plan, std::string_view key) {
  std::optional<PlanRuleFailure> failure = CheckPlanRules(plan);
  EXPECT_TRUE(failure.has_value());
  if (!failure) return std::string();
  EXPECT_EQ(failure->key, key);
  return failure->rule;
}

TEST(CpCommTest, RulesNameTheKey) {
  auto rule = [](const Plan& plan) { return RuleOf(plan, "parallel.cp_comm"); };
  Plan one = CpPlan(1);
  one.cp_comm = CpComm::kA2a;
  EXPECT_EQ(rule(one),
            "cp_comm (a2a) says how context parallelism communicates, and the plan's cp "
            "is 1");
  Plan heads = WithComm(CpPlan(4), CpComm::kA2a);
  heads.model.kv_heads = 4;  // 2 a rank, which cp 4 does not divide
  EXPECT_EQ(rule(heads),
            "a2a scatters each tensor-parallel rank's heads over the CP group: cp (4) must divide "
            "its 16 query heads and 2 key/value heads (heads/tp, kv_heads/tp); all_gather has no "
            "such rule");
  Plan ring = WithComm(CpPlan(2), CpComm::kP2p);
  ring.model.window = AttentionWindow{.tokens = 1024};
  EXPECT_EQ(
      rule(ring),
      "Transformer Engine's p2p ring refuses a sliding window, and the model's window of 1024 "
      "tokens covers 32 of its 32 layers: cp_comm a2a or all_gather");
  EXPECT_EQ(rule(WithComm(CpPlan(2, 8192, "deepspeed-domino"), CpComm::kAllGather)),
            "stack deepspeed-domino runs context parallelism as the p2p ring only, not all_gather "
            "(megatron-core, Transformer Engine's, and domino run all four)");
  EXPECT_FALSE(CheckPlanRules(WithComm(CpPlan(4), CpComm::kAllGather)).has_value());
  // a2a+p2p: cp_a2a only with it, its groups dividing cp with a ring left, and the heads.
  auto rule_a2a = [](const Plan& plan) { return RuleOf(plan, "parallel.cp_a2a"); };
  Plan sized = WithComm(CpPlan(4), CpComm::kA2a);
  sized.cp_a2a = 2;
  EXPECT_EQ(rule_a2a(sized),
            "cp_a2a (2) sizes the a2a groups of a2a+p2p; the plan's cp_comm is a2a");
  Plan whole = WithComm(CpPlan(4), CpComm::kA2aP2p);
  whole.cp_a2a = 4;
  EXPECT_EQ(rule_a2a(whole),
            "a2a+p2p: cp_a2a (4) must divide cp (4) and leave a ring of at least "
            "2 (2 <= cp_a2a <= cp / 2)");
  Plan odd = WithComm(CpPlan(4), CpComm::kA2aP2p);
  odd.model.kv_heads = 2;  // 1 a rank
  EXPECT_EQ(rule(odd),
            "a2a+p2p needs a2a groups of at least 2 ranks that divide cp (4) and each "
            "tensor-parallel rank's 16 query heads and 1 key/value heads, leaving a ring of at "
            "least 2: none does");
  odd.cp_a2a = 2;
  EXPECT_EQ(rule_a2a(odd),
            "a2a+p2p scatters each tensor-parallel rank's heads over its a2a "
            "group: cp_a2a (2) must divide its 16 query heads and 1 key/value "
            "heads (heads/tp, kv_heads/tp)");
  odd.model.kv_heads = 4;  // 2 a rank: cp_a2a 2 divides them
  EXPECT_FALSE(CheckPlanRules(odd).has_value());
  Plan ring_window = WithComm(CpPlan(4), CpComm::kA2aP2p);
  ring_window.model.window = AttentionWindow{.tokens = 1024};
  EXPECT_EQ(rule(ring_window),
            "Transformer Engine's p2p ring (a2a+p2p's) refuses a sliding window, and the model's "
            "window of 1024 tokens covers 32 of its 32 layers: cp_comm a2a or all_gather");
}

// a2a+p2p's default a2a group: the most ranks that divide cp and the heads, leave a ring, and fit
// in a node beside their TP ranks.
TEST(CpCommTest, A2aGroupsStayInANodeByDefault) {
  Plan plan = WithComm(CpPlan(8, 8192, "", "dgx-h100:2"), CpComm::kA2aP2p);  // tp 2 x cp 8
  EXPECT_EQ(plan.cp_a2a_ranks(), 4);                                         // 4 x tp 2 = a node
  EXPECT_EQ(CpA2aGroup(plan).nodes_spanned, 1);
  EXPECT_EQ(CpA2aGroup(plan).size, 4);
  EXPECT_EQ(CpRing(plan).nodes_spanned, 2);  // the ring's hop: a node apart
  plan.cp_a2a = 2;
  EXPECT_EQ(plan.cp_a2a_ranks(), 2);
  EXPECT_EQ(WithComm(plan, CpComm::kA2a).cp_a2a_ranks(), 8);
  EXPECT_EQ(WithComm(plan, CpComm::kP2p).cp_a2a_ranks(), 1);
}

// a2a+p2p: per layer the a2a's four trades inside the a2a groups and a ring of cp / cp_a2a steps
// whose blocks hold cp_a2a times the tokens of 1/cp_a2a of the heads: the ring's causal work.
TEST(CpCommTest, A2aP2pTradesThenRings) {
  Plan plan = WithComm(CpPlan(4), CpComm::kA2aP2p);
  plan.cp_a2a = 2;
  const Schedule s = LowerAll(plan);
  std::map<OpFunc, int> count = CountFuncs(s);
  const int layers = plan.model.layers;
  EXPECT_EQ(count[OpFunc::kCpAllToAll], 4 * layers);
  EXPECT_EQ(count[OpFunc::kAttn], 2 * layers);        // 2 ring steps
  EXPECT_EQ(count[OpFunc::kCpSendRecv], 3 * layers);  // 1 forward, 2 backward
  for (const Op& op : s.ops()) {
    if (op.func == OpFunc::kCpAllToAll) {
      EXPECT_EQ(op.group, Group::kCpA2a);
    }
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.seq_len, 4096);  // 2 ranks' 2048 tokens
      EXPECT_EQ(op.heads, 8);
    }
  }
  const Schedule ring_s = LowerAll(CpPlan(4));
  auto main_loop_keys = [](const Schedule& s) {  // sum over blocks of tiles x keys, layer 0
    double work = 0;
    for (const Op& op : s.ops())
      if (op.kind == OpKind::kAttention && op.tags.layer == 0 && op.tags.phase == Phase::kForward)
        work += static_cast<double>(op.heads) * op.seq_len * op.seq_len / 2;
    return work;
  };
  EXPECT_DOUBLE_EQ(main_loop_keys(s), main_loop_keys(ring_s));
}

// all_gather: per layer, K and V gathered forward and again backward, their gradients
// reduce-scattered once; each pass's attention is two chunks of the rank cp - 1's s / 2cp queries.
TEST(CpCommTest, AllGatherLowersGathersAndChunks) {
  const Plan plan = WithComm(CpPlan(4), CpComm::kAllGather);
  const Schedule s = LowerAll(plan);
  const int layers = plan.model.layers;
  std::map<OpFunc, int> count = CountFuncs(s);
  EXPECT_EQ(count[OpFunc::kCpAllGather], 2 * layers);
  EXPECT_EQ(count[OpFunc::kCpReduceScatter], layers);
  EXPECT_EQ(count[OpFunc::kCpSendRecv], 0);
  EXPECT_EQ(count[OpFunc::kCpAllToAll], 0);
  EXPECT_EQ(count[OpFunc::kAttn], 2 * layers);
  EXPECT_EQ(count[OpFunc::kAttnGrad], 2 * layers);
  // K and V of 16 heads of 80 for 2048 local tokens, gathered from 4 ranks.
  const double gathered = 4 * 2.0 * 16 * 80 * 2048 * 2;
  for (const Op& op : s.ops()) {
    if (op.func == OpFunc::kCpAllGather || op.func == OpFunc::kCpReduceScatter) {
      EXPECT_DOUBLE_EQ(op.bytes, gathered);
      EXPECT_EQ(op.group, Group::kCp);
      EXPECT_EQ(op.stream, Stream::kCpComm);
    }
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.seq_len, 1024);
      EXPECT_EQ(op.first_query, op.tags.ring_step == 0 ? 3 * 1024 : 4 * 1024);
      EXPECT_EQ(op.heads, 16);
    }
  }
}

// a2a: per layer, Q, K and V traded in and the output out forward, the output's gradient in and
// theirs out backward; the attention runs over the whole sequence with a quarter of the heads.
TEST(CpCommTest, A2aLowersFourAllToAllsAndTheWholeSequence) {
  const Plan plan = WithComm(CpPlan(4), CpComm::kA2a);
  const Schedule s = LowerAll(plan);
  std::map<OpFunc, int> count = CountFuncs(s);
  EXPECT_EQ(count[OpFunc::kCpAllToAll], 4 * plan.model.layers);
  EXPECT_EQ(count[OpFunc::kCpCopy], 8 * plan.model.layers);
  // This rank's 2048 tokens of Q, K and V (16 heads of 80 each), and of the output.
  const double qkv = 2048.0 * 3 * 16 * 80 * 2, out = 2048.0 * 16 * 80 * 2;
  std::map<double, int> sizes;
  for (const Op& op : s.ops()) {
    if (op.func == OpFunc::kCpAllToAll) {
      EXPECT_EQ(op.collective, CollectiveOp::kAllToAll);
      ++sizes[op.bytes];
    }
    if (op.kind == OpKind::kAttention) {
      EXPECT_EQ(op.seq_len, 8192);
      EXPECT_EQ(op.heads, 4);
      EXPECT_EQ(op.kv_heads, 4);
      EXPECT_EQ(op.first_query, 0);
    }
  }
  EXPECT_EQ(sizes,
            (std::map<double, int>{{qkv, 2 * plan.model.layers}, {out, 2 * plan.model.layers}}));
}

// The three do the same causal work of the main loop: the ring cp blocks of the local tokens (s /
// 2cp keys each), all_gather two chunks of (cp - 1/2) and (cp + 1/2) chunks' keys, a2a the whole
// sequence (s / 2) with 1/cp of the heads. They differ in the kernels' overhead keys, one lot per
// query tile: the ring pays it cp times, all_gather and a2a once.
TEST(CpCommTest, TheCausalWorkIsTheSameAndTheOverheadDiffers) {
  const int cp = 4;
  const double s = 8192, d = 80, c = s / (2 * cp);
  const Plan ring = CpPlan(cp), gathered = WithComm(ring, CpComm::kAllGather),
             a2a = WithComm(ring, CpComm::kA2a);
  auto attention_us = [](const Plan& plan, Phase phase) {
    const CostModel model(plan, CostOptions{});
    const Schedule s = LowerAll(plan);
    double us = 0;
    for (const Op& op : s.ops())
      if (op.kind == OpKind::kAttention && op.tags.layer == 0 && op.tags.phase == phase)
        us += model.Cost(op).alone_us - model.Cost(op).launch_us;
    return us;
  };
  const GpuSpec& gpu = ring.cluster.node.gpu;
  const double sm_rate = 989e6 / 132;  // h100-sxm: bf16 peak over its SMs
  const double heads = 16, overhead = gpu.attention_overhead_keys;
  // Per head and query tile of 128: 4 x 128 x (keys + overhead) x d at sm_rate x 0.59, in waves of
  // the SMs.
  auto tile_us = [&](double keys) {
    return 4.0 * 128 * (keys + overhead) * d / (sm_rate * gpu.attention_efficiency);
  };
  auto waves = [&](double tiles) { return std::ceil(tiles / gpu.sms); };
  const double ring_us = cp * waves(heads * 2 * c / 128) * tile_us(c);
  const double gathered_us = waves(heads * c / 128) * (tile_us(3.5 * c) + tile_us(4.5 * c));
  const double a2a_us = waves(heads / cp * s / 128) * tile_us(s / 2);
  EXPECT_NEAR(attention_us(ring, Phase::kForward), ring_us, 1e-6 * ring_us);
  EXPECT_NEAR(attention_us(gathered, Phase::kForward), gathered_us, 1e-6 * gathered_us);
  EXPECT_NEAR(attention_us(a2a, Phase::kForward), a2a_us, 1e-6 * a2a_us);
  EXPECT_LT(a2a_us, ring_us);
  EXPECT_LT(gathered_us, ring_us);
}

// Where the CP group spans nodes, the a2a's trade goes through each rank's NIC: priced as the
// all-to-all of hardware/collective_cost.h over the CP group.
TEST(CpCommTest, CollectivesSpanTheCpGroup) {
  PlanKnobs k;
  k.cluster = "dgx-h100:2";
  k.tp = 8, k.cp = 2, k.dp = 1;
  k.seq_len = 16384, k.micro_batch = 1, k.global_batch = 1;
  k.sequence_parallel = true;
  Plan plan = MakePlan(k);
  plan.model.kv_heads = 32;
  plan.cp_comm = CpComm::kA2a;
  EXPECT_EQ(CpGroup(plan).nodes_spanned, 2);
  const CostModel model(plan, CostOptions{});
  const Schedule s = LowerAll(plan);
  int seen = 0;
  for (const Op& op : s.ops()) {
    if (op.func != OpFunc::kCpAllToAll) continue;
    ++seen;
    EXPECT_DOUBLE_EQ(
        model.Cost(op).alone_us,
        EstimateCollective(plan.cluster.node, Collective::kAllToAll, op.bytes, CpGroup(plan))
            .time_us);
  }
  EXPECT_GT(seen, 0);
}

// Each prediction holds its invariants (ideal <= iteration, the search's bounds below it, MFU a
// fraction), the same twice; over a window a2a and all_gather price it,
// and every comm type is within a few percent of the others here.
TEST(CpCommTest, PredictionsHoldTheirInvariants) {
  Plan windowed = CpPlan(4, 32768);
  windowed.model.window = AttentionWindow{.tokens = 4096};
  for (const Plan& plan : {CpPlan(4, 32768), WithComm(CpPlan(4, 32768), CpComm::kAllGather),
                           WithComm(CpPlan(4, 32768), CpComm::kA2a), windowed,
                           WithComm(windowed, CpComm::kAllGather)}) {
    Result<Prediction> p = Predict(plan), again = Predict(plan);
    ASSERT_TRUE(p.ok() && again.ok()) << p.message();
    EXPECT_LE(p->figures.ideal_ms, p->figures.iteration_ms);
    // The search's bounds lower the same attention.
    Result<double> ideal = IdealLowerBoundMs(plan), bound = LowerBoundMs(plan);
    ASSERT_TRUE(ideal.ok() && bound.ok());
    EXPECT_LE(*ideal, *bound);
    EXPECT_LE(*bound, p->figures.iteration_ms);
    EXPECT_EQ(p->figures.iteration_ms, again->figures.iteration_ms);
    EXPECT_GT(p->figures.mfu, 0);
    EXPECT_LE(p->figures.mfu, 1);
    EXPECT_GT(p->cp_comm_ms, 0);  // its CP communication, whatever the type
  }
  Result<Prediction> full = Predict(CpPlan(4, 32768)), window = Predict(windowed);
  ASSERT_TRUE(full.ok() && window.ok());
  EXPECT_LT(window->figures.iteration_ms, full->figures.iteration_ms);
  Result<Prediction> none = Predict(CpPlan(1, 32768));
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_EQ(none->cp_comm_ms, 0);
}

// Records the comm type of each plan the search evaluates.
class CommRecorder : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override {
    seen.insert(CpCommName(plan.cp_communication()));
    PlanFigures f;
    f.iteration_ms = f.ideal_ms = 1;
    f.tokens_per_s = 1;
    return f;
  }
  std::set<std::string_view> seen;
};

// The search tries each comm type the stack runs and the plan allows, or the pinned one.
TEST(CpCommTest, TheSearchTriesEachCommType) {
  auto searched = [](Plan base, const SearchSpace& pins) {
    SearchSpace space = pins;
    space.tp = 2, space.cp = 4;
    space.row_splits = {1}, space.col_splits = {1}, space.scopes = {OverlapScope::kNone};
    CommRecorder recorder;
    Result<SearchResult> result = SearchPlans(base, space, recorder);
    EXPECT_TRUE(result.ok()) << result.message();
    return recorder.seen;
  };
  using Seen = std::set<std::string_view>;
  const Plan base = CpPlan(4, 32768);
  EXPECT_EQ(searched(base, {}), (Seen{"p2p", "all_gather", "a2a", "a2a+p2p"}));
  Plan windowed = base;
  windowed.model.window = AttentionWindow{.tokens = 4096};
  EXPECT_EQ(searched(windowed, {}), (Seen{"all_gather", "a2a"}));  // no ring over the window
  windowed.model.kv_heads = 4;                                     // 2 a rank: no a2a at cp 4
  EXPECT_EQ(searched(windowed, {}), (Seen{"all_gather"}));
  Plan narrow = base;
  narrow.model.kv_heads = 2;  // 1 a rank: no a2a group at all
  EXPECT_EQ(searched(narrow, {}), (Seen{"p2p", "all_gather"}));
  SearchSpace pinned;
  pinned.cp_comm = CpComm::kAllGather;
  EXPECT_EQ(searched(base, pinned), (Seen{"all_gather"}));
  // A stack that runs only the ring; this project's executor runs all four.
  EXPECT_EQ(searched(CpPlan(4, 32768, "deepspeed-domino"), {}), (Seen{"p2p"}));
  EXPECT_EQ(searched(CpPlan(4, 32768, "domino"), {}),
            (Seen{"p2p", "all_gather", "a2a", "a2a+p2p"}));
}

}  // namespace
}  // namespace domino::sim
