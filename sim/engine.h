#ifndef DOMINO_SIM_ENGINE_H_
#define DOMINO_SIM_ENGINE_H_

#include <vector>

#include "planner/schedule.h"
#include "sim/op_cost.h"

namespace domino::sim {

// Simulate runs a Schedule under CUDA stream semantics on a virtual clock. Each stream starts its
// next op when the previous one on that stream has finished and the op's dependencies are done.
// Ops that run at the same time share the device: collectives take `ctas` SMs from the compute op
// (which then needs more waves), and when the compute op's and collectives' HBM demand exceeds
// the device's bandwidth, it is shared max-min fairly in proportion to the SMs each op runs on
// (a collective's CTAs; the compute op's remaining SMs), and an op short of bandwidth slows in
// proportion. Rates change whenever an op starts
// or ends; between those events every op progresses at a constant rate, so the result is exact
// for the model. `costs[i]` belongs to op i.
//
// Complexity: O(ops * streams). The returned timeline has one entry per op.
Timeline Simulate(const Schedule& schedule, const std::vector<OpCost>& costs,
                  const DeviceResources& device);

}  // namespace domino::sim

#endif  // DOMINO_SIM_ENGINE_H_
