#ifndef DOMINO_TOOLS_COMMAND_H_
#define DOMINO_TOOLS_COMMAND_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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

// Validators for flags, worded as the YAML loaders word the same rules. A flag given as an empty
// string is an error, never "not given".
CLI::Validator NonEmpty();
// A finite number > 0 (no NaN, no infinity).
CLI::Validator PositiveFinite();
// A decimal integer from `min` to `max` ("010" is refused, not read as octal 8).
CLI::Validator DecimalInt(int64_t min, int64_t max);
// A finite number from `min` to `max` (no NaN, no infinity).
CLI::Validator FiniteIn(double min, double max);

// Applies a switch's value (`--NAME=VALUE`) to `out`: true or false (1/0 and yes/no read the
// same); false on anything else. "" (not given) leaves `out` as it is.
bool ParseBoolFlag(const std::string& text, bool* out);
// A switch's value after '=', as ParseBoolFlag reads it: any other ("--force=2", which CLI11
// would read as on) is a usage error naming the flag and the values it takes.
CLI::Validator SwitchValue();
// A switch of a command: `--NAME` (or `--NAME=true`) sets `*on`, `--NAME=false` leaves it off;
// checked by SwitchValue. Every command declares its switches through this, or through the plan
// flags' AddSwitch (tools/plan_flags.cc), which adds a --no-NAME.
CLI::Option* AddBoolFlag(CLI::App* sub, const std::string& name, bool* on, const std::string& help);

// A `--jobs` flag's thread count: the option's own description, its bounds, and the count it
// stands for (0, not given: the machine's hardware threads, at most 16).
CLI::Option* AddJobsOption(CLI::App* sub, int* jobs, const std::string& what);
int JobsThreads(int jobs);

// Bounds of the integer flags that name no quantity of a plan: a CUDA device, a rank, a seed,
// how many rows a table lists.
inline constexpr int64_t kMaxDevice = 1023;
inline constexpr int64_t kMaxRank = 1 << 20;
inline constexpr int64_t kMaxSeed = 999'999'999'999'999'999;  // 18 digits
inline constexpr int64_t kMaxListed = 1'000'000;

// A progress bar for long work on a terminal: "domino sweep: [####    ] 12/40 points 3.1/s ETA
// 9 s" on stderr, redrawn at most a few times a second; silent when stderr is not a terminal.
class Progress {
 public:
  Progress(std::string_view command, std::string_view unit, int64_t total);
  ~Progress();  // clears the bar
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(int64_t done);

 private:
  std::string command_, unit_;
  int64_t total_;
  bool tty_;
  double start_s_, last_draw_s_ = -1;
};

// SIGINT and SIGTERM, once caught by CatchStopSignals(), only set a flag: long loops poll
// StopSignal() (0 while none came), keep what they finished, say so and exit non-zero.
void CatchStopSignals();
int StopSignal();

// Exit codes, the same for every command (README, `domino --help`): 0 success; 1 bad input or a
// failed run; 2 a usage error (unknown command or flag, a flag value out of its range, outputs in
// conflict: CheckUsage); 3 no plan fits (`domino plan` searched the whole space and every candidate
// broke a rule or memory); 128 + N stopped by signal N (130 SIGINT, 143 SIGTERM), keeping what was
// finished.
inline constexpr int kExitBadInput = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoPlanFits = 3;

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

// CheckOk for a check of the command line itself, which ends with exit code 2 (a usage error):
// outputs in conflict, two of them naming one file or stdout (CheckDistinctOutputs), or one
// naming an input of the command (CheckNotAnInput). Whether an output's path can be written
// (a missing folder, an existing file without --force) is the machine's state: CheckOk.
inline void CheckUsage(std::string_view command, const Status& status) {
  if (!status.ok()) Fail(command, status.message(), kExitUsage);
}

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_COMMAND_H_
