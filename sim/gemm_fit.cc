#include "sim/gemm_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "models/base/parallel_for.h"
#include "sim/gemm_model.h"

namespace domino::sim {
namespace {

// A gemm row as the fit sees it: its GPU (a copy whose constants the fit sets), shape, figure
// and group.
struct FitRow {
  GemmCase gemm;
  double measured = 0;  // TFLOP/s
  int group = 0;        // index into GemmFit::groups
  int source = 0;       // index into GemmFit::sources
};

// |predicted / measured - 1| of `row` with `efficiency` for its group's main loop and the
// shared constants of `c`.
double AbsError(FitRow& row, double efficiency, const GemmConstants& c) {
  GemmCase& g = row.gemm;
  (g.dtype == Dtype::kFp8 ? g.gpu.fp8_gemm_efficiency : g.gpu.max_gemm_efficiency) = efficiency;
  g.gpu.gemm_tile_overhead_k = c.tile_overhead_k;
  g.gpu.gemm_fixed_us = c.fixed_us;
  g.gpu.gemm_stream_k_min_k = c.stream_k_min_k;
  g.gpu.gemm_half_tile_rate = c.half_tile_rate;
  g.gpu.gemm_split_k_fixed_us = c.split_k_fixed_us;
  return std::abs(GemmKernelTflops(g.gpu, g.dtype, g.m, g.n, g.k, g.batch) / row.measured - 1);
}

// The sum of |error| over the rows `use` keeps, with constants `c`.
double SumError(std::span<FitRow> rows, const std::vector<bool>& use, const GemmConstants& c) {
  double sum = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (use[i]) sum += AbsError(rows[i], c.efficiency[rows[i].group], c);
  return sum;
}

// Each group's best efficiency on the grid for the rows `use` keeps, with the other constants of
// `c` (a group's rows depend on no other group's efficiency), written into `c`; a group without
// such rows keeps the value `c` has. Returns the sum of |error| at those efficiencies.
double FitEfficiencies(std::span<FitRow> rows, const std::vector<bool>& use, int groups,
                       const GemmFitGrid& grid, GemmConstants& c) {
  double sum = 0;
  for (int g = 0; g < groups; ++g) {
    bool any = false;
    double group_best = std::numeric_limits<double>::infinity();
    for (double e : grid.efficiency) {
      double s = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!use[i] || rows[i].group != g) continue;
        any = true;
        s += AbsError(rows[i], e, c);
      }
      if (!any) break;
      if (s < group_best) group_best = s, c.efficiency[g] = e;
    }
    if (any) sum += group_best;
  }
  return sum;
}

// The grid point with the least sum of |error| over the rows `use` keeps, in two stages: the
// efficiencies with the tile overhead, fixed time and stream-K threshold, the kernel choice's
// two constants as `catalog` has them; then the efficiencies with the kernel choice's two, the
// others as the first stage left them. A group without rows keeps `catalog`'s efficiency, and
// with no row at all nothing is fitted: `catalog`.
GemmConstants Fit(std::span<FitRow> rows, const std::vector<bool>& use, int groups,
                  const GemmConstants& catalog, const GemmFitGrid& grid) {
  GemmConstants best = catalog;
  if (std::find(use.begin(), use.end(), true) == use.end()) return best;
  double best_sum = std::numeric_limits<double>::infinity();
  for (double overhead : grid.tile_overhead_k) {
    for (double fixed : grid.fixed_us) {
      for (double stream_k : grid.stream_k_min_k) {
        GemmConstants c = catalog;
        c.tile_overhead_k = overhead, c.fixed_us = fixed, c.stream_k_min_k = stream_k;
        if (const double sum = FitEfficiencies(rows, use, groups, grid, c); sum < best_sum)
          best_sum = sum, best = c;
      }
    }
  }
  const GemmConstants first = best;
  best_sum = std::numeric_limits<double>::infinity();
  for (double half : grid.half_tile_rate) {
    for (double split : grid.split_k_fixed_us) {
      GemmConstants c = first;
      c.half_tile_rate = half, c.split_k_fixed_us = split;
      if (const double sum = FitEfficiencies(rows, use, groups, grid, c); sum < best_sum)
        best_sum = sum, best = c;
    }
  }
  return best;
}

// What the ids share, cut at dashes: the longest start and the longest end, "mamf-*-bf16" of
// mamf-a100-bf16 and mamf-h100-bf16, "azure-a100-fp16" of azure-a100-fp16-1024x1024x1024 and
// azure-a100-fp16-2048x2048x2048; the whole id of a source with one row.
std::string CommonLabel(const std::vector<std::string>& ids) {
  if (ids.size() == 1) return ids.front();
  std::string prefix = ids.front(), suffix = ids.front();
  for (const std::string& id : ids) {
    size_t n = 0;
    while (n < prefix.size() && n < id.size() && prefix[n] == id[n]) ++n;
    prefix.resize(n);
    n = 0;
    while (n < suffix.size() && n < id.size() &&
           suffix[suffix.size() - 1 - n] == id[id.size() - 1 - n])
      ++n;
    suffix.erase(0, suffix.size() - n);
  }
  const size_t start_dash = prefix.rfind('-'), end_dash = suffix.find('-');
  prefix = start_dash == std::string::npos ? prefix : prefix.substr(0, start_dash);
  suffix = end_dash == std::string::npos ? "" : suffix.substr(end_dash);
  return suffix.empty() ? prefix : prefix + "-*" + suffix;
}

}  // namespace

