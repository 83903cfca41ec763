// `domino plan`: search the plan space for the fastest plan and write it as YAML.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "models/base/file_io.h"
#include "planner/search.h"
#include "sim/predict.h"
#include "tools/command.h"
#include "tools/plan_flags.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct PlanCommandFlags {
  PlanFlags plan;
  std::string out_path;
  std::string strategy = "any";
  int top = 5;
  bool force = false;
  bool explain = false;
};

// Scores candidates with the simulator.
class SimulatorEvaluator : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override {
    Result<sim::Prediction> p = sim::Predict(plan);
    if (!p.ok()) return p.error();
    return p->figures;
  }
};

SearchSpace SpaceFor(const PlanCommandFlags& flags) {
  SearchSpace space;
  space.tp = flags.plan.tp;
  if (flags.plan.dp > 0) space.dp = flags.plan.dp;
  if (flags.plan.pp > 1) space.pp = flags.plan.pp;
  const std::string& s = flags.strategy;
  if (s == "baseline" || s == "col") space.row_splits = {1};
  if (s == "baseline" || s == "row") space.col_splits = {1};
  if (s == "col") space.col_splits = {2, 4};
  if (s == "row") space.row_splits = {2, 4, 8};
  if (s == "2d") space.row_splits = {2, 4, 8}, space.col_splits = {2, 4};
  if (!flags.plan.sequence_parallel.empty()) space.try_sequence_parallel = false;
  return space;
}

std::string Row(const Candidate& c) {
  return fmt::format("tp {} dp {}{} p {} q {} {}", c.plan.tp, c.plan.dp,
                     c.plan.sequence_parallel ? " sp" : "", c.plan.row_split, c.plan.col_split,
                     ScopeName(c.plan.scope));
}

void Run(const PlanCommandFlags& flags) {
  Result<Plan> base = BuildPlan(flags.plan);
  if (!base.ok()) Fail("plan", base.message());
  SimulatorEvaluator evaluator;
  bool tty = isatty(fileno(stderr));
  auto progress = [tty](int done, int total) {
    if (tty) std::cerr << fmt::format("\rdomino plan: {}/{} candidates", done, total) << std::flush;
  };
  Result<SearchResult> result = SearchPlans(*base, SpaceFor(flags), evaluator, progress);
  if (tty) std::cerr << "\r\033[K";
  if (!result.ok()) Fail("plan", result.message());
  if (result->ranked.empty())
    Fail("plan", "every candidate was rejected; first: " + result->rejections.front());
  const Candidate& best = result->ranked.front();
  // The same tp/dp with no Domino slicing, for the gain of each dimension.
  const Candidate* baseline = nullptr;
  for (const Candidate& c : result->ranked)
    if (c.plan.tp == best.plan.tp && c.plan.dp == best.plan.dp && c.plan.is_baseline() &&
        !c.plan.sequence_parallel)
      baseline = &c;

  std::cout << fmt::format("# {} on {} ({} GPUs), seq {}, micro-batch {}, global batch {}\n",
                           base->model.name, base->cluster.name, base->cluster.total_gpus(),
                           base->seq_len, base->micro_batch, base->global_batch);
  std::cout << fmt::format("# {} candidates evaluated, {} rejected by a rule or memory{}\n\n",
                           result->evaluated, result->rejected,
                           flags.plan.dp > 0 ? "" : "; dp = 1 (pin --dp to search others)");
  Table table({"rank", "plan", "iteration ms", "exposed ms", "hidden", "tokens/s", "MFU", "GiB/GPU"});
  int shown = 0;
  for (const Candidate& c : result->ranked) {
    if (shown++ >= flags.top) break;
    const PlanFigures& f = c.figures;
    table.AddRow({std::to_string(shown), Row(c), fmt::format("{:.2f}", f.iteration_ms),
                  fmt::format("{:.2f}", f.exposed_comm_ms), fmt::format("{:.1f}%", 100 * f.hidden_comm_fraction),
                  fmt::format("{:.0f}", f.tokens_per_s), fmt::format("{:.1f}%", 100 * f.mfu),
                  fmt::format("{:.1f}", f.memory_gib_per_gpu)});
  }
  if (baseline)
    table.AddRow({"base", Row(*baseline), fmt::format("{:.2f}", baseline->figures.iteration_ms),
                  fmt::format("{:.2f}", baseline->figures.exposed_comm_ms),
                  fmt::format("{:.1f}%", 100 * baseline->figures.hidden_comm_fraction),
                  fmt::format("{:.0f}", baseline->figures.tokens_per_s),
                  fmt::format("{:.1f}%", 100 * baseline->figures.mfu),
                  fmt::format("{:.1f}", baseline->figures.memory_gib_per_gpu)});
  table.Print(std::cout);
  if (flags.explain)
    for (const std::string& line : result->rejections) std::cout << "rejected " << line << "\n";

  std::string comment = "domino plan: the fastest of the plans searched";
  if (baseline)
    comment += fmt::format("\nspeedup over the Megatron baseline with the same tp/dp: {:.3f}x",
                           baseline->figures.iteration_ms / best.figures.iteration_ms);
  for (size_t i = 1; i < result->ranked.size() && i < static_cast<size_t>(flags.top); ++i)
    comment += fmt::format("\nrunner-up {}: {} -> {:.0f} tokens/s", i, Row(result->ranked[i]),
                           result->ranked[i].figures.tokens_per_s);
  Plan chosen = best.plan;
  chosen.predicted = best.figures;
  std::string yaml = PlanToYaml(chosen, comment);
  if (!flags.out_path.empty()) {
    CheckOk("plan", WriteFileAtomically(flags.out_path, yaml, flags.force));
    std::cout << "\nwrote " << flags.out_path << "\n";
  } else {
    std::cout << "\n" << yaml;
  }
}

}  // namespace

void SetupPlan(CLI::App* sub) {
  auto flags = std::make_shared<PlanCommandFlags>();
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/false);
  sub->add_option("--out", flags->out_path, "write the chosen plan (YAML) here instead of stdout");
  sub->add_option("--strategy", flags->strategy, "limit Domino slicing: baseline | row | col | 2d | any")
      ->check(CLI::IsMember({"baseline", "row", "col", "2d", "any"}));
  sub->add_option("--top", flags->top, "runners-up to show")->check(CLI::PositiveNumber);
  sub->add_flag("--force", flags->force, "overwrite an existing --out file");
  sub->add_flag("--explain", flags->explain, "list every rejected candidate and the rule it broke");
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
