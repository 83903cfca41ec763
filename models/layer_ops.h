#ifndef DOMINO_MODELS_LAYER_OPS_H_
#define DOMINO_MODELS_LAYER_OPS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "models/model_spec.h"

namespace domino {

// What one layer's work is made of, for one TP rank.
struct LayerShape {
  int64_t sequences = 1;  // batch rows (a micro-batch, or one row slice of it)
  int64_t seq_len = 1;
  int tp = 1;  // tensor-parallel degree: heads, kv heads and ffn are split tp ways
  int bytes_per_element = 2;
  int64_t tokens() const { return sequences * seq_len; }
};

enum class LayerOpKind {
  kGemm,         // a dense matrix multiply C[m,n] = A[m,k] B[k,n]
  kAttention,    // the attention core: scores, softmax, times V
  kElementwise,  // memory-bound: norms, activations, residual adds, dropout
};

// One operation of a transformer layer on one TP rank, in forward order, with its forward and
// backward cost. For a GEMM, backward is an input-gradient GEMM (m x k from m x n and n x k) and a
// weight-gradient GEMM (k x n from k x m and m x n), each of 2mnk FLOPs; elementwise ops count
// bytes read plus written. The ops' names are stable ("ln1", "qkv", "attn", "proj", "residual1",
// "ln2", "fc1", "act", "fc2", "residual2") so the lowering can refer to them.
struct LayerOp {
  std::string_view name;
  LayerOpKind kind = LayerOpKind::kElementwise;
  int64_t m = 0, n = 0, k = 0;  // GEMM shape; zero otherwise
  double fwd_flops = 0;
  double fwd_bytes = 0;
  double bwd_flops = 0;  // input gradient plus weight gradient for a GEMM
  double bwd_bytes = 0;
  bool row_parallel = false;  // proj and fc2: output needs a TP all-reduce (or reduce-scatter)
};

// The ops of one layer on one TP rank. Preconditions: tp divides heads, kv_heads and ffn.
std::vector<LayerOp> LayerOps(const ModelSpec& model, const LayerShape& shape);

}  // namespace domino

#endif  // DOMINO_MODELS_LAYER_OPS_H_
