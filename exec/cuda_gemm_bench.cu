// The GEMM measurements of exec/cuda_ops.h: a shape timed as GEMM benchmarks time it, and a soak
// of back-to-back GEMMs, in the context's type (cuBLAS, through Gemm) or in fp8 (cuBLASLt).
#include <cublasLt.h>
#include <cuda_fp8.h>

#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

// E4M3 values of uniform [-1, 1) draws, a hash of (seed, index) as the 16-bit fills draw them.
__global__ void RandomFp8Kernel(__nv_fp8_e4m3* data, int64_t n, uint64_t seed) {
  const uint64_t key = SplitMix64(seed);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[i] = __nv_fp8_e4m3(UniformOf(key, static_cast<uint64_t>(i)));
}

// What a GEMM measurement repeats: C[m,n] = A[m,k] B[k,n] on random values in [-1, 1), as
// training's are (constant ones switch fewer transistors and read fast; 16-bit sums of k such
// products, about sqrt(k) / 3, stay far from overflow). In the context's type through Gemm, or
// with `fp8` E4M3 operands into a bf16 output through cuBLASLt: in its column-major terms
// D[m,n] = A^T B with A stored k x m ("TN", the layout Hopper's fp8 kernels take), fp32
// accumulation with fast accumulation on and unit scales, the way Transformer Engine calls it for
// a Linear's forward (its forward GEMMs skip the split accumulator: fastAccuMode 1 in
// common/gemm/cublaslt_gemm.cu; the backward's take the slower, more precise mode).
class GemmBench {
 public:
  GemmBench() = default;
  GemmBench(const GemmBench&) = delete;
  GemmBench& operator=(const GemmBench&) = delete;
  ~GemmBench() {
    for (cublasLtMatrixLayout_t layout : layouts_)
      if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
    if (lt_ != nullptr) cublasLtDestroy(lt_);
  }

  Status Init(Context* c, int64_t m, int64_t n, int64_t k, bool fp8) {
    c_ = c;
    fp8_ = fp8;
    if (m <= 0 || n <= 0 || k <= 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
      return Error("shape must be positive and below 2^31 in each dimension");
    return fp8 ? InitFp8(m, n, k) : InitContextType(m, n, k);
  }

  // One GEMM on the current stream.
  Status Run() const {
    if (!fp8_) return Gemm(c_, a_, false, b_, false, out_, false);
    const float alpha = 1.0f, beta = 0.0f;
    return CheckBlas(
        cublasLtMatmul(lt_, desc_, &alpha, memory_[0].data, layouts_[0], memory_[1].data,
                       layouts_[1], &beta, memory_[2].data, layouts_[2], memory_[2].data,
                       layouts_[2], &algo_, c_->blas_workspace[c_->current], kBlasWorkspaceBytes,
                       Current(c_)),
        "cublasLtMatmul (fp8)");
  }

 private:
  Status Allocate(int i, size_t bytes) {
    return Check(cudaMalloc(&memory_[i].data, bytes), "cudaMalloc");
  }

  Status InitContextType(int64_t m, int64_t n, int64_t k) {
    const int64_t rows[3] = {m, k, m}, cols[3] = {k, n, n};
    for (int i = 0; i < 3; ++i)
      if (Status e = Allocate(i, static_cast<size_t>(rows[i] * cols[i]) * Bytes(c_)); !e.ok())
        return e;
    a_ = DView{memory_[0].data, m, k, k};
    b_ = DView{memory_[1].data, k, n, n};
    out_ = DView{memory_[2].data, m, n, n};
    Status e = FillRandom(c_, a_, 1);
    if (e.ok()) e = FillRandom(c_, b_, 2);
    return e;
  }

  Status InitFp8(int64_t m, int64_t n, int64_t k) {
    int major = 0, minor = 0;
    Status e = Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c_->device),
                     "cudaDeviceGetAttribute");
    if (e.ok())
      e = Check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c_->device),
                "cudaDeviceGetAttribute");
    if (!e.ok()) return e;
    if (major * 10 + minor < 89)
      return Error("fp8 GEMMs need compute capability 8.9 or later, this GPU has " +
                   std::to_string(major) + "." + std::to_string(minor));
    // cuBLASLt's fp8 kernels take leading dimensions of 16-byte multiples: A's and B's are k,
    // the output's m.
    if (m % 16 != 0 || k % 16 != 0) return Error("fp8 GEMMs need m and k in multiples of 16");
    e = Allocate(0, static_cast<size_t>(k * m));  // one byte per element
    if (e.ok()) e = Allocate(1, static_cast<size_t>(k * n));
    if (e.ok()) e = Allocate(2, static_cast<size_t>(m * n) * sizeof(__nv_bfloat16));
    for (int i = 0; i < 2 && e.ok(); ++i) {
      const int64_t elements = k * (i == 0 ? m : n);
      RandomFp8Kernel<<<FlatBlocks(elements), kThreads, 0, Current(c_)>>>(
          static_cast<__nv_fp8_e4m3*>(memory_[i].data), elements, static_cast<uint64_t>(i + 1));
      e = Launched("fill fp8");
    }
    if (e.ok()) e = CheckBlas(cublasLtCreate(&lt_), "cublasLtCreate");
    if (e.ok())
      e = CheckBlas(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                    "cublasLtMatmulDescCreate");
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    if (e.ok())
      e = CheckBlas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                                   sizeof(transpose)),
                    "cublasLtMatmulDescSetAttribute");
    if (e.ok())
      e = CheckBlas(
          cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)),
          "cublasLtMatmulDescSetAttribute");
    const int8_t fast_accumulation = 1;
    if (e.ok())
      e = CheckBlas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                   &fast_accumulation, sizeof(fast_accumulation)),
                    "cublasLtMatmulDescSetAttribute");
    // A: k x m (its transpose is the m x k operand), B: k x n, D: m x n, column-major.
    const cudaDataType_t types[3] = {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF};
    const int64_t rows[3] = {k, k, m}, cols[3] = {m, n, n};
    for (int i = 0; i < 3 && e.ok(); ++i)
      e = CheckBlas(
          cublasLtMatrixLayoutCreate(&layouts_[i], types[i], static_cast<uint64_t>(rows[i]),
                                     static_cast<uint64_t>(cols[i]), rows[i]),
          "cublasLtMatrixLayoutCreate");
    if (!e.ok()) return e;
    cublasLtMatmulPreference_t preference = nullptr;
    e = CheckBlas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = kBlasWorkspaceBytes;
    if (e.ok())
      e = CheckBlas(
          cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace, sizeof(workspace)),
          "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (e.ok())
      e = CheckBlas(
          cublasLtMatmulAlgoGetHeuristic(lt_, desc_, layouts_[0], layouts_[1], layouts_[2],
                                         layouts_[2], preference, 1, &result, &found),
          "cublasLtMatmulAlgoGetHeuristic");
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (e.ok() && found == 0) e = Error("cuBLASLt has no fp8 kernel for this shape");
    if (e.ok()) algo_ = result.algo;
    return e;
  }

  Context* c_ = nullptr;
  bool fp8_ = false;
  DeviceMemory memory_[3];  // A, B and the output
  DView a_, b_, out_;       // the context's type
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layouts_[3] = {nullptr, nullptr, nullptr};  // A, B, D (C is D)
  cublasLtMatmulAlgo_t algo_{};
};

