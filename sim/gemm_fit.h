#ifndef DOMINO_SIM_GEMM_FIT_H_
#define DOMINO_SIM_GEMM_FIT_H_

#include <span>
#include <string>
#include <vector>

#include "models/base/result.h"
#include "sim/validate.h"

namespace domino::sim {

// The GEMM model's constants (sim/gemm_model.h, hardware/catalog/gpus) fitted on the gemm rows of
// a validation table by a grid search, and checked leave-one-source-out: fitted without one
// source's rows, then predicting them. `domino validate --fit` prints it.
//
// What is fitted: each main-loop efficiency the catalog gives the rows' GPUs, one value per
// distinct catalog value and precision (max_gemm_efficiency for 16-bit rows,
// fp8_gemm_efficiency for fp8 rows), shared by the GPUs that share it in the catalog; and the
// five constants every GPU shares (gemm_tile_overhead_k, gemm_fixed_us, gemm_stream_k_min_k, and
// the kernel choice's gemm_half_tile_rate and gemm_split_k_fixed_us). It searches in two stages,
// each over every point of its grid: the efficiencies with the first three (the kernel choice's
// two as the catalog has them), then the efficiencies with the kernel choice's two (the first
// three as the first stage found them); a grid over all five at once would take minutes.
// The objective is the rows' mean |predicted / measured - 1|, as `validate` reports it. The grid
// holds the catalog's values, so the fitted error is never above the catalog's; ties keep the
// first point of the grid in its order (deterministic).
struct GemmFitGrid {
  std::vector<double> efficiency;  // main-loop fractions of the dense peak
  std::vector<double> tile_overhead_k;
  std::vector<double> fixed_us;
  std::vector<double> stream_k_min_k;  // a value above any row's k: never stream-K
  std::vector<double> half_tile_rate;  // 0: no kernel of tiles half as wide
  std::vector<double> split_k_fixed_us;
};
// Efficiency 0.60-0.95 by 0.01, tile overhead 0-512 k-steps by 32, fixed 0-8 us by 0.5,
// stream-K from k = 512, 1024, 2048, 4096, 8192 or never; half tiles at 0 (none), 0.5, 0.6,
// 0.65, 0.7, 0.75, 0.8 or 0.9 of the rate, split-K's reduction 0-4 us by 0.5.
GemmFitGrid DefaultGemmFitGrid();

// The GPUs whose catalog gives one main-loop efficiency to one precision's GEMMs.
struct EfficiencyGroup {
  bool fp8 = false;
  double catalog = 0;
  std::vector<std::string> gpus;  // catalog names, in the rows' order
};

struct GemmConstants {
  std::vector<double> efficiency;  // by GemmFit::groups
  double tile_overhead_k = 0, fixed_us = 0, stream_k_min_k = 0;
  double half_tile_rate = 0, split_k_fixed_us = 0;
};

// One source left out: its rows predicted with the constants fitted on all rows and on the
// others only (an efficiency group no other row constrains keeps its catalog value).
struct GemmFitSource {
  std::string source;  // the rows' `source`
  std::string label;   // what its row ids share, cut at dashes ("mamf-*-bf16", ...)
  int rows = 0;
  double catalog_error = 0;   // mean |error| of its rows with the catalog's constants
  double fitted_error = 0;    // with the constants fitted on every row
  double held_out_error = 0;  // with the constants fitted without its rows
  GemmConstants held_out;     // those constants
};

struct GemmFit {
  std::vector<EfficiencyGroup> groups;
  GemmConstants catalog, fitted;
  int rows = 0;
  double catalog_error = 0, fitted_error = 0;  // mean |error| over every gemm row
  double held_out_error = 0;           // each row predicted by the fit without its source's rows
  std::vector<GemmFitSource> sources;  // in the order of their first row
};

// Fits on the gemm rows of `rows` (the others are ignored). An error when there are none, or
// when the rows' GPUs disagree on a constant the fit shares among them. The fit on every row and
// each source's held-out fit run on `threads` threads; the result is the same with any count.
Result<GemmFit> FitGemmModel(std::span<const ValidationRow> rows,
                             const GemmFitGrid& grid = DefaultGemmFitGrid(), int threads = 1);

}  // namespace domino::sim

#endif  // DOMINO_SIM_GEMM_FIT_H_
