#ifndef DOMINO_PLANNER_SCHEDULE_H_
#define DOMINO_PLANNER_SCHEDULE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace domino {

// Streams of one rank, as CUDA streams with CUDA_DEVICE_MAX_CONNECTIONS=1: each runs its ops in
// issue order, one at a time. cp-comm carries ring attention's KV transfers (context parallelism).
// pp-comm carries a stage's pipeline transfers; with Plan::p2p_overlapped() its receives go on
// pp-recv, as posted ahead of the sends.
enum class Stream : uint8_t { kCompute, kTpComm, kDpComm, kPpComm, kCpComm, kPpRecv };
inline constexpr int kStreamCount = 6;
// "compute", "tp-comm", "dp-comm", "pp-comm", "cp-comm", "pp-recv"
std::string_view StreamName(Stream stream);

enum class OpKind : uint8_t {
  kGemm,         // C[m,n] = A[m,k] B[k,n]
  kAttention,    // attention core of `sequences` x `seq_len` tokens
  kElementwise,  // memory-bound: `bytes` read plus written
  kCollective,   // `bytes` per rank over a group
  kSendRecv,     // point-to-point: a pipeline send moves `bytes` (its recv waits for it); a CP
                 // ring step sends `bytes` to the next CP rank while receiving as many
  kOptimizer,    // memory-bound optimizer step: `bytes` through HBM
  // One micro-batch's forward or backward pass through one model chunk: the ops of the
  // Iteration's pass schedule `pass` (planner/iteration.h), run as one op on the compute stream.
  // `layer_begin`/`layer_end` select a piece of it (the layers whose gradients a DP bucket waits
  // for); both -1 for the whole pass.
  kPass,
};

enum class CollectiveOp : uint8_t { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kNone };
// kEmbedding: the first and last pipeline stages, which share the tied word embedding. kCp: the
// context-parallel ring (a rank and its neighbours in it). kDp spans DP x CP ranks (gradients are
// reduced over both).
// kStage: every GPU of one pipeline stage (tp x cp x dp ranks), the group fp8 delayed scaling
// reduces its amaxes over. kCpA2a: an a2a group of a2a+p2p context parallelism (cp_a2a CP ranks).
enum class Group : uint8_t { kNone, kTp, kDp, kPp, kEmbedding, kCp, kStage, kCpA2a };
enum class Phase : uint8_t { kForward, kBackward, kRecompute, kOptimizer };

