// `domino plan`: search the plan space for the fastest plan and write it as YAML.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <utility>
#include <vector>

#include "models/base/file_io.h"
#include "planner/search.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/plan_flags.h"
#include "tools/prediction_text.h"
#include "tools/simulator_evaluator.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct PlanCommandFlags {
  PlanFlags plan;
  std::string out_path;
  std::string strategy;  // empty: --method's, else "any"
  std::string fix;
  std::string objective = "throughput";
  int top = 5;
  bool force = false;
  bool explain = false;
  bool exhaustive = false;
  double timeout_s = 0;
  double memory_headroom_gib = 0;
  int jobs = 0;  // 0: JobsThreads' default
  OutputFormat format = OutputFormat::kTable;
};

// The --fix keys, each with the plan flag that pins the same dimension.
constexpr std::pair<const char*, const char*> kFixKeys[] = {
    {"tp", "--tp"},
    {"cp", "--cp"},
    {"pp", "--pp"},
    {"dp", "--dp"},
    {"v", "--virtual-stages"},
    {"mb", "--micro-batch"},
    {"sp", "--sp"},
    {"distopt", "--distributed-optimizer"},
    {"fsdp", "--fsdp"},
    {"recompute", "--recompute"},
    {"p", "--row-split"},
    {"q", "--col-split"},
    {"scope", "--scope"},
};

// A dimension pinned twice (tp=8,tp=4, or --fix tp=8 with --tp 4) is an error, not a silent
// choice of one.
Status CheckPins(const PlanCommandFlags& flags) {
  const PlanFlags& f = flags.plan;
  auto flag_given = [&](std::string_view key) {
    if (key == "tp") return f.tp > 0;
    if (key == "cp") return f.cp > 0;
    if (key == "pp") return f.pp > 0;
    if (key == "dp") return f.dp > 0;
    if (key == "v") return f.virtual_stages > 0;
    if (key == "mb") return f.micro_batch > 0;
    if (key == "p") return f.row_split > 0;
    if (key == "q") return f.col_split > 0;
    if (key == "sp") return !f.sequence_parallel.empty();
    if (key == "distopt") return !f.distributed_optimizer.empty();
    if (key == "fsdp") return !f.fsdp.empty();
    if (key == "recompute") return !f.recompute.empty();
    return key == "scope" && !f.scope.empty();
  };
  std::vector<std::string> seen;
  size_t start = 0;
  const std::string& fix = flags.fix;
  while (start < fix.size()) {
    size_t end = std::min(fix.find(',', start), fix.size());
    const std::string item = fix.substr(start, end - start);
    start = end + 1;
    const std::string key = item.substr(0, item.find('='));
    if (item.empty() || key.size() == item.size()) continue;  // ApplyFix words these
    for (const std::string& other : seen)
      if (other == key) return Error(fmt::format("--fix: {} is pinned twice", key));
    seen.push_back(key);
    for (const auto& [fix_key, flag] : kFixKeys)
      if (key == fix_key && flag_given(key))
        return Error(fmt::format("--fix {} and {} pin the same dimension: give one", item, flag));
  }
  return Status::Ok();
}

