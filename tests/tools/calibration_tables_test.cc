#include "tools/calibration_tables.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>
#include <sstream>

#include "sim/gemm_model.h"
#include "tests/planner/test_plans.h"

namespace domino::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Shape = std::array<int64_t, 3>;

TEST(CalibrationTablesTest, GemmShapesFromAListOrTheValidationTable) {
  Result<std::vector<Shape>> list = ParseGemmShapes("1024x2048x4096,802816x192x768");
  ASSERT_TRUE(list.ok()) << list.message();
  EXPECT_EQ(*list, (std::vector<Shape>{{1024, 2048, 4096}, {802816, 192, 768}}));
  // The table's GEMM rows, each shape once: MAMF's H100 best shape, the Azure 8192^3 (A100 fp16
  // and H100 fp8 rows alike).
  Result<std::vector<Shape>> table = ParseGemmShapes("table");
  ASSERT_TRUE(table.ok()) << table.message();
  EXPECT_EQ(std::count(table->begin(), table->end(), Shape{8192, 8192, 8192}), 1);
  EXPECT_EQ(std::count(table->begin(), table->end(), Shape{2048, 2048, 13312}), 1);
  for (const char* bad : {"8192x8192", "0x8x8", "8x8x8x8", "8x8x8,", ",8x8x8", "8x-8x8", "axbxc",
                          "2147483648x1x1", ""}) {
    Result<std::vector<Shape>> r = ParseGemmShapes(bad);
    // A trailing comma ends the list; everything else here is refused.
    if (std::string(bad) == "8x8x8,") {
      EXPECT_TRUE(r.ok()) << bad;
      continue;
    }
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.message(), HasSubstr("--gemm-shapes")) << bad;
  }
}

// Seconds 1-3, every fifth, and the last, each against the first.
TEST(CalibrationTablesTest, SoakTableKeepsTheFirstSecondsEveryFifthAndTheLast) {
  HardwareProfile p;
  std::ostringstream none;
  PrintSoak(p, Dtype::kBf16, none);
  EXPECT_EQ(none.str(), "");
  for (int i = 0; i < 12; ++i) p.gemm_soak_tflops.push_back(800 - 10 * i);
  std::ostringstream out;
  PrintSoak(p, Dtype::kBf16, out);
  std::vector<std::string> seconds;
  std::istringstream lines(out.str());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (!first.empty() && std::isdigit(static_cast<unsigned char>(first[0])))
      seconds.push_back(first);
  }
  EXPECT_EQ(seconds, (std::vector<std::string>{"1", "2", "3", "5", "10", "12"}));
  EXPECT_THAT(out.str(), HasSubstr("690.0"));  // second 12: 800 - 110
  EXPECT_THAT(out.str(), HasSubstr(fmt::format("{:+.1f}%", 100 * (690.0 / 800 - 1))));
  EXPECT_THAT(out.str(), HasSubstr("8192^3 bf16 TFLOP/s"));
  EXPECT_THAT(out.str(), Not(HasSubstr("fp8")));
  // An fp8 soak beside, shorter: its columns end with a dash where it has no second.
  for (int i = 0; i < 10; ++i) p.gemm_soak_fp8_tflops.push_back(1400 - 20 * i);
  std::ostringstream both;
  PrintSoak(p, Dtype::kBf16, both);
  EXPECT_THAT(both.str(), HasSubstr("8192^3 fp8 TFLOP/s"));
  EXPECT_THAT(both.str(), HasSubstr("1220.0"));  // second 10: 1400 - 180
  EXPECT_THAT(both.str(), HasSubstr(fmt::format("{:+.1f}%", 100 * (1220.0 / 1400 - 1))));
  std::istringstream rows(both.str());
  std::string last, row;
  while (std::getline(rows, row)) last = row;
  std::istringstream words(last);
  std::vector<std::string> cells{std::istream_iterator<std::string>(words), {}};
  EXPECT_EQ(cells, (std::vector<std::string>{
                       "12", "690.0", fmt::format("{:+.1f}%", 100 * (690.0 / 800 - 1)), "-", "-"}));
}

// A shape on the plan's GPU: the model's TFLOP/s (GemmKernelUs), its error against the measured
// figure, and the published figure where the validation table has the same GPU, type and shape.
TEST(CalibrationTablesTest, GemmSamplesBesideTheModelAndThePublishedFigure) {
  testing_util::PlanKnobs k;
  k.cluster = "hgx-h200:1";
  const Plan plan = testing_util::MakePlan(k);
  HardwareProfile p;
  p.gemm_samples = {{2048, 2048, 13312, 780.0},
                    {4096, 4096, 4096, 700.0},
                    {1280, 4096, 12032, 1400.0, /*fp8=*/true}};
  std::ostringstream out;
  PrintGemmSamples(plan, Dtype::kBf16, p, out);
  const double model = 2.0 * 2048 * 2048 * 13312 /
                       sim::GemmKernelUs(plan.cluster.node.gpu, Dtype::kBf16, 2048, 2048, 13312) /
                       1e6;
  EXPECT_THAT(out.str(), HasSubstr(fmt::format("{:.1f}", model)));
  EXPECT_THAT(out.str(), HasSubstr(fmt::format("{:+.1f}%", 100 * (model / 780 - 1))));
  EXPECT_THAT(out.str(), HasSubstr("794.5 (mamf-h200-bf16)"));
  EXPECT_THAT(out.str(), HasSubstr("model TFLOP/s (h200-sxm)"));
  // The fp8 sample beside fp8's model and published figure.
  const double fp8 = 2.0 * 1280 * 4096 * 12032 /
                     sim::GemmKernelUs(plan.cluster.node.gpu, Dtype::kFp8, 1280, 4096, 12032) / 1e6;
  EXPECT_THAT(out.str(), HasSubstr(fmt::format("{:.1f}", fp8)));
  EXPECT_THAT(out.str(), HasSubstr("1453.4 (mamf-h200-fp8)"));
  // In fp32 the model prices the GPU's fp32 peak and no published bf16 figure applies.
  std::ostringstream fp32;
  PrintGemmSamples(plan, Dtype::kFp32, p, fp32);
  EXPECT_THAT(fp32.str(), HasSubstr(" fp32 "));
  EXPECT_THAT(fp32.str(), Not(HasSubstr("mamf-h200-bf16")));
  std::ostringstream none;
  PrintGemmSamples(plan, Dtype::kBf16, HardwareProfile{}, none);
  EXPECT_EQ(none.str(), "");
}

}  // namespace
}  // namespace domino::cli
