#ifndef DOMINO_EXEC_INTERPRETER_H_
#define DOMINO_EXEC_INTERPRETER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "exec/communicator.h"
#include "models/base/result.h"
#include "planner/schedule.h"

namespace domino::exec {

// Backend runs a Schedule's compute ops on the tensors it holds for this rank, and moves views of
// them to and from contiguous buffers for the communicator.
class Backend {
 public:
  virtual ~Backend() = default;
  // Runs compute op `id` (a GEMM, attention, norm, activation, residual).
  virtual Status Run(const Schedule& schedule, int32_t id) = 0;
  // Copies a view, row by row, to `out` (rows * cols floats), or back from `in`.
  virtual Status Pack(const TensorUse& use, float* out) const = 0;
  virtual Status Unpack(const TensorUse& use, const float* in) = 0;
  // This rank's values of a whole tensor (rows x cols, row-major), for checks.
  virtual Result<std::vector<float>> Read(int32_t tensor) const = 0;
  // Zeroes a whole tensor.
  virtual Status Zero(int32_t tensor) = 0;
};

// True for an op of a stack's own kernels that this executor's kernels leave nothing to do for:
// fp8 scaling's amax reductions and updates (fp8 runs as bf16 here), context parallelism's merge
// kernels (the ring folds each block into its running result itself), and the copies around the
// attention, context parallelism's included (its attention reads Q, K and V and writes the
// context and their gradients in place; exec/cp_attention.h keeps what it gathers or trades in
// its own order).
// RunOp does nothing for them, and a calibration does not time them.
bool RunsNothing(const Op& op);

// Runs op `id` of a pass schedule: a compute op on `backend`, a TP collective on `communicator`
// (`in` and `out` are scratch buffers, kept between calls).
Status RunOp(const Schedule& schedule, int32_t id, Backend& backend, Communicator& communicator,
             std::vector<float>& in, std::vector<float>& out);

// Interpret runs every op of `schedule` in issue order: compute ops on `backend`, TP collectives
// on `communicator` (a collective packs its read view, reduces or gathers it, and unpacks into its
// write view). Issue order respects every stream's order and every dependency, and every rank
// issues the same collectives in the same order, so the run is deterministic and cannot deadlock.
// This interpreter runs one op at a time: the measured timeline (wall-clock microseconds from the
// first op) shows no overlap; overlap is the CUDA backend's business. `progress`, if set, is
// called after each op with (ops done, ops in total).
Result<Timeline> Interpret(const Schedule& schedule, Backend& backend, Communicator& communicator,
                           const std::function<void(size_t, size_t)>& progress = {});

}  // namespace domino::exec

#endif  // DOMINO_EXEC_INTERPRETER_H_