// Plan flags given on the command line pin their dimension, as --fix does.
Result<SearchSpace> SpaceFor(const PlanCommandFlags& flags) {
  DOMINO_RETURN_IF_ERROR(CheckPins(flags));
  SearchSpace space;
  const PlanFlags& f = flags.plan;
  space.tp = f.tp, space.cp = f.cp, space.pp = f.pp, space.dp = f.dp;
  space.virtual_stages = f.virtual_stages;
  space.micro_batch = f.micro_batch;
  for (const auto& [name, comm] : CpCommNames())
    if (f.cp_comm == name) space.cp_comm = comm;
  space.cp_a2a = f.cp_a2a;
  if (f.row_split > 0) space.row_splits = {f.row_split};
  if (f.col_split > 0) space.col_splits = {f.col_split};
  std::string fix;
  // A switch's value as --fix spells it (the switch took 1/0 and yes/no too).
  auto pin = [&fix](std::string_view key, const std::string& text) {
    bool on = false;
    if (!text.empty() && ParseBoolFlag(text, &on))
      fix += fmt::format(",{}={}", key, on ? "true" : "false");
  };
  pin("sp", f.sequence_parallel);
  pin("distopt", f.distributed_optimizer);
  pin("fsdp", f.fsdp);
  if (!f.recompute.empty()) fix += ",recompute=" + f.recompute;
  if (!f.scope.empty()) fix += ",scope=" + f.scope;
  if (!fix.empty()) DOMINO_RETURN_IF_ERROR(ApplyFix(fix.substr(1), &space));
  if (!flags.fix.empty()) DOMINO_RETURN_IF_ERROR(ApplyFix(flags.fix, &space));
  // --method alone searches that method as --strategy does; with --strategy, it must be one the
  // strategy searches.
  const std::string strategy = !flags.strategy.empty()                    ? flags.strategy
                               : f.method.empty() || f.method == "domino" ? "any"
                                                                          : f.method;
  if (Status status = ApplyStrategy(strategy, &space); !status.ok()) {
    // Said of the flag given.
    std::string message = status.message();
    if (flags.strategy.empty() && message.starts_with("--strategy "))
      message.replace(0, 10, "--method");
    return Error(message);
  }
  if (!f.method.empty()) {
    std::erase_if(space.methods, [&](OverlapMethod m) { return MethodName(m) != f.method; });
    if (space.methods.empty())
      return Error(fmt::format("--method {} contradicts --strategy {}, which searches {}", f.method,
                               strategy, strategy == "all" ? "every method" : "other methods"));
  }
  if (f.chunks > 0) {
    if (std::ranges::none_of(space.methods,
                             [](OverlapMethod m) { return m != OverlapMethod::kDomino; }))
      return Error(fmt::format(
          "--chunks {} cuts decomposed overlap's collectives: give --method decomposed or both, "
          "or --strategy decomposed, both or all",
          f.chunks));
    space.chunk_counts = {f.chunks};
  }
  space.prune = !flags.exhaustive;
  space.timeout_s = flags.timeout_s;
  space.threads = JobsThreads(flags.jobs);
  space.memory_headroom_bytes = flags.memory_headroom_gib * (1 << 30);
  return space;
}

bool SameOuter(const Plan& a, const Plan& b) {
  return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp && a.dp == b.dp &&
         a.virtual_stages == b.virtual_stages && a.micro_batch == b.micro_batch &&
         a.sequence_parallel == b.sequence_parallel &&
         a.distributed_optimizer == b.distributed_optimizer && a.fsdp == b.fsdp &&
         a.recompute == b.recompute && a.cp_communication() == b.cp_communication();
}

std::string FiguresFlow(const Candidate& c) {
  return fmt::format("{{plan: \"{}\", iteration_ms: {:.4f}, tokens_per_s: {:.1f}, mfu: {:.4f}}}",
                     DescribeCandidate(c.plan), c.figures.iteration_ms, c.figures.tokens_per_s,
                     c.figures.mfu);
}

// The gain of one Domino dimension over the Megatron baseline with the same degrees: the
// baseline's iteration time over that of the best plan using only this dimension.
struct DimensionGain {
  const char* name;
  double gain;
  const Candidate* top;
};

std::vector<DimensionGain> GainsOver(const Candidate& baseline, const Plan& best,
                                     const std::vector<Candidate>& ranked) {
  struct Dimension {
    const char* name;
    bool (*uses)(const Plan&);
  };
  const Dimension dimensions[] = {
      {"row",
       [](const Plan& p) {
         return p.row_split > 1 && p.col_split == 1 && p.method == OverlapMethod::kDomino;
       }},
      {"col", [](const Plan& p) { return p.row_split == 1 && p.col_split > 1; }},
      {"2d", [](const Plan& p) { return p.row_split > 1 && p.col_split > 1; }},
      {"inter_layer", [](const Plan& p) { return p.scope == OverlapScope::kInterLayer; }},
      {"decomposed", [](const Plan& p) { return p.method == OverlapMethod::kDecomposed; }},
      {"both", [](const Plan& p) { return p.method == OverlapMethod::kBoth; }},
  };
  std::vector<DimensionGain> gains;
  for (const Dimension& d : dimensions) {
    const Candidate* top = nullptr;
    for (const Candidate& c : ranked)
      if (SameOuter(c.plan, best) && d.uses(c.plan) && !top) top = &c;
    if (top)
      gains.push_back({d.name, baseline.figures.iteration_ms / top->figures.iteration_ms, top});
  }
  return gains;
}

