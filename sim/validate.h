#ifndef DOMINO_SIM_VALIDATE_H_
#define DOMINO_SIM_VALIDATE_H_

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/collective_cost.h"
#include "models/base/embedded_file.h"
#include "models/base/result.h"
#include "planner/plan.h"

namespace domino::sim {

// The kinds of measurement domino predicts: a whole training iteration, one GEMM on one GPU, one
// NCCL collective as nccl-tests measures it, one GEMM beside a kernel that holds SMs (contention),
// a model's transformer layers forward and backward in a loop on one GPU (layer).
enum class ValidationCategory { kEndToEnd, kGemm, kCollective, kContention, kLayer };
inline constexpr int kValidationCategoryCount = 5;
std::string_view ValidationCategoryName(ValidationCategory category);  // "end-to-end", ...

// Mean and largest |predicted / measured - 1| of a category.
struct ErrorBound {
  double mean = 0;
  double max = 0;
};

// Per category: the target the model is built to meet, and the guard `validate --check` (a CTest)
// enforces so that no change makes the model worse than it is. Where the model does not meet its
// target yet, the guard is today's error rounded up and the report says so.
struct ErrorBounds {
  ErrorBound target;
  ErrorBound guard;
};

// One GEMM C[m,n] = A[m,k] B[k,n] of `dtype` on one GPU.
struct GemmCase {
  GpuSpec gpu;
  Dtype dtype = Dtype::kBf16;
  double m = 0, n = 0, k = 0;
  double batch = 1;  // a strided batch of that many GEMMs in one kernel
};

// One collective over every GPU of `cluster`, of nccl-tests size `bytes`, by NCCL's own choice of
// algorithm or the one the source forced.
struct CollectiveCase {
  ClusterSpec cluster;
  Collective op = Collective::kAllReduce;
  double bytes = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kAuto;
};

// One 16-bit GEMM on one GPU beside a kernel that holds `sms_held` whole SMs for `hold_us` (a
// collective's CTAs), launched before the GEMM or while it runs; `alone_us` is the GEMM's
// measured time alone, which the prediction scales the GEMM model to.
struct ContentionCase {
  GpuSpec gpu;
  double m = 0, n = 0, k = 0;
  int sms_held = 0;
  double hold_us = 0;
  bool gemm_first = false;
  double alone_us = 0;
};

// The GEMM's time beside the holder over its time alone, as the engine runs the two (the holder
// launched first: with the GEMM; second: just after it); `detail` says why.
double ContentionSlowdown(const ContentionCase& c, std::string* detail = nullptr);

// What a row's figure measures, in the unit domino predicts.
enum class MeasuredUnit { kIterationS, kTflops, kBusbwGBps, kTimeUs, kSlowdown, kLayerMs };
std::string_view MeasuredUnitName(MeasuredUnit unit);  // "iteration_s", "tflops", ...

// ValidationRow is one published measurement (docs/validation/measurements.yaml): where it comes
// from, the configuration domino predicts, and the figure.
struct ValidationRow {
  std::string id;
  ValidationCategory category = ValidationCategory::kEndToEnd;
  std::string source;            // the publication, table or figure
  std::string quote;             // the line the figure comes from
  std::string assumed;           // values the source does not state, and the rule that chose them
  std::string derived;           // how `measured` follows from the published figure, when derived
  std::string unresolved;        // what was checked of an error the model cannot explain
  int line = 0;                  // of the row in the table file
  std::optional<Plan> plan;      // end-to-end and layer (a plan on one GPU)
  std::optional<GemmCase> gemm;  // gemm
  std::optional<CollectiveCase> collective;  // collective
  std::optional<ContentionCase> contention;  // contention
  MeasuredUnit unit = MeasuredUnit::kIterationS;
  double measured = 0;
};

// Something published that no row expresses, and why: each reason names what domino lacks.
struct ExcludedMeasurement {
  std::string what, source, reason;
};

struct ValidationTable {
  std::string file;
  std::vector<ValidationRow> rows;
  std::vector<ExcludedMeasurement> excluded;
};

// Parses a table (format in docs/validation/measurements.yaml's header). Every row is checked
// as its loader checks it: a plan as `simulate --plan`, a GPU and cluster by catalog name.
// Errors name the file, the row's line and id, and the rule.
Result<ValidationTable> ParseValidationTable(std::string_view text, std::string_view file);
// Loads the table at `path`, or the built-in one (docs/validation/measurements.yaml, embedded)
// when `path` is empty.
Result<ValidationTable> LoadValidationTable(const std::string& path);

// One row predicted: error = predicted / measured - 1.
struct RowResult {
  const ValidationRow* row = nullptr;
  double predicted = 0;
  double error = 0;
  std::string detail;  // the prediction's own figures: algorithm, MFU, ...
  // End-to-end: the share of the predicted iteration that stage 0's GEMMs ran; layer: of the
  // layers' time (0 otherwise).
  double gemm_share = 0;
  // End-to-end: the plan's memory per GPU on its most loaded stage (planner/memory_model.h) and
  // the GPU's capacity, in GiB (0 otherwise).
  double memory_gib = 0, capacity_gib = 0;
};

// The end-to-end rows' memory beside their GPUs' capacity. A published run ran, so its plan
// fits: one the memory model says does not is an error of that model, which `validate --check`
// fails on (the planner would never propose such a plan).
struct MemoryFit {
  int rows = 0;
  std::vector<std::string> over;  // ids of the rows that do not fit
  std::string fullest_id;         // the row with the largest memory / capacity
  double fullest_gib = 0, fullest_capacity_gib = 0;
};
MemoryFit MemoryFitOf(std::span<const RowResult> results);

// What an end-to-end row's error would ask of the GEMMs if it were all GEMM time: the factor on
// their predicted time that would make the prediction the measurement, 1 + (measured -
// predicted) / (gemm_share x predicted); 0 for rows without GEMM time, and where no factor can
// close it (GEMMs taking no time would still leave the prediction above). A diagnostic, never
// applied: one factor across a source's rows points at compute throughput (clocks, kernels), a
// scatter at something else.
double GemmFactorToClose(const RowResult& result);

// End-to-end rows grouped by where they come from (the id's first word, "dgxc", "mlm21", ...)
// and precision, with the range of GemmFactorToClose over each group and its rows' mean error.
struct GemmGapGroup {
  std::string source;  // the ids' first word
  std::string precision;
  int rows = 0;
  double min_share = 0, max_share = 0;
  double min_factor = 0, max_factor = 0;
  double mean_error = 0, mean_abs_error = 0;  // the rows' RowResult::error, signed and not
};
std::vector<GemmGapGroup> GemmGapByGroup(std::span<const RowResult> results);

// End-to-end rows measured in 16 bits (bf16 or fp16) and again in fp8, by the same source with
// the plan otherwise the same (but for the gradients' type, which some recipes change with it),
// grouped by the ids' first word and the model: the range of fp8's speedup (16-bit iteration / fp8
// iteration) measured and predicted, and of the factor on the 16-bit row's predicted GEMM time that
// makes its predicted speedup the measured one were the fp8 prediction right, (measured speedup x
// fp8 predicted - (1 - share) x 16-bit predicted) / (share x 16-bit predicted). A diagnostic, never
// applied: a factor above 1 says the 16-bit GEMMs ran slower next to fp8's than the GEMM model has
// them, whatever the two rows share.
struct Fp8PairGroup {
  std::string source;  // the ids' first word
  std::string model;
  int pairs = 0;
  double min_measured = 0, max_measured = 0;
  double min_predicted = 0, max_predicted = 0;
  double min_factor = 0, max_factor = 0;
};
std::vector<Fp8PairGroup> Fp8SpeedupByGroup(std::span<const RowResult> results);

// Predicts one row with the catalog's constants.
Result<RowResult> PredictRow(const ValidationRow& row);

struct CategorySummary {
  ValidationCategory category = ValidationCategory::kEndToEnd;
  int rows = 0;
  double mean_abs_error = 0;
  double max_abs_error = 0;
  std::string worst_id;
  ErrorBounds bounds;
  bool Within(const ErrorBound& b) const {
    return mean_abs_error <= b.mean && max_abs_error <= b.max;
  }
};

ErrorBounds BoundsOf(ValidationCategory category);

// Per-category mean and max |error| of `results` (categories without rows are left out).
std::vector<CategorySummary> Summarize(std::span<const RowResult> results);

}  // namespace domino::sim

#endif  // DOMINO_SIM_VALIDATE_H_
