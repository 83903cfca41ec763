// `domino sweep`: what-if studies over bandwidth, node count, sequence length, batch, model or GPU.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "models/base/embedded_file.h"
#include "models/base/file_io.h"
#include "models/base/parallel_for.h"
#include "models/base/yaml_reader.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "tools/command.h"
#include "tools/plan_flags.h"
#include "tools/simulator_evaluator.h"
#include "tools/sweep_study.h"

namespace domino::cli {
namespace {

struct SweepFlags {
  PlanFlags plan;
  std::string study_path;
  std::vector<std::string> vary;
  std::string out_path;
  bool force = false;
  double timeout_s = 0;
  int jobs = 0;  // 0: JobsThreads' default
};

// A cluster as its node (catalog name or file), node count and GPUs used per node (0: all), so
// that `nodes` and `node` replace one part and keep the others.
struct ClusterParts {
  std::string node;
  int nodes = 1;
  int gpus_per_node = 0;
};

Result<ClusterParts> SplitCluster(const std::string& ref) {
  Result<ClusterSpec> cluster = LoadCluster(ref);
  if (!cluster.ok()) return cluster.error();
  ClusterParts parts;
  parts.nodes = cluster->nodes;
  if (cluster->gpus_per_node != cluster->node.gpus_per_node)
    parts.gpus_per_node = cluster->gpus_per_node;
  const bool yaml = ref.ends_with(".yaml") || ref.ends_with(".yml");
  if (!yaml && ref.find(':') != std::string::npos) {
    parts.node = ref.substr(0, ref.find(':'));
    return parts;
  }
  // A cluster file names its node; a relative file name is read beside the cluster file.
  Result<std::string> text = ReadTextFile(ref);
  if (!text.ok()) return text.error();
  Result<YAML::Node> root = ParseYaml(*text, ref);
  if (!root.ok()) return root.error();
  parts.node = (*root)["node"].Scalar();
  const std::filesystem::path beside = std::filesystem::path(ref).parent_path() / parts.node;
  std::error_code ec;
  if (FindEmbedded(NodeCatalog(), parts.node) == nullptr &&
      std::filesystem::path(parts.node).is_relative() &&
      std::filesystem::is_regular_file(beside, ec))
    parts.node = beside.string();
  return parts;
}

std::string JoinCluster(const ClusterParts& parts) {
  if (parts.gpus_per_node > 0)
    return fmt::format("{}:{}:{}", parts.node, parts.nodes, parts.gpus_per_node);
  return fmt::format("{}:{}", parts.node, parts.nodes);
}

// Applies one axis value to the flags (before the plan is built) or to the plan (after).
Status ApplyToFlags(const std::string& key, const std::string& value, PlanFlags* f) {
  auto positive_int = [&](int* out) -> Status {
    if (!PositiveDecimalInt(value, out))
      return Error(fmt::format("--vary {}={}: expected a positive integer", key, value));
    return Status::Ok();
  };
  if (key == "model") f->model = value;
  if (key == "stack") f->stack = value;
  if (key == "precision") f->precision = value;
  if (key == "seq_len") return positive_int(&f->seq_len);
  if (key == "micro_batch") return positive_int(&f->micro_batch);
  if (key == "nodes" || key == "node") {
    Result<ClusterParts> parts = SplitCluster(f->cluster);
    if (!parts.ok()) return parts.error();
    if (key == "nodes") DOMINO_RETURN_IF_ERROR(positive_int(&parts->nodes));
    if (key == "node") parts->node = value;
    f->cluster = JoinCluster(*parts);
  }
  return Status::Ok();
}

Status ApplyToPlan(const std::string& key, const std::string& value, Plan* plan) {
  if (key != "network_GBps" && key != "nvlink_GBps") return Status::Ok();
  const std::optional<double> GBps = SweepBandwidth(value);
  if (!GBps)
    return Error(
        fmt::format("--vary {}={}: expected a bandwidth from 0.001 to 1000000 GB/s", key, value));
  NodeSpec& node = plan->cluster.node;
  if (key == "network_GBps") {
    node.network.GBps_per_direction = *GBps;
    return Status::Ok();
  }
  // NVLink SHARP reduces in the switches over the same links: its measured busbw scales with them.
  if (node.nvls && node.nvlink.GBps_per_direction > 0)
    node.nvls_busbw_GBps *= *GBps / node.nvlink.GBps_per_direction;
  node.nvlink.GBps_per_direction = *GBps;
  return Status::Ok();
}

double MemoryGib(const Plan& plan) { return EstimateMemory(plan).total_bytes() / (1 << 30); }

std::string Csv(const std::string& text) {
  if (text.find_first_of(",\"") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A sweep's grid and what every point starts from.
struct Grid {
  std::vector<Axis> axes;
  std::vector<std::pair<std::string, std::string>> fixed;
  PlanFlags base;  // --vary's keys and `fixed` applied to these for each point
  size_t points = 0;
};

// The CSV rows of one point: the baseline, DeepSpeed-Domino, the best slicing and the ideal for
// its degrees, or an `infeasible` row when the plan rules exclude the point. An error is fatal to
// the sweep. Depends on `point` alone, so the points may run on any threads in any order.
Result<std::string> SweepPoint(const Grid& grid, const SweepFlags& flags, size_t point) {
  const std::vector<Axis>& axes = grid.axes;
  std::vector<std::string> values(axes.size());
  size_t rest = point;
  for (size_t i = axes.size(); i-- > 0;) {
    values[i] = axes[i].values[rest % axes[i].values.size()];
    rest /= axes[i].values.size();
  }
  PlanFlags f = grid.base;
  std::string where;
  // The node type before the node count, whatever the axis order.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < axes.size(); ++i)
      if ((axes[i].key == "node") == (pass == 0))
        DOMINO_RETURN_IF_ERROR(ApplyToFlags(axes[i].key, values[i], &f));
  for (size_t i = 0; i < axes.size(); ++i)
    where += fmt::format("{}{}={}", i ? ", " : "", axes[i].key, values[i]);
  // A micro-batch given to a plan file's sweep keeps one micro-batch per DP rank, as flags
  // alone do (BuildPlan), rather than the file's global batch.
  if (f.micro_batch > 0 && flags.plan.global_batch == 0 && !f.plan_path.empty())
    if (Result<Plan> loose = BuildPlan(f, /*check_rules=*/false); loose.ok())
      f.global_batch = DefaultGlobalBatch(f.micro_batch, loose->dp);
  std::string csv;
  Result<Plan> plan = BuildPlan(f);
  if (!plan.ok()) {
    // A point the rules exclude (tp not dividing the heads, say) is recorded, not fatal.
    Result<Plan> loose = BuildPlan(f, /*check_rules=*/false);
    if (!loose.ok()) return Error(where + ": " + plan.message());
    for (const std::string& v : values) csv += Csv(v) + ",";
    csv += fmt::format("infeasible,{},,,,,,,,,false\n", Csv(plan.message()));
    return csv;
  }
  for (const auto& [key, value] : grid.fixed)
    DOMINO_RETURN_IF_ERROR(ApplyToPlan(key, value, &*plan));
  for (size_t i = 0; i < axes.size(); ++i)
    DOMINO_RETURN_IF_ERROR(ApplyToPlan(axes[i].key, values[i], &*plan));
  const double memory_gib = MemoryGib(*plan);
  const double capacity_gib = plan->cluster.node.gpu.memory_gib();
  const char* fits = memory_gib <= capacity_gib ? "true" : "false";
  // Megatron's baseline, DeepSpeed-Domino (row split 2, inter-layer), and the best Domino
  // slicing for the same degrees.
  struct Row {
    std::string strategy;
    Plan plan;
    PlanFigures figures;
  };
  std::vector<Row> rows;
  SimulatorEvaluator simulator;
  Plan baseline = *plan;
  baseline.row_split = baseline.col_split = 1;
  baseline.scope = OverlapScope::kNone;
  // Megatron-LM's TP cuts no collective into pieces either.
  baseline.method = OverlapMethod::kDomino;
  baseline.chunks = baseline.rs_chunks = 0;
  baseline.copy_engine.reset();
  Result<PlanFigures> b = simulator.Evaluate(baseline);
  if (!b.ok()) return Error(where + ": " + b.message());
  rows.push_back({"baseline", baseline, *b});
  Plan domino = baseline;
  domino.row_split = 2;
  domino.scope = OverlapScope::kInterLayer;
  if (!CheckPlanRules(domino)) {
    Result<PlanFigures> d = simulator.Evaluate(domino);
    if (!d.ok()) return Error(where + ": " + d.message());
    rows.push_back({"deepspeed-domino", domino, *d});
  }
  SearchSpace space;
  space.tp = plan->tp, space.cp = plan->cp, space.pp = plan->pp, space.dp = plan->dp;
  space.virtual_stages = plan->virtual_stages, space.micro_batch = plan->micro_batch;
  space.sequence_parallel = plan->sequence_parallel;
  space.distributed_optimizer = plan->distributed_optimizer;
  space.fsdp = plan->fsdp;
  space.recompute = plan->recompute;
  // A point that decomposes its collectives searches that overlap beside Domino's slicing.
  if (plan->method != OverlapMethod::kDomino) DOMINO_RETURN_IF_ERROR(ApplyStrategy("all", &space));
  Result<SearchResult> best = SearchPlans(*plan, space, simulator);
  if (best.ok() && !best->ranked.empty())
    rows.push_back({"best", best->ranked.front().plan, best->ranked.front().figures});
  for (const Row& r : rows) {
    const PlanFigures& x = r.figures;
    for (const std::string& v : values) csv += Csv(v) + ",";
    csv += fmt::format("{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.1f},{:.4f},{:.4f},{:.2f},{}\n",
                       r.strategy, Csv(DescribeCandidate(r.plan)), x.iteration_ms, x.ideal_ms,
                       x.exposed_comm_ms, x.exposed_comm_ms / x.iteration_ms, x.tokens_per_s, x.mfu,
                       b->iteration_ms / x.iteration_ms, memory_gib, fits);
  }
  // The ideal: the baseline with TP communication free.
  for (const std::string& v : values) csv += Csv(v) + ",";
  csv += fmt::format("ideal,{},{:.4f},{:.4f},0,0,{:.1f},{:.4f},{:.4f},{:.2f},{}\n",
                     Csv(DescribeCandidate(baseline)), b->ideal_ms, b->ideal_ms,
                     b->tokens_per_s * b->iteration_ms / b->ideal_ms,
                     b->mfu * b->iteration_ms / b->ideal_ms, b->iteration_ms / b->ideal_ms,
                     memory_gib, fits);
  return csv;
}

// The grid of --study or --vary, with the fixed keys applied to the base flags.
Grid ReadGrid(const SweepFlags& flags) {
  Grid grid;
  if (!flags.study_path.empty()) {
    if (!flags.vary.empty()) Fail("sweep", "give --study or --vary, not both");
    Result<Study> study = LoadStudy(flags.study_path);
    if (!study.ok()) Fail("sweep", study.message());
    grid.axes = study->axes;
    grid.fixed = study->fixed;
  } else {
    if (flags.vary.empty() || flags.vary.size() > 2)
      Fail("sweep",
           "give one or two --vary KEY=V1,V2,... (keys: network_GBps, nvlink_GBps, "
           "nodes, node, seq_len, micro_batch, model, stack, precision), or --study S.yaml");
    for (const std::string& v : flags.vary) {
      Result<Axis> axis = ParseAxis(v);
      if (!axis.ok()) Fail("sweep", axis.message());
      grid.axes.push_back(*axis);
    }
  }
  const std::vector<Axis>& axes = grid.axes;
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (axes[i].key == axes[j].key) Fail("sweep", fmt::format("{} is varied twice", axes[i].key));
  // A flag that sets what the grid or the study's fixed: sets would be lost: said, not dropped.
  const PlanFlags& f = flags.plan;
  auto given = [&](const std::string& key) -> std::string {
    if (key == "model" && !f.model.empty()) return "--model " + f.model;
    if (key == "stack" && !f.stack.empty()) return "--stack " + f.stack;
    if (key == "precision" && !f.precision.empty()) return "--precision " + f.precision;
    if (key == "seq_len" && f.seq_len > 0) return fmt::format("--seq-len {}", f.seq_len);
    if (key == "micro_batch" && f.micro_batch > 0)
      return fmt::format("--micro-batch {}", f.micro_batch);
    return "";
  };
  for (const Axis& a : axes)
    if (std::string flag = given(a.key); !flag.empty())
      Fail("sweep", fmt::format("{} and {} set the same thing: give one", flag,
                                flags.study_path.empty()
                                    ? fmt::format("--vary {}=...", a.key)
                                    : fmt::format("{}'s grid.{}", flags.study_path, a.key)));
  for (const auto& [key, value] : grid.fixed)
    if (std::string flag = given(key); !flag.empty())
      Fail("sweep", fmt::format("{} and {}'s fixed.{} ({}) set the same thing: give one", flag,
                                flags.study_path, key, value));
  CheckOk("sweep", CheckOutputPath(flags.out_path, flags.force));
  {
    // The files the sweep reads: the study and plan, the flags' model, node and stack, and every
    // value of the grid that names a file (a varied model or node; a study's near it too).
    std::vector<std::string> inputs = {flags.study_path, flags.plan.plan_path, flags.plan.model,
                                       NodeFileOf(flags.plan.cluster), flags.plan.stack};
    auto add_value = [&](const std::string& value) {
      for (const std::string& path :
           {value, NodeFileOf(value), PathNear(value, flags.study_path)}) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) continue;
        inputs.push_back(path);
        // A varied node's GPU file.
        if (Result<NodeSpec> node = LoadNode(path); node.ok()) inputs.push_back(node->gpu.file);
      }
    };
    for (const Axis& a : axes)
      for (const std::string& value : a.values) add_value(value);
    for (const auto& [key, value] : grid.fixed) add_value(value);
    CheckUsage("sweep", CheckNotAnInput(flags.out_path, inputs));
  }
  grid.base = flags.plan;
  // Node counts and types vary the plan file's cluster when no --cluster replaces it.
  if (grid.base.cluster.empty() && !grid.base.plan_path.empty()) {
    Result<Plan> from = LoadPlan(grid.base.plan_path);
    if (!from.ok()) Fail("sweep", from.message());
    grid.base.cluster = from->cluster_ref;
  }
  // Otherwise the built-in plan's cluster (every other default is BuildPlan's, as for simulate).
  if (grid.base.cluster.empty()) grid.base.cluster = Plan().cluster_ref;

  // The node type first: a node count applies to it.
  std::stable_sort(grid.fixed.begin(), grid.fixed.end(), [](const auto& a, const auto& b) {
    return a.first == "node" && b.first != "node";
  });
  for (const auto& [key, value] : grid.fixed)
    CheckOk("sweep", ApplyToFlags(key, value, &grid.base));
  Result<size_t> points = CountSweepPoints(axes);
  if (!points.ok()) Fail("sweep", points.message());
  grid.points = *points;
  return grid;
}

void Run(const SweepFlags& flags) {
  const Grid grid = ReadGrid(flags);
  const size_t total = grid.points;
  std::string csv;
  for (const Axis& a : grid.axes) csv += a.key + ",";
  csv +=
      "strategy,plan,iteration_ms,ideal_ms,exposed_comm_ms,comm_share,tokens_per_s,mfu,"
      "speedup_vs_baseline,memory_gib,fits\n";
  // The points on --jobs threads, each point's search on its point's (the points fill them). A
  // point is skipped once a stop (signal, --timeout) came or an earlier point failed, so the
  // finished points are a prefix of the grid, as one by one, and the failure reported is the
  // first in the grid's order.
  const int threads = JobsThreads(flags.jobs);
  const auto start = std::chrono::steady_clock::now();
  auto timed_out = [&] {
    return flags.timeout_s > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
               flags.timeout_s;
  };
  std::vector<std::optional<Result<std::string>>> done(total);
  std::atomic<size_t> first_failure{total};
  std::atomic<int64_t> finished{0};
  std::mutex progress_mutex;
  CatchStopSignals();
  std::optional<Progress> progress(std::in_place, "sweep", "points", static_cast<int64_t>(total));
  ParallelFor(total, threads, [&](size_t point) {
    if (StopSignal() != 0 || timed_out() || point > first_failure) return;
    Result<std::string> rows = SweepPoint(grid, flags, point);
    if (!rows.ok())
      for (size_t seen = first_failure; point < seen;)
        if (first_failure.compare_exchange_weak(seen, point)) break;
    done[point].emplace(std::move(rows));
    const std::lock_guard<std::mutex> lock(progress_mutex);
    progress->Update(++finished);
  });
  progress.reset();
  size_t points_done = 0;
  for (; points_done < total && done[points_done]; ++points_done) {
    if (!done[points_done]->ok()) Fail("sweep", done[points_done]->message());
    csv += **done[points_done];
  }
  // A signal only sets a flag: the points under way finish, and the CSV keeps every finished one.
  if (const int signal = StopSignal(); signal != 0) {
    CheckOk("sweep", WriteFileAtomically(flags.out_path, csv, flags.force));
    Fail("sweep",
         fmt::format("stopped by {} after {} of {} points: {} holds those (partial)",
                     signal == SIGINT ? "SIGINT" : "SIGTERM", points_done, total, flags.out_path),
         128 + signal);
  }
  CheckOk("sweep", WriteFileAtomically(flags.out_path, csv, flags.force));
  if (points_done < total)
    std::cout << fmt::format("stopped at --timeout {:g} s after {} of {} points; ", flags.timeout_s,
                             points_done, total);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t used = std::min<size_t>(threads, total);  // ParallelFor's workers
  std::cout << fmt::format(
      "wrote {} ({} point{} in {:.2f} s on {} thread{}); plot it with tools/plot {}\n",
      flags.out_path, points_done, points_done == 1 ? "" : "s", seconds, used, used > 1 ? "s" : "",
      flags.out_path);
}

}  // namespace

void SetupSweep(CLI::App* sub) {
  auto flags = std::make_shared<SweepFlags>();
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--study", flags->study_path,
                  "study YAML: name, grid (key: [values]) and fixed (key: value)")
      ->check(NonEmpty());
  sub->add_option(
      "--vary", flags->vary,
      "KEY=V1,V2,... (once or twice): network_GBps, nvlink_GBps (per direction; NVLS busbw scales "
      "with it), nodes, "
      "node (node type), seq_len, micro_batch, model, stack (software stack), precision");
  sub->add_option("--out", flags->out_path, "CSV to write (required)")
      ->required()
      ->check(NonEmpty());
  AddBoolFlag(sub, "--force", &flags->force, "overwrite an existing --out file");
  sub->add_option(
         "--timeout", flags->timeout_s,
         "stop after this many seconds and write the points done so far (default: no limit)")
      ->check(PositiveFinite());
  AddJobsOption(sub, &flags->jobs, "threads that run the grid's points");
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
