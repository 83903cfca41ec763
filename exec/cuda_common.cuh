// Private to exec/cuda_ops.cu, the kernel files (exec/cuda_layers.cu, cuda_attention.cu,
// cuda_ends.cu, cuda_emulation.cu) and exec/cuda_gemm_bench.cu, the parts of exec/cuda_ops.h's
// implementation: the context every launcher works on, the element types' conversions and views,
// the fills' hash, block reductions, and the launchers' helpers (error text, type dispatch, cuBLAS
// GEMMs, owned device memory and events). Everything here has internal linkage or is a template, so
// each .cu file gets its own copy.
#ifndef DOMINO_EXEC_CUDA_COMMON_CUH_
#define DOMINO_EXEC_CUDA_COMMON_CUH_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "exec/cuda_ops.h"
#include "exec/host_device.h"

namespace domino::exec::cuda {

namespace {

// cuBLAS gets a workspace we own so that it never allocates while a stream is being captured.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
// NormBackward's row statistics (two floats a row) and its fp32 dgamma partial sums (a row of
// cols floats per chunk of rows), per slice of rows.
constexpr size_t kReduceFloats = size_t{1} << 20;
// The emulated collective's scratch, whatever its traffic (which wraps around it): eight times
// the largest L2 cache of a data-centre GPU (H200 and B200: 50-60 MB), so that what a call reads
// was evicted long before.
constexpr size_t kEmulationBytes = size_t{512} << 20;
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
  int64_t emulation_cursor = 0;    // where the next emulated collective starts, in 16-byte words
  int emulation_shared_bytes = 0;  // dynamic shared memory per block: one block per SM
  // CloseGate/OpenGate: a word of mapped host memory a stream waits on (cuStreamWaitValue32,
  // reached through the runtime so that nothing links the driver library).
  volatile uint32_t* gate = nullptr;
  void* gate_device = nullptr;
  void* wait_value = nullptr;  // the driver's cuStreamWaitValue32, or null: gates are no-ops
  uint32_t gate_epoch = 0;
  bool gate_closed = false;
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
// Block reductions and the elementwise walk

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

// A hash of (key, index) mapped to [-1, 1): the random values of the fills.
__device__ __forceinline__ float UniformOf(uint64_t key, uint64_t index) {
  return static_cast<float>(SplitMix64(key ^ index) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// The elementwise kernels walk rows with blocks and columns with threads, so no thread divides a
// flat index by the column count.
#define FOR_EACH_ELEMENT(rows, cols, r, j)                 \
  for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x) \
    for (int64_t j = threadIdx.x; j < (cols); j += blockDim.x)

// ---------------------------------------------------------------------------------------------
// Launchers' helpers

// Frees with cudaFree / destroys the event / the graph when it goes out of scope (for the
// measurements).
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
struct OwnedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  OwnedGraph() = default;
  OwnedGraph(const OwnedGraph&) = delete;
  OwnedGraph& operator=(const OwnedGraph&) = delete;
  ~OwnedGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

Status Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return Status::Ok();
  return Error(std::string(what) + ": " + cudaGetErrorString(status));
}

Status CheckBlas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Error(std::string(what) + ": " + cublasGetStatusName(status));
}

Status Launched(const char* kernel) { return Check(cudaGetLastError(), kernel); }

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

Status NotCapturing(const Context* c, const char* what) {
  if (c->capturing)
    return Error(std::string(what) + ": not allowed while a graph is being captured");
  return Status::Ok();
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the context's element type.
template <typename F>
Status ByType(DType type, F&& f) {
  switch (type) {
    case DType::kF32:
      return f(Tag<float>{});
    case DType::kBf16:
      return f(Tag<__nv_bfloat16>{});
    case DType::kF16:
      return f(Tag<__half>{});
  }
  return Error("unknown element type");
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
Status BindBlas(Context* c) {
  if (c->blas_stream == c->current) return Status::Ok();
  Status e = CheckBlas(cublasSetStream(c->blas, Current(c)), "cublasSetStream");
  if (e.ok())
    e = CheckBlas(cublasSetWorkspace(c->blas, c->blas_workspace[c->current], kBlasWorkspaceBytes),
                  "cublasSetWorkspace");
  if (e.ok()) c->blas_stream = c->current;
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
Status RowMajorGemm(Context* c, const Operand& a, bool ta, const Operand& b, bool tb,
                    const Output& out, float alpha, float beta, int64_t batch) {
  const int64_t m = out.rows, n = out.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.cols : b.rows) != k || (tb ? b.rows : b.cols) != n)
    return Error("gemm: the shapes of a, b and c do not match");
  if (m == 0 || n == 0 || k == 0 || batch == 0) return Status::Ok();
  if (a.ld < a.cols || b.ld < b.cols || out.ld < out.cols)
    return Error("gemm: a row pitch is shorter than its row");
  if (!FitsInt(m) || !FitsInt(n) || !FitsInt(k) || !FitsInt(a.ld) || !FitsInt(b.ld) ||
      !FitsInt(out.ld) || !FitsInt(batch))
    return Error("gemm: a size exceeds cuBLAS's int range");
  if (Status e = BindBlas(c); !e.ok()) return e;
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

}  // namespace

// Sizes the emulated collective's dynamic shared memory for `c`'s device so that one block takes
// a whole SM (more than half its shared memory); Init calls it (cuda_emulation.cu).
Status PrepareEmulation(Context* c);

}  // namespace domino::exec::cuda

#endif  // DOMINO_EXEC_CUDA_COMMON_CUH_
