#include "tools/app.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tools/command.h"

namespace domino::cli {
namespace {

int Domino(std::vector<std::string> args) {
  args.insert(args.begin(), "domino");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return RunDomino(static_cast<int>(argv.size()), argv.data());
}

// The documented exit codes: 0 ok, 1 bad input, 2 usage, 3 no plan fits.
TEST(AppTest, ExitCodesTellTheCasesApart) {
  EXPECT_EQ(Domino({"--help"}), 0);
  EXPECT_EQ(Domino({"models", "gpt3-13b"}), 0);
  EXPECT_EQ(Domino({"models", "gpt3-14b"}), kExitBadInput);
  EXPECT_EQ(Domino({"simulat"}), kExitUsage);
  EXPECT_EQ(Domino({"simulate", "--tp", "0"}), kExitUsage);
  EXPECT_EQ(Domino({"simulate", "--sp", "true"}), kExitUsage);
  // 5,128 GPUs: every dp is a multiple of 641, which cannot divide a global batch of 2,520.
  EXPECT_EQ(Domino({"plan", "--model", "gpt-530b", "--cluster", "dgx-a100:641", "--global-batch",
                    "2520", "--seq-len", "2048"}),
            kExitNoPlanFits);
}

// A command that is only parsed does not run: its errors of use still show, its work does not.
TEST(AppTest, CommandsLeftOutAreParsedOnly) {
  auto parse_only = [](std::string_view) { return false; };
  std::vector<const char*> unknown = {"domino", "models", "gpt3-14b"};
  EXPECT_EQ(RunDomino(3, unknown.data(), parse_only), 0);
  std::vector<const char*> bad_flag = {"domino", "simulate", "--tp", "0"};
  EXPECT_EQ(RunDomino(4, bad_flag.data(), parse_only), kExitUsage);
}

// Every switch of every command takes true or false after '=' and nothing else: `--force=2` and
// `--ignore-memory=on` (once read as on) are usage errors naming the flag; --help and --version
// take no value at all.
TEST(AppTest, SwitchesTakeTrueOrFalseOnly) {
  auto parse_only = [](std::string_view) { return false; };
  auto run = [&](const std::vector<std::string>& args, std::string* err) {
    std::vector<const char*> argv = {"domino"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    testing::internal::CaptureStderr();
    const int rc = RunDomino(static_cast<int>(argv.size()), argv.data(), parse_only);
    *err = testing::internal::GetCapturedStderr();
    return rc;
  };
  int switches = 0;
  for (const Command& command : Commands()) {
    CLI::App app;
    CLI::App* sub = app.add_subcommand(std::string(command.name));
    command.setup(sub);
    for (const CLI::Option* option : sub->get_options()) {
      if (option->get_expected_max() != 0) continue;  // takes a value: not a switch
      for (const std::string& name : option->get_lnames()) {
        if (name.starts_with("no-")) continue;  // a negation takes no value (MisreadArgument)
        const std::string flag = "--" + name;
        const bool own = name == "help";
        for (const char* value : {"2", "on", "maybe"}) {
          std::string err;
          const std::vector<std::string> args = {std::string(command.name), flag + "=" + value};
          EXPECT_EQ(run(args, &err), kExitUsage) << command.name << " " << args[1];
          const std::string said =
              own ? flag + " takes no value"
                  : flag + ": expected true or false (or 1/0, yes/no), got '" + value + "'";
          EXPECT_NE(err.find(said), std::string::npos)
              << command.name << " " << args[1] << ": " << err;
        }
        ++switches;
      }
    }
  }
  EXPECT_GE(switches, 30);  // the commands' own switches, the plan flags' and each --help
  std::string err;
  for (const char* fine : {"--force", "--force=true", "--force=false", "--force=1", "--force=no"})
    EXPECT_EQ(run({"simulate", fine}, &err), 0) << fine << ": " << err;
  EXPECT_EQ(run({"--version=1"}, &err), kExitUsage);
  EXPECT_NE(err.find("--version takes no value"), std::string::npos) << err;
}

}  // namespace
}  // namespace domino::cli
