// The model's ends on the GPU (the exec/cuda_ops.h half for them): the token embedding and its
// gradient, and the vocabulary-parallel cross-entropy's statistics and gradient, one block per
// token, in fp32 arithmetic over the context's element type.
#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

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

// A logit soft-capped (softcap * tanh(z / softcap), ModelSpec::logit_softcap), or as it is when
// softcap is 0: taken as the kernels read each logit, never written.
__device__ __forceinline__ float SoftCapped(float z, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(z / softcap) : z;
}

template <typename T>
__global__ void CrossEntropyStatsKernel(Mat<T> logits, Mat<float> labels, int64_t vocab_begin,
                                        int64_t valid, int part, float softcap, Mat<float> stats) {
  const int64_t j = blockIdx.x;
  const int64_t parts = stats.cols - 1;
  for (int64_t c = threadIdx.x; c < stats.cols; c += blockDim.x)
    if (c != part && c != parts) stats.Set(j, c, 0.0f);
  float peak = -INFINITY;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x)
    peak = fmaxf(peak, SoftCapped(logits.Get(j, c), softcap));
  peak = BlockReduce(peak, MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < valid; c += blockDim.x)
    sum += expf(SoftCapped(logits.Get(j, c), softcap) - peak);
  sum = BlockSum(sum);
  if (threadIdx.x != 0) return;
  stats.Set(j, part, valid > 0 ? peak + logf(sum) : -3.402823466e38f);
  const int64_t label = static_cast<int64_t>(labels.Get(j, 0)) - vocab_begin;
  stats.Set(j, parts,
            label >= 0 && label < valid ? SoftCapped(logits.Get(j, label), softcap) : 0.0f);
}

// With a soft cap, the gradient of the capped logit times the cap's derivative, 1 - tanh^2.
template <typename T>
__global__ void CrossEntropyBackwardKernel(Mat<T> logits, Mat<float> labels, Mat<float> stats,
                                           int64_t vocab_begin, int64_t valid, float scale,
                                           float softcap, Mat<T> dlogits) {
  const int64_t j = blockIdx.x;
  const int64_t parts = stats.cols - 1;
  float peak = -INFINITY;
  for (int64_t p = 0; p < parts; ++p) peak = fmaxf(peak, stats.Get(j, p));
  float sum = 0.0f;
  for (int64_t p = 0; p < parts; ++p) sum += expf(stats.Get(j, p) - peak);
  const float lse = peak + logf(sum);
  const int64_t label = static_cast<int64_t>(labels.Get(j, 0)) - vocab_begin;
  for (int64_t c = threadIdx.x; c < dlogits.cols; c += blockDim.x) {
    float d = 0.0f;
    if (c < valid) {
      const float capped = SoftCapped(logits.Get(j, c), softcap);
      d = expf(capped - lse) * scale - (c == label ? scale : 0.0f);
      if (softcap > 0.0f) d *= 1.0f - (capped / softcap) * (capped / softcap);
    }
    dlogits.Set(j, c, d);
  }
}

}  // namespace

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
                         int part, double softcap, DView stats) {
  if (!Valid(logits) || !Valid(labels) || !Valid(stats) || labels.cols != 1 ||
      labels.rows != logits.rows || stats.rows != logits.rows || part < 0 || part >= stats.cols - 1)
    return Error("cross-entropy: logits, labels and stats disagree");
  if (!(softcap >= 0))
    return Error("cross-entropy: the logits' soft cap must be 0 (none) or above");
  if (Empty(logits)) return Status::Ok();
  if (logits.rows > INT_MAX) return Error("cross-entropy: too many tokens");
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyStatsKernel<T><<<static_cast<unsigned>(logits.rows), kThreads, 0, Current(c)>>>(
        Typed<T>(logits), Typed<float>(labels), vocab_begin, valid, part,
        static_cast<float>(softcap), Typed<float>(stats));
    return Launched("cross-entropy");
  });
}

Status CrossEntropyBackward(Context* c, DView logits, DView labels, DView stats,
                            int64_t vocab_begin, int64_t vocab, int64_t tokens, double softcap,
                            DView dlogits) {
  if (!Valid(logits) || !Valid(labels) || !Valid(stats) || !Valid(dlogits) ||
      !SameShape(logits, dlogits) || labels.rows != logits.rows || stats.rows != logits.rows ||
      tokens <= 0)
    return Error("cross-entropy backward: logits, labels, stats and dlogits disagree");
  if (!(softcap >= 0))
    return Error("cross-entropy backward: the logits' soft cap must be 0 (none) or above");
  if (Empty(logits)) return Status::Ok();
  if (logits.rows > INT_MAX) return Error("cross-entropy backward: too many tokens");
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CrossEntropyBackwardKernel<T><<<static_cast<unsigned>(logits.rows), kThreads, 0, Current(c)>>>(
        Typed<T>(logits), Typed<float>(labels), Typed<float>(stats), vocab_begin, valid,
        1.0f / static_cast<float>(tokens), static_cast<float>(softcap), Typed<T>(dlogits));
    return Launched("cross-entropy backward");
  });
}

}  // namespace domino::exec::cuda
