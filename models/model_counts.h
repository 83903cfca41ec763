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

// The keys a query attends to on average in a causal sequence of `seq_len` tokens: half of them,
// or with a sliding window of `window` tokens below seq_len (0: none) min(i, window) for query i,
// window - window^2 / (2 seq_len), which meets seq_len / 2 at window = seq_len. A kernel that skips
// the key blocks outside the window does that much work. With `first_query`, the mean over
// queries first_query .. first_query + seq_len of a longer sequence (a chunk of it, as context
// parallelism's all_gather computes): min(i, window) for query i, first_query + seq_len / 2
// without a window.
double CausalKeys(double seq_len, double window, double first_query = 0);

// How model FLOPs count the attention scores of a causal model: every s x s product, as
// Megatron-LM's and PaLM's MFU do (an upper bound that ignores the mask), the lower triangle
// that a causal kernel computes (half), or that triangle within the model's sliding window on the
// layers it covers (kCausalWindow: what kernels that skip the blocks outside the window compute).
enum class AttentionCount { kFull, kCausal, kCausalWindow };

// Model FLOPs to train on one token at sequence length `seq_len`: 6 * matmul parameters (forward
// 2N, backward 4N) plus the attention term 12 * layers * seq_len * (heads * head_dim) for QK^T
// and attention-times-V (forward 4 * s * h per token per layer, times 3), halved with kCausal,
// each windowed layer's with kCausalWindow 12 * CausalKeys(s, window) * (heads * head_dim).
// Recompute is not included.
double TrainingFlopsPerToken(const ModelSpec& model, int seq_len,
                             AttentionCount count = AttentionCount::kFull);

}  // namespace domino

#endif  // DOMINO_MODELS_MODEL_COUNTS_H_
