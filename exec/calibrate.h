#ifndef DOMINO_EXEC_CALIBRATE_H_
#define DOMINO_EXEC_CALIBRATE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/communicator.h"
#include "exec/cuda_backend.h"
#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace domino::exec {

struct CalibrateOptions {
  int repeats = 7;  // timed runs per op after one warm-up; the median is kept
  // CalibrateCuda: the device and element type; collectives run on NCCL when the communicator
  // has the plan's tp ranks.
  CudaOptions cuda;
  // CalibrateCuda: a collective as the plan's cost model predicts it (CTAs, HBM traffic and time
  // alone), to time the layer stack's largest GEMM and largest memory-bound op beside; ctas 0:
  // skip.
  EmulatedCollective beside;
  // CalibrateCuda: seconds of back-to-back 8192^3 GEMMs before anything is timed, so that the
  // ops are timed at the clocks the power limit sustains (0: none; the profile keeps each
  // second's TFLOP/s), and GEMM shapes {m, n, k} to time as GEMM benchmarks do.
  double soak_seconds = 0;
  std::vector<std::array<int64_t, 3>> gemm_shapes;
  // CalibrateCuda: the soak and the GEMM shapes again in fp8 (E4M3 operands, a bf16 output,
  // cuBLASLt), after the element type's: how the two types' throughput holds under the power
  // limit. Shapes whose m or k is not a multiple of 16 (cuBLASLt's fp8 kernels' leading
  // dimensions) are timed in the element type only; an fp8 failure is kept in the profile's
  // gemm_fp8_error and never ends the calibration: a GPU below compute capability 8.9 or a
  // failed fp8 soak ends the fp8 measurements, a shape without an fp8 kernel skips that shape.
  bool fp8_gemms = false;
  // CalibrateCuda: told a line as each soak and each GEMM shape is measured, so that a run cut
  // short still shows them.
  std::function<void(const std::string&)> progress;
  // Called on every rank after each measurement (a compute op or collective timed, a GEMM shape,
  // a soak, a device figure), with their count so far: a watchdog's beat (no soak lasts longer
  // than soak_seconds between two calls).
  std::function<void(size_t)> measured;
};

// Measures, on the CPU backend, every distinct compute op of the plan's layer stack (GEMMs,
// attention, norms, activations, residuals, forward and backward) and of the model's ends
// (embedding, final norm, LM head and loss, lowered with one layer) and, when the communicator
// has more than one rank, every distinct TP collective of both, nccl-tests style (each rank times
// the same calls; rank 0's medians are kept). Every rank must call it; the profile is complete
// on rank 0. The CPU runs one op at a time, so the profile says `contention: false`.
Result<HardwareProfile> CalibrateCpu(const Plan& plan, Communicator& comm,
                                     const CalibrateOptions& options = {});

// The same on the CUDA backend, timed by CUDA events on tensors of random values (the layer
// stack's runner released before the ends' is made): every distinct compute op, and with the plan's
// tp ranks every distinct TP collective on NCCL as nccl-tests times them (a warm-up, a barrier,
// batches of back-to-back calls timed on the GPU; every rank times the same calls, rank 0's medians
// are kept). Also the device's dense GEMM TFLOP/s, its achieved HBM bandwidth, contention samples
// (options.beside), the soak's TFLOP/s per second and the GEMM shapes' TFLOP/s. The profile says
// `contention: true`.
Result<HardwareProfile> CalibrateCuda(const Plan& plan, Communicator& comm,
                                      const CalibrateOptions& options = {});

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CALIBRATE_H_
