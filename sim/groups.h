#ifndef DOMINO_SIM_GROUPS_H_
#define DOMINO_SIM_GROUPS_H_

#include "hardware/collective_cost.h"
#include "planner/plan.h"

namespace domino::sim {

// Where a plan's communication groups sit on its cluster. Ranks are laid out as Megatron's: TP
// innermost, then CP, then DP and PP in the plan's placement; nodes hold consecutive ranks. Every
// group of a kind runs its collective at once, so the kind is priced as its slowest group: the
// one whose emptiest node holds the fewest of its ranks (that node's NICs carry the group's
// traffic out of it). Where the groups tile the nodes evenly that is every group; where they do
// not (tp 16 on 72-GPU racks: ranks 64-79 are 8 in each of two; 9 DP ranks 16 apart on those
// racks: 5 + 4), the CommGroup's gpus_per_node_in_group is the emptiest node's count and its
// size may exceed nodes_spanned times it.

// The TP group: tp consecutive ranks.
CommGroup TpGroup(const Plan& plan);
// The DP group, over which gradients are reduced, is DP x CP: its CP ranks tp apart, its DP ranks
// tp * cp (or tp * cp * pp) apart.
CommGroup DpGroup(const Plan& plan);
// Every GPU of one pipeline stage, tp x cp x dp ranks (the group fp8 delayed scaling reduces its
// amaxes over, Group::kStage): its TP ranks adjacent, then CP and DP as in DpGroup.
CommGroup StageGroup(const Plan& plan);
// A whole CP group (its ranks tp apart), the slowest of them: where all_gather and a2a context
// parallelism run their collectives.
CommGroup CpGroup(const Plan& plan);
// An a2a group of a2a+p2p context parallelism: cp_a2a consecutive CP ranks (tp apart).
CommGroup CpA2aGroup(const Plan& plan);
// Two neighbours of the CP ring (tp ranks apart; under a2a+p2p, tp x cp_a2a): a step is as slow
// as the ring's slowest hop, {2, 2, 1} once any ring crosses a node boundary, {2, 1, 2} otherwise.
CommGroup CpRing(const Plan& plan);
// Two pipeline neighbours (tp * cp * dp, or tp * cp, ranks apart): across nodes where any stage's
// rank and the next stage's sit in different nodes.
CommGroup PpPair(const Plan& plan);
// The first and last pipeline stage (sharing the tied embedding).
CommGroup EmbeddingPair(const Plan& plan);

}  // namespace domino::sim

#endif  // DOMINO_SIM_GROUPS_H_
