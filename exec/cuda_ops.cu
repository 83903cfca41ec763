// The CUDA half of the CUDA backend (exec/cuda_ops.h). A "kernels" section of kernels templated on
// the element type T (float, __nv_bfloat16, __half) that load and store T and compute in fp32,
// then the launchers: each checks its shapes, dispatches on the context's type, enqueues on the
// current stream and checks the launch. GEMMs, including the attention's, go through cuBLAS.
#include "exec/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <vector>

namespace domino::exec::cuda {

namespace {

// cuBLAS gets a workspace we own so that it never allocates while a stream is being captured.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// NormBackward's per-block fp32 dgamma partial sums: blocks x cols floats at most.
constexpr size_t kReduceFloats = size_t{1} << 20;
// The emulated collective's scratch: at least this much, so that small transfers still stream
// through memory rather than one cache line, and at most the cap (traffic wraps around it).
constexpr size_t kMinEmulationBytes = size_t{4} << 20;
constexpr size_t kMaxEmulationBytes = size_t{256} << 20;
constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes, size_t align) { return (bytes + align - 1) / align * align; }

}  // namespace

// Everything a context owns. Buffers that a stream's work writes are per stream (the cuBLAS
// workspace, the dgamma partial sums) so that work on the two streams may overlap; the attention
// scratch is used by one stream at a time, and the emulated collective has its own scratch so that
// it can run on the comm stream beside attention on the compute stream.
struct Context {
  int device = 0;
  DType type = DType::kF32;
  int sms = 1;
  cudaStream_t streams[2] = {nullptr, nullptr};  // indexed by StreamKind
  int current = 0;
  cublasHandle_t blas = nullptr;
  int blas_stream = -1;  // the stream the handle is bound to; -1 before the first GEMM
  void* blas_workspace[2] = {nullptr, nullptr};
  float* reduce[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> events;
  cudaEvent_t fork = nullptr, join = nullptr;  // bring the comm stream into a capture and back
  cudaGraphExec_t graph = nullptr;
  bool capturing = false;
  float* staging = nullptr;  // fp32 copies of host data on their way to or from 16-bit views
  size_t staging_floats = 0;
  void* workspace = nullptr;  // the attention scratch (Reserve)
  size_t workspace_bytes = 0;
  void* emulation = nullptr;  // the emulated collective's scratch (Reserve)
  size_t emulation_bytes = 0;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Element types

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);  // round to nearest even
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half(v);  // round to nearest even
}

// A DView with its element type: element (r, c) at data[r * stride + c].
template <typename T>
struct Mat {
  T* data;
  int64_t rows, cols, stride;
  __device__ float Get(int64_t r, int64_t c) const { return ToFloat(data[r * stride + c]); }
  __device__ void Set(int64_t r, int64_t c, float v) const {
    data[r * stride + c] = FromFloat<T>(v);
  }
};

template <typename T>
Mat<T> Typed(DView v) {
  return Mat<T>{static_cast<T*>(v.data), v.rows, v.cols, v.stride};
}

// ---------------------------------------------------------------------------------------------
// Kernels

constexpr int kThreads = 256;  // every block-reducing kernel runs this many threads

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces one value per thread over the block (blockDim.x a multiple of 32); every thread gets the
// result. Ends with a barrier so that the next call may reuse the shared array.
template <typename Op>
__device__ float BlockReduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset >>= 1)
      v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float result = partial[0];
  __syncthreads();
  return result;
}

__device__ float BlockSum(float v) { return BlockReduce(v, SumOp{}, 0.0f); }
__device__ float BlockMax(float v) { return BlockReduce(v, MaxOp{}, -INFINITY); }

// The elementwise kernels walk rows with blocks and columns with threads, so no thread divides a
// flat index by the column count.
#define FOR_EACH_ELEMENT(rows, cols, r, j)                 \
  for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x) \
    for (int64_t j = threadIdx.x; j < (cols); j += blockDim.x)

template <typename T>
__global__ void UnpackKernel(const float* src, Mat<T> dst) {
  FOR_EACH_ELEMENT(dst.rows, dst.cols, r, j) dst.Set(r, j, src[r * dst.cols + j]);
}

template <typename T>
__global__ void PackKernel(Mat<T> src, float* dst) {
  FOR_EACH_ELEMENT(src.rows, src.cols, r, j) dst[r * src.cols + j] = src.Get(r, j);
}

template <typename T>
__global__ void FillKernel(T* data, int64_t count, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[i] = FromFloat<T>(value);
}

template <typename T>
__global__ void AddKernel(Mat<T> a, Mat<T> b, Mat<T> c) {
  FOR_EACH_ELEMENT(c.rows, c.cols, r, j) c.Set(r, j, a.Get(r, j) + b.Get(r, j));
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

template <typename T>
__global__ void GeluKernel(Mat<T> x, Mat<T> y) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) {
    const float v = x.Get(r, j);
    y.Set(r, j, 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v))));
  }
}

// With t = tanh(c (x + a x^3)): dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
template <typename T>
__global__ void GeluBackwardKernel(Mat<T> x, Mat<T> dy, Mat<T> dx) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) {
    const float v = x.Get(r, j), t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    const float slope =
        0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx.Set(r, j, dy.Get(r, j) * slope);
  }
}

// x = [gate | up], y = silu(gate) * up.
template <typename T>
__global__ void SwigluKernel(Mat<T> x, Mat<T> y) {
  FOR_EACH_ELEMENT(y.rows, y.cols, r, j) {
    const float g = x.Get(r, j), u = x.Get(r, y.cols + j);
    y.Set(r, j, g / (1.0f + expf(-g)) * u);
  }
}

// With s = sigmoid(gate): dgate = dy up s (1 + gate (1 - s)), dup = dy gate s.
template <typename T>
__global__ void SwigluBackwardKernel(Mat<T> x, Mat<T> dy, Mat<T> dx) {
  const int64_t f = dy.cols;
  FOR_EACH_ELEMENT(dy.rows, f, r, j) {
    const float g = x.Get(r, j), u = x.Get(r, f + j), d = dy.Get(r, j);
    const float s = 1.0f / (1.0f + expf(-g));
    dx.Set(r, j, d * u * s * (1.0f + g * (1.0f - s)));
    dx.Set(r, f + j, d * g * s);
  }
}

