// `domino compare PREDICTED MEASURED`: two reports side by side, by figure, op class and op.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/iteration.h"
#include "planner/stack.h"
#include "sim/report.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct CompareFlags {
  std::string predicted_path, measured_path;
  int top = 15;
  OutputFormat format = OutputFormat::kTable;
};

// (predicted - measured) / measured as a signed percentage, or "-" when measured is (about) zero.
std::string Error(double predicted, double measured) {
  if (std::fabs(measured) < 1e-9) return "-";
  return fmt::format("{:+.1f}%", 100 * (predicted - measured) / measured);
}

// (predicted - measured) / measured as a fraction, or null when measured is (about) zero.
Json ErrorJson(double predicted, double measured) {
  if (std::fabs(measured) < 1e-9) return nullptr;
  return (predicted - measured) / measured;
}

// A figure of both reports: {"predicted", "measured", "error"}, or "difference" for fractions.
Json PairJson(double predicted, double measured, bool fraction = false) {
  Json pair{{"predicted", predicted}, {"measured", measured}};
  if (fraction) {
    pair["difference"] = predicted - measured;
  } else {
    pair["error"] = ErrorJson(predicted, measured);
  }
  return pair;
}

// For fractions (0..1): the difference in points, meaningful even when the measured one is 0.
std::string Difference(double predicted, double measured) {
  return fmt::format("{:+.3f}", predicted - measured);
}

// The figures a report stands for: its measured: block, else its predicted: block.
std::optional<PlanFigures> FiguresOf(const Plan& plan, bool prefer_measured) {
  if (prefer_measured && plan.measured) return plan.measured;
  if (plan.predicted) return plan.predicted;
  return plan.measured;
}

// What differs between the plans of two reports in what shapes the ops and the figures: the
// model's shape, the batch, the degrees and the slicing ("micro_batch 8 and 2"). The stack and
// the cluster may differ (a prediction of another machine or software, the notes say which).
std::vector<std::string> PlanDifferences(const Plan& a, const Plan& b) {
  std::vector<std::string> out;
  auto check = [&](std::string_view key, auto x, auto y) {
    if (x != y) out.push_back(fmt::format("{} {} and {}", key, x, y));
  };
  check("model.layers", a.model.layers, b.model.layers);
  check("model.hidden", a.model.hidden, b.model.hidden);
  check("model.heads", a.model.heads, b.model.heads);
  check("model.kv_heads", a.model.kv_heads, b.model.kv_heads);
  check("model.head_dim", a.model.head_width(), b.model.head_width());
  check("model.ffn", a.model.ffn, b.model.ffn);
  check("model.vocab", a.model.vocab, b.model.vocab);
  check("model.activation", ActivationName(a.model.activation), ActivationName(b.model.activation));
  check("model.norm", NormName(a.model.norm), NormName(b.model.norm));
  check("model.positions", a.model.learned_positions() ? "learned" : "rotary",
        b.model.learned_positions() ? "learned" : "rotary");
  check("model.bias", a.model.bias, b.model.bias);
  check("model.tied_embeddings", a.model.tied_embeddings, b.model.tied_embeddings);
  check("seq_len", a.seq_len, b.seq_len);
  check("micro_batch", a.micro_batch, b.micro_batch);
  check("global_batch", a.global_batch, b.global_batch);
  check("tp", a.tp, b.tp);
  check("cp", a.cp, b.cp);
  check("pp", a.pp, b.pp);
  check("dp", a.dp, b.dp);
  check("virtual_stages", a.virtual_stages, b.virtual_stages);
  check("sequence_parallel", a.sequence_parallel, b.sequence_parallel);
  check("row_split", a.row_split, b.row_split);
  check("col_split", a.col_split, b.col_split);
  check("scope", ScopeName(a.scope), ScopeName(b.scope));
  check("method", MethodName(a.method), MethodName(b.method));
  if (a.method != OverlapMethod::kDomino && a.method == b.method) {
    check("chunks", a.decomposed_chunks(), b.decomposed_chunks());
    check("rs_chunks", a.decomposed_rs_chunks(), b.decomposed_rs_chunks());
  }
  check("pipeline_split", PipelineSplitName(a.pipeline_split), PipelineSplitName(b.pipeline_split));
  check("recompute", RecomputeName(a.recompute), RecomputeName(b.recompute));
  if (a.recompute == Recompute::kFull && b.recompute == Recompute::kFull)
    check("recompute_layers", a.recompute_layers, b.recompute_layers);
  check("distributed_optimizer", a.distributed_optimizer, b.distributed_optimizer);
  check("fsdp", a.fsdp, b.fsdp);
  return out;
}

