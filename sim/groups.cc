#include "sim/groups.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace domino::sim {
namespace {

// One dimension of the rank layout: `count` ranks `stride` apart.
struct RankDim {
  int64_t stride = 1;
  int64_t count = 1;
};

// Megatron's rank order, innermost first: tp, cp, then dp and pp in the plan's placement.
struct Layout {
  RankDim tp, cp, dp, pp;
};

Layout LayoutOf(const Plan& plan) {
  const int64_t tp = plan.tp, tp_cp = tp * plan.cp;
  if (plan.placement == Placement::kTpDpPp)
    return {{1, tp}, {tp, plan.cp}, {tp_cp, plan.dp}, {tp_cp * plan.dp, plan.pp}};
  return {{1, tp}, {tp, plan.cp}, {tp_cp * plan.pp, plan.dp}, {tp_cp, plan.pp}};
}

// Where in its node a group's first rank can sit: the residues modulo `node` of the ranks
// sum_d i_d * stride_d (i_d < count_d) over the dimensions the group does not span.
std::vector<char> FirstRanks(int64_t node, std::initializer_list<RankDim> others) {
  std::vector<char> seen(static_cast<size_t>(node), 0);
  seen[0] = 1;
  for (const RankDim& d : others) {
    if (d.count <= 1) continue;
    std::vector<char> next(seen.size(), 0);
    // i * stride modulo node repeats within `node` steps.
    const int64_t steps = std::min(d.count, node);
    for (int64_t q = 0; q < node; ++q) {
      if (!seen[static_cast<size_t>(q)]) continue;
      for (int64_t i = 0; i < steps; ++i) next[static_cast<size_t>((q + i * d.stride) % node)] = 1;
    }
    seen = std::move(next);
  }
  return seen;
}

// The slowest group of one kind: its dimensions innermost first (each stride at least the
// extent of those inside it, so the ranks come out in order), its first rank at any of
// `firsts`. Slowest: across nodes before inside one, then the fewest ranks in its emptiest node,
// then the most nodes.
CommGroup Slowest(const Plan& plan, std::initializer_list<RankDim> dims,
                  const std::vector<char>& firsts) {
  const int64_t node = plan.cluster.gpus_per_node;
  std::vector<int64_t> offsets{0};
  for (const RankDim& d : dims) {
    const size_t inner = offsets.size();
    for (int64_t i = 1; i < d.count; ++i)
      for (size_t j = 0; j < inner; ++j) offsets.push_back(offsets[j] + i * d.stride);
  }
  assert(std::is_sorted(offsets.begin(), offsets.end()));
  const int size = static_cast<int>(offsets.size());
  CommGroup slowest{size, 1, size};
  for (int64_t q = 0; q < node; ++q) {
    if (!firsts[static_cast<size_t>(q)]) continue;
    int nodes = 0, fewest = size, run = 0;
    int64_t current = -1;
    for (int64_t offset : offsets) {
      const int64_t n = (q + offset) / node;
      if (n != current) {
        if (run > 0) fewest = std::min(fewest, run);
        ++nodes, current = n, run = 0;
      }
      ++run;
    }
    fewest = std::min(fewest, run);
    const bool slower = fewest < slowest.gpus_per_node_in_group ||
                        (fewest == slowest.gpus_per_node_in_group && nodes > slowest.nodes_spanned);
    if (nodes > 1 && slower) slowest = CommGroup{size, nodes, fewest};
  }
  return slowest;
}

// Two ranks `stride` apart, the first at any of `firsts`: {2, 2, 1} where any pair straddles a
// node boundary.
CommGroup Pair(const Plan& plan, int64_t stride, const std::vector<char>& firsts) {
  return Slowest(plan, {{stride, 2}}, firsts);
}

// Ranks of each a2a group under a2a+p2p (at least 1; 1 for any other comm type).
int64_t A2aRanks(const Plan& plan) {
  return plan.cp_communication() == CpComm::kA2aP2p ? std::max(1, plan.cp_a2a_ranks()) : 1;
}

}  // namespace

CommGroup TpGroup(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node;
  return Slowest(plan, {l.tp}, FirstRanks(node, {l.cp, l.dp, l.pp}));
}

CommGroup DpGroup(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node;
  return Slowest(plan, {l.cp, l.dp}, FirstRanks(node, {l.tp, l.pp}));
}

CommGroup StageGroup(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node;
  return Slowest(plan, {l.tp, l.cp, l.dp}, FirstRanks(node, {l.pp}));
}

CommGroup CpGroup(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node;
  return Slowest(plan, {l.cp}, FirstRanks(node, {l.tp, l.dp, l.pp}));
}

CommGroup CpA2aGroup(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node, a = A2aRanks(plan);
  return Slowest(plan, {{l.cp.stride, a}},
                 FirstRanks(node, {l.tp, {l.cp.stride * a, l.cp.count / a}, l.dp, l.pp}));
}

CommGroup CpRing(const Plan& plan) {
  // The ring's ranks: every CP rank, or under a2a+p2p one of each a2a group.
  const Layout l = LayoutOf(plan);
  const int64_t node = plan.cluster.gpus_per_node, a = A2aRanks(plan);
  const CommGroup ring = Slowest(plan, {{l.cp.stride * a, l.cp.count / a}},
                                 FirstRanks(node, {l.tp, {l.cp.stride, a}, l.dp, l.pp}));
  return ring.nodes_spanned > 1 ? CommGroup{2, 2, 1} : CommGroup{2, 1, 2};
}

CommGroup PpPair(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  if (l.pp.count < 2) return CommGroup{2, 1, 2};
  const int64_t node = plan.cluster.gpus_per_node;
  // A stage and the next: the first any stage but the last.
  return Pair(plan, l.pp.stride,
              FirstRanks(node, {l.tp, l.cp, l.dp, {l.pp.stride, l.pp.count - 1}}));
}

CommGroup EmbeddingPair(const Plan& plan) {
  const Layout l = LayoutOf(plan);
  if (l.pp.count < 2) return CommGroup{2, 1, 2};
  const int64_t node = plan.cluster.gpus_per_node;
  return Pair(plan, l.pp.stride * (l.pp.count - 1), FirstRanks(node, {l.tp, l.cp, l.dp}));
}

}  // namespace domino::sim
