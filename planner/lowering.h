#ifndef DOMINO_PLANNER_LOWERING_H_
#define DOMINO_PLANNER_LOWERING_H_

// The working state of Lower and LowerStage (planner/lower.h, the planner's interface), shared by
// the files that lower one part each: lower.cc the issue order and each layer's forward and
// backward blocks, lower_tensors.cc the tensors, lower_attention.cc the attention core (ring
// attention with context parallelism), lower_ends.cc the embedding, final norm, LM head and loss.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "planner/lower.h"

namespace domino::lowering {

enum class Block { kAttention, kMlp };

// The tensors of one layer. Residual-stream tensors (x, mid and their gradients) are whole on
// every rank, or sequence shards with sequence parallelism (SP); norm outputs are whole on every
// rank (SP: all-gathered from the `*_s` shards); column-parallel outputs are column shards. The
// row-parallel outputs proj and fc2 hold partial sums until their all-reduce (in place) or their
// reduce-scatter (SP: into proj_s, fc2_s). A layer's output is the next layer's x; its gradient
// is the next layer's g_x (the top layer's: out_grad). Unused ids are -1.
struct LayerTensors {
  int32_t x, ln1, ln1_s, qkv, ctx, proj, proj_s, mid, ln2, ln2_s, fc1, act, fc2, fc2_s;
  int32_t w_qkv, w_proj, w_fc1, w_fc2, w_ln1, w_ln2;
  int32_t g_x, g_ln1, g_ln1_s, g_qkv, g_ctx, g_mid, g_mid_full, g_ln2, g_ln2_s, g_fc1, g_act;
  int32_t g_out_full;
  int32_t g_w_qkv, g_w_proj, g_w_fc1, g_w_fc2, g_w_ln1, g_w_ln2;
  // With ModelSpec::qk_norm: Q and K before their norm (qk), its gradient, the two gains ([Q's |
  // K's], head_dim each) and their gradient.
  int32_t qk, g_qk, w_qk_norm, g_w_qk_norm;
  // With ModelSpec::post_norms: the attention's and the MLP's outputs normalized (residual-stream
  // tensors, as the outputs are after their collective), the gradients of those outputs, the
  // gains and their gradients.
  int32_t post1, post2, g_post1, g_post2, w_post1, w_post2, g_w_post1, g_w_post2;
  // With Plan::branch_dropout: the residual gradient the attention's (g_drop1) and the MLP's
  // (g_drop2) branch take through their dropout's backward (residual-stream tensors).
  int32_t g_drop1, g_drop2;
};

// Lowers one plan (a model chunk of LowerOptions) into a Schedule: Run() once.
class Lowering {
 public:
  Lowering(const Plan& plan, const LowerOptions& options);

  Schedule Run();

 private:
  using Deps = std::vector<int32_t>;

  int32_t AddTensor(int64_t rows, int64_t cols, Shard shard, int64_t part, const TensorRole& role) {
    return s_.AddTensor(Tensor{rows, cols, shard, part, role});
  }
  // A residual-stream tensor: whole, or this rank's sequence shard.
  int32_t ResidualTensor(const TensorRole& role) {
    if (!sp_) return AddTensor(tokens_, h_, Shard::kReplicated, 0, role);
    return AddTensor(tokens_ / plan_.tp, h_, Shard::kSequence, p_, role);
  }
  // Roles of layer l's tensors: an activation (or its gradient) of `slot`, a weight, a norm's gain.
  static TensorRole Role(TensorKind kind, TensorSlot slot, int l, bool gradient = false,
                         TensorForm form = TensorForm::kPrimary) {
    TensorRole role;
    role.kind = kind, role.slot = slot, role.gradient = gradient, role.form = form;
    role.layer = static_cast<int16_t>(l);
    return role;
  }
  static TensorRole Act(TensorSlot slot, int l, TensorForm form = TensorForm::kPrimary) {
    return Role(TensorKind::kActivation, slot, l, false, form);
  }
  static TensorRole Grad(TensorSlot slot, int l, TensorForm form = TensorForm::kPrimary) {
    return Role(TensorKind::kActivation, slot, l, true, form);
  }