#undef FOR_EACH_ELEMENT

// The statistics of one row of a norm, computed by the whole block: y = (x - mean) * inv * gamma,
// mean = 0 for RMSNorm. Two passes (the mean, then the squared deviations) as the CPU kernel.
template <typename T>
__device__ void RowStats(bool rms, const T* x, int64_t n, float eps, float* mean, float* inv) {
  float m = 0.0f;
  if (!rms) {  // uniform over the block, so every thread reaches BlockSum's barriers
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += ToFloat(x[j]);
    m = BlockSum(s) / static_cast<float>(n);
  }
  float q = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float d = ToFloat(x[j]) - m;
    q += d * d;
  }
  *mean = m;
  *inv = rsqrtf(BlockSum(q) / static_cast<float>(n) + eps);
}

// One block per row.
template <typename T>
__global__ void NormForwardKernel(bool rms, Mat<T> x, const T* gamma, float eps, Mat<T> y) {
  const int64_t r = blockIdx.x;
  const T* xr = x.data + r * x.stride;
  float mean, inv;
  RowStats(rms, xr, x.cols, eps, &mean, &inv);
  for (int64_t j = threadIdx.x; j < x.cols; j += blockDim.x)
    y.Set(r, j, (ToFloat(xr[j]) - mean) * inv * ToFloat(gamma[j]));
}

// Block b takes rows b, b + gridDim.x, ...: writes their dx (the formulas of cpu_kernels.cc) and
// sums dy * xhat over them into partial[b * cols + j], fp32. Thread t owns columns t, t +
// blockDim.x, ... of the partial row, so no two threads touch one entry.
template <typename T>
__global__ void NormBackwardRowsKernel(bool rms, Mat<T> x, const T* gamma, float eps, Mat<T> dy,
                                       Mat<T> dx, bool accumulate, float* partial) {
  const int64_t n = x.cols;
  float* part = partial + blockIdx.x * n;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const bool first = r == blockIdx.x;
    const T* xr = x.data + r * x.stride;
    const T* dyr = dy.data + r * dy.stride;
    float mean, inv;
    RowStats(rms, xr, n, eps, &mean, &inv);
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float xhat = (ToFloat(xr[j]) - mean) * inv, d = ToFloat(dyr[j]);
      const float g = d * ToFloat(gamma[j]);
      sg += g;
      sgx += g * xhat;
      part[j] = first ? d * xhat : part[j] + d * xhat;
    }
    const float mean_g = rms ? 0.0f : BlockSum(sg) / static_cast<float>(n);
    const float mean_gx = BlockSum(sgx) / static_cast<float>(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float xhat = (ToFloat(xr[j]) - mean) * inv;
      const float g = ToFloat(dyr[j]) * ToFloat(gamma[j]);
      const float d = inv * (g - mean_g - xhat * mean_gx);
      dx.Set(r, j, accumulate ? dx.Get(r, j) + d : d);
    }
  }
}

// dgamma[j] += the sum of the `parts` partial rows, added in fp32 and rounded once.
template <typename T>
__global__ void AddColumnSumsKernel(const float* partial, int64_t parts, int64_t n, T* dgamma) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t p = 0; p < parts; ++p) s += partial[p * n + j];
    dgamma[j] = FromFloat<T>(ToFloat(dgamma[j]) + s);
  }
}

// One block per row of the scores of all sequences (row = sequence * n + query token t, n keys per
// row, fp32, already scaled): the causal softmax in place, keys after t get probability 0. When
// p_t is not null, the probabilities are also stored there as T for the next GEMM.
template <typename T>
__global__ void CausalSoftmaxKernel(float* s, T* p_t, int64_t n) {
  const int64_t row = blockIdx.x, t = row % n;
  float* sr = s + row * n;
  float peak = -INFINITY;
  for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) peak = fmaxf(peak, sr[u]);
  peak = BlockMax(peak);
  float sum = 0.0f;
  for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) {
    const float e = expf(sr[u] - peak);
    sr[u] = e;
    sum += e;
  }
  const float inv = 1.0f / BlockSum(sum);  // >= 1 term equals exp(0), so sum >= 1
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) {
    const float p = u <= t ? sr[u] * inv : 0.0f;
    sr[u] = p;
    if (p_t != nullptr) p_t[row * n + u] = FromFloat<T>(p);
  }
}

// The softmax backward of one row (layout as CausalSoftmaxKernel): dS = P (dP - rowsum(P dP)),
// written over dP in fp32 and, when ds_t is not null, as T. Masked keys have P = 0, so dS = 0.
template <typename T>
__global__ void SoftmaxBackwardKernel(const float* p, float* dp, T* ds_t, int64_t n) {
  const int64_t row = blockIdx.x;
  const float* pr = p + row * n;
  float* dr = dp + row * n;
  float dot = 0.0f;
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) dot += pr[u] * dr[u];
  dot = BlockSum(dot);
  for (int64_t u = threadIdx.x; u < n; u += blockDim.x) {
    const float ds = pr[u] * (dr[u] - dot);
    dr[u] = ds;
    if (ds_t != nullptr) ds_t[row * n + u] = FromFloat<T>(ds);
  }
}

