#ifndef DOMINO_PLANNER_PLAN_H_
#define DOMINO_PLANNER_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/hardware_spec.h"
#include "models/base/result.h"
#include "models/model_spec.h"
#include "planner/stack.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace domino {

// How far a TP collective may overlap: not at all, with independent work of the same layer, or
// also with the next layer's work (row slices only).
enum class OverlapScope { kNone, kIntraLayer, kInterLayer };
enum class Recompute { kNone, kSelective, kFull };
// How sequence-parallel collectives hide: Domino's slicing (row and column splits, the default),
// decomposed collective-matmul overlap as Transformer Engine's userbuffers (`--tp-comm-overlap`)
// and torchtitan's async TP run it (each all-gather before a column-parallel GEMM and each
// reduce-scatter after a row-parallel GEMM cut into `chunks` pieces pipelined with the GEMM's
// pieces), or both (each Domino row slice decomposed).
enum class OverlapMethod { kDomino, kDecomposed, kBoth };
// How ranks are laid out over the cluster, innermost first: Megatron's default puts TP inside a
// node, then DP, then PP (pipeline neighbours tp * dp ranks apart); tp-pp-dp keeps pipeline
// neighbours close and spreads DP instead.
enum class Placement { kTpDpPp, kTpPpDp };
// What the pipeline split counts besides the transformer layers (Megatron-Core's
// account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split): the word
// embedding, the LM head with its loss, or both ("ends") as one layer each, so the first and the
// last model chunk hold one layer fewer. Llama 3.1 405B's 126 layers on pp 8 x vp 8 = 64 chunks
// run that way (Megatron-Bridge's recipe): 128 / 64 = 2 per chunk, 1 in the first and the last.
enum class PipelineSplit { kLayers, kEmbedding, kLoss, kEnds };
// How context parallelism brings each rank's queries together with the keys they attend to
// (`parallel.cp_comm`, Transformer Engine's cp_comm_type, Megatron-LM's --cp-comm-type):
// - p2p: the ring, each rank's K and V passed on to the next CP rank while the attention
//   computes with the block before (AttnFuncWithCPAndKVP2P);
// - all_gather: K and V all-gathered over the CP group before the attention, and their gradients
//   reduce-scattered after its backward, neither overlapped (AttnFuncWithCPAndKVAllGather: "KV
//   all-gather between CP ranks is exposed", Llama 3's context parallelism);
// - a2a: Ulysses-style all-to-alls that trade the sequence shard of Q, K and V for a shard of the
//   heads over the whole sequence, and back for the output (AttnFuncWithCPAndQKVOA2A);
// - a2a+p2p: hierarchical, a2a inside groups of cp_a2a consecutive CP ranks (a shard of the heads
//   over cp_a2a ranks' tokens), then the p2p ring over the cp / cp_a2a groups
//   (AttnFuncWithCPAndKVP2P with a list of two CP groups; Megatron-LM's
//   --hierarchical-context-parallel-sizes cp_a2a cp/cp_a2a).
enum class CpComm { kP2p, kAllGather, kA2a, kA2aP2p };

std::string_view ScopeName(OverlapScope scope);  // "none", "intra-layer", "inter-layer"
std::string_view RecomputeName(Recompute recompute);
std::string_view MethodName(OverlapMethod method);    // "domino", "decomposed", "both"
std::string_view PlacementName(Placement placement);  // "tp-dp-pp", "tp-pp-dp"
// "layers", "embedding", "loss", "ends"
std::string_view PipelineSplitName(PipelineSplit split);
std::string_view CpCommName(CpComm comm);  // "p2p", "all_gather", "a2a", "a2a+p2p"

// The names a plan file (and the matching command-line flag) gives each choice.
std::span<const std::pair<std::string_view, Dtype>> PrecisionNames();       // bf16, fp16, fp8
std::span<const std::pair<std::string_view, Dtype>> OptimizerDtypeNames();  // fp32, bf16
std::span<const std::pair<std::string_view, OverlapScope>> ScopeNames();
std::span<const std::pair<std::string_view, OverlapMethod>> MethodNames();
std::span<const std::pair<std::string_view, Recompute>> RecomputeNames();
std::span<const std::pair<std::string_view, Placement>> PlacementNames();
std::span<const std::pair<std::string_view, PipelineSplit>> PipelineSplitNames();
std::span<const std::pair<std::string_view, CpComm>> CpCommNames();

