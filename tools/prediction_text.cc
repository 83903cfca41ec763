#include "tools/prediction_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "tools/table.h"

namespace domino::cli {
namespace {

// " (split counts the ends)" and the like, or nothing when it counts layers only.
std::string PipelineSplitText(const Plan& p) {
  if (p.pipeline_split == PipelineSplit::kLayers) return "";
  return fmt::format(" (split counts the {})", PipelineSplitName(p.pipeline_split));
}

}  // namespace

std::string Describe(const Plan& p) {
  return fmt::format(
      "# {} on {} ({} x {}), {}, stack {}, seq {}, micro-batch {}, global batch {} ({} "
      "micro-batch(es))\n"
      "# tp {}{}, pp {}{}, dp {}, sequence parallel {} | row split {}, col split {}, scope {}{}\n",
      p.model.name, p.cluster.name, p.cluster.total_gpus(), p.cluster.node.gpu.name,
      DtypeName(p.precision), p.stack.name, p.seq_len, p.micro_batch, p.global_batch,
      p.micro_batches(), p.tp, p.cp > 1 ? fmt::format(", cp {} ({})", p.cp, p.CpCommText()) : "",
      p.pp, PipelineSplitText(p), p.dp, p.sequence_parallel ? "on" : "off", p.row_split,
      p.col_split, ScopeName(p.scope),
      p.method == OverlapMethod::kDomino
          ? ""
          : fmt::format(", {} overlap in {} chunks", MethodName(p.method), p.decomposed_chunks()));
}

std::string CaveatLine(const GpuSpec& gpu) {
  return gpu.caveat.empty() ? "" : fmt::format("# note: {}: {}\n", gpu.name, gpu.caveat);
}

std::string WindowLine(const Plan& plan) {
  const AttentionWindow& w = plan.model.window;
  if (w.CoveredLayers(plan.model.layers) == 0 || w.keys() >= plan.seq_len || plan.prices_window())
    return "";
  const std::string why = !plan.stack.sliding_window
                              ? fmt::format("the stack {}'s kernels run no window", plan.stack.name)
                          : plan.cp > 1
                              ? fmt::format(
                                    "context parallelism (cp {}) runs the p2p ring, over full "
                                    "causal attention",
                                    plan.cp)
                              : std::string("the plan's attention is unfused");
  return fmt::format(
      "# note: {}: its sliding window of {} tokens before each query is priced as full causal "
      "attention: {}\n",
      plan.model.name, w.tokens, why);
}

void PrintPrediction(const Plan& plan, const sim::Prediction& p, std::ostream& out) {
  const PlanFigures& f = p.figures;
  out << Describe(plan) << CaveatLine(plan.cluster.node.gpu) << WindowLine(plan) << "\n";
  Table summary({"figure", "value"});
  summary.AddRow({"iteration", fmt::format("{:.2f} ms", f.iteration_ms)});
  summary.AddRow({"ideal (TP comm free)", fmt::format("{:.2f} ms", f.ideal_ms)});
  summary.AddRow(
      {"exposed TP comm (iteration - ideal)", fmt::format("{:.2f} ms", f.exposed_comm_ms)});
  summary.AddRow({"comm share", fmt::format("{:.1f}%", 100 * f.exposed_comm_ms / f.iteration_ms)});
  summary.AddRow({"TP comm (uncontended)", fmt::format("{:.2f} ms", p.tp_comm_ms)});
  if (plan.cp > 1)
    summary.AddRow({"CP comm (uncontended)", fmt::format("{:.2f} ms", p.cp_comm_ms)});
  // Over a pipeline, TP time on the critical stage also lengthens the fill and drain, so the
  // exposure can pass one stage's TP time: the fraction is held at 0 then, and says why.
  summary.AddRow(
      {"hidden fraction", f.exposed_comm_ms > p.tp_comm_ms && p.tp_comm_ms > 0
                              ? fmt::format("{:.1f}% (exposed > TP comm: fill and drain grow too)",
                                            100 * f.hidden_comm_fraction)
                              : fmt::format("{:.1f}%", 100 * f.hidden_comm_fraction)});
  summary.AddRow({"tokens/s", fmt::format("{:.0f}", f.tokens_per_s)});
  summary.AddRow({"TFLOP/s per GPU", fmt::format("{:.1f}", f.tflops_per_gpu)});
  summary.AddRow({"MFU", fmt::format("{:.1f}%", 100 * f.mfu)});
  summary.AddRow({"MFU, attention unmasked", fmt::format("{:.1f}%", 100 * p.mfu_full_attention)});
  summary.AddRow({"memory per GPU", fmt::format("{:.1f} GiB", f.memory_gib_per_gpu)});
  summary.AddRow({"GEMM share (power)", fmt::format("{:.1f}%", 100 * p.gemm_duty)});
  if (p.tensor_clock < 1)
    summary.AddRow(
        {"tensor clock", fmt::format("{:.3f} (power limit, GEMM share {:.1f}% at full clock)",
                                     p.tensor_clock, 100 * p.gemm_duty_unheld)});
  summary.Print(out);
  out << "\n";
  Table classes({"op class", "busy ms", "% of iteration"});
  for (int c = 0; c < sim::kOpClassCount; ++c) {
    if (p.busy_ms[c] <= 0) continue;
    classes.AddRow({std::string(sim::OpClassName(static_cast<sim::OpClass>(c))),
                    fmt::format("{:.2f}", p.busy_ms[c]),
                    fmt::format("{:.1f}", 100 * p.busy_ms[c] / f.iteration_ms)});
  }
  classes.Print(out);
  out << "\n";
  const sim::IterationBreakdown& b = p.breakdown;
  Table parts({fmt::format("iteration on stage {} (critical)", b.critical_stage), "ms", "%"});
  auto part = [&](const char* name, double ms) {
    parts.AddRow(
        {name, fmt::format("{:.2f}", ms), fmt::format("{:.1f}", 100 * ms / f.iteration_ms)});
  };
  part("compute (TP comm free)", b.compute_ms);
  part("TP comm exposed in its passes", b.exposed_tp_ms);
  part("pipeline bubble", b.bubble_ms);
  part("exposed PP transfers", b.exposed_pp_ms);
  // A tied embedding over a pipeline is summed between the first and last stage after the DP
  // buckets: DP-side, with them.
  const bool embedding_sync = plan.pp > 1 && plan.model.tied_embeddings;
  part(embedding_sync ? "exposed DP comm and embedding sync" : "exposed DP comm",
       std::max(0.0, b.exposed_dp_ms));
  part("optimizer step", b.optimizer_ms);
  parts.Print(out);
  out << fmt::format(
      "\n{} ops per micro-batch on stage 0; serialized (nothing overlapped) {:.2f} ms; DP "
      "collectives{} {:.2f} ms uncontended.\n",
      p.schedule.size(), p.serial_ms, embedding_sync ? " and embedding sync" : "", p.dp_comm_ms);
}

}  // namespace domino::cli