constexpr int kEmulationThreads = 512;
constexpr int kEmulationChunks = 32;
constexpr int kEmulationUnroll = 8;  // loads in flight per thread: one SM must move tens of GB/s

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Copies src[begin, begin + count) to dst[same] with the whole block, all loads of a round issued
// before its stores so that each thread keeps kEmulationUnroll loads in flight.
__device__ void CopyRange(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t begin,
                          int64_t count) {
  for (int64_t k = threadIdx.x; k < count; k += int64_t{kEmulationThreads} * kEmulationUnroll) {
    uint4 v[kEmulationUnroll];
#pragma unroll
    for (int u = 0; u < kEmulationUnroll; ++u) {
      const int64_t i = k + int64_t{u} * kEmulationThreads;
      v[u] = i < count ? src[begin + i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kEmulationUnroll; ++u) {
      const int64_t i = k + int64_t{u} * kEmulationThreads;
      if (i < count) dst[begin + i] = v[u];
    }
  }
}

// Block b copies per_block 16-byte words from src to dst (each `half` words long), starting at
// word b * per_block and wrapping around, in kEmulationChunks chunks; after chunk i it waits until
// (i + 1) / kEmulationChunks of duration_ns has passed since the block began, so the traffic is
// paced over the duration when the memory system keeps up and the block runs late when it does
// not. Blocks that cover the same words store the same values.
__global__ void __launch_bounds__(kEmulationThreads)
    EmulateCollectiveKernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t half,
                            int64_t per_block, uint64_t duration_ns) {
  __shared__ uint64_t start;
  if (threadIdx.x == 0) start = GlobalTimerNs();
  __syncthreads();
  const int64_t chunk = (per_block + kEmulationChunks - 1) / kEmulationChunks;
  for (int i = 0; i < kEmulationChunks; ++i) {
    const int64_t begin = min(int64_t{i} * chunk, per_block);
    int64_t count = min(begin + chunk, per_block) - begin;
    if (count > 0) {
      int64_t at = (blockIdx.x * per_block + begin) % half;
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

// ---------------------------------------------------------------------------------------------
// Launchers' helpers

std::string Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorString(status);
}

std::string CheckBlas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return "";
  return std::string(what) + ": " + cublasGetStatusName(status);
}

std::string Launched(const char* kernel) { return Check(cudaGetLastError(), kernel); }

cudaStream_t Current(const Context* c) { return c->streams[c->current]; }

size_t Bytes(const Context* c) { return DTypeBytes(c->type); }

void* Offset(void* data, int64_t elements, size_t element_bytes) {
  return static_cast<char*>(data) + elements * static_cast<int64_t>(element_bytes);
}

// Blocks for the row-walking kernels: one per row, up to a cap beyond which blocks loop.
unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 16));
}
unsigned FlatBlocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 16));
}

bool Empty(DView v) { return v.rows <= 0 || v.cols <= 0; }
bool SameShape(DView a, DView b) { return a.rows == b.rows && a.cols == b.cols; }
// A usable view: no negative sizes, a row pitch at least the row, and data unless empty.
bool Valid(DView v) {
  return v.rows >= 0 && v.cols >= 0 && (Empty(v) || (v.data != nullptr && v.stride >= v.cols));
}

