#include "sim/gemm_fit.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/gemm_model.h"
#include "tests/sim/catalog_gpu.h"

namespace domino::sim {
namespace {

using testing_util::CatalogGpu;

ValidationRow GemmRow(std::string id, std::string source, const GpuSpec& gpu, Dtype dtype, double m,
                      double n, double k, double tflops) {
  ValidationRow row;
  row.id = std::move(id);
  row.category = ValidationCategory::kGemm;
  row.source = std::move(source);
  row.gemm = GemmCase{gpu, dtype, m, n, k};
  row.unit = MeasuredUnit::kTflops;
  row.measured = tflops;
  return row;
}

// What the GEMM model gives `gpu` with other constants: the rows' "measurements" below.
double ModelTflops(GpuSpec gpu, Dtype dtype, double efficiency, double overhead, double fixed,
                   double stream_k, double m, double n, double k) {
  (dtype == Dtype::kFp8 ? gpu.fp8_gemm_efficiency : gpu.max_gemm_efficiency) = efficiency;
  gpu.gemm_tile_overhead_k = overhead;
  gpu.gemm_fixed_us = fixed;
  gpu.gemm_stream_k_min_k = stream_k;
  return GemmKernelTflops(gpu, dtype, m, n, k);
}

// Rows made by the model itself at constants on the grid but not the catalog's (A100 16-bit at
// 0.78, H100 fp8 at 0.72, 96 k-steps of overhead, 1.5 us, stream-K from k = 4096), from three
// sources that each share a group with another: the fit finds those constants with no error,
// with every row and with each source left out.
TEST(GemmFitTest, FindsTheConstantsThatMadeTheRows) {
  const GpuSpec a100 = CatalogGpu("a100-sxm-80gb"), h100 = CatalogGpu("h100-sxm");
  ASSERT_EQ(a100.max_gemm_efficiency, 0.84);
  ASSERT_EQ(h100.fp8_gemm_efficiency, 0.68);
  struct Shape {
    const char* source;
    bool fp8;
    double m, n, k;
  };
  const Shape shapes[] = {{"one", false, 1024, 1024, 1024},  {"one", false, 8192, 8192, 8192},
                          {"one", false, 4096, 512, 12288},  {"two", false, 2048, 6144, 3072},
                          {"two", false, 512, 4096, 1536},   {"two", true, 4096, 4096, 4096},
                          {"two", true, 1024, 2048, 16384},  {"three", true, 8192, 8192, 1024},
                          {"three", true, 2048, 2048, 6144}, {"three", true, 16384, 1024, 2048}};
  std::vector<ValidationRow> rows;
  for (const Shape& s : shapes) {
    const GpuSpec& gpu = s.fp8 ? h100 : a100;
    const Dtype dtype = s.fp8 ? Dtype::kFp8 : Dtype::kBf16;
    rows.push_back(
        GemmRow(fmt::format("{}-{}", s.source, rows.size()), s.source, gpu, dtype, s.m, s.n, s.k,
                ModelTflops(gpu, dtype, s.fp8 ? 0.72 : 0.78, 96, 1.5, 4096, s.m, s.n, s.k)));
  }
  rows.push_back(ValidationRow{});  // an end-to-end row: not the fit's

  Result<GemmFit> fit = FitGemmModel(rows);
  ASSERT_TRUE(fit.ok()) << fit.message();
  EXPECT_EQ(fit->rows, 10);
  ASSERT_EQ(fit->groups.size(), 2u);
  EXPECT_FALSE(fit->groups[0].fp8);
  EXPECT_EQ(fit->groups[0].gpus, std::vector<std::string>{"a100-sxm-80gb"});
  EXPECT_TRUE(fit->groups[1].fp8);
  EXPECT_EQ(fit->catalog.efficiency, (std::vector<double>{0.84, 0.68}));
  EXPECT_EQ(fit->fitted.efficiency, (std::vector<double>{0.78, 0.72}));
  EXPECT_EQ(fit->fitted.tile_overhead_k, 96);
  EXPECT_EQ(fit->fitted.fixed_us, 1.5);
  EXPECT_EQ(fit->fitted.stream_k_min_k, 4096);
  EXPECT_LT(fit->fitted_error, 1e-12);
  EXPECT_GT(fit->catalog_error, 0.01);
  EXPECT_LT(fit->held_out_error, 1e-12);
  ASSERT_EQ(fit->sources.size(), 3u);
  int rows_seen = 0;
  for (const GemmFitSource& s : fit->sources) {
    SCOPED_TRACE(s.source);
    EXPECT_EQ(s.label, s.source);  // ids one-0, one-1, ...: they share "one-" and no end
    rows_seen += s.rows;
    EXPECT_LT(s.held_out_error, 1e-12);
    EXPECT_EQ(s.held_out.efficiency, fit->fitted.efficiency);
  }
  EXPECT_EQ(rows_seen, 10);
}

// The second stage fits the kernel choice's two constants: rows made at the catalog's main loop,
// overhead, fixed time and threshold (the first stage's grid holds only those) with tiles half as
// wide at 0.6 of the rate and split-K's reduction at 2.5 us. 1024^3 runs half tiles, the short
// tiles over a long k split it: the fit finds both, and each source left out too.
TEST(GemmFitTest, TheSecondStageFitsTheKernelChoice) {
  GpuSpec made = CatalogGpu("h100-sxm");
  made.gemm_half_tile_rate = 0.6;
  made.gemm_split_k_fixed_us = 2.5;
  struct Shape {
    const char* source;
    double m, n, k;
  };
  const Shape shapes[] = {{"p", 1024, 1024, 1024}, {"p", 256, 256, 4096}, {"p", 4096, 4096, 4096},
                          {"q", 1024, 1024, 512},  {"q", 512, 256, 2048}, {"q", 8192, 8192, 1024}};
  std::vector<ValidationRow> rows;
  for (const Shape& s : shapes)
    rows.push_back(GemmRow(fmt::format("{}-{}", s.source, rows.size()), s.source,
                           CatalogGpu("h100-sxm"), Dtype::kBf16, s.m, s.n, s.k,
                           GemmKernelTflops(made, Dtype::kBf16, s.m, s.n, s.k)));
  EXPECT_EQ(GemmKernelParts(made, Dtype::kBf16, 1024, 1024, 1024).tile_n, 64);
  EXPECT_GT(GemmKernelParts(made, Dtype::kBf16, 256, 256, 4096).split_k, 1);
  GemmFitGrid grid = DefaultGemmFitGrid();
  grid.efficiency = {0.84};
  grid.tile_overhead_k = {192};
  grid.fixed_us = {4};
  grid.stream_k_min_k = {2048};
  Result<GemmFit> fit = FitGemmModel(rows, grid);
  ASSERT_TRUE(fit.ok()) << fit.message();
  EXPECT_EQ(fit->catalog.half_tile_rate, 0.7);
  EXPECT_EQ(fit->catalog.split_k_fixed_us, 1.5);
  EXPECT_GT(fit->catalog_error, 0.01);
  EXPECT_EQ(fit->fitted.half_tile_rate, 0.6);
  EXPECT_EQ(fit->fitted.split_k_fixed_us, 2.5);
  EXPECT_LT(fit->fitted_error, 1e-12);
  for (const GemmFitSource& s : fit->sources) {
    SCOPED_TRACE(s.source);
    EXPECT_EQ(s.held_out.half_tile_rate, 0.6);
    EXPECT_EQ(s.held_out.split_k_fixed_us, 2.5);
  }
}

// A source whose group no other source has leaves that group at its catalog value in its own
// fold; the fitted error never exceeds the catalog's (the grid holds the catalog's values).
TEST(GemmFitTest, AGroupNoOtherSourceConstrainsKeepsItsCatalogValue) {
  const GpuSpec a100 = CatalogGpu("a100-sxm-80gb"), h100 = CatalogGpu("h100-sxm");
  std::vector<ValidationRow> rows = {
      GemmRow("a-1", "a", a100, Dtype::kBf16, 4096, 4096, 4096, 240),
      GemmRow("a-2", "a", a100, Dtype::kBf16, 1024, 1024, 1024, 120),
      GemmRow("b-1", "b", h100, Dtype::kFp8, 4096, 4096, 4096, 1200)};
  Result<GemmFit> fit = FitGemmModel(rows);
  ASSERT_TRUE(fit.ok()) << fit.message();
  ASSERT_EQ(fit->sources.size(), 2u);
  EXPECT_EQ(fit->sources[1].label, "b-1");
  EXPECT_EQ(fit->sources[1].held_out.efficiency[1], 0.68);  // fp8: only "b" has it
  EXPECT_EQ(fit->sources[0].held_out.efficiency[0], 0.84);  // 16-bit: only "a"
  EXPECT_LE(fit->fitted_error, fit->catalog_error);
}

TEST(GemmFitTest, RefusesRowsItCannotFit) {
  Result<GemmFit> none = FitGemmModel(std::vector<ValidationRow>{ValidationRow{}});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.message(), "no gemm row to fit the GEMM model on");
  GpuSpec other = CatalogGpu("h100-sxm");
  other.gemm_fixed_us = 5;
  std::vector<ValidationRow> rows = {
      GemmRow("a-1", "a", CatalogGpu("a100-sxm-80gb"), Dtype::kBf16, 4096, 4096, 4096, 240),
      GemmRow("b-1", "b", other, Dtype::kBf16, 4096, 4096, 4096, 700)};
  Result<GemmFit> fit = FitGemmModel(rows);
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.message(),
            "row b-1: the fit shares gemm_fixed_us among the rows' GPUs, but h100-sxm has 5 and "
            "a100-sxm-80gb has 4");
}

