// `domino sweep`: what-if studies over bandwidth, node count, sequence length, batch or model.
#include <memory>

#include "tools/cmd_pending.h"
#include "tools/plan_flags.h"

namespace domino::cli {

void SetupSweep(CLI::App* sub) {
  auto flags = std::make_shared<PlanFlags>();
  auto study = std::make_shared<std::string>();
  AddPlanFlags(sub, flags.get(), /*with_plan_file=*/true);
  sub->add_option("--study", *study, "study YAML");
  InstallPending(sub, "sweep", "run `domino simulate` once per value meanwhile");
}

}  // namespace domino::cli
