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

// The soak's TFLOP/s by second: the first seconds, then every fifth, and the last; the fp8 soak
// beside when there is one.
void PrintSoak(const HardwareProfile& p, Dtype dtype, std::ostream& out) {
  const std::vector<double>& t = p.gemm_soak_tflops;
  const std::vector<double>& f = p.gemm_soak_fp8_tflops;
  if (t.empty() && f.empty()) return;
  const std::string type(DtypeName(dtype));
  std::vector<std::string> header = {"soak second"};
  if (!t.empty()) header.insert(header.end(), {"8192^3 " + type + " TFLOP/s", "vs first second"});
  if (!f.empty()) header.insert(header.end(), {"8192^3 fp8 TFLOP/s", "vs first second"});
  Table table(header);
  const size_t seconds = std::max(t.size(), f.size());
  auto cells = [](const std::vector<double>& v, size_t i, std::vector<std::string>& row) {
    if (v.empty()) return;
    const bool have = i < v.size();
    row.push_back(have ? fmt::format("{:.1f}", v[i]) : "-");
    row.push_back(have && v[0] > 0 ? fmt::format("{:+.1f}%", 100 * (v[i] / v[0] - 1)) : "-");
  };
  for (size_t i = 0; i < seconds; ++i) {
    if (i >= 3 && (i + 1) % 5 != 0 && i + 1 != seconds) continue;
    std::vector<std::string> row = {std::to_string(i + 1)};
    cells(t, i, row);
    cells(f, i, row);
    table.AddRow(row);
  }
  table.Print(out);
}

// Each measured shape beside the GEMM model's figure for the plan's GPU in the run's type, and
// beside the published figure where the validation table has one for that GPU, type and shape.
void PrintGemmSamples(const Plan& plan, Dtype dtype, const HardwareProfile& p, std::ostream& os) {
  if (p.gemm_samples.empty()) return;
  Result<sim::ValidationTable> table = sim::LoadValidationTable("");
  const GpuSpec& gpu = plan.cluster.node.gpu;
  Table out({"GEMM m x n x k", "type", "measured TFLOP/s",
             fmt::format("model TFLOP/s ({})", gpu.name), "model error", "published TFLOP/s"});
  for (const auto& g : p.gemm_samples) {
    const Dtype type = g.fp8 ? Dtype::kFp8 : dtype;
    const double flops =
        2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    // No model figure for a type the GPU's catalog entry has no peak for (fp32 on most).
    const double us = gpu.peak(type) > 0
                          ? sim::GemmKernelUs(gpu, type, static_cast<double>(g.m),
                                              static_cast<double>(g.n), static_cast<double>(g.k))
                          : 0;
    const double model = us > 0 && std::isfinite(us) ? flops / us / 1e6 : 0;
    std::string published = "-";
    if (table.ok()) {
      for (const sim::ValidationRow& row : table->rows) {
        if (row.gemm && row.gemm->gpu.name == gpu.name && row.gemm->dtype == type &&
            row.gemm->m == static_cast<double>(g.m) && row.gemm->n == static_cast<double>(g.n) &&
            row.gemm->k == static_cast<double>(g.k))
          published = fmt::format("{:.1f} ({})", row.measured, row.id);
      }
    }
    out.AddRow(
        {fmt::format("{}x{}x{}", g.m, g.n, g.k), std::string(DtypeName(type)),
         fmt::format("{:.1f}", g.tflops), model > 0 ? fmt::format("{:.1f}", model) : "-",
         model > 0 && g.tflops > 0 ? fmt::format("{:+.1f}%", 100 * (model / g.tflops - 1)) : "-",
         published});
  }
  out.Print(os);
}

}  // namespace domino::cli
