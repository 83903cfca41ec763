// libFuzzer target: the command line's plan overrides (`simulate`'s flags) from arbitrary
// NUL-separated arguments, through CLI11 and BuildPlan.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "tools/app.h"
#include "tools/plan_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"domino"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 32; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  CLI::App app;
  domino::cli::PlanFlags flags;
  domino::cli::AddPlanFlags(&app, &flags, /*with_plan_file=*/false);
  // As `domino` reads a command line (tools/app.cc): arguments CLI11 would misread are refused
  // first.
  if (!domino::cli::MisreadArgument(static_cast<int>(argv.size()), argv.data()).empty()) return 0;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return 0;  // a usage error is a fine answer
  } catch (const std::exception&) {
    return 0;  // what else the parser throws is a usage error too, as RunDomino answers it
  }
  (void)domino::cli::BuildPlan(flags);
  return 0;
}
