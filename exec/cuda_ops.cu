// Kernels of the CUDA backend, fp32, one launcher per op (it takes the context's stream and checks
// the launch). Written for correctness first: the numeric check compares them with the CPU
// reference; speed comes from cuBLAS for the GEMMs.
#include "exec/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace domino::exec::cuda {

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

namespace {

std::string Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorString(status);
}

std::string Launched(const char* kernel) { return Check(cudaGetLastError(), kernel); }

constexpr int kThreads = 256;
int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__device__ float& At(DView v, int64_t r, int64_t c) { return v.data[r * v.stride + c]; }

__global__ void ZeroKernel(DView v) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < v.rows * v.cols) At(v, i / v.cols, i % v.cols) = 0.0f;
}

__global__ void AddKernel(DView a, DView b, DView c) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= c.rows * c.cols) return;
  int64_t r = i / c.cols, j = i % c.cols;
  At(c, r, j) = At(a, r, j) + At(b, r, j);
}

// Block-wide sum of one value per thread (blockDim.x == kThreads).
__device__ float BlockSum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  float sum = shared[0];
  __syncthreads();
  return sum;
}

// One block per row: mean (LayerNorm) and the inverse standard deviation.
__device__ void RowStats(bool rms, const float* x, int64_t n, float* shared, float* mean, float* inv,
                         float eps) {
  float s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += x[j];
  float m = rms ? 0.0f : BlockSum(s, shared) / n;
  float q = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) q += (x[j] - m) * (x[j] - m);
  float var = BlockSum(q, shared) / n;
  *mean = m;
  *inv = rsqrtf(var + eps);
}

__global__ void NormForwardKernel(bool rms, DView x, const float* gamma, float eps, DView y) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x.data + r * x.stride;
  float mean, inv;
  RowStats(rms, xr, x.cols, shared, &mean, &inv, eps);
  for (int64_t j = threadIdx.x; j < x.cols; j += blockDim.x)
    y.data[r * y.stride + j] = (xr[j] - mean) * inv * gamma[j];
}

__global__ void NormBackwardKernel(bool rms, DView x, const float* gamma, float eps, DView dy,
                                   DView dx, bool accumulate, float* dgamma) {
  __shared__ float shared[kThreads];
  const int64_t r = blockIdx.x, n = x.cols;
  const float* xr = x.data + r * x.stride;
  const float* dyr = dy.data + r * dy.stride;
  float mean, inv;
  RowStats(rms, xr, n, shared, &mean, &inv, eps);
  float sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float xhat = (xr[j] - mean) * inv, g = dyr[j] * gamma[j];
    sg += g;
    sgx += g * xhat;
    atomicAdd(&dgamma[j], dyr[j] * xhat);
  }
  float mean_g = rms ? 0.0f : BlockSum(sg, shared) / n;
  float mean_gx = BlockSum(sgx, shared) / n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float xhat = (xr[j] - mean) * inv;
    float d = inv * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    float& out = dx.data[r * dx.stride + j];
    out = accumulate ? out + d : d;
  }
}

constexpr float kGeluC = 0.7978845608028654f;

__global__ void GeluKernel(DView x, DView y) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= x.rows * x.cols) return;
  int64_t r = i / x.cols, j = i % x.cols;
  float v = At(x, r, j);
  At(y, r, j) = 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
}

__global__ void GeluBackwardKernel(DView x, DView dy, DView dx) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= x.rows * x.cols) return;
  int64_t r = i / x.cols, j = i % x.cols;
  float v = At(x, r, j), t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
  float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3 * 0.044715f * v * v);
  At(dx, r, j) = At(dy, r, j) * grad;
}

__global__ void SwigluKernel(DView x, DView y) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= y.rows * y.cols) return;
  int64_t r = i / y.cols, j = i % y.cols;
  float g = At(x, r, j), u = At(x, r, y.cols + j);
  At(y, r, j) = g / (1.0f + expf(-g)) * u;
}

__global__ void SwigluBackwardKernel(DView x, DView dy, DView dx) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dy.rows * dy.cols) return;
  int64_t r = i / dy.cols, j = i % dy.cols, f = dy.cols;
  float g = At(x, r, j), u = At(x, r, f + j), s = 1.0f / (1.0f + expf(-g)), d = At(dy, r, j);
  At(dx, r, j) = d * u * s * (1.0f + g * (1.0f - s));
  At(dx, r, f + j) = d * g * s;
}

struct Shape {
  int64_t sequences, seq_len, heads, kv_heads, head_dim;
};