// Predicted (or measured) figures of a plan: the `predicted:` and `measured:` blocks of a report.
// Times in milliseconds per training iteration on the critical rank.
struct PlanFigures {
  double iteration_ms = 0;
  double ideal_ms = 0;              // same schedule, TP collectives free
  double exposed_comm_ms = 0;       // iteration_ms - ideal_ms
  double hidden_comm_fraction = 0;  // 1 - exposed / total TP communication time
  double tokens_per_s = 0;
  // Model FLOPs: 6N plus causal attention (half of every s x s product; recompute excluded).
  double tflops_per_gpu = 0;
  double mfu = 0;  // against the GPU's dense peak for the precision
  double memory_gib_per_gpu = 0;
};

// Plan is what a user reads, edits and hands to `simulate` and `execute`: a model on a cluster,
// the batch, the parallel degrees, the Domino slicing and the memory options. It is written as
// YAML (docs/formats.md); loading resolves the model and cluster and checks every rule a user
// could get wrong.
struct Plan {
  std::string model_ref = "gpt3-13b";  // as written: catalog name or path; empty: inline `model`
  std::string cluster_ref = "dgx-h100:4";  // as written: NODE:COUNT[:GPUS] or path
  std::string stack_ref{kDefaultStack};    // as written: catalog name or path
  ModelSpec model;
  ClusterSpec cluster;
  StackSpec stack;
  Dtype precision = Dtype::kBf16;
  // training
  int seq_len = 1024;
  int micro_batch = 16;   // sequences per micro-batch (per DP rank)
  int global_batch = 16;  // sequences per iteration, over all DP ranks and micro-batches
  // parallel
  int tp = 32;
  // Context parallelism: each sequence cut into 2 * cp chunks, rank r of the CP group holding
  // chunks r and 2 * cp - 1 - r (causal load balance), its attention run as cp_communication()
  // says.
  int cp = 1;
  // How (CpComm). Unset: cp_communication()'s default.
  std::optional<CpComm> cp_comm;
  // a2a+p2p: the ranks of each a2a group (hierarchical_context_parallel_sizes[0]); 0: the
  // default of cp_a2a_ranks().
  int cp_a2a = 0;
  int pp = 1;
  int dp = 1;
  bool sequence_parallel = false;
  int virtual_stages = 1;
  PipelineSplit pipeline_split = PipelineSplit::kLayers;
  // The interleaved schedule's pipeline transfers overlapped with compute (Megatron-Core
  // overlap_p2p_comm): a stage posts each receive a step early, so no receive waits behind a
  // send, and a pass waits for its receive and for the stage's previous send in its direction.
  // Off: each step's sends and receives in one batched exchange, waited for (batch_p2p_comm).
  // Unset: the stack's StackSpec::overlap_p2p (p2p_overlapped()).
  std::optional<bool> overlap_p2p;
  Placement placement = Placement::kTpDpPp;
  // overlap
  int row_split = 1;
  int col_split = 1;
  OverlapScope scope = OverlapScope::kNone;
  OverlapMethod method = OverlapMethod::kDomino;
  int chunks = 0;  // pieces of each decomposed all-gather; 0: tp
  // Pieces of each decomposed row-parallel GEMM and its reduce-scatter; 0: the stack's
  // (StackSpec::decomposed_rs_chunks), else as many as `chunks`.
  int rs_chunks = 0;
  // Decomposed all-gather parts moved by the GPU's copy engines as peer copies over NVLink
  // (Transformer Engine's ring exchange, use_ce) instead of SM-driven NCCL kernels: they take no
  // SMs from the GEMMs beside them, but still their HBM traffic. Reduce-scatter parts (their sums
  // need SMs) and TP groups across nodes stay on NCCL. Unset: as the stack does
  // (StackSpec::decomposed_copy_engine).
  std::optional<bool> copy_engine;
  // memory
  Recompute recompute = Recompute::kNone;
  // With full recompute: how many layers of each model chunk it recomputes, its first ones
  // (Megatron's --recompute-method block --recompute-num-layers N); 0: every layer.
  int recompute_layers = 0;
  bool distributed_optimizer = false;
  // Fully sharded data parallelism (ZeRO-3, PyTorch FSDP, Megatron-FSDP's optim_grads_params):
  // parameters and gradients sharded over DP x CP as well as the optimizer state (so it needs
  // distributed_optimizer). Each layer's 16-bit parameters are all-gathered before its forward and
  // again before its backward, one layer ahead, and its gradients reduce-scattered after its
  // backward, every micro-batch.
  bool fsdp = false;
  // The type DP gradients are accumulated and reduced in (Megatron-Core's --grad-reduce-in-bf16,
  // NeMo's grad_sync_dtype, DeepSpeed's communication_data_type). Unset: as the stack does
  // (StackSpec::grad_reduce).
  std::optional<GradReduce> grad_reduce;
  // When DP gradient buckets are reduced (NeMo 2.0's Megatron-Core DDP hooks against Megatron-LM's
  // aligned grad_sync_func). Unset: as the stack does (StackSpec::grad_sync).
  std::optional<GradSync> grad_sync;
  // The type of the Adam state, sharded by the distributed optimizer: fp32 master weights, m and
  // v (12 bytes a parameter), or all three in bf16 (6 bytes): Apex's DistributedFusedAdam with
  // dtype bf16 (NeMo's optim.dtype), which keeps its copy of the parameters in that type too
  // (store_params, its default).
  Dtype optimizer_dtype = Dtype::kFp32;
  // The loss's kernels (NeMo's cross_entropy_loss_fusion / cross_entropy_fusion_impl,
  // Megatron-Core's --cross-entropy-loss-fusion). Unset: as the stack does
  // (StackSpec::cross_entropy).
  std::optional<CrossEntropy> cross_entropy;
  // The attention kernel (`training.attention`: what a run's launch settings choose, e.g. NeMo's
  // NVTE_FUSED_ATTN=0 for FlashAttention-2). Unset: the stack's (StackSpec::attention).
  std::optional<AttentionKernel> attention;
  // How an fp8 plan scales its tensors (`training.fp8_recipe`). Unset: delayed, Transformer
  // Engine's and Megatron-LM's default.
  std::optional<Fp8Recipe> fp8_recipe;
  // Dropout in the layers (`training.dropout`: a run whose hidden and attention dropout are not
  // zero, as Transformer Engine's modules default to 0.1). Unset: the stack's (StackSpec::dropout).
  std::optional<bool> dropout;
  // The hidden dropout after the MLP's second linear (`training.mlp_dropout`), where the plan has
  // dropout: false runs it after the attention's projection only, as Transformer Engine's
  // getting-started PyTorchTransformerLayer does. Unset: true.
  std::optional<bool> mlp_dropout;
  // The bias, dropout and residual add after the projection and the second MLP linear in one
  // kernel (`training.fused_bias_dropout_add`; Megatron-LM's --no-bias-dropout-fusion turns it
  // off, and a model built of Transformer Engine's Linear modules adds the bias in the GEMM and
  // runs PyTorch's dropout and add after it). Unset: the stack's.
  std::optional<bool> fused_bias_dropout_add;
  // Kernels launched from CUDA graphs (`training.cuda_graphs`; `simulate --cuda-graphs`).
  // Unset: the stack's (StackSpec::cuda_graphs).
  std::optional<bool> cuda_graphs;
  // Unfused attention's kernels over the scores (`training.softmax`: Megatron-LM's
  // --no-masked-softmax-fusion is scale-mask-softmax; a layer that passes no mask,
  // scale-softmax). Unset: the stack's fused_softmax (fused, else scale-mask-softmax).
  std::optional<SoftmaxKernels> softmax;
  // fp8: which kernels write the QKV, fc1 and fc2 inputs in fp8 (`training.fp8_cast`: a layer
  // built of te.LayerNorm and te.Linear is linear, one of te.TransformerLayer
  // norm-and-activation). Unset: the stack's.
  std::optional<Fp8Cast> fp8_cast;

