#ifndef DOMINO_EXEC_EXECUTE_H_
#define DOMINO_EXEC_EXECUTE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "exec/communicator.h"
#include "exec/cuda_backend.h"
#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino::exec {

// Where the schedule's compute runs.
enum class BackendKind {
  kCpu,   // Eigen, fp32 (exec/cpu_backend.h)
  kCuda,  // cuBLAS and own kernels (exec/cuda_backend.h)
};
std::string_view BackendName(BackendKind kind);  // "cpu", "cuda"
Result<BackendKind> ParseBackendKind(std::string_view name);

struct ExecuteOptions {
  BackendKind backend = BackendKind::kCpu;  // the check's reference always runs on the CPU
  CudaOptions cuda;  // the CUDA backend's device, element type, collectives, graphs
  // Emulated collectives (CommMode::kEmulate): this process plays rank `emulate_rank` of the
  // plan's TP group alone (the communicator has one rank), so no check is possible.
  int emulate_rank = 0;
  uint64_t seed = 1;
  bool check = false;  // compare with the unsharded single-rank reference
  // Runs of the schedule; the timeline is each op's median over them. Runs after the first only
  // time (the check uses the first run's values).
  int iterations = 1;
  double tolerance = 1e-4;  // largest error allowed, relative to the reference's largest value
  std::function<void(size_t, size_t)> progress;  // ops done, ops in total (this rank)
};

// One tensor compared with the reference: the largest absolute difference, and that difference
// relative to the reference's largest absolute value.
struct TensorCheck {
  std::string name;  // "output", "input.grad", "l0.qkv.w.grad", ...
  int64_t rows = 0, cols = 0;
  double max_abs_error = 0;
  double rel_error = 0;
  double reference_max = 0;
  bool ok = false;
};

struct ExecuteResult {
  Schedule schedule;
  // This rank's measured timeline. Over several iterations: each op's median duration laid end
  // to end (one op at a time), or the run of median length (streams that overlap).
  Timeline timeline;
  std::vector<TensorCheck> checks;  // rank 0 only, with options.check
  bool passed = true;               // on every rank: every check passed (or none ran)
};

// Executes the plan's layer stack (forward and backward of one micro-batch) on the CPU or the CUDA
// backend, this process being rank comm.rank() of a TP group of comm.size() = plan.tp ranks. With
// options.check, rank 0 also runs the unsharded reference (tp = 1, no slicing, no sequence
// parallelism) of the same layers and compares the stack's output, its input gradient and every
// weight gradient, gathered over the ranks; every rank learns the verdict.
Result<ExecuteResult> Execute(const Plan& plan, Communicator& comm, const ExecuteOptions& options);

// As Execute, for a given schedule of the plan (for tests that alter one).
Result<ExecuteResult> ExecuteSchedule(const Plan& plan, Schedule schedule, Communicator& comm,
                                      const ExecuteOptions& options);

// The plan of the unsharded reference: tp = pp = dp = 1 on one GPU, no slicing, no SP.
Plan ReferencePlan(const Plan& plan);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_EXECUTE_H_
