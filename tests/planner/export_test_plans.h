// The plans the exporter tests share (planner/export.h), as YAML, and their Export helpers.
#ifndef DOMINO_TESTS_PLANNER_EXPORT_TEST_PLANS_H_
#define DOMINO_TESTS_PLANNER_EXPORT_TEST_PLANS_H_

#include <gtest/gtest.h>

#include <string>

#include "planner/export.h"
#include "planner/plan.h"

namespace domino::export_test {

// gpt3-2.7b on one DGX H100, tp 8, Domino row split 2 inter-layer: the paper's setting.
inline constexpr const char* kGpt27bRowSplit = R"yaml(model: gpt3-2.7b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 1024, micro_batch: 4, global_batch: 4}
parallel: {tp: 8, pp: 1, dp: 1}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";

// llama3-8b on two nodes: tp 4 x pp 2 (interleaved, 2 virtual stages) x dp 2, SP, full recompute,
// distributed optimizer, tp-pp-dp placement.
inline constexpr const char* kLlama8b3dFullRecompute = R"yaml(model: llama3-8b
cluster: dgx-h100:2
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 16}
parallel: {tp: 4, pp: 2, dp: 2, sequence_parallel: true, virtual_stages: 2, placement: tp-pp-dp}
overlap: {row_split: 1, col_split: 1, scope: none}
memory: {recompute: full, distributed_optimizer: true}
)yaml";

// llama3-8b in fp8 with selective recompute, row split 2 intra-layer.
inline constexpr const char* kLlama8bFp8Selective = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: fp8
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: intra-layer}
memory: {recompute: selective}
)yaml";

// llama3-8b, tp 8, row split 2 inter-layer: runnable by DeepSpeed-Domino, with model differences.
inline constexpr const char* kLlama8bRowSplit = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";

// Exports a plan given as YAML; fails the test when the plan does not load.
inline Result<std::string> Export(const char* yaml, ExportTarget target) {
  Result<Plan> plan = ParsePlan(yaml, "plan.yaml");
  EXPECT_TRUE(plan.ok()) << plan.message();
  if (!plan.ok()) return plan.error();
  return ExportPlan(*plan, target);
}

inline void ExpectExport(const char* yaml, ExportTarget target, const std::string& expected) {
  Result<std::string> text = Export(yaml, target);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(*text, expected);
}

}  // namespace domino::export_test

#endif  // DOMINO_TESTS_PLANNER_EXPORT_TEST_PLANS_H_
