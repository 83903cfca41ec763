#include "models/layer_ops.h"

namespace domino {
namespace {

// A GEMM C[m,n] = A[m,k] B[k,n]. Forward reads A and B and writes C. Backward is the
// input-gradient GEMM (reads dC and B, writes dA) plus the weight-gradient GEMM (reads A and dC,
// writes dB): twice the forward FLOPs and exactly twice the forward bytes.
LayerOp Gemm(std::string_view name, int64_t m, int64_t n, int64_t k, int bytes_per_element,
             bool row_parallel) {
  LayerOp op;
  op.name = name;
  op.kind = LayerOpKind::kGemm;
  op.m = m;
  op.n = n;
  op.k = k;
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  op.fwd_flops = 2.0 * mnk;
  op.bwd_flops = 4.0 * mnk;
  op.fwd_bytes =
      (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n) *
      bytes_per_element;
  op.bwd_bytes = 2.0 * op.fwd_bytes;
  op.row_parallel = row_parallel;
  return op;
}

// A memory-bound op. Its FLOPs are left at zero: the cost model prices it by bytes alone.
LayerOp Elementwise(std::string_view name, double fwd_bytes, double bwd_bytes) {
  LayerOp op;
  op.name = name;
  op.kind = LayerOpKind::kElementwise;
  op.fwd_bytes = fwd_bytes;
  op.bwd_bytes = bwd_bytes;
  return op;
}

}  // namespace

// Approximations, all first-order: norms read x and write y forward and move about twice that
// backward (dy, x and statistics in, dx out); a residual add reads two tensors and writes one both
// ways (backward it is the add where the residual and branch gradients meet); the activation
// reads its inputs and writes its output forward, and reads dy plus its inputs and writes one
// gradient per input backward. Dropout, bias adds and softmax scaling are folded into the
// neighbouring ops. Attention FLOPs count QK^T and scores-times-V without a causal discount (as
// TrainingFlopsPerToken does); backward is twice forward, and its bytes (Q, K, V, O and dO read,
// dQ, dK and dV written) are twice the forward bytes, as for a flash-attention kernel that keeps
// scores on chip.
std::vector<LayerOp> LayerOps(const ModelSpec& model, const LayerShape& shape) {
  const double e = shape.bytes_per_element;
  const int64_t tokens = shape.tokens();
  const int64_t h = model.hidden;
  const int64_t d = model.head_width();
  const int64_t a = model.heads / shape.tp;
  const int64_t g = model.kv_heads / shape.tp;
  const int64_t f = model.ffn / shape.tp;
  const bool swiglu = Gated(model.activation);        // GeGLU's passes are SwiGLU's
  const double th = static_cast<double>(tokens) * h;  // elements of one activation tensor
  const double tf = static_cast<double>(tokens) * f;  // elements of one MLP inner tensor

  LayerOp attention;
  attention.name = "attn";
  attention.kind = LayerOpKind::kAttention;
  attention.fwd_flops = 4.0 * static_cast<double>(shape.sequences) * shape.seq_len * shape.seq_len *
                        static_cast<double>(a * d);
  attention.bwd_flops = 2.0 * attention.fwd_flops;
  attention.fwd_bytes = static_cast<double>(tokens) * static_cast<double>((2 * a + 2 * g) * d) * e;
  attention.bwd_bytes = 2.0 * attention.fwd_bytes;

  // A QK-norm reads and writes Q and K forward, and backward reads them and their gradients and
  // writes one; a post-norm reads the branch's output and writes it normalized before each
  // residual add, and backward reads it and the gradient and writes one (the lowering's qk_norm
  // and post_norm ops).
  const double qk = static_cast<double>(tokens) * static_cast<double>((a + g) * d);
  std::vector<LayerOp> ops;
  ops.push_back(Elementwise("ln1", 2 * th * e, 4 * th * e));
  ops.push_back(Gemm("qkv", tokens, (a + 2 * g) * d, h, shape.bytes_per_element, false));
  if (model.qk_norm) ops.push_back(Elementwise("qk_norm", 2 * qk * e, 3 * qk * e));
  ops.push_back(attention);
  ops.push_back(Gemm("proj", tokens, h, a * d, shape.bytes_per_element, true));
  if (model.post_norms) ops.push_back(Elementwise("post_norm1", 2 * th * e, 3 * th * e));
  ops.push_back(Elementwise("residual1", 3 * th * e, 3 * th * e));
  ops.push_back(Elementwise("ln2", 2 * th * e, 4 * th * e));
  ops.push_back(Gemm("fc1", tokens, swiglu ? 2 * f : f, h, shape.bytes_per_element, false));
  ops.push_back(swiglu ? Elementwise("act", 3 * tf * e, 5 * tf * e)
                       : Elementwise("act", 2 * tf * e, 3 * tf * e));
  ops.push_back(Gemm("fc2", tokens, h, f, shape.bytes_per_element, true));
  if (model.post_norms) ops.push_back(Elementwise("post_norm2", 2 * th * e, 3 * th * e));
  ops.push_back(Elementwise("residual2", 3 * th * e, 3 * th * e));
  return ops;
}

}  // namespace domino
