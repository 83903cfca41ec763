#ifndef DOMINO_EXEC_CUDA_OPS_H_
#define DOMINO_EXEC_CUDA_OPS_H_

// The CUDA half of the CUDA backend: device memory, cuBLAS GEMMs and the layer's kernels, fp32,
// behind a C++17 interface with no CUDA types (cuda_ops.cu implements it; cuda_backend.cc uses
// it). Every function enqueues on the context's stream and returns "" or the error's text.
#include <cstddef>
#include <cstdint>
#include <string>

namespace domino::exec::cuda {

struct Context;  // a device, a stream and a cuBLAS handle

// A row-major fp32 matrix in device memory: element (r, c) at data[r * stride + c].
struct DView {
  float* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
};

std::string Create(int device, Context** out);
void Destroy(Context* context);
std::string Synchronize(Context* context);

std::string Alloc(size_t floats, float** out);
void Free(float* data);
// Host <-> device copies of a view (host side contiguous, rows * cols floats).
std::string Upload(Context* context, DView dst, const float* host);
std::string Download(Context* context, DView src, float* host);
std::string Zero(Context* context, DView view);

// c = op(a) op(b) (c += when accumulate), op = transpose when the flag is set (cuBLAS).
std::string Gemm(Context* context, DView a, bool transpose_a, DView b, bool transpose_b, DView c,
                 bool accumulate);
std::string Add(Context* context, DView a, DView b, DView c);
// LayerNorm (no bias) or RMSNorm per row with gamma; backward as exec/cpu_kernels.h says.
std::string NormForward(Context* context, bool rms, DView x, const float* gamma, float eps, DView y);
std::string NormBackward(Context* context, bool rms, DView x, const float* gamma, float eps,
                         DView dy, DView dx, bool accumulate_dx, float* dgamma);
std::string Gelu(Context* context, DView x, DView y);
std::string GeluBackward(Context* context, DView x, DView dy, DView dx);
std::string Swiglu(Context* context, DView x, DView y);
std::string SwigluBackward(Context* context, DView x, DView dy, DView dx);
// Causal attention with grouped-query heads, the layout of exec/cpu_kernels.h.
std::string Attention(Context* context, int64_t sequences, int64_t seq_len, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, DView qkv, DView out);
std::string AttentionBackward(Context* context, int64_t sequences, int64_t seq_len, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, DView qkv, DView dout, DView dqkv);

}  // namespace domino::exec::cuda

#endif  // DOMINO_EXEC_CUDA_OPS_H_
