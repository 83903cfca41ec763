// The layer half of exec/cuda_ops.h: kernels templated on the element type T (float,
// __nv_bfloat16, __half) that load and store T and compute in fp32, and their launchers: each
// checks its shapes, dispatches on the context's type, enqueues on the current stream and checks
// the launch. GEMMs go through cuBLAS. The activations are in cuda_activations.cu, attention in
// cuda_attention.cu, the model's ends (embedding, cross-entropy) in cuda_ends.cu.
#include "exec/cuda_common.cuh"
#include "exec/positions.h"

namespace domino::exec::cuda {
namespace {

template <typename T>
__global__ void AddKernel(Mat<T> a, Mat<T> b, Mat<T> c, BranchDropout dropout) {
  FOR_EACH_ELEMENT(c.rows, c.cols, r, j) {
    c.Set(r, j, a.Get(r, j) + b.Get(r, j) * dropout.Scale(r, j));
  }
}

template <typename T>
__global__ void DropoutKernel(Mat<T> a, Mat<T> c, BranchDropout dropout) {
  FOR_EACH_ELEMENT(c.rows, c.cols, r, j) c.Set(r, j, a.Get(r, j) * dropout.Scale(r, j));
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

// 16 bytes of elements, so that a row moves in 128-bit loads and stores.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T e[kSize];
};

// Whether row `p` of n elements moves in Packs: 16-byte aligned and a whole number of them.
template <typename T>
__device__ bool Packed(const T* p, int64_t n) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && n % Pack<T>::kSize == 0;
}

// Copies one row into shared memory (`to`, 16-byte aligned) with the whole block, so that the
// norm kernels read HBM once however many passes they make over the row. Returns `to`.
template <typename T>
__device__ const T* StageRow(const T* from, int64_t n, T* to) {
  if (Packed(from, n)) {
    for (int64_t i = threadIdx.x; i < n / Pack<T>::kSize; i += blockDim.x)
      reinterpret_cast<Pack<T>*>(to)[i] = reinterpret_cast<const Pack<T>*>(from)[i];
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) to[j] = from[j];
  }
  __syncthreads();
  return to;
}

// Writes value(j) (fp32) to row `to` of n elements, added to what it holds when `accumulate`,
// rounded once; in Packs where the row allows.
template <typename T, typename F>
__device__ void StoreRow(T* to, int64_t n, bool accumulate, F value) {
  if (Packed(to, n)) {
    constexpr int kSize = Pack<T>::kSize;
    for (int64_t i = threadIdx.x; i < n / kSize; i += blockDim.x) {
      Pack<T> out;
      const Pack<T> old = accumulate ? reinterpret_cast<const Pack<T>*>(to)[i] : Pack<T>{};
      for (int e = 0; e < kSize; ++e) {
        const float v = value(i * kSize + e);
        out.e[e] = FromFloat<T>(accumulate ? ToFloat(old.e[e]) + v : v);
      }
      reinterpret_cast<Pack<T>*>(to)[i] = out;
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      to[j] = FromFloat<T>(accumulate ? ToFloat(to[j]) + value(j) : value(j));
  }
}

// Elements of one staged row in shared memory, rounded up to whole Packs (so that the next row
// staged beside it stays 16-byte aligned).
template <typename T>
__host__ __device__ int64_t StagedPitch(int64_t n) {
  return (n + Pack<T>::kSize - 1) / Pack<T>::kSize * Pack<T>::kSize;
}

// One block per row (blocks loop beyond the grid). With `staged`, the row is first copied into
// dynamic shared memory: the statistics' two passes and the output then read it there.
template <typename T>
__global__ void NormForwardKernel(bool rms, Mat<T> x, const T* gamma, float eps, Mat<T> y,
                                  bool staged) {
  extern __shared__ __align__(16) unsigned char shared[];
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const T* xr = x.data + r * x.stride;
    if (staged) xr = StageRow(xr, x.cols, reinterpret_cast<T*>(shared));
    float mean, inv;
    RowStats(rms, xr, x.cols, eps, &mean, &inv);
    StoreRow(y.data + r * y.stride, x.cols, false,
             [&](int64_t j) { return (ToFloat(xr[j]) - mean) * inv * ToFloat(gamma[j]); });
    __syncthreads();  // the next row overwrites the staged one
  }
}

