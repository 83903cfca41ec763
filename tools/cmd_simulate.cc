// `domino simulate`: predict one plan (or compare strategies) and write its report and trace.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/base/file_io.h"
#include "planner/memory_model.h"
#include "sim/predict.h"
#include "sim/report.h"
#include "sim/trace.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/plan_flags.h"
#include "tools/prediction_text.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct SimulateFlags {
  PlanFlags plan;
  std::string positional_plan;
  std::string report_path, trace_path, iteration_trace_path, iteration_report_path;
  bool force = false;
  bool compare_strategies = false;
  bool ignore_memory = false;
  std::string profile_path;
  bool cuda_graphs = false;
  OutputFormat format = OutputFormat::kTable;
};

// The resolved plan beside its YAML keys: what `Describe` says in its header lines.
Json ResolvedJson(const Plan& p) {
  return Json{{"model", p.model.name},          {"cluster", p.cluster.name},
              {"gpus", p.cluster.total_gpus()}, {"gpu", p.cluster.node.gpu.name},
              {"stack", p.stack.name},          {"micro_batches", p.micro_batches()}};
}

// What a hardware profile priced in a prediction: the compute ops of one micro-batch (stage 0's
// first chunk) and how many of them it measured; the models price the rest.
struct ProfileUse {
  std::string path, device, backend;
  int ops = 0, measured = 0;
};

ProfileUse UseOf(const std::string& path, const HardwareProfile& profile, const Plan& plan,
                 const Schedule& schedule) {
  ProfileUse use{path, profile.device, profile.backend};
  for (const Op& op : schedule.ops()) {
    if (op.kind != OpKind::kGemm && op.kind != OpKind::kAttention &&
        op.kind != OpKind::kElementwise)
      continue;
    ++use.ops;
    if (profile.Lookup(op, plan.tp) >= 0) ++use.measured;
  }
  return use;
}

// A profile that prices nothing of the plan, or was measured on another GPU than the plan's,
// gives a prediction the user did not ask for: one warning line each.
void WarnAboutProfile(const ProfileUse& use, const Plan& plan) {
  if (use.ops > 0 && use.measured == 0)
    std::cerr << fmt::format(
        "domino simulate: warning: {} measured none of this plan's {} compute ops (a profile of "
        "another model or plan?): the models price them all\n",
        use.path, use.ops);
  // The catalog's GPU names its family first ("h100-sxm"); CUDA's device name holds it ("NVIDIA
  // H100 80GB HBM3").
  std::string family = plan.cluster.node.gpu.name.substr(0, plan.cluster.node.gpu.name.find('-'));
  std::string device = use.device;
  for (std::string* text : {&family, &device})
    std::transform(text->begin(), text->end(), text->begin(),
                   [](unsigned char c) { return std::tolower(c); });
  if (use.backend == "cuda" && !family.empty() && device.find(family) == std::string::npos)
    std::cerr << fmt::format(
        "domino simulate: warning: {} was measured on {}, and the plan's GPU is {}: its op "
        "times price a GPU they were not measured on\n",
        use.path, use.device, plan.cluster.node.gpu.name);
}

