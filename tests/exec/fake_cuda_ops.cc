// A fake GPU behind exec/cuda_ops.h, exec/nccl_ops.h and exec/cuda_device.h, so that the CUDA
// backend's own logic (which stream each op goes to, which events it records and waits for, how
// it reads its timeline, graph capture, calibration) runs and is checked on any machine. Each
// stream is a clock: a launch starts when its stream is free and lasts a duration that depends on
// the op (GEMMs by their FLOPs, an emulated collective by its time); an event records its stream's
// clock; a wait moves the waiting stream's clock forward to the event's. Capture records the
// calls and LaunchGraph replays them, forked from and joined to the compute stream, as CUDA does.
// A closed gate holds its stream's calls until it opens. A non-blocking NCCL call takes
// kNcclEnqueueUs of host time before its stream can run it, and a graph that captured NCCL work
// keeps its communicator from finalizing until the graph is destroyed, as NCCL's does. Nothing is
// computed, except one thing: every buffer counts the accumulating writes into it (a GEMM with
// accumulate, a norm's dgamma) since it was last zeroed, and a download returns that count in
// every element, so a test sees gradients accumulated twice.
#include "tests/exec/fake_cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "exec/nccl_ctas.h"
#include "exec/nccl_ops.h"

namespace domino::exec {

bool CudaBuilt() { return true; }

Result<std::vector<CudaDevice>> ListCudaDevices() {
  return std::vector<CudaDevice>{CudaDevice{0, "fake GPU", 132, int64_t{80} << 30, 9, 0}};
}

std::string CudaVersions() { return "fake CUDA"; }

namespace cuda {

struct Context {
  DType type = DType::kF32;
  int current = 0;
  double clock[2] = {0, 0};  // microseconds
  std::vector<double> events;
  bool capturing = false;
  std::vector<std::function<void()>> recording, graph;
  int recording_nccl = 0, graph_nccl = 0;  // NCCL calls in the capture, in the graph
  size_t workspace = 0, emulation = 0;
  int gated = -1;                           // the stream behind a closed gate, or -1
  std::vector<std::function<void()>> held;  // its calls, run when the gate opens
  double held_enqueue_us = 0;               // host enqueue time the gate waits out
};

struct Nccl {
  Context* context = nullptr;
};

namespace {

// Per thread: each rank of a multi-rank test is a thread of its own and counts its own calls.
thread_local fake::Stats stats;

// Device buffers by their first byte: size and accumulating writes since the last zero. The
// ranks' threads share the map, under the lock.
struct Buffer {
  size_t bytes = 0;
  int accumulations = 0;
};
std::mutex buffers_lock;
std::map<const char*, Buffer> buffers;

// f(the buffer holding `p` or null, its first byte), under the lock.
template <typename F>
auto WithBuffer(const void* p, F f) {
  std::lock_guard<std::mutex> hold(buffers_lock);
  const char* at = static_cast<const char*>(p);
  auto it = buffers.upper_bound(at);
  if (it == buffers.begin()) return f(static_cast<Buffer*>(nullptr), at);
  --it;
  return at < it->first + it->second.bytes ? f(&it->second, it->first)
                                           : f(static_cast<Buffer*>(nullptr), at);
}

// Runs `call` now, holds it behind a closed gate, or records it for the graph while capturing.
Status Do(Context* c, std::function<void()> call) {
  if (c->capturing) {
    c->recording.push_back(std::move(call));
  } else if (c->gated == c->current) {
    c->held.push_back(std::move(call));
  } else {
    call();
  }
  return Status::Ok();
}

// A kernel of `us` microseconds on the current stream; `effect` (if any) when it runs.
Status Launch(Context* c, double us, std::function<void()> effect = {}) {
  const int s = c->current;
  return Do(c, [c, s, us, effect] {
    c->clock[s] += us;
    ++stats.launches[s];
    if (effect) effect();
  });
}

std::function<void()> Accumulate(const void* data) {
  return [data] {
    WithBuffer(data, [](Buffer* b, const char*) {
      if (b != nullptr) ++b->accumulations;
    });
  };
}

// A collective on the communicator's stream: the host enqueues it for kNcclEnqueueUs first
// (nothing while capturing: a replay has no host in the way).
Status NcclLaunch(Context* c) {
  const int s = c->current;
  if (c->capturing) {
    ++c->recording_nccl;
    return Launch(c, fake::kNcclUs);
  }
  if (c->gated == s) {
    c->held_enqueue_us += fake::kNcclEnqueueUs;
    return Launch(c, fake::kNcclUs);
  }
  return Launch(c, fake::kNcclEnqueueUs + fake::kNcclUs);
}

Status NotCapturing(const Context* c, const char* what) {
  if (c->capturing) return Error(std::string(what) + " while capturing");
  return Status::Ok();
}

}  // namespace

Status Create(int device, DType type, Context** out) {
  if (device != 0) return Error("no such fake device");
  *out = new Context;
  (*out)->type = type;
  stats.most_live_contexts = std::max(stats.most_live_contexts, ++stats.live_contexts);
  return Status::Ok();
}
void Destroy(Context* context) {
  if (context == nullptr) return;
  stats.teardown.push_back("context");
  --stats.live_contexts;
  delete context;
}
DType TypeOf(const Context* context) { return context->type; }
void UseStream(Context* context, StreamKind stream) {
  context->current = stream == StreamKind::kCompute ? 0 : 1;
}
void* StreamHandle(Context* context, StreamKind stream) {
  return &context->clock[stream == StreamKind::kCompute ? 0 : 1];
}
Status Synchronize(Context* context) { return NotCapturing(context, "synchronize"); }

Status Alloc(Context* context, size_t elements, void** out) {
  const size_t bytes = std::max<size_t>(1, elements) * DTypeBytes(context->type);
  *out = std::calloc(1, bytes);
  if (*out == nullptr) return Error("out of fake memory");
  std::lock_guard<std::mutex> hold(buffers_lock);
  buffers[static_cast<const char*>(*out)] = Buffer{bytes, 0};
  return Status::Ok();
}
void Free(void* data) {
  {
    std::lock_guard<std::mutex> hold(buffers_lock);
    buffers.erase(static_cast<const char*>(data));
  }
  std::free(data);
}
Status Reserve(Context* context, size_t bytes) {
  if (!context->capturing) context->workspace = std::max(context->workspace, bytes);
  context->emulation = std::max(context->emulation, std::min<size_t>(bytes, size_t{512} << 20));
  return NotCapturing(context, "reserve");
}
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t) {
  return static_cast<size_t>(sequences * seq_len * (seq_len * 12 + 4));
}
size_t EmulationWorkspaceBytes(double hbm_bytes) { return hbm_bytes > 0 ? size_t{512} << 20 : 0; }

Status Upload(Context* context, DView dst, const float*, bool f32) {
  ++stats.uploads;
  if (f32 && dst.rows > 0 && dst.cols > 0) {
    ++stats.f32_uploads;
    const size_t end = static_cast<size_t>((dst.rows - 1) * dst.stride + dst.cols) * sizeof(float);
    const char* at = static_cast<const char*>(dst.data);
    if (WithBuffer(at, [&](const Buffer* b, const char* first) {
          return b == nullptr || at + end > first + b->bytes;
        }))
      ++stats.f32_overruns;
  }
  return NotCapturing(context, "upload");
}
Status Download(Context* context, DView src, float* host, bool) {
  const float count = WithBuffer(src.data, [](const Buffer* b, const char*) {
    return b != nullptr ? static_cast<float>(b->accumulations) : 0.0f;
  });
  std::fill(host, host + src.rows * src.cols, count);
  return NotCapturing(context, "download");
}
Status Copy(Context* c, DView, DView) { return Launch(c, fake::kCopyUs); }
Status Zero(Context* c, DView view) {
  return Launch(c, fake::kCopyUs, [data = view.data] {
    WithBuffer(data, [](Buffer* b, const char*) {
      if (b != nullptr) b->accumulations = 0;
    });
  });
}
Status FillRandom(Context* c, DView, uint64_t) {
  ++stats.random_fills;
  return Launch(c, fake::kCopyUs);
}

Status CreateEvents(Context* context, int count) {
  context->events.assign(static_cast<size_t>(count), -1.0);
  return Status::Ok();
}
Status RecordEvent(Context* c, int event, bool) {
  if (event < 0 || event >= static_cast<int>(c->events.size())) return Error("no such event");
  const int s = c->current;
  return Do(c, [c, s, event] { c->events[event] = c->clock[s]; });
}
Status WaitEvent(Context* c, int event) {
  if (event < 0 || event >= static_cast<int>(c->events.size())) return Error("no such event");
  const int s = c->current;
  return Do(c, [c, s, event] {
    if (c->events[event] < 0) return;  // never recorded: CUDA's wait is a no-op
    c->clock[s] = std::max(c->clock[s], c->events[event]);
    ++stats.waits;
  });
}
Status ElapsedMs(Context* c, int from, int to, float* ms) {
  if (c->events[from] < 0 || c->events[to] < 0) return Error("an event was never recorded");
  *ms = static_cast<float>((c->events[to] - c->events[from]) * 1e-3);
  return Status::Ok();
}
Status QueryEvent(Context*, int, bool* done) {
  *done = true;
  return Status::Ok();
}

Status BeginCapture(Context* c) {
  if (c->capturing) return Error("already capturing");
  c->capturing = true;
  c->recording.clear();
  return Status::Ok();
}
Status EndCapture(Context* c) {
  if (!c->capturing) return Error("not capturing");
  c->capturing = false;
  c->graph = std::move(c->recording);
  c->graph_nccl = c->recording_nccl;
  c->recording_nccl = 0;
  ++stats.captures;
  return Status::Ok();
}
void DestroyGraph(Context* c) {
  if (c == nullptr || c->graph.empty()) return;
  stats.teardown.push_back("graph");
  c->graph.clear();
  c->graph_nccl = 0;
}

Status CloseGate(Context* c) {
  if (c->capturing) return Status::Ok();
  if (c->gated >= 0) return Error("close gate: already closed");
  c->gated = c->current;
  ++stats.gates;
  return Status::Ok();
}
void OpenGate(Context* c) {
  if (c == nullptr || c->gated < 0) return;
  const int s = c->gated;
  c->gated = -1;
  c->clock[s] += c->held_enqueue_us;
  c->held_enqueue_us = 0;
  std::vector<std::function<void()>> held = std::move(c->held);
  c->held.clear();
  for (const auto& call : held) call();
}
Status LaunchGraph(Context* c) {
  if (c->capturing || c->graph.empty()) return Error("no graph");
  c->clock[1] = std::max(c->clock[1], c->clock[0]);  // the comm stream forks from compute
  for (const auto& call : c->graph) call();
  c->clock[0] = std::max(c->clock[0], c->clock[1]);  // and joins it
  ++stats.graph_launches;
  return Status::Ok();
}

Status Gemm(Context* c, DView a, bool transpose_a, DView, bool, DView out, bool accumulate) {
  const double k = static_cast<double>(transpose_a ? a.rows : a.cols);
  return Launch(
      c, fake::kLaunchUs + 2.0 * static_cast<double>(out.rows * out.cols) * k * fake::kUsPerFlop,
      accumulate ? Accumulate(out.data) : std::function<void()>{});
}
Status Add(Context* c, DView, DView, DView, const BranchDropout&) {
  return Launch(c, fake::kElementwiseUs);
}
Status Dropout(Context* c, const BranchDropout&, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status NormForward(Context* c, bool, DView, const void*, float, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status NormBackward(Context* c, bool, DView, const void*, float, DView, DView, bool, void* dgamma) {
  return Launch(c, fake::kElementwiseUs, Accumulate(dgamma));
}
Status HeadNormForward(Context* c, bool, int64_t, int64_t, DView, const void*, float, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status HeadNormBackward(Context* c, bool, int64_t, int64_t, DView, const void*, float, DView, DView,
                        void* dgamma) {
  return Launch(c, fake::kElementwiseUs, Accumulate(dgamma));
}
Status Embedding(Context* c, DView, int64_t, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status EmbeddingBackward(Context* c, DView, int64_t, DView, DView dtable) {
  return Launch(c, fake::kElementwiseUs, Accumulate(dtable.data));
}
Status CrossEntropyStats(Context* c, DView, DView, int64_t, int64_t, int, double, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status CrossEntropyBackward(Context* c, DView, DView, DView, int64_t, int64_t, int64_t, double,
                            DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status Gelu(Context* c, DView, DView) { return Launch(c, fake::kElementwiseUs); }
Status GeluBackward(Context* c, DView, DView, DView) { return Launch(c, fake::kElementwiseUs); }
Status SquaredRelu(Context* c, DView, DView) { return Launch(c, fake::kElementwiseUs); }
Status SquaredReluBackward(Context* c, DView, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status Glu(Context* c, bool, DView, DView) { return Launch(c, fake::kElementwiseUs); }
Status GluBackward(Context* c, bool, DView, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status Rope(Context* c, int64_t, int64_t, int64_t, int64_t, int, int, bool, DView) {
  return Launch(c, fake::kElementwiseUs);
}
Status Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t, int64_t,
                 int64_t, double, const AttentionDropout&, DView, DView) {
  if (c->workspace < AttentionWorkspaceBytes(sequences, seq_len, heads))
    return Error("no workspace");
  return Launch(c, fake::kAttentionUs);
}
Status AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t,
                         int64_t, int64_t, double, const AttentionDropout&, DView, DView, DView) {
  if (c->workspace < AttentionWorkspaceBytes(sequences, seq_len, heads))
    return Error("no workspace");
  return Launch(c, 2 * fake::kAttentionUs);
}

Status AccumulateF32(Context* c, DView, float*, float) {
  ++stats.accumulates;
  return Launch(c, fake::kElementwiseUs);
}
Status StoreF32(Context* c, const float*, DView) {
  ++stats.stores;
  return Launch(c, fake::kElementwiseUs);
}
Status AdamF32(Context* c, float*, float*, float*, const float*, int64_t, const AdamStep&) {
  ++stats.adam_steps;
  return Launch(c, fake::kElementwiseUs);
}

Status EmulateCollective(Context* c, int ctas, double hbm_bytes, double micros) {
  if (hbm_bytes > 0 && c->emulation < EmulationWorkspaceBytes(hbm_bytes))
    return Error("no emulation scratch");
  ++stats.emulated;
  stats.emulated_ctas = ctas;
  return Launch(c, micros);
}
Status ProbeEmulatedCollective(Context* c, int ctas, double hbm_bytes, double micros,
                               EmulationProbe* out) {
  out->distinct_sms = ctas;
  out->ms = micros * 1e-3;
  out->GBps = micros > 0 ? hbm_bytes / (micros * 1e-6) / 1e9 : 0;
  return EmulateCollective(c, ctas, hbm_bytes, micros);
}

Status MeasureGemmTflops(Context*, int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                         bool fp8, double* tflops) {
  if (m <= 0 || n <= 0 || k <= 0 || warmup < 0 || repeats <= 0) return Error("bad gemm shape");
  if (fp8 && (m % 16 != 0 || k % 16 != 0))
    return Error("fp8 GEMMs need m and k in multiples of 16");
  if (fp8 && n == fake::kNoFp8KernelN) return Error("cuBLASLt has no fp8 kernel for this shape");
  stats.gemm_shapes.push_back({m, n, k, warmup, repeats, fp8});
  *tflops = fake::kPeakTflops * (fp8 ? 2 : 1);
  return Status::Ok();
}
Status SoakGemm(Context*, int64_t n, double seconds, double window_s, bool fp8,
                std::vector<double>* tflops) {
  if (n <= 0 || !(window_s > 0) || window_s > seconds) return Error("bad soak");
  tflops->clear();
  ++(fp8 ? stats.fp8_soaks : stats.soaks);
  // The clocks settle: each window 1% below the one before.
  for (int w = 0; w < static_cast<int>(std::floor(seconds / window_s + 1e-9)); ++w)
    tflops->push_back(fake::kPeakTflops * (fp8 ? 2 : 1) * (1 - 0.01 * w));
  return Status::Ok();
}
Status MeasureHbmGBps(Context*, size_t, int, double* GBps) {
  *GBps = fake::kHbmGBps;
  return Status::Ok();
}
Status MeasureLaunchUs(Context*, int kernels, int repeats, LaunchOverhead* out) {
  if (kernels <= 0 || repeats <= 0) return Error("bad launch measurement");
  *out = LaunchOverhead{fake::kLaunchUs, fake::kGraphLaunchUs};
  return Status::Ok();
}

Status NcclUniqueId(std::string* id) {
  id->assign(128, 'x');
  return Status::Ok();
}
Status NcclInit(Context* context, int, int, const std::string& id, const NcclConfig& config,
                Nccl** out) {
  if (id.size() != 128) return Error("bad unique id");
  // As NCCL would (exec/nccl_ctas.h).
  if (Result<NcclCtas> ctas = ResolveNcclCtas(config.min_ctas, config.max_ctas); !ctas.ok())
    return ctas.error();
  *out = new Nccl{context};
  return Status::Ok();
}
Status NcclAllReduce(Nccl* n, const void*, void*, int64_t, bool f32) {
  ++stats.nccl_collectives;
  stats.nccl_f32_allreduces += f32;
  return NcclLaunch(n->context);
}
Status NcclReduceScatter(Nccl* n, const void*, void*, int64_t) {
  ++stats.nccl_collectives;
  return NcclLaunch(n->context);
}
Status NcclAllGather(Nccl* n, const void*, void*, int64_t) {
  ++stats.nccl_collectives;
  return NcclLaunch(n->context);
}
Status NcclSend(Nccl* n, const void*, int64_t, DType, int) {
  ++stats.nccl_sends;
  return NcclLaunch(n->context);
}
Status NcclRecv(Nccl* n, void*, int64_t, DType, int) {
  ++stats.nccl_recvs;
  return NcclLaunch(n->context);
}
// A group of rooted collectives is one operation on the comm stream.
Status NcclBroadcasts(Nccl* n, const NcclPiece*, int count) {
  ++stats.nccl_groups;
  stats.nccl_group_pieces += count;
  return NcclLaunch(n->context);
}
Status NcclReduces(Nccl* n, const NcclPiece*, int count) {
  ++stats.nccl_groups;
  stats.nccl_group_pieces += count;
  return NcclLaunch(n->context);
}
void NcclUseContext(Nccl* n, Context* context) { n->context = context; }
Status NcclPoll(Nccl*) { return Status::Ok(); }
namespace {
void EndNccl(Nccl* n, const char* how) {
  if (n == nullptr) return;
  stats.teardown.push_back(how);
  if (n->context->graph_nccl > 0) stats.nccl_teardown_would_hang = true;
  delete n;
}
}  // namespace
void NcclAbort(Nccl* n) { EndNccl(n, "nccl abort"); }
void NcclDestroy(Nccl* n) { EndNccl(n, "nccl finalize"); }

}  // namespace cuda

namespace fake {
const Stats& Counters() { return cuda::stats; }
void ResetCounters() { cuda::stats = Stats{}; }
}  // namespace fake

}  // namespace domino::exec