std::string NotCapturing(const Context* c, const char* what) {
  return c->capturing ? std::string(what) + ": not allowed while a graph is being captured" : "";
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the context's element type.
template <typename F>
std::string ByType(DType type, F&& f) {
  switch (type) {
    case DType::kF32:
      return f(Tag<float>{});
    case DType::kBf16:
      return f(Tag<__nv_bfloat16>{});
    case DType::kF16:
      return f(Tag<__half>{});
  }
  return "unknown element type";
}

cudaDataType_t BlasType(DType type) {
  switch (type) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBf16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Points cuBLAS at the current stream. cublasSetStream resets the workspace to cuBLAS's own pool
// (which may allocate, and allocation fails under capture), so the stream's buffer goes back.
std::string BindBlas(Context* c) {
  if (c->blas_stream == c->current) return "";
  std::string e = CheckBlas(cublasSetStream(c->blas, Current(c)), "cublasSetStream");
  if (e.empty())
    e = CheckBlas(cublasSetWorkspace(c->blas, c->blas_workspace[c->current], kBlasWorkspaceBytes),
                  "cublasSetWorkspace");
  if (e.empty()) c->blas_stream = c->current;
  return e;
}

// One operand of a row-major GEMM: a rows x cols matrix (before op) of `type`, row pitch ld and,
// when batched, batch_stride elements from one matrix to the next.
struct Operand {
  const void* data;
  cudaDataType_t type;
  int64_t rows, cols, ld, batch_stride;
};
struct Output {
  void* data;
  cudaDataType_t type;
  int64_t rows, cols, ld, batch_stride;
};

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

// out = alpha op(a) op(b) + beta out for `batch` matrices, all row-major, fp32 accumulation.
// cuBLAS is column-major and a row-major matrix is its column-major transpose, so this computes
// out^T = op(b)^T op(a)^T: the operands swap places and keep their transpose flags.
std::string RowMajorGemm(Context* c, const Operand& a, bool ta, const Operand& b, bool tb,
                         const Output& out, float alpha, float beta, int64_t batch) {
  const int64_t m = out.rows, n = out.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.cols : b.rows) != k || (tb ? b.rows : b.cols) != n)
    return "gemm: the shapes of a, b and c do not match";
  if (m == 0 || n == 0 || k == 0 || batch == 0) return "";
  if (a.ld < a.cols || b.ld < b.cols || out.ld < out.cols)
    return "gemm: a row pitch is shorter than its row";
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(a.ld) || !FitsInt(b.ld) ||
      !FitsInt(out.ld) || !FitsInt(batch))
    return "gemm: a size exceeds cuBLAS's int range";
  if (std::string e = BindBlas(c); !e.empty()) return e;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int cm = static_cast<int>(n), cn = static_cast<int>(m), ck = static_cast<int>(k);
  if (batch == 1) {
    return CheckBlas(cublasGemmEx(c->blas, op_b, op_a, cm, cn, ck, &alpha, b.data, b.type,
                                  static_cast<int>(b.ld), a.data, a.type, static_cast<int>(a.ld),
                                  &beta, out.data, out.type, static_cast<int>(out.ld),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
  }
  return CheckBlas(
      cublasGemmStridedBatchedEx(c->blas, op_b, op_a, cm, cn, ck, &alpha, b.data, b.type,
                                 static_cast<int>(b.ld), b.batch_stride, a.data, a.type,
                                 static_cast<int>(a.ld), a.batch_stride, &beta, out.data, out.type,
                                 static_cast<int>(out.ld), out.batch_stride,
                                 static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

// Frees with cudaFree / destroys the event when it goes out of scope (for the measurements).
struct DeviceMemory {
  void* data = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(data); }
};
struct OwnedEvent {
  cudaEvent_t event = nullptr;
  OwnedEvent() = default;
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  ~OwnedEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

// Times `run` (enqueueing on the current stream) `repeats` times after one warm-up run: the
// fastest, in milliseconds.
template <typename F>
std::string BestMs(Context* c, int repeats, F&& run, float* best_ms) {
  OwnedEvent start, stop;
  std::string e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.empty()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  if (e.empty()) e = run();
  if (e.empty()) e = Check(cudaStreamSynchronize(Current(c)), "warm-up");
  *best_ms = INFINITY;
  for (int i = 0; i < repeats && e.empty(); ++i) {
    e = Check(cudaEventRecord(start.event, Current(c)), "cudaEventRecord");
    if (e.empty()) e = run();
    if (e.empty()) e = Check(cudaEventRecord(stop.event, Current(c)), "cudaEventRecord");
    if (e.empty()) e = Check(cudaEventSynchronize(stop.event), "timed run");
    float ms = 0.0f;
    if (e.empty()) e = Check(cudaEventElapsedTime(&ms, start.event, stop.event), "elapsed time");
    if (e.empty()) *best_ms = std::min(*best_ms, ms);
  }
  if (e.empty() && !(*best_ms > 0.0f)) e = "the timed runs took no measurable time";
  return e;
}

std::string Init(Context* c) {
  if (c->type != DType::kF32 && c->type != DType::kBf16 && c->type != DType::kF16)
    return "unknown element type";
  std::string e = Check(cudaSetDevice(c->device), "cudaSetDevice");
  if (e.empty())
    e = Check(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, c->device),
              "multiprocessor count");
  int least = 0, greatest = 0;  // least: the lowest priority, numerically the greatest
  if (e.empty())
    e = Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
  if (e.empty())
    e = Check(cudaStreamCreateWithPriority(&c->streams[0], cudaStreamNonBlocking, least),
              "compute stream");
  // The comm stream gets the highest priority: its kernels (a collective or its emulation) take
  // SMs ahead of queued compute blocks, as NCCL's would.
  if (e.empty())
    e = Check(cudaStreamCreateWithPriority(&c->streams[1], cudaStreamNonBlocking, greatest),
              "comm stream");
  for (int s = 0; s < 2 && e.empty(); ++s) {
    e = Check(cudaMalloc(&c->blas_workspace[s], kBlasWorkspaceBytes), "cuBLAS workspace");
    if (e.empty())
      e = Check(cudaMalloc(reinterpret_cast<void**>(&c->reduce[s]), kReduceFloats * sizeof(float)),
                "norm reduction buffer");
  }
  if (e.empty()) e = Check(cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming), "event");
  if (e.empty()) e = Check(cudaEventCreateWithFlags(&c->join, cudaEventDisableTiming), "event");
  if (e.empty()) e = CheckBlas(cublasCreate(&c->blas), "cublasCreate");
  if (e.empty()) e = BindBlas(c);
  return e;
}

std::string EnsureStaging(Context* c, size_t floats) {
  if (c->staging_floats >= floats) return "";
  cudaFree(c->staging);
  c->staging = nullptr;
  c->staging_floats = 0;
  std::string e =
      Check(cudaMalloc(reinterpret_cast<void**>(&c->staging), floats * sizeof(float)), "staging");
  if (e.empty()) c->staging_floats = floats;
  return e;
}

std::string EventAt(Context* c, int index, cudaEvent_t* out) {
  if (index < 0 || static_cast<size_t>(index) >= c->events.size())
    return "event " + std::to_string(index) + " does not exist (CreateEvents)";
  *out = c->events[static_cast<size_t>(index)];
  return "";
}

// Grows one of the Reserve buffers to `bytes`, zeroed so that nothing ever reads uninitialized
// memory (the emulated collective reads whatever is there).
std::string Grow(Context* c, void** data, size_t* size, size_t bytes) {
  if (*size >= bytes) return "";
  cudaFree(*data);  // synchronizes the device, so no queued kernel still uses it
  *data = nullptr;
  *size = 0;
  std::string e = Check(cudaMalloc(data, bytes), "cudaMalloc");
  if (e.empty()) e = Check(cudaMemsetAsync(*data, 0, bytes, Current(c)), "cudaMemsetAsync");
  if (e.empty()) e = Check(cudaStreamSynchronize(Current(c)), "cudaMemsetAsync");
  if (e.empty()) *size = bytes;
  return e;
}

// The attention scratch: fp32 scores/probabilities and their gradients, and T copies of both for
// the GEMMs that take them as an operand, each `cells` entries (one query head, all sequences).
struct AttentionScratch {
  float* s;
  float* dp;
  void* p_t;
  void* ds_t;
};

AttentionScratch Carve(void* workspace, size_t cells) {
  char* at = static_cast<char*>(workspace);
  AttentionScratch a{};
  a.s = reinterpret_cast<float*>(at);
  at += AlignUp(cells * 4, kAlign);
  a.dp = reinterpret_cast<float*>(at);
  at += AlignUp(cells * 4, kAlign);
  a.p_t = at;
  at += AlignUp(cells * 2, kAlign);
  a.ds_t = at;
  return a;
}

std::string CheckAttention(const Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                           int64_t kv_heads, int64_t head_dim, DView qkv, DView out) {
  if (sequences < 0 || seq_len < 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      heads % kv_heads != 0)
    return "attention: heads must be a positive multiple of kv_heads, sizes positive";
  if (!Valid(qkv) || !Valid(out)) return "attention: an invalid view";
  if (qkv.rows != sequences * seq_len || qkv.cols != (heads + 2 * kv_heads) * head_dim)
    return "attention: qkv must be (sequences * seq_len) x ((heads + 2 kv_heads) head_dim)";
  if (out.rows != qkv.rows || out.cols != heads * head_dim)
    return "attention: out must be (sequences * seq_len) x (heads head_dim)";
  if (sequences * seq_len > INT_MAX) return "attention: too many query rows";
  if (c->workspace_bytes < AttentionWorkspaceBytes(sequences, seq_len, heads))
    return "attention: call Reserve(AttentionWorkspaceBytes(...)) first";
  return "";
}

// The column offsets of query head h's blocks in a qkv row, and of its key/value head's.
struct HeadColumns {
  int64_t q, k, v;
};

HeadColumns Columns(int64_t heads, int64_t kv_heads, int64_t d, int64_t h) {
  const int64_t g = h / (heads / kv_heads);
  return {h * d, (heads + g) * d, (heads + kv_heads + g) * d};
}

// The n x d block at column `col` of every sequence's n rows of `view`, batched over sequences.
Output HeadBlock(const Context* c, DView view, int64_t n, int64_t d, int64_t col) {
  return Output{
      Offset(view.data, col, Bytes(c)), BlasType(c->type), n, d, view.stride, n * view.stride};
}
Operand AsOperand(const Output& o) {
  return Operand{o.data, o.type, o.rows, o.cols, o.ld, o.batch_stride};
}

// S = scale Q_h K_g^T into scratch.s (fp32), then the causal softmax in place (and P as T into
// scratch.p_t for 16-bit types). Returns the operand that holds P in the context's type.
std::string Probabilities(Context* c, const Operand& q, const Operand& k, int64_t sequences,
                          int64_t n, float scale, const AttentionScratch& scratch, Operand* p) {
  const Output s{scratch.s, CUDA_R_32F, n, n, n, n * n};
  std::string e = RowMajorGemm(c, q, false, k, true, s, scale, 0.0f, sequences);
  if (!e.empty()) return e;
  const bool f32 = c->type == DType::kF32;
  *p =
      Operand{f32 ? static_cast<void*>(scratch.s) : scratch.p_t, BlasType(c->type), n, n, n, n * n};
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p_t = f32 ? nullptr : static_cast<T*>(scratch.p_t);
    CausalSoftmaxKernel<T>
        <<<static_cast<unsigned>(sequences * n), kThreads, 0, Current(c)>>>(scratch.s, p_t, n);
    return Launched("causal softmax");
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The context

std::string Create(int device, DType type, Context** out) {
  *out = nullptr;
  auto c = std::make_unique<Context>();
  c->device = device;
  c->type = type;
  std::string e = Init(c.get());
  if (!e.empty()) {
    Destroy(c.release());
    return e;
  }
  *out = c.release();
  return "";
}

void Destroy(Context* context) {
  std::unique_ptr<Context> c(context);
  if (c == nullptr) return;
  if (c->capturing) {  // abandon the capture: the streams must leave capture mode to be used
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(c->streams[0], &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  for (cudaStream_t s : c->streams)  // nothing queued may still use what is freed below
    if (s != nullptr) cudaStreamSynchronize(s);
  if (c->graph != nullptr) cudaGraphExecDestroy(c->graph);
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

std::string Synchronize(Context* c) {
  if (std::string e = NotCapturing(c, "synchronize"); !e.empty()) return e;
  std::string e = Check(cudaStreamSynchronize(c->streams[0]), "compute stream");
  if (e.empty()) e = Check(cudaStreamSynchronize(c->streams[1]), "comm stream");
  if (e.empty()) e = Check(cudaGetLastError(), "CUDA");
  return e;
}

// ---------------------------------------------------------------------------------------------
// Memory

std::string Alloc(Context* c, size_t elements, void** out) {
  *out = nullptr;
  if (std::string e = NotCapturing(c, "alloc"); !e.empty()) return e;
  elements = std::max<size_t>(elements, 1);
  if (elements > SIZE_MAX / Bytes(c)) return "alloc: size overflows";
  return Check(cudaMalloc(out, elements * Bytes(c)), "cudaMalloc");
}

void Free(void* data) { cudaFree(data); }

std::string Reserve(Context* c, size_t bytes) {
  if (std::string e = NotCapturing(c, "reserve"); !e.empty()) return e;
  // One size, two buffers: the caller may reserve the largest need or the sum of the needs, and
  // either way both the attention and the emulated collective get enough, apart.
  std::string e = Grow(c, &c->workspace, &c->workspace_bytes, bytes);
  if (e.empty())
    e = Grow(c, &c->emulation, &c->emulation_bytes, std::min(bytes, kMaxEmulationBytes));
  return e;
}

// Scores and probabilities of one query head for all sequences at a time: fp32 S/P and dP/dS,
// and 16-bit copies of P and dS (unused for fp32), each region 256-byte aligned. Independent of
// `heads` because the kernels loop over heads.
size_t AttentionWorkspaceBytes(int64_t sequences, int64_t seq_len, int64_t heads) {
  if (sequences <= 0 || seq_len <= 0) return 0;
  const size_t cells =
      static_cast<size_t>(sequences) * static_cast<size_t>(seq_len) * static_cast<size_t>(seq_len);
  return 2 * AlignUp(cells * 4, kAlign) + 2 * AlignUp(cells * 2, kAlign);
}

// min(hbm_bytes, 256 MiB), at least 4 MiB, in whole MiB; 0 when there is no traffic.
size_t EmulationWorkspaceBytes(double hbm_bytes) {
  if (!(hbm_bytes > 0)) return 0;
  const double capped = std::min(hbm_bytes, static_cast<double>(kMaxEmulationBytes));
  const size_t bytes = std::max(static_cast<size_t>(std::ceil(capped)), kMinEmulationBytes);
  return AlignUp(bytes, size_t{1} << 20);
}

std::string Upload(Context* c, DView dst, const float* host) {
  if (std::string e = NotCapturing(c, "upload"); !e.empty()) return e;
  if (!Valid(dst)) return "upload: invalid view";
  if (Empty(dst)) return "";
  const cudaStream_t stream = Current(c);
  const size_t count = static_cast<size_t>(dst.rows * dst.cols);
  std::string e;
  if (c->type == DType::kF32) {
    e = Check(
        cudaMemcpy2DAsync(dst.data, dst.stride * sizeof(float), host, dst.cols * sizeof(float),
                          dst.cols * sizeof(float), dst.rows, cudaMemcpyHostToDevice, stream),
        "upload");
  } else {
    e = EnsureStaging(c, count);
    if (e.empty())
      e = Check(
          cudaMemcpyAsync(c->staging, host, count * sizeof(float), cudaMemcpyHostToDevice, stream),
          "upload");
    if (e.empty()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        UnpackKernel<T><<<RowBlocks(dst.rows), kThreads, 0, stream>>>(c->staging, Typed<T>(dst));
        return Launched("upload conversion");
      });
    }
  }
  if (e.empty()) e = Check(cudaStreamSynchronize(stream), "upload");
  return e;
}

std::string Download(Context* c, DView src, float* host) {
  if (std::string e = NotCapturing(c, "download"); !e.empty()) return e;
  if (!Valid(src)) return "download: invalid view";
  if (Empty(src)) return "";
  const cudaStream_t stream = Current(c);
  const size_t count = static_cast<size_t>(src.rows * src.cols);
  std::string e;
  if (c->type == DType::kF32) {
    e = Check(
        cudaMemcpy2DAsync(host, src.cols * sizeof(float), src.data, src.stride * sizeof(float),
                          src.cols * sizeof(float), src.rows, cudaMemcpyDeviceToHost, stream),
        "download");
  } else {
    e = EnsureStaging(c, count);
    if (e.empty()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        PackKernel<T><<<RowBlocks(src.rows), kThreads, 0, stream>>>(Typed<T>(src), c->staging);
        return Launched("download conversion");
      });
    }
    if (e.empty())
      e = Check(
          cudaMemcpyAsync(host, c->staging, count * sizeof(float), cudaMemcpyDeviceToHost, stream),
          "download");
  }
  if (e.empty()) e = Check(cudaStreamSynchronize(stream), "download");
  return e;
}

std::string Copy(Context* c, DView src, DView dst) {
  if (!Valid(src) || !Valid(dst) || !SameShape(src, dst)) return "copy: views differ in shape";
  if (Empty(src)) return "";
  const size_t b = Bytes(c);
  return Check(cudaMemcpy2DAsync(dst.data, dst.stride * b, src.data, src.stride * b, src.cols * b,
                                 src.rows, cudaMemcpyDeviceToDevice, Current(c)),
               "copy");
}

std::string Zero(Context* c, DView view) {
  if (!Valid(view)) return "zero: invalid view";
  if (Empty(view)) return "";
  const size_t b = Bytes(c);  // all-zero bits are 0.0 in fp32, bf16 and fp16
  return Check(
      cudaMemset2DAsync(view.data, view.stride * b, 0, view.cols * b, view.rows, Current(c)),
      "zero");
}

// ---------------------------------------------------------------------------------------------
// Events and graphs

std::string CreateEvents(Context* c, int count) {
  if (count < 0) return "events: negative count";
  for (cudaEvent_t e : c->events) cudaEventDestroy(e);
  c->events.clear();
  for (int i = 0; i < count; ++i) {
    cudaEvent_t event = nullptr;
    // Default flags: timing enabled, so any event can be an end of ElapsedMs.
    if (std::string e = Check(cudaEventCreate(&event), "cudaEventCreate"); !e.empty()) return e;
    c->events.push_back(event);
  }
  return "";
}

std::string RecordEvent(Context* c, int event, bool timing) {
  cudaEvent_t ev = nullptr;
  if (std::string e = EventAt(c, event, &ev); !e.empty()) return e;
  const cudaStream_t stream = Current(c);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (std::string e = Check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
      !e.empty())
    return e;
  // Under capture a plain record only orders the captured work; an external record becomes a
  // node, so each replay records the event and ElapsedMs can time the replay.
  if (timing && status == cudaStreamCaptureStatusActive)
    return Check(cudaEventRecordWithFlags(ev, stream, cudaEventRecordExternal),
                 "cudaEventRecordWithFlags");
  return Check(cudaEventRecord(ev, stream), "cudaEventRecord");
}

std::string WaitEvent(Context* c, int event) {
  cudaEvent_t ev = nullptr;
  if (std::string e = EventAt(c, event, &ev); !e.empty()) return e;
  return Check(cudaStreamWaitEvent(Current(c), ev, 0), "cudaStreamWaitEvent");
}

std::string ElapsedMs(Context* c, int from, int to, float* ms) {
  cudaEvent_t a = nullptr, b = nullptr;
  if (std::string e = EventAt(c, from, &a); !e.empty()) return e;
  if (std::string e = EventAt(c, to, &b); !e.empty()) return e;
  return Check(cudaEventElapsedTime(ms, a, b), "cudaEventElapsedTime");
}

std::string QueryEvent(Context* c, int event, bool* done) {
  cudaEvent_t ev = nullptr;
  if (std::string e = EventAt(c, event, &ev); !e.empty()) return e;
  const cudaError_t status = cudaEventQuery(ev);
  *done = status == cudaSuccess;
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so later checks do not see it
    return "";
  }
  return Check(status, "cudaEventQuery");
}

std::string BeginCapture(Context* c) {
  if (c->capturing) return "begin capture: already capturing";
  // Thread-local: other threads' unsafe calls (an allocation, a sync) do not break this capture,
  // while this thread's would, loudly.
  std::string e = Check(cudaStreamBeginCapture(c->streams[0], cudaStreamCaptureModeThreadLocal),
                        "cudaStreamBeginCapture");
  if (!e.empty()) return e;
  c->capturing = true;
  e = Check(cudaEventRecord(c->fork, c->streams[0]), "capture fork");
  if (e.empty()) e = Check(cudaStreamWaitEvent(c->streams[1], c->fork, 0), "capture fork");
  if (!e.empty()) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(c->streams[0], &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    c->capturing = false;
  }
  return e;
}

std::string EndCapture(Context* c) {
  if (!c->capturing) return "end capture: not capturing";
  std::string e = Check(cudaEventRecord(c->join, c->streams[1]), "capture join");
  if (e.empty()) e = Check(cudaStreamWaitEvent(c->streams[0], c->join, 0), "capture join");
  cudaGraph_t graph = nullptr;
  const std::string end =
      Check(cudaStreamEndCapture(c->streams[0], &graph), "cudaStreamEndCapture");
  c->capturing = false;
  if (e.empty()) e = end;
  cudaGraphExec_t exec = nullptr;
  // Node priorities keep the comm stream's priority (copied into its kernel nodes at capture)
  // when the graph runs; without the flag every node would run at the launch stream's.
  if (e.empty())
    e = Check(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority),
              "cudaGraphInstantiate");
  if (graph != nullptr) cudaGraphDestroy(graph);  // the executable graph keeps its own copy
  if (!e.empty()) return e;
  if (c->graph != nullptr) cudaGraphExecDestroy(c->graph);  // freed once any replay finishes
  c->graph = exec;
  return "";
}

