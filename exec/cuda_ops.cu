// The runtime half of exec/cuda_ops.h: contexts and their streams, memory and host transfers,
// events, graph capture and the HBM measurement. The layer kernels and their launchers are in
// cuda_layers.cu, cuda_activations.cu, cuda_attention.cu and cuda_ends.cu, the emulated
// collective in cuda_emulation.cu, the GEMM measurements in cuda_gemm_bench.cu; what they share
// is in cuda_common.cuh.
#include <cuda.h>  // types of the driver's cuStreamWaitValue32 only: nothing links libcuda

#include <atomic>
#include <memory>

#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

template <typename T>
__global__ void UnpackKernel(const float* src, Mat<T> dst) {
  FOR_EACH_ELEMENT(dst.rows, dst.cols, r, j) dst.Set(r, j, src[r * dst.cols + j]);
}

template <typename T>
__global__ void PackKernel(Mat<T> src, float* dst) {
  FOR_EACH_ELEMENT(src.rows, src.cols, r, j) dst[r * src.cols + j] = src.Get(r, j);
}

// Element (r, j) = a hash of (seed, r * cols + j) mapped to [-1, 1).
template <typename T>
__global__ void RandomKernel(Mat<T> m, uint64_t seed) {
  const uint64_t key = SplitMix64(seed);
  FOR_EACH_ELEMENT(m.rows, m.cols, r, j)
  m.Set(r, j, UniformOf(key, static_cast<uint64_t>(r * m.cols + j)));
}

// Times `run` (enqueueing on the current stream) `repeats` times after one warm-up run: the
// fastest, in milliseconds.
template <typename F>
Status BestMs(Context* c, int repeats, F&& run, float* best_ms) {
  OwnedEvent start, stop;
  Status e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  if (e.ok()) e = run();
  if (e.ok()) e = Check(cudaStreamSynchronize(Current(c)), "warm-up");
  *best_ms = INFINITY;
  for (int i = 0; i < repeats && e.ok(); ++i) {
    e = Check(cudaEventRecord(start.event, Current(c)), "cudaEventRecord");
    if (e.ok()) e = run();
    if (e.ok()) e = Check(cudaEventRecord(stop.event, Current(c)), "cudaEventRecord");
    if (e.ok()) e = Check(cudaEventSynchronize(stop.event), "timed run");
    float ms = 0.0f;
    if (e.ok()) e = Check(cudaEventElapsedTime(&ms, start.event, stop.event), "elapsed time");
    if (e.ok()) *best_ms = std::min(*best_ms, ms);
  }
  if (e.ok() && !(*best_ms > 0.0f)) e = Error("the timed runs took no measurable time");
  return e;
}

Status Init(Context* c) {
  if (c->type != DType::kF32 && c->type != DType::kBf16 && c->type != DType::kF16)
    return Error("unknown element type");
  Status e = Check(cudaSetDevice(c->device), "cudaSetDevice");
  if (e.ok())
    e = Check(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, c->device),
              "multiprocessor count");
  int least = 0, greatest = 0;  // least: the lowest priority, numerically the greatest
  if (e.ok()) e = Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
  if (e.ok())
    e = Check(cudaStreamCreateWithPriority(&c->streams[0], cudaStreamNonBlocking, least),
              "compute stream");
  // The comm stream gets the highest priority: its kernels (a collective or its emulation) take
  // SMs ahead of queued compute blocks, as NCCL's would.
  if (e.ok())
    e = Check(cudaStreamCreateWithPriority(&c->streams[1], cudaStreamNonBlocking, greatest),
              "comm stream");
  for (int s = 0; s < 2 && e.ok(); ++s) {
    e = Check(cudaMalloc(&c->blas_workspace[s], kBlasWorkspaceBytes), "cuBLAS workspace");
    if (e.ok())
      e = Check(cudaMalloc(reinterpret_cast<void**>(&c->reduce[s]), kReduceFloats * sizeof(float)),
                "norm reduction buffer");
  }
  if (e.ok()) e = Check(cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming), "event");
  if (e.ok()) e = Check(cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming), "event");
  if (e.ok()) e = CheckBlas(cublasCreate(&c->blas), "cublasCreate");
  if (e.ok()) e = BindBlas(c);
  if (e.ok()) e = PrepareEmulation(c);
  if (e.ok()) {
    void* word = nullptr;
    e = Check(cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped), "gate word");
    if (e.ok()) {
      c->gate = static_cast<volatile uint32_t*>(word);
      *c->gate = 0;
      e = Check(cudaHostGetDevicePointer(&c->gate_device, word, 0), "gate word");
    }
  }
  if (e.ok()) {
    // Without the driver's stream memory operations a gate does nothing: timings then include
    // the host's enqueue latency, as they did before gates.
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      c->wait_value = fn;
    cudaGetLastError();
  }
  return e;
}

