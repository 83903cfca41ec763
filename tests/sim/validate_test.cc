#include "sim/validate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "planner/memory_model.h"
#include "sim/gemm_model.h"

namespace domino::sim {
namespace {

constexpr const char* kTable = R"(rows:
  - id: gemm-one
    category: gemm
    source: "hand-made"
    gemm: {gpu: h100-sxm, dtype: bf16, m: 1024, n: 1024, k: 1024}
    measured: {tflops: 500}
  - id: ring-one
    category: collective
    source: "hand-made"
    collective: {cluster: dgx-h100:1, op: all-gather, bytes: 1073741824}
    measured: {busbw_GBps: 365}
  - id: e2e-one
    category: end-to-end
    source: "hand-made"
    plan:
      model: {name: tiny, layers: 2, hidden: 256, heads: 4, ffn: 1024, vocab: 1000, seq_len: 128, activation: gelu, norm: layernorm}
      cluster: dgx-h100:1
      stack: megatron-2021
      training: {seq_len: 128, micro_batch: 1, global_batch: 8}
      parallel: {tp: 4, pp: 1, dp: 2}
    measured: {iteration_s: 0.01}
excluded:
  - {what: "a figure", source: "somewhere", reason: "context parallelism"}
)";

TEST(ValidateTest, PredictsEveryCategoryAndSummarizes) {
  Result<ValidationTable> table = ParseValidationTable(kTable, "t.yaml");
  ASSERT_TRUE(table.ok()) << table.message();
  ASSERT_EQ(table->rows.size(), 3u);
  EXPECT_EQ(table->excluded.size(), 1u);
  EXPECT_EQ(table->rows[0].line, 2);
  EXPECT_EQ(table->rows[2].plan->stack.name, "megatron-2021");
  EXPECT_EQ(table->rows[2].plan->model.name, "tiny");
  EXPECT_TRUE(table->rows[2].plan->model_ref.empty());

  std::vector<RowResult> results;
  for (const ValidationRow& row : table->rows) {
    Result<RowResult> r = PredictRow(row);
    ASSERT_TRUE(r.ok()) << r.message();
    results.push_back(*r);
  }
  // GEMM: 2 m n k over the model's kernel time; error against 500 TFLOP/s.
  const double us = GemmKernelUs(table->rows[0].gemm->gpu, Dtype::kBf16, 1024, 1024, 1024);
  EXPECT_NEAR(results[0].predicted, 2.0 * 1024 * 1024 * 1024 / (us * 1e6), 1e-9);
  EXPECT_NEAR(results[0].error, results[0].predicted / 500 - 1, 1e-12);
  // All-gather of 1 GiB on 8 GPUs: a ring (Simple) at 0.81 x 450 GB/s, ramped at 1 GiB (half at
  // 8 MiB, exponent 0.65), 8.4 us + 7 steps of 3.4.
  const double moved = 1073741824.0 * 7 / 8;
  const double ramp = std::pow(128.0, 0.65) / (1 + std::pow(128.0, 0.65));
  const double ring_us = 8.4 + 7 * 3.4 + moved / (450 * 0.81 * ramp * 1e3);
  EXPECT_NEAR(results[1].predicted, moved / (ring_us * 1e3), 1e-9);
  EXPECT_EQ(results[1].detail.substr(0, results[1].detail.find(" algbw")),
            fmt::format("ring, {:.1f} us,", ring_us));
  // The GEMM row says where its kernel time goes: 64 tiles of 128 x 128 would fill half the SMs;
  // the kernel of tiles half as wide fills 128 of them in one wave.
  EXPECT_EQ(
      results[0].detail.substr(0, results[0].detail.find(';')),
      fmt::format("{:.1f} us: 128 tiles of 128x64 on 132 SMs in 1 wave(s), the last 97% full", us));

  std::vector<CategorySummary> summary = Summarize(results);
  ASSERT_EQ(summary.size(), 3u);
  for (const CategorySummary& s : summary) {
    EXPECT_EQ(s.rows, 1);
    EXPECT_DOUBLE_EQ(s.mean_abs_error, s.max_abs_error);
  }
  EXPECT_EQ(summary[1].worst_id, "gemm-one");

  // The end-to-end row's error as GEMM time; the other categories have none.
  EXPECT_EQ(results[0].gemm_share, 0);
  EXPECT_EQ(GemmFactorToClose(results[0]), 0);
  EXPECT_GT(results[2].gemm_share, 0);
  EXPECT_LT(results[2].gemm_share, 1);
  const double factor = GemmFactorToClose(results[2]);
  // Predicted + (factor - 1) x the GEMMs' share of it is the measurement.
  EXPECT_NEAR(results[2].predicted * (1 + (factor - 1) * results[2].gemm_share), 0.01, 1e-12);

  // The end-to-end row's memory (megatron-2021 runs unfused attention, which stores the scores)
  // beside the H100's capacity as CUDA reports it; the other categories have neither.
  EXPECT_DOUBLE_EQ(
      results[2].memory_gib,
      EstimateMemory(*table->rows[2].plan, /*flash_attention=*/false).total_bytes() / (1 << 30));
  EXPECT_NEAR(results[2].capacity_gib, 79.21, 0.01);
  EXPECT_EQ(results[0].capacity_gib, 0);
  const MemoryFit fit = MemoryFitOf(results);
  EXPECT_EQ(fit.rows, 1);
  EXPECT_TRUE(fit.over.empty());
  EXPECT_EQ(fit.fullest_id, "e2e-one");
}

// A published run that the memory model says does not fit is listed; the fullest row is the one
// with the largest share of its GPU, whatever its size.
TEST(ValidateTest, ListsThePublishedRunsThatDoNotFit) {
  ValidationRow small, big, over, gemm;
  for (ValidationRow* row : {&small, &big, &over}) row->category = ValidationCategory::kEndToEnd;
  small.id = "small", big.id = "big", over.id = "over";
  gemm.id = "gemm", gemm.category = ValidationCategory::kGemm;
  std::vector<RowResult> results = {{&small, 1, 0, "", 0.5, 70, 79},
                                    {&big, 1, 0, "", 0.5, 130, 140},
                                    {&gemm, 400, 0, "", 0, 0, 0}};
  MemoryFit fit = MemoryFitOf(results);
  EXPECT_EQ(fit.rows, 2);
  EXPECT_TRUE(fit.over.empty());
  EXPECT_EQ(fit.fullest_id, "big");  // 130 / 140 = 0.93 > 70 / 79 = 0.89
  EXPECT_EQ(fit.fullest_gib, 130);
  EXPECT_EQ(fit.fullest_capacity_gib, 140);
  results.push_back({&over, 1, 0, "", 0.5, 80, 79});
  fit = MemoryFitOf(results);
  EXPECT_EQ(fit.rows, 3);
  EXPECT_EQ(fit.over, std::vector<std::string>{"over"});
  EXPECT_EQ(fit.fullest_id, "over");
}

// Rows group by their id's first word and precision; each group keeps the range of its shares and
// factors.
TEST(ValidateTest, GroupsTheGapAsGemmTime) {
  ValidationRow a, b, c, gemm;
  for (ValidationRow* row : {&a, &b, &c}) {
    row->category = ValidationCategory::kEndToEnd;
    row->plan = Plan{};
    row->plan->precision = Dtype::kBf16;
    row->measured = 10;
  }
  a.id = "src-one-8gpu", b.id = "src-two", c.id = "other-one";
  c.plan->precision = Dtype::kFp8;
  gemm.id = "src-gemm", gemm.category = ValidationCategory::kGemm, gemm.measured = 500;
  // a: 8 s predicted, half GEMMs: 1 + 2 / 4 = 1.5x; b: 9 s, 0.9 GEMMs: 1 + 1 / 8.1; c: exact.
  const std::vector<RowResult> results = {{&a, 8, -0.2, "", 0.5},
                                          {&b, 9, -0.1, "", 0.9},
                                          {&c, 10, 0, "", 0.6},
                                          {&gemm, 400, -0.2, "", 0}};
  EXPECT_DOUBLE_EQ(GemmFactorToClose(results[0]), 1.5);
  // 30 s predicted for 10 measured, a third GEMMs: the other 20 s alone exceed it, and no factor
  // on the GEMMs closes the gap (1 - 20 / 10 would be negative): 0.
  const RowResult too_slow{&a, 30, 0, "", 1.0 / 3};
  EXPECT_EQ(GemmFactorToClose(too_slow), 0);
  const std::vector<GemmGapGroup> groups = GemmGapByGroup(results);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].source, "src");
  EXPECT_EQ(groups[0].precision, "bf16");
  EXPECT_EQ(groups[0].rows, 2);
  EXPECT_DOUBLE_EQ(groups[0].min_share, 0.5);
  EXPECT_DOUBLE_EQ(groups[0].max_share, 0.9);
  EXPECT_DOUBLE_EQ(groups[0].min_factor, 1 + 1 / 8.1);
  EXPECT_DOUBLE_EQ(groups[0].max_factor, 1.5);
  EXPECT_DOUBLE_EQ(groups[0].mean_error, -0.15);
  EXPECT_DOUBLE_EQ(groups[0].mean_abs_error, 0.15);
  EXPECT_EQ(groups[1].source, "other");
  EXPECT_EQ(groups[1].precision, "fp8");
  EXPECT_DOUBLE_EQ(groups[1].min_factor, 1);
  EXPECT_EQ(groups[1].mean_error, 0);
}

