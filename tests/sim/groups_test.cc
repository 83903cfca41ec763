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

#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

void ExpectPlaced(const CommGroup& g, int size, int nodes, int per_node) {
  EXPECT_EQ(g.size, size);
  EXPECT_EQ(g.nodes_spanned, nodes);
  EXPECT_EQ(g.gpus_per_node_in_group, per_node);
}

TEST(GroupsTest, AnUnevenDataParallelGroupIsPricedByItsEmptiestNode) {
  // tp 16, dp 9 on two 72-GPU racks: DP ranks 0, 16, ..., 128 are 5 in rack 0 and 4 in rack 1.
  // Those 4 ranks' NICs carry the group's traffic between the racks.
  PlanKnobs k;
  k.model = "gpt3-175b";
  k.cluster = "gb200-nvl72:2";
  k.tp = 16, k.dp = 9, k.micro_batch = 1, k.global_batch = 9;
  const Plan plan = MakePlan(k);
  ExpectPlaced(DpGroup(plan), 9, 2, 4);
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
  ExpectPlaced(PpPair(plan), 2, 2, 1);
  // The first and last stage (ranks 0-3 and 8-11) are in different nodes too.
  ExpectPlaced(EmbeddingPair(plan), 2, 2, 1);
  // pp 2, dp 3: stages 0 and 1 are ranks 0-3 and 4-7, 8-11 and 12-15, 16-19 and 20-23: always
  // inside a node.
  k.pp = 2, k.dp = 3, k.global_batch = 12;
  plan = MakePlan(k);
  plan.placement = Placement::kTpPpDp;
  ExpectPlaced(PpPair(plan), 2, 1, 2);
  ExpectPlaced(EmbeddingPair(plan), 2, 1, 2);
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
                ExpectPlaced(g, l.size, l.nodes, l.fewest);
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