Status EnsureStaging(Context* c, size_t floats) {
  if (c->staging_floats >= floats) return Status::Ok();
  cudaFree(c->staging);
  c->staging = nullptr;
  c->staging_floats = 0;
  Status e =
      Check(cudaMalloc(reinterpret_cast<void**>(&c->staging), floats * sizeof(float)), "staging");
  if (e.ok()) c->staging_floats = floats;
  return e;
}

Status EventAt(Context* c, int index, cudaEvent_t* out) {
  if (index < 0 || static_cast<size_t>(index) >= c->events.size())
    return Error("event " + std::to_string(index) + " does not exist (CreateEvents)");
  *out = c->events[static_cast<size_t>(index)];
  return Status::Ok();
}

// Grows one of the Reserve buffers to `bytes`, zeroed so that nothing ever reads uninitialized
// memory (the emulated collective reads whatever is there).
Status Grow(Context* c, void** data, size_t* size, size_t bytes) {
  if (*size >= bytes) return Status::Ok();
  cudaFree(*data);  // synchronizes the device, so no queued kernel still uses it
  *data = nullptr;
  *size = 0;
  Status e = Check(cudaMalloc(data, bytes), "cudaMalloc");
  if (e.ok()) e = Check(cudaMemsetAsync(*data, 0, bytes, Current(c)), "cudaMemsetAsync");
  if (e.ok()) e = Check(cudaStreamSynchronize(Current(c)), "cudaMemsetAsync");
  if (e.ok()) *size = bytes;
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The context

Status Create(int device, DType type, Context** out) {
  *out = nullptr;
  auto c = std::make_unique<Context>();
  c->device = device;
  c->type = type;
  Status e = Init(c.get());
  if (!e.ok()) {
    Destroy(c.release());
    return e;
  }
  *out = c.release();
  return Status::Ok();
}

void Destroy(Context* context) {
  std::unique_ptr<Context> c(context);
  if (c == nullptr) return;
  if (c->capturing) {  // abandon the capture: the streams must leave capture mode to be used
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(c->streams[0], &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  OpenGate(c.get());                 // a stream waiting at a gate would never drain
  for (cudaStream_t s : c->streams)  // nothing queued may still use what is freed below
    if (s != nullptr) cudaStreamSynchronize(s);
  DestroyGraph(c.get());
  for (cudaEvent_t e : c->events) cudaEventDestroy(e);
  if (c->fork != nullptr) cudaEventDestroy(c->fork);
  if (c->join != nullptr) cudaEventDestroy(c->join);
  if (c->blas != nullptr) cublasDestroy(c->blas);
  for (int s = 0; s < 2; ++s) {
    cudaFree(c->blas_workspace[s]);
    cudaFree(c->reduce[s]);
  }
  cudaFree(c->staging);
  cudaFree(c->workspace);
  cudaFree(c->emulation);
  if (c->gate != nullptr) cudaFreeHost(const_cast<uint32_t*>(c->gate));
  for (cudaStream_t s : c->streams)
    if (s != nullptr) cudaStreamDestroy(s);
  cudaGetLastError();  // leave no error of the teardown to the next caller
}

DType TypeOf(const Context* context) { return context->type; }

void UseStream(Context* context, StreamKind stream) {
  context->current = stream == StreamKind::kComm ? 1 : 0;  // cuBLAS follows at its next GEMM
}

void* StreamHandle(Context* context, StreamKind stream) {
  return context->streams[stream == StreamKind::kComm ? 1 : 0];
}

Status Synchronize(Context* c) {
  if (Status e = NotCapturing(c, "synchronize"); !e.ok()) return e;
  Status e = Check(cudaStreamSynchronize(c->streams[0]), "compute stream");
  if (e.ok()) e = Check(cudaStreamSynchronize(c->streams[1]), "comm stream");
  if (e.ok()) e = Check(cudaGetLastError(), "CUDA");
  return e;
}

// ---------------------------------------------------------------------------------------------
// Memory

Status Alloc(Context* c, size_t elements, void** out) {
  *out = nullptr;
  if (Status e = NotCapturing(c, "alloc"); !e.ok()) return e;
  elements = std::max<size_t>(elements, 1);
  if (elements > SIZE_MAX / Bytes(c)) return Error("alloc: size overflows");
  return Check(cudaMalloc(out, elements * Bytes(c)), "cudaMalloc");
}

void Free(void* data) { cudaFree(data); }

Status Reserve(Context* c, size_t bytes) {
  if (Status e = NotCapturing(c, "reserve"); !e.ok()) return e;
  // One size, two buffers: the caller may reserve the largest need or the sum of the needs, and
  // either way both the attention and the emulated collective get enough, apart.
  Status e = Grow(c, &c->workspace, &c->workspace_bytes, bytes);
  if (e.ok()) e = Grow(c, &c->emulation, &c->emulation_bytes, std::min(bytes, kEmulationBytes));
  return e;
}

// Scores and probabilities of one query head for all sequences at a time: fp32 S/P and dP/dS,
// 16-bit copies of P and dS (unused for fp32), and each row's fp32 log-sum-exp, each region
// 256-byte aligned. Independent of `heads` because the kernels loop over heads.
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t heads) {
  if (sequences <= 0 || seq_len <= 0) return 0;
  const size_t rows = static_cast<size_t>(sequences) * static_cast<size_t>(seq_len);
  const size_t cells = rows * static_cast<size_t>(seq_len);
  return 2 * AlignUp(cells * 4, kAlign) + 2 * AlignUp(cells * 2, kAlign) +
         AlignUp(rows * 4, kAlign);
}

size_t EmulationWorkspaceBytes(double hbm_bytes) { return hbm_bytes > 0 ? kEmulationBytes : 0; }

Status Upload(Context* c, DView dst, const float* host, bool f32) {
  if (Status e = NotCapturing(c, "upload"); !e.ok()) return e;
  if (!Valid(dst)) return Error("upload: invalid view");
  if (Empty(dst)) return Status::Ok();
  const cudaStream_t stream = Current(c);
  const size_t count = static_cast<size_t>(dst.rows * dst.cols);
  Status e;
  if (c->type == DType::kF32 || f32) {
    e = Check(
        cudaMemcpy2DAsync(dst.data, dst.stride * sizeof(float), host, dst.cols * sizeof(float),
                          dst.cols * sizeof(float), dst.rows, cudaMemcpyHostToDevice, stream),
        "upload");
  } else {
    e = EnsureStaging(c, count);
    if (e.ok())
      e = Check(
          cudaMemcpyAsync(c->staging, host, count * sizeof(float), cudaMemcpyHostToDevice, stream),
          "upload");
    if (e.ok()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        UnpackKernel<T><<<RowBlocks(dst.rows), kThreads, 0, stream>>>(c->staging, Typed<T>(dst));
        return Launched("upload conversion");
      });
    }
  }
  if (e.ok()) e = Check(cudaStreamSynchronize(stream), "upload");
  return e;
}

