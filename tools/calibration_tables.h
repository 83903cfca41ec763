#ifndef DOMINO_TOOLS_CALIBRATION_TABLES_H_
#define DOMINO_TOOLS_CALIBRATION_TABLES_H_

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace domino::cli {

// `calibrate --gemm-shapes`: "table" (the distinct shapes of `domino validate`'s GEMM rows, in
// table order) or MxNxK[,MxNxK...], each dimension a positive integer below 2^31.
Result<std::vector<std::array<int64_t, 3>>> ParseGemmShapes(const std::string& text);

// The soak's TFLOP/s by second (HardwareProfile::gemm_soak_tflops, in the run's `dtype`, and
// gemm_soak_fp8_tflops beside): the first three seconds, then every fifth, and the last, each
// against its first second. Prints nothing without a soak.
void PrintSoak(const HardwareProfile& profile, Dtype dtype, std::ostream& out);

// Each measured GEMM shape (HardwareProfile::gemm_samples) with its type (the run's `dtype`, or
// fp8) beside the GEMM model's TFLOP/s for the plan's GPU in that type (no figure where the GPU
// has no peak in it) and beside the published figure where the validation table has one for
// that GPU, type and shape. Prints nothing without samples.
void PrintGemmSamples(const Plan& plan, Dtype dtype, const HardwareProfile& profile,
                      std::ostream& out);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_CALIBRATION_TABLES_H_
