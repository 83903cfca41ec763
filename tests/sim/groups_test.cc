// Where a plan's communication groups sit on its nodes (sim/groups.h): the slowest group of each
// kind, by hand for the layouts that do not tile their nodes, and against every group listed
// rank by rank over a grid of small layouts.
#include "sim/groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <vector>

#include "sim/cost_model.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

void ExpectGroup(const CommGroup& g, int size, int nodes, int per_node) {
  EXPECT_EQ(g.size, size);
  EXPECT_EQ(g.nodes_spanned, nodes);
  EXPECT_EQ(g.gpus_per_node_in_group, per_node);
}

TEST(GroupsTest, GroupsFollowMegatronsRankOrder) {
  // 16 GPUs on two nodes, tp 2 innermost, then cp 2, then dp 4: ranks 0,2 form a CP ring inside
  // node 0; gradients are reduced over DP x CP = ranks 0,2,4,...,14, four in each node.
  PlanKnobs k;
  k.tp = 2, k.cp = 2, k.dp = 4;
  k.cluster = "dgx-h100:2";
  k.global_batch = 16;
  Plan plan = MakePlan(k);
  ExpectGroup(CpRing(plan), 2, 1, 2);
  ExpectGroup(DpGroup(plan), 8, 2, 4);
  // tp 8 fills a node: every CP neighbour is in another node, as is every DP x CP rank.
  k.tp = 8, k.cp = 2, k.dp = 1, k.global_batch = 4;
  plan = MakePlan(k);
  ExpectGroup(CpRing(plan), 2, 2, 1);
  ExpectGroup(DpGroup(plan), 2, 2, 1);
  // tp 2, cp 8: the ring crosses the node boundary once, and a step waits for that hop.
  k.tp = 2, k.cp = 8, k.dp = 1;
  plan = MakePlan(k);
  ExpectGroup(CpRing(plan), 2, 2, 1);
  ExpectGroup(DpGroup(plan), 8, 2, 4);
  // Pipeline neighbours are tp * cp * dp ranks apart: 4 (the same node), then 8 (the next).
  k.tp = 1, k.cp = 2, k.pp = 2, k.dp = 2, k.global_batch = 8;
  k.cluster = "dgx-h100:1";
  ExpectGroup(PpPair(MakePlan(k)), 2, 1, 2);
  k.dp = 4, k.global_batch = 16;
  k.cluster = "dgx-h100:2";
  ExpectGroup(PpPair(MakePlan(k)), 2, 2, 1);
}

TEST(GroupsTest, GroupsThatStraddleANodeAreThePricedOnes) {
  // tp 16 on GB200 NVL72 racks of 72: groups 0-15 to 48-63 sit in rack 0, 64-79 is 8 + 8: the
  // slowest group spans two racks, 8 GPUs in each.
  PlanKnobs k;
  k.model = "gpt3-175b";
  k.cluster = "gb200-nvl72:2";
  k.tp = 16, k.dp = 9, k.micro_batch = 1, k.global_batch = 9;
  ExpectGroup(TpGroup(MakePlan(k)), 16, 2, 8);
  k.cluster = "gb200-nvl72:1:64", k.dp = 4, k.global_batch = 4;
  ExpectGroup(TpGroup(MakePlan(k)), 16, 1, 16);
  // tp 6 on DGX nodes of 8: ranks 6-11 are 2 + 4, priced by the node that holds 2 of them.
  k.cluster = "dgx-h100:3";
  k.tp = 6, k.dp = 4, k.global_batch = 4;
  ExpectGroup(TpGroup(MakePlan(k)), 6, 2, 2);
  // A CP ring of tp 2 x cp 3 = 6 ranks: rings straddle 8-GPU nodes, so a step crosses one.
  k.tp = 2, k.cp = 3, k.dp = 4, k.global_batch = 4, k.seq_len = 384;
  ExpectGroup(CpRing(MakePlan(k)), 2, 2, 1);
}