std::string LaunchGraph(Context* c) {
  if (c->graph == nullptr) return "launch graph: no graph has been captured";
  return Check(cudaGraphLaunch(c->graph, c->streams[0]), "cudaGraphLaunch");
}

// ---------------------------------------------------------------------------------------------
// Layer kernels

std::string Gemm(Context* c, DView a, bool transpose_a, DView b, bool transpose_b, DView out,
                 bool accumulate) {
  if (!Valid(a) || !Valid(b) || !Valid(out)) return "gemm: invalid view";
  const cudaDataType_t t = BlasType(c->type);
  std::string e = RowMajorGemm(c, Operand{a.data, t, a.rows, a.cols, a.stride, 0}, transpose_a,
                               Operand{b.data, t, b.rows, b.cols, b.stride, 0}, transpose_b,
                               Output{out.data, t, out.rows, out.cols, out.stride, 0}, 1.0f,
                               accumulate ? 1.0f : 0.0f, 1);
  // An empty inner dimension makes a zero product, which cuBLAS is not asked for.
  if (e.empty() && (transpose_a ? a.rows : a.cols) == 0 && !accumulate) e = Zero(c, out);
  return e;
}

std::string Add(Context* c, DView a, DView b, DView out) {
  if (!Valid(a) || !Valid(b) || !Valid(out) || !SameShape(a, out) || !SameShape(b, out))
    return "add: views differ in shape";
  if (Empty(out)) return "";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AddKernel<T>
        <<<RowBlocks(out.rows), kThreads, 0, Current(c)>>>(Typed<T>(a), Typed<T>(b), Typed<T>(out));
    return Launched("add");
  });
}