// Milliseconds of `count` GEMMs launched back to back between two events.
Status TimeGemms(Context* c, const GemmBench& g, int count, cudaEvent_t start, cudaEvent_t stop,
                 float* ms) {
  Status e = Check(cudaEventRecord(start, Current(c)), "cudaEventRecord");
  for (int i = 0; i < count && e.ok(); ++i) e = g.Run();
  if (e.ok()) e = Check(cudaEventRecord(stop, Current(c)), "cudaEventRecord");
  if (e.ok()) e = Check(cudaEventSynchronize(stop), "timed GEMMs");
  if (e.ok()) e = Check(cudaEventElapsedTime(ms, start, stop), "elapsed time");
  if (e.ok() && !(*ms > 0.0f)) e = Error("the timed GEMMs took no measurable time");
  return e;
}

std::string Named(const char* what, bool fp8) { return std::string(what) + (fp8 ? " (fp8)" : ""); }

}  // namespace

Status MeasureGemmTflops(Context* c, int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                         bool fp8, double* tflops) {
  *tflops = 0;
  const std::string what = Named("measure gemm ", fp8) + std::to_string(m) + "x" +
                           std::to_string(n) + "x" + std::to_string(k) + ": ";
  if (Status e = NotCapturing(c, "measure gemm"); !e.ok()) return e;
  if (warmup < 0 || repeats <= 0) return Error(what + "warm-up and repeats must be positive");
  GemmBench g;
  OwnedEvent start, stop;
  Status e = g.Init(c, m, n, k, fp8);
  if (e.ok()) e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  for (int i = 0; i < warmup && e.ok(); ++i) e = g.Run();
  float ms = 0.0f;
  if (e.ok()) e = TimeGemms(c, g, repeats, start.event, stop.event, &ms);
  if (!e.ok()) return Error(what + e.message());
  *tflops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
            repeats / (ms * 1e-3) / 1e12;
  return Status::Ok();
}

Status SoakGemm(Context* c, int64_t n, double seconds, double window_s, bool fp8,
                std::vector<double>* tflops) {
  tflops->clear();
  const std::string what = Named("soak gemm ", fp8) + std::to_string(n) + "^3: ";
  if (Status e = NotCapturing(c, "soak gemm"); !e.ok()) return e;
  if (!(seconds > 0) || !(window_s > 0) || window_s > seconds)
    return Error(what + "the soak and its windows must last a positive time, windows the shorter");
  GemmBench g;
  OwnedEvent start, stop;
  Status e = g.Init(c, n, n, n, fp8);
  if (e.ok()) e = Check(cudaEventCreate(&start.event), "cudaEventCreate");
  if (e.ok()) e = Check(cudaEventCreate(&stop.event), "cudaEventCreate");
  // Batches of back-to-back GEMMs of about 20 ms (sized on one GEMM after an untimed one, which
  // pays for loading the kernel), so that the host's synchronization between batches leaves the
  // GPU idle for a negligible fraction of the time.
  int batch = 1;
  float ms = 0.0f;
  if (e.ok()) e = TimeGemms(c, g, batch, start.event, stop.event, &ms);
  if (e.ok()) e = TimeGemms(c, g, batch, start.event, stop.event, &ms);
  if (e.ok()) batch = static_cast<int>(std::clamp(20.0 / ms, 1.0, 10000.0));
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const int windows = static_cast<int>(std::floor(seconds / window_s + 1e-9));
  for (int w = 0; w < windows && e.ok(); ++w) {
    double window_ms = 0, window_flops = 0;
    while (e.ok() && window_ms < window_s * 1e3) {
      e = TimeGemms(c, g, batch, start.event, stop.event, &ms);
      window_ms += ms;
      window_flops += flops * batch;
    }
    if (e.ok()) tflops->push_back(window_flops / (window_ms * 1e-3) / 1e12);
  }
  if (!e.ok()) return Error(what + e.message());
  return Status::Ok();
}

}  // namespace domino::exec::cuda
