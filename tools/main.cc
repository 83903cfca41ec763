// domino: plan, predict and run tensor-parallel LLM training with Domino-style overlap.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