// The query row a thread owns: thread `id` is token t of head h of sequence seq. Columns of its
// query, and of the key and value heads its query head reads (grouped-query attention).
struct QueryRow {
  int64_t t, seq, row, d, qc, kc, vc;
  float scale;
  __device__ QueryRow(const Shape& s, int64_t id) {
    t = id % s.seq_len;
    const int64_t h = (id / s.seq_len) % s.heads, kvh = h / (s.heads / s.kv_heads);
    seq = id / (s.seq_len * s.heads);
    row = seq * s.seq_len + t;
    d = s.head_dim;
    qc = h * d, kc = s.heads * d + kvh * d, vc = (s.heads + s.kv_heads) * d + kvh * d;
    scale = rsqrtf(static_cast<float>(d));
  }
  __device__ int64_t Key(const Shape& s, int64_t u) const { return seq * s.seq_len + u; }
  // q . k_u / sqrt(d), and dO . v_u.
  __device__ float Score(const Shape& s, DView qkv, int64_t u) const {
    float dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += At(qkv, row, qc + i) * At(qkv, Key(s, u), kc + i);
    return dot * scale;
  }
  __device__ float DotValue(const Shape& s, DView qkv, DView dout, int64_t u) const {
    float dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += At(dout, row, qc + i) * At(qkv, Key(s, u), vc + i);
    return dot;
  }
  // The causal softmax's maximum and normalizer over keys 0..t.
  __device__ void Softmax(const Shape& s, DView qkv, float* peak, float* sum) const {
    *peak = -INFINITY;
    for (int64_t u = 0; u <= t; ++u) *peak = fmaxf(*peak, Score(s, qkv, u));
    *sum = 0;
    for (int64_t u = 0; u <= t; ++u) *sum += expf(Score(s, qkv, u) - *peak);
  }
};

// One thread per (sequence, head, query token): the causal softmax row and its output.
__global__ void AttentionKernel(Shape s, DView qkv, DView out) {
  int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (id >= s.sequences * s.heads * s.seq_len) return;
  const QueryRow q(s, id);
  float peak, sum;
  q.Softmax(s, qkv, &peak, &sum);
  for (int64_t i = 0; i < q.d; ++i) At(out, q.row, q.qc + i) = 0.0f;
  for (int64_t u = 0; u <= q.t; ++u) {
    const float p = expf(q.Score(s, qkv, u) - peak) / sum;
    for (int64_t i = 0; i < q.d; ++i) At(out, q.row, q.qc + i) += p * At(qkv, q.Key(s, u), q.vc + i);
  }
}

// Backward of one query row: dS = P (dP - sum(P dP)), dQ = scale dS K, dK += scale dS^T Q and
// dV += P^T dO, the last two with atomics (query rows and grouped heads share keys and values).
__global__ void AttentionBackwardKernel(Shape s, DView qkv, DView dout, DView dqkv) {
  int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (id >= s.sequences * s.heads * s.seq_len) return;
  const QueryRow q(s, id);
  float peak, sum;
  q.Softmax(s, qkv, &peak, &sum);
  float row_dot = 0;
  for (int64_t u = 0; u <= q.t; ++u)
    row_dot += expf(q.Score(s, qkv, u) - peak) / sum * q.DotValue(s, qkv, dout, u);
  for (int64_t u = 0; u <= q.t; ++u) {
    const int64_t key = q.Key(s, u);
    const float p = expf(q.Score(s, qkv, u) - peak) / sum;
    const float ds = p * (q.DotValue(s, qkv, dout, u) - row_dot);
    for (int64_t i = 0; i < q.d; ++i) {
      At(dqkv, q.row, q.qc + i) += q.scale * ds * At(qkv, key, q.kc + i);
      atomicAdd(&At(dqkv, key, q.kc + i), q.scale * ds * At(qkv, q.row, q.qc + i));
      atomicAdd(&At(dqkv, key, q.vc + i), p * At(dout, q.row, q.qc + i));
    }
  }
}

}  // namespace

std::string Create(int device, Context** out) {
  auto* c = new Context;
  c->device = device;
  std::string e = Check(cudaSetDevice(device), "cudaSetDevice");
  if (e.empty()) e = Check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
  if (e.empty() && cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) e = "cublasCreate failed";
  if (e.empty() && cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS)
    e = "cublasSetStream failed";
  if (!e.empty()) {
    Destroy(c);
    return e;
  }
  *out = c;
  return "";
}

void Destroy(Context* c) {
  if (c == nullptr) return;
  if (c->blas) cublasDestroy(c->blas);
  if (c->stream) cudaStreamDestroy(c->stream);
  delete c;
}