// The default search leaves decomposed collective-matmul overlap out (--strategy all adds it, at
// several times the search's cost). Where it picked a plan with tensor parallelism on a stack that
// runs decomposed overlap (StackSpec::decomposed_overlap), the best plan with its degrees under
// decomposed overlap (sequence parallelism, each chunk count): one small search of the same rules
// and memory, kept where it is faster.
std::optional<Candidate> DecomposedAtBestDegrees(const Plan& base, const SearchSpace& searched,
                                                 const Plan& best, Evaluator& evaluator,
                                                 Objective objective) {
  if (best.tp < 2 || !best.stack.decomposed_overlap ||
      searched.methods != std::vector<OverlapMethod>{OverlapMethod::kDomino} ||
      searched.sequence_parallel == false)
    return std::nullopt;
  SearchSpace space = searched;
  space.tp = best.tp;
  space.cp = best.cp;
  space.pp = best.pp;
  space.dp = best.dp;
  space.virtual_stages = best.virtual_stages;
  space.micro_batch = best.micro_batch;
  space.distributed_optimizer = best.distributed_optimizer;
  space.fsdp = best.fsdp;
  // Recompute stays the search's (the lightest that fits): userbuffers may need more.
  if (best.cp > 1) space.cp_comm = best.cp_comm;
  space.timeout_s = 0;
  if (!ApplyStrategy("decomposed", &space).ok()) return std::nullopt;
  Result<SearchResult> result = SearchPlans(base, space, evaluator, objective);
  // A search stopped by a signal says nothing about the best: no hint.
  if (!result.ok() || result->ranked.empty() || result->stopped) return std::nullopt;
  return result->ranked.front();
}

// The chosen plan as YAML, with its predicted: block and the search: block.
std::string PlanYaml(const PlanCommandFlags& flags, const SearchResult& result,
                     const Candidate* baseline, const std::vector<DimensionGain>& gains,
                     const std::string& stopped_by) {
  const Candidate& best = result.ranked.front();
  Plan chosen = best.plan;
  chosen.predicted = best.figures;
  std::string yaml = PlanToYaml(chosen, "domino plan: the best of the plans searched");
  yaml += fmt::format("search:\n  objective: {}\n  evaluated: {}\n  rejected: {}\n  pruned: {}\n",
                      flags.objective, result.evaluated, result.rejected, result.pruned);
  if (result.timed_out) yaml += fmt::format("  stopped_at_timeout_s: {:g}\n", flags.timeout_s);
  if (flags.memory_headroom_gib > 0)
    yaml += fmt::format("  memory_headroom_gib: {:g}\n", flags.memory_headroom_gib);
  if (result.stopped) yaml += fmt::format("  stopped_by: {}  # partial\n", stopped_by);
  if (baseline) {
    yaml += "  baseline: " + FiguresFlow(*baseline) + "\n";
    if (!gains.empty()) {
      yaml += "  gains:  # over the baseline, best plan using only this dimension\n";
      for (const DimensionGain& g : gains) yaml += fmt::format("    {}: {:.4f}\n", g.name, g.gain);
    }
  }
  // --top plans in all, the chosen one first: as many as the table and the JSON show.
  const int runners_up = std::min(flags.top, static_cast<int>(result.ranked.size())) - 1;
  yaml += runners_up > 0 ? "  runners_up:\n" : "  runners_up: []\n";
  for (int i = 1; i <= runners_up; ++i) yaml += "    - " + FiguresFlow(result.ranked[i]) + "\n";
  return yaml;
}

Json CandidateJson(const Candidate& c) {
  return Json{{"description", DescribeCandidate(c.plan)},
              {"plan", PlanJson(c.plan)},
              {"predicted", FiguresJson(c.figures)}};
}

