#include "tools/emulation.h"

#include "sim/cost_model.h"
#include "sim/engine.h"

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

double PredictedBesideUs(const Plan& plan, const HardwareProfile& profile, const Op& op, int ctas,
                         double hbm_GBps) {
  sim::CostOptions options;
  options.profile = &profile;
  sim::CostModel model(plan, options);
  const sim::OpCost compute = model.Cost(op);
  // A collective that outlasts the op by far, started first (it holds its SMs from the start).
  sim::OpCost collective;
  collective.is_comm = true;
  collective.ctas = ctas;
  collective.alone_us = 10 * compute.alone_us + 1000;
  collective.hbm_bytes = hbm_GBps * 1e3 * collective.alone_us;
  Schedule s;
  Op comm;
  comm.kind = OpKind::kCollective;
  comm.stream = Stream::kTpComm;
  comm.func = OpFunc::kTpAllReduce;
  comm.collective = CollectiveOp::kAllReduce;
  comm.group = Group::kTp;
  s.Add(comm, {});
  s.Add(op, {});
  const Timeline t = sim::Simulate(s, {collective, compute}, model.device());
  return t.ops[1].end_us - t.ops[1].start_us;
}

}  // namespace domino::cli