TEST(GroupsTest, TheStageGroupIsEveryGpuOfAPipelineStage) {
  // fp8 delayed scaling reduces amaxes over tp x cp x dp (Group::kStage). tp 2, cp 2, dp 4 on two
  // nodes: all 16 GPUs, eight in each.
  PlanKnobs k;
  k.tp = 2, k.cp = 2, k.dp = 4;
  k.cluster = "dgx-h100:2";
  k.global_batch = 16;
  Plan plan = MakePlan(k);
  ExpectGroup(StageGroup(plan), 16, 2, 8);
  // tp 1, cp 2, pp 2, dp 4: Megatron's order puts a stage's 8 ranks in one node; with the
  // pipeline inside DP (tp-pp-dp) its DP ranks are 4 apart, four of the stage's ranks a node.
  k.tp = 1, k.cp = 2, k.pp = 2, k.dp = 4;
  plan = MakePlan(k);
  ExpectGroup(StageGroup(plan), 8, 1, 8);
  plan.placement = Placement::kTpPpDp;
  ExpectGroup(StageGroup(plan), 8, 2, 4);
  // An amax all-reduce costs a collective of its bytes over that group.
  Op op;
  op.kind = OpKind::kCollective;
  op.func = OpFunc::kAmaxAllReduce;
  op.collective = CollectiveOp::kAllReduce;
  op.group = Group::kStage;
  op.bytes = 64;
  const double expected =
      EstimateCollective(plan.cluster.node, Collective::kAllReduce, 64, StageGroup(plan)).time_us;
  EXPECT_GT(expected, 0);
  EXPECT_DOUBLE_EQ(CostModel(plan, CostOptions{}).Cost(op).alone_us, expected);
}

TEST(GroupsTest, AnUnevenDataParallelGroupIsPricedByItsEmptiestNode) {
  // tp 16, dp 9 on two 72-GPU racks: DP ranks 0, 16, ..., 128 are 5 in rack 0 and 4 in rack 1.
  // Those 4 ranks' NICs carry the group's traffic between the racks.
  PlanKnobs k;
  k.model = "gpt3-175b";
  k.cluster = "gb200-nvl72:2";
  k.tp = 16, k.dp = 9, k.micro_batch = 1, k.global_batch = 9;
  const Plan plan = MakePlan(k);
  ExpectGroup(DpGroup(plan), 9, 2, 4);
  EXPECT_TRUE(CheckCommGroup(plan.cluster.node, DpGroup(plan)).ok());
}

TEST(GroupsTest, PipelineNeighboursAcrossANodeBoundary) {
  // tp 4, pp 3, dp 2 with the pipeline inside DP (tp-pp-dp): stages are 4 ranks apart, and stage
  // 1 (ranks 4-7) sends to stage 2 (8-11) in the next node.
  PlanKnobs k;
  k.cluster = "dgx-h100:3";
  k.tp = 4, k.pp = 3, k.dp = 2, k.global_batch = 8;
  Plan plan = MakePlan(k);
  plan.placement = Placement::kTpPpDp;
  ExpectGroup(PpPair(plan), 2, 2, 1);
  // The first and last stage (ranks 0-3 and 8-11) are in different nodes too.
  ExpectGroup(EmbeddingPair(plan), 2, 2, 1);
  // pp 2, dp 3: stages 0 and 1 are ranks 0-3 and 4-7, 8-11 and 12-15, 16-19 and 20-23: always
  // inside a node.
  k.pp = 2, k.dp = 3, k.global_batch = 12;
  plan = MakePlan(k);
  plan.placement = Placement::kTpPpDp;
  ExpectGroup(PpPair(plan), 2, 1, 2);
  ExpectGroup(EmbeddingPair(plan), 2, 1, 2);
}

// Every group of every kind listed rank by rank: ranks as Megatron orders them (tp innermost,
// then cp, then dp and pp in the placement), nodes of consecutive ranks.
struct Listed {
  int size = 0, nodes = 0, fewest = 0;
};

// Slower first: across nodes, fewer in the emptiest node, more nodes.
bool Slower(const Listed& a, const Listed& b) {
  return std::make_tuple(a.nodes > 1, -a.fewest, a.nodes) >
         std::make_tuple(b.nodes > 1, -b.fewest, b.nodes);
}

