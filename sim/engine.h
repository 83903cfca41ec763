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
// proportion. Launch order matters as it does on a GPU, whose CTAs not yet running are placed in
// the order their kernels were launched: a collective that needs SMs, ready while a GEMM that
// keeps every SM runs (OpCost::blocks_comm), starts when that GEMM ends, and a GEMM launched
// while collectives hold SMs (they count when they start at the same moment: they were launched
// first) first stalls for its late CTAs (OpCost::tail_share of its body, for as long as the
// collectives hold them) and then runs on the SMs left; a persistent GEMM
// (OpCost::persistent_ctas) runs its early CTAs meanwhile, and its late ones, if any, then owe
// their share; a pass stalls stall_share of its body throughout. Rates change whenever an op
// starts, ends or stops stalling; between those events every op progresses at a constant rate, so
// the result is exact for the model. `costs[i]` belongs to op i.
//
// A schedule with ops of several stages (Op::stage: an Iteration) runs every stage's rank on its
// own device with its own streams; dependencies may cross stages (a recv waits for its send).
// Ops that can never run (dependencies that wait on each other) start and end at +infinity.
//
// Complexity: O((ops + dependencies) * log(stages * streams)); a stage's rates are recomputed
// only when its running set changes. The returned timeline has one entry per op.
Timeline Simulate(const Schedule& schedule, const std::vector<OpCost>& costs,
                  const DeviceResources& device);

// The same for several runs of one schedule with different costs (the iteration, its ideal, ...):
// the streams and dependencies are prepared once. The schedule must outlive the engine.
class Engine {
 public:
  explicit Engine(const Schedule& schedule);
  Timeline Run(const std::vector<OpCost>& costs, const DeviceResources& device) const;

 private:
  const Schedule& schedule_;
  int stages_ = 1, slots_ = kStreamCount;
  std::vector<int32_t> slot_;                 // by op: stage * kStreamCount + stream
  std::vector<std::vector<int32_t>> queues_;  // by slot: its ops in issue order
  std::vector<uint32_t> dep_count_, first_;   // by op; first_: its dependents' range
  std::vector<int32_t> dependents_;
};

}  // namespace domino::sim

#endif  // DOMINO_SIM_ENGINE_H_
