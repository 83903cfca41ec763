#ifndef DOMINO_EXEC_CUDA_OPS_H_
#define DOMINO_EXEC_CUDA_OPS_H_

// The CUDA half of the CUDA backend: device memory, two streams, events, graph capture, cuBLAS
// GEMMs, the layer's kernels and the emulated collective, behind a C++17 interface with no CUDA
// types (cuda_ops.cu implements it; cuda_backend.cc uses it). Every tensor of a context has the
// context's element type; kernels compute in fp32 whatever it is. Every function that launches
// work enqueues it on the context's current stream (UseStream); every function that can fail
// returns a Status whose message names the call and the CUDA or cuBLAS error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/dropout.h"
#include "models/base/result.h"

namespace domino::exec::cuda {

enum class DType : int { kF32 = 0, kBf16 = 1, kF16 = 2 };
inline size_t DTypeBytes(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* DTypeName(DType t) {
  return t == DType::kF32 ? "fp32" : t == DType::kBf16 ? "bf16" : "fp16";
}

struct Context;  // a device, a compute and a comm stream, cuBLAS, events, a workspace

// A row-major matrix of the context's element type in device memory: element (r, c) at
// data + (r * stride + c) * DTypeBytes(type).
struct DView {
  void* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
};

// The context's two CUDA streams. This header is C++17 for nvcc and cannot name the Schedule's
// streams (planner/schedule.h): the CUDA backend runs the compute stream's ops on kCompute and the
// TP comm stream's on kComm.
enum class StreamKind : int { kCompute = 0, kComm = 1 };

// A context on `device`: a compute stream and a comm stream of the highest priority (both
// non-blocking), a cuBLAS handle. Sets the calling thread's current device.
Status Create(int device, DType type, Context** out);
void Destroy(Context* context);
DType TypeOf(const Context* context);
// Launches after this go to `stream` (cuBLAS included).
void UseStream(Context* context, StreamKind stream);
// The cudaStream_t of `stream`, for NCCL.
void* StreamHandle(Context* context, StreamKind stream);
// Waits for both streams.
Status Synchronize(Context* context);

// Device memory for `elements` elements of the context's type (at least one).
Status Alloc(Context* context, size_t elements, void** out);
void Free(void* data);
// Scratch memory the attention kernels and the emulated collective use: makes it at least
// `bytes`. Call it before any capture (it may allocate) and not while work is queued.
Status Reserve(Context* context, size_t bytes);
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t heads);
// The emulated collective's scratch: a fixed size well above L2 (traffic wraps around it), or 0
// without traffic.
size_t EmulationWorkspaceBytes(double hbm_bytes);

// Host fp32 (contiguous, rows * cols) <-> a view, converting to and from the context's type; both
// wait for the copy. With `f32` the view holds fp32 whatever the context's type (its stride in
// fp32 elements): token ids and labels, exact up to 2^24.
Status Upload(Context* context, DView dst, const float* host, bool f32 = false);
Status Download(Context* context, DView src, float* host, bool f32 = false);
// dst = src (same shape), device to device, asynchronous.
Status Copy(Context* context, DView src, DView dst);
Status Zero(Context* context, DView view);
// Fills a view with pseudo-random values uniform in [-1, 1), rounded to the element type, from
// `seed` (the same seed and view give the same values). For measurements: constant or zero inputs
// switch fewer transistors, so the clocks stay high and times read optimistic.
Status FillRandom(Context* context, DView view, uint64_t seed);

// Events 0..count-1, replacing any earlier set. Timing events are recorded as external records
// under graph capture (so a replayed graph records them); other events order streams.
Status CreateEvents(Context* context, int count);
Status RecordEvent(Context* context, int event, bool timing);
Status WaitEvent(Context* context, int event);  // the current stream waits for it
Status ElapsedMs(Context* context, int from, int to, float* ms);
// Whether the work before the event's last record has finished (cudaEventQuery), without waiting.
Status QueryEvent(Context* context, int event, bool* done);

// Graph capture of everything both streams are given between BeginCapture and EndCapture (the
// comm stream forks from and joins the compute stream); LaunchGraph replays it on the compute
// stream. No allocation, synchronization or download may happen while capturing.
Status BeginCapture(Context* context);
Status EndCapture(Context* context);
Status LaunchGraph(Context* context);
// Destroys the captured executable graph, if any (a replay still running finishes first, then
// its memory is freed). Call it before finalizing or aborting a communicator whose work the graph
// captured: NCCL's finalize and abort wait until no graph refers to the communicator.
void DestroyGraph(Context* context);

// A gate on the current stream, for work that the host enqueues late (a non-blocking NCCL call
// finishes enqueueing on a thread of its own): work enqueued after CloseGate, a timing event
// included, waits on the GPU until OpenGate, so the event marks when the stream could run the work
// and not when the host began enqueueing it. No-ops while capturing (a graph has no host latency)
// and where the driver lacks stream memory operations. Every CloseGate needs its OpenGate, also
// after an error, or the stream waits forever.
Status CloseGate(Context* context);
void OpenGate(Context* context);

// c = op(a) op(b) (c += when accumulate), op = transpose when the flag is set; cuBLAS with fp32
// accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F) whatever the element type.
Status Gemm(Context* context, DView a, bool transpose_a, DView b, bool transpose_b, DView c,
            bool accumulate);
// c = a + b, b scaled by `dropout`'s mask where it drops out (a residual add after its branch's
// dropout: exec/cpu_kernels.h cpu::Add); c may alias a or b.
Status Add(Context* context, DView a, DView b, DView c, const BranchDropout& dropout = {});
// c = a scaled by `dropout`'s mask (the dropout's backward, exec/cpu_kernels.h cpu::Dropout).
Status Dropout(Context* context, const BranchDropout& dropout, DView a, DView c);
// LayerNorm (no bias) or RMSNorm per row with gamma (x.cols elements); backward as
// exec/cpu_kernels.h says: dx = (or +=) the input gradient, dgamma += sum over rows.
Status NormForward(Context* context, bool rms, DView x, const void* gamma, float eps, DView y);
Status NormBackward(Context* context, bool rms, DView x, const void* gamma, float eps, DView dy,
                    DView dx, bool accumulate_dx, void* dgamma);
// A norm on each head of Q and of K: a row of x is [Q | K], `heads` heads of x.cols / heads
// columns, the first q_heads Q's; gamma holds Q's gain, then K's. Forward keeps x in `kept` (x's
// shape) and normalizes x in place; backward writes dx from x (as kept) and dy, and adds the
// gains' gradients into dgamma (2 x.cols / heads elements).
Status HeadNormForward(Context* context, bool rms, int64_t heads, int64_t q_heads, DView x,
                       const void* gamma, float eps, DView kept);
Status HeadNormBackward(Context* context, bool rms, int64_t heads, int64_t q_heads, DView x,
                        const void* gamma, float eps, DView dy, DView dx, void* dgamma);
Status Gelu(Context* context, DView x, DView y);
Status GeluBackward(Context* context, DView x, DView dy, DView dx);
// A gated linear unit as exec/cpu_kernels.h's cpu::GluForward: x = [gate | up] (2f columns), y =
// act(gate) * up, act the tanh GeLU (`gelu`: GeGLU) or SiLU (SwiGLU); backward dx = [dgate | dup].
Status Glu(Context* context, bool gelu, DView x, DView y);
Status GluBackward(Context* context, bool gelu, DView x, DView dy, DView dx);
// Squared ReLU: y = max(x, 0)^2; dx = dy 2 max(x, 0).
Status SquaredRelu(Context* context, DView x, DView y);
Status SquaredReluBackward(Context* context, DView x, DView dy, DView dx);
// Rotary embeddings in place on qkv's Q and K heads, as exec/cpu_kernels.h's cpu::Rope: qkv's
// rows are whole sequences of `local_len` tokens of CP rank `cp_rank` of `cp` (exec/positions.h
// places them); `inverse` is the backward.
Status Rope(Context* context, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t local_len,
            int cp, int cp_rank, bool inverse, DView qkv);
// Causal attention with grouped-query heads, the layout of exec/cpu_kernels.h: batched cuBLAS
// GEMMs for the scores and the outputs, a fused causal softmax (within a sliding `window` of
// tokens, of the scores soft-capped at `softcap`, under `dropout`, as exec/cpu_kernels.h's
// AttentionShape; 0: none) that masks what the GEMMs compute; needs
// Reserve(AttentionWorkspaceBytes(...)).
Status Attention(Context* context, int64_t sequences, int64_t seq_len, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t window, double softcap,
                 const AttentionDropout& dropout, DView qkv, DView out);
Status AttentionBackward(Context* context, int64_t sequences, int64_t seq_len, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, int64_t window, double softcap,
                         const AttentionDropout& dropout, DView qkv, DView dout, DView dqkv);

// The model's ends, as exec/cpu_kernels.h computes them. Token ids and labels are fp32 whatever
// the context's type (views of fp32 elements, one per row of a column; exact up to 2^24, every
// vocabulary), the other views of the context's type. `vocab_begin` is the first vocabulary row
// this rank's part of a table holds; tokens outside it look up zeros (forward) or add nothing
// (backward).
Status Embedding(Context* context, DView tokens, int64_t vocab_begin, DView table, DView out);
// dtable += each token's row of dy (atomically: rows of repeated tokens add up in any order).
Status EmbeddingBackward(Context* context, DView tokens, int64_t vocab_begin, DView dy,
                         DView dtable);
// Per token: its part's log-sum-exp of the logits in column `part` (of stats.cols - 1 parts, the
// others 0) and its label's logit in the last column when this part holds the label (else 0);
// columns at or past `vocab - vocab_begin` are padding and take no part. With `softcap` > 0 the
// logits are taken as softcap * tanh(logits / softcap) (ModelSpec::logit_softcap), here and in
// the backward, as the kernels read them.
Status CrossEntropyStats(Context* context, DView logits, DView labels, int64_t vocab_begin,
                         int64_t vocab, int part, double softcap, DView stats);
// dlogits = (softmax(logits) - onehot(label)) / tokens, from the stats summed over the parts (with
// a soft cap: of the capped logits, times the cap's derivative). `labels` and `stats` are fp32
// whatever the context's type.
Status CrossEntropyBackward(Context* context, DView logits, DView labels, DView stats,
                            int64_t vocab_begin, int64_t vocab, int64_t tokens, double softcap,
                            DView dlogits);

// A whole step's buckets (exec/step_device.h): fp32 device buffers, contiguous, whatever the
// context's type. dst[i] += scale x src's element i (row-major over the view, of the context's
// type); dst (of the context's type) = src; Adam on n elements (exec/execute.h's AdamOptions, c1
// and c2 the bias corrections 1 - beta^step).
struct AdamStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, c1 = 1, c2 = 1;
};
Status AccumulateF32(Context* context, DView src, float* dst, float scale);
Status StoreF32(Context* context, const float* src, DView dst);
Status AdamF32(Context* context, float* master, float* m, float* v, const float* grad, int64_t n,
               const AdamStep& step);

