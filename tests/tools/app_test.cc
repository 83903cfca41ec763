#include "tools/app.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace domino::cli