// One row's backward by the whole block: dxr = (or +=, `accumulate`) the gradient of the norm's
// input (the formulas of cpu_kernels.cc) from its input xr and output gradient dyr, n elements
// each, and the row's mean and 1/std into stat[0] and stat[1] for the gain's partial sums.
template <typename T>
__device__ void NormRowBackward(bool rms, const T* xr, const T* dyr, const T* gamma, int64_t n,
                                float eps, T* dxr, bool accumulate, float* stat) {
  float mean, inv;
  RowStats(rms, xr, n, eps, &mean, &inv);
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float xhat = (ToFloat(xr[j]) - mean) * inv;
    const float g = ToFloat(dyr[j]) * ToFloat(gamma[j]);
    sg += g;
    sgx += g * xhat;
  }
  const float mean_g = rms ? 0.0f : BlockSum(sg) / static_cast<float>(n);
  const float mean_gx = BlockSum(sgx) / static_cast<float>(n);
  if (threadIdx.x == 0) {
    stat[0] = mean;
    stat[1] = inv;
  }
  StoreRow(dxr, n, accumulate, [&](int64_t j) {
    const float xhat = (ToFloat(xr[j]) - mean) * inv;
    const float g = ToFloat(dyr[j]) * ToFloat(gamma[j]);
    return inv * (g - mean_g - xhat * mean_gx);
  });
}

// One block per row: NormRowBackward, its statistics into stats[2r] and stats[2r + 1] for
// NormGammaPartialKernel. With `staged`, x's and dy's rows are copied into dynamic shared memory
// first (dy's StagedPitch elements after x's).
template <typename T>
__global__ void NormBackwardRowsKernel(bool rms, Mat<T> x, const T* gamma, float eps, Mat<T> dy,
                                       Mat<T> dx, bool accumulate, float* stats, bool staged) {
  extern __shared__ __align__(16) unsigned char shared[];
  const int64_t n = x.cols;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const T* xr = x.data + r * x.stride;
    const T* dyr = dy.data + r * dy.stride;
    if (staged) {
      T* rows = reinterpret_cast<T*>(shared);
      xr = StageRow(xr, n, rows);
      dyr = StageRow(dyr, n, rows + StagedPitch<T>(n));
    }
    NormRowBackward(rms, xr, dyr, gamma, n, eps, dx.data + r * dx.stride, accumulate,
                    stats + 2 * r);
    __syncthreads();  // the next row overwrites the staged ones
  }
}

// partial[c * cols + j] = the sum of dy * xhat over column j of row chunk c (rows c * chunk_rows
// on, blockIdx.y = c): one thread per column, so that a warp reads 32 adjacent elements of a row.
template <typename T>
__global__ void NormGammaPartialKernel(Mat<T> x, Mat<T> dy, const float* stats, int64_t chunk_rows,
                                       float* partial) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= x.cols) return;
  const int64_t begin = blockIdx.y * chunk_rows, end = min(x.rows, begin + chunk_rows);
  float s = 0.0f;
#pragma unroll 4
  for (int64_t r = begin; r < end; ++r) {
    const float xhat = (x.Get(r, j) - stats[2 * r]) * stats[2 * r + 1];
    s += dy.Get(r, j) * xhat;
  }
  partial[blockIdx.y * x.cols + j] = s;
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

// A QK-norm's rows (HeadNormForward): logical row r of a [Q | K] view `heads` heads wide is head
// r % heads of token r / heads, its `d` columns at this offset from the view's data.
__device__ int64_t HeadRow(int64_t r, int64_t heads, int64_t d, int64_t stride) {
  return r / heads * stride + r % heads * d;
}