std::string Synchronize(Context* c) { return Check(cudaStreamSynchronize(c->stream), "kernel"); }

std::string Alloc(size_t floats, float** out) {
  return Check(cudaMalloc(reinterpret_cast<void**>(out), std::max<size_t>(1, floats) * sizeof(float)),
               "cudaMalloc");
}

void Free(float* data) { cudaFree(data); }

std::string Upload(Context* c, DView dst, const float* host) {
  return Check(cudaMemcpy2DAsync(dst.data, dst.stride * sizeof(float), host, dst.cols * sizeof(float),
                                 dst.cols * sizeof(float), dst.rows, cudaMemcpyHostToDevice, c->stream),
               "upload");
}

std::string Download(Context* c, DView src, float* host) {
  std::string e = Check(cudaMemcpy2DAsync(host, src.cols * sizeof(float), src.data,
                                          src.stride * sizeof(float), src.cols * sizeof(float), src.rows,
                                          cudaMemcpyDeviceToHost, c->stream),
                        "download");
  return e.empty() ? Synchronize(c) : e;
}

std::string Zero(Context* c, DView v) {
  if (v.rows * v.cols == 0) return "";
  ZeroKernel<<<Blocks(v.rows * v.cols), kThreads, 0, c->stream>>>(v);
  return Launched("zero");
}

std::string Gemm(Context* c, DView a, bool ta, DView b, bool tb, DView out, bool accumulate) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const int64_t m = out.rows, n = out.cols, k = ta ? a.rows : a.cols;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t status = cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                                      b.data, static_cast<int>(b.stride), a.data, static_cast<int>(a.stride),
                                      &beta, out.data, static_cast<int>(out.stride));
  return status == CUBLAS_STATUS_SUCCESS ? "" : "cublasSgemm failed";
}

std::string Add(Context* c, DView a, DView b, DView out) {
  AddKernel<<<Blocks(out.rows * out.cols), kThreads, 0, c->stream>>>(a, b, out);
  return Launched("add");
}

std::string NormForward(Context* c, bool rms, DView x, const float* gamma, float eps, DView y) {
  NormForwardKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, c->stream>>>(rms, x, gamma, eps, y);
  return Launched("norm");
}

std::string NormBackward(Context* c, bool rms, DView x, const float* gamma, float eps, DView dy,
                         DView dx, bool accumulate_dx, float* dgamma) {
  NormBackwardKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, c->stream>>>(rms, x, gamma, eps, dy,
                                                                              dx, accumulate_dx, dgamma);
  return Launched("norm backward");
}

std::string Gelu(Context* c, DView x, DView y) {
  GeluKernel<<<Blocks(x.rows * x.cols), kThreads, 0, c->stream>>>(x, y);
  return Launched("gelu");
}

std::string GeluBackward(Context* c, DView x, DView dy, DView dx) {
  GeluBackwardKernel<<<Blocks(x.rows * x.cols), kThreads, 0, c->stream>>>(x, dy, dx);
  return Launched("gelu backward");
}

std::string Swiglu(Context* c, DView x, DView y) {
  SwigluKernel<<<Blocks(y.rows * y.cols), kThreads, 0, c->stream>>>(x, y);
  return Launched("swiglu");
}

std::string SwigluBackward(Context* c, DView x, DView dy, DView dx) {
  SwigluBackwardKernel<<<Blocks(dy.rows * dy.cols), kThreads, 0, c->stream>>>(x, dy, dx);
  return Launched("swiglu backward");
}

std::string Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, DView qkv, DView out) {
  if (kv_heads <= 0 || heads % kv_heads != 0) return "attention: heads must be a multiple of kv_heads";
  Shape s{sequences, seq_len, heads, kv_heads, head_dim};
  AttentionKernel<<<Blocks(sequences * heads * seq_len), kThreads, 0, c->stream>>>(s, qkv, out);
  return Launched("attention");
}

std::string AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, DView qkv, DView dout, DView dqkv) {
  if (kv_heads <= 0 || heads % kv_heads != 0) return "attention: heads must be a multiple of kv_heads";
  std::string e = Zero(c, dqkv);
  if (!e.empty()) return e;
  Shape s{sequences, seq_len, heads, kv_heads, head_dim};
  AttentionBackwardKernel<<<Blocks(sequences * heads * seq_len), kThreads, 0, c->stream>>>(s, qkv, dout,
                                                                                          dqkv);
  return Launched("attention backward");
}

}  // namespace domino::exec::cuda
