// `domino compare PREDICTED MEASURED`: predicted and measured timelines side by side.
#include "tools/cmd_pending.h"

namespace domino::cli {

void SetupCompare(CLI::App* sub) {
  InstallPending(sub, "compare", "measured timelines come with `domino execute`");
}

}  // namespace domino::cli
