// The layer half of exec/cuda_ops.h: kernels templated on the element type T (float,
// __nv_bfloat16, __half) that load and store T and compute in fp32, and their launchers: each
// checks its shapes, dispatches on the context's type, enqueues on the current stream and checks
// the launch. GEMMs, including the attention's, go through cuBLAS.
#include "exec/cuda_common.cuh"
#include "exec/positions.h"

namespace domino::exec::cuda {
namespace {

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

template <typename T>
__global__ void SquaredReluKernel(Mat<T> x, Mat<T> y) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) {
    const float v = fmaxf(x.Get(r, j), 0.0f);
    y.Set(r, j, v * v);
  }
}

template <typename T>
__global__ void SquaredReluBackwardKernel(Mat<T> x, Mat<T> dy, Mat<T> dx) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) {
    dx.Set(r, j, dy.Get(r, j) * 2.0f * fmaxf(x.Get(r, j), 0.0f));
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

// Rotary embeddings in place on the Q and K heads of each row (exec/cpu_kernels.h, cpu::Rope):
// a thread per pair (c, c + d/2) of a head, its row's position from the CP layout. The angle is
// computed in fp32, as Megatron-Core's and Transformer Engine's kernels do (an fp32 outer product
// of positions and inverse frequencies, then its cos and sin).
template <typename T>
__global__ void RopeKernel(Mat<T> qkv, int64_t rotated_heads, int64_t head_dim, int64_t local_len,
                           int cp, int cp_rank, float sign) {
  const int64_t half = head_dim / 2;
  FOR_EACH_ELEMENT(qkv.rows, rotated_heads * half, r, j) {
    const int64_t head = j / half, c = j % half, col = head * head_dim + c;
    const float inv_freq = powf(static_cast<float>(kRopeBase), -2.0f * c / head_dim);
    const float angle = static_cast<float>(RowPosition(r, local_len, cp, cp_rank)) * inv_freq;
    float sin, cos;
    sincosf(angle, &sin, &cos);
    sin *= sign;
    const float x1 = qkv.Get(r, col), x2 = qkv.Get(r, col + half);
    qkv.Set(r, col, x1 * cos - x2 * sin);
    qkv.Set(r, col + half, x2 * cos + x1 * sin);
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

Status CheckAttention(const Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, DView qkv, DView out) {
  if (sequences < 0 || seq_len < 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      heads % kv_heads != 0)
    return Error("attention: heads must be a positive multiple of kv_heads, sizes positive");
  if (!Valid(qkv) || !Valid(out)) return Error("attention: an invalid view");
  if (qkv.rows != sequences * seq_len || qkv.cols != (heads + 2 * kv_heads) * head_dim)
    return Error("attention: qkv must be (sequences * seq_len) x ((heads + 2 kv_heads) head_dim)");
  if (out.rows != qkv.rows || out.cols != heads * head_dim)
    return Error("attention: out must be (sequences * seq_len) x (heads head_dim)");
  if (sequences * seq_len > INT_MAX) return Error("attention: too many query rows");
  if (c->workspace_bytes < AttentionWorkspaceBytes(sequences, seq_len, heads))
    return Error("attention: call Reserve(AttentionWorkspaceBytes(...)) first");
  return Status::Ok();
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
Status Probabilities(Context* c, const Operand& q, const Operand& k, int64_t sequences, int64_t n,
                     float scale, const AttentionScratch& scratch, Operand* p) {
  const Output s{scratch.s, CUDA_R_32F, n, n, n, n * n};
  Status e = RowMajorGemm(c, q, false, k, true, s, scale, 0.0f, sequences);
  if (!e.ok()) return e;
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

// The model's ends. One block per token.
template <typename T>
__global__ void EmbeddingKernel(Mat<float> tokens, int64_t vocab_begin, Mat<T> table, Mat<T> out) {
  const int64_t j = blockIdx.x;
  const int64_t row = static_cast<int64_t>(tokens.Get(j, 0)) - vocab_begin;
  const bool here = row >= 0 && row < table.rows;
  for (int64_t c = threadIdx.x; c < out.cols; c += blockDim.x)
    out.Set(j, c, here ? table.Get(row, c) : 0.0f);
}

__device__ __forceinline__ void AtomicAddTo(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void AtomicAddTo(__nv_bfloat16* p, float v) {
  atomicAdd(p, __float2bfloat16(v));
}
__device__ __forceinline__ void AtomicAddTo(__half* p, float v) { atomicAdd(p, __float2half(v)); }

template <typename T>
__global__ void EmbeddingBackwardKernel(Mat<float> tokens, int64_t vocab_begin, Mat<T> dy,
                                        Mat<T> dtable) {
  const int64_t j = blockIdx.x;
  const int64_t row = static_cast<int64_t>(tokens.Get(j, 0)) - vocab_begin;
  if (row < 0 || row >= dtable.rows) return;
  for (int64_t c = threadIdx.x; c < dy.cols; c += blockDim.x)
    AtomicAddTo(dtable.data + row * dtable.stride + c, dy.Get(j, c));
}

template <typename T>
__global__ void CrossEntropyStatsKernel(Mat<T> logits, Mat<float> labels, int64_t vocab_begin,
                                        int64_t valid, int part, Mat<float> stats) {
  const int64_t j = blockIdx.x;
  const int64_t parts = stats.cols - 1;
  for (int64_t c = threadIdx.x; c < stats.cols; c += blockDim.x)
    if (c != part && c != parts) stats.Set(j, c, 0.0f);
  float peak = -INFINITY;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) peak = fmaxf(peak, logits.Get(j, c));
  peak = BlockReduce(peak, MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x) sum += expf(logits.Get(j, c) - peak);
  sum = BlockSum(sum);
  if (threadIdx.x != 0) return;
  stats.Set(j, part, valid > 0 ? peak + logf(sum) : -3.402823466e38f);
  const int64_t label = static_cast<int64_t>(labels.Get(j, 0)) - vocab_begin;
  stats.Set(j, parts, label >= 0 && label < valid ? logits.Get(j, label) : 0.0f);
}

template <typename T>
__global__ void CrossEntropyBackwardKernel(Mat<T> logits, Mat<float> labels, Mat<float> stats,
                                           int64_t vocab_begin, int64_t valid, float scale,
                                           Mat<T> dlogits) {
  const int64_t j = blockIdx.x;
  const int64_t parts = stats.cols - 1;
  float peak = -INFINITY;
  for (int64_t p = 0; p < parts; ++p) peak = fmaxf(peak, stats.Get(j, p));
  float sum = 0.0f;
  for (int64_t p = 0; p < parts; ++p) sum += expf(stats.Get(j, p) - peak);
  const float lse = peak + logf(sum);
  const int64_t label = static_cast<int64_t>(labels.Get(j, 0)) - vocab_begin;
  for (int64_t c = threadIdx.x; c < dlogits.cols; c += blockDim.x) {
    float d = c < valid ? expf(logits.Get(j, c) - lse) * scale : 0.0f;
    if (c == label && c < valid) d -= scale;
    dlogits.Set(j, c, d);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Layer kernels

Status Gemm(Context* c, DView a, bool transpose_a, DView b, bool transpose_b, DView out,
            bool accumulate) {
  if (!Valid(a) || !Valid(b) || !Valid(out)) return Error("gemm: invalid view");
  const cudaDataType_t t = BlasType(c->type);
  Status e = RowMajorGemm(c, Operand{a.data, t, a.rows, a.cols, a.stride, 0}, transpose_a,
                          Operand{b.data, t, b.rows, b.cols, b.stride, 0}, transpose_b,
                          Output{out.data, t, out.rows, out.cols, out.stride, 0}, 1.0f,
                          accumulate ? 1.0f : 0.0f, 1);
  // An empty inner dimension makes a zero product, which cuBLAS is not asked for.
  if (e.ok() && (transpose_a ? a.rows : a.cols) == 0 && !accumulate) e = Zero(c, out);
  return e;
}

Status Add(Context* c, DView a, DView b, DView out) {
  if (!Valid(a) || !Valid(b) || !Valid(out) || !SameShape(a, out) || !SameShape(b, out))
    return Error("add: views differ in shape");
  if (Empty(out)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AddKernel<T>
        <<<RowBlocks(out.rows), kThreads, 0, Current(c)>>>(Typed<T>(a), Typed<T>(b), Typed<T>(out));
    return Launched("add");
  });
}

Status NormForward(Context* c, bool rms, DView x, const void* gamma, float eps, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y)) return Error("norm: x and y differ in shape");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr) return Error("norm: no gamma");
  if (x.rows > INT_MAX) return Error("norm: too many rows");
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
Status NormBackward(Context* c, bool rms, DView x, const void* gamma, float eps, DView dy, DView dx,
                    bool accumulate_dx, void* dgamma) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return Error("norm backward: x, dy and dx differ in shape");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr || dgamma == nullptr) return Error("norm backward: no gamma or dgamma");
  if (static_cast<size_t>(x.cols) > kReduceFloats) return Error("norm backward: too many columns");
  const int64_t parts = std::min<int64_t>(
      {x.rows, int64_t{2} * c->sms, static_cast<int64_t>(kReduceFloats) / x.cols});
  float* partial = c->reduce[c->current];
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    NormBackwardRowsKernel<T><<<static_cast<unsigned>(parts), kThreads, 0, Current(c)>>>(
        rms, Typed<T>(x), static_cast<const T*>(gamma), eps, Typed<T>(dy), Typed<T>(dx),
        accumulate_dx, partial);
    if (Status e = Launched("norm backward"); !e.ok()) return e;
    AddColumnSumsKernel<T><<<FlatBlocks(x.cols), kThreads, 0, Current(c)>>>(
        partial, parts, x.cols, static_cast<T*>(dgamma));
    return Launched("norm backward dgamma");
  });
}