std::string NormForward(Context* c, bool rms, DView x, const void* gamma, float eps, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y)) return "norm: x and y differ in shape";
  if (Empty(x)) return "";
  if (gamma == nullptr) return "norm: no gamma";
  if (x.rows > INT_MAX) return "norm: too many rows";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    NormForwardKernel<T><<<static_cast<unsigned>(x.rows), kThreads, 0, Current(c)>>>(
        rms, Typed<T>(x), static_cast<const T*>(gamma), eps, Typed<T>(y));
    return Launched("norm");
  });
}

// Two kernels, so that dgamma is summed in fp32 without atomics on 16-bit values: the row kernel
// writes dx and per-block column partial sums into the stream's reduction buffer, the column
// kernel adds them into dgamma.
std::string NormBackward(Context* c, bool rms, DView x, const void* gamma, float eps, DView dy,
                         DView dx, bool accumulate_dx, void* dgamma) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return "norm backward: x, dy and dx differ in shape";
  if (Empty(x)) return "";
  if (gamma == nullptr || dgamma == nullptr) return "norm backward: no gamma or dgamma";
  if (static_cast<size_t>(x.cols) > kReduceFloats) return "norm backward: too many columns";
  const int64_t parts = std::min<int64_t>(
      {x.rows, int64_t{2} * c->sms, static_cast<int64_t>(kReduceFloats) / x.cols});
  float* partial = c->reduce[c->current];
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    NormBackwardRowsKernel<T><<<static_cast<unsigned>(parts), kThreads, 0, Current(c)>>>(
        rms, Typed<T>(x), static_cast<const T*>(gamma), eps, Typed<T>(dy), Typed<T>(dx),
        accumulate_dx, partial);
    if (std::string e = Launched("norm backward"); !e.empty()) return e;
    AddColumnSumsKernel<T><<<FlatBlocks(x.cols), kThreads, 0, Current(c)>>>(
        partial, parts, x.cols, static_cast<T*>(dgamma));
    return Launched("norm backward dgamma");
  });
}

