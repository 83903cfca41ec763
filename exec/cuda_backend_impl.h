// The CUDA backend's class (exec/cuda_backend.h's MakeCudaRunner makes one), shared by the
// three files that define it: cuda_backend.cc (tensors, NCCL, whole runs and their timeline),
// cuda_backend_ops.cc (what each op enqueues: its kernels or its collective) and
// cuda_backend_measure.cc (the calibration's timings). Only they include this header.
#ifndef DOMINO_EXEC_CUDA_BACKEND_IMPL_H_
#define DOMINO_EXEC_CUDA_BACKEND_IMPL_H_

#include <fmt/format.h>

#include <functional>
#include <map>
#include <vector>

#include "exec/cuda_backend.h"
#include "exec/cuda_ops.h"
#include "exec/reference.h"
#include "exec/stream_plan.h"

namespace domino::exec::internal {

// One rank's schedule on one GPU: its tensors in device memory, its compute ops as cuBLAS and
// the kernels of exec/cuda_ops.h on a compute stream, its collectives as NCCL (or their
// emulation) on a comm stream, ordered by events as PlanStreams says and timed by events around
// every op; a whole run eager or replayed from a CUDA graph. Also the calibration's
// measurements (one op, one collective nccl-tests' way, a GEMM, HBM, launch overhead).
class CudaBackend final : public Backend, public CudaRunner {
 public:
  CudaBackend(const Schedule& schedule, const ModelSpec& model, const CudaOptions& options)
      : schedule_(schedule), model_(model), options_(options) {}
  ~CudaBackend() override;

  Status Init(int rank, int tp, uint64_t seed, Communicator& host);

  Backend& backend() override { return *this; }

  Result<Timeline> Run(Communicator& host,
                       const std::function<void(size_t, size_t)>& progress) override;

  Result<double> TimeOp(int32_t id, int repeats) override;

  // nccl-tests' way: a warm-up, then per batch a barrier and kBatch back-to-back calls queued
  // behind a gate, so the events time the GPU's work and not the host's enqueueing.
  Result<double> TimeCollective(int32_t id, int repeats, Communicator& host) override;

  Status FillRandom(uint64_t seed) override;

  Result<double> TimeOpBeside(int32_t id, const EmulatedCollective& beside, int repeats) override;

  Result<double> GemmTflops(int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                            bool fp8) override;

  Result<std::vector<double>> SoakGemm(int64_t n, double seconds, double window_s,
                                       bool fp8) override;

  Result<double> HbmGBps(size_t bytes) override;

  Result<cuda::LaunchOverhead> LaunchOverhead(int kernels, int repeats) override;

  cuda::Context* context() override { return context_; }
  cuda::DView Device(int32_t tensor) const override {
    if (tensor < 0 || tensor >= static_cast<int32_t>(device_.size())) return cuda::DView{};
    return Whole(tensor);
  }

  Status RunCollective(int32_t id, cuda::Nccl* nccl) override;

  // Runs compute op `id` to completion (the interpreter's one-at-a-time mode).
  Status Run(const Schedule& s, int32_t id) override;

  Status Pack(const TensorUse& use, float* out) const override {
    return Ok(cuda::Download(context_, Of(use), out, Fp32(use.tensor)));
  }
  Status Unpack(const TensorUse& use, const float* in) override {
    return Ok(cuda::Upload(context_, Of(use), in, Fp32(use.tensor)));
  }
  Result<std::vector<float>> Read(int32_t tensor) const override;
  Status Zero(int32_t tensor) override;

 private:
  // Per op: start and end (timing events) and done (ordering another stream); then the run's
  // begin (ordering) and origin (timing).
  static constexpr int kEventsPerOp = 3;
  int size() const { return static_cast<int>(schedule_.size()); }
  int StartEvent(int op) const { return kEventsPerOp * op; }
  int EndEvent(int op) const { return kEventsPerOp * op + 1; }
  int DoneEvent(int op) const { return kEventsPerOp * op + 2; }
  int BeginEvent() const { return kEventsPerOp * size(); }
  int OriginEvent() const { return kEventsPerOp * size() + 1; }

  // A CUDA call's status, with what failed: the backend, or op `id`.
  static Status Ok(Status status) {
    if (status.ok()) return status;
    return Error("CUDA backend: " + status.message());
  }
  Status Ok(Status status, int32_t id) const {
    if (status.ok()) return status;
    return Error(fmt::format("op {} ({}): CUDA: {}", id, schedule_.Label(id), status.message()));
  }

  // The tensors the backend's kernels add to rather than overwrite: weight gradients (their GEMMs
  // accumulate over row slices) and norm-weight gradients (dgamma +=). Every run starts them from
  // zero, so a run computes one micro-batch's gradients whatever ran before it (the eager warm-up
  // before a graph's capture, earlier iterations).
  void FindAccumulators();

  // Enqueues zeros into every accumulator on the current stream.
  Status ZeroAccumulators();

  Status AllocateTensors();

  size_t WorkspaceBytes() const;