Status Gelu(Context* c, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y)) return Error("gelu: x and y differ in shape");
  if (Empty(x)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GeluKernel<T><<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y));
    return Launched("gelu");
  });
}

Status GeluBackward(Context* c, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return Error("gelu backward: x, dy and dx differ in shape");
  if (Empty(x)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GeluBackwardKernel<T>
        <<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy), Typed<T>(dx));
    return Launched("gelu backward");
  });
}

Status SquaredRelu(Context* c, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y))
    return Error("squared relu: x and y differ in shape");
  if (Empty(x)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SquaredReluKernel<T><<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y));
    return Launched("squared relu");
  });
}

Status SquaredReluBackward(Context* c, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return Error("squared relu backward: x, dy and dx differ in shape");
  if (Empty(x)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SquaredReluBackwardKernel<T>
        <<<RowBlocks(x.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy), Typed<T>(dx));
    return Launched("squared relu backward");
  });
}

Status Swiglu(Context* c, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || x.rows != y.rows || x.cols != 2 * y.cols)
    return Error("swiglu: x must be rows x 2f and y rows x f");
  if (Empty(y)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwigluKernel<T><<<RowBlocks(y.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y));
    return Launched("swiglu");
  });
}

Status SwigluBackward(Context* c, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || x.rows != dy.rows || x.cols != 2 * dy.cols ||
      !SameShape(x, dx))
    return Error("swiglu backward: x and dx must be rows x 2f and dy rows x f");
  if (Empty(dy)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwigluBackwardKernel<T>
        <<<RowBlocks(dy.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy), Typed<T>(dx));
    return Launched("swiglu backward");
  });
}