  // Gradient of layer l's output: the next layer's input gradient.
  int32_t OutGrad(int l) const { return l + 1 < layers_ ? tensors_[l + 1].g_x : out_grad_; }
  // What reaches the residual stream after a row-parallel GEMM's collective.
  int32_t Reduced(int32_t whole, int32_t shard) const { return sp_ ? shard : whole; }

  // Column chunk `chunk` of row slice `slice` of a whole-token tensor `cols` wide.
  View Chunk(int slice, int chunk, int64_t cols) const {
    int64_t width = cols / q_;
    return View{slice * slice_tokens_, (slice + 1) * slice_tokens_, chunk * width,
                (chunk + 1) * width};
  }
  static View Whole(int64_t rows, int64_t cols) { return View{0, rows, 0, cols}; }
  // Piece `chunk` of `pieces` (default: the all-gather's c) of row slice `slice` of a
  // whole-token tensor: its rows.
  View Piece(int slice, int chunk, int64_t cols, int pieces = 0) const {
    const int64_t rows = slice_tokens_ / (pieces > 0 ? pieces : c_);
    const int64_t begin = slice * slice_tokens_ + chunk * rows;
    return View{begin, begin + rows, 0, cols};
  }
  OpTags PieceTags(OpTags tags, int chunk, int pieces = 0) const {
    tags.chunk = static_cast<int8_t>((pieces > 0 ? pieces : c_) > 1 ? chunk : -1);
    return tags;
  }
  TensorUse Use(int32_t tensor, View view) const { return TensorUse{tensor, view}; }
  // Row slice `slice` of a tensor of activations, whole or a sequence shard.
  TensorUse SliceOf(int32_t tensor, int slice) const {
    const Tensor& t = s_.tensors()[tensor];
    int64_t rows = t.rows / p_;
    return TensorUse{tensor, View{slice * rows, (slice + 1) * rows, 0, t.cols}};
  }
  TensorUse WholeOf(int32_t tensor) const {
    const Tensor& t = s_.tensors()[tensor];
    return TensorUse{tensor, Whole(t.rows, t.cols)};
  }

  // lower.cc: ops and the waits between them, then a layer's blocks in issue order.
  OpTags Tags(int layer, int slice, int chunk, Phase phase) const;
  int32_t Compute(Op op, Deps deps, std::initializer_list<TensorUse> reads,
                  std::initializer_list<TensorUse> writes);
  int32_t Gemm(OpFunc func, const OpTags& tags, int64_t m, int64_t n, int64_t k, Deps deps,
               std::initializer_list<TensorUse> reads, std::initializer_list<TensorUse> writes);
  int32_t Elementwise(OpFunc func, const OpTags& tags, double bytes, Deps deps,
                      std::initializer_list<TensorUse> reads,
                      std::initializer_list<TensorUse> writes);

  // The attention core's op over row slice i's local queries (ring steps and a2a change its
  // shape).
  Op AttentionOp(OpFunc func, const OpTags& tags, double flops_factor) const;
  int32_t Attention(OpFunc func, const OpTags& tags, double flops_factor,
                    std::initializer_list<TensorUse> reads, std::initializer_list<TensorUse> writes,
                    Deps deps = {});
  int32_t Collective(OpFunc func, CollectiveOp kind, const OpTags& tags, double bytes,
                     int32_t producer, TensorUse in, TensorUse out, int part = 0, int parts = 1);

  // Scope intra-layer: everything of the next layer waits for this layer's collectives.
  void Barrier() {
    if (scope_ == OverlapScope::kIntraLayer)
      sync_.insert(sync_.end(), layer_comms_.begin(), layer_comms_.end());
    layer_comms_.clear();
  }

  // Scope none: the next compute op waits for `comm`.
  void SyncIfNoOverlap(int32_t comm) {
    if (scope_ == OverlapScope::kNone) sync_.push_back(comm);
  }

