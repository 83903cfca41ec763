// The tables `domino calibrate` prints about GEMMs on a GPU (tools/calibration_tables.h).
#include "tools/calibration_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "sim/gemm_model.h"
#include "sim/validate.h"
#include "tools/table.h"

namespace domino::cli {

// --gemm-shapes: "table" (the shapes of `domino validate`'s GEMM rows) or MxNxK[,MxNxK...].
Result<std::vector<std::array<int64_t, 3>>> ParseGemmShapes(const std::string& text) {
  std::vector<std::array<int64_t, 3>> shapes;
  if (text == "table") {
    Result<sim::ValidationTable> table = sim::LoadValidationTable("");
    if (!table.ok()) return table.error();
    for (const sim::ValidationRow& row : table->rows) {
      if (!row.gemm) continue;
      const std::array<int64_t, 3> shape{static_cast<int64_t>(row.gemm->m),
                                         static_cast<int64_t>(row.gemm->n),
                                         static_cast<int64_t>(row.gemm->k)};
      if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
    return shapes;
  }
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    std::array<int64_t, 3> shape{};
    char x1 = 0, x2 = 0;
    std::istringstream in(item);
    in >> shape[0] >> x1 >> shape[1] >> x2 >> shape[2];
    if (!in || x1 != 'x' || x2 != 'x' || !(in >> std::ws).eof() || shape[0] < 1 || shape[1] < 1 ||
        shape[2] < 1 || shape[0] > INT32_MAX || shape[1] > INT32_MAX || shape[2] > INT32_MAX)
      return Error(
          fmt::format("--gemm-shapes: '{}' is not MxNxK (three positive integers below 2^31, e.g. "
                      "8192x8192x8192), and the list is not 'table'",
                      item));
    shapes.push_back(shape);
  }
  if (shapes.empty()) return Error("--gemm-shapes: no shape given");
  return shapes;
}

// The soak's TFLOP/s by second: the first seconds, then every fifth, and the last.
void PrintSoak(const HardwareProfile& p, std::ostream& out) {
  const std::vector<double>& t = p.gemm_soak_tflops;
  if (t.empty()) return;
  Table table({"soak second", "8192^3 GEMM TFLOP/s", "vs first second"});
  for (size_t i = 0; i < t.size(); ++i) {
    if (i >= 3 && (i + 1) % 5 != 0 && i + 1 != t.size()) continue;
    table.AddRow({std::to_string(i + 1), fmt::format("{:.1f}", t[i]),
                  t[0] > 0 ? fmt::format("{:+.1f}%", 100 * (t[i] / t[0] - 1)) : "-"});
  }
  table.Print(out);
}

// Each measured shape beside the GEMM model's figure for the plan's GPU in the run's type, and
// beside the published figure where the validation table has one for that GPU, type and shape.
void PrintGemmSamples(const Plan& plan, Dtype dtype, const HardwareProfile& p, std::ostream& os) {
  if (p.gemm_samples.empty()) return;
  Result<sim::ValidationTable> table = sim::LoadValidationTable("");
  const GpuSpec& gpu = plan.cluster.node.gpu;
  Table out({"GEMM m x n x k", "measured TFLOP/s",
             fmt::format("model TFLOP/s ({} {})", gpu.name, DtypeName(dtype)), "model error",
             "published TFLOP/s"});
  for (const auto& g : p.gemm_samples) {
    const double flops =
        2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    // No model figure for a type the GPU's catalog entry has no peak for (fp32 on most).
    const double us = gpu.peak(dtype) > 0
                          ? sim::GemmKernelUs(gpu, dtype, static_cast<double>(g.m),
                                              static_cast<double>(g.n), static_cast<double>(g.k))
                          : 0;
    const double model = us > 0 && std::isfinite(us) ? flops / us / 1e6 : 0;
    std::string published = "-";
    if (table.ok()) {
      for (const sim::ValidationRow& row : table->rows) {
        if (row.gemm && row.gemm->gpu.name == gpu.name && row.gemm->dtype == dtype &&
            row.gemm->m == static_cast<double>(g.m) && row.gemm->n == static_cast<double>(g.n) &&
            row.gemm->k == static_cast<double>(g.k))
          published = fmt::format("{:.1f} ({})", row.measured, row.id);
      }
    }
    out.AddRow(
        {fmt::format("{}x{}x{}", g.m, g.n, g.k), fmt::format("{:.1f}", g.tflops),
         model > 0 ? fmt::format("{:.1f}", model) : "-",
         model > 0 && g.tflops > 0 ? fmt::format("{:+.1f}%", 100 * (model / g.tflops - 1)) : "-",
         published});
  }
  out.Print(os);
}

}  // namespace domino::cli