  std::optional<PlanFigures> predicted;  // read back from a report; never trusted on input
  std::optional<PlanFigures> measured;
  // How the `domino plan` search that chose this plan stopped before it covered its space, read
  // from a plan file's `search:` block: "by SIGINT" or "by SIGTERM" (`stopped_by`, the plan
  // marked partial), or "at its 60 s timeout" (`stopped_at_timeout_s`). Empty for a whole search
  // or a plan not searched. For people (`domino export` says so); PlanToYaml does not write it.
  std::string search_stopped;

  int micro_batches() const { return global_batch / (micro_batch * dp); }
  // How many layers of a model chunk of `chunk_layers` recompute their forward in the backward:
  // every one under full recompute, or its first recompute_layers; none otherwise.
  int recomputed_layers(int chunk_layers) const {
    if (recompute != Recompute::kFull) return 0;
    return recompute_layers > 0 ? std::min(recompute_layers, chunk_layers) : chunk_layers;
  }
  // Whether layer `layer` of a model chunk is one of them (its first ones recompute).
  bool recomputes_layer(int layer) const { return layer < recomputed_layers(layer + 1); }
  // The loss's and attention's kernels and the gradients' type: the plan's word, else the
  // stack's. A stack's fused attention takes heads up to kMaxFusedHeadDim wide; wider ones run
  // unfused, as Transformer Engine's backend selection falls back to UnfusedDotProductAttention
  // (FlashAttention 2 and cuDNN's kernels: head_dim_qk <= 256, TE
  // pytorch/attention/dot_product_attention/utils.py get_attention_backend).
  static constexpr int kMaxFusedHeadDim = 256;
  CrossEntropy loss_kernels() const { return cross_entropy.value_or(stack.cross_entropy); }
  // A model's soft-capped attention runs the stack's capped_attention where its own kernel is
  // fused, but for FlexAttention under dropout: Megatron-Bridge's Gemma2FlexDotProductAttention
  // falls back to its unfused attention when dropout runs.
  AttentionKernel attention_kernel() const {
    if (attention) return *attention;
    if (model.head_width() > kMaxFusedHeadDim) return AttentionKernel::kUnfused;
    if (model.attention_softcap > 0 && stack.attention != AttentionKernel::kUnfused)
      return stack.capped_attention == AttentionKernel::kFlex && applies_dropout()
                 ? AttentionKernel::kUnfused
                 : stack.capped_attention;
    return stack.attention;
  }
  // Whether layer `layer` (from 0) is priced with the model's sliding window: the window covers
  // it, the stack's kernels run windows (StackSpec::sliding_window) and the plan's attention is
  // fused, and context parallelism, if any, is not the p2p ring (which Transformer Engine runs
  // over full causal attention only).
  bool WindowedLayer(int layer) const { return model.window.Covers(layer) && RunsWindow(); }
  bool prices_window() const {
    return model.window.CoveredLayers(model.layers) > 0 && RunsWindow();
  }
  // The conditions of WindowedLayer besides the window's own layers.
  bool RunsWindow() const {
    return WindowKernels() && (cp == 1 || cp_communication() != CpComm::kP2p);
  }
  // Whether the stack's fused kernels run windows (RunsWindow but for the context parallelism).
  bool WindowKernels() const {
    return stack.sliding_window && attention_kernel() != AttentionKernel::kUnfused;
  }
  // Whether they would run a window of the model's.
  bool StackRunsWindow() const {
    return WindowKernels() && model.window.CoveredLayers(model.layers) > 0;
  }
  // The comm type for context parallelism over a window, which Transformer Engine runs over no
  // ring: a2a where cp divides each TP rank's heads, else all_gather.
  CpComm WindowCpComm() const { return cp_divides_heads() ? CpComm::kA2a : CpComm::kAllGather; }
  // Whether `ranks` divides each tensor-parallel rank's query heads and key/value heads, as an
  // a2a's head scatter over that many ranks needs; cp_divides_heads over the CP group.
  bool divides_heads(int ranks) const {
    return tp > 0 && ranks > 0 && (model.heads / tp) % ranks == 0 &&
           (model.kv_heads / tp) % ranks == 0;
  }
  bool cp_divides_heads() const { return divides_heads(cp); }
  // The ranks an a2a scatters the heads over: cp under a2a, the a2a groups' under a2a+p2p (the
  // plan's cp_a2a, else DefaultCpA2a()), 1 otherwise.
  int cp_a2a_ranks() const {
    const CpComm comm = cp_communication();
    if (comm == CpComm::kA2a) return cp;
    if (comm != CpComm::kA2aP2p) return 1;
    return cp_a2a > 0 ? cp_a2a : DefaultCpA2a();
  }
  // How context parallelism communicates, as `simulate` and `execute` print it: "all_gather",
  // "a2a+p2p, a2a groups of 8".
  std::string CpCommText() const;
  // a2a+p2p's default a2a group: the most ranks, dividing cp and each TP rank's heads and leaving
  // a ring of at least 2, that fit in a node beside their TP ranks (the a2a on NVLink, the ring
  // across nodes), else that number anywhere; 0 when none does.
  int DefaultCpA2a() const;
  // The plan's cp_comm, else: p2p, or where the stack's kernels run a window of the model's and
  // it runs more than the ring (StackSpec::te_cp_comm_types), a2a when cp divides each TP
  // rank's heads and all_gather when not (Transformer Engine refuses a window over its ring).
  CpComm cp_communication() const {
    if (cp_comm) return *cp_comm;
    if (!stack.te_cp_comm_types || !StackRunsWindow()) return CpComm::kP2p;
    return WindowCpComm();
  }
  Fp8Recipe fp8_scaling() const { return fp8_recipe.value_or(Fp8Recipe::kDelayed); }
  bool applies_dropout() const { return dropout.value_or(stack.dropout); }
  // Whether the residual branch after the attention (false: after the MLP) runs a dropout.
  bool branch_dropout(bool attention) const {
    return applies_dropout() && (attention || mlp_dropout.value_or(true));
  }
  bool launches_from_graphs() const { return cuda_graphs.value_or(stack.cuda_graphs); }
  bool fuses_bias_dropout_add() const {
    return fused_bias_dropout_add.value_or(stack.fused_bias_dropout_add);
  }
  SoftmaxKernels softmax_kernels() const {
    return softmax.value_or(stack.fused_softmax ? SoftmaxKernels::kFused
                                                : SoftmaxKernels::kScaleMaskSoftmax);
  }
  Fp8Cast fp8_casts() const { return fp8_cast.value_or(stack.fp8_cast); }
  GradReduce gradient_reduce() const { return grad_reduce.value_or(stack.grad_reduce); }
  GradSync gradient_sync() const { return grad_sync.value_or(stack.grad_sync); }
  // Tokens of each sequence one rank holds.
  int local_seq_len() const { return seq_len / cp; }
  // Ranks that hold the same weights: Megatron reduces gradients, and shards the distributed
  // optimizer, over DP x CP.
  int dp_cp() const { return dp * cp; }
  // Whether the pipeline split counts the embedding, or the LM head and loss, as a layer.
  bool split_counts_embedding() const {
    return pipeline_split == PipelineSplit::kEmbedding || pipeline_split == PipelineSplit::kEnds;
  }
  bool split_counts_loss() const {
    return pipeline_split == PipelineSplit::kLoss || pipeline_split == PipelineSplit::kEnds;
  }
  // The layers the pipeline split divides: the model's, plus the ends it counts.
  int64_t split_units() const {
    return static_cast<int64_t>(model.layers) + split_counts_embedding() + split_counts_loss();
  }
  // Pieces of each decomposed all-gather (and of the GEMM it feeds): 1 under Domino's method
  // (nothing decomposed).
  int decomposed_chunks() const {
    if (method == OverlapMethod::kDomino) return 1;
    return chunks > 0 ? chunks : tp;
  }
  // Pieces of each decomposed row-parallel GEMM and its reduce-scatter: the plan's, else the
  // stack's, else as many as the all-gather's.
  int decomposed_rs_chunks() const {
    if (method == OverlapMethod::kDomino) return 1;
    if (rs_chunks > 0) return rs_chunks;
    return stack.decomposed_rs_chunks > 0 ? stack.decomposed_rs_chunks : decomposed_chunks();
  }
  // Whether the interleaved pipeline's transfers overlap compute: the plan's word, else the
  // stack's; never without interleaving.
  bool p2p_overlapped() const {
    return virtual_stages > 1 && overlap_p2p.value_or(stack.overlap_p2p);
  }
  // Whether decomposed all-gather parts go on copy engines: the plan's word, else the stack's.
  bool copy_engine_parts() const {
    return method != OverlapMethod::kDomino && copy_engine.value_or(stack.decomposed_copy_engine);
  }
  // Megatron-LM's TP: no Domino slicing and no decomposed overlap.
  bool is_baseline() const {
    return row_split == 1 && col_split == 1 && scope == OverlapScope::kNone &&
           method == OverlapMethod::kDomino;
  }
};

