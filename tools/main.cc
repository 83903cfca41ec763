// domino: plan, predict and run tensor-parallel LLM training with Domino-style overlap.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "models/base/yaml_reader.h"
#include "tools/command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "domino plans, predicts and runs tensor-parallel transformer training with communication\n"
      "hidden behind computation (row, column and 2D slicing, as in DeepSpeed-Domino)."};
  app.set_version_flag("--version", "domino " DOMINO_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  for (const domino::cli::Command& command : domino::cli::Commands()) {
    CLI::App* sub = app.add_subcommand(std::string(command.name), std::string(command.summary));
    command.setup(sub);
  }
  // Usage errors in one line, like every other error: "domino SUB: MESSAGE (see --help)".
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    std::string name = failed->get_parent() ? " " + failed->get_name() : "";
    return "domino" + name + ": " + e.what() + " (see --help)\n";
  });
  // A mistyped command gets its name and the nearest command, not "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const domino::cli::Command& command : domino::cli::Commands())
      names.emplace_back(command.name);
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string nearest = domino::NearestWord(argv[1], names);
      std::string list;
      for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
      std::fprintf(stderr, "domino: unknown command '%s'%s (commands: %s; see --help)\n", argv[1],
                   nearest.empty() ? "" : (" (did you mean '" + nearest + "'?)").c_str(),
                   list.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own failure (tools/command.h Fail): its exit code
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, whatever CLI11's own code.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
