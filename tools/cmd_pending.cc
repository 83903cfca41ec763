#include "tools/cmd_pending.h"

#include <string>

#include "tools/command.h"

namespace domino::cli {

void InstallPending(CLI::App* sub, std::string_view name, std::string_view meanwhile) {
  std::string command(name), hint(meanwhile);
  sub->callback([command, hint] {
    Fail(command, "not available in this version of domino yet; " + hint, 2);
  });
}

}  // namespace domino::cli