// One block per head row: keeps it in `kept`, then normalizes it in place from there, Q's heads
// (the first q_heads) with gamma[0, d), K's with gamma[d, 2d).
template <typename T>
__global__ void HeadNormForwardKernel(bool rms, Mat<T> x, int64_t heads, int64_t q_heads,
                                      const T* gamma, float eps, Mat<T> kept) {
  const int64_t d = x.cols / heads;
  for (int64_t r = blockIdx.x; r < x.rows * heads; r += gridDim.x) {
    T* xr = x.data + HeadRow(r, heads, d, x.stride);
    T* kr = kept.data + HeadRow(r, heads, d, kept.stride);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) kr[j] = xr[j];
    __syncthreads();
    float mean, inv;
    RowStats(rms, kr, d, eps, &mean, &inv);
    const T* g = gamma + (r % heads < q_heads ? 0 : d);
    StoreRow(xr, d, false,
             [&](int64_t j) { return (ToFloat(kr[j]) - mean) * inv * ToFloat(g[j]); });
    __syncthreads();  // the next row's copy comes after every thread has read this one
  }
}

// One block per head row: NormRowBackward with the head's gain, its statistics into stats[2r]
// and stats[2r + 1] for HeadNormGammaPartialKernel.
template <typename T>
__global__ void HeadNormBackwardRowsKernel(bool rms, Mat<T> x, Mat<T> dy, Mat<T> dx, int64_t heads,
                                           int64_t q_heads, const T* gamma, float eps,
                                           float* stats) {
  const int64_t d = x.cols / heads;
  for (int64_t r = blockIdx.x; r < x.rows * heads; r += gridDim.x)
    NormRowBackward(rms, x.data + HeadRow(r, heads, d, x.stride),
                    dy.data + HeadRow(r, heads, d, dy.stride),
                    gamma + (r % heads < q_heads ? 0 : d), d, eps,
                    dx.data + HeadRow(r, heads, d, dx.stride), false, stats + 2 * r);
}

// partial[c * 2d + j] = the sum of dy * xhat over tokens chunk c (blockIdx.y) of gain column j:
// column j % d of Q's heads for j < d, of K's for the rest. One thread per column.
template <typename T>
__global__ void HeadNormGammaPartialKernel(Mat<T> x, Mat<T> dy, int64_t heads, int64_t q_heads,
                                           const float* stats, int64_t chunk_tokens,
                                           float* partial) {
  const int64_t d = x.cols / heads;
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= 2 * d) return;
  const int64_t c = j % d;
  const int64_t first = j < d ? 0 : q_heads, last = j < d ? q_heads : heads;
  const int64_t begin = blockIdx.y * chunk_tokens, end = min(x.rows, begin + chunk_tokens);
  float s = 0.0f;
  for (int64_t t = begin; t < end; ++t) {
    for (int64_t h = first; h < last; ++h) {
      const int64_t r = t * heads + h;
      const float xhat = (x.Get(t, h * d + c) - stats[2 * r]) * stats[2 * r + 1];
      s += dy.Get(t, h * d + c) * xhat;
    }
  }
  partial[blockIdx.y * 2 * d + j] = s;
}

// Lets `kernel` take `bytes` of dynamic shared memory: more than the default 48 KiB where the
// device allows it. False where it does not (the caller runs the kernel unstaged).
template <typename K>
bool SharedMemoryFor(const Context* c, K kernel, size_t bytes) {
  if (bytes <= size_t{48} << 10) return true;
  int most = 0;
  if (cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) !=
          cudaSuccess ||
      bytes > static_cast<size_t>(most)) {
    cudaGetLastError();  // a refused query leaves no error behind for the next launch
    return false;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
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

Status Add(Context* c, DView a, DView b, DView out, const BranchDropout& dropout) {
  if (!Valid(a) || !Valid(b) || !Valid(out) || !SameShape(a, out) || !SameShape(b, out))
    return Error("add: views differ in shape");
  if (!(dropout.rate >= 0 && dropout.rate < 1)) return Error("add: a dropout rate in [0, 1)");
  if (Empty(out)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AddKernel<T><<<RowBlocks(out.rows), kThreads, 0, Current(c)>>>(Typed<T>(a), Typed<T>(b),
                                                                   Typed<T>(out), dropout);
    return Launched("add");
  });
}