Json PredictionJson(const Plan& plan, const sim::Prediction& p,
                    const std::optional<ProfileUse>& profile) {
  Json document = JsonDocument("simulate");
  document["mode"] = "predict";
  document["plan"] = PlanJson(plan);
  document["resolved"] = ResolvedJson(plan);
  document["predicted"] = FiguresJson(p.figures);
  document["mfu_full_attention"] = p.mfu_full_attention;
  document["tp_comm_ms"] = p.tp_comm_ms;
  document["cp_comm_ms"] = p.cp_comm_ms;
  document["dp_comm_ms"] = p.dp_comm_ms;
  document["serial_ms"] = p.serial_ms;
  document["gemm_duty"] = p.gemm_duty;
  document["tensor_clock"] = p.tensor_clock;
  document["ops_per_micro_batch"] = p.schedule.size();
  Json busy;
  for (int c = 0; c < sim::kOpClassCount; ++c)
    busy[std::string(sim::OpClassName(static_cast<sim::OpClass>(c)))] = p.busy_ms[c];
  document["busy_ms"] = std::move(busy);
  const sim::IterationBreakdown& b = p.breakdown;
  document["breakdown"] = {{"critical_stage", b.critical_stage}, {"compute_ms", b.compute_ms},
                           {"exposed_tp_ms", b.exposed_tp_ms},   {"bubble_ms", b.bubble_ms},
                           {"exposed_pp_ms", b.exposed_pp_ms},   {"exposed_dp_ms", b.exposed_dp_ms},
                           {"optimizer_ms", b.optimizer_ms}};
  if (profile)
    document["hardware_profile"] = {{"path", profile->path},
                                    {"device", profile->device},
                                    {"backend", profile->backend},
                                    {"ops", profile->ops},
                                    {"ops_measured", profile->measured}};
  return document;
}

struct Strategy {
  const char* name;
  bool sp;
  int p, q;
  OverlapScope scope;
  OverlapMethod method = OverlapMethod::kDomino;
  int chunks = 0;  // decomposed overlap: 0 = tp
  // All-gather parts on copy engines whatever the plan or stack says: Transformer Engine's ring
  // exchange (use_ce in its default userbuffers config) and async TP's symmetric-memory
  // all-gather do.
  bool copy_engine = false;
};

void CompareStrategies(const Plan& base, const sim::CostOptions& options, OutputFormat format) {
  static const Strategy kStrategies[] = {
      {"baseline (Megatron)", false, 1, 1, OverlapScope::kNone},
      {"sequence parallel", true, 1, 1, OverlapScope::kNone},
      {"row p=2 (DeepSpeed-Domino)", false, 2, 1, OverlapScope::kInterLayer},
      {"row p=4", false, 4, 1, OverlapScope::kInterLayer},
      {"row p=8", false, 8, 1, OverlapScope::kInterLayer},
      {"row p=2 intra-layer", false, 2, 1, OverlapScope::kIntraLayer},
      {"column q=2", false, 1, 2, OverlapScope::kIntraLayer},
      {"column q=4", false, 1, 4, OverlapScope::kIntraLayer},
      {"2D p=2 q=2", false, 2, 2, OverlapScope::kInterLayer},
      {"2D p=4 q=2", false, 4, 2, OverlapScope::kInterLayer},
      {"SP + row p=2", true, 2, 1, OverlapScope::kInterLayer},
      {"decomposed c=tp (TE, async TP)", true, 1, 1, OverlapScope::kNone,
       OverlapMethod::kDecomposed, 0, true},
      {"decomposed c=2", true, 1, 1, OverlapScope::kNone, OverlapMethod::kDecomposed, 2},
      {"decomposed c=4", true, 1, 1, OverlapScope::kNone, OverlapMethod::kDecomposed, 4},
      {"both p=2 c=2", true, 2, 1, OverlapScope::kInterLayer, OverlapMethod::kBoth, 2},
  };
  Table table({"strategy", "iteration ms", "exposed ms", "comm share", "hidden", "tokens/s", "MFU",
               "vs baseline"});
  Json rows = Json::array(), skipped_json = Json::array();
  double baseline_ms = 0, ideal_ms = 0;
  std::vector<std::string> skipped;
  for (const Strategy& s : kStrategies) {
    Plan plan = base;
    plan.sequence_parallel = s.sp;
    plan.row_split = s.p;
    plan.col_split = s.q;
    plan.scope = s.scope;
    plan.method = s.method;
    plan.chunks = s.chunks;
    plan.rs_chunks = s.method == OverlapMethod::kDomino ? 0 : base.rs_chunks;
    plan.copy_engine = s.method == OverlapMethod::kDomino ? std::nullopt
                       : s.copy_engine                    ? std::optional<bool>(true)
                                                          : base.copy_engine;
    if (auto failure = CheckPlanRules(plan)) {
      skipped.push_back(fmt::format("{}: {}", s.name, failure->rule));
      skipped_json.push_back(
          {{"strategy", s.name}, {"key", failure->key}, {"rule", failure->rule}});
      continue;
    }
    Result<sim::Prediction> p = sim::Predict(plan, options);
    if (!p.ok()) Fail("simulate", p.message());
    const PlanFigures& f = p->figures;
    if (baseline_ms == 0) baseline_ms = f.iteration_ms, ideal_ms = f.ideal_ms;
    table.AddRow({s.name, fmt::format("{:.2f}", f.iteration_ms),
                  fmt::format("{:.2f}", f.exposed_comm_ms),
                  fmt::format("{:.1f}%", 100 * f.exposed_comm_ms / f.iteration_ms),
                  fmt::format("{:.1f}%", 100 * f.hidden_comm_fraction),
                  fmt::format("{:.0f}", f.tokens_per_s), fmt::format("{:.1f}%", 100 * f.mfu),
                  fmt::format("{:.3f}x", baseline_ms / f.iteration_ms)});
    rows.push_back({{"strategy", s.name},
                    {"plan", PlanJson(plan)},
                    {"predicted", FiguresJson(f)},
                    {"comm_share", f.exposed_comm_ms / f.iteration_ms},
                    {"speedup_vs_baseline", baseline_ms / f.iteration_ms}});
  }
  if (format == OutputFormat::kJson) {
    Json document = JsonDocument("simulate");
    document["mode"] = "compare_strategies";
    document["plan"] = PlanJson(base);
    document["resolved"] = ResolvedJson(base);
    document["strategies"] = std::move(rows);
    document["baseline_ideal_ms"] = ideal_ms > 0 ? Json(ideal_ms) : Json(nullptr);
    document["ideal_speedup_vs_baseline"] =
        ideal_ms > 0 ? Json(baseline_ms / ideal_ms) : Json(nullptr);
    document["skipped"] = std::move(skipped_json);
    PrintJson(document, std::cout);
    return;
  }
  std::cout << Describe(base) << "\n";
  table.Print(std::cout);
  if (ideal_ms > 0)
    std::cout << fmt::format(
        "\nideal (baseline schedule, TP comm free): {:.2f} ms = {:.3f}x over the baseline\n",
        ideal_ms, baseline_ms / ideal_ms);
  for (const std::string& line : skipped) std::cout << "skipped " << line << "\n";
}