struct StackFigures {
  double ms = 0, compute_ms = 0, comm_ms = 0, hidden = 1;
};

// Compute ops run on one stream, so their busy time is their sum; what the timeline takes beyond
// it is exposed communication. With tp 1 a TP collective has no peer and moves nothing: the
// prediction prices it at nothing, and what the executor's call took is not communication
// either (as `execute`'s own figures count it).
StackFigures Stack(const std::vector<const sim::ReportOp*>& ops, int tp) {
  StackFigures f;
  double begin = INFINITY, end = 0;
  for (const sim::ReportOp* each : ops) {
    const sim::ReportOp& op = *each;
    begin = std::min(begin, op.start_us);
    end = std::max(end, op.end_us);
    const double ms = (op.end_us - op.start_us) * 1e-3;
    if (op.op_class == "tp-comm") {
      if (tp > 1) f.comm_ms += ms;
    } else if (op.op_class != "other-comm") {
      f.compute_ms += ms;
    }
  }
  f.ms = ops.empty() ? 0 : (end - begin) * 1e-3;
  if (f.comm_ms > 0) f.hidden = std::clamp(1 - (f.ms - f.compute_ms) / f.comm_ms, 0.0, 1.0);
  return f;
}

// A predicted op and the measured op with the same label and occurrence.
struct Pair {
  const sim::ReportOp* p;
  const sim::ReportOp* m;
};

// The median of |predicted - measured| / measured over the matched ops measured above zero.
struct MedianError {
  double error = 0;
  size_t ops = 0;
};

MedianError MedianOpError(const std::vector<Pair>& pairs) {
  std::vector<double> errors;
  for (const Pair& pair : pairs) {
    const double measured_us = pair.m->end_us - pair.m->start_us;
    if (measured_us > 0)
      errors.push_back(std::fabs((pair.p->end_us - pair.p->start_us) - measured_us) / measured_us);
  }
  if (errors.empty()) return {};
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  return {errors[errors.size() / 2], errors.size()};
}

Json StackJson(const StackFigures& a, const StackFigures& b) {
  return Json{{"length_ms", PairJson(a.ms, b.ms)},
              {"compute_busy_ms", PairJson(a.compute_ms, b.compute_ms)},
              {"tp_comm_busy_ms", PairJson(a.comm_ms, b.comm_ms)},
              {"hidden_fraction", PairJson(a.hidden, b.hidden, /*fraction=*/true)}};
}