std::string Gelu(Context* c, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y)) return "gelu: x and y differ in shape";
  if (Empty(x)) return "";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GeluKernel<T><<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y));
    return Launched("gelu");
  });
}

std::string GeluBackward(Context* c, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return "gelu backward: x, dy and dx differ in shape";
  if (Empty(x)) return "";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GeluBackwardKernel<T>
        <<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy), Typed<T>(dx));
    return Launched("gelu backward");
  });
}

std::string Swiglu(Context* c, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || x.rows != y.rows || x.cols != 2 * y.cols)
    return "swiglu: x must be rows x 2f and y rows x f";
  if (Empty(y)) return "";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwigluKernel<T><<<RowBlocks(y.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y));
    return Launched("swiglu");
  });
}

std::string SwigluBackward(Context* c, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || x.rows != dy.rows || x.cols != 2 * dy.cols ||
      !SameShape(x, dx))
    return "swiglu backward: x and dx must be rows x 2f and dy rows x f";
  if (Empty(dy)) return "";
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwigluBackwardKernel<T>
        <<<RowBlocks(dy.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy), Typed<T>(dx));
    return Launched("swiglu backward");
  });
}

// Per query head h (key/value head g), batched over sequences:
//   S = scale Q_h K_g^T (fp32), P = causal softmax(S), O_h = P V_g.
std::string Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, DView qkv, DView out) {
  if (std::string e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, qkv, out);
      !e.empty())
    return e;
  if (sequences == 0 || seq_len == 0) return "";
  const int64_t n = seq_len, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionScratch scratch = Carve(c->workspace, static_cast<size_t>(sequences * n * n));
  for (int64_t h = 0; h < heads; ++h) {
    const HeadColumns col = Columns(heads, kv_heads, d, h);
    const Operand q = AsOperand(HeadBlock(c, qkv, n, d, col.q)),
                  k = AsOperand(HeadBlock(c, qkv, n, d, col.k));
    const Operand v = AsOperand(HeadBlock(c, qkv, n, d, col.v));
    Operand p{};
    std::string e = Probabilities(c, q, k, sequences, n, scale, scratch, &p);
    if (e.empty())
      e = RowMajorGemm(c, p, false, v, false, HeadBlock(c, out, n, d, h * d), 1.0f, 0.0f,
                       sequences);
    if (!e.empty()) return "attention: " + e;
  }
  return "";
}