Status Rope(Context* c, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t local_len,
            int cp, int cp_rank, bool inverse, DView qkv) {
  if (!Valid(qkv) || heads < 0 || kv_heads < 0 || head_dim <= 0 || head_dim % 2 != 0 ||
      local_len <= 0 || cp < 1 || cp_rank < 0 || cp_rank >= cp ||
      qkv.cols != (heads + 2 * kv_heads) * head_dim || qkv.rows % local_len != 0)
    return Error("rope: qkv must be whole sequences of (heads + 2 kv_heads) x an even head_dim");
  if (Empty(qkv)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RopeKernel<T><<<RowBlocks(qkv.rows), kThreads, 0, Current(c)>>>(
        Typed<T>(qkv), heads + kv_heads, head_dim, local_len, cp, cp_rank, inverse ? -1.0f : 1.0f);
    return Launched("rope");
  });
}

// Per query head h (key/value head g), batched over sequences:
//   S = scale Q_h K_g^T (fp32), P = causal softmax(S), O_h = P V_g.
Status Attention(Context* c, int64_t sequences, int64_t seq_len, int64_t heads, int64_t kv_heads,
                 int64_t head_dim, DView qkv, DView out) {
  if (Status e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, qkv, out);
      !e.ok())
    return e;
  if (sequences == 0 || seq_len == 0) return Status::Ok();
  const int64_t n = seq_len, d = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const AttentionScratch scratch = Carve(c->workspace, static_cast<size_t>(sequences * n * n));
  for (int64_t h = 0; h < heads; ++h) {
    const HeadColumns col = Columns(heads, kv_heads, d, h);
    const Operand q = AsOperand(HeadBlock(c, qkv, n, d, col.q)),
                  k = AsOperand(HeadBlock(c, qkv, n, d, col.k));
    const Operand v = AsOperand(HeadBlock(c, qkv, n, d, col.v));
    Operand p{};
    Status e = Probabilities(c, q, k, sequences, n, scale, scratch, &p);
    if (e.ok())
      e = RowMajorGemm(c, p, false, v, false, HeadBlock(c, out, n, d, h * d), 1.0f, 0.0f,
                       sequences);
    if (!e.ok()) return Error("attention: " + e.message());
  }
  return Status::Ok();
}