GemmFitGrid DefaultGemmFitGrid() {
  GemmFitGrid grid;
  for (int i = 60; i <= 95; ++i) grid.efficiency.push_back(i / 100.0);
  for (int k = 0; k <= 512; k += 32) grid.tile_overhead_k.push_back(k);
  for (int h = 0; h <= 16; ++h) grid.fixed_us.push_back(h / 2.0);
  grid.stream_k_min_k = {512, 1024, 2048, 4096, 8192, std::numeric_limits<double>::infinity()};
  grid.half_tile_rate = {0, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9};
  for (int h = 0; h <= 8; ++h) grid.split_k_fixed_us.push_back(h / 2.0);
  return grid;
}

Result<GemmFit> FitGemmModel(std::span<const ValidationRow> table_rows, const GemmFitGrid& grid,
                             int threads) {
  GemmFit fit;
  std::vector<FitRow> rows;
  std::vector<std::vector<std::string>> source_ids;
  const GpuSpec* first = nullptr;
  for (const ValidationRow& row : table_rows) {
    if (row.category != ValidationCategory::kGemm || !row.gemm) continue;
    const GemmCase& g = *row.gemm;
    const GpuSpec& gpu = g.gpu;
    if (first == nullptr) {
      first = &gpu;
      fit.catalog.tile_overhead_k = gpu.gemm_tile_overhead_k;
      fit.catalog.fixed_us = gpu.gemm_fixed_us;
      fit.catalog.stream_k_min_k = gpu.gemm_stream_k_min_k;
      fit.catalog.half_tile_rate = gpu.gemm_half_tile_rate;
      fit.catalog.split_k_fixed_us = gpu.gemm_split_k_fixed_us;
    }
    // The five shared constants must be one value for every GPU the fit covers.
    for (const auto& [key, mine, theirs] :
         {std::tuple{"gemm_tile_overhead_k", gpu.gemm_tile_overhead_k, first->gemm_tile_overhead_k},
          std::tuple{"gemm_fixed_us", gpu.gemm_fixed_us, first->gemm_fixed_us},
          std::tuple{"gemm_stream_k_min_k", gpu.gemm_stream_k_min_k, first->gemm_stream_k_min_k},
          std::tuple{"gemm_half_tile_rate", gpu.gemm_half_tile_rate, first->gemm_half_tile_rate},
          std::tuple{"gemm_split_k_fixed_us", gpu.gemm_split_k_fixed_us,
                     first->gemm_split_k_fixed_us}})
      if (mine != theirs)
        return Error(fmt::format(
            "row {}: the fit shares {} among the rows' GPUs, but {} has {} and {} has {}", row.id,
            key, gpu.name, mine, first->name, theirs));
    FitRow r;
    r.gemm = g;
    r.measured = row.measured;
    const bool fp8 = g.dtype == Dtype::kFp8;
    const double catalog = fp8 ? gpu.fp8_gemm_efficiency : gpu.max_gemm_efficiency;
    r.group = -1;
    for (size_t i = 0; i < fit.groups.size(); ++i)
      if (fit.groups[i].fp8 == fp8 && fit.groups[i].catalog == catalog)
        r.group = static_cast<int>(i);
    if (r.group < 0) {
      r.group = static_cast<int>(fit.groups.size());
      fit.groups.push_back({fp8, catalog, {}});
      fit.catalog.efficiency.push_back(catalog);
    }
    std::vector<std::string>& names = fit.groups[r.group].gpus;
    if (std::find(names.begin(), names.end(), gpu.name) == names.end()) names.push_back(gpu.name);
    r.source = -1;
    for (size_t i = 0; i < fit.sources.size(); ++i)
      if (fit.sources[i].source == row.source) r.source = static_cast<int>(i);
    if (r.source < 0) {
      r.source = static_cast<int>(fit.sources.size());
      fit.sources.push_back({});
      fit.sources.back().source = row.source;
      source_ids.emplace_back();
    }
    source_ids[r.source].push_back(row.id);
    ++fit.sources[r.source].rows;
    rows.push_back(r);
  }
  if (rows.empty()) return Error("no gemm row to fit the GEMM model on");
  if (fit.sources.size() < 2)
    return Error(fmt::format(
        "the fit leaves each source out in turn and predicts its rows from the others: it needs "
        "gemm rows of two sources at least, and every gemm row here is of one ({})",
        fit.sources.front().source));
  fit.rows = static_cast<int>(rows.size());
  const int groups = static_cast<int>(fit.groups.size());

  // The fit on every row (job 0) and each source's held-out fit (job s + 1), on `threads`
  // threads: each sets constants into rows of its own.
  const size_t sources = fit.sources.size();
  std::vector<std::vector<bool>> mine(sources, std::vector<bool>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) mine[rows[i].source][i] = true;
  std::vector<GemmConstants> fitted(sources + 1);
  ParallelFor(sources + 1, threads, [&](size_t job) {
    std::vector<FitRow> own = rows;
    std::vector<bool> use(rows.size(), true);
    if (job > 0) {
      use = mine[job - 1];
      use.flip();  // every row but the source's
    }
    fitted[job] = Fit(own, use, groups, fit.catalog, grid);
  });
  const std::vector<bool> all(rows.size(), true);
  fit.fitted = fitted[0];
  fit.catalog_error = SumError(rows, all, fit.catalog) / fit.rows;
  fit.fitted_error = SumError(rows, all, fit.fitted) / fit.rows;
  for (size_t s = 0; s < sources; ++s) {
    GemmFitSource& source = fit.sources[s];
    source.label = CommonLabel(source_ids[s]);
    source.held_out = fitted[s + 1];
    source.catalog_error = SumError(rows, mine[s], fit.catalog) / source.rows;
    source.fitted_error = SumError(rows, mine[s], fit.fitted) / source.rows;
    source.held_out_error = SumError(rows, mine[s], source.held_out) / source.rows;
    fit.held_out_error += source.held_out_error * source.rows / fit.rows;
  }
  return fit;
}

}  // namespace domino::sim