Status Dropout(Context* c, const BranchDropout& dropout, DView a, DView out) {
  if (!Valid(a) || !Valid(out) || !SameShape(a, out))
    return Error("dropout: views differ in shape");
  if (!(dropout.rate >= 0 && dropout.rate < 1)) return Error("dropout: a rate in [0, 1)");
  if (Empty(out)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    DropoutKernel<T>
        <<<RowBlocks(out.rows), kThreads, 0, Current(c)>>>(Typed<T>(a), Typed<T>(out), dropout);
    return Launched("dropout");
  });
}

Status NormForward(Context* c, bool rms, DView x, const void* gamma, float eps, DView y) {
  if (!Valid(x) || !Valid(y) || !SameShape(x, y)) return Error("norm: x and y differ in shape");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr) return Error("norm: no gamma");
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    size_t shared = static_cast<size_t>(StagedPitch<T>(x.cols)) * sizeof(T);
    const bool staged = SharedMemoryFor(c, NormForwardKernel<T>, shared);
    if (!staged) shared = 0;
    NormForwardKernel<T><<<RowBlocks(x.rows), kThreads, shared, Current(c)>>>(
        rms, Typed<T>(x), static_cast<const T*>(gamma), eps, Typed<T>(y), staged);
    return Launched("norm");
  });
}

// Three kernels, so that dgamma is summed in fp32 without atomics on 16-bit values and every
// kernel has a block per row or per column tile: the row kernel writes dx and each row's
// statistics into the stream's reduction buffer, the partial kernel sums dy * xhat over chunks of
// rows into it too, and the column kernel adds the chunks into dgamma. Rows beyond what the
// buffer holds go in slices, one after another.
Status NormBackward(Context* c, bool rms, DView x, const void* gamma, float eps, DView dy, DView dx,
                    bool accumulate_dx, void* dgamma) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return Error("norm backward: x, dy and dx differ in shape");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr || dgamma == nullptr) return Error("norm backward: no gamma or dgamma");
  const int64_t n = x.cols;
  // Room for a slice's statistics (2 floats a row, rounded to 64) and at least one chunk's sums.
  const int64_t room = static_cast<int64_t>(kReduceFloats);
  if (n + 64 > room) return Error("norm backward: too many columns");
  const int64_t slice_rows = std::min<int64_t>(x.rows, (room - n - 64) / 2);
  float* buffer = c->reduce[c->current];
  return ByType(c->type, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    size_t shared = 2 * static_cast<size_t>(StagedPitch<T>(n)) * sizeof(T);
    const bool staged = SharedMemoryFor(c, NormBackwardRowsKernel<T>, shared);
    if (!staged) shared = 0;
    for (int64_t first = 0; first < x.rows; first += slice_rows) {
      const int64_t rows = std::min(slice_rows, x.rows - first);
      const auto slice = [&](DView v) {
        return Typed<T>(DView{Offset(v.data, first * v.stride, Bytes(c)), rows, n, v.stride});
      };
      float* stats = buffer;
      float* partial = buffer + AlignUp(static_cast<size_t>(2 * rows), 64);
      const int64_t chunks = std::clamp<int64_t>(
          (room - static_cast<int64_t>(partial - buffer)) / n, 1, std::min<int64_t>(rows, 1024));
      const int64_t chunk_rows = (rows + chunks - 1) / chunks;
      const int64_t used = (rows + chunk_rows - 1) / chunk_rows;
      NormBackwardRowsKernel<T><<<RowBlocks(rows), kThreads, shared, Current(c)>>>(
          rms, slice(x), static_cast<const T*>(gamma), eps, slice(dy), slice(dx), accumulate_dx,
          stats, staged);
      if (Status e = Launched("norm backward"); !e.ok()) return e;
      const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                      static_cast<unsigned>(used));
      NormGammaPartialKernel<T>
          <<<grid, kThreads, 0, Current(c)>>>(slice(x), slice(dy), stats, chunk_rows, partial);
      if (Status e = Launched("norm backward dgamma partial sums"); !e.ok()) return e;
      AddColumnSumsKernel<T>
          <<<FlatBlocks(n), kThreads, 0, Current(c)>>>(partial, used, n, static_cast<T*>(dgamma));
      if (Status e = Launched("norm backward dgamma"); !e.ok()) return e;
    }
    return Status::Ok();
  });
}