// What an op computes, for traces and for an executor that runs the schedule numerically. The
// layer functions follow models/layer_ops.h; backward GEMMs split into input and weight gradient.
enum class OpFunc : uint8_t {
  kLn1,
  kQkv,
  kAttn,
  kProj,
  kResidual1,
  kLn2,
  kFc1,
  kAct,
  kFc2,
  kResidual2,
  kLn1Grad,
  kQkvGradInput,
  kQkvGradWeight,
  kAttnGrad,
  kProjGradInput,
  kProjGradWeight,
  kLn2Grad,
  kFc1GradInput,
  kFc1GradWeight,
  kActGrad,
  kFc2GradInput,
  kFc2GradWeight,
  kResidualGrad,
  kTpAllReduce,
  kTpReduceScatter,
  kTpAllGather,
  // First and last pipeline stage: vocab-parallel embedding, final norm, LM head, loss.
  kEmbed,
  kEmbedGrad,
  kFinalNorm,
  kLmHead,
  kLoss,
  kLossGrad,
  kLmHeadGradInput,
  kLmHeadGradWeight,
  kFinalNormGrad,
  // The rest of an iteration (planner/iteration.h).
  kForwardPass,   // kPass: a chunk's forward for one micro-batch
  kBackwardPass,  // kPass: its backward (recompute included)
  kPpSend,        // activation (forward) or its gradient (backward) to the neighbour stage
  kPpRecv,
  kDpAllReduce,         // a gradient bucket over the DP group
  kDpReduceScatter,     // the same with the distributed optimizer
  kDpAllGather,         // distributed optimizer: updated 16-bit parameters
  kEmbeddingAllReduce,  // tied embedding's gradient between first and last stage
  kOptimizerStep,       // Adam over the stage's (or its DP shard's) parameters
  // Context parallelism: one ring attention step's transfer of a KV block (backward: and of the
  // accumulated dKV) to the next CP rank, and the same from the previous one.
  kCpSendRecv,
  // Context parallelism as Transformer Engine runs it (StackSpec::cp_merge_kernels): the
  // elementwise kernels around one ring step's attention block that merge its partial output
  // (backward: its dQ and dKV) into the running result, and copy the half blocks it reads.
  kCpMerge,
  // Fully sharded data parallelism (Plan::fsdp): a layer's 16-bit parameters gathered over the DP
  // group before its forward or backward, and its gradients reduce-scattered after its backward.
  kFsdpAllGather,
  kFsdpReduceScatter,
  // Rotary position embeddings (ModelSpec::positions, StackSpec::rope): Q and K of a slice
  // rotated in place after the QKV GEMM, and their gradients before its input gradient.
  kRope,
  kRopeGrad,
  // Attention's inputs as Megatron-Core and Transformer Engine split them (StackSpec::qkv_copies):
  // the copies the attention kernel needs of Q (a grouped-query model's) and V (a rotary model's)
  // after the QKV GEMM, and backward the concatenation of dQ, dK and dV into QKV's gradient.
  kAttnCopy,
  kAttnCopyGrad,
  // fp8 scaling's amax reductions as Transformer Engine runs them (StackSpec::fp8_amax_reduction),
  // all-reduces the compute stream waits for. Delayed scaling: after a chunk's layers run forward,
  // and after their backward, the maximum of every scaled tensor's amax over the stage's GPUs,
  // then one kernel that updates the amax histories and the scales from it. Current scaling with
  // sequence parallelism: a scaled tensor's amax over TP before its all-gather.
  kAmaxAllReduce,
  kAmaxUpdate,
  // Context parallelism's all_gather, a2a and a2a+p2p (Plan::cp_communication): K and V
  // all-gathered over the CP group (and, backward, their gradients reduce-scattered), or Q, K and
  // V traded by all-to-all for a shard of the heads (and the output back); kCpCopy, the copies
  // Transformer Engine makes of them around these collectives and the attention.
  kCpAllGather,
  kCpReduceScatter,
  kCpAllToAll,
  kCpCopy,
  // A norm on each head of Q and of K (ModelSpec::qk_norm) after the QKV GEMM, before the rotary
  // embeddings: kQkNorm keeps the slice's Q and K as they came (the input its backward needs) and
  // normalizes them in place; kQkNormGrad, after the rotary embeddings' backward, turns their
  // gradients into the gradients of what came out of the GEMM, in place, and accumulates the two
  // gains' gradients.
  kQkNorm,
  kQkNormGrad,
  // A model's norms after the attention and after the MLP, before each residual add
  // (ModelSpec::post_norms: Gemma 2's and 3's post_attention_layernorm and
  // post_feedforward_layernorm). kPostNorm1 normalizes the attention's output (after its
  // collective) for residual1 to add, kPostNorm2 the MLP's for residual2 (at a stage's top layer
  // without the head, for the next stage's input); backward, kPostNorm1Grad and kPostNorm2Grad
  // turn the residual gradient the branch takes into the gradient of the branch's output and
  // accumulate the gain's gradient.
  kPostNorm1,
  kPostNorm2,
  kPostNorm1Grad,
  kPostNorm2Grad,
  // The backward of the dropout on the attention's (kDropout1Grad) and the MLP's (kDropout2Grad)
  // residual branch (Plan::branch_dropout; its forward is part of kResidual1 and kResidual2): the
  // residual gradient the branch takes, masked and scaled as the forward dropped the branch, into
  // a tensor of its own (PyTorch's native_dropout_backward, and the backward of Megatron's fused
  // bias-dropout-add: a kernel of its own after the one that writes the residual gradient).
  kDropout1Grad,
  kDropout2Grad,
  kCount,
};
std::string_view OpFuncName(OpFunc func);  // "qkv", "fc2.dgrad", "tp.allreduce", ...

// A rectangle of a 2D tensor: rows [row_begin, row_end) and columns [col_begin, col_end).
struct View {
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;
  bool operator==(const View&) const = default;
};

// How the representative rank's tensor maps onto the unsharded model's tensor of the same name,
// for TP rank r of t. This is what an executor initializes weights by and gathers results by.
enum class Shard : uint8_t {
  kReplicated,  // every rank holds the whole tensor
  kRows,        // rank r holds rows [r * rows, (r + 1) * rows)
  kCols,        // rank r holds columns [r * cols, (r + 1) * cols)
  // Columns [Q | K | V] with K and V `part_cols` wide each (per rank): each part is split by
  // columns, so rank r's Q is columns r * |Q| of the whole Q, and so on (heads stay whole).
  kQkvCols,
  kGluCols,  // columns [gate | up], each half split by columns like kCols
  kQkCols,   // columns [Q | K], K `part_cols` wide (per rank), each split by columns like kQkvCols
  // Sequence parallelism: the tokens of each of `part_cols` row slices are split over ranks;
  // local row i * (rows / slices) + j is row i * (rows * t / slices) + r * (rows / slices) + j.
  kSequence,
  kPartialSum,  // each rank holds a partial sum; the whole tensor is the sum over ranks
};

