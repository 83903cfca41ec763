#include "planner/memory_model.h"

#include <algorithm>

#include "models/model_counts.h"

namespace domino {

MemoryEstimate EstimateMemory(const Plan& plan, bool flash_attention) {
  const ModelSpec& m = plan.model;
  ParameterCounts counts = CountParameters(m);
  // The first stage holds the vocab-parallel embedding and, with one stage, the untied LM head;
  // learned position embeddings are replicated, and like Megatron's count they are left out.
  double stage_params = static_cast<double>(counts.layers) / plan.pp / plan.tp +
                        static_cast<double>(counts.embedding) / plan.tp;
  if (plan.pp == 1) stage_params += static_cast<double>(counts.lm_head) / plan.tp;
  double bytes_per_param = plan.distributed_optimizer ? 6.0 + 12.0 / plan.dp : 18.0;
  MemoryEstimate estimate;
  estimate.weights_and_optimizer_bytes = stage_params * bytes_per_param;

  const double s = plan.seq_len, b = plan.micro_batch, h = m.hidden, a = m.heads, t = plan.tp;
  const bool drop_scores = flash_attention || plan.recompute == Recompute::kSelective;
  double per_layer;
  if (plan.recompute == Recompute::kFull) {
    per_layer = 2 * s * b * h / (plan.sequence_parallel ? t : 1);
  } else if (plan.sequence_parallel) {
    per_layer = s * b * h / t * (34 + (drop_scores ? 0 : 5 * a * s / h));
  } else {
    per_layer = s * b * h * (10 + 24 / t + (drop_scores ? 0 : 5 * a * s / (h * t)));
  }
  double layers = static_cast<double>(m.layers) / plan.pp;
  double in_flight = std::min(plan.pp, plan.micro_batches());
  estimate.activation_bytes = per_layer * layers * std::max(1.0, in_flight);
  return estimate;
}

}  // namespace domino
