#ifndef DOMINO_TESTS_PLANNER_EXAMPLE_PLAN_H_
#define DOMINO_TESTS_PLANNER_EXAMPLE_PLAN_H_

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace domino {

// DESIGN.md's example plan, written with one key per line so that every error names a distinct
// line. Line numbers are given on the right.
inline constexpr std::string_view kExamplePlan =
    "model: gpt3-13b\n"                  // 1
    "cluster: dgx-h100:4\n"              // 2
    "precision: bf16\n"                  // 3
    "training:\n"                        // 4
    "  seq_len: 1024\n"                  // 5
    "  micro_batch: 16\n"                // 6
    "  global_batch: 16\n"               // 7
    "parallel:\n"                        // 8
    "  tp: 32\n"                         // 9
    "  pp: 1\n"                          // 10
    "  dp: 1\n"                          // 11
    "  sequence_parallel: false\n"       // 12
    "  virtual_stages: 1\n"              // 13
    "overlap:\n"                         // 14
    "  row_split: 2\n"                   // 15
    "  col_split: 1\n"                   // 16
    "  scope: inter-layer\n"             // 17
    "memory:\n"                          // 18
    "  recompute: none\n"                // 19
    "  distributed_optimizer: false\n";  // 20

// kExamplePlan with each `from` replaced by its `to` (each must occur once).
inline std::string Edit(
    std::initializer_list<std::pair<std::string_view, std::string_view>> edits) {
  std::string text(kExamplePlan);
  for (const auto& [from, to] : edits) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace domino

#endif  // DOMINO_TESTS_PLANNER_EXAMPLE_PLAN_H_