// What a tensor is in the model. Backends and checks find tensors by role, and messages name
// them by it (RoleName).
enum class TensorKind : uint8_t {
  kInput,       // the stage's input activations: the first layer's x (no embedding before it)
  kWeight,      // a GEMM weight: slot kQkv, kProj, kFc1, kFc2, kEmbedding or kLmHead
  kNormWeight,  // a norm's gain: slot kLn1, kLn2, kFinalNorm, kQkNorm ([Q's | K's]) or kPostNorm*
  kActivation,  // a value the forward pass computes, named by its slot
  kOptimizerState,  // Adam's moments and fp32 master copy of the weight in `slot`
  kLoss,
};

// Which value of a layer, or of the model's ends, a role names. A weight and the output of the
// GEMM or norm that applies it share a slot; the kind tells them apart.
enum class TensorSlot : uint8_t {
  kNone,
  kX,     // a layer's input, on the residual stream
  kLn1,   // attention's norm
  kQkv,   // the QKV projection
  kCtx,   // the attention core's output
  kProj,  // attention's output projection
  kMid,   // the residual stream between attention and MLP
  kLn2,   // the MLP's norm
  kFc1,   // the MLP's first linear ([gate | up] with SwiGLU)
  kAct,   // the activation function's output
  kFc2,   // the MLP's second linear
  kOut,   // a layer's output: the next layer's x, or the top layer's (final.x with a head)
  kEmbedding,
  kFinalNorm,
  kLmHead,  // the LM head (its output: the logits)
  kQkNorm,  // the norm on each head of Q and of K (its activation: their values before it)
  // The post-norms after the attention and the MLP (their activation: the normalized branch
  // output the residual add takes; its gradient: the gradient of the branch's output).
  kPostNorm1,
  kPostNorm2,
  // The dropout on the attention's and the MLP's residual branch (Plan::branch_dropout): no
  // activation (its masks are a hash of where each element sits: exec/dropout.h); its gradient is
  // the gradient of what the dropout takes, the branch's output (or its post-norm's).
  kDropout1,
  kDropout2,
};

// Sequence parallelism holds some values twice: whole on every rank and as this rank's sequence
// shard. kSequenceShard is the shard of a value whose primary copy is whole (a norm's output
// before its all-gather, a row-parallel output after its reduce-scatter); kGathered the whole
// copy of a value whose primary copy is the shard (a residual-stream gradient all-gathered for
// a row-parallel GEMM).
enum class TensorForm : uint8_t { kPrimary, kSequenceShard, kGathered };

struct TensorRole {
  TensorKind kind = TensorKind::kActivation;
  TensorSlot slot = TensorSlot::kNone;
  bool gradient = false;  // the gradient of the value the rest of the role names
  TensorForm form = TensorForm::kPrimary;
  int16_t layer = -1;  // the layer, counted from the lowered stack's first; -1: none
  int8_t slice = -1;   // a per-row-slice tensor's slice (the embedding's partial sums); else -1
  bool operator==(const TensorRole&) const = default;
};

// A 2D tensor of one rank: activations are tokens x features (rows = a micro-batch's tokens,
// sequence-major), weights are in_features x out_features of this rank's shard. Its role names it
// (RoleName: "l3.fc1", "l3.fc1.w", "l3.fc1.w.grad"); a lowering gives each tensor its own role.
struct Tensor {
  int64_t rows = 0;
  int64_t cols = 0;
  Shard shard = Shard::kReplicated;
  int64_t part_cols = 0;  // kQkvCols: width of K (= of V); kSequence: row slices
  TensorRole role;
};

// Whether the tensor's values come from outside the schedule (no op of it computes them): a
// weight, a norm's gain or the stage's input.
bool IsGiven(const TensorRole& role);
// The index of the tensor with `role`, or -1.
int32_t FindTensor(std::span<const Tensor> tensors, const TensorRole& role);
// A role's name, for messages and traces: "l3.fc1.w.grad", "l0.x.grad.full", "embed.s1",
// "tokens", "logits", "labels", "loss". Distinct roles of a lowering have distinct names.
std::string RoleName(const TensorRole& role);

// The unsharded tensor's shape (rows, cols) for a TP group of `tp`.
struct Shape2 {
  int64_t rows = 0, cols = 0;
};
Shape2 WholeShape(const Tensor& tensor, int tp);
// Where element (row, col) of rank `rank`'s tensor lies in the unsharded tensor.
Shape2 WholeIndex(const Tensor& tensor, int rank, int tp, int64_t row, int64_t col);

struct TensorUse {
  int32_t tensor = -1;
  View view;
};

