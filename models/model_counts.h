#ifndef DOMINO_MODELS_MODEL_COUNTS_H_
#define DOMINO_MODELS_MODEL_COUNTS_H_

#include <cstdint>

#include "models/model_spec.h"

namespace domino {

// Parameter counts of a whole model, unsharded.
struct ParameterCounts {
  int64_t per_layer = 0;           // one transformer layer: attention, MLP, two norms, biases
  int64_t layers = 0;              // per_layer * layers
  int64_t embedding = 0;           // token embedding, vocab * hidden
  int64_t position_embedding = 0;  // learned positions (GPT family), seq_len * hidden
  int64_t final_norm = 0;
  int64_t lm_head = 0;  // 0 with tied embeddings
  int64_t total = 0;
  // Parameters that take part in matrix multiplications per token: every layer weight matrix
  // plus the LM head's vocab * hidden (counted even when tied). Excludes norms, biases and
  // embedding lookups. This is the N of "6N" below.
  int64_t matmul = 0;
};

ParameterCounts CountParameters(const ModelSpec& model);

// How model FLOPs count the attention scores of a causal model: every s x s product, as
// Megatron-LM's and PaLM's MFU do (an upper bound that ignores the mask), or the lower triangle
// that a causal kernel computes (half).
enum class AttentionCount { kFull, kCausal };

// Model FLOPs to train on one token at sequence length `seq_len`: 6 * matmul parameters (forward
// 2N, backward 4N) plus the attention term 12 * layers * seq_len * (heads * head_dim) for QK^T
// and attention-times-V (forward 4 * s * h per token per layer, times 3), halved with kCausal.
// Recompute is not included.
double TrainingFlopsPerToken(const ModelSpec& model, int seq_len,
                             AttentionCount count = AttentionCount::kFull);

}  // namespace domino

#endif  // DOMINO_MODELS_MODEL_COUNTS_H_