// The search as one JSON document (docs/json.md, domino.plan/1).
Json PlanDocument(const PlanCommandFlags& flags, const Plan& base, const SearchResult& result,
                  const Candidate* baseline, const std::vector<DimensionGain>& gains,
                  const std::optional<Candidate>& decomposed, double seconds,
                  const std::string& stopped_by) {
  Json document = JsonDocument("plan");
  document["problem"] = {{"model", base.model.name},
                         {"cluster", base.cluster.name},
                         {"gpus", base.cluster.total_gpus()},
                         {"seq_len", base.seq_len},
                         {"global_batch", base.global_batch}};
  const Candidate& best = result.ranked.front();
  document["plan"] = PlanJson(best.plan);
  document["predicted"] = FiguresJson(best.figures);
  document["description"] = DescribeCandidate(best.plan);
  Json search{{"objective", flags.objective},
              {"evaluated", result.evaluated},
              {"rejected", result.rejected},
              {"pruned", result.pruned},
              {"seconds", seconds},
              {"plans_per_s", result.evaluated / std::max(seconds, 1e-9)},
              {"exhaustive", flags.exhaustive},
              {"timed_out", result.timed_out},
              {"stopped_at_timeout_s", result.timed_out ? Json(flags.timeout_s) : Json(nullptr)},
              {"memory_headroom_gib", flags.memory_headroom_gib},
              {"stopped_by", result.stopped ? Json(stopped_by) : Json(nullptr)},
              {"partial", result.timed_out || result.stopped}};
  document["search"] = std::move(search);
  Json top = Json::array();
  for (int i = 0; i < flags.top && i < static_cast<int>(result.ranked.size()); ++i) {
    Json entry{{"rank", i + 1}};
    entry.update(CandidateJson(result.ranked[i]));
    top.push_back(std::move(entry));
  }
  document["top"] = std::move(top);
  document["baseline"] = baseline ? CandidateJson(*baseline) : Json(nullptr);
  Json gains_json = Json::array();
  for (const DimensionGain& g : gains)
    gains_json.push_back(
        {{"dimension", g.name}, {"gain", g.gain}, {"best", CandidateJson(*g.top)}});
  document["gains"] = std::move(gains_json);
  Json decomposed_json = nullptr;
  if (decomposed) {
    decomposed_json = {{"gain", best.figures.iteration_ms / decomposed->figures.iteration_ms}};
    decomposed_json.update(CandidateJson(*decomposed));
  }
  document["decomposed"] = std::move(decomposed_json);
  if (flags.explain) document["rejections"] = result.rejections;
  return document;
}