// Per query head h (key/value head g), batched over sequences, with P recomputed as forward:
//   dP = dO_h V_g^T,  dV_g += P^T dO_h,  dS = P (dP - rowsum(P dP)),
//   dQ_h = scale dS K_g,  dK_g += scale dS^T Q_h.
// dqkv is cleared first because the query heads of a group add into one dK_g and dV_g.
Status AttentionBackward(Context* c, int64_t sequences, int64_t seq_len, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, DView qkv, DView dout, DView dqkv) {
  if (Status e = CheckAttention(c, sequences, seq_len, heads, kv_heads, head_dim, qkv, dout);
      !e.ok())
    return e;
  if (!Valid(dqkv) || !SameShape(qkv, dqkv))
    return Error("attention backward: dqkv differs from qkv");
  if (Status e = Zero(c, dqkv); !e.ok()) return Error("attention backward: " + e.message());
  if (sequences == 0 || seq_len == 0) return Status::Ok();
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
    Status e = Probabilities(c, q, k, sequences, n, scale, scratch, &p);
    if (e.ok()) e = RowMajorGemm(c, d_out, false, v, true, dp, 1.0f, 0.0f, sequences);
    if (e.ok())
      e = RowMajorGemm(c, p, true, d_out, false, HeadBlock(c, dqkv, n, d, col.v), 1.0f, 1.0f,
                       sequences);
    if (e.ok()) {
      e = ByType(c->type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ds_t = f32 ? nullptr : static_cast<T*>(scratch.ds_t);
        SoftmaxBackwardKernel<T><<<static_cast<unsigned>(sequences * n), kThreads, 0, Current(c)>>>(
            scratch.s, scratch.dp, ds_t, n);
        return Launched("softmax backward");
      });
    }
    if (e.ok())
      e = RowMajorGemm(c, ds, false, k, false, HeadBlock(c, dqkv, n, d, col.q), scale, 0.0f,
                       sequences);
    if (e.ok())
      e = RowMajorGemm(c, ds, true, q, false, HeadBlock(c, dqkv, n, d, col.k), scale, 1.0f,
                       sequences);
    if (!e.ok()) return Error("attention backward: " + e.message());
  }
  return Status::Ok();
}

