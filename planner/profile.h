#ifndef DOMINO_PLANNER_PROFILE_H_
#define DOMINO_PLANNER_PROFILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "models/base/result.h"
#include "planner/schedule.h"

namespace domino {

// A hardware profile measured by `domino calibrate`: the time of every distinct compute op of
// the lowerings it was run for (keyed by OpSignature), and of collectives by kind, group size and
// buffer size. The simulator prices an op from the profile when it has it and from the roofline
// and collective models otherwise. A profile of a device that runs one op at a time (the CPU
// backend) sets `contention: false`: collectives then take no SMs and no memory bandwidth.
struct HardwareProfile {
  std::string device;   // "cpu", "NVIDIA H200", ...
  std::string backend;  // "cpu" | "cuda"
  bool contention = true;
  std::map<std::string, double> compute_us;  // OpSignature -> median microseconds
  struct CollectiveSample {
    std::string kind;  // "allreduce" | "reducescatter" | "allgather"
    int ranks = 0;
    double bytes = 0;
    double us = 0;
  };
  std::vector<CollectiveSample> collectives;
  // Device figures `calibrate --backend cuda` measures (0: not measured): dense GEMM TFLOP/s in
  // the run's element type and achieved HBM bandwidth (a device-to-device copy).
  double gemm_tflops = 0;
  double hbm_GBps = 0;
  // What one kernel adds to a chain of back-to-back kernels, launched one by one and replayed
  // from a CUDA graph (cuda::MeasureLaunchUs); they stand in for the GPU's kernel_launch_us and
  // graph_launch_us (0: not measured).
  double kernel_launch_us = 0;
  double graph_launch_us = 0;
  // `calibrate --soak`: the TFLOP/s of back-to-back 8192^3 GEMMs in each second of the soak, in
  // order (the first near a short benchmark's figure, the last at the clocks the power limit
  // sustains); the ops and gemm_tflops were measured after it.
  std::vector<double> gemm_soak_tflops;
  // `calibrate --soak --fp8-gemms`: the same soak in fp8, after the element type's.
  std::vector<double> gemm_soak_fp8_tflops;
  // `calibrate --gemm-shapes`: GEMMs C[m,n] = A[m,k] B[k,n] timed as GEMM benchmarks time them,
  // in the run's element type or (`--fp8-gemms`) in fp8.
  struct GemmSample {
    int64_t m = 0, n = 0, k = 0;
    double tflops = 0;
    bool fp8 = false;
  };
  std::vector<GemmSample> gemm_samples;
  // Why the fp8 GEMMs could not be measured (`--fp8-gemms` on a GPU without fp8); empty if they
  // were or were not asked for.
  std::string gemm_fp8_error;
  // Compute ops timed alone and beside an emulated collective holding `ctas` SMs and streaming
  // `hbm_GBps` of HBM traffic: how much a collective slows the compute it overlaps.
  struct ContentionSample {
    std::string op;  // OpSignature
    int ctas = 0;
    double hbm_GBps = 0;
    double alone_us = 0;
    double beside_us = 0;
  };
  std::vector<ContentionSample> contention_samples;

  // Measured time of `op`, or a negative number when the profile has none. Collectives
  // interpolate linearly in bytes between the nearest samples of their kind and group size (and
  // extrapolate with the bandwidth of the largest).
  double Lookup(const Op& op, int ranks) const;
};

// The key of a compute op: its function and every shape field ("qkv|m=96|n=96|k=64|...").
std::string OpSignature(const Op& op);
std::string_view CollectiveKindName(CollectiveOp kind);  // "allreduce", ...

Result<HardwareProfile> ParseProfile(std::string_view text, std::string_view file);
Result<HardwareProfile> LoadProfile(const std::string& path);
std::string ProfileToYaml(const HardwareProfile& profile);

}  // namespace domino

#endif  // DOMINO_PLANNER_PROFILE_H_
