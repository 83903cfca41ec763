#include "planner/memory_model.h"

#include <algorithm>

#include "models/model_counts.h"
#include "planner/iteration.h"

namespace domino {

MemoryEstimate EstimateMemory(const Plan& plan) {
  return EstimateMemory(plan, plan.attention_kernel() != AttentionKernel::kUnfused);
}

MemoryEstimate EstimateMemory(const Plan& plan, bool flash_attention) {
  const ModelSpec& m = plan.model;
  ParameterCounts counts = CountParameters(m);
  // A rank holds seq_len / cp tokens of each sequence: its activations shrink by cp (ring
  // attention's KV blocks in flight are two of the local K and V, small beside a layer's).
  const double s = plan.local_seq_len(), b = plan.micro_batch, h = m.hidden, a = m.heads,
               t = plan.tp;
  const bool drop_scores = flash_attention || plan.recompute == Recompute::kSelective;
  // A layer that full recompute redoes keeps only its input; the others keep what they store, in
  // bytes per s*b*h: the part TP leaves whole without SP (the norms' inputs 4, the attention's
  // and the MLP's inputs 2 + 2, and with dropout its masks, 1 for each branch that runs one) and
  // the part it splits (Q and the attention's output 2 + 2 times q_hidden/h, K and V 2 each times
  // kv_hidden/h, the MLP's
  // first output and its activation's, 4*ffn/h, or 6*ffn/h when gated), plus the unfused
  // attention's scores: the softmax's output 2*a*s/h, and with dropout its mask and output 3 more
  // (Korthikanti et al. 2022's 34 + 5as/h). Without dropout PyTorch and Transformer Engine keep
  // no mask (a dropout of p = 0 returns its input). A soft cap on the scores as PyTorch kernels
  // of their own (StackSpec::fused_attention_softcap false) keeps its tanh's 16-bit output, 2as/h.
  // In fp8 each of Transformer Engine's linears keeps the input its weight gradient needs
  // quantized, 1 byte instead of 2 (module/linear.py: saved_inputmat is the quantized input): the
  // QKV and fc1 inputs (the norms' outputs, whole part 2 -> 1 each) and fc2's (the activation's
  // output, ffn/h 2 -> 1); the projection keeps an fp8 copy of the attention's output besides the
  // 16-bit one attention keeps for its backward (+q). A QK-norm (ModelSpec::qk_norm) keeps its
  // input, Q and K as the QKV GEMM wrote them, 2 * (q + kv) (Transformer Engine's norm saves it).
  const bool dropout = plan.applies_dropout(), fp8 = plan.precision == Dtype::kFp8;
  const double q = m.q_hidden() / h, kv = m.kv_hidden() / h;
  const double gemm_input = fp8 ? 1 : 2;
  // Megatron-Core's unfused GeGLU (StackSpec::fused_geglu false) keeps the gate's GeLU and the
  // up half's copy for the product's backward: 2 + 2 more.
  const bool unfused_geglu = m.activation == Activation::kGeglu && !plan.stack.fused_geglu;
  const double mlp =
      ((Gated(m.activation) ? 4.0 : 2.0) + (unfused_geglu ? 4.0 : 0.0) + gemm_input) * m.ffn / h;
  const double masks = (plan.branch_dropout(true) ? 1 : 0) + (plan.branch_dropout(false) ? 1 : 0);
  // Post-norms (ModelSpec::post_norms) keep their inputs, the attention's and the MLP's outputs,
  // 2 + 2 in the whole part.
  const double whole = 4 + masks + 2 * gemm_input + (m.post_norms ? 4 : 0);
  const double split = 4 * q + 4 * kv + mlp + (fp8 ? q : 0) + (m.qk_norm ? 2 * (q + kv) : 0);
  const bool capped_scores = m.attention_softcap > 0 && !plan.stack.fused_attention_softcap;
  const double scores = drop_scores ? 0 : ((dropout ? 5 : 2) + (capped_scores ? 2 : 0)) * a * s / h;
  const double recomputed = 2 * s * b * h / (plan.sequence_parallel ? t : 1);
  const double kept = plan.sequence_parallel ? s * b * h / t * (whole + split + scores)
                                             : s * b * h * (whole + (split + scores) / t);
  // The last stage's LM head input and the loss's fp32 logits, one micro-batch's: its backward
  // follows its forward.
  // A soft cap on the logits keeps its tanh's 16-bit output for the backward, unless the loss's
  // kernels take it as they go (StackSpec::fused_logit_softcap: the backward takes it again).
  const bool cap_kept = m.logit_softcap > 0 && !plan.stack.fused_logit_softcap;
  const double output = (4 * s * b * (h + m.vocab) + (cap_kept ? 2 * s * b * m.vocab : 0)) / t;
  // 16-bit weights, their gradients (GradBytes) and the Adam state (AdamStateBytes: master, m and
  // v, 12 bytes in fp32). Weights are not sharded by CP; the distributed optimizer shards the
  // state over DP x CP, as Megatron's. FSDP shards all three and holds, besides, the gathered
  // 16-bit parameters of two layers (the running one and the one prefetched) and one layer's
  // unsharded gradients.
  const bool fsdp = plan.fsdp && plan.dp_cp() > 1;
  const double state = AdamStateBytes(plan);
  const double bytes_per_param =
      fsdp ? (2.0 + GradBytes(plan) + state) / plan.dp_cp()
           : 2.0 + GradBytes(plan) + state / (plan.distributed_optimizer ? plan.dp_cp() : 1);
  const double gathered_bytes =
      fsdp ? static_cast<double>(counts.per_layer) / t * (2 * 2.0 + GradBytes(plan)) : 0;
  const std::vector<int> chunk_layers = ChunkLayers(plan);
  // Every stage: its layers' 1/tp share; the first also the vocab-parallel embedding, the last
  // the untied LM head, or a tied one's copy of the embedding when pp > 1 (learned position
  // embeddings are replicated and, like Megatron's count, left out). Stage s keeps up to pp - s
  // micro-batches in flight under 1F1B; the interleaved schedule holds 1 + (pp - 1) / (pp * v)
  // times more (Korthikanti et al. 2022). The estimate is the most loaded stage's.
  MemoryEstimate worst;
  for (int stage = 0; stage < plan.pp; ++stage) {
    double layers = 0, stored = 0;
    for (int c = 0; c < plan.virtual_stages; ++c) {
      const int chunk = chunk_layers[c * plan.pp + stage];
      layers += chunk;
      const int redone = plan.recomputed_layers(chunk);
      stored += redone * recomputed + (chunk - redone) * kept;
    }
    double params = static_cast<double>(counts.per_layer) * layers / t;
    if (stage == 0) params += static_cast<double>(counts.embedding) / t;
    if (stage == plan.pp - 1)
      params += static_cast<double>(counts.lm_head + TiedEmbeddingCopy(plan, counts)) / t;
    double in_flight = std::max(1, std::min(plan.pp - stage, plan.micro_batches()));
    if (plan.virtual_stages > 1)
      in_flight *= 1.0 + (plan.pp - 1.0) / (static_cast<double>(plan.pp) * plan.virtual_stages);
    MemoryEstimate estimate;
    estimate.weights_and_optimizer_bytes = params * bytes_per_param + gathered_bytes;
    estimate.activation_bytes = stored * in_flight;
    if (stage == plan.pp - 1) estimate.output_bytes = output;
    if (estimate.total_bytes() > worst.total_bytes()) worst = estimate;
  }
  worst.cuda_context_bytes = kCudaContextBytes;
  if (plan.method != OverlapMethod::kDomino) {
    constexpr int kAllGatherBuffers = 6, kBuffers = 10;
    const double fp8 = plan.precision == Dtype::kFp8;
    const double element = s * b * h;
    worst.comm_buffer_bytes =
        element * ((kBuffers - kAllGatherBuffers) * 2.0 + kAllGatherBuffers * (fp8 ? 1.0 : 2.0));
  }
  return worst;
}

}  // namespace domino
