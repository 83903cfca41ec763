#ifndef DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_
#define DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_

// The fake GPU of fake_cuda_ops.cc: the durations it gives ops, and what it counted.
namespace domino::exec::fake {

inline constexpr double kLaunchUs = 2;
inline constexpr double kUsPerFlop = 1e-6;  // a GEMM: launch + 1 us per MFLOP
inline constexpr double kElementwiseUs = 3;
inline constexpr double kAttentionUs = 20;
inline constexpr double kCopyUs = 1;
inline constexpr double kNcclUs = 40;
inline constexpr double kPeakTflops = 500;
inline constexpr double kHbmGBps = 3000;

struct Stats {
  int launches[2] = {0, 0};  // per stream: compute, comm
  int waits = 0;             // cross-stream waits that took effect
  int emulated = 0;          // emulated collectives launched
  int emulated_ctas = 0;     // CTAs of the last one
  int captures = 0;
  int graph_launches = 0;
};

// Since the last context was created.
const Stats& Counters();

}  // namespace domino::exec::fake

#endif  // DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_