void Run(const PlanCommandFlags& flags) {
  if (flags.format == OutputFormat::kJson && flags.out_path == "-")
    Fail("plan", "--format json prints its document on stdout: give --out a file, not -",
         kExitUsage);
  Result<SearchSpace> space = SpaceFor(flags);
  if (!space.ok()) Fail("plan", space.message());
  // Flags describe the base plan; the defaults of the built-in plan must not pin anything.
  PlanFlags base_flags = flags.plan;
  base_flags.tp = base_flags.cp = base_flags.pp = base_flags.dp = base_flags.virtual_stages = 0;
  base_flags.cp_comm.clear();  // the search's (SearchSpace::cp_comm, cp_a2a)
  base_flags.cp_a2a = 0;
  // The global batch defaults to one micro-batch per DP rank, as for `simulate`: the micro-batch
  // and dp pinned by a flag or by --fix count alike.
  if (base_flags.micro_batch == 0) base_flags.micro_batch = space->micro_batch;
  if (base_flags.global_batch == 0 && space->dp > 0)
    base_flags.global_batch = DefaultGlobalBatch(
        base_flags.micro_batch > 0 ? base_flags.micro_batch : Plan().micro_batch, space->dp);
  // The starting point only names the model, cluster, batch and precision: its degrees may
  // break rules the search varies anyway.
  Result<Plan> base = BuildPlan(base_flags, /*check_rules=*/false);
  if (!base.ok()) Fail("plan", base.message());
  // What no degree changes (the precision the GPU runs, an fp8 recipe's precision, a softmax for
  // flash attention) is said once, not as the reason every candidate was rejected.
  if (std::optional<PlanRuleFailure> failure = CheckPlanWideRules(*base))
    Fail("plan", fmt::format("{}: {}", failure->key, failure->rule));
  if (!flags.out_path.empty()) {
    CheckOk("plan", CheckOutputPath(flags.out_path, flags.force));
    // The plan names its model, node and stack files: writing it over one of them loses it.
    CheckUsage("plan", CheckNotAnInput(flags.out_path, PlanInputFiles(flags.plan, *base)));
  }
  // A pinned degree must divide the GPUs, else nothing is left to search: say which.
  const int gpus = base->cluster.total_gpus();
  for (const auto& [name, degree] : {std::pair<const char*, int>{"tp", space->tp},
                                     {"cp", space->cp},
                                     {"pp", space->pp},
                                     {"dp", space->dp}})
    if (degree > 0 && gpus % degree != 0)
      Fail("plan", fmt::format("{} pinned to {}: it must divide the cluster's {} GPUs", name,
                               degree, gpus));
  const Objective objective =
      flags.objective == "time" ? Objective::kIterationTime : Objective::kThroughput;
  SimulatorEvaluator evaluator;
  std::optional<Progress> bar;
  auto progress = [&bar](int done, int total) {
    if (!bar) bar.emplace("plan", "configurations", total);
    bar->Update(done);
  };
  // SIGINT and SIGTERM stop the search between configurations; the best plan found so far is
  // kept, marked as such, and the exit code is 128 + the signal, as for `domino sweep`.
  CatchStopSignals();
  space->stop = [] { return StopSignal() != 0; };
  const auto start = std::chrono::steady_clock::now();
  Result<SearchResult> result = SearchPlans(*base, *space, evaluator, objective, progress);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.reset();
  if (!result.ok()) Fail("plan", result.message());
  const int signal = StopSignal();
  const std::string stopped_by = signal == SIGINT ? "SIGINT" : "SIGTERM";
  if (result->ranked.empty() && result->stopped)
    Fail("plan",
         fmt::format("stopped by {} before any plan was found: nothing written", stopped_by),
         128 + signal);
  if (result->NoPlanFits()) {
    // --explain's list is most wanted here: every candidate and the rule it broke, on stderr
    // before the one-line verdict.
    if (flags.explain) {
      std::cerr << "rejected:\n";
      for (const std::string& line : result->rejections) std::cerr << "  " << line << "\n";
    }
    Fail("plan", NoPlanFitsMessage(*result), kExitNoPlanFits);
  }
  const Candidate& best = result->ranked.front();
  // The Megatron baseline with the same degrees and memory options as the best plan.
  const Candidate* baseline = nullptr;
  for (const Candidate& c : result->ranked)
    if (SameOuter(c.plan, best.plan) && c.plan.is_baseline() &&
        c.plan.method == OverlapMethod::kDomino)
      baseline = &c;

  // Gain of each Domino dimension over that baseline: the best plan using only it.
  const std::vector<DimensionGain> gains =
      baseline ? GainsOver(*baseline, best.plan, result->ranked) : std::vector<DimensionGain>{};
  // What decomposed overlap, left out of the default search, would make of the chosen degrees.
  std::optional<Candidate> decomposed;
  if ((flags.strategy.empty() || flags.strategy == "any") && flags.plan.method.empty() &&
      !result->stopped && !result->timed_out)
    decomposed = DecomposedAtBestDegrees(*base, *space, best.plan, evaluator, objective);
  if (decomposed && decomposed->figures.iteration_ms >= best.figures.iteration_ms)
    decomposed.reset();
  const std::string yaml = PlanYaml(flags, *result, baseline, gains, stopped_by);
  if (flags.format == OutputFormat::kJson) {
    PrintJson(PlanDocument(flags, *base, *result, baseline, gains, decomposed, seconds, stopped_by),
              std::cout);
    if (!flags.out_path.empty()) {
      CheckOk("plan", WriteFileAtomically(flags.out_path, yaml, flags.force));
      std::cerr << "wrote " << flags.out_path << "\n";
    }
    if (result->stopped)
      Fail("plan",
           fmt::format("stopped by {} after {} plans simulated: {} holds the best of those "
                       "(partial)",
                       stopped_by, result->evaluated,
                       flags.out_path.empty() ? "stdout" : flags.out_path),
           128 + signal);
    return;
  }

  // With the plan on stdout (--out -), the table goes to stderr: stdout holds one YAML document.
  const bool plan_on_stdout = flags.out_path == "-";
  std::ostream& out = plan_on_stdout ? std::cerr : std::cout;
  out << fmt::format("# {} on {} ({} GPUs), seq {}, global batch {}{}\n", base->model.name,
                     base->cluster.name, base->cluster.total_gpus(), base->seq_len,
                     base->global_batch,
                     flags.memory_headroom_gib > 0
                         ? fmt::format(", {:g} GiB per GPU left free", flags.memory_headroom_gib)
                         : "");
  out << CaveatLine(base->cluster.node.gpu);
  out << fmt::format(
      "# {} plans simulated, {} rejected by a rule or memory, {} pruned by a bound, in {:.2f} s "
      "({:.0f} plans/s)\n\n",
      result->evaluated, result->rejected, result->pruned, seconds,
      result->evaluated / std::max(seconds, 1e-9));
  if (result->timed_out)
    out << fmt::format("# stopped at --timeout {:g} s: the best plan found so far\n\n",
                       flags.timeout_s);
  if (result->stopped)
    out << fmt::format("# stopped by {}: the best plan found so far (partial)\n\n", stopped_by);
  Table table(
      {"rank", "plan", "iteration ms", "exposed ms", "hidden", "tokens/s", "MFU", "GiB/GPU"});
  auto add = [&](const std::string& rank, const Candidate& c) {
    const PlanFigures& f = c.figures;
    table.AddRow({rank, DescribeCandidate(c.plan), fmt::format("{:.2f}", f.iteration_ms),
                  fmt::format("{:.2f}", f.exposed_comm_ms),
                  fmt::format("{:.1f}%", 100 * f.hidden_comm_fraction),
                  fmt::format("{:.0f}", f.tokens_per_s), fmt::format("{:.1f}%", 100 * f.mfu),
                  fmt::format("{:.1f}", f.memory_gib_per_gpu)});
  };
  for (int i = 0; i < flags.top && i < static_cast<int>(result->ranked.size()); ++i)
    add(std::to_string(i + 1), result->ranked[i]);
  if (baseline) add("base", *baseline);
  table.Print(out);

  if (!gains.empty()) {
    out << "\ngain over the baseline with the same degrees (best plan using only):\n";
    for (const DimensionGain& g : gains)
      out << fmt::format("  {:<12} {:.3f}x  ({})\n", g.name, g.gain,
                         DescribeCandidate(g.top->plan));
  }
  if (decomposed)
    out << fmt::format(
        "\ndecomposed collective-matmul overlap, which --strategy all searches too, runs these "
        "degrees {:.3f}x faster:\n  {} ({:.2f} ms)\n",
        best.figures.iteration_ms / decomposed->figures.iteration_ms,
        DescribeCandidate(decomposed->plan), decomposed->figures.iteration_ms);
  if (flags.explain) {
    out << "\nrejected:\n";
    for (const std::string& line : result->rejections) out << "  " << line << "\n";
  }

  if (plan_on_stdout) {
    CheckOk("plan", WriteFileAtomically("-", yaml, flags.force));
  } else if (!flags.out_path.empty()) {
    CheckOk("plan", WriteFileAtomically(flags.out_path, yaml, flags.force));
    std::cout << "\nwrote " << flags.out_path << "\n";
  } else {
    std::cout << "\n" << yaml;
  }
  if (result->stopped)
    Fail("plan",
         fmt::format("stopped by {} after {} plans simulated: {} holds the best of those (partial)",
                     stopped_by, result->evaluated,
                     flags.out_path.empty() || plan_on_stdout ? "stdout" : flags.out_path),
         128 + signal);
}