Status Download(Context* c, DView src, float* host, bool f32) {
  if (Status e = NotCapturing(c, "download"); !e.ok()) return e;
  if (!Valid(src)) return Error("download: invalid view");
  if (Empty(src)) return Status::Ok();
  const cudaStream_t stream = Current(c);
  const size_t count = static_cast<size_t>(src.rows * src.cols);
  Status e;
  if (c->type == DType::kF32 || f32) {
    e = Check(
        cudaMemcpy2DAsync(host, src.cols * sizeof(float), src.data, src.stride * sizeof(float),
                          src.cols * sizeof(float), src.rows, cudaMemcpyDeviceToHost, stream),
        "download");
  } else {
    e = EnsureStaging(c, count);
    if (e.ok()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        PackKernel<T><<<RowBlocks(src.rows), kThreads, 0, stream>>>(Typed<T>(src), c->staging);
        return Launched("download conversion");
      });
    }
    if (e.ok())
      e = Check(
          cudaMemcpyAsync(host, c->staging, count * sizeof(float), cudaMemcpyDeviceToHost, stream),
          "download");
  }
  if (e.ok()) e = Check(cudaStreamSynchronize(stream), "download");
  return e;
}

Status Copy(Context* c, DView src, DView dst) {
  if (!Valid(src) || !Valid(dst) || !SameShape(src, dst))
    return Error("copy: views differ in shape");
  if (Empty(src)) return Status::Ok();
  const size_t b = Bytes(c);
  return Check(cudaMemcpy2DAsync(dst.data, dst.stride * b, src.data, src.stride * b, src.cols * b,
                                 src.rows, cudaMemcpyDeviceToDevice, Current(c)),
               "copy");
}

