#include "sim/predict.h"

#include <array>

#include "planner/lower.h"
#include "planner/memory_model.h"
#include "sim/engine.h"

namespace domino::sim {

std::string_view OpClassName(OpClass op_class) {
  static constexpr std::array<std::string_view, kOpClassCount> kNames = {
      "gemm", "attention", "elementwise", "tp-comm", "other-comm"};
  return kNames[static_cast<int>(op_class)];
}

OpClass ClassOf(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm: return OpClass::kGemm;
    case OpKind::kAttention: return OpClass::kAttention;
    case OpKind::kElementwise:
    case OpKind::kOptimizer: return OpClass::kElementwise;
    case OpKind::kCollective:
    case OpKind::kSendRecv: return op.group == Group::kTp ? OpClass::kTpComm : OpClass::kOtherComm;
  }
  return OpClass::kElementwise;
}

Result<Prediction> Predict(const Plan& plan, const CostOptions& options) {
  Result<Schedule> schedule = Lower(plan);
  if (!schedule.ok()) return schedule.error();
  Prediction p;
  p.schedule = std::move(schedule).value();

  CostModel model(plan, options);
  std::vector<OpCost> costs = model.CostAll(p.schedule);
  p.timeline = Simulate(p.schedule, costs, model.device());
  CostOptions ideal_options = options;
  ideal_options.tp_comm_free = true;
  CostModel ideal_model(plan, ideal_options);
  p.ideal_timeline = Simulate(p.schedule, ideal_model.CostAll(p.schedule), ideal_model.device());

  const double micro_batches = plan.micro_batches();
  const double us_to_ms = 1e-3;
  double model_flops = 0;  // per rank, one micro-batch
  double serial_us = 0;
  double tp_comm_us = 0;  // the plan's own costs already price every TP collective
  for (size_t i = 0; i < p.schedule.size(); ++i) {
    const Op& op = p.schedule.ops()[i];
    const OpTime& t = p.timeline.ops[i];
    p.busy_ms[static_cast<int>(ClassOf(op))] += (t.end_us - t.start_us) * us_to_ms * micro_batches;
    serial_us += costs[i].alone_us;
    if (ClassOf(op) == OpClass::kTpComm) tp_comm_us += costs[i].alone_us;
    if (op.tags.phase != Phase::kRecompute && (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention))
      model_flops += op.flops;
  }
  p.serial_ms = serial_us * us_to_ms * micro_batches;
  p.tp_comm_ms = tp_comm_us * us_to_ms * micro_batches;

  PlanFigures& f = p.figures;
  f.iteration_ms = p.timeline.end_us() * us_to_ms * micro_batches;
  f.ideal_ms = p.ideal_timeline.end_us() * us_to_ms * micro_batches;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  f.hidden_comm_fraction = p.tp_comm_ms > 0 ? 1.0 - f.exposed_comm_ms / p.tp_comm_ms : 1.0;
  double seconds = f.iteration_ms * 1e-3;
  f.tokens_per_s = static_cast<double>(plan.global_batch) * plan.seq_len / seconds;
  f.tflops_per_gpu = model_flops * micro_batches / seconds / 1e12;
  double peak = plan.cluster.node.gpu.peak(plan.precision);
  if (peak <= 0) peak = plan.cluster.node.gpu.peak(Dtype::kBf16);
  f.mfu = f.tflops_per_gpu / peak;
  f.memory_gib_per_gpu =
      EstimateMemory(plan, options.attention == AttentionKernel::kFlash).total_bytes() / (1 << 30);
  return p;
}

}  // namespace domino::sim
