#ifndef DOMINO_PLANNER_STACK_H_
#define DOMINO_PLANNER_STACK_H_

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "models/base/embedded_file.h"
#include "models/base/result.h"

namespace domino {

// The attention core's implementation:
// - flash: the GPU's fused flash kernel as the stack runs it, keeping the scores on chip
//   (Transformer Engine's cuDNN fused attention on Hopper, FlashAttention-2 on Ampere);
// - flash2: FlashAttention-2's kernels (the flash-attn package, what Transformer Engine runs when
//   NVTE_FUSED_ATTN=0 turns cuDNN's off, and PyTorch's SDPA flash backend), priced with the GPU's
//   flash2 constants; on a GPU without them, flash's (Ampere, where flash is FlashAttention-2);
// - unfused: batched GEMMs around a softmax with the s x s scores through HBM;
// - flex: PyTorch's FlexAttention, a Triton flash kernel compiled around a score modification
//   (Megatron-Bridge's Gemma 2 attention, which passes its soft cap as one), priced with the
//   GPU's flash2 constants: no measurement of its own sets it apart from FlashAttention-2 yet
//   (`tools/torch-kernels` times it beside cuDNN's and FlashAttention-2's).
enum class AttentionKernel { kFlash, kFlash2, kUnfused, kFlex };
// "flash", "flash2", "unfused", "flex"
std::string_view AttentionKernelName(AttentionKernel kernel);
std::span<const std::pair<std::string_view, AttentionKernel>> AttentionKernelNames();

// The kernels between unfused attention's two products, over the s x s scores (flash attention
// keeps them on chip):
// - fused: scale, causal mask and softmax in one kernel, its backward one too (Megatron's
//   FusedScaleMaskSoftmax): a read and a write of the scores each way, and P read backward;
// - scale-mask-softmax: the three as kernels of their own (Megatron's --no-masked-softmax-fusion):
//   a read and a write each forward; backward, the softmax's and the scale's;
// - scale-softmax: no mask at all, the scale and the softmax (a PyTorch attention called with
//   attention_mask None, as the attention of Transformer Engine's getting-started script runs):
//   every query attends to every key, which the unfused products compute anyway.
enum class SoftmaxKernels { kFused, kScaleMaskSoftmax, kScaleSoftmax };
// "fused", "scale-mask-softmax", "scale-softmax"
std::string_view SoftmaxKernelsName(SoftmaxKernels kernels);
std::span<const std::pair<std::string_view, SoftmaxKernels>> SoftmaxKernelsNames();

// Where fp8 training casts the QKV, fc1 and fc2 inputs (the forward GEMMs a norm or the MLP's
// activation feeds; the others' inputs are always cast by their linear):
// - norm-and-activation: the norm writes the fp8 input of QKV and fc1 and the activation that of
//   fc2 (Transformer Engine's LayerNormLinear and LayerNormMLP: te.TransformerLayer);
// - norm: the norm so, while the activation writes 16 bits that fc2's linear casts (Megatron-Core:
//   TELayerNormColumnParallelLinear for fc1, its own bias-activation kernel, TERowParallelLinear
//   for fc2);
// - linear: every linear casts its 16-bit input (te.LayerNorm, or PyTorch's activation, before a
//   te.Linear).
enum class Fp8Cast { kNormAndActivation, kNorm, kLinear };
std::string_view Fp8CastName(Fp8Cast cast);  // "norm-and-activation", "norm", "linear"
std::span<const std::pair<std::string_view, Fp8Cast>> Fp8CastNames();

// The element type DP gradients are accumulated and reduced in: always fp32; the 16-bit
// parameters' type (DeepSpeed's default communication_data_type); or that type only when it is
// fp16, fp32 with bf16 or fp8 runs (Megatron-LM without --accumulate-allreduce-grads-in-fp32,
// which bf16 forces on).
enum class GradReduce { kFp32, kParam, kFp16Param };

// When the last micro-batch's weight gradients are reduced over DP, with overlap_grad_reduce (a
// bucket is a layer's gradients, or the embedding's or the head's):
// - layer: each bucket as soon as its layer's backward is done, on every stage and chunk;
// - megatron: Megatron-Core's DDP hooks (NeMo 2.0, which sets no grad_sync_func): the first
//   pipeline stage's first chunk so, and every other stage and chunk in one bucket once its
//   backward is done (DistributedDataParallel turns bucketing off on pipeline ranks after the
//   first and for model chunks after the first);
// - megatron-aligned: Megatron-Core's schedules given a grad_sync_func (Megatron-LM's
//   --align-grad-reduce, its default; Megatron-Bridge's align_grad_reduce; NeMo 1's distributed
//   Adam): without a pipeline, and on the first stage of one without interleaving, as layer; on
//   the other stages after the stage's last backward; interleaved, every chunk's after its last
//   backward, and on stage s only once s more backward steps have run (launched at the same time
//   across the pipeline), or after the stage's last.
enum class GradSync { kLayer, kMegatron, kMegatronAligned };

// The loss's kernels over the logits, per element (e: the 16-bit element's bytes):
// - vocab-parallel: Megatron's vocab-parallel cross-entropy casts the logits to fp32 and makes a
//   pass per step (max, subtract, exp, sum, divide), then in backward the scale by the loss
//   gradient and the cast back: 4 + e + 32 bytes forward, 4 + e + 8 backward;
// - megatron-fused: Megatron-Core's --cross-entropy-loss-fusion (fusions/fused_cross_entropy.py),
//   the same steps in three jit-fused kernels (the cast with the max; subtract, exp and sum in
//   place; the divide in place) and one backward: e + 20 forward, 4 + e backward;
// - te: Transformer Engine's Triton kernels (pytorch/triton/cross_entropy.py, 2025 releases,
//   NeMo's cross_entropy_fusion_impl te): the logits read for the statistics, read again with
//   the gradient written in their place, the gradient scaled in place backward: 3e forward, 2e;
// - fused: one read forward, one read and write backward (this project's executor): e and 2e.
enum class CrossEntropy { kVocabParallel, kMegatronFused, kTe, kFused };
// How rotary position embeddings run on Q and K (models with `positions: rotary`), per element
// of Q and K:
// - fused: one kernel each way that reads the tensor and writes it rotated (Transformer Engine's
//   fused_apply_rotary_pos_emb: Megatron-Core's --apply-rope-fusion, `apply_rope_fusion: true`
//   in the DGX Cloud recipes; this project's executor, exec/cuda_layers.cu's RopeKernel): 2 passes
//   forward, 2 backward;
// - unfused: PyTorch's t * cos + rotate_half(t) * sin (Megatron's apply_rotary_pos_emb without
//   the fusion): the multiplies, rotate_half's neg and cat, the add, and their autograd: 10
//   passes forward, 10 backward;
// - none: not run (a stack whose attention takes no positions).
enum class RopeKernel { kFused, kUnfused, kNone };
// The copies a framework makes around the attention core, of Q, K and V forward and of their
// gradients backward (a, g: the query and key-value heads; a grouped-query model has g < a):
// - none: the attention reads Q, K and V where the QKV GEMM wrote them and writes their
//   gradients in place (this project's executor);
// - megatron: Q, K and V are views of the QKV GEMM's output split per query group (Megatron-LM's
//   split_tensor_along_last_dim, Megatron-Core's get_query_key_value_tensors with Transformer
//   Engine's SplitAlongDim), and backward the split concatenates dQ, dK and dV (a read and a
//   write of all of QKV) unless they are views of one buffer. A grouped-query model's query is
//   reshaped from its group's columns into heads, a copy. Transformer Engine's fused attention
//   (flash, flash2) makes a rotary model's V contiguous (beside the fresh Q and K the rotary
//   kernel writes, a strided V matches none of its layouts; get_qkv_layout), and its backward
//   writes dQ, dK and dV into one buffer only for multi-head attention with learned positions
//   (sbh3d), which copies nothing. Unfused attention reads the views with batched GEMMs, copies
//   its context out of their [b, heads, s, d] layout (permute(...).contiguous()), and always
//   concatenates backward;
// - permute: DeepSpeed-Domino's sliced attention permutes all of QKV to [b, heads, s, 3 d] and
//   makes it contiguous, and the context back (two copies forward); backward, torch.split's
//   concatenation and the copy that reshapes the permuted gradient for the QKV GEMM (with one
//   row slice, Megatron-LM's own layer, whose flash path copies Q, K, V and the context forward
//   and concatenates backward).
enum class AttentionCopies { kNone, kMegatron, kPermute };
std::string_view AttentionCopiesName(AttentionCopies copies);  // "none", "megatron", "permute"
// How fp8 training scales each tensor before it casts it (Transformer Engine's recipes):
// - delayed: from the amax history of earlier steps (DelayedScaling, Megatron-LM's default
//   --fp8-recipe delayed, NeMo's fp8_hybrid): the cast finds the tensor's amax as it goes, and a
//   norm or activation before a GEMM writes its output in fp8 itself;
// - current: from the tensor's own amax (Float8CurrentScaling, Megatron-LM's --fp8-recipe
//   tensorwise, Megatron-Bridge's FP8-CS): a pass that finds it comes first, fused into a norm or
//   activation before a GEMM, a kernel of its own otherwise.
enum class Fp8Recipe { kDelayed, kCurrent };
std::string_view Fp8RecipeName(Fp8Recipe recipe);  // "delayed", "current"
std::span<const std::pair<std::string_view, Fp8Recipe>> Fp8RecipeNames();
std::string_view RopeKernelName(RopeKernel rope);      // "fused", "unfused", "none"
std::string_view CrossEntropyName(CrossEntropy loss);  // "vocab-parallel", ..., "fused"
std::span<const std::pair<std::string_view, CrossEntropy>> CrossEntropyNames();
std::string_view GradReduceName(GradReduce reduce);  // "fp32", "param", "fp16-param"
std::span<const std::pair<std::string_view, GradReduce>> GradReduceNames();
std::string_view GradSyncName(GradSync sync);  // "layer", "megatron", "megatron-aligned"
std::span<const std::pair<std::string_view, GradSync>> GradSyncNames();

// StackSpec is the software that runs a plan (planner/catalog/stacks/NAME.yaml): which kernels are
// fused and how kernels are launched. The same plan runs faster on Megatron-Core with flash
// attention than on 2021 Megatron; lowering reads the fusions to emit the elementwise passes that
// really run, and the cost model reads the attention kernel and the launch mode.
struct StackSpec {
  std::string name;
  AttentionKernel attention = AttentionKernel::kFlash;
  // Unfused attention only: scale, causal mask and softmax in one kernel (one read and one write
  // of the scores) rather than three (Plan::softmax may say otherwise).
  bool fused_softmax = true;
  // Unfused attention only: the scores, probabilities and their gradients go through HBM in fp32,
  // with 16-bit copies of P and dS for the GEMMs that read them, and the backward recomputes P
  // (QK^T and the softmax again) rather than reading the forward's (this project's executor,
  // exec/cuda_attention.cu), rather than in 16-bit kept from the forward.
  bool fp32_scores = false;
  // Bias add and GeLU in one pass over the MLP activation, rather than two.
  bool fused_bias_gelu = true;
  // Squared ReLU in one kernel each way, rather than PyTorch's relu and pow forward and their
  // autograd backward (Megatron-Core's squared_relu, which its bias-activation fusion does not
  // take).
  bool fused_squared_relu = false;
  // A GeGLU MLP (Activation::kGeglu) in one kernel each way, as SwiGLU runs (read [gate | up],
  // write; backward read them and the gradient, write both gradients), rather than Megatron-Core's
  // unfused gated linear unit (Lowering::UnfusedGegluPasses), whose bias-activation fusion takes
  // no GeLU-tanh gate.
  bool fused_geglu = false;
  // A model's soft cap on the logits (ModelSpec::logit_softcap) inside the loss's own kernels,
  // which take the tanh of each logit as they read it (forward) and scale its gradient by the
  // tanh's derivative as they write it (backward), rather than as PyTorch kernels of its own
  // through HBM before the loss and autograd's after it (Megatron-Bridge's logit_softcapping).
  bool fused_logit_softcap = false;
  // The kernel that runs a model's soft-capped attention (ModelSpec::attention_softcap) where
  // the stack's own `attention` is a fused kernel that takes no cap (Transformer Engine's take
  // none): Megatron-Bridge's Gemma 2 attention runs FlexAttention with the cap as its score
  // modification, and its unfused attention where dropout runs (Plan::attention_kernel).
  AttentionKernel capped_attention = AttentionKernel::kUnfused;
  // Unfused attention's soft cap inside the softmax's own kernels, which take the tanh of each
  // score as they read it and scale its gradient by the tanh's derivative (this project's
  // executor, exec/cuda_attention.cu), rather than PyTorch's three kernels over the scores
  // through HBM before the softmax and autograd's after it (Megatron-Bridge's
  // logit_softcapping in its unfused Gemma 2 attention).
  bool fused_attention_softcap = false;
  // Bias add, dropout and residual add in one pass after the attention projection and the second
  // MLP linear, rather than three.
  bool fused_bias_dropout_add = true;
  // Hidden and attention dropout: a mask written in forward and read in backward.
  bool dropout = false;
  // Kernels launched from CUDA graphs (GpuSpec::graph_launch_us instead of kernel_launch_us).
  bool cuda_graphs = false;
  // DP gradient buckets reduced while the last micro-batch's backward runs (Megatron-Core
  // --overlap-grad-reduce), rather than after the pipeline flush.
  bool overlap_grad_reduce = false;
  // With the distributed optimizer, the updated parameters are all-gathered under the next
  // iteration's first forward (Megatron-Core --overlap-param-gather) rather than after the step.
  bool overlap_param_gather = false;
  // How the loss runs over the logits (Plan::cross_entropy may say otherwise).
  CrossEntropy cross_entropy = CrossEntropy::kVocabParallel;
  // Its software runs decomposed collective-matmul overlap (Plan::method decomposed and both):
  // Transformer Engine's userbuffers under Megatron-Core, this project's executor. DeepSpeed-Domino
  // and 2021's Megatron-LM run none. A plan may still price it on any stack, as a what-if; `domino
  // plan` suggests it, where its default search left it out, only on a stack that runs it.
  bool decomposed_overlap = false;
  // Decomposed overlap's all-gather parts go on copy engines unless a plan says otherwise
  // (Plan::copy_engine).
  bool decomposed_copy_engine = false;
  // Pieces of a decomposed row-parallel GEMM and its reduce-scatter unless a plan says otherwise
  // (Plan::rs_chunks); 0: as many as the all-gather's (Plan::chunks). Transformer Engine pipelines
  // its reduce-scatter in 4 whatever tp is, and its all-gather ring exchange in tp.
  int decomposed_rs_chunks = 0;
  GradReduce grad_reduce = GradReduce::kFp32;
  // When DP gradient buckets are reduced with overlap_grad_reduce (Plan::grad_sync may say
  // otherwise).
  GradSync grad_sync = GradSync::kLayer;
  // Context parallelism merges each ring step's partial attention output (backward: its dQ and
  // dKV) into the running result, and copies the half blocks a causal step reads, in elementwise
  // kernels of their own (Transformer Engine's p2p CP) rather than inside the attention kernels.
  bool cp_merge_kernels = false;
  // Its fused attention kernels run a model's sliding window (ModelSpec::window), skipping the key
  // blocks outside it, so the window's layers are priced as such (Plan::WindowedLayer). Without
  // it, a window is priced, as the stack would run it, as full causal attention.
  bool sliding_window = false;
  // Its context parallelism runs Transformer Engine's four comm types (Plan::cp_comm, CpComm:
  // p2p, all_gather, a2a and a2a+p2p), not only the p2p ring.
  bool te_cp_comm_types = false;
  // The embedding's weight gradient as PyTorch's F.embedding leaves it: backward fills a dense
  // gradient of the rank's whole vocabulary part with zeros and adds the micro-batch's rows into
  // it, and the framework's gradient hook then adds that table into the accumulated gradient
  // (main_grad.add_: the table read in 16 bits, the accumulated gradient read and written in its
  // type), every micro-batch. False: the rows are added into the accumulated gradient in place
  // (this project's executor).
  bool dense_embedding_grad = false;
  // Rotary position embeddings' kernels (models with rotary positions).
  RopeKernel rope = RopeKernel::kFused;
  // The copies around the attention core (AttentionCopies).
  AttentionCopies attention_copies = AttentionCopies::kNone;
  // The backward's input-gradient TP collective of a column-parallel linear (QKV, fc1) runs
  // under that linear's weight-gradient GEMM (Megatron-LM's async all-reduce since September
  // 2021, and Megatron-Core's with sequence parallelism), rather than being launched after it.
  bool wgrad_overlaps_tp_comm = true;
  // The same for the MLP's first linear of a row-split layer (row_split >= 2), which also needs
  // wgrad_overlaps_tp_comm: false in DeepSpeed-Domino, whose sliced layer all-reduces fc1's input
  // gradient in an autograd function of its own after torch.matmul's backward computed both
  // gradients (its QKV, Megatron-LM's ColumnParallelLinear, launches it before the weight
  // gradient; without slices Megatron-LM's own layer runs).
  bool sliced_fc1_wgrad_overlaps_tp_comm = true;
  // An interleaved pipeline's transfers overlapped with compute unless a plan says otherwise
  // (Plan::overlap_p2p; Megatron-Core's overlap_p2p_comm).
  bool overlap_p2p = false;
  // The weight-gradient GEMM adds into the accumulated gradient itself (Megatron-Core's
  // gradient_accumulation_fusion: cuBLAS with beta 1 into main_grad), rather than writing a fresh
  // gradient that a pass of its own adds in (PyTorch's AccumulateGrad into param.grad, or
  // Megatron-LM 2021's main_grad.add_ hook).
  bool fused_wgrad_accumulation = true;
  // The same for the MLP's weights of a row-split layer (row_split >= 2), whatever
  // fused_wgrad_accumulation says for the others: false in DeepSpeed-Domino, whose sliced layer
  // multiplies by its MLP weights with torch.matmul, so that autograd sums the slices' gradients of
  // each weight and its local DDP's hook adds the sum into main_grad (the parameters' type with
  // fp16, fp32 with bf16) every micro-batch; its QKV and projection are Megatron-LM's linears,
  // which add into main_grad in the GEMM.
  bool sliced_mlp_fused_wgrad_accumulation = true;
  // fp8 with delayed scaling: after a chunk's layers run forward, and after their backward, the
  // amaxes of every tensor they scaled are reduced (maximum) over the stage's GPUs, tp x cp x dp,
  // in an all-reduce the compute stream waits for, and one kernel updates the amax histories and
  // scales (Transformer Engine's reduce_and_update_fp8_tensors at each fp8_autocast exit and at
  // the end of the first fp8 module's backward; Megatron-Core's fp8 group is its amax reduction
  // group); with current scaling and sequence parallelism, a tensor scaled before its TP
  // all-gather takes the maximum of its amax over TP first (Transformer Engine 2.x's amax
  // reduction group of such quantizers). False: each GPU keeps its own.
  bool fp8_amax_reduction = false;
  // fp8: which kernels write the QKV, fc1 and fc2 inputs in fp8 (Plan::fp8_cast may say
  // otherwise).
  Fp8Cast fp8_cast = Fp8Cast::kNormAndActivation;
};

// The stack a plan runs on when it names none.
inline constexpr std::string_view kDefaultStack = "megatron-core";

// Parses stack YAML; `file` names the source in messages ("FILE:LINE:COLUMN: KEY: RULE"). Every
// key is required except `dropout`, `cuda_graphs`, `overlap_grad_reduce`, `overlap_param_gather`,
// `decomposed_overlap`, `decomposed_copy_engine`, `decomposed_rs_chunks` (0), `cp_merge_kernels`,
// `sliding_window`, `te_cp_comm_types`, `dense_embedding_grad`, `fused_squared_relu`,
// `fused_geglu`, `fused_logit_softcap`, `fused_attention_softcap`, `fp32_scores`,
// `capped_attention` (unfused), `overlap_p2p` and `fp8_amax_reduction` (false), `cross_entropy`
// (vocab-parallel), `grad_reduce` (fp32), `grad_sync` (layer), `rope` (fused), `attention_copies`
// (none), `wgrad_overlaps_tp_comm`, `sliced_fc1_wgrad_overlaps_tp_comm`,
// `fused_wgrad_accumulation`, `sliced_mlp_fused_wgrad_accumulation` (true), and `fp8_cast`
// (norm-and-activation).
Result<StackSpec> ParseStack(std::string_view text, std::string_view file);
// Loads a catalog stack by name or a YAML file by path; an unknown name lists the catalog.
Result<StackSpec> LoadStack(std::string_view name_or_path);
std::span<const EmbeddedFile> StackCatalog();

}  // namespace domino

#endif  // DOMINO_PLANNER_STACK_H_
