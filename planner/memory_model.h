#ifndef DOMINO_PLANNER_MEMORY_MODEL_H_
#define DOMINO_PLANNER_MEMORY_MODEL_H_

#include "planner/plan.h"

namespace domino {

// Per-GPU memory of a plan on its most loaded pipeline stage, in bytes, following Megatron-LM's
// theoretical_memory_usage.py and Korthikanti et al. 2022:
// - weights, gradients and Adam states: 18 bytes per parameter held by the GPU (6 + 12/(dp*cp)
//   with the distributed optimizer, which Megatron shards over DP x CP; 6 bytes of state instead of
//   12 in bf16, 2 bytes of gradients with grad_reduce param); a GPU holds its 1/tp share
//   of its stage's layers (ChunkLayers), the first stage also the vocab-parallel embedding, the
//   last the untied LM head;
// - activations per layer: s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes with TP, s*b*h/t*(34 + 5*a*s/h)
//   with sequence parallelism (b = micro_batch, a = heads), for multi-head attention and a GeLU
//   MLP of ffn 4h; in general the TP-split part 24 is Q and the attention output (2 + 2), K and V
//   (2 + 2 times kv_heads/heads) and the MLP's 4*ffn/h (its first matmul's output and the
//   activation's, 2 bytes each; 6*ffn/h when gated, whose first matmul gives two: Megatron-LM's
//   18 + 4*ffn/h grown by the gate); flash attention drops the a*s/h term; selective recompute
//   drops it too; full recompute keeps only the 2*s*b*h layer input; stage s keeps up to pp - s
//   micro-batches in flight under 1F1B, times 1 + (pp-1)/(pp*v) when interleaved over v virtual
//   stages; with context parallelism s is the rank's seq_len / cp;
// - the LM head's input and the loss's fp32 logits on the last stage, for the micro-batch whose
//   backward follows its forward: s*b*4*(h + vocab)/t (Megatron-LM's "inputs to output layer and
//   CE loss");
// - with decomposed overlap (method decomposed or both), Transformer Engine's userbuffers:
//   initialize_ub (transformer_engine/pytorch/module/base.py) allocates one buffer shaped like the
//   whole sequence's activations (seq_len * micro_batch x hidden, as Megatron passes it) per
//   overlapped GEMM: qkv and fc1 fprop and proj and fc2 dgrad (ring exchange), proj and fc2 fprop
//   (pipelined), qkv and fc1 dgrad and wgrad (bulk) — 10 buffers in the activation dtype, the six
//   all-gather buffers (qkv/fc1 fprop and dgrad, proj/fc2 dgrad) in fp8 under an fp8 recipe;
// - the CUDA context: what a process holds outside PyTorch's allocator (kCudaContextBytes).
// Not counted: NCCL's buffers (a 4-GPU DDP process on A100 80GB held 1.6 GiB outside PyTorch's
// allocator in its out-of-memory report: 79.25 GiB total, 8.94 MiB free, 77.59 GiB allocated and
// 17.18 MiB reserved by PyTorch), cuBLAS workspaces, the loss's transient fp32 logits and the
// allocator's fragmentation.
struct MemoryEstimate {
  double weights_and_optimizer_bytes = 0;
  double activation_bytes = 0;
  double output_bytes = 0;       // the LM head's input and the loss's logits (last stage)
  double comm_buffer_bytes = 0;  // decomposed overlap's userbuffers
  double cuda_context_bytes = 0;
  double total_bytes() const {
    return weights_and_optimizer_bytes + activation_bytes + output_bytes + comm_buffer_bytes +
           cuda_context_bytes;
  }
};

// The memory a process holds outside PyTorch's allocator without NCCL (its CUDA context, kernel
// images, library handles): 0.48 GiB in PyTorch's out-of-memory report of a single-GPU run on an
// 80 GB GPU ("a total capacity of 79.25 GiB ... 79.23 GiB memory in use. Of the allocated memory
// 78.42 GiB is allocated by PyTorch, and 336.78 MiB is reserved by PyTorch but unallocated").
inline constexpr double kCudaContextBytes = 0.5 * (1 << 30);

// With the plan's own attention kernel (unfused attention keeps its scores), or with
// `flash_attention` saying which.
MemoryEstimate EstimateMemory(const Plan& plan);
MemoryEstimate EstimateMemory(const Plan& plan, bool flash_attention);

}  // namespace domino

#endif  // DOMINO_PLANNER_MEMORY_MODEL_H_