inline constexpr int kMaxSplit = 16;

// The bounds of a plan's integer settings, the same whether they come from a plan file, a flag
// or code: a value outside them is refused before any size is derived from it (so no product of
// them overflows 64 bits).
struct PlanIntBound {
  std::string_view key;  // "parallel.virtual_stages"
  int64_t min = 1;
  int64_t max = 1;
};
inline constexpr PlanIntBound kSeqLenBound{"training.seq_len", 1, 1 << 24};
inline constexpr PlanIntBound kMicroBatchBound{"training.micro_batch", 1, 1 << 20};
inline constexpr PlanIntBound kGlobalBatchBound{"training.global_batch", 1, 1 << 24};
inline constexpr PlanIntBound kTpBound{"parallel.tp", 1, 1 << 20};
inline constexpr PlanIntBound kCpBound{"parallel.cp", 1, 128};
inline constexpr PlanIntBound kCpA2aBound{"parallel.cp_a2a", 1, 64};
inline constexpr PlanIntBound kPpBound{"parallel.pp", 1, 1 << 20};
inline constexpr PlanIntBound kDpBound{"parallel.dp", 1, 1 << 20};
inline constexpr PlanIntBound kVirtualStagesBound{"parallel.virtual_stages", 1, 1024};
inline constexpr PlanIntBound kRowSplitBound{"overlap.row_split", 1, kMaxSplit};
inline constexpr PlanIntBound kColSplitBound{"overlap.col_split", 1, kMaxSplit};
inline constexpr PlanIntBound kChunksBound{"overlap.chunks", 1, kMaxSplit};
inline constexpr PlanIntBound kRsChunksBound{"overlap.rs_chunks", 1, kMaxSplit};
inline constexpr PlanIntBound kRecomputeLayersBound{"memory.recompute_layers", 0, 1 << 20};