// In `plan` a degree, split or switch given pins its dimension, and one left out is searched:
// the defaults that `simulate` takes, which the shared help gives, do not apply.
void SaySearched(CLI::App* sub) {
  static const std::regex kDefault("default: [^)]*");
  for (const char* name :
       {"--micro-batch", "--tp", "--cp", "--cp-comm", "--pp", "--dp", "--virtual-stages", "--sp",
        "--row-split", "--col-split", "--scope", "--method", "--chunks", "--recompute",
        "--distributed-optimizer", "--fsdp"}) {
    CLI::Option* option = sub->get_option(name);
    const std::string said =
        std::regex_replace(option->get_description(), kDefault, "default: searched");
    option->description(
        said.find("default: searched") != std::string::npos ? said : said + " (default: searched)");
  }
  // What the search leaves as it is, said as it is: the global batch is fixed, and interleaving
  // is searched over the counts that cut the layers evenly.
  sub->get_option("--virtual-stages")
      ->description(
          "interleaved pipeline stages per GPU (default: searched: every count v whose pp x v "
          "model chunks cut what --pipeline-split counts evenly, or where the layers alone do not "
          "cut, the layers with the embedding and the loss as one each; every chunk keeps a "
          "layer, and the micro-batches are a multiple of pp)");
  CLI::Option* split = sub->get_option("--pipeline-split");
  split->description(std::regex_replace(
      split->get_description(), std::regex("default: layers\\)$"),
      "default: layers, and ends for an interleaved candidate whose layers do not cut)"));
  sub->get_option("--global-batch")
      ->description(
          "sequences per iteration, never searched (default: micro-batch x dp where dp is "
          "pinned, else one micro-batch; micro-batch 16 unless given)");
}

}  // namespace