// A 16-bit row and its fp8 twin (same source, same plan but the precision) pair up; a row of
// another source or plan does not.
TEST(ValidateTest, PairsSixteenBitAndFp8Rows) {
  ValidationRow bf16, fp8, other_source, other_plan, lone_fp8;
  for (ValidationRow* row : {&bf16, &fp8, &other_source, &other_plan, &lone_fp8}) {
    row->category = ValidationCategory::kEndToEnd;
    row->source = "s";
    row->plan = Plan{};
    row->plan->model.name = "m";
    row->plan->precision = Dtype::kBf16;
  }
  bf16.id = "src-bf16-8gpu", fp8.id = "src-fp8-8gpu", other_source.id = "src-bf16-x";
  fp8.plan->precision = lone_fp8.plan->precision = Dtype::kFp8;
  other_source.source = "t";
  other_plan.id = "src-bf16-16gpu", other_plan.plan->dp = 2;
  lone_fp8.id = "src-fp8-16gpu", lone_fp8.plan->dp = 4;
  bf16.measured = 12, fp8.measured = 8;  // 1.5x measured
  // Predicted 10 s (GEMMs 0.6 of it) and 8 s: 1.25x. Were 8 s right, 1.5 x 8 = 12 s asks the
  // 16-bit GEMMs for (12 - 4) / 6 = 4/3.
  const std::vector<RowResult> results = {{&bf16, 10, 0, "", 0.6},
                                          {&fp8, 8, 0, "", 0.5},
                                          {&other_source, 10, 0, "", 0.6},
                                          {&other_plan, 10, 0, "", 0.6},
                                          {&lone_fp8, 8, 0, "", 0.5}};
  const std::vector<Fp8PairGroup> groups = Fp8SpeedupByGroup(results);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].source, "src");
  EXPECT_EQ(groups[0].model, "m");
  EXPECT_EQ(groups[0].pairs, 1);
  EXPECT_DOUBLE_EQ(groups[0].min_measured, 1.5);
  EXPECT_DOUBLE_EQ(groups[0].max_predicted, 1.25);
  EXPECT_DOUBLE_EQ(groups[0].min_factor, 4.0 / 3);
  EXPECT_DOUBLE_EQ(groups[0].max_factor, 4.0 / 3);
}