Status FillRandom(Context* c, DView view, uint64_t seed) {
  if (!Valid(view)) return Error("fill random: invalid view");
  if (Empty(view)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RandomKernel<T><<<RowBlocks(view.rows), kThreads, 0, Current(c)>>>(Typed<T>(view), seed);
    return Launched("fill random");
  });
}

Status Zero(Context* c, DView view) {
  if (!Valid(view)) return Error("zero: invalid view");
  if (Empty(view)) return Status::Ok();
  const size_t b = Bytes(c);  // all-zero bits are 0.0 in fp32, bf16 and fp16
  return Check(
      cudaMemset2DAsync(view.data, view.stride * b, 0, view.cols * b, view.rows, Current(c)),
      "zero");
}

// ---------------------------------------------------------------------------------------------
// Events and graphs

Status CreateEvents(Context* c, int count) {
  if (count < 0) return Error("events: negative count");
  for (cudaEvent_t e : c->events) cudaEventDestroy(e);
  c->events.clear();
  for (int i = 0; i < count; ++i) {
    cudaEvent_t event = nullptr;
    // Default flags: timing enabled, so any event can be an end of ElapsedMs.
    if (Status e = Check(cudaEventCreate(&event), "cudaEventCreate"); !e.ok()) return e;
    c->events.push_back(event);
  }
  return Status::Ok();
}

Status RecordEvent(Context* c, int event, bool timing) {
  cudaEvent_t ev = nullptr;
  if (Status e = EventAt(c, event, &ev); !e.ok()) return e;
  const cudaStream_t stream = Current(c);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (Status e = Check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing"); !e.ok())
    return e;
  // Under capture a plain record only orders the captured work; an external record becomes a
  // node, so each replay records the event and ElapsedMs can time the replay.
  if (timing && status == cudaStreamCaptureStatusActive)
    return Check(cudaEventRecordWithFlags(ev, stream, cudaEventRecordExternal),
                 "cudaEventRecordWithFlags");
  return Check(cudaEventRecord(ev, stream), "cudaEventRecord");
}

Status WaitEvent(Context* c, int event) {
  cudaEvent_t ev = nullptr;
  if (Status e = EventAt(c, event, &ev); !e.ok()) return e;
  return Check(cudaStreamWaitEvent(Current(c), ev, 0), "cudaStreamWaitEvent");
}

Status ElapsedMs(Context* c, int from, int to, float* ms) {
  cudaEvent_t a = nullptr, b = nullptr;
  if (Status e = EventAt(c, from, &a); !e.ok()) return e;
  if (Status e = EventAt(c, to, &b); !e.ok()) return e;
  return Check(cudaEventElapsedTime(ms, a, b), "cudaEventElapsedTime");
}

Status QueryEvent(Context* c, int event, bool* done) {
  cudaEvent_t ev = nullptr;
  if (Status e = EventAt(c, event, &ev); !e.ok()) return e;
  const cudaError_t status = cudaEventQuery(ev);
  *done = status == cudaSuccess;
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so later checks do not see it
    return Status::Ok();
  }
  return Check(status, "cudaEventQuery");
}

