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
#include <cstdlib>
#include <functional>
#include <map>
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

fake::Stats stats;

// Device buffers by their first byte: size and accumulating writes since the last zero.
struct Buffer {
  size_t bytes = 0;
  int accumulations = 0;
};
std::map<const char*, Buffer> buffers;

Buffer* Find(const void* p) {
  const char* at = static_cast<const char*>(p);
  auto it = buffers.upper_bound(at);
  if (it == buffers.begin()) return nullptr;
  --it;
  return at < it->first + it->second.bytes ? &it->second : nullptr;
}

// Runs `call` now, holds it behind a closed gate, or records it for the graph while capturing.
std::string Do(Context* c, std::function<void()> call) {
  if (c->capturing) {
    c->recording.push_back(std::move(call));
  } else if (c->gated == c->current) {
    c->held.push_back(std::move(call));
  } else {
    call();
  }
  return "";
}

// A kernel of `us` microseconds on the current stream; `effect` (if any) when it runs.
std::string Launch(Context* c, double us, std::function<void()> effect = {}) {
  const int s = c->current;
  return Do(c, [c, s, us, effect] {
    c->clock[s] += us;
    ++stats.launches[s];
    if (effect) effect();
  });
}

std::function<void()> Accumulate(const void* data) {
  return [data] {
    if (Buffer* b = Find(data)) ++b->accumulations;
  };
}

// A collective on the communicator's stream: the host enqueues it for kNcclEnqueueUs first
// (nothing while capturing: a replay has no host in the way).
std::string NcclLaunch(Context* c) {
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

std::string NotCapturing(const Context* c, const char* what) {
  return c->capturing ? std::string(what) + " while capturing" : "";
}

}  // namespace

std::string Create(int device, DType type, Context** out) {
  if (device != 0) return "no such fake device";
  *out = new Context;
  (*out)->type = type;
  stats = fake::Stats{};
  return "";
}
void Destroy(Context* context) {
  if (context == nullptr) return;
  stats.teardown.push_back("context");
  delete context;
}
DType TypeOf(const Context* context) { return context->type; }
void UseStream(Context* context, StreamKind stream) {
  context->current = stream == StreamKind::kCompute ? 0 : 1;
}
void* StreamHandle(Context* context, StreamKind stream) {
  return &context->clock[stream == StreamKind::kCompute ? 0 : 1];
}
std::string Synchronize(Context* context) { return NotCapturing(context, "synchronize"); }

std::string Alloc(Context* context, size_t elements, void** out) {
  const size_t bytes = std::max<size_t>(1, elements) * DTypeBytes(context->type);
  *out = std::calloc(1, bytes);
  if (*out == nullptr) return "out of fake memory";
  buffers[static_cast<const char*>(*out)] = Buffer{bytes, 0};
  return "";
}
void Free(void* data) {
  buffers.erase(static_cast<const char*>(data));
  std::free(data);
}
std::string Reserve(Context* context, size_t bytes) {
  if (!context->capturing) context->workspace = std::max(context->workspace, bytes);
  context->emulation = std::max(context->emulation, std::min<size_t>(bytes, size_t{512} << 20));
  return NotCapturing(context, "reserve");
}
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t) {
  return static_cast<size_t>(sequences * seq_len * seq_len * 12);
}
size_t EmulationWorkspaceBytes(double hbm_bytes) { return hbm_bytes > 0 ? size_t{512} << 20 : 0; }

std::string Upload(Context* context, DView, const float*) {
  return NotCapturing(context, "upload");
}
std::string Download(Context* context, DView src, float* host) {
  const Buffer* b = Find(src.data);
  std::fill(host, host + src.rows * src.cols, b != nullptr ? b->accumulations : 0.0f);
  return NotCapturing(context, "download");
}
std::string Copy(Context* c, DView, DView) { return Launch(c, fake::kCopyUs); }
std::string Zero(Context* c, DView view) {
  return Launch(c, fake::kCopyUs, [data = view.data] {
    if (Buffer* b = Find(data)) b->accumulations = 0;
  });
}
std::string FillRandom(Context* c, DView, uint64_t) {
  ++stats.random_fills;
  return Launch(c, fake::kCopyUs);
}

std::string CreateEvents(Context* context, int count) {
  context->events.assign(static_cast<size_t>(count), -1.0);
  return "";
}
std::string RecordEvent(Context* c, int event, bool) {
  if (event < 0 || event >= static_cast<int>(c->events.size())) return "no such event";
  const int s = c->current;
  return Do(c, [c, s, event] { c->events[event] = c->clock[s]; });
}
std::string WaitEvent(Context* c, int event) {
  if (event < 0 || event >= static_cast<int>(c->events.size())) return "no such event";
  const int s = c->current;
  return Do(c, [c, s, event] {
    if (c->events[event] < 0) return;  // never recorded: CUDA's wait is a no-op
    c->clock[s] = std::max(c->clock[s], c->events[event]);
    ++stats.waits;
  });
}
std::string ElapsedMs(Context* c, int from, int to, float* ms) {
  if (c->events[from] < 0 || c->events[to] < 0) return "an event was never recorded";
  *ms = static_cast<float>((c->events[to] - c->events[from]) * 1e-3);
  return "";
}
std::string QueryEvent(Context*, int, bool* done) {
  *done = true;
  return "";
}