// The rule a value breaks, worded as a plan file's loader words it ("must be a positive integer,
// got 0", "must be between 1 and 1024, got 4096"), or nullopt when `value` is within `bound`.
std::optional<std::string> CheckBound(const PlanIntBound& bound, int64_t value);

// The most work one plan may ask of the simulator or the executor: micro-batches per iteration x
// layers x row slices x column chunks (each such layer pass is some 30 ops of the schedule). A
// plan above it would take minutes and gigabytes to lower; it is refused instead.
inline constexpr int64_t kMaxLayerPasses = int64_t{1} << 21;

// Checks the rules that tie a plan to its model and cluster: tp*cp*pp*dp = the cluster's GPUs;
// tp divides heads, kv_heads and ffn; with cp > 1, 2*cp divides seq_len (two chunks per rank);
// row_split divides micro_batch; col_split divides hidden; pp <= layers (uneven stages allowed
// without interleaving and a pipeline split of layers only); with virtual stages, or a split that
// counts an end, pp*virtual_stages divides the split's units (Plan::split_units) with at least one
// layer left in every chunk; with virtual stages the micro-batches are a multiple of pp;
// micro_batch*dp divides global_batch; splits between 1 and 16; inter-layer scope needs row_split
// >= 2; sequence parallelism needs tp dividing seq_len / cp. Decomposed overlap (method decomposed
// or both) needs tp >= 2 and sequence parallelism; decomposed alone runs without Domino's splits,
// both with row_split >= 2 and col_split 1; its chunks (tp by default) between 1 and 16 and
// dividing a row slice's tokens (of the local sequence); copy_engine only with it. First of all,
// every integer setting within its PlanIntBound, the GPU able to run the precision (a peak above 0)
// and the work within kMaxLayerPasses. `key_of` maps each failure to the YAML key it concerns
// ("parallel.tp").
struct PlanRuleFailure {
  std::string key;   // "parallel.tp"
  std::string rule;  // "tp*pp*dp (16) must equal the cluster's 32 GPUs"
};
std::optional<PlanRuleFailure> CheckPlanRules(const Plan& plan);
// The part of CheckPlanRules no degree or slicing changes: the GPU able to run the precision, an
// fp8 recipe or cast only with fp8, a softmax only for unfused attention. A search checks it
// once, before its candidates.
std::optional<PlanRuleFailure> CheckPlanWideRules(const Plan& plan);
// The part of CheckPlanRules that concerns how pp * virtual_stages chunks cut the model (the
// pipeline_split's divisibility and a layer left in every chunk), for a search's candidates.
std::optional<PlanRuleFailure> CheckPipelineSplit(const Plan& plan);
// The part of CheckPlanRules on parallel.cp_comm and cp_a2a (the stack runs the comm type, the
// heads split, no ring over a window the stack's kernels run), for a search's candidates.
std::optional<PlanRuleFailure> CheckCpComm(const Plan& plan);