void Run(SimulateFlags& flags) {
  if (const std::string& path = flags.positional_plan; !path.empty()) {
    if (!flags.plan.plan_path.empty() && flags.plan.plan_path != path)
      Fail("simulate", "give the plan once: as PLAN or as --plan, not both");
    // A word that names no file and looks like no path is most often a value given to a switch.
    const bool path_like =
        path.ends_with(".yaml") || path.ends_with(".yml") || path.find('/') != std::string::npos;
    if (!path_like && !std::filesystem::exists(path))
      Fail("simulate",
           fmt::format("{}: no such plan file (a switch takes no value: --sp, --no-sp or "
                       "--sp=false)",
                       path),
           kExitUsage);
    flags.plan.plan_path = path;
  }
  std::vector<std::string> output_paths;
  for (const std::string* path : {&flags.report_path, &flags.trace_path,
                                  &flags.iteration_trace_path, &flags.iteration_report_path})
    if (!path->empty()) output_paths.push_back(*path);
  CheckUsage("simulate", CheckDistinctOutputs(output_paths));
  if (flags.format == OutputFormat::kJson &&
      std::find(output_paths.begin(), output_paths.end(), "-") != output_paths.end())
    Fail("simulate",
         "--format json prints its document on stdout: write the report or trace to a file",
         kExitUsage);
  Result<Plan> plan = BuildPlan(flags.plan);
  if (!plan.ok()) Fail("simulate", plan.message());
  // Fail fast on an output that cannot be written; they are written together at the end.
  for (const std::string* path : {&flags.report_path, &flags.trace_path,
                                  &flags.iteration_trace_path, &flags.iteration_report_path})
    if (!path->empty()) CheckOk("simulate", CheckOutputPath(*path, flags.force));
  // A report is a plan file with its prediction, so it may replace the plan it predicts
  // (--force), not its model, node or stack file nor the hardware profile; a trace replaces none.
  {
    std::vector<std::string> inputs = PlanInputFiles(flags.plan, *plan);
    std::vector<std::string> not_the_plan = PlanInputFiles(flags.plan, *plan, false);
    for (auto* files : {&inputs, &not_the_plan})
      if (!flags.profile_path.empty()) files->push_back(flags.profile_path);
    for (const std::string* path : {&flags.report_path, &flags.iteration_report_path})
      CheckUsage("simulate", CheckNotAnInput(*path, not_the_plan));
    for (const std::string* path : {&flags.trace_path, &flags.iteration_trace_path})
      CheckUsage("simulate", CheckNotAnInput(*path, inputs));
  }
  sim::CostOptions options;
  HardwareProfile profile;
  if (!flags.profile_path.empty()) {
    Result<HardwareProfile> loaded = LoadProfile(flags.profile_path);
    if (!loaded.ok()) Fail("simulate", loaded.message());
    profile = std::move(loaded).value();
    options.profile = &profile;
  }
  // Recorded in the plan, so that a report written here predicts the same when read back.
  if (flags.cuda_graphs) plan->cuda_graphs = true;
  if (flags.compare_strategies) {
    if (!flags.report_path.empty() || !flags.trace_path.empty() ||
        !flags.iteration_trace_path.empty() || !flags.iteration_report_path.empty())
      Fail("simulate",
           "--compare-strategies writes no report or trace; drop --report/--trace/"
           "--trace-iteration/--report-iteration");
    CompareStrategies(*plan, options, flags.format);
    return;
  }
  Result<sim::Prediction> prediction = sim::Predict(*plan, options);
  if (!prediction.ok()) Fail("simulate", prediction.message());
  std::optional<ProfileUse> profile_use;
  if (options.profile != nullptr) {
    profile_use = UseOf(flags.profile_path, profile, *plan, prediction->schedule);
    WarnAboutProfile(*profile_use, *plan);
  }
  if (!flags.ignore_memory) {
    const MemoryEstimate mem = EstimateMemory(*plan);
    const double capacity_gib = plan->cluster.node.gpu.memory_gib();
    const double gib = 1.0 / (1 << 30);
    if (mem.total_bytes() * gib > capacity_gib)
      Fail("simulate",
           fmt::format(
               "{}: does not fit at seq {} and micro-batch {}: {:.1f} GiB per GPU on the most "
               "loaded stage (weights, gradients "
               "and optimizer {:.1f} GiB + activations {:.1f} GiB{}{} + CUDA context {:.1f} GiB) "
               "exceeds the {}'s {:.1f} "
               "GiB; use recompute, sequence parallelism, a larger tp or pp, the distributed "
               "optimizer or a smaller micro-batch (or --ignore-memory)",
               flags.plan.plan_path.empty() ? "the plan" : flags.plan.plan_path, plan->seq_len,
               plan->micro_batch, mem.total_bytes() * gib, mem.weights_and_optimizer_bytes * gib,
               mem.activation_bytes * gib,
               mem.output_bytes > 0
                   ? fmt::format(" + LM head input and logits {:.1f} GiB", mem.output_bytes * gib)
                   : "",
               mem.comm_buffer_bytes > 0
                   ? fmt::format(" + communication buffers {:.1f} GiB", mem.comm_buffer_bytes * gib)
                   : "",
               mem.cuda_context_bytes * gib, plan->cluster.node.gpu.name, capacity_gib));
  }
  // Every output or none, before the table: a bad path leaves nothing behind. An output on
  // stdout ("-") sends the table to stderr, so that stdout holds only the document.
  Plan report = *plan;
  report.predicted = prediction->figures;
  std::vector<OutputFile> outputs;
  if (!flags.report_path.empty())
    outputs.push_back({flags.report_path,
                       sim::ReportYaml(report, sim::ReportKind::kSimulate, "domino simulate report",
                                       prediction->schedule, prediction->timeline)});
  if (!flags.trace_path.empty())
    outputs.push_back(
        {flags.trace_path, sim::TraceJson(prediction->schedule, prediction->timeline)});
  if (!flags.iteration_report_path.empty())
    outputs.push_back({flags.iteration_report_path,
                       sim::ReportYaml(report, sim::ReportKind::kSimulateIteration,
                                       "domino simulate report (whole iteration)",
                                       prediction->iteration, prediction->iteration_timeline)});
  if (!flags.iteration_trace_path.empty())
    outputs.push_back({flags.iteration_trace_path,
                       sim::TraceJson(prediction->iteration, prediction->iteration_timeline)});
  CheckOk("simulate", WriteFilesAtomically(outputs, flags.force));
  if (flags.format == OutputFormat::kJson) {
    PrintJson(PredictionJson(*plan, *prediction, profile_use), std::cout);
    return;
  }
  const bool document_on_stdout = flags.report_path == "-" || flags.trace_path == "-" ||
                                  flags.iteration_trace_path == "-" ||
                                  flags.iteration_report_path == "-";
  std::ostream& out = document_on_stdout ? std::cerr : std::cout;
  if (profile_use)
    out << fmt::format(
        "# op times from {} (measured on {}, {} backend): {} of the {} compute ops of a "
        "micro-batch; the models price the rest\n",
        profile_use->path, profile_use->device, profile_use->backend, profile_use->measured,
        profile_use->ops);
  PrintPrediction(*plan, *prediction, out);
}

}  // namespace

