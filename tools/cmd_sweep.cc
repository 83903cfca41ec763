// `domino sweep`: what-if studies over bandwidth, node count, sequence length, batch, model or GPU.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "models/base/file_io.h"
#include "planner/search.h"
#include "sim/predict.h"
#include "tools/command.h"
#include "tools/plan_flags.h"

namespace domino::cli {
namespace {

// The keys a sweep may vary.
constexpr const char* kKeys[] = {"network_GBps", "nvlink_GBps", "nodes", "node", "seq_len",
                                 "micro_batch", "model"};

struct Axis {
  std::string key;
  std::vector<std::string> values;
};

struct SweepFlags {
  PlanFlags plan;
  std::vector<std::string> vary;
  std::string out_path;
  bool force = false;
};

Result<Axis> ParseAxis(const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return Error(fmt::format("--vary {}: expected KEY=V1,V2,...", text));
  Axis axis;
  axis.key = text.substr(0, eq);
  bool known = false;
  for (const char* k : kKeys) known = known || axis.key == k;
  if (!known)
    return Error(fmt::format("--vary {}: unknown key '{}' (network_GBps, nvlink_GBps, nodes, node, "
                             "seq_len, micro_batch, model)", text, axis.key));
  std::string rest = text.substr(eq + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    if (end > start) axis.values.push_back(rest.substr(start, end - start));
    start = end + 1;
  }
  if (axis.values.empty()) return Error(fmt::format("--vary {}: no values", text));
  return axis;
}

bool PositiveNumber(const std::string& text, double* out) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' && *out > 0;
}

// Applies one axis value to the flags (before the plan is built) or to the plan (after).
Status ApplyToFlags(const std::string& key, const std::string& value, PlanFlags* f) {
  double number = 0;
  auto positive_int = [&](int* out) -> Status {
    if (!PositiveNumber(value, &number) || number != static_cast<int>(number))
      return Error(fmt::format("--vary {}={}: expected a positive integer", key, value));
    *out = static_cast<int>(number);
    return Status::Ok();
  };
  std::string node = f->cluster.substr(0, f->cluster.find(':'));
  std::string count = f->cluster.find(':') == std::string::npos ? "1" : f->cluster.substr(f->cluster.find(':') + 1);
  if (key == "model") f->model = value;
  if (key == "seq_len") return positive_int(&f->seq_len);
  if (key == "micro_batch") return positive_int(&f->micro_batch);
  if (key == "nodes") {
    int n = 0;
    DOMINO_RETURN_IF_ERROR(positive_int(&n));
    f->cluster = fmt::format("{}:{}", node, n);
  }
  if (key == "node") f->cluster = fmt::format("{}:{}", value, count);
  return Status::Ok();
}

Status ApplyToPlan(const std::string& key, const std::string& value, Plan* plan) {
  double GBps = 0;
  if (key != "network_GBps" && key != "nvlink_GBps") return Status::Ok();
  if (!PositiveNumber(value, &GBps))
    return Error(fmt::format("--vary {}={}: expected a bandwidth in GB/s", key, value));
  (key == "network_GBps" ? plan->cluster.node.network : plan->cluster.node.nvlink)
      .GBps_per_direction = GBps;
  return Status::Ok();
}

class Simulator : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override {
    Result<sim::Prediction> p = sim::Predict(plan);
    if (!p.ok()) return p.error();
    return p->figures;
  }
};

