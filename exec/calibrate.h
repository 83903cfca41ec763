#ifndef DOMINO_EXEC_CALIBRATE_H_
#define DOMINO_EXEC_CALIBRATE_H_

#include "exec/communicator.h"
#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace domino::exec {

struct CalibrateOptions {
  int repeats = 7;  // timed runs per op after one warm-up; the median is kept
};

// Measures, on the CPU backend, every distinct compute op of the plan's lowering (GEMMs,
// attention, norms, activations, residuals, forward and backward) and, when the communicator
// has more than one rank, every distinct TP collective of it, nccl-tests style (each rank times
// the same calls; rank 0's medians are kept). Every rank must call it; the profile is complete
// on rank 0. The CPU runs one op at a time, so the profile says `contention: false`.
Result<HardwareProfile> CalibrateCpu(const Plan& plan, Communicator& comm,
                                     const CalibrateOptions& options = {});

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CALIBRATE_H_