  double RowBytes(int64_t cols) const { return static_cast<double>(slice_tokens_) * cols * e_; }

  // Bytes of a sequence-parallel all-gather that feeds a layer's linear GEMM: under fp8 the
  // operand is quantized before it is gathered, so the gather moves 1-byte elements (Transformer
  // Engine gathers the fp8 input, and its userbuffers all-gather buffers are fp8: fp8_buf). The LM
  // head's and the embedding gradient's gathers stay 16-bit.
  double LinearGatherBytes() const {
    return plan_.precision == Dtype::kFp8 ? static_cast<double>(slice_tokens_) * h_ : RowBytes(h_);
  }
  // Bytes of the residual add after the attention projection (`attention`) or the second MLP
  // linear, over `hb` bytes of activations, as the stack runs it: one fused pass (read both,
  // write; with the branch's dropout, a 1-byte mask too), or a bias pass, a dropout pass and an
  // add pass. A model's post-norm (ModelSpec::post_norms) is an op of its own before it
  // (PostNorm).
  double ResidualBytes(double hb, bool attention) const {
    const bool dropout = plan_.branch_dropout(attention);
    const double mask = dropout ? hb / e_ : 0;
    if (plan_.fuses_bias_dropout_add()) return 3 * hb + mask;
    return (plan_.model.bias ? 2 * hb : 0) + (dropout ? 2 * hb + mask : 0) + 3 * hb;
  }
  // Bytes of the backward of the branch's dropout, over `hb` bytes of gradients (its op,
  // kDropout1Grad or kDropout2Grad): a pass that reads the residual gradient and the mask and
  // writes the gradient the branch takes (PyTorch's native_dropout_backward, and the backward of
  // Megatron's fused bias-dropout-add; none without dropout: a dropout of p = 0 returns its input).
  // A post-norm's backward is an op of its own after it (PostNormGrad).
  double BranchGradBytes(double hb, bool attention) const {
    return plan_.branch_dropout(attention) ? 2 * hb + hb / e_ : 0;
  }
  // A model's post-norm (ModelSpec::post_norms) of slice i of the branch output `out` with gain
  // `gain` into `normed`, after `deps`, which it takes: a norm's read and write of the branch's
  // output, as Transformer Engine's norm module runs it. Returns what the residual add takes:
  // `normed`, or `out` itself for a model without post-norms (`deps` then left as they are).
  int32_t PostNorm(OpFunc func, const OpTags& tags, Deps& deps, int32_t out, int32_t gain,
                   int32_t normed, int i);
  // Its backward after `producer` wrote the residual gradient `dy` the branch takes: reads the
  // branch's output `out` and `dy` and writes the gradient of `out` into `dx` (three passes, the
  // gain's gradient accumulated in `dw` in the same kernel, as Transformer Engine's norms compute
  // it). Returns the op, or `producer` for a model without post-norms.
  int32_t PostNormGrad(OpFunc func, const OpTags& tags, int32_t producer, int32_t out, int32_t gain,
                       int32_t dy, int32_t dx, int32_t dw, int i);
  // The gradient of layer l's attention (`attention`) or MLP output that its row-parallel GEMM's
  // input gradient takes: the residual gradient at mid or at the layer's output, through the
  // branch's dropout's backward where it drops out, and with post-norms then through the
  // post-norm's backward.
  int32_t BranchGradient(int l, bool attention) const {
    const LayerTensors& t = tensors_[l];
    if (plan_.model.post_norms) return attention ? t.g_post1 : t.g_post2;
    const int32_t dropped = attention ? t.g_drop1 : t.g_drop2;
    if (dropped >= 0) return dropped;
    return attention ? t.g_mid : OutGrad(l);
  }
  // Whether the MLP is a GeGLU the stack runs as Megatron-Core's unfused gated linear unit
  // (StackSpec::fused_geglu false).
  bool UnfusedGeglu() const {
    return plan_.model.activation == Activation::kGeglu && !plan_.stack.fused_geglu;
  }
  // Its passes over a rank's f MLP columns of a token. Megatron-Core's MLP runs a gate that is
  // not F.silu or F.gelu without bias_activation_fusion (which raises on it), as glu()
  // (transformer/mlp.py, core_v0.15.0 to HEAD): chunk [gate | up] (views), the GeLU of the gate
  // (fast_gelu, one kernel under torch.compile, megatron/core/jit.py: read and write), up +
  // glu_linear_offset (0: a copy all the same, read and write), their product (read 2, write 1):
  // 7 forward. Backward, autograd: the product's two gradients (read 2, write 1 each), the
  // GeLU's compiled backward (read the gate and its gradient, write), and chunk's backward, a
  // cat of the two into the first linear's gradient (read 2, write 2): 13.
  static double UnfusedGegluPasses(Phase phase) { return phase == Phase::kBackward ? 13 : 7; }
  // Rows a norm or residual touches: a sequence-parallel shard, or the whole slice.
  double NormRows() const {
    return sp_ ? static_cast<double>(slice_tokens_) / plan_.tp : slice_tokens_;
  }

