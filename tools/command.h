#ifndef DOMINO_TOOLS_COMMAND_H_
#define DOMINO_TOOLS_COMMAND_H_

#include <span>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "models/base/result.h"

namespace domino::cli {

// One `domino` subcommand: its name, a one-line summary for `domino --help`, and a function that
// declares its options on the CLI11 subcommand and installs its callback. Commands live one per
// file (cmd_NAME.cc) and are listed once, in Commands().
struct Command {
  std::string_view name;
  std::string_view summary;
  void (*setup)(CLI::App* sub);
};

std::span<const Command> Commands();

// Ends a command's callback with `exit_code` after printing "domino NAME: MESSAGE" to stderr.
// CLI11 turns the exception into the process's exit code.
[[noreturn]] void Fail(std::string_view command, const std::string& message, int exit_code = 1);

// Fail for a command launched as several ranks: rank 0 says why; the other ranks exit with the
// same code silently, so a launch of N ranks prints one line, not N. They first wait a moment:
// a launcher that sees a rank fail kills the others, and rank 0 must have printed by then.
[[noreturn]] void FailOnRank(std::string_view command, int rank, const std::string& message,
                             int exit_code = 1);

// Prints the error of a failed Status/Result and ends the callback with exit code 1.
inline void CheckOk(std::string_view command, const Status& status) {
  if (!status.ok()) Fail(command, status.message());
}

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_COMMAND_H_