// Layers of each virtual pipeline stage (pp * virtual_stages of them; virtual stage c * pp + s is
// chunk c of stage s). A split that counts an end (Plan::pipeline_split) gives every chunk
// split_units / (pp * virtual_stages) units, the first chunk one layer fewer for the embedding
// and the last one fewer for the LM head and loss, as Megatron-Core's get_num_layers_to_build.
// Counting layers only: equal chunks when interleaved; otherwise layers / pp each, the remainder
// going to the middle stages first, since the first stage also embeds and the last runs the LM
// head (126 layers on 16 stages: 7, 8 x 14, 7).
std::vector<int> ChunkLayers(const Plan& plan);

// How many layers of each virtual pipeline stage (as ChunkLayers) are priced with the model's
// sliding window (Plan::WindowedLayer): the stages take the layers in order.
std::vector<int> ChunkWindowedLayers(const Plan& plan);

// Parses plan YAML; resolves `model` and `cluster` through the catalogs; applies CheckPlanRules,
// reporting the failing key's file:line:column. Missing sections take the defaults above, with
// training.seq_len defaulting to the model's.
Result<Plan> ParsePlan(std::string_view text, std::string_view file);
Result<Plan> LoadPlan(const std::string& path);
// The same for a plan inside another YAML file (a validation row's `plan:`): its keys' lines and
// columns are the ones in `file`, their names under `key_path` ("rows[3].plan").
Result<Plan> ParsePlanNode(const YAML::Node& node, std::string_view file,
                           std::string_view key_path = "");

// Resolves model_ref (unless empty: an inline model), cluster_ref and stack_ref and checks the
// rules, for plans built in code or from flags. Without `check_rules`, only resolves (for a
// search's starting point, which may break rules the search varies).
Status ResolvePlan(Plan& plan, bool check_rules = true);

// Writes the plan as YAML, with its predicted/measured blocks when present. Deterministic: the
// same plan gives the same bytes. Catalog names are written bare; a model, cluster, node or stack
// file as an absolute path (a relative one taken from the working directory), double-quoted, so
// the plan loads from any directory whatever characters the name holds. `comment` (may be empty)
// becomes leading `#` lines.
std::string PlanToYaml(const Plan& plan, std::string_view comment = "");

}  // namespace domino

#endif  // DOMINO_PLANNER_PLAN_H_