// What the tables say, as one document: the figures, and with both timelines the layer stack,
// the op classes and every matched op in the predicted report's order.
Json CompareJson(const CompareFlags& flags, const sim::Report& predicted,
                 const sim::Report& measured, const PlanFigures& p, const PlanFigures& m,
                 const std::vector<Pair>& pairs, size_t unmatched,
                 const std::map<std::string, std::pair<double, double>>& classes, bool iteration) {
  Json document = JsonDocument("compare");
  document["predicted"] = {{"path", flags.predicted_path}, {"model", predicted.plan.model.name}};
  document["measured"] = {{"path", flags.measured_path}, {"model", measured.plan.model.name}};
  document["figures"] = {
      {"iteration_ms", PairJson(p.iteration_ms, m.iteration_ms)},
      {"ideal_ms", PairJson(p.ideal_ms, m.ideal_ms)},
      {"exposed_comm_ms", PairJson(p.exposed_comm_ms, m.exposed_comm_ms)},
      {"hidden_comm_fraction",
       PairJson(p.hidden_comm_fraction, m.hidden_comm_fraction, /*fraction=*/true)},
      {"tokens_per_s", PairJson(p.tokens_per_s, m.tokens_per_s)}};
  // A measured step's TP collectives run inside its passes: not measured apart.
  if (iteration) {
    document["figures"]["ideal_ms"]["measured"] = nullptr;
    document["figures"]["ideal_ms"]["error"] = nullptr;
    document["figures"]["exposed_comm_ms"]["measured"] = nullptr;
    document["figures"]["exposed_comm_ms"]["error"] = nullptr;
    document["figures"]["hidden_comm_fraction"]["measured"] = nullptr;
    document["figures"]["hidden_comm_fraction"]["difference"] = nullptr;
  }
  const bool timelines = !predicted.ops.empty() && !measured.ops.empty();
  document["timelines"] = timelines;
  document["predicted_ops"] = predicted.ops.size();
  document["measured_ops"] = measured.ops.size();
  document["matched_ops"] = pairs.size();
  document["unmatched_predicted_ops"] = unmatched;
  if (!timelines) return document;
  std::vector<const sim::ReportOp*> predicted_ops, measured_ops;
  for (const Pair& pair : pairs) {
    predicted_ops.push_back(pair.p);
    measured_ops.push_back(pair.m);
  }
  document["layer_stack"] =
      StackJson(Stack(predicted_ops, predicted.plan.tp), Stack(measured_ops, measured.plan.tp));
  Json by_class = Json::array();
  for (const auto& [name, t] : classes)
    by_class.push_back({{"op_class", name},
                        {"predicted_us", t.first},
                        {"measured_us", t.second},
                        {"error", ErrorJson(t.first, t.second)}});
  document["op_classes"] = std::move(by_class);
  const MedianError median = MedianOpError(pairs);
  document["median_op_error"] = median.ops > 0 ? Json(median.error) : Json(nullptr);
  document["median_op_error_ops"] = median.ops;
  Json ops = Json::array();
  for (const Pair& pair : pairs) {
    const double a = pair.p->end_us - pair.p->start_us, b = pair.m->end_us - pair.m->start_us;
    ops.push_back({{"label", pair.p->label},
                   {"op_class", pair.p->op_class},
                   {"predicted_us", a},
                   {"measured_us", b},
                   {"error", ErrorJson(a, b)}});
  }
  document["ops"] = std::move(ops);
  return document;
}

// Where the prediction prices other software than `domino execute` runs: the executor's kernels,
// gradient buckets and loss are the domino stack's (planner/catalog/stacks/domino.yaml) whatever
// the plan names, so a prediction of another stack is not of what was measured.
std::vector<std::string> PricingNotes(const Plan& predicted) {
  Result<StackSpec> executor = LoadStack("domino");
  if (!executor.ok()) return {};
  std::vector<std::string> notes;
  if (predicted.stack.name != executor->name)
    notes.push_back(fmt::format(
        "the prediction prices the {} stack's kernels; domino execute runs its own (stack {}): "
        "`domino simulate --stack {}` predicts what it runs",
        predicted.stack.name, executor->name, executor->name));
  // What the executor runs of the same plan: its stack's gradient type, loss and attention.
  Plan executed = predicted;
  executed.stack = *executor;
  executed.grad_reduce.reset();
  executed.cross_entropy.reset();
  executed.attention.reset();
  if (GradBytes(predicted) != GradBytes(executed))
    notes.push_back(
        fmt::format("the prediction reduces gradients in {}-byte elements; the "
                    "executor's buckets hold {}-byte ones",
                    GradBytes(predicted), GradBytes(executed)));
  if (predicted.loss_kernels() != executed.loss_kernels())
    notes.push_back(fmt::format(
        "the prediction's loss runs as cross_entropy {}; the executor's as {}",
        CrossEntropyName(predicted.loss_kernels()), CrossEntropyName(executed.loss_kernels())));
  if (predicted.attention_kernel() != executed.attention_kernel())
    notes.push_back(fmt::format("the prediction's attention runs as {}; the executor's as {}",
                                AttentionKernelName(predicted.attention_kernel()),
                                AttentionKernelName(executed.attention_kernel())));
  if (predicted.optimizer_dtype != Dtype::kFp32)
    notes.push_back(fmt::format(
        "the prediction keeps the Adam state in {}; the executor's optimizer step keeps it in fp32",
        DtypeName(predicted.optimizer_dtype)));
  return notes;
}