TEST(ValidateTest, RefusesBadRowsWithFileLineAndRule) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"rows:\n  - id: a\n    category: gemm\n    source: s\n    gemm: {gpu: h100-sxm, dtype: "
       "bf16, m: 1, n: 1, k: 1}\n    measured: {iteration_s: 1}\n",
       "a gemm row cannot measure iteration_s"},
      {"rows:\n  - id: a\n    category: gemm\n    source: s\n    gemm: {gpu: a100-sxm-80gb, dtype: "
       "fp8, m: 1, n: 1, k: 1}\n    measured: {tflops: 1}\n",
       "has no fp8 tensor cores"},
      {"rows:\n  - id: a\n    category: collective\n    source: s\n    collective: {cluster: "
       "dgx-a100:1, op: all-reduce, bytes: 8, algorithm: nvls}\n    measured: {busbw_GBps: 1}\n",
       ""},
      {"rows:\n  - id: a\n    category: gemm\n    source: s\n    gemm: {gpu: h100-sxm, dtype: "
       "bf16, m: 1, n: 1, k: 1}\n    measured: {tflops: 1}\n"
       "  - id: a\n    category: gemm\n    source: s\n    gemm: {gpu: h100-sxm, dtype: bf16, m: 1, "
       "n: 1, k: 1}\n    measured: {tflops: 1}\n",
       "t.yaml:7: rows: id 'a' appears twice"},
      {"rows:\n  - id: a\n    category: gemm\n    source: s\n    gemm: {gpu: h100-sxm, dtype: "
       "bf16, m: 1, n: 1, k: 1}\n    measured: {tflops: 1}\n    colour: red\n",
       "colour"},
      {"rows: []\n", "rows: must be a non-empty list"},
      {"rows:\n  - id: a\n    category: contention\n    source: s\n    contention: {gpu: h200-sxm, "
       "m: 1, n: 1, k: 1, sms_held: 132, hold_us: 1, order: holder-first, alone_us: 1}\n"
       "    measured: {slowdown: 1}\n",
       "sms_held: must be below the 132 SMs of h200-sxm"},
      {"rows:\n  - id: a\n    category: contention\n    source: s\n    contention: {gpu: h200-sxm, "
       "m: 1, n: 1, k: 1, sms_held: 16, hold_us: 1, order: sideways, alone_us: 1}\n"
       "    measured: {slowdown: 1}\n",
       "order"},
      {"rows:\n  - id: a\n    category: layer\n    source: s\n    plan: {model: gpt3-13b, "
       "cluster: dgx-h100:1, parallel: {tp: 2, pp: 1, dp: 4}}\n    measured: {ms: 1}\n",
       "a layer row's plan runs on one GPU (tp, cp, pp and dp 1), not tp 2 cp 1 pp 1 dp 4"},
      {"rows:\n  - id: a\n    category: layer\n    source: s\n    plan: {model: gpt3-13b, "
       "cluster: dgx-h100:1:1}\n    measured: {iteration_s: 1}\n",
       "a layer row cannot measure iteration_s"},
      {"rows:\n  - id: a\n    category: layer\n    source: s\n    measured: {ms: 1}\n",
       "a layer row needs a plan mapping"},
  };
  for (const Case& c : cases) {
    Result<ValidationTable> table = ParseValidationTable(c.text, "t.yaml");
    if (std::string(c.expect).empty()) {
      // Parses; the algorithm that does not apply fails at prediction, naming the row.
      ASSERT_TRUE(table.ok()) << table.message();
      Result<RowResult> r = PredictRow(table->rows[0]);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.message().find("row a: all-reduce on dgx-a100: NCCL has no nvls"),
                std::string::npos)
          << r.message();
      continue;
    }
    ASSERT_FALSE(table.ok()) << c.text;
    EXPECT_NE(table.message().find("t.yaml"), std::string::npos) << table.message();
    EXPECT_NE(table.message().find(c.expect), std::string::npos) << table.message();
  }
}