  Deps ForwardEntry(int l, Block block, int i);
  Deps GatherParts(const OpTags& tags, int32_t producer, TensorUse in, int32_t whole, int i);

  // GEMM piece k of a decomposed column-parallel (or input-gradient) GEMM waits for part k.
  static Deps PieceDeps(const Deps& entry, int k) {
    return {entry[std::min<size_t>(k, entry.size() - 1)]};
  }

  void ForwardCompute(int l, Block block, int i, const Deps& entry);
  void ForwardBlock(int l, Block block);
  Deps BackwardEntry(int l, Block block, int i, bool final = false);

  // Norm backward of slice i: dx = upstream (the gradient through the residual) + the norm's
  // backward of dy at x; the norm weight's gradient accumulates in dw. Six passes over the rows:
  // the norm's backward reads x and dy and writes its dx, and the residual's gradient is added in
  // (a read of each and a write: PyTorch's autograd accumulating the layer input's two gradients
  // after Transformer Engine's or apex's norm backward, which computes the weight's gradient in
  // the same kernel); the executor's kernels do the same work as a row kernel that reads x, dy and
  // the upstream gradient and writes dx, and a kernel that reads x and dy again for dw
  // (exec/cuda_layers.cu NormBackward).
  int32_t NormGrad(OpFunc func, const OpTags& tags, Deps deps, int i, int32_t x, int32_t dy,
                   int32_t w, int32_t upstream, int32_t dx, int32_t dw) {
    return Elementwise(func, tags, 6 * NormRows() * h_ * e_, std::move(deps),
                       {SliceOf(x, i), SliceOf(dy, i), WholeOf(w), SliceOf(upstream, i)},
                       {SliceOf(dx, i), WholeOf(dw)});
  }

  void BackwardCompute(int l, Block block, int i, const Deps& entry);
  void BackwardBlock(int l, Block block);
  void RecomputeLayer(int l);
  int32_t AmaxAllReduce(Group group, const OpTags& tags, double bytes, Deps deps);
  int32_t TpAmaxReduction(const OpTags& tags, int32_t producer);
  void AmaxReduction(Phase phase);

  // lower_tensors.cc: a layer's tensors, the embedding's and the head's.
  LayerTensors MakeTensors(int l);
  void MakeEmbeddingTensors();
  void MakeHeadTensors();