// The built-in table on a grid that holds the catalog's values (and a few others): every gemm
// row in one source or another, the fit no worse than the catalog, and the same figures twice,
// the second time with its fits on three threads.
TEST(GemmFitTest, TheBuiltInTable) {
  Result<ValidationTable> table = LoadValidationTable("");
  ASSERT_TRUE(table.ok()) << table.message();
  GemmFitGrid grid;
  grid.efficiency = {0.66, 0.68, 0.70, 0.79, 0.81, 0.84, 0.84, 0.85};
  grid.tile_overhead_k = {128, 192, 256};
  grid.fixed_us = {2, 3, 4};
  grid.stream_k_min_k = {2048, 4096};
  grid.half_tile_rate = {0, 0.7};
  grid.split_k_fixed_us = {1.5, 3};
  Result<GemmFit> fit = FitGemmModel(table->rows, grid);
  ASSERT_TRUE(fit.ok()) << fit.message();
  int gemm_rows = 0, rows_seen = 0;
  for (const ValidationRow& row : table->rows)
    gemm_rows += row.category == ValidationCategory::kGemm;
  for (const GemmFitSource& s : fit->sources) rows_seen += s.rows;
  EXPECT_EQ(fit->rows, gemm_rows);
  EXPECT_EQ(rows_seen, gemm_rows);
  EXPECT_LE(fit->fitted_error, fit->catalog_error);
  EXPECT_GE(fit->held_out_error, fit->fitted_error);
  Result<GemmFit> again = FitGemmModel(table->rows, grid, /*threads=*/3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->fitted.efficiency, fit->fitted.efficiency);
  EXPECT_EQ(again->fitted.tile_overhead_k, fit->fitted.tile_overhead_k);
  EXPECT_EQ(again->held_out_error, fit->held_out_error);
  ASSERT_EQ(again->sources.size(), fit->sources.size());
  for (size_t s = 0; s < fit->sources.size(); ++s) {
    EXPECT_EQ(again->sources[s].held_out.efficiency, fit->sources[s].held_out.efficiency);
    EXPECT_EQ(again->sources[s].held_out.fixed_us, fit->sources[s].held_out.fixed_us);
    EXPECT_EQ(again->sources[s].held_out_error, fit->sources[s].held_out_error);
  }
}

}  // namespace
}  // namespace domino::sim
