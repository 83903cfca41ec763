#ifndef DOMINO_TOOLS_CMD_PENDING_H_
#define DOMINO_TOOLS_CMD_PENDING_H_

#include <string_view>

#include <CLI/CLI.hpp>

namespace domino::cli {

// Installs the callback of a subcommand whose implementation has not landed yet: it exits with
// code 2 and says what to use meanwhile, so scripts can tell "not available" from a failed run.
void InstallPending(CLI::App* sub, std::string_view name, std::string_view meanwhile);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_CMD_PENDING_H_
