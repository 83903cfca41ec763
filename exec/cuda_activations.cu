// The activations of exec/cuda_ops.h (GeLU, squared ReLU and the gated units, SwiGLU and GeGLU,
// each way): elementwise kernels templated on the element type T that compute in fp32, and their
// launchers, as cuda_layers.cu's.
#include "exec/cuda_common.cuh"

namespace domino::exec::cuda {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float GeluOf(float v) {
  return 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v)));
}
// With t = tanh(c (x + a x^3)): dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
__device__ __forceinline__ float GeluSlope(float v) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * v * v);
}

template <typename T>
__global__ void GeluKernel(Mat<T> x, Mat<T> y) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) { y.Set(r, j, GeluOf(x.Get(r, j))); }
}

template <typename T>
__global__ void GeluBackwardKernel(Mat<T> x, Mat<T> dy, Mat<T> dx) {
  FOR_EACH_ELEMENT(x.rows, x.cols, r, j) { dx.Set(r, j, dy.Get(r, j) * GeluSlope(x.Get(r, j))); }
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

// A gate's activation and its slope: SiLU (with s = sigmoid(g): g s and s (1 + g (1 - s))) or
// the tanh GeLU.
__device__ __forceinline__ float GateValue(bool gelu, float g) {
  return gelu ? GeluOf(g) : g / (1.0f + expf(-g));
}
__device__ __forceinline__ float GateSlope(bool gelu, float g) {
  if (gelu) return GeluSlope(g);
  const float s = 1.0f / (1.0f + expf(-g));
  return s * (1.0f + g * (1.0f - s));
}

// x = [gate | up], y = act(gate) * up.
template <typename T>
__global__ void GluKernel(Mat<T> x, Mat<T> y, bool gelu) {
  FOR_EACH_ELEMENT(y.rows, y.cols, r, j) {
    y.Set(r, j, GateValue(gelu, x.Get(r, j)) * x.Get(r, y.cols + j));
  }
}

// dgate = dy up act'(gate), dup = dy act(gate).
template <typename T>
__global__ void GluBackwardKernel(Mat<T> x, Mat<T> dy, Mat<T> dx, bool gelu) {
  const int64_t f = dy.cols;
  FOR_EACH_ELEMENT(dy.rows, f, r, j) {
    const float g = x.Get(r, j), u = x.Get(r, f + j), d = dy.Get(r, j);
    dx.Set(r, j, d * u * GateSlope(gelu, g));
    dx.Set(r, f + j, d * GateValue(gelu, g));
  }
}

}  // namespace

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

Status Glu(Context* c, bool gelu, DView x, DView y) {
  if (!Valid(x) || !Valid(y) || x.rows != y.rows || x.cols != 2 * y.cols)
    return Error("gated unit: x must be rows x 2f and y rows x f");
  if (Empty(y)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GluKernel<T><<<RowBlocks(y.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(y), gelu);
    return Launched(gelu ? "geglu" : "swiglu");
  });
}

Status GluBackward(Context* c, bool gelu, DView x, DView dy, DView dx) {
  if (!Valid(x) || !Valid(dy) || !Valid(dx) || x.rows != dy.rows || x.cols != 2 * dy.cols ||
      !SameShape(x, dx))
    return Error("gated unit backward: x and dx must be rows x 2f and dy rows x f");
  if (Empty(dy)) return Status::Ok();
  return ByType(c->type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    GluBackwardKernel<T><<<RowBlocks(dy.rows), kThreads, 0, Current(c)>>>(Typed<T>(x), Typed<T>(dy),
                                                                          Typed<T>(dx), gelu);
    return Launched(gelu ? "geglu backward" : "swiglu backward");
  });
}

}  // namespace domino::exec::cuda
