// The `domino` command line (tools/app.h): one CLI11 app over the command table.
#include "tools/app.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/base/yaml_reader.h"
#include "tools/command.h"

namespace domino::cli {
namespace {

// CLI11 says "--sp: At Most 1 required but received 2" for an option given twice, counting a
// switch's negation with it (--sp --no-sp). Say that in words; other messages pass unchanged.
std::string RepeatedOptionMessage(const CLI::App& command, const std::string& what) {
  constexpr std::string_view kTwice = ": At Most 1 required but received ";
  const size_t at = what.find(kTwice);
  if (at == std::string::npos) return what;
  const std::string flag = what.substr(0, at), count = what.substr(at + kTwice.size());
  std::string forms;
  if (const CLI::Option* option = command.get_option_no_throw(flag)) {
    const std::vector<std::string>& names = option->get_lnames();
    if (names.size() > 1) {
      forms = " (as";
      for (size_t i = 0; i < names.size(); ++i)
        forms += (i == 0 ? " --" : i + 1 == names.size() ? " or --" : ", --") + names[i];
      forms += ")";
    }
  }
  return flag + ": given " + count + " times" + forms + "; give it once";
}

// Thrown once a command left out by RunDomino's `runs` is parsed and checked.
struct ParsedOnly {};

// A subcommand that is parsed and checked like any other, then stops before its callback runs
// (CLI11 calls pre_callback() after every check). Its callback, and the flags the callback owns,
// stay in place.
class ParsedOnlyApp : public CLI::App {
 public:
  ParsedOnlyApp(std::string description, std::string name, CLI::App* parent)
      : CLI::App(std::move(description), std::move(name), parent) {}

 protected:
  void pre_callback() override { throw ParsedOnly(); }
};

}  // namespace

std::string MisreadArgument(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    const size_t eq = arg.find('=');
    // "--NAME=" gives an empty value, which CLI11 would read as a switch's default (on).
    if (arg.starts_with("--") && eq != std::string_view::npos && eq + 1 == arg.size())
      return std::string(arg) +
             " gives an empty value: give a value after '=', or leave the flag out";
    // CLI11's own switches print and exit whatever value follows them.
    for (const std::string_view own : {"--help", "--version"})
      if (eq == own.size() && arg.starts_with(own))
        return std::string(own) + " takes no value: give " + std::string(own) + " alone";
    if (arg.starts_with("--no-") && eq != std::string_view::npos) {
      const std::string name(arg.substr(5, eq - 5));
      return "--no-" + name + " takes no value: give --no-" + name + ", or --" + name + "=false";
    }
  }
  return {};
}

namespace {

// The command line parsed and its command run: RunDomino but for its check of stdout.
int ParseAndRun(int argc, const char* const* argv,
                const std::function<bool(std::string_view)>& runs) {
  CLI::App app{
      "domino plans, predicts and runs tensor-parallel transformer training with communication\n"
      "hidden behind computation (row, column and 2D slicing, as in DeepSpeed-Domino)."};
  app.set_version_flag("--version", "domino " DOMINO_VERSION);
  app.require_subcommand(1);
  const std::string exit_codes =
      "Exit codes: 0 success; 1 bad input or a failed run; 2 usage error (unknown command or "
      "flag,\na flag value out of its range, outputs in conflict: two on one file, or one on an "
      "input);\n3 no plan fits (plan); 128 + N stopped by signal N (130 SIGINT, 143 SIGTERM): "
      "sweep keeps\nthe points it finished and says how many, plan the best plan found, marked "
      "partial in its YAML.";
  app.footer(exit_codes);
  app.fallthrough(false);
  for (const Command& command : Commands()) {
    CLI::App* sub =
        runs && !runs(command.name)
            ? app.add_subcommand(std::make_shared<ParsedOnlyApp>(std::string(command.summary),
                                                                 std::string(command.name), &app))
            : app.add_subcommand(std::string(command.name), std::string(command.summary));
    command.setup(sub);
    sub->footer(exit_codes);
  }
  // Usage errors in one line, like every other error: "domino SUB: MESSAGE (see --help)".
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    // The root reports its subcommands' errors too (app.exit below): name the one given.
    const CLI::App* command = failed;
    std::string name = failed->get_parent() ? " " + failed->get_name() : "";
    if (const std::vector<CLI::App*> given = failed->get_subcommands();
        name.empty() && !given.empty()) {
      command = given.front();
      name = " " + command->get_name();
    }
    return "domino" + name + ": " + RepeatedOptionMessage(*command, e.what()) + " (see --help)\n";
  });
  // A mistyped command gets its name and the nearest command, not "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const Command& command : Commands()) names.emplace_back(command.name);
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string nearest = NearestWord(argv[1], names);
      std::string list;
      for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
      std::fprintf(stderr, "domino: unknown command '%s'%s (commands: %s; see --help)\n", argv[1],
                   nearest.empty() ? "" : (" (did you mean '" + nearest + "'?)").c_str(),
                   list.c_str());
      return kExitUsage;
    }
  }
  if (const std::string misread = MisreadArgument(argc, argv); !misread.empty()) {
    std::fprintf(stderr, "domino: %s (see --help)\n", misread.c_str());
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own failure (tools/command.h Fail): its exit code
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, whatever CLI11's own code.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const ParsedOnly&) {
    return 0;
  } catch (const std::out_of_range&) {
    // CLI11 converts a flag's value with std::stoll (a short-flag cluster such as -hh-no-sp=HUGE
    // reaches it): out of range is a usage error.
    std::fprintf(stderr,
                 "domino: the command line cannot be read: a flag's value is out of range "
                 "(see --help)\n");
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // A run that asked for more memory than the machine (or its ulimit) gives.
    std::fprintf(stderr, "domino: out of memory\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    // Anything else the command-line parser throws is a usage error too.
    std::fprintf(stderr, "domino: the command line cannot be read: %s (see --help)\n", e.what());
    return kExitUsage;
  }
  return 0;
}

// What a command printed that never reached stdout (a full disk, a closed descriptor) fails the
// run, which `rc` would otherwise call a success: one line naming the error. The stream is then
// cleared for the next command line run in the same process.
int CheckStdout(int rc, std::string_view command) {
  std::cout.flush();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int error = errno;
  if (!flush_failed && !std::ferror(stdout) && std::cout.good()) return rc;
  std::fprintf(stderr, "domino%s%s: stdout: %s\n", command.empty() ? "" : " ",
               std::string(command).c_str(),
               flush_failed && error != 0 ? std::strerror(error)
                                          : "a write failed (a full disk or a closed output?): "
                                            "what was printed is incomplete");
  std::clearerr(stdout);
  std::cout.clear();
  return rc == 0 ? kExitBadInput : rc;
}

}  // namespace

int RunDomino(int argc, const char* const* argv,
              const std::function<bool(std::string_view)>& runs) {
  const int rc = ParseAndRun(argc, argv, runs);
  return CheckStdout(rc, argc > 1 && argv[1][0] != '-' ? argv[1] : "");
}

}  // namespace domino::cli