// Tags locate an op in the model and the iteration; -1 means "not applicable".
struct OpTags {
  int16_t layer = -1;
  int16_t micro_batch = -1;
  int8_t row_slice = -1;
  int8_t col_chunk = -1;
  int8_t chunk = -1;  // decomposed overlap: the piece of a pipelined collective and its GEMM
  int16_t virtual_stage = -1;  // iteration: the model chunk (virtual pipeline stage) of a pass
  int8_t ring_step = -1;       // context parallelism: the ring attention step (KV block)
  Phase phase = Phase::kForward;
};

// One op of a Schedule. Costs are given as shapes and byte counts, not times: the simulator's cost
// models turn them into durations. Dependencies and tensor uses are ranges into the Schedule's
// shared pools so an op stays small.
struct Op {
  OpKind kind = OpKind::kElementwise;
  Stream stream = Stream::kCompute;
  OpFunc func = OpFunc::kCount;
  CollectiveOp collective = CollectiveOp::kNone;
  Group group = Group::kNone;
  OpTags tags;
  int64_t m = 0, n = 0, k = 0;                                                // GEMM shape
  int64_t sequences = 0, seq_len = 0, heads = 0, kv_heads = 0, head_dim = 0;  // attention
  // A sliding attention window: each query attends to the `window` tokens before it (0: to every
  // earlier token), the kernel skipping the key blocks outside (LowerOptions::windowed_layers).
  int32_t window = 0;
  // The position in its sequence of the attention's first query (0: the queries are a whole
  // sequence from its start, or a ring step's causal block): context parallelism's all_gather
  // computes a chunk of the sequence's queries against the keys before them.
  int32_t first_query = 0;
  double flops = 0;  // attention and elementwise
  double bytes = 0;  // elementwise traffic, or a collective's buffer per rank
  // Decomposed overlap: a collective that moves only rows [part * R / parts, (part + 1) * R /
  // parts) of the R rows of its row slice (whole, as gathered). An all-gather part reads this
  // rank's whole shard of the slice and writes the part's rows of the gathered slice, which hold
  // some ranks' rows; a reduce-scatter part reads the part's rows of partial sums and writes those
  // of them that fall in this rank's shard. parts = tp is Transformer Engine's ring exchange, one
  // peer's shard a step; parts = 1 is the plain collective. `bytes` is the part's share.
  int16_t part = 0, parts = 1;
  // Iteration schedules: the pipeline stage whose representative rank runs the op (each stage
  // has its own streams and device), and for kPass the pass and its layer range.
  int16_t stage = 0;
  int32_t pass = -1;
  int16_t layer_begin = -1, layer_end = -1;
  uint32_t dep_begin = 0, dep_count = 0;
  uint32_t use_begin = 0, read_count = 0, write_count = 0;
};

// Schedule is the one source of truth for what runs where and in which order: the ops of one
// representative rank (TP ranks are symmetric) in global issue order. Each stream runs its ops in
// the order they appear here; an op also waits for its dependencies, which always precede it
// (like a CUDA event recorded before it is waited on). The simulator and the executor are two
// interpreters of it.
class Schedule {
 public:
  // Appends an op with its dependencies (indices of earlier ops) and tensor uses; returns its id.
  int32_t Add(const Op& op, std::span<const int32_t> deps, std::span<const TensorUse> reads = {},
              std::span<const TensorUse> writes = {});
  int32_t AddTensor(const Tensor& tensor);

  const std::vector<Op>& ops() const { return ops_; }
  const Op& op(int32_t id) const { return ops_[id]; }
  std::span<const int32_t> deps(const Op& op) const {
    return {deps_.data() + op.dep_begin, op.dep_count};
  }
  std::span<const TensorUse> reads(const Op& op) const {
    return {uses_.data() + op.use_begin, op.read_count};
  }
  std::span<const TensorUse> writes(const Op& op) const {
    return {uses_.data() + op.use_begin + op.read_count, op.write_count};
  }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  size_t size() const { return ops_.size(); }

  // A readable label: "fc2.dgrad L3 mb0 s1 c0 bwd".
  std::string Label(int32_t id) const;

  // Room for `ops` ops (with their dependencies and tensor uses) and `tensors` tensors.
  void Reserve(size_t ops, size_t tensors = 0);

 private:
  std::vector<Op> ops_;
  std::vector<int32_t> deps_;
  std::vector<TensorUse> uses_;
  std::vector<Tensor> tensors_;
};

// Start and end of every op of a Schedule, in microseconds from the iteration's start; predicted
// by the simulator or measured by the executor. `ops[i]` belongs to the schedule's op i.
struct OpTime {
  double start_us = 0;
  double end_us = 0;
};
struct Timeline {
  std::vector<OpTime> ops;
  double end_us() const;
};

}  // namespace domino

#endif  // DOMINO_PLANNER_SCHEDULE_H_