void SetupPlan(CLI::App* sub) {
  auto flags = std::make_shared<PlanCommandFlags>();
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/false);
  SaySearched(sub);
  sub->add_option(
         "--out", flags->out_path,
         "write the chosen plan (YAML) here instead of after the table; - writes only the "
         "plan to stdout (the table goes to stderr), so `plan --out - > p.yaml` loads back")
      ->check(NonEmpty());
  sub->add_option("--strategy", flags->strategy,
                  "limit Domino slicing: baseline | row | col | 2d | any (default; the chosen "
                  "degrees are then tried under decomposed overlap too, on a stack that runs it, "
                  "and said where faster); or search decomposed collective-matmul overlap: "
                  "decomposed | both | all")
      ->check(CLI::IsMember({"baseline", "row", "col", "2d", "any", "decomposed", "both", "all"}));
  sub->add_option("--fix", flags->fix,
                  "pin dimensions: tp=8,cp=2,pp=1,dp=4,v=2,mb=4,sp=true,distopt=false,"
                  "fsdp=true,recompute=none,p=2,q=1,scope=inter-layer (cp > 1 is searched from "
                  "seq-len 16384, or when nothing fits without it; fsdp where the distributed "
                  "optimizer needs recompute to fit, everywhere when pinned true)");
  sub->add_option("--objective", flags->objective,
                  "throughput (tokens/s, default) | time (iteration time; the same ranking for a "
                  "fixed global batch)")
      ->check(CLI::IsMember({"throughput", "time"}));
  sub->add_option("--top", flags->top,
                  "plans to show and write, the chosen one first and then its runners-up, the "
                  "next best of the plans simulated (a plan pruned by a bound is none of them; "
                  "--exhaustive ranks every feasible plan; default: 5)")
      ->check(DecimalInt(1, 1000));
  AddBoolFlag(sub, "--force", &flags->force, "overwrite an existing --out file");
  AddBoolFlag(sub, "--explain", &flags->explain,
              "list every rejected candidate and the rule it broke");
  AddBoolFlag(sub, "--exhaustive", &flags->exhaustive, "simulate every feasible plan (no pruning)");
  sub->add_option(
         "--timeout", flags->timeout_s,
         "stop searching after this many seconds (once a plan has been evaluated) and keep "
         "the best plan found so far "
         "(default: no limit)")
      ->check(PositiveFinite());
  AddJobsOption(sub, &flags->jobs,
                "threads that compute the search's lower bounds: every configuration's, then "
                "those of a configuration's slicings");
  sub->add_option("--memory-headroom", flags->memory_headroom_gib,
                  "GiB per GPU a plan must leave free beyond what the memory model counts "
                  "(NCCL's buffers, the allocator's fragmentation; default: 0)")
      ->check(FiniteIn(0, 1e6));
  AddFormatOption(sub, &flags->format);
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