Status Embedding(Context* c, DView tokens, int64_t vocab_begin, DView table, DView out) {
  if (!Valid(tokens) || !Valid(table) || !Valid(out) || tokens.cols != 1 ||
      tokens.rows != out.rows || table.cols != out.cols)
    return Error("embedding: needs a column of tokens and a table as wide as the output");
  if (Empty(out)) return Status::Ok();
  if (out.rows > INT_MAX) return Error("embedding: too many tokens");
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    EmbeddingKernel<T><<<static_cast<unsigned>(out.rows), kThreads, 0, Current(c)>>>(
        Typed<float>(tokens), vocab_begin, Typed<T>(table), Typed<T>(out));
    return Launched("embedding");
  });
}

Status EmbeddingBackward(Context* c, DView tokens, int64_t vocab_begin, DView dy, DView dtable) {
  if (!Valid(tokens) || !Valid(dy) || !Valid(dtable) || tokens.cols != 1 ||
      tokens.rows != dy.rows || dtable.cols != dy.cols)
    return Error("embedding backward: needs a column of tokens and a table as wide as dy");
  if (Empty(dy)) return Status::Ok();
  if (dy.rows > INT_MAX) return Error("embedding backward: too many tokens");
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    EmbeddingBackwardKernel<T><<<static_cast<unsigned>(dy.rows), kThreads, 0, Current(c)>>>(
        Typed<float>(tokens), vocab_begin, Typed<T>(dy), Typed<T>(dtable));
    return Launched("embedding backward");
  });
}

Status CrossEntropyStats(Context* c, DView logits, DView labels, int64_t vocab_begin, int64_t vocab,
                         int part, DView stats) {
  if (!Valid(logits) || !Valid(labels) || !Valid(stats) || labels.cols != 1 ||
      labels.rows != logits.rows || stats.rows != logits.rows || part < 0 || part >= stats.cols - 1)
    return Error("cross-entropy: logits, labels and stats disagree");
  if (Empty(logits)) return Status::Ok();
  if (logits.rows > INT_MAX) return Error("cross-entropy: too many tokens");
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyStatsKernel<T><<<static_cast<unsigned>(logits.rows), kThreads, 0, Current(c)>>>(
        Typed<T>(logits), Typed<float>(labels), vocab_begin, valid, part, Typed<float>(stats));
    return Launched("cross-entropy");
  });
}

Status CrossEntropyBackward(Context* c, DView logits, DView labels, DView stats,
                            int64_t vocab_begin, int64_t vocab, int64_t tokens, DView dlogits) {
  if (!Valid(logits) || !Valid(labels) || !Valid(stats) || !Valid(dlogits) ||
      !SameShape(logits, dlogits) || labels.rows != logits.rows || stats.rows != logits.rows ||
      tokens <= 0)
    return Error("cross-entropy backward: logits, labels, stats and dlogits disagree");
  if (Empty(logits)) return Status::Ok();
  if (logits.rows > INT_MAX) return Error("cross-entropy backward: too many tokens");
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyBackwardKernel<T><<<static_cast<unsigned>(logits.rows), kThreads, 0, Current(c)>>>(
        Typed<T>(logits), Typed<float>(labels), Typed<float>(stats), vocab_begin, valid,
        1.0f / static_cast<float>(tokens), Typed<T>(dlogits));
    return Launched("cross-entropy backward");
  });
}

}  // namespace domino::exec::cuda