// Per query head h (key/value head g), batched over sequences, with P recomputed as forward:
//   dP = dO_h V_g^T,  dV_g += P^T dO_h,  dS = P (dP - rowsum(P dP)),
//   dQ_h = scale dS K_g,  dK_g += scale dS^T Q_h.
// dqkv is cleared first because the query heads of a group add into one dK_g and dV_g.
std::string AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, DView qkv, DView dout,
                              DView dqkv) {
  if (std::string e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, qkv, dout);
      !e.empty())
    return e;
  if (!Valid(dqkv) || !SameShape(qkv, dqkv)) return "attention backward: dqkv differs from qkv";
  if (std::string e = Zero(c, dqkv); !e.empty()) return "attention backward: " + e;
  if (sequences == 0 || seq_len == 0) return "";
  const int64_t n = seq_len, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionScratch scratch = Carve(c->workspace, static_cast<size_t>(sequences * n * n));
  const bool f32 = c->type == DType::kF32;
  const Output dp{scratch.dp, CUDA_R_32F, n, n, n, n * n};
  const Operand ds{
      f32 ? static_cast<void*>(scratch.dp) : scratch.ds_t, BlasType(c->type), n, n, n, n * n};
  for (int64_t h = 0; h < heads; ++h) {
    const HeadColumns col = Columns(heads, kv_heads, d, h);
    const Operand q = AsOperand(HeadBlock(c, qkv, n, d, col.q)),
                  k = AsOperand(HeadBlock(c, qkv, n, d, col.k));
    const Operand v = AsOperand(HeadBlock(c, qkv, n, d, col.v));
    const Operand d_out = AsOperand(HeadBlock(c, dout, n, d, h * d));
    Operand p{};
    std::string e = Probabilities(c, q, k, sequences, n, scale, scratch, &p);
    if (e.empty()) e = RowMajorGemm(c, d_out, false, v, true, dp, 1.0f, 0.0f, sequences);
    if (e.empty())
      e = RowMajorGemm(c, p, true, d_out, false, HeadBlock(c, dqkv, n, d, col.v), 1.0f, 1.0f,
                       sequences);
    if (e.empty()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ds_t = f32 ? nullptr : static_cast<T*>(scratch.ds_t);
        SoftmaxBackwardKernel<T><<<static_cast<unsigned>(sequences * n), kThreads, 0, Current(c)>>>(
            scratch.s, scratch.dp, ds_t, n);
        return Launched("softmax backward");
      });
    }
    if (e.empty())
      e = RowMajorGemm(c, ds, false, k, false, HeadBlock(c, dqkv, n, d, col.q), scale, 0.0f,
                       sequences);
    if (e.empty())
      e = RowMajorGemm(c, ds, true, q, false, HeadBlock(c, dqkv, n, d, col.k), scale, 1.0f,
                       sequences);
    if (!e.empty()) return "attention backward: " + e;
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// The emulated collective and the measurements

std::string EmulateCollective(Context* c, int ctas, double hbm_bytes, double micros) {
  const double bytes = hbm_bytes > 0 ? hbm_bytes : 0.0;  // NaN counts as none
  const double us = micros > 0 ? micros : 0.0;
  if (bytes == 0 && us == 0) return "";
  if (bytes > 1e15 || us > 1e9) return "emulated collective: absurd size or duration";
  ctas = std::max(ctas, 1);
  int64_t half = 0, per_block = 0;
  const uint4* src = nullptr;
  uint4* dst = nullptr;
  if (bytes > 0) {
    const size_t scratch = EmulationWorkspaceBytes(bytes);
    if (c->emulation_bytes < scratch)
      return "emulated collective: call Reserve(EmulationWorkspaceBytes(...)) first";
    half = static_cast<int64_t>(scratch / 2 / sizeof(uint4));
    // Half the traffic is read, half written, in 16-byte words, shared out among the blocks.
    per_block = static_cast<int64_t>(std::ceil(bytes / 2 / sizeof(uint4) / ctas));
    src = static_cast<const uint4*>(c->emulation);
    dst = static_cast<uint4*>(c->emulation) + half;
  }
  const auto duration_ns = static_cast<uint64_t>(std::llround(us * 1e3));
  EmulateCollectiveKernel<<<static_cast<unsigned>(ctas), kEmulationThreads, 0, Current(c)>>>(
      src, dst, half > 0 ? half : 1, per_block, duration_ns);
  return Launched("emulated collective");
}

std::string MeasureGemmTflops(Context* c, int64_t n, int repeats, double* tflops) {
  *tflops = 0;
  if (std::string e = NotCapturing(c, "measure gemm"); !e.empty()) return e;
  if (n <= 0 || n > INT_MAX || repeats <= 0) return "measure gemm: n and repeats must be positive";
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(n);
  DeviceMemory m[3];
  for (DeviceMemory& buffer : m) {
    if (std::string e = Check(cudaMalloc(&buffer.data, count * Bytes(c)), "cudaMalloc"); !e.empty())
      return "measure gemm: " + e;
  }
  // Small values keep 16-bit products and sums far from overflow.
  std::string e = ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int i = 0; i < 2; ++i) {
      FillKernel<T><<<FlatBlocks(static_cast<int64_t>(count)), kThreads, 0, Current(c)>>>(
          static_cast<T*>(m[i].data), static_cast<int64_t>(count),
          0.01f * static_cast<float>(i + 1));
      if (std::string err = Launched("fill"); !err.empty()) return err;
    }
    return std::string();
  });
  const DView a{m[0].data, n, n, n}, b{m[1].data, n, n, n}, out{m[2].data, n, n, n};
  float best_ms = 0.0f;
  if (e.empty())
    e = BestMs(
        c, repeats, [&] { return Gemm(c, a, false, b, false, out, false); }, &best_ms);
  if (!e.empty()) return "measure gemm: " + e;
  *tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
            (best_ms * 1e-3) / 1e12;
  return "";
}

std::string MeasureHbmGBps(Context* c, size_t bytes, int repeats, double* GBps) {
  *GBps = 0;
  if (std::string e = NotCapturing(c, "measure HBM"); !e.empty()) return e;
  if (bytes == 0 || repeats <= 0) return "measure HBM: bytes and repeats must be positive";
  DeviceMemory src, dst;
  std::string e = Check(cudaMalloc(&src.data, bytes), "cudaMalloc");
  if (e.empty()) e = Check(cudaMalloc(&dst.data, bytes), "cudaMalloc");
  if (e.empty()) e = Check(cudaMemsetAsync(src.data, 1, bytes, Current(c)), "cudaMemsetAsync");
  float best_ms = 0.0f;
  if (e.empty()) {
    e = BestMs(
        c, repeats,
        [&] {
          return Check(
              cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, Current(c)),
              "cudaMemcpyAsync");
        },
        &best_ms);
  }
  if (!e.empty()) return "measure HBM: " + e;
  *GBps = 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;  // read + written
  return "";
}

}  // namespace domino::exec::cuda