// `spans` says which digits (tp, cp, dp, pp) a group spans; the others name the group.
Listed ListSlowest(int tp, int cp, int dp, int pp, bool dp_inside, int node,
                   const std::array<bool, 4>& spans) {
  std::map<std::array<int, 4>, std::map<int, int>> groups;  // its name -> node -> ranks
  const int total = tp * cp * dp * pp;
  for (int r = 0; r < total; ++r) {
    const int t = r % tp, c = r / tp % cp;
    const int rest = r / (tp * cp);
    const int d = dp_inside ? rest % dp : rest / pp;
    const int p = dp_inside ? rest / dp : rest % pp;
    std::array<int, 4> name{t, c, d, p};
    for (int i = 0; i < 4; ++i)
      if (spans[i]) name[i] = 0;
    ++groups[name][r / node];
  }
  Listed slowest;
  for (const auto& [name, per_node] : groups) {
    Listed g;
    g.nodes = static_cast<int>(per_node.size());
    g.fewest = total;
    for (const auto& [n, count] : per_node) {
      g.size += count;
      g.fewest = std::min(g.fewest, count);
    }
    if (slowest.size == 0 || Slower(g, slowest)) slowest = g;
  }
  return slowest;
}

// Pipeline neighbours: stage s and s + 1 (or 0 and pp - 1) of each (tp, cp, dp) position.
bool AnyPairCrosses(int tp, int cp, int dp, int pp, bool dp_inside, int node, bool ends) {
  auto rank = [&](int t, int c, int d, int p) {
    return t + tp * (c + cp * (dp_inside ? d + dp * p : p + pp * d));
  };
  for (int t = 0; t < tp; ++t)
    for (int c = 0; c < cp; ++c)
      for (int d = 0; d < dp; ++d)
        for (int p = 0; p + 1 < pp; ++p) {
          const int from = rank(t, c, d, ends ? 0 : p), to = rank(t, c, d, ends ? pp - 1 : p + 1);
          if (from / node != to / node) return true;
        }
  return false;
}

TEST(GroupsTest, TheSlowestGroupMatchesEveryGroupListedRankByRank) {
  int checked = 0;
  for (int node : {2, 3, 4, 6, 8})
    for (int tp : {1, 2, 3, 4, 6})
      for (int cp : {1, 2, 3})
        for (int dp : {1, 2, 3, 5})
          for (int pp : {1, 2, 3})
            for (bool dp_inside : {true, false}) {
              const int total = tp * cp * dp * pp;
              if (total % node != 0) continue;
              Plan plan;
              plan.tp = tp, plan.cp = cp, plan.dp = dp, plan.pp = pp;
              plan.placement = dp_inside ? Placement::kTpDpPp : Placement::kTpPpDp;
              plan.cluster.gpus_per_node = node, plan.cluster.nodes = total / node;
              plan.cluster.node.gpus_per_node = node;
              SCOPED_TRACE(testing::Message()
                           << "node " << node << " tp " << tp << " cp " << cp << " dp " << dp
                           << " pp " << pp << (dp_inside ? " tp-dp-pp" : " tp-pp-dp"));
              const auto expect = [&](const CommGroup& g, const std::array<bool, 4>& spans) {
                const Listed l = ListSlowest(tp, cp, dp, pp, dp_inside, node, spans);
                ExpectGroup(g, l.size, l.nodes, l.fewest);
                EXPECT_TRUE(CheckCommGroup(plan.cluster.node, g).ok());
              };
              expect(TpGroup(plan), {true, false, false, false});
              expect(DpGroup(plan), {false, true, true, false});
              expect(StageGroup(plan), {true, true, true, false});
              const bool ring_crosses =
                  ListSlowest(tp, cp, dp, pp, dp_inside, node, {false, true, false, false}).nodes >
                  1;
              EXPECT_EQ(CpRing(plan).nodes_spanned, ring_crosses ? 2 : 1);
              if (pp > 1) {
                EXPECT_EQ(PpPair(plan).nodes_spanned,
                          AnyPairCrosses(tp, cp, dp, pp, dp_inside, node, false) ? 2 : 1);
                EXPECT_EQ(EmbeddingPair(plan).nodes_spanned,
                          AnyPairCrosses(tp, cp, dp, pp, dp_inside, node, true) ? 2 : 1);
              }
              ++checked;
            }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace domino::sim