// A stand-in for a collective on one GPU: `ctas` blocks that move `hbm_bytes` of HBM traffic
// (half read, half written) paced to take `micros` when nothing else runs; HBM contention makes it
// longer, as it would a collective. Each block asks for more than half an SM's shared memory, so
// no two share an SM: it holds `ctas` SMs (at most the device's). Its loads and stores stream
// (evict-first) through a scratch buffer several times the size of any L2 cache, and each call
// starts where the last one ended, so its traffic is HBM traffic, not L2 hits. Needs
// Reserve(EmulationWorkspaceBytes).
Status EmulateCollective(Context* context, int ctas, double hbm_bytes, double micros);

// What one emulated collective did on the device: for the GPU test of EmulateCollective.
struct EmulationProbe {
  int distinct_sms = 0;  // SMs its blocks ran on (%smid)
  double ms = 0;         // its duration, by events
  double GBps = 0;       // hbm_bytes / ms
};
Status ProbeEmulatedCollective(Context* context, int ctas, double hbm_bytes, double micros,
                               EmulationProbe* out);

// Dense GEMM throughput, C[m,n] = A[m,k] B[k,n] on random inputs in the context's type, or with
// `fp8` E4M3 operands, a bf16 output and fast accumulation (cuBLASLt; compute capability 8.9 or
// later, m and k multiples of 16), timed as GEMM benchmarks time it (ml-engineering's mamf-finder):
// `warmup` launches, then `repeats` launched back to back between two events; the TFLOP/s of their
// mean. In exec/cuda_gemm_bench.cu, with SoakGemm.
Status MeasureGemmTflops(Context* context, int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                         bool fp8, double* tflops);
// Back-to-back n x n x n GEMMs on random inputs (in fp8 as MeasureGemmTflops says) for `seconds`
// of GPU time, timed in windows of `window_s`: the TFLOP/s of each window in order, as the
// clocks settle under the power limit.
Status SoakGemm(Context* context, int64_t n, double seconds, double window_s, bool fp8,
                std::vector<double>* tflops);
// Achieved HBM bandwidth of a device-to-device copy of `bytes` (read + written), in GB/s.
Status MeasureHbmGBps(Context* context, size_t bytes, int repeats, double* GBps);

// What one kernel adds to a chain of back-to-back kernels (an empty one: one warp doing nothing),
// in microseconds: launched one by one from the host, and replayed from a CUDA graph. With
// kernels this short the chain lasts as long as the host takes to launch them or the GPU to
// start them, whichever is longer: the overhead a short kernel pays in a training step.
struct LaunchOverhead {
  double eager_us = 0;
  double graph_us = 0;
};
// The median of `repeats` timed chains of `kernels`, each way. In exec/cuda_launch_bench.cu.
Status MeasureLaunchUs(Context* context, int kernels, int repeats, LaunchOverhead* out);

}  // namespace domino::exec::cuda

#endif  // DOMINO_EXEC_CUDA_OPS_H_
