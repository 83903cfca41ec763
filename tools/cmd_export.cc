// `domino export PLAN.yaml --to megatron|nemo|deepspeed|torchtitan`: a plan's launch settings in
// a training framework's own syntax (planner/export.h, docs/export.md).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "planner/export.h"
#include "planner/plan.h"
#include "tools/command.h"

namespace domino::cli {
namespace {

struct ExportFlags {
  std::string plan_path;
  std::string target_name;
  ExportTarget target = ExportTarget::kMegatron;
};

void Run(const ExportFlags& flags) {
  Result<Plan> plan = LoadPlan(flags.plan_path);
  if (!plan.ok()) Fail("export", plan.message());
  Result<std::string> text = ExportPlan(*plan, flags.target);
  if (!text.ok()) Fail("export", fmt::format("{}: {}", flags.plan_path, text.message()));
  // The settings hold up, but not the claim that they are the best: said where a script's
  // output would not show it, as the text's "# partial:" line says it where it is kept.
  if (!plan->search_stopped.empty())
    std::cerr << fmt::format(
        "domino export: warning: {}: the best plan of a `domino plan` search stopped {}, before "
        "it covered its space; a whole search may find a faster one\n",
        flags.plan_path, plan->search_stopped);
  std::cout << *text;
}

}  // namespace

void SetupExport(CLI::App* sub) {
  auto flags = std::make_shared<ExportFlags>();
  std::vector<std::string> names;
  for (const auto& [name, target] : ExportTargetNames()) names.emplace_back(name);
  sub->add_option("plan", flags->plan_path, "plan YAML from `domino plan --out`")
      ->required()
      ->check(NonEmpty());
  sub->add_option("--to", flags->target_name, "framework: megatron, nemo, deepspeed or torchtitan")
      ->required()
      ->check(CLI::IsMember(names));
  sub->callback([flags] {
    for (const auto& [name, target] : ExportTargetNames())
      if (name == flags->target_name) flags->target = target;
    Run(*flags);
  });
}

}  // namespace domino::cli