std::string Csv(const std::string& text) {
  if (text.find_first_of(",\"") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void Run(const SweepFlags& flags) {
  if (flags.vary.empty() || flags.vary.size() > 2)
    Fail("sweep", "give one or two --vary KEY=V1,V2,... (keys: network_GBps, nvlink_GBps, nodes, "
                  "node, seq_len, micro_batch, model)");
  if (flags.out_path.empty()) Fail("sweep", "--out sweep.csv is required");
  if (!flags.force && access(flags.out_path.c_str(), F_OK) == 0)
    Fail("sweep", fmt::format("{}: exists; pass --force to overwrite it", flags.out_path));
  std::vector<Axis> axes;
  for (const std::string& v : flags.vary) {
    Result<Axis> axis = ParseAxis(v);
    if (!axis.ok()) Fail("sweep", axis.message());
    axes.push_back(*axis);
  }
  if (axes.size() == 2 && axes[0].key == axes[1].key) Fail("sweep", "vary two different keys");
  PlanFlags base = flags.plan;
  if (base.model.empty() && base.plan_path.empty()) base.model = "gpt3-13b";
  if (base.cluster.empty() && base.plan_path.empty()) base.cluster = "dgx-h100:4";
  if (base.seq_len == 0 && base.plan_path.empty()) base.seq_len = 1024;
  if (base.micro_batch == 0 && base.plan_path.empty()) base.micro_batch = 16;

  std::string csv;
  for (const Axis& a : axes) csv += a.key + ",";
  csv += "strategy,plan,iteration_ms,ideal_ms,exposed_comm_ms,comm_share,tokens_per_s,mfu,"
         "speedup_vs_baseline\n";
  const size_t inner = axes.size() == 2 ? axes[1].values.size() : 1;
  const size_t total = axes[0].values.size() * inner;
  const bool tty = isatty(fileno(stderr));
  Simulator simulator;
  for (size_t point = 0; point < total; ++point) {
    if (tty) std::cerr << fmt::format("\rdomino sweep: point {}/{}", point + 1, total) << std::flush;
    std::vector<std::string> values = {axes[0].values[point / inner]};
    if (axes.size() == 2) values.push_back(axes[1].values[point % inner]);
    PlanFlags f = base;
    std::string where;
    for (size_t i = 0; i < axes.size(); ++i) {
      CheckOk("sweep", ApplyToFlags(axes[i].key, values[i], &f));
      where += fmt::format("{}{}={}", i ? ", " : "", axes[i].key, values[i]);
    }
    Result<Plan> plan = BuildPlan(f);
    if (!plan.ok()) Fail("sweep", where + ": " + plan.message());
    for (size_t i = 0; i < axes.size(); ++i) CheckOk("sweep", ApplyToPlan(axes[i].key, values[i], &*plan));
    // Megatron's baseline, DeepSpeed-Domino (row split 2, inter-layer), and the best Domino
    // slicing for the same degrees.
    struct Row {
      std::string strategy;
      Plan plan;
      PlanFigures figures;
    };
    std::vector<Row> rows;
    Plan baseline = *plan;
    baseline.row_split = baseline.col_split = 1;
    baseline.scope = OverlapScope::kNone;
    Result<PlanFigures> b = simulator.Evaluate(baseline);
    if (!b.ok()) Fail("sweep", where + ": " + b.message());
    rows.push_back({"baseline", baseline, *b});
    Plan domino = baseline;
    domino.row_split = 2;
    domino.scope = OverlapScope::kInterLayer;
    if (!CheckPlanRules(domino)) {
      Result<PlanFigures> d = simulator.Evaluate(domino);
      if (!d.ok()) Fail("sweep", where + ": " + d.message());
      rows.push_back({"deepspeed-domino", domino, *d});
    }
    SearchSpace space;
    space.tp = plan->tp, space.pp = plan->pp, space.dp = plan->dp;
    space.virtual_stages = plan->virtual_stages, space.micro_batch = plan->micro_batch;
    space.sequence_parallel = plan->sequence_parallel;
    space.distributed_optimizer = plan->distributed_optimizer;
    space.recompute = plan->recompute;
    Result<SearchResult> best = SearchPlans(*plan, space, simulator);
    if (best.ok()) rows.push_back({"best", best->ranked.front().plan, best->ranked.front().figures});
    for (const Row& r : rows) {
      const PlanFigures& x = r.figures;
      for (const std::string& v : values) csv += Csv(v) + ",";
      csv += fmt::format("{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.1f},{:.4f},{:.4f}\n", r.strategy,
                         Csv(DescribeCandidate(r.plan)), x.iteration_ms, x.ideal_ms,
                         x.exposed_comm_ms, x.exposed_comm_ms / x.iteration_ms, x.tokens_per_s,
                         x.mfu, b->iteration_ms / x.iteration_ms);
    }
    // The ideal: the baseline with TP communication free.
    for (const std::string& v : values) csv += Csv(v) + ",";
    csv += fmt::format("ideal,{},{:.4f},{:.4f},0,0,{:.1f},{:.4f},{:.4f}\n",
                       Csv(DescribeCandidate(baseline)), b->ideal_ms, b->ideal_ms,
                       b->tokens_per_s * b->iteration_ms / b->ideal_ms,
                       b->mfu * b->iteration_ms / b->ideal_ms, b->iteration_ms / b->ideal_ms);
  }
  if (tty) std::cerr << "\r\033[K";
  CheckOk("sweep", WriteFileAtomically(flags.out_path, csv, true));
  std::cout << fmt::format("wrote {} ({} points x 4 strategies); plot it with tools/plot {}\n",
                           flags.out_path, total, flags.out_path);
}

}  // namespace

void SetupSweep(CLI::App* sub) {
  auto flags = std::make_shared<SweepFlags>();
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--vary", flags->vary,
                  "KEY=V1,V2,... (once or twice): network_GBps, nvlink_GBps (per direction), nodes, "
                  "node (node type), seq_len, micro_batch, model");
  sub->add_option("--out", flags->out_path, "CSV to write");
  sub->add_flag("--force", flags->force, "overwrite an existing --out file");
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
