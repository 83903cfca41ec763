// What `domino execute` prints and reports of a measured run: its figures, its tables and the
// ops of rank 0 (tools/execute_tables.h).
#include "tools/execute_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "exec/step.h"
#include "sim/predict.h"
#include "tools/table.h"

namespace domino::cli {

PlanFigures MeasuredFigures(const Plan& plan, const exec::ExecuteResult& r, double* comm_ms) {
  const double micro_batches = plan.micro_batches();
  double compute_us = 0, comm_us = 0, flops = 0;
  for (size_t i = 0; i < r.schedule.size(); ++i) {
    const Op& op = r.schedule.ops()[i];
    const double us = r.timeline.ops[i].end_us - r.timeline.ops[i].start_us;
    (sim::ClassOf(op) == sim::OpClass::kTpComm ? comm_us : compute_us) += us;
    if (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention) flops += op.flops;
  }
  PlanFigures f;
  f.iteration_ms = r.timeline.end_us() * 1e-3 * micro_batches;
  // Compute ops run one after another (one compute stream, or one op at a time): without the
  // collectives the run would take their sum.
  f.ideal_ms = compute_us * 1e-3 * micro_batches;
  *comm_ms = comm_us * 1e-3 * micro_batches;
  // With tp 1 the TP collectives have no peer and move nothing (the prediction prices them at
  // nothing): the run is its own ideal, and what the calls took is not communication.
  if (plan.tp == 1) f.ideal_ms = f.iteration_ms, *comm_ms = 0;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  f.hidden_comm_fraction =
      *comm_ms > 0 ? std::clamp(1.0 - f.exposed_comm_ms / *comm_ms, 0.0, 1.0) : 1.0;
  const double seconds = f.iteration_ms * 1e-3;
  f.tokens_per_s = static_cast<double>(plan.global_batch) * plan.seq_len / seconds;
  f.tflops_per_gpu = flops * micro_batches / seconds / 1e12;
  double peak = plan.cluster.node.gpu.peak(plan.precision);
  if (peak <= 0) peak = plan.cluster.node.gpu.peak(Dtype::kBf16);
  f.mfu = f.tflops_per_gpu / peak;
  return f;
}

namespace {

// The check's table, under `title`.
void PrintChecks(const std::vector<exec::TensorCheck>& checks, const std::string& title,
                 std::ostream& out) {
  if (checks.empty()) return;
  Table table({"tensor", "shape", "max abs error", "rel error", "verdict"});
  for (const exec::TensorCheck& c : checks)
    table.AddRow({c.name, fmt::format("{}x{}", c.rows, c.cols),
                  fmt::format("{:.3g}", c.max_abs_error), fmt::format("{:.3g}", c.rel_error),
                  c.ok ? "ok" : "DIFFERS"});
  out << title << "\n";
  table.Print(out);
}

}  // namespace

void PrintRun(const Plan& plan, exec::Extent extent, const std::string& backend,
              const exec::LaunchEnv& env, const exec::ExecuteResult& r, const PlanFigures& f,
              double comm_ms, std::ostream& out) {
  out << fmt::format(
      "# {} executed on the {} backend: {} rank(s), launcher: {}\n"
      "# tp {} | row split {}, col split {}, scope {}, sequence parallel {}{} | {}, "
      "micro-batch {} x seq {}, forward + backward, {} ops per rank\n\n",
      plan.model.name, backend, env.size, env.source, plan.tp, plan.row_split, plan.col_split,
      ScopeName(plan.scope), plan.sequence_parallel ? "on" : "off",
      plan.method == OverlapMethod::kDomino
          ? ""
          : fmt::format(", {} overlap in {} chunks", MethodName(plan.method),
                        plan.decomposed_chunks()),
      extent == exec::Extent::kModel
          ? fmt::format("whole model (embedding, {} layers, LM head, loss)", plan.model.layers)
          : fmt::format("layer stack of {} layers", plan.model.layers / plan.pp),
      plan.micro_batch, plan.seq_len, r.schedule.size());
  Table summary({"measured on rank 0", "value"});
  if (r.loss) summary.AddRow({"loss (mean cross-entropy)", fmt::format("{:.6f}", *r.loss)});
  summary.AddRow({"iteration", fmt::format("{:.2f} ms", f.iteration_ms)});
  summary.AddRow({"compute (sum of compute ops)", fmt::format("{:.2f} ms", f.ideal_ms)});
  summary.AddRow({"TP comm (sum of collectives)", fmt::format("{:.2f} ms", comm_ms)});
  // The iteration beyond its compute: the collectives' exposed time and the host's gaps between
  // ops alike, so it may exceed the collectives' sum.
  summary.AddRow({"exposed TP comm (iteration - compute, host gaps too)",
                  fmt::format("{:.2f} ms", f.exposed_comm_ms)});
  summary.AddRow({"hidden fraction", fmt::format("{:.3f}", f.hidden_comm_fraction)});
  summary.AddRow({"tokens/s", fmt::format("{:.0f}", f.tokens_per_s)});
  summary.AddRow(
      {"TFLOP/s per rank (GEMMs and attention)", fmt::format("{:.3f}", f.tflops_per_gpu)});
  // The GEMMs' own throughput: their FLOPs over their busy time (against the device's dense
  // peak, which `calibrate --backend cuda` measures).
  double gemm_flops = 0, gemm_us = 0;
  for (size_t i = 0; i < r.schedule.size(); ++i) {
    if (r.schedule.ops()[i].kind != OpKind::kGemm) continue;
    gemm_flops += r.schedule.ops()[i].flops;
    gemm_us += r.timeline.ops[i].end_us - r.timeline.ops[i].start_us;
  }
  if (gemm_us > 0)
    summary.AddRow({"GEMM TFLOP/s (GEMM FLOPs / GEMM busy time)",
                    fmt::format("{:.3f}", gemm_flops / gemm_us * 1e-6)});
  summary.Print(out);
  out << "\n";
  PrintChecks(r.checks,
              "numeric check against the unsharded single-rank reference (rel error = max abs "
              "error / largest reference value)",
              out);
}

void RankZeroOps(exec::ExecuteResult& r) {
  Schedule mine;
  Timeline times;
  for (size_t i = 0; i < r.schedule.size(); ++i) {
    const Op& op = r.schedule.ops()[i];
    if (op.stage != 0 && op.func != OpFunc::kEmbeddingAllReduce) continue;
    mine.Add(op, {});
    times.ops.push_back(r.timeline.ops[i]);
  }
  r.schedule = std::move(mine);
  r.timeline = std::move(times);
}

PlanFigures StepFigures(const Plan& plan, const exec::ExecuteResult& r) {
  PlanFigures f;
  double compute_us = 0;
  for (size_t i = 0; i < r.schedule.size(); ++i)
    if (r.schedule.ops()[i].stream == Stream::kCompute)
      compute_us += r.timeline.ops[i].end_us - r.timeline.ops[i].start_us;
  f.iteration_ms = r.timeline.end_us() * 1e-3;
  f.ideal_ms = compute_us * 1e-3;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  const double seconds = f.iteration_ms * 1e-3;
  f.tokens_per_s = static_cast<double>(plan.global_batch) * plan.seq_len / seconds;
  return f;
}

void PrintStep(const Plan& plan, const std::string& backend, const exec::LaunchEnv& env,
               const exec::ExecuteResult& r, const PlanFigures& f, std::ostream& out) {
  out << fmt::format(
      "# {} executed on the {} backend: {} rank(s), launcher: {}\n"
      "# {}{}{}{} | {} micro-batches of {} x seq {} per replica | row split {}, col split {}, "
      "sequence parallel {}{} | {} training step(s), {} ops on rank 0\n\n",
      plan.model.name, backend, env.size, env.source, exec::RanksText(plan),
      plan.cp > 1 ? fmt::format(" (context parallelism {})", plan.CpCommText()) : "",
      plan.virtual_stages > 1
          ? fmt::format(" (interleaved, {} chunks per stage)", plan.virtual_stages)
          : "",
      plan.pipeline_split == PipelineSplit::kLayers
          ? ""
          : fmt::format(" (split counts the {})", PipelineSplitName(plan.pipeline_split)),
      plan.micro_batches(), plan.micro_batch, plan.seq_len, plan.row_split, plan.col_split,
      plan.sequence_parallel ? "on" : "off",
      plan.fsdp                    ? ", fully sharded (fsdp)"
      : plan.distributed_optimizer ? ", distributed optimizer"
                                   : "",
      r.losses.size(), r.schedule.size());
  if (plan.cp > 1 && backend.starts_with("CUDA"))
    out << "# note: context parallelism's attention core runs on the host (exec/cp_attention.h): "
           "the passes' times include it, so they are a numeric check, not the GPU's timing\n\n";
  Table summary({"measured on rank 0 (last step)", "value"});
  for (size_t i = 0; i < r.losses.size(); ++i)
    summary.AddRow({fmt::format("loss, step {} (mean cross-entropy)", i + 1),
                    fmt::format("{:.6f}", r.losses[i])});
  // Rank 0's time by what its ops do.
  double by_func[static_cast<size_t>(OpFunc::kCount)] = {};
  for (size_t i = 0; i < r.schedule.size(); ++i)
    by_func[static_cast<size_t>(r.schedule.ops()[i].func)] +=
        r.timeline.ops[i].end_us - r.timeline.ops[i].start_us;
  auto ms = [&](std::initializer_list<OpFunc> funcs) {
    double us = 0;
    for (OpFunc func : funcs) us += by_func[static_cast<size_t>(func)];
    return fmt::format("{:.2f} ms", us * 1e-3);
  };
  summary.AddRow({"iteration", fmt::format("{:.2f} ms", f.iteration_ms)});
  summary.AddRow({"forward passes", ms({OpFunc::kForwardPass})});
  summary.AddRow({"backward passes", ms({OpFunc::kBackwardPass})});
  summary.AddRow({"pipeline sends and receives", ms({OpFunc::kPpSend, OpFunc::kPpRecv})});
  summary.AddRow({"DP gradient buckets and gathers",
                  ms({OpFunc::kDpAllReduce, OpFunc::kDpReduceScatter, OpFunc::kDpAllGather})});
  if (plan.fsdp)
    summary.AddRow({"FSDP layer gathers and reduce-scatters",
                    ms({OpFunc::kFsdpAllGather, OpFunc::kFsdpReduceScatter})});
  summary.AddRow({"tied embedding sync", ms({OpFunc::kEmbeddingAllReduce})});
  summary.AddRow({"optimizer step (Adam)", ms({OpFunc::kOptimizerStep})});
  summary.AddRow({"tokens/s", fmt::format("{:.0f}", f.tokens_per_s)});
  summary.Print(out);
  out << "\n";
  PrintChecks(r.checks,
              fmt::format("numeric check against the single-rank reference after {} step(s) of "
                          "Adam: every step's loss, every weight's gradient and updated weight "
                          "(rel error = max abs error / largest reference value)",
                          r.losses.size()),
              out);
}

}  // namespace domino::cli