// A contention row runs the GEMM and the holder through the engine, the GEMM scaled to its time
// alone (3 us of it the kernel's fixed time).
TEST(ValidateTest, ContentionRowsByHand) {
  constexpr const char* kRows = R"(rows:
  - id: held
    category: contention
    source: "hand-made"
    contention: {gpu: h200-sxm, m: 4096, n: 2560, k: 5120, sms_held: 16, hold_us: 100, order: holder-first, alone_us: 180}
    measured: {slowdown: 1.5}
  - id: first
    category: contention
    source: "hand-made"
    contention: {gpu: h200-sxm, m: 4096, n: 2560, k: 5120, sms_held: 16, hold_us: 100, order: gemm-first, alone_us: 180}
    measured: {slowdown: 1}
  - id: short-k
    category: contention
    source: "hand-made"
    contention: {gpu: h200-sxm, m: 4096, n: 2560, k: 1024, sms_held: 16, hold_us: 100, order: holder-first, alone_us: 50}
    measured: {slowdown: 1.2}
)";
  Result<ValidationTable> table = ParseValidationTable(kRows, "t.yaml");
  ASSERT_TRUE(table.ok()) << table.message();
  std::vector<double> predicted;
  for (const ValidationRow& row : table->rows) {
    Result<RowResult> r = PredictRow(row);
    ASSERT_TRUE(r.ok()) << r.message();
    predicted.push_back(r->predicted);
  }
  // 2.42 waves of CTAs, persistent: the early CTAs run through the 100 us held; the late ones
  // start when it ends and take their 2/3 of the GEMM's 180 us.
  EXPECT_NEAR(predicted[0], (100 + 180 * 2.0 / 3) / 180.0, 1e-9);
  // Launched first, the GEMM keeps its SMs; the holder waits.
  EXPECT_NEAR(predicted[1], 1, 1e-9);
  // Short k: no tail, only the SMs left: 640 tiles in ceil(640 / 116) = 6 waves instead of 5, the
  // last wave writing 60 tiles' C after its main loops instead of 112 (wave w, all of C e).
  const double w = 2.0 * 128 * 128 * (1024 + 192) / (989e6 * 0.84 / 132);
  const double e = 4096.0 * 2560 * 2 / (4800 * 0.88 * 1e3);
  const double alone = 5 * w + e * 112 / 640, held = 6 * w + e * 60 / 640;
  EXPECT_NEAR(predicted[2], (4 + 46.0 * held / alone) / 50, 1e-9);
}

