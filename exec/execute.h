#ifndef DOMINO_EXEC_EXECUTE_H_
#define DOMINO_EXEC_EXECUTE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
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

// What one execution covers.
enum class Extent {
  // The whole model: token embedding, every layer, final norm, LM head and cross-entropy loss, in
  // one pipeline stage (plans with pp = dp = 1), from reference tokens and labels.
  kModel,
  // One pipeline stage's layer stack (model.layers / pp layers), fed a reference input and a
  // reference gradient of its output.
  kLayerStack,
  // Whole training steps of a 3D plan (exec/step.h): every stage's chunks for every micro-batch,
  // pipeline sends and receives, DP gradient buckets and the Adam step, on tp x cp x pp x dp
  // ranks; on the CPU backend, or on the CUDA backend with its data moved through the host (mpi)
  // or on the device (nccl: exec/step_device.h).
  kStep,
};
std::string_view ExtentName(Extent extent);  // "model", "layers", "step"
Result<Extent> ParseExtent(std::string_view name);
// On the CPU backend: the whole model when the plan has one pipeline stage, one data-parallel
// replica and no context parallelism, whole training steps otherwise; the layer stack on the
// CUDA backend.
Extent DefaultExtent(const Plan& plan, BackendKind backend);
// The schedule an execution of `extent` runs: Lower(plan) for the layer stack, LowerStage with
// the embedding and the head for the whole model. Fails for the whole model of a plan with more
// than one pipeline stage or data-parallel replica (its whole steps run its Iteration:
// exec/step.h), and for Extent::kStep.
Result<Schedule> LowerForExecution(const Plan& plan, Extent extent);

// Adam (no weight decay) on fp32 master weights. A larger eps than training's 1e-8 keeps the
// update a smooth function of the gradient, so that rounding differences between a sharded run
// and the reference stay rounding-sized (with eps -> 0 a gradient near zero flips the update by
// 2 lr).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-4;
};

struct ExecuteOptions {
  BackendKind backend = BackendKind::kCpu;  // the check's reference always runs on the CPU
  std::optional<Extent> extent;  // Execute's schedule; unset: DefaultExtent(plan, backend)
  CudaOptions cuda;              // the CUDA backend's device, element type, collectives, graphs
  // Emulated collectives (CommMode::kEmulate): this process plays rank `emulate_rank` of the
  // plan's TP group alone (the communicator has one rank), so no check is possible.
  int emulate_rank = 0;
  uint64_t seed = 1;
  bool check = false;  // compare with the unsharded single-rank reference
  // Runs of the schedule; the timeline is each op's median over them. Runs after the first only
  // time (the check uses the first run's values).
  int iterations = 1;
  double tolerance = 1e-4;  // largest error allowed, relative to the reference's largest value
  int steps = 2;            // Extent::kStep: training iterations (the check compares after them)
  AdamOptions adam;
  std::function<void(size_t, size_t)> progress;  // ops done, ops in total (this rank)
  // Extent::kStep, for tests: alters each model chunk's schedule (LowerStage of the chunk)
  // before it runs, on every rank alike.
  std::function<void(Schedule&)> alter_chunk;
};

// One tensor compared with the reference: the largest absolute difference, and that difference
// relative to the reference's largest absolute value.
struct TensorCheck {
  std::string name;  // "output", "loss", "input.grad", "l0.qkv.w.grad", "embed.w.grad", ...
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
  // The mean cross-entropy over the micro-batch's tokens (first run), when the schedule has the
  // loss and the backend can read it.
  std::optional<double> loss;
  std::vector<double> losses;  // Extent::kStep: each step's mean loss over the global batch
};

// Executes one micro-batch's forward and backward pass of the plan (its whole model, or one
// stage's layer stack: options.extent) on the CPU or the CUDA backend, this process being rank
// comm.rank() of a TP group of comm.size() = plan.tp ranks. With options.check, rank 0 also runs
// the unsharded reference (tp = 1, no slicing, no sequence parallelism) of the same model or
// layers and compares, gathered over the ranks: the stack's output; the loss (whole model); the
// stack's input gradient (layer stack) or the embedding's gradient (whole model); every layer's
// weight gradients; the final norm's and the untied LM head's gradients (whole model). Vocabulary
// padding, which differs with the TP size, is left out of the comparison. Every rank learns the
// verdict.
Result<ExecuteResult> Execute(const Plan& plan, Communicator& comm, const ExecuteOptions& options);

// As Execute, for a given schedule of the plan (for tests that alter one). What it covers, and so
// what the check compares, is read from the schedule's tensor roles; options.extent is not used.
Result<ExecuteResult> ExecuteSchedule(const Plan& plan, Schedule schedule, Communicator& comm,
                                      const ExecuteOptions& options);

// A whole (unsharded) tensor, on rank 0 of the TP group that gathered it.
struct WholeTensor {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
};
// Gathers this rank's values `mine` of `tensor` from every rank of the TP group `comm` and, on
// rank 0, assembles the unsharded tensor by the tensor's Shard rule: partial sums add up (unless
// `reduced`: they were summed over the group already), replicated tensors are rank 0's.
Result<WholeTensor> GatherWholeTensor(const Tensor& tensor, std::span<const float> mine,
                                      Communicator& comm, bool reduced = false);

// Compares a gathered tensor with the reference's (rank 0): its largest error, absolute and
// relative to the reference's largest value, within `tolerance` or not (NaN never is).
TensorCheck CompareTensors(std::string name, const WholeTensor& got, const WholeTensor& want,
                           double tolerance);

// The plan of the unsharded reference: tp = cp = pp = dp = 1 on one GPU, no slicing, no SP.
Plan ReferencePlan(const Plan& plan);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_EXECUTE_H_