  // NCCL over the plan's TP group, bootstrapped through the launch communicator.
  Status InitNccl(Communicator& host);

  // Enqueues compute op `id` on the current stream.
  Status Enqueue(int32_t id);

  static bool Contiguous(const cuda::DView& v) { return v.stride == v.cols || v.rows == 1; }

  // A part of a decomposed all-gather or reduce-scatter (Op::part of Op::parts: rows [lo, hi) of
  // the slice's R gathered rows, as the interpreter's RunCollectivePart has it): each rank whose
  // shard holds some of those rows broadcasts them to every rank (all-gather), or has their sums
  // reduced to it (reduce-scatter), all in one NCCL group: only the part's rows move.
  Status EnqueuePart(int32_t id);

  // Enqueues collective `id` on the comm stream: NCCL, or its emulation.
  Status EnqueueCollective(int32_t id);

  // Enqueues the whole schedule on the two streams as PlanStreams says, with timing events
  // around every op.
  Status EnqueueAll(const std::function<void(size_t, size_t)>& progress);

  // Median of `repeats` timed runs of `once` (after a warm-up) on the current stream, each after
  // `before` (work for another stream, or nothing).
  Result<double> TimeMedian(int32_t id, int repeats, const std::function<Status()>& once,
                            const std::function<Status()>& before);

  // Waits until `event` has happened (WaitForEvent); a failed or silent NCCL peer ends in an
  // error and an abort instead of a hang.
  Status WaitFor(int event);

  Result<Timeline> ReadTimeline();

  bool Rms() const { return model_.norm == Norm::kRmsNorm; }
  bool Glu() const { return Gated(model_.activation); }
  bool GeluGate() const { return model_.activation == Activation::kGeglu; }
  // The model's sliding window where it covers the op's layer (the chunk's first layer on), as
  // the CPU backend takes it; 0: none.
  int64_t Window(const Op& op) const {
    return model_.window.TokensAt(options_.fill.layer + op.tags.layer);
  }
  // Its attention dropout, placed as the CPU backend places it (exec/reference.h).
  AttentionDropout Dropout(const Op& op) const {
    return AttentionDropoutAt(options_.fill, seed_, rank_, options_.fill.layer + op.tags.layer, op,
                              schedule_.reads(op)[0].view);
  }
  // The hidden dropout of its layer's attention (`branch` 1) or MLP (2) branch over the
  // residual-stream view `residual`, as the CPU backend places it.
  BranchDropout BranchDrop(const Op& op, int branch, const TensorUse& residual) const {
    return BranchDropoutAt(options_.fill, seed_, rank_, tp_, options_.fill.layer + op.tags.layer,
                           branch, schedule_.tensors()[residual.tensor], residual.view);
  }
  bool SquaredRelu() const { return model_.activation == Activation::kSquaredRelu; }
  // Token ids and labels are fp32 whatever the element type (exact for every vocabulary), and so
  // are the loss statistics (each part's log-sum-exp and the label's logit): in bf16 a
  // log-sum-exp near 9 rounds by up to 0.03, which would scale every logit's gradient by 3%.
  bool Ids(int32_t tensor) const { return IsTokens(schedule_.tensors()[tensor].role); }
  bool Fp32(int32_t tensor) const {
    return Ids(tensor) || schedule_.tensors()[tensor].role.kind == TensorKind::kLoss;
  }
  size_t ElementBytes(int32_t tensor) const {
    return Fp32(tensor) ? sizeof(float) : cuda::DTypeBytes(type_);
  }
  cuda::DView Of(const TensorUse& u) const {
    const Tensor& t = schedule_.tensors()[u.tensor];
    const size_t offset =
        static_cast<size_t>(u.view.row_begin * t.cols + u.view.col_begin) * ElementBytes(u.tensor);
    return cuda::DView{static_cast<char*>(device_[u.tensor]) + offset,
                       u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin,
                       t.cols};
  }
  cuda::DView Whole(int32_t id) const {
    const Tensor& t = schedule_.tensors()[id];
    return cuda::DView{device_[id], t.rows, t.cols, t.cols};
  }

  const Schedule& schedule_;
  ModelSpec model_;
  CudaOptions options_;
  cuda::DType type_ = cuda::DType::kF32;
  int rank_ = 0, tp_ = 1;
  uint64_t seed_ = 1;
  cuda::Context* context_ = nullptr;
  cuda::Nccl* nccl_ = nullptr;
  bool failed_ = false;  // NCCL failed: abort rather than finalize
  bool captured_ = false;
  std::vector<void*> device_;
  std::vector<bool> borrowed_;  // per tensor: device_ is CudaOptions::weights_from's, not ours
  std::vector<int32_t> accumulators_;  // tensors the kernels add to (FindAccumulators)
  std::map<int32_t, cuda::DView> residual_grads_;
  void* stage_in_ = nullptr;
  void* stage_out_ = nullptr;
  std::vector<StreamStep> steps_;
};

}  // namespace domino::exec::internal

#endif  // DOMINO_EXEC_CUDA_BACKEND_IMPL_H_