// A layer row: the plan's layers alone (no embedding, LM head, loss or optimizer), so twice the
// layers take twice the time and the vocabulary changes nothing; dropout adds its masks, and an
// unfused bias-dropout-add its passes.
TEST(ValidateTest, LayerRowsTimeTheLayersAlone) {
  const auto row = [](const char* id, int layers, int vocab, const char* training) {
    return fmt::format(R"(  - id: {}
    category: layer
    source: "hand-made"
    plan:
      model: {{name: l, layers: {}, hidden: 4096, heads: 32, ffn: 16384, vocab: {}, seq_len: 2048, activation: gelu, norm: layernorm, bias: false}}
      cluster: dgx-h100:1:1
      stack: megatron-core
      training: {{seq_len: 2048, micro_batch: 4, global_batch: 4{}}}
    measured: {{ms: 20}}
)",
                       id, layers, vocab, training);
  };
  const std::string text =
      "rows:\n" + row("one", 1, 32000, "") + row("two", 2, 32000, "") +
      row("vocab", 1, 128000, "") + row("dropout", 1, 32000, ", dropout: true") +
      row("unfused", 1, 32000, ", dropout: true, fused_bias_dropout_add: false");
  Result<ValidationTable> table = ParseValidationTable(text, "t.yaml");
  ASSERT_TRUE(table.ok()) << table.message();
  std::vector<RowResult> r;
  for (const ValidationRow& x : table->rows) {
    Result<RowResult> p = PredictRow(x);
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_NEAR(p->error, p->predicted / 20 - 1, 1e-12);
    EXPECT_GT(p->gemm_share, 0.5) << x.id;  // these layers are mostly GEMM
    EXPECT_LT(p->gemm_share, 1) << x.id;
    r.push_back(*p);
  }
  EXPECT_NEAR(r[1].predicted, 2 * r[0].predicted, 1e-6 * r[0].predicted);
  EXPECT_NEAR(r[2].predicted, r[0].predicted, 1e-9 * r[0].predicted);  // to rounding
  EXPECT_GT(r[3].predicted, r[0].predicted);
  EXPECT_GT(r[4].predicted, r[3].predicted);
  // GEMMs fill more than the knee of the H100's power limit (0.5; 84% of this layer at full
  // clock): the clock is held at 1 - 0.375 x (0.84 - 0.5) = 0.87.
  EXPECT_NE(r[0].detail.find("tensor clock 0.87"), std::string::npos) << r[0].detail;
}

// The built-in table loads, and every row predicts.
TEST(ValidateTest, BuiltInTablePredictsEveryRow) {
  Result<ValidationTable> table = LoadValidationTable("");
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_GE(table->rows.size(), 150u);
  EXPECT_FALSE(table->excluded.empty());
  for (const ValidationRow& row : table->rows) {
    Result<RowResult> r = PredictRow(row);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_GT(r->predicted, 0) << row.id;
    EXPECT_TRUE(std::isfinite(r->error)) << row.id;
    // Every published run ran, so its plan fits in its GPUs' memory.
    EXPECT_LE(r->memory_gib, r->capacity_gib) << row.id;
  }
}

}  // namespace
}  // namespace domino::sim