Status BeginCapture(Context* c) {
  if (c->capturing) return Error("begin capture: already capturing");
  // Thread-local: other threads' unsafe calls (an allocation, a sync) do not break this capture,
  // while this thread's would, loudly.
  Status e = Check(cudaStreamBeginCapture(c->streams[0], cudaStreamCaptureModeThreadLocal),
                   "cudaStreamBeginCapture");
  if (!e.ok()) return e;
  c->capturing = true;
  e = Check(cudaEventRecord(c->fork, c->streams[0]), "capture fork");
  if (e.ok()) e = Check(cudaStreamWaitEvent(c->streams[1], c->fork, 0), "capture fork");
  if (!e.ok()) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(c->streams[0], &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    c->capturing = false;
  }
  return e;
}

Status EndCapture(Context* c) {
  if (!c->capturing) return Error("end capture: not capturing");
  Status e = Check(cudaEventRecord(c->join, c->streams[1]), "capture join");
  if (e.ok()) e = Check(cudaStreamWaitEvent(c->streams[0], c->join, 0), "capture join");
  cudaGraph_t graph = nullptr;
  const Status end = Check(cudaStreamEndCapture(c->streams[0], &graph), "cudaStreamEndCapture");
  c->capturing = false;
  if (e.ok()) e = end;
  cudaGraphExec_t exec = nullptr;
  // Node priorities keep the comm stream's priority (copied into its kernel nodes at capture)
  // when the graph runs; without the flag every node would run at the launch stream's.
  if (e.ok())
    e = Check(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority),
              "cudaGraphInstantiate");
  if (graph != nullptr) cudaGraphDestroy(graph);  // the executable graph keeps its own copy
  if (!e.ok()) return e;
  if (c->graph != nullptr) cudaGraphExecDestroy(c->graph);  // freed once any replay finishes
  c->graph = exec;
  return Status::Ok();
}

Status LaunchGraph(Context* c) {
  if (c->graph == nullptr) return Error("launch graph: no graph has been captured");
  return Check(cudaGraphLaunch(c->graph, c->streams[0]), "cudaGraphLaunch");
}

void DestroyGraph(Context* c) {
  if (c == nullptr || c->graph == nullptr) return;
  cudaGraphExecDestroy(c->graph);  // a replay in flight completes first
  c->graph = nullptr;
}

Status CloseGate(Context* c) {
  if (c->capturing || c->wait_value == nullptr) return Status::Ok();
  if (c->gate_closed) return Error("close gate: already closed");
  using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  const uint32_t epoch = c->gate_epoch + 1;
  const CUresult r = reinterpret_cast<WaitValue>(c->wait_value)(
      Current(c), reinterpret_cast<CUdeviceptr>(c->gate_device), epoch, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    c->wait_value = nullptr;  // unsupported here: no gates from now on
    return Status::Ok();
  }
  c->gate_epoch = epoch;
  c->gate_closed = true;
  return Status::Ok();
}

void OpenGate(Context* c) {
  if (c == nullptr || !c->gate_closed) return;
  std::atomic_thread_fence(std::memory_order_release);
  *c->gate = c->gate_epoch;
  c->gate_closed = false;
}

// ---------------------------------------------------------------------------------------------
// The HBM measurement

Status MeasureHbmGBps(Context* c, size_t bytes, int repeats, double* GBps) {
  *GBps = 0;
  if (Status e = NotCapturing(c, "measure HBM"); !e.ok()) return e;
  if (bytes == 0 || repeats <= 0) return Error("measure HBM: bytes and repeats must be positive");
  DeviceMemory src, dst;
  Status e = Check(cudaMalloc(&src.data, bytes), "cudaMalloc");
  if (e.ok()) e = Check(cudaMalloc(&dst.data, bytes), "cudaMalloc");
  if (e.ok()) e = Check(cudaMemsetAsync(src.data, 1, bytes, Current(c)), "cudaMemsetAsync");
  float best_ms = 0.0f;
  if (e.ok()) {
    e = BestMs(
        c, repeats,
        [&] {
          return Check(
              cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, Current(c)),
              "cudaMemcpyAsync");
        },
        &best_ms);
  }
  if (!e.ok()) return Error("measure HBM: " + e.message());
  *GBps = 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;  // read + written
  return Status::Ok();
}

}  // namespace domino::exec::cuda
