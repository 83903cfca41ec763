#ifndef DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_
#define DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_

// The fake GPU of fake_cuda_ops.cc: the durations it gives ops, and what it counted.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace domino::exec::fake {

inline constexpr double kLaunchUs = 2;
inline constexpr double kGraphLaunchUs = 0.5;  // what MeasureLaunchUs says a graph's kernel adds
inline constexpr double kUsPerFlop = 1e-6;     // a GEMM: launch + 1 us per MFLOP
inline constexpr double kElementwiseUs = 3;
inline constexpr double kAttentionUs = 20;
inline constexpr double kCopyUs = 1;
inline constexpr double kNcclUs = 40;
// A non-blocking NCCL call finishes enqueueing this long after the host made it: the comm
// stream cannot start the collective before, and an event recorded before the call without a
// gate (CloseGate) fires while the host is still enqueueing, so it times the host.
inline constexpr double kNcclEnqueueUs = 25;
inline constexpr double kPeakTflops = 500;
inline constexpr int64_t kNoFp8KernelN = 7;  // fp8 GEMMs of this n have no kernel
inline constexpr double kHbmGBps = 3000;

struct Stats {
  int launches[2] = {0, 0};  // per stream: compute, comm
  int waits = 0;             // cross-stream waits that took effect
  int emulated = 0;          // emulated collectives launched
  int emulated_ctas = 0;     // CTAs of the last one
  int captures = 0;
  int graph_launches = 0;
  int gates = 0;         // CloseGate calls that held a stream
  int random_fills = 0;  // FillRandom calls
  int uploads = 0;       // every Upload
  int f32_uploads = 0;   // uploads into views that hold fp32 whatever the type (token ids)
  int f32_overruns = 0;  // of those, views that reach past their buffer at 4 bytes each
  int nccl_sends = 0, nccl_recvs = 0;               // point-to-point
  int nccl_collectives = 0;                         // all-reduces, reduce-scatters and all-gathers
  int nccl_f32_allreduces = 0;                      // of them, all-reduces of fp32 buffers
  int accumulates = 0, stores = 0, adam_steps = 0;  // a whole step's device bucket arithmetic
  int nccl_groups = 0;        // grouped broadcasts or reduces (a decomposed collective's part)
  int nccl_group_pieces = 0;  // the rooted collectives in them
  // Teardown, in order: "graph" (DestroyGraph of a captured graph), "nccl finalize", "nccl
  // abort", "context".
  std::vector<std::string> teardown;
  // NCCL's finalize or abort was called while a graph still held work of the communicator: on a
  // GPU it would wait forever.
  bool nccl_teardown_would_hang = false;
  // MeasureGemmTflops calls: m, n, k, warm-up runs, timed runs, fp8 (1) or not (0).
  std::vector<std::array<int64_t, 6>> gemm_shapes;
  int soaks = 0, fp8_soaks = 0;  // SoakGemm calls in the context's type and in fp8
  // Contexts (one per CUDA runner) alive now, and the most alive at once.
  int live_contexts = 0, most_live_contexts = 0;
};

// This thread's, since ResetCounters (fake_gpu_test_util.cc resets them as each test starts).
const Stats& Counters();
void ResetCounters();  // this thread's, to zero

}  // namespace domino::exec::fake

#endif  // DOMINO_TESTS_EXEC_FAKE_CUDA_OPS_H_
