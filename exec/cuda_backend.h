#ifndef DOMINO_EXEC_CUDA_BACKEND_H_
#define DOMINO_EXEC_CUDA_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "exec/communicator.h"
#include "exec/cuda_ops.h"
#include "exec/interpreter.h"
#include "exec/reference.h"
#include "hardware/hardware_spec.h"
#include "models/base/result.h"
#include "models/model_spec.h"
#include "planner/schedule.h"

namespace domino::exec {

// What a collective would cost on the real cluster, for `--comm emulate`: the CTAs it holds, the
// HBM traffic it makes and how long it lasts alone (the simulator's cost model says).
struct EmulatedCollective {
  int ctas = 0;
  double hbm_bytes = 0;
  double us = 0;
};

// How the CUDA backend runs TP collectives.
enum class CommMode {
  // Through the launch communicator (MPI) on host copies; one op at a time, timed on the host:
  // the numeric check's mode, no overlap.
  kMpi,
  // NCCL on a high-priority comm stream beside the compute stream, ordered by CUDA events as the
  // schedule says, timed by events: overlap as in training.
  kNccl,
  // On one GPU, each collective replaced by a kernel that holds its CTAs and makes its HBM
  // traffic for its predicted time (CudaOptions::emulated, indexed by op id).
  kEmulate,
};
std::string_view CommModeName(CommMode mode);  // "mpi", "nccl", "emulate"
Result<CommMode> ParseCommMode(std::string_view name);

class CudaRunner;

// How a CUDA runner holds and runs its schedule: the device, the element type, how collectives
// move (and the NCCL bounds), a CUDA graph or eager launches, and where its values come from.
struct CudaOptions {
  int device = 0;
  Dtype dtype = Dtype::kFp32;  // fp32, bf16 or fp16: tensors, GEMM inputs and outputs
  CommMode comm = CommMode::kMpi;
  bool graph = false;  // capture the whole schedule in a CUDA graph once, replay it per run
  int min_ctas = 0;    // NCCL's minCTAs / maxCTAs (0: NCCL's default; exec/nccl_ctas.h)
  int max_ctas = 0;
  double timeout_s = 300;  // longest wait for the GPU or a peer before aborting
  // With kNccl: no communicator of its own; each collective runs on one lent to RunCollective
  // (a whole step's runners share one: exec/step_device.h).
  bool lent_nccl = false;
  std::vector<EmulatedCollective> emulated;
  FillOffsets fill;  // where the schedule sits in a whole step (exec/step.h): its given values
  // The caller fills the tensors with FillRandom before any run (a calibration): the given
  // tensors but the token ids start as zeros instead of their values, computed on the host only
  // to be overwritten.
  bool random_values = false;
  // Another runner of the same schedule whose weights and norm gains this one reads instead of
  // holding its own (a whole step's micro-batches share one copy: exec/step.cc); it must outlive
  // this runner's runs, and the weights are written through it. Gradients stay per runner.
  const CudaRunner* weights_from = nullptr;
};

namespace cuda {
struct Nccl;
}

// Runs a schedule on a GPU. The backend holds rank `rank`'s tensors (of a TP group of `tp`) in
// device memory, initialized like the CPU backend's so `--check` compares them.
class CudaRunner {
 public:
  virtual ~CudaRunner() = default;
  virtual Backend& backend() = 0;
  // One run of the schedule; `host` is the launch communicator (collectives in CommMode::kMpi, the
  // NCCL bootstrap). Op times in microseconds from the run's start.
  virtual Result<Timeline> Run(Communicator& host,
                               const std::function<void(size_t, size_t)>& progress) = 0;
  // Median microseconds of `repeats` runs of op `id` alone after a warm-up, timed by CUDA
  // events. A collective needs CommMode::kNccl (every rank must time it too) or kEmulate.
  virtual Result<double> TimeOp(int32_t id, int repeats) = 0;
  // Microseconds per call of collective `id` as nccl-tests times it: a warm-up, then per batch a
  // barrier over `host` and back-to-back calls timed on the GPU; the median of `repeats` batches.
  // Needs CommMode::kNccl (every rank calls it) or kEmulate.
  virtual Result<double> TimeCollective(int32_t id, int repeats, Communicator& host) = 0;
  // Fills every tensor with random values of the element type (uniform in [-1, 1)), for timing:
  // kernels on zeros or constants draw less power and read fast. Numeric results mean nothing
  // after it.
  virtual Status FillRandom(uint64_t seed) = 0;
  // The same for compute op `id` while `beside` runs on the comm stream (it must last longer).
  virtual Result<double> TimeOpBeside(int32_t id, const EmulatedCollective& beside,
                                      int repeats) = 0;
  // Dense GEMM TFLOP/s of an m x n x k shape in the element type or, `fp8`, in E4M3
  // (cuda::MeasureGemmTflops), the TFLOP/s of each `window_s` of `seconds` of back-to-back n^3
  // GEMMs (cuda::SoakGemm), and the achieved HBM GB/s.
  virtual Result<double> GemmTflops(int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                                    bool fp8) = 0;
  virtual Result<std::vector<double>> SoakGemm(int64_t n, double seconds, double window_s,
                                               bool fp8) = 0;
  virtual Result<double> HbmGBps(size_t bytes) = 0;
  // What one kernel adds to a chain of back-to-back kernels, launched one by one and replayed
  // from a CUDA graph (cuda::MeasureLaunchUs).
  virtual Result<cuda::LaunchOverhead> LaunchOverhead(int kernels, int repeats) = 0;
  // The backend's CUDA context and the device view of a whole tensor (empty for an id the
  // schedule lacks), for a whole step's device transport (exec/step_device.h): work on them goes
  // to the context's streams.
  virtual cuda::Context* context() = 0;
  virtual cuda::DView Device(int32_t tensor) const = 0;
  // Runs TP collective `id` to completion on `nccl` (lent: CudaOptions::lent_nccl), on this
  // backend's comm stream.
  virtual Status RunCollective(int32_t id, cuda::Nccl* nccl) = 0;
};

// The CUDA element type of a plan's dtype: fp32, bf16 or fp16 (an error for the others).
Result<cuda::DType> CudaElementType(Dtype dtype);

// Waits until `event` of `context` (recorded) has happened, polling `nccl` (if any) for a failed
// peer and giving up after `timeout_s`: a dead or stuck peer ends in an error naming `what`, with
// *abort set (the communicator must be aborted, not finalized), instead of a hang.
Status WaitForEvent(cuda::Context* context, int event, cuda::Nccl* nccl, double timeout_s,
                    std::string_view what, bool* abort);
// An NCCL communicator over the ranks of `host` (each its own GPU) on `context`'s comm stream:
// rank 0's unique id reaches every rank through `host`; the CTA bounds and timeout of `options`.
Status InitNcclOver(Communicator& host, cuda::Context* context, const CudaOptions& options,
                    cuda::Nccl** out);

// Fails clearly without CUDA support, without a GPU, or for options the schedule cannot take.
Result<std::unique_ptr<CudaRunner>> MakeCudaRunner(const Schedule& schedule, const ModelSpec& model,
                                                   int rank, int tp, uint64_t seed,
                                                   const CudaOptions& options, Communicator& host);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CUDA_BACKEND_H_
