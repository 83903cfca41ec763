// The launch measurement of exec/cuda_ops.h: what one kernel adds to a chain of back-to-back
// kernels when each is launched from the host and when a CUDA graph replays them.
#include <algorithm>
#include <vector>

#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

__global__ void EmptyKernel() {}

// `kernels` empty kernels on `stream`, one block of one warp each.
Status LaunchEmpty(cudaStream_t stream, int kernels) {
  for (int i = 0; i < kernels; ++i) EmptyKernel<<<1, 32, 0, stream>>>();
  return Check(cudaGetLastError(), "empty kernel");
}

// The median microseconds per kernel of `repeats` timed batches of `run` (which enqueues
// `kernels` kernels on `stream`), after one warm-up batch. The events are timestamps of the GPU
// reaching them: a batch lasts as long as the GPU took to run the kernels or the host to launch
// them, whichever was longer.
template <typename Run>
Status MedianUsPerKernel(cudaStream_t stream, int kernels, int repeats, Run&& run, double* us) {
  OwnedEvent start, stop;
  Status e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  if (e.ok()) e = run();
  if (e.ok()) e = Check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> per_kernel;
  for (int i = 0; i < repeats && e.ok(); ++i) {
    e = Check(cudaEventRecord(start.event, stream), "cudaEventRecord");
    if (e.ok()) e = run();
    if (e.ok()) e = Check(cudaEventRecord(stop.event, stream), "cudaEventRecord");
    if (e.ok()) e = Check(cudaEventSynchronize(stop.event), "timed batch");
    float ms = 0.0f;
    if (e.ok()) e = Check(cudaEventElapsedTime(&ms, start.event, stop.event), "elapsed time");
    if (e.ok()) per_kernel.push_back(static_cast<double>(ms) * 1e3 / kernels);
  }
  if (!e.ok()) return e;
  std::sort(per_kernel.begin(), per_kernel.end());
  *us = per_kernel[per_kernel.size() / 2];
  if (!(*us > 0)) return Error("the timed batches took no measurable time");
  return Status::Ok();
}

}  // namespace

Status MeasureLaunchUs(Context* c, int kernels, int repeats, LaunchOverhead* out) {
  *out = LaunchOverhead{};
  if (Status e = NotCapturing(c, "measure launch overhead"); !e.ok()) return e;
  if (kernels <= 0 || repeats <= 0)
    return Error("measure launch overhead: kernels and repeats must be positive");
  const cudaStream_t stream = Current(c);
  Status e = MedianUsPerKernel(
      stream, kernels, repeats, [&] { return LaunchEmpty(stream, kernels); }, &out->eager_us);
  // The same chain captured once into a graph, then replayed.
  OwnedGraph g;
  if (e.ok())
    e = Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  if (e.ok()) {
    const Status launched = LaunchEmpty(stream, kernels);
    e = Check(cudaStreamEndCapture(stream, &g.graph), "end capture");
    if (e.ok()) e = launched;
  }
  if (e.ok()) e = Check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate");
  if (e.ok()) {
    e = MedianUsPerKernel(
        stream, kernels, repeats,
        [&] { return Check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch"); }, &out->graph_us);
  }
  if (!e.ok()) return Error("measure launch overhead: " + e.message());
  return Status::Ok();
}

}  // namespace domino::exec::cuda