std::string BeginCapture(Context* c) {
  if (c->capturing) return "already capturing";
  c->capturing = true;
  c->recording.clear();
  return "";
}
std::string EndCapture(Context* c) {
  if (!c->capturing) return "not capturing";
  c->capturing = false;
  c->graph = std::move(c->recording);
  c->graph_nccl = c->recording_nccl;
  c->recording_nccl = 0;
  ++stats.captures;
  return "";
}
void DestroyGraph(Context* c) {
  if (c == nullptr || c->graph.empty()) return;
  stats.teardown.push_back("graph");
  c->graph.clear();
  c->graph_nccl = 0;
}

std::string CloseGate(Context* c) {
  if (c->capturing) return "";
  if (c->gated >= 0) return "close gate: already closed";
  c->gated = c->current;
  ++stats.gates;
  return "";
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
std::string LaunchGraph(Context* c) {
  if (c->capturing || c->graph.empty()) return "no graph";
  c->clock[1] = std::max(c->clock[1], c->clock[0]);  // the comm stream forks from compute
  for (const auto& call : c->graph) call();
  c->clock[0] = std::max(c->clock[0], c->clock[1]);  // and joins it
  ++stats.graph_launches;
  return "";
}

std::string Gemm(Context* c, DView a, bool transpose_a, DView, bool, DView out, bool accumulate) {
  const double k = static_cast<double>(transpose_a ? a.rows : a.cols);
  return Launch(
      c, fake::kLaunchUs + 2.0 * static_cast<double>(out.rows * out.cols) * k * fake::kUsPerFlop,
      accumulate ? Accumulate(out.data) : std::function<void()>{});
}
std::string Add(Context* c, DView, DView, DView) { return Launch(c, fake::kElementwiseUs); }
std::string NormForward(Context* c, bool, DView, const void*, float, DView) {
  return Launch(c, fake::kElementwiseUs);
}
std::string NormBackward(Context* c, bool, DView, const void*, float, DView, DView, bool,
                         void* dgamma) {
  return Launch(c, fake::kElementwiseUs, Accumulate(dgamma));
}
std::string Gelu(Context* c, DView, DView) { return Launch(c, fake::kElementwiseUs); }
std::string GeluBackward(Context* c, DView, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
std::string Swiglu(Context* c, DView, DView) { return Launch(c, fake::kElementwiseUs); }
std::string SwigluBackward(Context* c, DView, DView, DView) {
  return Launch(c, fake::kElementwiseUs);
}
std::string Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t,
                      int64_t, DView, DView) {
  if (c->workspace < AttentionWorkspaceBytes(sequences, seq_len, heads)) return "no workspace";
  return Launch(c, fake::kAttentionUs);
}
std::string AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                              int64_t, int64_t, DView, DView, DView) {
  if (c->workspace < AttentionWorkspaceBytes(sequences, seq_len, heads)) return "no workspace";
  return Launch(c, 2 * fake::kAttentionUs);
}

std::string EmulateCollective(Context* c, int ctas, double hbm_bytes, double micros) {
  if (hbm_bytes > 0 && c->emulation < EmulationWorkspaceBytes(hbm_bytes))
    return "no emulation scratch";
  ++stats.emulated;
  stats.emulated_ctas = ctas;
  return Launch(c, micros);
}
std::string ProbeEmulatedCollective(Context* c, int ctas, double hbm_bytes, double micros,
                                    EmulationProbe* out) {
  out->distinct_sms = ctas;
  out->ms = micros * 1e-3;
  out->GBps = micros > 0 ? hbm_bytes / (micros * 1e-6) / 1e9 : 0;
  return EmulateCollective(c, ctas, hbm_bytes, micros);
}

std::string MeasureGemmTflops(Context*, int64_t, int, double* tflops) {
  *tflops = fake::kPeakTflops;
  return "";
}
std::string MeasureHbmGBps(Context*, size_t, int, double* GBps) {
  *GBps = fake::kHbmGBps;
  return "";
}

std::string NcclUniqueId(std::string* id) {
  id->assign(128, 'x');
  return "";
}
std::string NcclInit(Context* context, int, int, const std::string& id, const NcclConfig& config,
                     Nccl** out) {
  if (id.size() != 128) return "bad unique id";
  // As NCCL would (exec/nccl_ctas.h).
  if (Result<NcclCtas> ctas = ResolveNcclCtas(config.min_ctas, config.max_ctas); !ctas.ok())
    return ctas.message();
  *out = new Nccl{context};
  return "";
}
std::string NcclAllReduce(Nccl* n, const void*, void*, int64_t) { return NcclLaunch(n->context); }
std::string NcclReduceScatter(Nccl* n, const void*, void*, int64_t) {
  return NcclLaunch(n->context);
}
std::string NcclAllGather(Nccl* n, const void*, void*, int64_t) { return NcclLaunch(n->context); }
std::string NcclPoll(Nccl*) { return ""; }
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
}  // namespace fake

}  // namespace domino::exec