  // lower_attention.cc: the attention core, and ring attention with context parallelism.
  // Bytes of one KV block of a row slice: K and V of this rank's kv heads for its local tokens.
  double KvBlockBytes() const { return 2.0 * g_ * d_ * slice_tokens_ * e_; }
  double CpMergeBytes(int step, bool backward, int steps) const;
  int32_t RingTransfer(const OpTags& tags, int step, double bytes, Deps deps,
                       std::initializer_list<TensorUse> buffers);
  void AttentionCore(OpFunc func, const OpTags& tags, int l, int i);
  void RingAttentionCore(OpFunc func, const OpTags& tags, int l, int i, int a2a);
  void GatheredAttentionCore(OpFunc func, const OpTags& tags, int l, int i);
  void AllToAllAttentionCore(OpFunc func, const OpTags& tags, int l, int i);
  // A collective of all_gather, a2a or a2a+p2p context parallelism over `group` (the CP group,
  // or a2a+p2p's a2a group), on the cp-comm stream after the compute issued last; the next
  // compute op waits for it.
  int32_t CpCollective(OpFunc func, CollectiveOp kind, const OpTags& tags, double bytes,
                       TensorUse in, TensorUse out, Group group = Group::kCp);
  void CpTrade(const OpTags& tags, TensorUse tensor, double bytes, Group group);
  void Rope(OpFunc func, const OpTags& tags, int32_t qkv, int i);
  void QkNorm(const OpTags& tags, const LayerTensors& t, int i);
  void QkNormGrad(const OpTags& tags, const LayerTensors& t, int i);
  TensorUse QkOf(int32_t qkv, int i) const;
  Op QkNormOp(OpFunc func, const OpTags& tags, int passes) const;
  // Whether the stack rotates Q and K: a model with rotary positions and a stack that runs them.
  bool RotatesQk() const {
    return !plan_.model.learned_positions() && plan_.stack.rope != RopeKernel::kNone;
  }
  void CopiesAroundAttention(OpFunc func, const OpTags& tags, int32_t tensor, int i,
                             bool after_core = false);

  // lower_ends.cc: the embedding in front; the final norm, LM head and loss behind.
  double LossBytes(Phase phase) const;
  void EmbeddingForward(int i);
  void EmbeddingBackward(int i, int32_t grad);
  void HeadForward(int i);
  void HeadBackward(int i);

  const Plan& plan_;
  LowerOptions options_;
  int p_, q_, layers_;
  bool sp_;
  int c_;   // decomposed-overlap chunks of an all-gather and the GEMM it feeds (1: none)
  int rc_;  // pieces of a decomposed row-parallel GEMM and its reduce-scatter (1: none)
  int cp_;  // context-parallel degree (1: none)
  OverlapScope scope_;
  int64_t h_ = 0, d_ = 0, a_ = 0, g_ = 0, f_ = 0, f1_ = 0, qkv_n_ = 0, e_ = 2;
  int64_t tokens_ = 0, slice_tokens_ = 0, vocab_ = 0;
  Phase fwd_phase_ = Phase::kForward;  // kRecompute while a layer's forward is redone
  bool recomputing_ = false;
  int32_t head_x_ = -1, head_ln_ = -1, head_ln_s_ = -1, logits_ = -1, g_logits_ = -1;
  int32_t g_head_ln_ = -1, g_head_ln_s_ = -1, w_head_ = -1, g_w_head_ = -1;
  int32_t w_final_norm_ = -1, g_w_final_norm_ = -1, labels_ = -1, loss_ = -1;
  int32_t w_embed_ = -1, g_w_embed_ = -1, tokens_in_ = -1, g_x_full_ = -1;
  std::vector<int32_t> head_grad_ = std::vector<int32_t>(kMaxSplit + 1, -1);
  std::vector<int32_t> loss_comm_ = std::vector<int32_t>(kMaxSplit + 1, -1);
  Schedule s_;
  std::vector<LayerTensors> tensors_;
  int32_t out_grad_ = -1;             // gradient of the top layer's output
  std::vector<Deps> waits_;           // per slice: collectives its next entry consumes
  std::vector<int32_t> sync_;         // collectives the next compute op must wait for
  int32_t last_compute_ = -1;         // the compute op issued last
  std::vector<int32_t> layer_comms_;  // collectives of the current layer (intra-layer barrier)
};

}  // namespace domino::lowering

#endif  // DOMINO_PLANNER_LOWERING_H_
