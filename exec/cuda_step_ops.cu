// The whole-step executor's device arithmetic (exec/cuda_ops.h, "A whole step's buckets"): fp32
// gradient sums over micro-batches, the fp32 master weights written back in the element type, and
// Adam, each a flat walk over its elements.
#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

template <typename T>
__global__ void AccumulateKernel(Mat<T> src, float* dst, float scale) {
  FOR_EACH_ELEMENT(src.rows, src.cols, r, j) dst[r * src.cols + j] += scale * src.Get(r, j);
}

template <typename T>
__global__ void StoreKernel(const float* src, Mat<T> dst) {
  FOR_EACH_ELEMENT(dst.rows, dst.cols, r, j) dst.Set(r, j, src[r * dst.cols + j]);
}

// As the host step runs it (exec/step.cc, Optimize): moments in fp32, the update in fp32 here.
__global__ void AdamKernel(float* master, float* m, float* v, const float* grad, int64_t n,
                           AdamStep a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi, v[i] = vi;
    master[i] -= a.lr * (mi / a.c1) / (sqrtf(vi / a.c2) + a.eps);
  }
}

}  // namespace

Status AccumulateF32(Context* c, DView src, float* dst, float scale) {
  if (!Valid(src) || (dst == nullptr && !Empty(src))) return Error("accumulate: invalid view");
  if (Empty(src)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    AccumulateKernel<T>
        <<<RowBlocks(src.rows), kThreads, 0, Current(c)>>>(Typed<T>(src), dst, scale);
    return Launched("accumulate");
  });
}

Status StoreF32(Context* c, const float* src, DView dst) {
  if (!Valid(dst) || (src == nullptr && !Empty(dst))) return Error("store: invalid view");
  if (Empty(dst)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    StoreKernel<T><<<RowBlocks(dst.rows), kThreads, 0, Current(c)>>>(src, Typed<T>(dst));
    return Launched("store");
  });
}

Status AdamF32(Context* c, float* master, float* m, float* v, const float* grad, int64_t n,
               const AdamStep& step) {
  if (n <= 0) return Status::Ok();
  if (master == nullptr || m == nullptr || v == nullptr || grad == nullptr)
    return Error("adam: null buffer");
  AdamKernel<<<FlatBlocks(n), kThreads, 0, Current(c)>>>(master, m, v, grad, n, step);
  return Launched("adam");
}

}  // namespace domino::exec::cuda
