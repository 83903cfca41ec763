// A fake GPU behind exec/cuda_ops.h, exec/nccl_ops.h and exec/cuda_device.h, so that the CUDA
// backend's own logic (which stream each op goes to, which events it records and waits for, how
// it reads its timeline, graph capture, calibration) runs and is checked on any machine. Each
// stream is a clock: a launch starts when its stream is free and lasts a duration that depends on
// the op (GEMMs by their FLOPs, an emulated collective by its time); an event records its stream's
// clock; a wait moves the waiting stream's clock forward to the event's. Capture records the
// calls and LaunchGraph replays them, forked from and joined to the compute stream, as CUDA does.
// Nothing is computed: downloads return zeros.
#include "tests/exec/fake_cuda_ops.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
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
  size_t workspace = 0, emulation = 0;
};

struct Nccl {
  Context* context = nullptr;
};

namespace {

fake::Stats stats;

// Runs `call` now, or records it for the graph while capturing.
std::string Do(Context* c, std::function<void()> call) {
  if (c->capturing) {
    c->recording.push_back(std::move(call));
  } else {
    call();
  }
  return "";
}

// A kernel of `us` microseconds on the current stream.
std::string Launch(Context* c, double us) {
  const int s = c->current;
  return Do(c, [c, s, us] {
    c->clock[s] += us;
    ++stats.launches[s];
  });
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
void Destroy(Context* context) { delete context; }
DType TypeOf(const Context* context) { return context->type; }
void UseStream(Context* context, StreamKind stream) {
  context->current = stream == StreamKind::kCompute ? 0 : 1;
}
void* StreamHandle(Context* context, StreamKind stream) {
  return &context->clock[stream == StreamKind::kCompute ? 0 : 1];
}
std::string Synchronize(Context* context) { return NotCapturing(context, "synchronize"); }

std::string Alloc(Context* context, size_t elements, void** out) {
  *out = std::calloc(std::max<size_t>(1, elements), DTypeBytes(context->type));
  return *out != nullptr ? "" : "out of fake memory";
}
void Free(void* data) { std::free(data); }
std::string Reserve(Context* context, size_t bytes) {
  if (!context->capturing) context->workspace = std::max(context->workspace, bytes);
  context->emulation = std::max(context->emulation, std::min<size_t>(bytes, size_t{256} << 20));
  return NotCapturing(context, "reserve");
}
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t) {
  return static_cast<size_t>(sequences * seq_len * seq_len * 12);
}
size_t EmulationWorkspaceBytes(double hbm_bytes) {
  return hbm_bytes <= 0 ? 0
                        : std::clamp<size_t>(static_cast<size_t>(hbm_bytes), 4 << 20, 256 << 20);
}

std::string Upload(Context* context, DView, const float*) {
  return NotCapturing(context, "upload");
}
std::string Download(Context* context, DView src, float* host) {
  std::fill(host, host + src.rows * src.cols, 0.0f);
  return NotCapturing(context, "download");
}
std::string Copy(Context* c, DView, DView) { return Launch(c, fake::kCopyUs); }
std::string Zero(Context* c, DView) { return Launch(c, fake::kCopyUs); }

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
  ++stats.captures;
  return "";
}
std::string LaunchGraph(Context* c) {
  if (c->capturing || c->graph.empty()) return "no graph";
  c->clock[1] = std::max(c->clock[1], c->clock[0]);  // the comm stream forks from compute
  for (const auto& call : c->graph) call();
  c->clock[0] = std::max(c->clock[0], c->clock[1]);  // and joins it
  ++stats.graph_launches;
  return "";
}

std::string Gemm(Context* c, DView a, bool transpose_a, DView, bool, DView out, bool) {
  const double k = static_cast<double>(transpose_a ? a.rows : a.cols);
  return Launch(
      c, fake::kLaunchUs + 2.0 * static_cast<double>(out.rows * out.cols) * k * fake::kUsPerFlop);
}
std::string Add(Context* c, DView, DView, DView) { return Launch(c, fake::kElementwiseUs); }
std::string NormForward(Context* c, bool, DView, const void*, float, DView) {
  return Launch(c, fake::kElementwiseUs);
}
std::string NormBackward(Context* c, bool, DView, const void*, float, DView, DView, bool, void*) {
  return Launch(c, fake::kElementwiseUs);
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
std::string NcclInit(Context* context, int, int, const std::string& id, const NcclConfig&,
                     Nccl** out) {
  if (id.size() != 128) return "bad unique id";
  *out = new Nccl{context};
  return "";
}
std::string NcclAllReduce(Nccl* n, const void*, void*, int64_t) {
  return Launch(n->context, fake::kNcclUs);
}
std::string NcclReduceScatter(Nccl* n, const void*, void*, int64_t) {
  return Launch(n->context, fake::kNcclUs);
}
std::string NcclAllGather(Nccl* n, const void*, void*, int64_t) {
  return Launch(n->context, fake::kNcclUs);
}
std::string NcclPoll(Nccl*) { return ""; }
void NcclAbort(Nccl* n) { delete n; }
void NcclDestroy(Nccl* n) { delete n; }

}  // namespace cuda

namespace fake {
const Stats& Counters() { return cuda::stats; }
}  // namespace fake

}  // namespace domino::exec