// Kept and normalized in one kernel: a block per head row.
Status HeadNormForward(Context* c, bool rms, int64_t heads, int64_t q_heads, DView x,
                       const void* gamma, float eps, DView kept) {
  if (!Valid(x) || !Valid(kept) || !SameShape(x, kept))
    return Error("QK-norm: x and its kept copy differ in shape");
  if (heads <= 0 || q_heads < 0 || q_heads > heads || x.cols % heads != 0)
    return Error("QK-norm: the view is not a whole number of heads");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr) return Error("QK-norm: no gamma");
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    HeadNormForwardKernel<T><<<RowBlocks(x.rows * heads), kThreads, 0, Current(c)>>>(
        rms, Typed<T>(x), heads, q_heads, static_cast<const T*>(gamma), eps, Typed<T>(kept));
    return Launched("QK-norm");
  });
}

// As NormBackward: the row kernel (dx and each head row's statistics in the stream's reduction
// buffer), the partial sums of the gains' gradients over chunks of tokens, the column sums into
// dgamma; tokens beyond what the buffer holds go in slices.
Status HeadNormBackward(Context* c, bool rms, int64_t heads, int64_t q_heads, DView x,
                        const void* gamma, float eps, DView dy, DView dx, void* dgamma) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || !SameShape(x, dy) || !SameShape(x, dx))
    return Error("QK-norm backward: x, dy and dx differ in shape");
  if (heads <= 0 || q_heads < 0 || q_heads > heads || x.cols % heads != 0)
    return Error("QK-norm backward: the view is not a whole number of heads");
  if (Empty(x)) return Status::Ok();
  if (gamma == nullptr || dgamma == nullptr) return Error("QK-norm backward: no gamma or dgamma");
  const int64_t d = x.cols / heads, n = 2 * d;
  // Half the buffer for a slice's statistics (2 floats a head row), half for the chunks' sums.
  const int64_t half = static_cast<int64_t>(kReduceFloats) / 2;
  if (n > half) return Error("QK-norm backward: heads too wide");
  const int64_t slice_tokens = std::clamp<int64_t>(half / (2 * heads), 1, x.rows);
  float* buffer = c->reduce[c->current];
  return ByType(c->type, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (int64_t first = 0; first < x.rows; first += slice_tokens) {
      const int64_t tokens = std::min(slice_tokens, x.rows - first);
      const auto slice = [&](DView v) {
        return Typed<T>(
            DView{Offset(v.data, first * v.stride, Bytes(c)), tokens, v.cols, v.stride});
      };
      float* stats = buffer;
      float* partial = buffer + half;
      const int64_t chunks = std::clamp<int64_t>(half / n, 1, std::min<int64_t>(tokens, 1024));
      const int64_t chunk_tokens = (tokens + chunks - 1) / chunks;
      const int64_t used = (tokens + chunk_tokens - 1) / chunk_tokens;
      HeadNormBackwardRowsKernel<T><<<RowBlocks(tokens * heads), kThreads, 0, Current(c)>>>(
          rms, slice(x), slice(dy), slice(dx), heads, q_heads, static_cast<const T*>(gamma), eps,
          stats);
      if (Status e = Launched("QK-norm backward"); !e.ok()) return e;
      const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                      static_cast<unsigned>(used));
      HeadNormGammaPartialKernel<T><<<grid, kThreads, 0, Current(c)>>>(
          slice(x), slice(dy), heads, q_heads, stats, chunk_tokens, partial);
      if (Status e = Launched("QK-norm backward dgamma partial sums"); !e.ok()) return e;
      AddColumnSumsKernel<T>
          <<<FlatBlocks(n), kThreads, 0, Current(c)>>>(partial, used, n, static_cast<T*>(dgamma));
      if (Status e = Launched("QK-norm backward dgamma"); !e.ok()) return e;
    }
    return Status::Ok();
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

}  // namespace domino::exec::cuda