void SetupSimulate(CLI::App* sub) {
  auto flags = std::make_shared<SimulateFlags>();
  sub->add_option("plan_file", flags->positional_plan,
                  "plan or report YAML to start from (as --plan; flags override its values)")
      ->check(NonEmpty());
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--report", flags->report_path,
                  "write the plan with its predicted: block (YAML; - for stdout, the table then "
                  "goes to stderr)")
      ->check(NonEmpty());
  sub->add_option("--trace", flags->trace_path,
                  "write the predicted timeline of one micro-batch through stage 0's first chunk, "
                  "op by op (Perfetto/Chrome JSON; - for stdout)")
      ->check(NonEmpty());
  sub->add_option("--trace-iteration", flags->iteration_trace_path,
                  "write the predicted whole iteration: every pipeline stage's passes, pipeline "
                  "sends and recvs, DP buckets, parameter gathers and optimizer step on their "
                  "streams (Perfetto/Chrome JSON; - for stdout)")
      ->check(NonEmpty());
  sub->add_option("--report-iteration", flags->iteration_report_path,
                  "write the plan with its predicted: block and the whole iteration's timeline "
                  "(every stage's passes, pipeline transfers, DP buckets and optimizer step; YAML, "
                  "- for stdout), for `domino compare` with `execute --extent step --report`")
      ->check(NonEmpty());
  AddBoolFlag(sub, "--force", &flags->force, "overwrite existing output files");
  AddBoolFlag(sub, "--compare-strategies", &flags->compare_strategies,
              "simulate baseline, SP, row, column and 2D splits side by side");
  AddBoolFlag(sub, "--cuda-graphs", &flags->cuda_graphs,
              "launch kernels from CUDA graphs (default: the plan's training.cuda_graphs, else "
              "as its stack does); a --report records it");
  sub->add_option("--hardware-profile", flags->profile_path,
                  "measured op times from `domino calibrate` (ops it lacks use the models)")
      ->check(NonEmpty());
  AddBoolFlag(sub, "--ignore-memory", &flags->ignore_memory,
              "predict even a plan that does not fit in GPU memory");
  AddFormatOption(sub, &flags->format);
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
