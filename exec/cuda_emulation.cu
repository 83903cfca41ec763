// The emulated collective of exec/cuda_ops.h (CommMode::kEmulate): a kernel that holds a
// collective's CTAs for its predicted time and makes its HBM traffic, and the probe that checks it.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

constexpr int kEmulationThreads = 512;
constexpr int kEmulationChunks = 32;
constexpr int kEmulationUnroll = 8;  // loads in flight per thread: one SM must move tens of GB/s

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int SmId() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Copies src[begin, begin + count) to dst[same] with the whole block, all loads of a round issued
// before its stores so that each thread keeps kEmulationUnroll loads in flight. Streaming
// (evict-first) loads and stores: the data is touched once, as a collective's buffers are.
__device__ void CopyRange(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t begin,
                          int64_t count) {
  for (int64_t k = threadIdx.x; k < count; k += int64_t{kEmulationThreads} * kEmulationUnroll) {
    uint4 v[kEmulationUnroll];
#pragma unroll
    for (int u = 0; u < kEmulationUnroll; ++u) {
      const int64_t i = k + int64_t{u} * kEmulationThreads;
      v[u] = i < count ? __ldcs(src + begin + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kEmulationUnroll; ++u) {
      const int64_t i = k + int64_t{u} * kEmulationThreads;
      if (i < count) __stcs(dst + begin + i, v[u]);
    }
  }
}

// Block b copies per_block 16-byte words from src to dst (each `half` words long), starting at
// word first + b * per_block and wrapping around, in kEmulationChunks chunks; after chunk i it
// waits until (i + 1) / kEmulationChunks of duration_ns has passed since the block began, so the
// traffic is paced over the duration when the memory system keeps up and the block runs late when
// it does not. Blocks that cover the same words store the same values. Its dynamic shared memory
// (unused) is what keeps a second block off the SM. With `smids`, block b writes its SM there.
__global__ void __launch_bounds__(kEmulationThreads)
    EmulateCollectiveKernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t half,
                            int64_t first, int64_t per_block, uint64_t duration_ns, int* smids) {
  __shared__ uint64_t start;
  if (threadIdx.x == 0) {
    start = GlobalTimerNs();
    if (smids != nullptr) smids[blockIdx.x] = SmId();
  }
  __syncthreads();
  const int64_t chunk = (per_block + kEmulationChunks - 1) / kEmulationChunks;
  for (int i = 0; i < kEmulationChunks; ++i) {
    const int64_t begin = min(int64_t{i} * chunk, per_block);
    int64_t count = min(begin + chunk, per_block) - begin;
    if (count > 0) {
      int64_t at = (first + blockIdx.x * per_block + begin) % half;
      while (count > 0) {  // the chunk as contiguous pieces between wraps
        const int64_t piece = min(count, half - at);
        CopyRange(src, dst, at, piece);
        count -= piece;
        at = 0;
      }
    }
    if (duration_ns > 0) {
      const uint64_t deadline = start + duration_ns * (i + 1) / kEmulationChunks;
      if (threadIdx.x == 0)
        while (GlobalTimerNs() < deadline) __nanosleep(128);
      __syncthreads();
    }
  }
}

Status LaunchEmulation(Context* c, int ctas, double hbm_bytes, double micros, int* smids) {
  const double bytes = hbm_bytes > 0 ? hbm_bytes : 0.0;  // NaN counts as none
  const double us = micros > 0 ? micros : 0.0;
  if (bytes == 0 && us == 0 && smids == nullptr) return Status::Ok();
  if (bytes > 1e15 || us > 1e9) return Error("emulated collective: absurd size or duration");
  ctas = std::clamp(ctas, 1, c->sms);
  int64_t half = 0, per_block = 0;
  const uint4* src = nullptr;
  uint4* dst = nullptr;
  if (bytes > 0) {
    const size_t scratch = EmulationWorkspaceBytes(bytes);
    if (c->emulation_bytes < scratch)
      return Error("emulated collective: call Reserve(EmulationWorkspaceBytes(...)) first");
    half = static_cast<int64_t>(scratch / 2 / sizeof(uint4));
    // Half the traffic is read, half written, in 16-byte words, shared out among the blocks.
    per_block = static_cast<int64_t>(std::ceil(bytes / 2 / sizeof(uint4) / ctas));
    src = static_cast<const uint4*>(c->emulation);
    dst = static_cast<uint4*>(c->emulation) + half;
  }
  const int64_t first = half > 0 ? c->emulation_cursor % half : 0;
  const auto duration_ns = static_cast<uint64_t>(std::llround(us * 1e3));
  EmulateCollectiveKernel<<<static_cast<unsigned>(ctas), kEmulationThreads,
                            static_cast<size_t>(c->emulation_shared_bytes), Current(c)>>>(
      src, dst, half > 0 ? half : 1, first, per_block, duration_ns, smids);
  if (half > 0) c->emulation_cursor = (first + per_block * ctas) % half;
  return Launched("emulated collective");
}

}  // namespace

Status EmulateCollective(Context* c, int ctas, double hbm_bytes, double micros) {
  return LaunchEmulation(c, ctas, hbm_bytes, micros, nullptr);
}

Status ProbeEmulatedCollective(Context* c, int ctas, double hbm_bytes, double micros,
                               EmulationProbe* out) {
  *out = EmulationProbe{};
  if (Status e = NotCapturing(c, "probe emulated collective"); !e.ok()) return e;
  const int blocks = std::clamp(ctas, 1, c->sms);
  DeviceMemory smids;
  OwnedEvent start, stop;
  Status e = Check(cudaMalloc(&smids.data, sizeof(int) * blocks), "cudaMalloc");
  if (e.ok()) e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventRecord(start.event, Current(c)), "cudaEventRecord");
  if (e.ok()) e = LaunchEmulation(c, ctas, hbm_bytes, micros, static_cast<int*>(smids.data));
  if (e.ok()) e = Check(cudaEventRecord(stop.event, Current(c)), "cudaEventRecord");
  if (e.ok()) e = Check(cudaEventSynchronize(stop.event), "emulated collective");
  float ms = 0;
  if (e.ok()) e = Check(cudaEventElapsedTime(&ms, start.event, stop.event), "elapsed time");
  std::vector<int> ids(static_cast<size_t>(blocks), -1);
  if (e.ok())
    e = Check(cudaMemcpy(ids.data(), smids.data, sizeof(int) * blocks, cudaMemcpyDeviceToHost),
              "smids");
  if (!e.ok()) return Error("probe emulated collective: " + e.message());
  out->distinct_sms = static_cast<int>(std::set<int>(ids.begin(), ids.end()).size());
  out->ms = ms;
  out->GBps = ms > 0 ? hbm_bytes / (ms * 1e-3) / 1e9 : 0;
  return Status::Ok();
}

Status PrepareEmulation(Context* c) {
  int per_sm = 0, per_block = 0;
  Status e =
      Check(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, c->device),
            "shared memory per SM");
  if (e.ok())
    e = Check(
        cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device),
        "shared memory per block");
  if (!e.ok()) return e;
  // One emulation block per SM: each asks for more than half of an SM's shared memory.
  c->emulation_shared_bytes = std::min(per_block - 1024, per_sm / 2 + 1024);
  return Check(
      cudaFuncSetAttribute(EmulateCollectiveKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           c->emulation_shared_bytes),
      "emulated collective's shared memory");
}

}  // namespace domino::exec::cuda
