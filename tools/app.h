#ifndef DOMINO_TOOLS_APP_H_
#define DOMINO_TOOLS_APP_H_

#include <functional>
#include <string>
#include <string_view>

namespace domino::cli {

// The `domino` command line as a function: builds the CLI11 app from Commands() (tools/command.h),
// parses `argv` and runs the chosen command, then returns the process's exit code (kExit* in
// tools/command.h; 0 for --help and --version). Errors are printed as one line on stderr; it never
// calls exit(), so a driver can run many command lines in one process (fuzz/fuzz_cli.cc).
// `runs(name)` says whether command `name` runs once parsed (every command when empty); the
// others are parsed and checked only.
int RunDomino(int argc, const char* const* argv,
              const std::function<bool(std::string_view)>& runs = {});

// The usage error of an argument CLI11 would misread, before it parses: a switch's negation given
// a value (`--no-sp=VALUE`: CLI11 reads it as a number and throws on a huge one), --help or
// --version given one (`--help=2`: CLI11 prints the help). Empty when every argument is fine.
// (A switch's own `--NAME=VALUE` is checked by its option: SwitchValue in tools/command.h.)
std::string MisreadArgument(int argc, const char* const* argv);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_APP_H_