void Run(const CompareFlags& flags) {
  Result<sim::Report> predicted = sim::LoadReport(flags.predicted_path);
  if (!predicted.ok()) Fail("compare", predicted.message());
  Result<sim::Report> measured = sim::LoadReport(flags.measured_path);
  if (!measured.ok()) Fail("compare", measured.message());
  std::optional<PlanFigures> p = FiguresOf(predicted->plan, false);
  std::optional<PlanFigures> m = FiguresOf(measured->plan, true);
  if (!p || !m)
    Fail("compare", fmt::format("{}: no predicted: or measured: block; pass reports written by "
                                "`domino simulate --report` and `domino execute --report`",
                                !p ? flags.predicted_path : flags.measured_path));
  if (!predicted->plan.predicted && predicted->plan.measured && measured->plan.predicted &&
      !measured->plan.measured)
    Fail("compare", fmt::format("{} holds a measurement and {} a prediction: give the predicted "
                                "report first (domino compare PREDICTED MEASURED)",
                                flags.predicted_path, flags.measured_path));
  if (std::vector<std::string> differ = PlanDifferences(predicted->plan, measured->plan);
      !differ.empty())
    Fail("compare",
         fmt::format("{} and {} are reports of different plans ({}): compare a "
                     "prediction and a measurement of the same plan",
                     flags.predicted_path, flags.measured_path, fmt::join(differ, "; ")));
  // Match ops by label and occurrence: the k-th "tp.allreduce L0 mb0 fwd" of one report with the
  // k-th of the other.
  std::map<std::pair<std::string, int>, const sim::ReportOp*> by_key;
  std::map<std::string, int> seen;
  for (const sim::ReportOp& op : measured->ops) by_key[{op.label, seen[op.label]++}] = &op;
  seen.clear();
  std::vector<Pair> pairs;
  size_t unmatched = 0;
  std::map<std::string, std::pair<double, double>> classes;  // busy us: predicted, measured
  for (const sim::ReportOp& op : predicted->ops) {
    auto it = by_key.find({op.label, seen[op.label]++});
    if (it == by_key.end()) {
      ++unmatched;
      continue;
    }
    pairs.push_back({&op, it->second});
    classes[op.op_class].first += op.end_us - op.start_us;
    classes[op.op_class].second += it->second->end_us - it->second->start_us;
  }
  // Reports of two different plans share no op: a comparison of them would mean nothing.
  if (!predicted->ops.empty() && !measured->ops.empty() && pairs.empty())
    Fail("compare", fmt::format("{} and {} share no op (0 of {} predicted ops match a measured "
                                "one): compare a prediction and a measurement of the same plan",
                                flags.predicted_path, flags.measured_path, predicted->ops.size()));
  // A whole iteration's reports (simulate --report-iteration, execute --extent step) hold passes,
  // and a measured pass holds its TP collectives: their exposed time is not measured apart.
  // So does a measured step alone (against a prediction without a timeline, say).
  auto is_pass = [](const sim::ReportOp& op) {
    return op.label.starts_with("forward ") || op.label.starts_with("backward ");
  };
  const bool iteration =
      std::any_of(pairs.begin(), pairs.end(), [&](const Pair& pair) { return is_pass(*pair.p); }) ||
      std::any_of(measured->ops.begin(), measured->ops.end(), is_pass);
  // Notes only for a prediction against a measurement of domino's executor (its report has a
  // measured: block); two runs of the executor compared have no pricing to note.
  std::vector<std::string> notes = measured->plan.measured && predicted->plan.predicted
                                       ? PricingNotes(predicted->plan)
                                       : std::vector<std::string>{};
  // Two predictions (what-ifs of the same plan) or two measurements (two runs) compare too; the
  // columns keep their names, and a note says what each one holds.
  if (!measured->plan.measured)
    notes.push_back(
        fmt::format("{} holds a prediction, not a measurement: the measured column is "
                    "its predicted figures",
                    flags.measured_path));
  if (!predicted->plan.predicted)
    notes.push_back(
        fmt::format("{} holds a measurement, not a prediction: the predicted column "
                    "is its measured figures",
                    flags.predicted_path));
  // A layer stack measured against a whole model (or the other way round): the figures, which
  // are each report's own, cover different work; the matched ops still compare.
  auto ends = [](const std::vector<sim::ReportOp>& ops) {
    return std::any_of(ops.begin(), ops.end(), [](const sim::ReportOp& op) {
      return op.label.starts_with("embed ") || op.label.starts_with("loss ");
    });
  };
  const bool predicted_ends = ends(predicted->ops);
  if (!predicted->ops.empty() && !measured->ops.empty() && !iteration &&
      predicted_ends != ends(measured->ops))
    notes.push_back(fmt::format(
        "the {} report holds the layer stack only (execute --extent layers), the {} the whole "
        "model: their iteration, ideal and tokens/s cover different work; compare the matched ops",
        predicted_ends ? "measured" : "predicted", predicted_ends ? "predicted" : "measured"));
  if (flags.format == OutputFormat::kJson) {
    Json document =
        CompareJson(flags, *predicted, *measured, *p, *m, pairs, unmatched, classes, iteration);
    document["notes"] = notes;
    PrintJson(document, std::cout);
    return;
  }
  std::cout << fmt::format(
      "# predicted: {} ({})\n# measured:  {} ({})\n"
      "# error = (predicted - measured) / measured; for fractions, "
      "predicted - measured\n",
      flags.predicted_path, predicted->plan.model.name, flags.measured_path,
      measured->plan.model.name);
  for (const std::string& note : notes) std::cout << "# note: " << note << "\n";
  std::cout << "\n";
  Table figures({"figure", "predicted", "measured", "error"});
  auto row = [&](const char* name, double a, double b, const char* format) {
    figures.AddRow({name, fmt::format(fmt::runtime(format), a),
                    fmt::format(fmt::runtime(format), b), Error(a, b)});
  };
  row("iteration ms", p->iteration_ms, m->iteration_ms, "{:.3f}");
  if (iteration) {
    figures.AddRow({"ideal ms", fmt::format("{:.3f}", p->ideal_ms), "-", "-"});
    figures.AddRow({"exposed TP comm ms", fmt::format("{:.3f}", p->exposed_comm_ms), "-", "-"});
    figures.AddRow({"hidden fraction", fmt::format("{:.3f}", p->hidden_comm_fraction), "-", "-"});
  } else {
    row("ideal ms", p->ideal_ms, m->ideal_ms, "{:.3f}");
    row("exposed TP comm ms", p->exposed_comm_ms, m->exposed_comm_ms, "{:.3f}");
    figures.AddRow({"hidden fraction", fmt::format("{:.3f}", p->hidden_comm_fraction),
                    fmt::format("{:.3f}", m->hidden_comm_fraction),
                    Difference(p->hidden_comm_fraction, m->hidden_comm_fraction)});
  }
  row("tokens/s", p->tokens_per_s, m->tokens_per_s, "{:.0f}");
  figures.Print(std::cout);
  if (iteration)
    std::cout << "(-: a measured step's TP collectives run inside its passes, so neither the "
                 "step without them nor their exposed time is measured apart)\n";

  if (predicted->ops.empty() || measured->ops.empty()) {
    std::cout << "\n(no per-op comparison: "
              << (predicted->ops.empty() ? flags.predicted_path : flags.measured_path)
              << " has no timeline: block)\n";
    return;
  }
  // The layer stack of one micro-batch, the same way from both timelines and over the ops both
  // have (a predicted first or last pipeline stage also has the embedding or the head): its
  // length, and the share of its TP comm time that compute hid (1 - (length - compute busy) /
  // comm busy).
  std::vector<const sim::ReportOp*> predicted_ops, measured_ops;
  for (const Pair& pair : pairs) {
    predicted_ops.push_back(pair.p);
    measured_ops.push_back(pair.m);
  }
  std::cout << "\n";
  Table stack({iteration ? "whole iteration, rank 0's stage (matched ops)"
                         : "layer stack, one micro-batch (matched ops)",
               "predicted", "measured", "error"});
  const StackFigures a = Stack(predicted_ops, predicted->plan.tp),
                     b = Stack(measured_ops, measured->plan.tp);
  stack.AddRow(
      {"length ms", fmt::format("{:.3f}", a.ms), fmt::format("{:.3f}", b.ms), Error(a.ms, b.ms)});
  stack.AddRow({"compute busy ms", fmt::format("{:.3f}", a.compute_ms),
                fmt::format("{:.3f}", b.compute_ms), Error(a.compute_ms, b.compute_ms)});
  stack.AddRow({"TP comm busy ms", fmt::format("{:.3f}", a.comm_ms),
                fmt::format("{:.3f}", b.comm_ms), Error(a.comm_ms, b.comm_ms)});
  stack.AddRow({"hidden fraction", fmt::format("{:.3f}", a.hidden), fmt::format("{:.3f}", b.hidden),
                Difference(a.hidden, b.hidden)});
  stack.Print(std::cout);
  std::cout << "\n";
  Table by_class({"op class", "predicted us", "measured us", "error"});
  for (const auto& [name, t] : classes)
    by_class.AddRow({name, fmt::format("{:.1f}", t.first), fmt::format("{:.1f}", t.second),
                     Error(t.first, t.second)});
  by_class.Print(std::cout);

  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    auto gap = [](const Pair& x) {
      return std::fabs((x.p->end_us - x.p->start_us) - (x.m->end_us - x.m->start_us));
    };
    return gap(a) > gap(b);
  });
  const MedianError median = MedianOpError(pairs);
  if (median.ops > 0)
    std::cout << fmt::format("\nmedian per-op error: {:.1f}% over {} ops\n", 100 * median.error,
                             median.ops);
  std::cout << fmt::format(
      "\n{} ops matched ({} of {} predicted ops unmatched, {} measured); "
      "the {} with the largest duration gaps:\n",
      pairs.size(), unmatched, predicted->ops.size(), measured->ops.size(),
      std::min<size_t>(flags.top, pairs.size()));
  Table ops({"op", "predicted us", "measured us", "error"});
  for (size_t i = 0; i < pairs.size() && i < static_cast<size_t>(flags.top); ++i) {
    double a = pairs[i].p->end_us - pairs[i].p->start_us;
    double b = pairs[i].m->end_us - pairs[i].m->start_us;
    ops.AddRow(
        {pairs[i].p->label, fmt::format("{:.2f}", a), fmt::format("{:.2f}", b), Error(a, b)});
  }
  ops.Print(std::cout);
}

}  // namespace

void SetupCompare(CLI::App* sub) {
  auto flags = std::make_shared<CompareFlags>();
  sub->add_option("predicted", flags->predicted_path, "report from `domino simulate --report`")
      ->required()
      ->check(NonEmpty());
  sub->add_option("measured", flags->measured_path, "report from `domino execute --report`")
      ->required()
      ->check(NonEmpty());
  sub->add_option("--top", flags->top,
                  "ops listed, largest duration gaps first (the JSON lists every matched op)")
      ->check(DecimalInt(1, kMaxListed));
  AddFormatOption(sub, &flags->format);
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
