#include "tools/emulation.h"

#include "sim/cost_model.h"

namespace domino::cli {

std::vector<exec::EmulatedCollective> EmulatedCollectives(const Plan& plan,
                                                          const Schedule& schedule,
                                                          bool cuda_graphs) {
  sim::CostOptions options;
  options.cuda_graphs = cuda_graphs;
  sim::CostModel model(plan, options);
  std::vector<exec::EmulatedCollective> emulated(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op& op = schedule.ops()[i];
    if (op.kind != OpKind::kCollective) continue;
    const sim::OpCost cost = model.Cost(op);
    emulated[i] = exec::EmulatedCollective{cost.ctas, cost.hbm_bytes, cost.alone_us};
  }
  return emulated;
}

exec::EmulatedCollective LargestCollective(const Plan& plan, const Schedule& schedule) {
  exec::EmulatedCollective largest;
  for (const exec::EmulatedCollective& e : EmulatedCollectives(plan, schedule, false))
    if (e.us > largest.us) largest = e;
  return largest;
}

}  // namespace domino::cli
