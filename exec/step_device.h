#ifndef DOMINO_EXEC_STEP_DEVICE_H_
#define DOMINO_EXEC_STEP_DEVICE_H_

// The device half of a whole training step on the CUDA backend with --comm nccl (exec/step.h):
// the passes' TP collectives on one NCCL communicator of the TP group that every micro-batch's
// runner borrows; pipeline transfers as NCCL sends and receives, each direction between two stages
// on a communicator and stream of its own; gradient buckets, master weights and Adam's moments in
// fp32 device memory, their DP (and sequence-parallel TP) collectives as NCCL on a dp-comm stream.
// The step still walks its ops in issue order: the host waits (bounded, polling NCCL's errors) for
// a receive before the pass that reads it and for each bucket collective, never for a send until
// the step ends, so the step cannot deadlock where the host-transport step does not.
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "exec/communicator.h"
#include "exec/cuda_backend.h"
#include "exec/dropout.h"
#include "exec/execute.h"
#include "models/base/result.h"

namespace domino::exec {

// A run of a tensor's rows, [row_begin, row_end), and the dropout its elements take
// (exec/dropout.h: element (r, c) of the run is its r-th row's).
struct DroppedRows {
  int64_t row_begin = 0, row_end = 0;
  BranchDropout dropout;
};

class StepDevice {
 public:
  virtual ~StepDevice() = default;
  // fp32 device memory of `count` elements, zeroed, owned by this object.
  virtual Result<float*> Floats(int64_t count) = 0;
  virtual Status Zero(float* data, int64_t count) = 0;
  virtual Status Upload(const float* host, float* data, int64_t count) = 0;
  virtual Status Download(const float* data, float* host, int64_t count) = 0;
  // data[0, n) += scale x each runner's whole `tensor` (row-major, n its elements).
  virtual Status Accumulate(std::span<CudaRunner* const> runners, int32_t tensor, float* data,
                            float scale) = 0;
  // data[0, n) += src[0, n).
  virtual Status Add(const float* src, float* data, int64_t count) = 0;
  // Each runner's whole `tensor` = data, in its element type.
  virtual Status Store(const float* data, std::span<CudaRunner* const> runners, int32_t tensor) = 0;
  // Adam (exec/execute.h) on `count` elements, training step `step` (from 1).
  virtual Status Adam(float* master, float* m, float* v, const float* grad, int64_t count,
                      const AdamOptions& adam, int step) = 0;
  // fp32 collectives in place: over the TP group, or over the DP x CP replicas (reduce-scatter:
  // `data` holds replicas x shard elements, this replica's shard summed into its own place;
  // all-gather: each replica's shard from its place into everyone's).
  virtual Status AllReduceTp(float* data, int64_t count) = 0;
  virtual Status AllReduceDp(float* data, int64_t count) = 0;
  virtual Status ReduceScatterDp(float* data, int64_t shard) = 0;
  virtual Status AllGatherDp(float* data, int64_t shard) = 0;
  // The runner's TP collective `id` (of a pass) on the TP group's NCCL communicator of the element
  // type, lent to the runner (CudaOptions::lent_nccl); waits.
  virtual Status TpCollective(CudaRunner& runner, int32_t id) = 0;
  // To and from pipeline stage `peer`, in the runner's element type (Sum: tensors a + b, b's row
  // runs through `dropout`: a residual add after its branch's dropout) or fp32. Sends return at
  // once; receives wait.
  virtual Status SendSum(CudaRunner& runner, int32_t a, int32_t b,
                         std::span<const DroppedRows> dropout, int peer) = 0;
  virtual Status Send(CudaRunner& runner, int32_t tensor, int peer) = 0;
  virtual Status Recv(CudaRunner& runner, int32_t tensor, int peer) = 0;
  virtual Status SendFloats(const float* data, int64_t count, int peer) = 0;
  virtual Status RecvFloats(float* data, int64_t count, int peer) = 0;
  // Waits for every send: the end of a step.
  virtual Status Finish() = 0;
};

// This rank's device transport: `links` lists the (from, to) stage pairs whose sends the
// iteration has (the same on every rank of the pipeline); `tp`, `pp` and `dp` are the rank's host
// groups (the NCCL bootstrap; its stage is its rank in `pp`). Fails clearly without CUDA.
Result<std::unique_ptr<StepDevice>> MakeStepDevice(const CudaOptions& options,
                                                   std::span<const std::pair<int, int>> links,
                                                   Communicator& tp, Communicator& pp,
                                                   Communicator& dp);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_STEP_DEVICE_H_
