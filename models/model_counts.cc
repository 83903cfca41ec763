#include "models/model_counts.h"

namespace domino {
namespace {

// Weights and biases of one norm: LayerNorm has a scale and a shift, RMSNorm only a scale.
int64_t NormParameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  return model.norm == Norm::kLayerNorm ? 2 * h : h;
}

// Weight matrices of one layer: QKV (Q q_hidden wide, K and V kv_hidden each), the output
// projection (q_hidden to hidden), and the MLP (two matrices for GeLU, three for SwiGLU's gate, up
// and down).
int64_t LayerMatmulParameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  const int64_t q = model.q_hidden();
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn;
  const int64_t attention = h * (q + 2 * kv) + q * h;
  const int64_t mlp = (Gated(model.activation) ? 3 : 2) * h * f;
  return attention + mlp;
}

int64_t LayerBiasParameters(const ModelSpec& model) {
  if (!model.bias) return 0;
  const int64_t h = model.hidden;
  const int64_t kv = model.kv_hidden();
  const int64_t f = model.ffn;
  const int64_t attention = (model.q_hidden() + 2 * kv) + h;
  const int64_t mlp = (Gated(model.activation) ? 2 * f : f) + h;
  return attention + mlp;
}

// The gains (and a LayerNorm's shifts) of a QK-norm: one norm over a head's width for Q's heads
// and one for K's (ModelSpec::qk_norm).
int64_t QkNormParameters(const ModelSpec& model) {
  if (!model.qk_norm) return 0;
  return (model.norm == Norm::kLayerNorm ? 4 : 2) * int64_t{model.head_width()};
}

}  // namespace

ParameterCounts CountParameters(const ModelSpec& model) {
  const int64_t h = model.hidden;
  ParameterCounts counts;
  counts.per_layer = LayerMatmulParameters(model) + LayerBiasParameters(model) +
                     (model.post_norms ? 4 : 2) * NormParameters(model) + QkNormParameters(model);
  counts.layers = counts.per_layer * model.layers;
  counts.embedding = model.vocab * h;
  counts.position_embedding = model.learned_positions() ? int64_t{model.seq_len} * h : 0;
  counts.final_norm = NormParameters(model);
  counts.lm_head = model.tied_embeddings ? 0 : model.vocab * h;
  counts.total = counts.layers + counts.embedding + counts.position_embedding + counts.final_norm +
                 counts.lm_head;
  counts.matmul = LayerMatmulParameters(model) * model.layers + model.vocab * h;
  return counts;
}

double CausalKeys(double seq_len, double window, double first_query) {
  const double o = first_query, end = first_query + seq_len;
  if (window <= 0 || window >= end) return o + seq_len / 2;
  if (window <= o) return window;
  // Queries o .. window see p keys, the rest window.
  return ((window * window - o * o) / 2 + (end - window) * window) / seq_len;
}

double TrainingFlopsPerToken(const ModelSpec& model, int seq_len, AttentionCount count) {
  const double matmul = static_cast<double>(CountParameters(model).matmul);
  const double attention_width = static_cast<double>(model.q_hidden());
  const double s = static_cast<double>(seq_len);
  if (count == AttentionCount::kFull)
    return 6.0 * matmul + 12.0 * model.layers * s * attention_width;
  double keys = 0;  // over the layers
  for (int l = 0; l < model.layers; ++l)
    keys += count == AttentionCount::kCausalWindow && model.window.Covers(l)
                ? CausalKeys(s, model.window.tokens)
                : s / 2;
  return 6.0 * matmul + 12.0 * keys * attention_width;
}

}  // namespace domino
