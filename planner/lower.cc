#include "planner/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <vector>

namespace domino {
namespace {

// Issue order. One compute stream and one TP comm stream run in issue order, so the order in
// which slices are issued decides what each collective can hide behind. Lowering walks the layer
// stack in blocks (attention, then MLP; reversed in backward) and, inside a block, slice by slice:
//
//   for block b: for slice i: entry(b, i); compute(b, i); collective(b, i)
//
// where entry is the residual add and norm that consume the previous block's collective of the
// same slice. The collective of slice i then runs under the compute of slices i+1..p-1 of the same
// block and, for the last slices, under the next block's first slices: every collective gets p-1
// slices of independent work before anything waits for it, which is the most one comm stream can
// hide without reordering blocks (a slice's next block must wait for its own collective, and
// issuing the next block's slice 0 earlier would only delay the collectives queued behind it).
// For p = 2 this is DeepSpeed-Domino's forward schedule. Column chunks of one slice follow the
// same rule inside the row-parallel GEMM: chunk j's all-reduce runs under chunk j+1's GEMM.
// Backward issues each column-parallel layer's input-gradient collective before its
// weight-gradient GEMM, so that GEMM always hides it (Megatron's async TP all-reduce).
//
// Scope none makes the next compute op wait for each forward collective (and each backward one
// after its weight-gradient GEMM): the Megatron baseline. Scope intra-layer adds a barrier at
// every layer boundary: no slice enters layer l+1 (l-1 in backward) before every collective of
// layer l is done. Scope inter-layer has only the data dependencies.
//
// With sequence parallelism a block begins with an all-gather of the norm output and ends with a
// reduce-scatter; the entry of slice i+1 is issued before the compute of slice i, so the
// all-gather of slice i+1 runs under slice i's GEMMs. Backward issues the all-gather of the norm
// output (for the weight gradient) before the input-gradient GEMM and the reduce-scatter of the
// input gradient before the weight-gradient GEMM: Transformer Engine's bulk overlaps.
//
// Decomposed overlap (method decomposed or both, c chunks) cuts each sequence-parallel collective
// that feeds or drains a GEMM, and that GEMM, into c pieces of the slice's rows: the all-gather
// before QKV and fc1 (and, backward, the gradient's before the proj and fc2 input-gradient GEMMs)
// in c parts, GEMM piece k waiting only for part k, so part k+1 moves while piece k computes; the
// proj and fc2 GEMMs in c pieces, each piece's reduce-scatter part running under the next piece.
// Only the last reduce-scatter part has nothing left to hide behind. Scope none then makes the
// next compute op wait for all of a block's parts, not for each: the pieces are one GEMM. With
// c = 1 the schedule is plain sequence parallelism, op for op.
//
// Context parallelism (cp > 1) gives each rank seq_len / cp tokens of every sequence (chunks r
// and 2cp-1-r of 2cp, Megatron-Core's causal load balance): every GEMM, norm and collective works
// on those tokens, and the attention core becomes ring attention as Transformer Engine's "p2p" CP
// runs it. Forward: cp steps, step j an attention block of the local queries against the KV block
// that started j ranks back; while block j computes, the cp-comm stream passes the block on
// (sends it to the next CP rank, receives the next one: 2 * kv_heads/tp * head_dim * local tokens
// * bytes), so block j+1 waits only for that transfer. Causal: the diagonal block (step 0) is the
// local queries against their own keys under the mask; every other step is half a block unmasked
// (both local chunks against the earlier half of the KV, or the later chunk against all of it),
// the same work as the masked diagonal, so each step is priced as a causal block of the local
// tokens. Backward: cp steps again, each passing KV and the dKV accumulated so far (step 0 only
// KV, the last only dKV, which then reaches its owner); step j's transfer carries step j-1's dKV,
// so it waits for that block, and the QKV input gradient waits for the last transfer. KV buffers
// are double-buffered (as TE's): step j's transfer also waits for block j-1 to be done with the
// buffer it receives into. A stack that merges the steps in kernels of its own
// (StackSpec::cp_merge_kernels, Transformer Engine's p2p CP) follows each block with one kCpMerge
// pass over what those kernels move (CpMergeBytes); the softmax statistics' corrections, a few
// bytes per query, are left out.

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
};

class Lowering {
 public:
  Lowering(const Plan& plan, const LowerOptions& options)
      : plan_(plan),
        options_(options),
        p_(plan.row_split),
        q_(plan.col_split),
        layers_(options.layers > 0 ? options.layers : plan.model.layers / plan.pp),
        sp_(plan.sequence_parallel),
        c_(plan.decomposed_chunks()),
        cp_(plan.cp),
        scope_(plan.scope) {
    const ModelSpec& m = plan.model;
    int t = plan.tp;
    h_ = m.hidden;
    d_ = m.head_dim();
    a_ = m.heads / t;
    g_ = m.kv_heads / t;
    f_ = m.ffn / t;
    f1_ = m.activation == Activation::kSwiglu ? 2 * f_ : f_;
    qkv_n_ = (a_ + 2 * g_) * d_;
    e_ = DtypeBytes(plan.precision == Dtype::kFp8 ? Dtype::kBf16 : plan.precision);
    tokens_ = static_cast<int64_t>(plan.micro_batch) * plan.local_seq_len();
    slice_tokens_ = tokens_ / p_;
    // Megatron pads the vocabulary to a multiple of 128 per TP rank.
    vocab_ = (m.vocab + 128 * t - 1) / (128 * t) * 128;
    waits_.assign(p_, {});
  }

  Schedule Run() {
    s_.Reserve(static_cast<size_t>(layers_) * p_ * (24 + 8 * q_));
    for (int l = 0; l < layers_; ++l) tensors_.push_back(MakeTensors(l));
    out_grad_ = ResidualTensor(fmt::format("l{}.out.grad", layers_ - 1),
                               Grad(TensorSlot::kOut, layers_ - 1));
    if (options_.embedding || (options_.head && plan_.model.tied_embeddings))
      MakeEmbeddingTensors();
    if (options_.head) MakeHeadTensors();
    if (options_.forward) {
      if (options_.embedding)
        for (int i = 0; i < p_; ++i) EmbeddingForward(i);
      for (int l = 0; l < layers_; ++l) {
        Barrier();
        ForwardBlock(l, Block::kAttention);
        ForwardBlock(l, Block::kMlp);
      }
      if (options_.head)
        for (int i = 0; i < p_; ++i) HeadForward(i);
    }
    if (options_.backward) {
      if (options_.head)
        for (int i = 0; i < p_; ++i) HeadBackward(i);
      for (int l = layers_ - 1; l >= 0; --l) {
        Barrier();
        if (plan_.recomputes_layer(l)) RecomputeLayer(l);
        BackwardBlock(l, Block::kMlp);
        BackwardBlock(l, Block::kAttention);
      }
      // The first layer's input gradient completes the stack.
      for (int i = 0; i < p_; ++i) {
        int32_t grad = BackwardEntry(0, Block::kAttention, i, /*final=*/true)[0];
        if (options_.embedding) EmbeddingBackward(i, grad);
      }
    }
    return std::move(s_);
  }

 private:
  using Deps = std::vector<int32_t>;

  int32_t AddTensor(std::string name, int64_t rows, int64_t cols, Shard shard, int64_t part,
                    const TensorRole& role) {
    return s_.AddTensor(Tensor{std::move(name), rows, cols, shard, part, role});
  }
  // A residual-stream tensor: whole, or this rank's sequence shard.
  int32_t ResidualTensor(std::string name, const TensorRole& role) {
    if (!sp_) return AddTensor(std::move(name), tokens_, h_, Shard::kReplicated, 0, role);
    return AddTensor(std::move(name), tokens_ / plan_.tp, h_, Shard::kSequence, p_, role);
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

  LayerTensors MakeTensors(int l) {
    LayerTensors t{};
    using enum TensorSlot;
    using F = TensorForm;
    auto name = [l](const char* what) { return fmt::format("l{}.{}", l, what); };
    auto act = [&](const char* what, const TensorRole& role, int64_t cols,
                   Shard shard = Shard::kReplicated, int64_t part = 0) {
      return AddTensor(name(what), tokens_, cols, shard, part, role);
    };
    auto residual = [&](const char* what, const TensorRole& role) {
      return ResidualTensor(name(what), role);
    };
    // A GEMM weight (`norm`: a norm's gain) or its gradient.
    auto weight = [&](const char* what, TensorSlot slot, bool norm, bool gradient, int64_t rows,
                      int64_t cols, Shard shard, int64_t part = 0) {
      return AddTensor(
          name(what), rows, cols, shard, part,
          Role(norm ? TensorKind::kNormWeight : TensorKind::kWeight, slot, l, gradient));
    };
    // The first layer's x is the stage's input unless the embedding computes it.
    const TensorKind x_kind =
        l == 0 && !options_.embedding ? TensorKind::kInput : TensorKind::kActivation;
    const bool glu = f1_ != f_;
    const Shard fc1_shard = glu ? Shard::kGluCols : Shard::kCols;
    const int64_t kv = g_ * d_;
    // Partial sums before their collective: whole afterwards without SP (in place).
    const Shard partial = sp_ ? Shard::kPartialSum : Shard::kReplicated;
    t.x = residual("x", Role(x_kind, kX, l)), t.mid = residual("mid", Act(kMid, l));
    t.ln1 = act("ln1", Act(kLn1, l), h_), t.ln2 = act("ln2", Act(kLn2, l), h_);
    t.qkv = act("qkv", Act(kQkv, l), qkv_n_, Shard::kQkvCols, kv);
    t.ctx = act("ctx", Act(kCtx, l), a_ * d_, Shard::kCols);
    t.proj = act("proj", Act(kProj, l), h_, partial);
    t.fc1 = act("fc1", Act(kFc1, l), f1_, fc1_shard);
    t.act = act("act", Act(kAct, l), f_, Shard::kCols);
    t.fc2 = act("fc2", Act(kFc2, l), h_, partial);
    t.g_x = residual("x.grad", Role(x_kind, kX, l, true));
    t.g_mid = residual("mid.grad", Grad(kMid, l));
    t.g_ln1 = act("ln1.grad", Grad(kLn1, l), h_, partial);
    t.g_ln2 = act("ln2.grad", Grad(kLn2, l), h_, partial);
    t.g_qkv = act("qkv.grad", Grad(kQkv, l), qkv_n_, Shard::kQkvCols, kv);
    t.g_ctx = act("ctx.grad", Grad(kCtx, l), a_ * d_, Shard::kCols);
    t.g_fc1 = act("fc1.grad", Grad(kFc1, l), f1_, fc1_shard);
    t.g_act = act("act.grad", Grad(kAct, l), f_, Shard::kCols);
    t.ln1_s = t.ln2_s = t.proj_s = t.fc2_s = t.g_ln1_s = t.g_ln2_s = -1;
    t.g_mid_full = t.g_out_full = -1;
    if (sp_) {
      t.ln1_s = residual("ln1.shard", Act(kLn1, l, F::kSequenceShard));
      t.ln2_s = residual("ln2.shard", Act(kLn2, l, F::kSequenceShard));
      t.proj_s = residual("proj.shard", Act(kProj, l, F::kSequenceShard));
      t.fc2_s = residual("fc2.shard", Act(kFc2, l, F::kSequenceShard));
      t.g_ln1_s = residual("ln1.grad.shard", Grad(kLn1, l, F::kSequenceShard));
      t.g_ln2_s = residual("ln2.grad.shard", Grad(kLn2, l, F::kSequenceShard));
      t.g_mid_full = act("mid.grad.full", Grad(kMid, l, F::kGathered), h_);
      t.g_out_full = act("out.grad.full", Grad(kOut, l, F::kGathered), h_);
    }
    t.w_qkv = weight("qkv.w", kQkv, false, false, h_, qkv_n_, Shard::kQkvCols, kv);
    t.w_proj = weight("proj.w", kProj, false, false, a_ * d_, h_, Shard::kRows);
    t.w_fc1 = weight("fc1.w", kFc1, false, false, h_, f1_, fc1_shard);
    t.w_fc2 = weight("fc2.w", kFc2, false, false, f_, h_, Shard::kRows);
    t.w_ln1 = weight("ln1.w", kLn1, true, false, 1, h_, Shard::kReplicated);
    t.w_ln2 = weight("ln2.w", kLn2, true, false, 1, h_, Shard::kReplicated);
    t.g_w_qkv = weight("qkv.w.grad", kQkv, false, true, h_, qkv_n_, Shard::kQkvCols, kv);
    t.g_w_proj = weight("proj.w.grad", kProj, false, true, a_ * d_, h_, Shard::kRows);
    t.g_w_fc1 = weight("fc1.w.grad", kFc1, false, true, h_, f1_, fc1_shard);
    t.g_w_fc2 = weight("fc2.w.grad", kFc2, false, true, f_, h_, Shard::kRows);
    // Each rank's norms see its own tokens under SP: their weight gradients are partial sums.
    t.g_w_ln1 = weight("ln1.w.grad", kLn1, true, true, 1, h_, partial);
    t.g_w_ln2 = weight("ln2.w.grad", kLn2, true, true, 1, h_, partial);
    return t;
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
  // Decomposed chunk `chunk` of row slice `slice` of a whole-token tensor: its rows.
  View Piece(int slice, int chunk, int64_t cols) const {
    const int64_t rows = slice_tokens_ / c_;
    const int64_t begin = slice * slice_tokens_ + chunk * rows;
    return View{begin, begin + rows, 0, cols};
  }
  OpTags PieceTags(OpTags tags, int chunk) const {
    tags.chunk = static_cast<int8_t>(c_ > 1 ? chunk : -1);
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

  OpTags Tags(int layer, int slice, int chunk, Phase phase) const {
    OpTags tags;
    tags.layer = static_cast<int16_t>(layer);
    tags.micro_batch = 0;
    tags.row_slice = static_cast<int8_t>(p_ > 1 ? slice : -1);
    tags.col_chunk = static_cast<int8_t>(chunk);
    tags.phase = phase;
    return tags;
  }

  // Appends a compute op; it also waits for whatever the scope says must be done first.
  int32_t Compute(Op op, Deps deps, std::initializer_list<TensorUse> reads,
                  std::initializer_list<TensorUse> writes) {
    op.stream = Stream::kCompute;
    deps.insert(deps.end(), sync_.begin(), sync_.end());
    sync_.clear();
    return last_compute_ = s_.Add(op, deps, std::span(reads.begin(), reads.size()),
                                  std::span(writes.begin(), writes.size()));
  }

  int32_t Gemm(OpFunc func, const OpTags& tags, int64_t m, int64_t n, int64_t k, Deps deps,
               std::initializer_list<TensorUse> reads, std::initializer_list<TensorUse> writes) {
    Op op;
    op.kind = OpKind::kGemm;
    op.func = func;
    op.tags = tags;
    op.m = m, op.n = n, op.k = k;
    op.flops = 2.0 * m * n * k;
    op.bytes = static_cast<double>(m * k + k * n + m * n) * e_;
    return Compute(op, std::move(deps), reads, writes);
  }

  int32_t Elementwise(OpFunc func, const OpTags& tags, double bytes, Deps deps,
                      std::initializer_list<TensorUse> reads,
                      std::initializer_list<TensorUse> writes) {
    Op op;
    op.kind = OpKind::kElementwise;
    op.func = func;
    op.tags = tags;
    op.bytes = bytes;
    return Compute(op, std::move(deps), reads, writes);
  }

  // The attention core of a row slice (a ring attention step with context parallelism: a causal
  // block of the local tokens).
  int32_t Attention(OpFunc func, const OpTags& tags, double flops_factor,
                    std::initializer_list<TensorUse> reads, std::initializer_list<TensorUse> writes,
                    Deps deps = {}) {
    Op op;
    op.kind = OpKind::kAttention;
    op.func = func;
    op.tags = tags;
    op.sequences = plan_.micro_batch / p_;
    op.seq_len = plan_.local_seq_len();
    op.heads = a_, op.kv_heads = g_, op.head_dim = d_;
    op.flops = flops_factor * 4.0 * op.sequences * op.seq_len * op.seq_len * a_ * d_;
    op.bytes = static_cast<double>(slice_tokens_) * (2 * a_ + 2 * g_) * d_ * e_ * flops_factor;
    return Compute(op, std::move(deps), reads, writes);
  }

  // Bytes of one KV block of a row slice: K and V of this rank's kv heads for its local tokens.
  double KvBlockBytes() const { return 2.0 * g_ * d_ * slice_tokens_ * e_; }

  // HBM bytes of the kernels around ring step j of a row slice in Transformer Engine's p2p CP
  // with the causal mask (TransformerEngine v1.11, pytorch/attention.py, AttnFuncWithCPAndKVP2P,
  // the sbhd layout and fused attention), in units of Q (the local queries' output, tokens x
  // heads x head_dim) and KV (KvBlockBytes). A step i > 0 on CP rank r reads half the KV
  // (i <= r: a contiguous copy of it) or half the queries (i > r: copies of q, and backward of out
  // and dout too); f = (cp - i) / cp of the ranks take the first case, and the step is priced at
  // that mean. Forward: step 0 packs K and V into the ring buffer (2 KV), zeroes the output (Q)
  // and merges its partial output (read it and the output, write the output: 3 Q); a step i > 0
  // merges f (KV + 3 Q) + (1 - f) (Q + 1.5 Q). Backward: step 0 copies KV into the ring buffer
  // (2 KV), copies dQ (2 Q), concatenates dK and dV (2 KV) and copies dKV (2 KV); a step i > 0
  // adds f (KV + 3 Q + KV + 1.5 KV) + (1 - f) (3 Q + 1.5 Q + 2 KV + 3 KV).
  double CpMergeBytes(int step, bool backward) const {
    const double q = static_cast<double>(slice_tokens_) * a_ * d_ * e_, kv = KvBlockBytes();
    if (step == 0) return backward ? 6 * kv + 2 * q : 2 * kv + 4 * q;
    const double f = static_cast<double>(cp_ - step) / cp_;
    return backward ? f * (3.5 * kv + 3 * q) + (1 - f) * (5 * kv + 4.5 * q)
                    : f * (kv + 3 * q) + (1 - f) * 2.5 * q;
  }

  // One ring step's transfer on the cp-comm stream: sends `bytes` to the next CP rank and
  // receives as many from the previous one, in place in `buffers` (the KV columns of qkv, and
  // backward those of its gradient).
  int32_t RingTransfer(const OpTags& tags, int step, double bytes, Deps deps,
                       std::initializer_list<TensorUse> buffers) {
    Op op;
    op.kind = OpKind::kSendRecv;
    op.stream = Stream::kCpComm;
    op.func = OpFunc::kCpSendRecv;
    op.group = Group::kCp;
    op.tags = tags;
    op.tags.ring_step = static_cast<int8_t>(step);
    op.bytes = bytes;
    return s_.Add(op, deps, std::span(buffers.begin(), buffers.size()),
                  std::span(buffers.begin(), buffers.size()));
  }

  // The attention core of slice i (forward or recomputed: kAttn; backward: kAttnGrad): one op,
  // or with context parallelism the ring of cp steps described at the top of this file.
  void AttentionCore(OpFunc func, const OpTags& tags, int l, int i) {
    const LayerTensors& t = tensors_[l];
    const bool backward = func == OpFunc::kAttnGrad;
    const double factor = backward ? 2.0 : 1.0;
    if (cp_ == 1) {
      if (backward) {
        Attention(func, tags, factor, {SliceOf(t.qkv, i), SliceOf(t.g_ctx, i)},
                  {SliceOf(t.g_qkv, i)});
      } else {
        Attention(func, tags, factor, {SliceOf(t.qkv, i)}, {SliceOf(t.ctx, i)});
      }
      return;
    }
    const int64_t rows = slice_tokens_;
    const View kv{i * rows, (i + 1) * rows, a_ * d_, qkv_n_};
    int32_t transfer = -1, block = -1;
    for (int j = 0; j < cp_; ++j) {
      OpTags step_tags = tags;
      step_tags.ring_step = static_cast<int8_t>(j);
      if (backward) {
        // Step j sends the KV block for step j+1 and the dKV accumulated through step j-1.
        const double bytes = KvBlockBytes() * (j == 0 || j == cp_ - 1 ? 1 : 2);
        Deps after = j == 0 ? Deps{last_compute_} : Deps{transfer, block};
        const int32_t next =
            RingTransfer(tags, j, bytes, std::move(after), {Use(t.qkv, kv), Use(t.g_qkv, kv)});
        block = Attention(func, step_tags, factor, {SliceOf(t.qkv, i), SliceOf(t.g_ctx, i)},
                          {SliceOf(t.g_qkv, i)}, j == 0 ? Deps{} : Deps{transfer});
        // The next transfer carries the dKV this merge accumulates.
        if (plan_.stack.cp_merge_kernels)
          block = Elementwise(OpFunc::kCpMerge, step_tags, CpMergeBytes(j, true), {},
                              {SliceOf(t.g_qkv, i)}, {SliceOf(t.g_qkv, i)});
        transfer = next;
      } else {
        // Double-buffered: step j's transfer receives into the buffer block j-1 read.
        int32_t next = -1;
        if (j + 1 < cp_)
          next =
              RingTransfer(tags, j, KvBlockBytes(),
                           j == 0 ? Deps{last_compute_} : Deps{transfer, block}, {Use(t.qkv, kv)});
        block = Attention(func, step_tags, factor, {SliceOf(t.qkv, i)}, {SliceOf(t.ctx, i)},
                          j == 0 ? Deps{} : Deps{transfer});
        if (plan_.stack.cp_merge_kernels)
          Elementwise(OpFunc::kCpMerge, step_tags, CpMergeBytes(j, false), {}, {SliceOf(t.ctx, i)},
                      {SliceOf(t.ctx, i)});
        transfer = next;
      }
    }
    // The gradient of this rank's KV arrives with the last transfer.
    if (backward) sync_.push_back(transfer);
  }

  // Appends a TP collective over `bytes` (nccl-tests size) that waits for `producer`. It reads
  // `in` and writes `out` (the same view for an in-place all-reduce): a reduce-scatter reads the
  // whole slice and writes this rank's shard of it, an all-gather the reverse.
  // A part of a decomposed collective moves `bytes` / parts (see Op::part).
  int32_t Collective(OpFunc func, CollectiveOp kind, const OpTags& tags, double bytes,
                     int32_t producer, TensorUse in, TensorUse out, int part = 0, int parts = 1) {
    Op op;
    op.part = static_cast<int16_t>(part);
    op.parts = static_cast<int16_t>(parts);
    bytes /= parts;
    op.kind = OpKind::kCollective;
    op.stream = Stream::kTpComm;
    op.func = func;
    op.collective = kind;
    op.group = Group::kTp;
    op.tags = tags;
    op.bytes = bytes;
    int32_t deps[] = {producer};
    int32_t id = s_.Add(op, deps, std::span(&in, 1), std::span(&out, 1));
    layer_comms_.push_back(id);
    return id;
  }

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

  // Rotary embeddings over row slice i's Q and K (kRope) or their gradients (kRopeGrad), in place
  // on `qkv` (the slice's qkv or its gradient): StackSpec::rope's passes over them (RopeKernel);
  // none when the model has learned positions or the stack runs none. The op carries the
  // attention's shape (its rows are whole local sequences) for the executor's kernel.
  void Rope(OpFunc func, const OpTags& tags, int32_t qkv, int i) {
    if (plan_.model.learned_positions() || plan_.stack.rope == RopeKernel::kNone) return;
    Op op;
    op.kind = OpKind::kElementwise;
    op.func = func;
    op.tags = tags;
    op.bytes = (plan_.stack.rope == RopeKernel::kFused ? 2 : 10) * RowBytes((a_ + g_) * d_);
    op.sequences = plan_.micro_batch / p_;
    op.seq_len = plan_.local_seq_len();
    op.heads = a_, op.kv_heads = g_, op.head_dim = d_;
    Compute(op, {}, {SliceOf(qkv, i)}, {SliceOf(qkv, i)});
  }
  // Bytes of a sequence-parallel all-gather that feeds a layer's linear GEMM: under fp8 the
  // operand is quantized before it is gathered, so the gather moves 1-byte elements (Transformer
  // Engine gathers the fp8 input, and its userbuffers all-gather buffers are fp8: fp8_buf). The LM
  // head's and the embedding gradient's gathers stay 16-bit.
  double LinearGatherBytes() const {
    return plan_.precision == Dtype::kFp8 ? static_cast<double>(slice_tokens_) * h_ : RowBytes(h_);
  }
  // HBM traffic of the loss over this rank's logits (slice_tokens x vocab / tp), per element, as
  // the plan's (or its stack's) CrossEntropy runs it (planner/stack.h). Megatron's vocab-parallel
  // cross-entropy: forward casts the 16-bit logits to an fp32 copy
  // (read e, write 4), then max (read 4), subtract, exp (read and write 4 each), sum (read 4),
  // divide (read and write 4): e + 36 bytes; backward scales the softmax by the loss gradient
  // (read and write 4) and casts it back (read 4, write e): 12 + e. In fp32 the cast is no copy.
  double LossBytes(Phase phase) const {
    const double elements = static_cast<double>(slice_tokens_) * vocab_;
    const double cast = e_ < 4 ? 4 + e_ : 0;
    const bool forward = phase == Phase::kForward;
    switch (plan_.loss_kernels()) {
      case CrossEntropy::kFused:
        return elements * (forward ? e_ : 2 * e_);
      case CrossEntropy::kTe:
        return elements * (forward ? 3 * e_ : 2 * e_);
      case CrossEntropy::kMegatronFused:
        return elements * (forward ? e_ + 20 : 4 + e_);
      case CrossEntropy::kVocabParallel:
        break;
    }
    return elements * (forward ? cast + 32 : cast + 8);
  }
  // Bytes of the residual add after the attention projection and the second MLP linear, over
  // `hb` bytes of activations, as the stack runs it: one fused pass (read both, write; with
  // dropout, a 1-byte mask too), or a bias pass, a dropout pass and an add pass.
  double ResidualBytes(double hb) const {
    const StackSpec& stack = plan_.stack;
    const double mask = stack.dropout ? hb / e_ : 0;
    if (stack.fused_bias_dropout_add) return 3 * hb + mask;
    return (plan_.model.bias ? 2 * hb : 0) + (stack.dropout ? 2 * hb + mask : 0) + 3 * hb;
  }
  // Rows a norm or residual touches: a sequence-parallel shard, or the whole slice.
  double NormRows() const {
    return sp_ ? static_cast<double>(slice_tokens_) / plan_.tp : slice_tokens_;
  }

  // Forward entry of (block, slice): residual add of the previous block's result and the norm.
  // Returns what the block's first GEMM must wait for: the norm, or its all-gather (one part per
  // decomposed chunk, which GEMM piece k waits for).
  Deps ForwardEntry(int l, Block block, int i) {
    const LayerTensors& t = tensors_[l];
    Deps deps = std::move(waits_[i]);
    waits_[i].clear();
    double hb = NormRows() * h_ * e_;
    OpTags tags = Tags(l, i, -1, fwd_phase_);
    int32_t norm;
    if (block == Block::kAttention) {
      if (l > 0 && !recomputing_) {  // a recomputed layer starts from its saved input
        const LayerTensors& prev = tensors_[l - 1];
        Elementwise(
            OpFunc::kResidual2, Tags(l - 1, i, -1, fwd_phase_), ResidualBytes(hb), std::move(deps),
            {SliceOf(prev.mid, i), SliceOf(Reduced(prev.fc2, prev.fc2_s), i)}, {SliceOf(t.x, i)});
        deps = {};
      }
      norm =
          Elementwise(OpFunc::kLn1, tags, 2 * hb, std::move(deps),
                      {SliceOf(t.x, i), WholeOf(t.w_ln1)}, {SliceOf(Reduced(t.ln1, t.ln1_s), i)});
    } else {
      Elementwise(OpFunc::kResidual1, tags, ResidualBytes(hb), std::move(deps),
                  {SliceOf(t.x, i), SliceOf(Reduced(t.proj, t.proj_s), i)}, {SliceOf(t.mid, i)});
      norm = Elementwise(OpFunc::kLn2, tags, 2 * hb, {}, {SliceOf(t.mid, i), WholeOf(t.w_ln2)},
                         {SliceOf(Reduced(t.ln2, t.ln2_s), i)});
    }
    if (!sp_) return {norm};
    bool attn = block == Block::kAttention;
    return GatherParts(tags, norm, SliceOf(attn ? t.ln1_s : t.ln2_s, i), attn ? t.ln1 : t.ln2, i);
  }

  // The all-gather of slice i's shard `in` into `whole`, in c parts (one part: the plain one).
  Deps GatherParts(const OpTags& tags, int32_t producer, TensorUse in, int32_t whole, int i) {
    Deps parts;
    for (int k = 0; k < c_; ++k)
      parts.push_back(Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, PieceTags(tags, k),
                                 LinearGatherBytes(), producer, in, Use(whole, Piece(i, k, h_)), k,
                                 c_));
    return parts;
  }

  // GEMM piece k of a decomposed column-parallel (or input-gradient) GEMM waits for part k.
  static Deps PieceDeps(const Deps& entry, int k) {
    return {entry[std::min<size_t>(k, entry.size() - 1)]};
  }

  // Forward compute of (block, slice) after its entry, ending in the row-parallel GEMM's
  // collective(s), which the slice's next entry waits for.
  void ForwardCompute(int l, Block block, int i, const Deps& entry) {
    const LayerTensors& t = tensors_[l];
    OpTags tags = Tags(l, i, -1, fwd_phase_);
    int32_t in, w_out, out;
    int64_t k;
    // The column-parallel GEMM, in decomposed pieces with SP (one piece otherwise).
    const int pieces = sp_ ? c_ : 1;
    const int64_t piece_rows = slice_tokens_ / pieces;
    if (block == Block::kAttention) {
      for (int j = 0; j < pieces; ++j)
        Gemm(OpFunc::kQkv, PieceTags(tags, j), piece_rows, qkv_n_, h_, PieceDeps(entry, j),
             {Use(t.ln1, Piece(i, j, h_)), WholeOf(t.w_qkv)}, {Use(t.qkv, Piece(i, j, qkv_n_))});
      Rope(OpFunc::kRope, tags, t.qkv, i);
      AttentionCore(OpFunc::kAttn, tags, l, i);
      in = t.ctx, w_out = t.w_proj, out = t.proj, k = a_ * d_;
    } else {
      for (int j = 0; j < pieces; ++j)
        Gemm(OpFunc::kFc1, PieceTags(tags, j), piece_rows, f1_, h_, PieceDeps(entry, j),
             {Use(t.ln2, Piece(i, j, h_)), WholeOf(t.w_fc1)}, {Use(t.fc1, Piece(i, j, f1_))});
      // Read the first linear's output, write the activation; a bias the stack does not fuse
      // into the activation is one more pass over the first linear's output. Squared ReLU
      // unfused is two kernels (Megatron-Core's activations.squared_relu, torch.pow(F.relu(x),
      // 2); its bias_activation_fusion takes only GeLU and SwiGLU): four passes, and its bias
      // always one of its own.
      const bool squared =
          plan_.model.activation == Activation::kSquaredRelu && !plan_.stack.fused_squared_relu;
      double act_bytes = (squared ? 4 * f_ : f1_ + f_) * RowBytes(1);
      if (plan_.model.bias && (squared || !plan_.stack.fused_bias_gelu))
        act_bytes += 2 * f1_ * RowBytes(1);
      Elementwise(OpFunc::kAct, tags, act_bytes, {}, {SliceOf(t.fc1, i)}, {SliceOf(t.act, i)});
      in = t.act, w_out = t.w_fc2, out = t.fc2, k = f_;
    }
    OpFunc func = block == Block::kAttention ? OpFunc::kProj : OpFunc::kFc2;
    if (sp_) {
      // The row-parallel GEMM in pieces, each piece's reduce-scatter part under the next piece.
      int32_t shard = block == Block::kAttention ? t.proj_s : t.fc2_s;
      Deps parts;
      for (int j = 0; j < c_; ++j) {
        OpTags piece_tags = PieceTags(tags, j);
        int32_t gemm = Gemm(func, piece_tags, piece_rows, h_, k, {},
                            {Use(in, Piece(i, j, k)), WholeOf(w_out)}, {Use(out, Piece(i, j, h_))});
        parts.push_back(Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter,
                                   piece_tags, RowBytes(h_), gemm, Use(out, Piece(i, j, h_)),
                                   SliceOf(shard, i), j, c_));
      }
      for (int32_t part : parts) {
        waits_[i].push_back(part);
        SyncIfNoOverlap(part);
      }
      return;
    }
    for (int j = 0; j < q_; ++j) {
      OpTags chunk_tags = Tags(l, i, q_ > 1 ? j : -1, fwd_phase_);
      View w_cols{0, k, j * (h_ / q_), (j + 1) * (h_ / q_)};
      int32_t gemm = Gemm(func, chunk_tags, slice_tokens_, h_ / q_, k, {},
                          {SliceOf(in, i), Use(w_out, w_cols)}, {Use(out, Chunk(i, j, h_))});
      int32_t comm =
          Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, chunk_tags, RowBytes(h_ / q_),
                     gemm, Use(out, Chunk(i, j, h_)), Use(out, Chunk(i, j, h_)));
      waits_[i].push_back(comm);
      SyncIfNoOverlap(comm);
    }
  }

  void ForwardBlock(int l, Block block) {
    if (!sp_) {
      for (int i = 0; i < p_; ++i) ForwardCompute(l, block, i, ForwardEntry(l, block, i));
      return;
    }
    Deps next = ForwardEntry(l, block, 0);
    for (int i = 0; i < p_; ++i) {
      Deps entry = std::move(next);
      if (i + 1 < p_) next = ForwardEntry(l, block, i + 1);
      ForwardCompute(l, block, i, entry);
    }
  }

  // Backward entry of (block, slice): the norm backward (with the residual's gradient) that
  // consumes the previous block's input-gradient collective. With sequence parallelism the
  // gradient is then all-gathered for the row-parallel GEMM (in parts when decomposed). Returns
  // what that GEMM (piece k: element k) waits for.
  Deps BackwardEntry(int l, Block block, int i, bool final = false) {
    Deps deps = std::move(waits_[i]);
    waits_[i].clear();
    double hb = NormRows() * h_ * e_;
    OpTags tags;
    int32_t grad_out, grad_tensor;
    if (block == Block::kMlp && l + 1 >= layers_ && head_grad_[i] >= 0) {
      // The top layer's output gradient comes from the final norm's backward.
      tags = Tags(l, i, -1, Phase::kBackward);
      grad_tensor = out_grad_;
      grad_out = head_grad_[i];
    } else if (block == Block::kMlp && l + 1 >= layers_) {
      // The top layer's output gradient arrives from the loss (or the next stage).
      tags = Tags(l, i, -1, Phase::kBackward);
      grad_tensor = out_grad_;
      grad_out = Elementwise(OpFunc::kResidualGrad, tags, hb, std::move(deps), {},
                             {SliceOf(out_grad_, i)});
    } else if (block == Block::kMlp) {
      // Entering layer l's MLP from layer l+1's attention: ln1 backward of layer l+1, plus the
      // gradient that reached layer l+1's mid through the residual.
      const LayerTensors& up = tensors_[l + 1];
      tags = Tags(l + 1, i, -1, Phase::kBackward);
      grad_tensor = up.g_x;
      grad_out = NormGrad(OpFunc::kLn1Grad, tags, std::move(deps), i, up.x,
                          Reduced(up.g_ln1, up.g_ln1_s), up.w_ln1, up.g_mid, up.g_x, up.g_w_ln1);
    } else {
      const LayerTensors& t = tensors_[l];
      tags = Tags(l, i, -1, Phase::kBackward);
      grad_tensor = final ? t.g_x : t.g_mid;
      grad_out =
          final ? NormGrad(OpFunc::kLn1Grad, tags, std::move(deps), i, t.x,
                           Reduced(t.g_ln1, t.g_ln1_s), t.w_ln1, t.g_mid, t.g_x, t.g_w_ln1)
                : NormGrad(OpFunc::kLn2Grad, tags, std::move(deps), i, t.mid,
                           Reduced(t.g_ln2, t.g_ln2_s), t.w_ln2, OutGrad(l), t.g_mid, t.g_w_ln2);
    }
    if (!sp_ || final) return {grad_out};
    const LayerTensors& t = tensors_[l];
    int32_t full = block == Block::kMlp ? t.g_out_full : t.g_mid_full;
    return GatherParts(tags, grad_out, SliceOf(grad_tensor, i), full, i);
  }

  // Norm backward of slice i: dx = upstream (the gradient through the residual) + the norm's
  // backward of dy at x; the norm weight's gradient accumulates in dw.
  int32_t NormGrad(OpFunc func, const OpTags& tags, Deps deps, int i, int32_t x, int32_t dy,
                   int32_t w, int32_t upstream, int32_t dx, int32_t dw) {
    return Elementwise(func, tags, 5 * NormRows() * h_ * e_, std::move(deps),
                       {SliceOf(x, i), SliceOf(dy, i), WholeOf(w), SliceOf(upstream, i)},
                       {SliceOf(dx, i), WholeOf(dw)});
  }

  void BackwardCompute(int l, Block block, int i, const Deps& entry) {
    const LayerTensors& t = tensors_[l];
    OpTags tags = Tags(l, i, -1, Phase::kBackward);
    bool attn = block == Block::kAttention;
    // Row-parallel GEMM (proj or fc2): input gradient (in decomposed pieces with SP, piece k under
    // the gradient's all-gather part k+1), then weight gradient. No collective of its own.
    int64_t k_in = attn ? a_ * d_ : f_;
    int32_t grad_y = attn ? Reduced(t.g_mid, t.g_mid_full) : Reduced(OutGrad(l), t.g_out_full);
    int32_t x_in = attn ? t.ctx : t.act, g_in = attn ? t.g_ctx : t.g_act;
    const int pieces = sp_ ? c_ : 1;
    for (int j = 0; j < pieces; ++j)
      Gemm(attn ? OpFunc::kProjGradInput : OpFunc::kFc2GradInput, PieceTags(tags, j),
           slice_tokens_ / pieces, k_in, h_, PieceDeps(entry, j),
           {Use(grad_y, Piece(i, j, h_)), WholeOf(attn ? t.w_proj : t.w_fc2)},
           {Use(g_in, Piece(i, j, k_in))});
    Gemm(attn ? OpFunc::kProjGradWeight : OpFunc::kFc2GradWeight, tags, k_in, h_, slice_tokens_, {},
         {SliceOf(x_in, i), SliceOf(grad_y, i)}, {WholeOf(attn ? t.g_w_proj : t.g_w_fc2)});
    // Middle: attention core or activation backward.
    if (attn) {
      if (plan_.recompute == Recompute::kSelective)  // the attention core, not kept in forward
        AttentionCore(OpFunc::kAttn, Tags(l, i, -1, Phase::kRecompute), l, i);
      AttentionCore(OpFunc::kAttnGrad, tags, l, i);
      Rope(OpFunc::kRopeGrad, tags, t.g_qkv, i);
    } else {
      // Unfused squared ReLU's autograd: pow's backward, grad * (2 * r.pow(1)), three kernels
      // (seven passes: PyTorch's pow_backward), then relu's threshold_backward (three).
      const bool squared =
          plan_.model.activation == Activation::kSquaredRelu && !plan_.stack.fused_squared_relu;
      double bytes = (squared ? 10 * f_ : 2 * f1_ + f_) * RowBytes(1);
      Elementwise(OpFunc::kActGrad, tags, bytes, {}, {SliceOf(t.fc1, i), SliceOf(t.g_act, i)},
                  {SliceOf(t.g_fc1, i)});
    }
    // Column-parallel GEMM (qkv or fc1): input gradient in column chunks, each followed by its
    // collective; then the weight gradient, which runs under them.
    int64_t n_out = attn ? qkv_n_ : f1_;
    int32_t g_out = attn ? t.g_qkv : t.g_fc1, w = attn ? t.w_qkv : t.w_fc1;
    int32_t g_norm = attn ? t.g_ln1 : t.g_ln2, norm_out = attn ? t.ln1 : t.ln2;
    int32_t g_norm_s = attn ? t.g_ln1_s : t.g_ln2_s, norm_s = attn ? t.ln1_s : t.ln2_s;
    int32_t gather = -1;
    if (sp_) {
      // The weight gradient needs the whole norm output, which SP keeps only as shards (Megatron
      // gathers it again rather than keep it from the forward pass).
      int32_t last = static_cast<int32_t>(s_.size()) - 1;
      gather = Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, tags, LinearGatherBytes(),
                          last, SliceOf(norm_s, i), SliceOf(norm_out, i));
    }
    std::vector<int32_t> comms;
    for (int j = 0; j < q_; ++j) {
      OpTags chunk_tags = Tags(l, i, q_ > 1 ? j : -1, Phase::kBackward);
      View w_rows{j * (h_ / q_), (j + 1) * (h_ / q_), 0, n_out};
      int32_t gemm = Gemm(attn ? OpFunc::kQkvGradInput : OpFunc::kFc1GradInput, chunk_tags,
                          slice_tokens_, h_ / q_, n_out, {}, {SliceOf(g_out, i), Use(w, w_rows)},
                          {Use(g_norm, Chunk(i, j, h_))});
      comms.push_back(sp_ ? Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter,
                                       chunk_tags, RowBytes(h_), gemm, SliceOf(g_norm, i),
                                       SliceOf(g_norm_s, i))
                          : Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, chunk_tags,
                                       RowBytes(h_ / q_), gemm, Use(g_norm, Chunk(i, j, h_)),
                                       Use(g_norm, Chunk(i, j, h_))));
    }
    Deps wgrad_deps;
    if (gather >= 0) wgrad_deps.push_back(gather);
    Gemm(attn ? OpFunc::kQkvGradWeight : OpFunc::kFc1GradWeight, tags, h_, n_out, slice_tokens_,
         std::move(wgrad_deps), {SliceOf(norm_out, i), SliceOf(g_out, i)},
         {WholeOf(attn ? t.g_w_qkv : t.g_w_fc1)});
    for (int32_t comm : comms) {
      waits_[i].push_back(comm);
      SyncIfNoOverlap(comm);
    }
  }

  void BackwardBlock(int l, Block block) {
    if (!sp_) {
      for (int i = 0; i < p_; ++i) BackwardCompute(l, block, i, BackwardEntry(l, block, i));
      return;
    }
    Deps next = BackwardEntry(l, block, 0);
    for (int i = 0; i < p_; ++i) {
      Deps entry = std::move(next);
      if (i + 1 < p_) next = BackwardEntry(l, block, i + 1);
      BackwardCompute(l, block, i, entry);
    }
  }

  // Full recompute: layer l's forward again (from its saved input), just before its backward.
  // The backward's pending collectives are set aside meanwhile; the recomputed forward's last
  // collectives join them, so the backward entry also waits for the recomputed layer.
  void RecomputeLayer(int l) {
    std::vector<Deps> backward_waits = std::move(waits_);
    waits_.assign(p_, {});
    fwd_phase_ = Phase::kRecompute;
    recomputing_ = true;
    ForwardBlock(l, Block::kAttention);
    ForwardBlock(l, Block::kMlp);
    recomputing_ = false;
    fwd_phase_ = Phase::kForward;
    for (int i = 0; i < p_; ++i)
      backward_waits[i].insert(backward_waits[i].end(), waits_[i].begin(), waits_[i].end());
    waits_ = std::move(backward_waits);
  }

  // The word embedding's table (vocabulary-major: this rank's vocab_ rows of hidden columns), the
  // tokens it looks up and, with sequence parallelism, the whole gradient of the first layer's
  // input that its backward all-gathers. With tied embeddings the LM head reads the same table.
  void MakeEmbeddingTensors() {
    using enum TensorSlot;
    TensorRole table = Role(TensorKind::kWeight, kEmbedding, -1);
    w_embed_ = AddTensor("embed.w", vocab_, h_, Shard::kRows, 0, table);
    table.gradient = true;
    g_w_embed_ = AddTensor("embed.w.grad", vocab_, h_, Shard::kRows, 0, table);
    if (!options_.embedding) return;
    tokens_in_ = AddTensor("tokens", tokens_, 1, Shard::kReplicated, 0,
                           Role(TensorKind::kInput, kEmbedding, -1));
    if (sp_)
      g_x_full_ = AddTensor("l0.x.grad.full", tokens_, h_, Shard::kReplicated, 0,
                            Grad(kX, 0, TensorForm::kGathered));
  }

  void MakeHeadTensors() {
    using enum TensorSlot;
    const int top = layers_ - 1;
    // The head's tensors belong to no layer, except the top layer's output (its input).
    head_x_ = ResidualTensor("final.x", Act(kOut, top));
    head_ln_ = AddTensor("final.ln", tokens_, h_, Shard::kReplicated, 0, Act(kFinalNorm, -1));
    head_ln_s_ =
        sp_ ? ResidualTensor("final.ln.shard", Act(kFinalNorm, -1, TensorForm::kSequenceShard))
            : -1;
    w_final_norm_ = AddTensor("final_norm.w", 1, h_, Shard::kReplicated, 0,
                              Role(TensorKind::kNormWeight, kFinalNorm, -1));
    // Each rank's norm sees its own tokens under SP: the gain's gradient is a partial sum.
    g_w_final_norm_ =
        AddTensor("final_norm.w.grad", 1, h_, sp_ ? Shard::kPartialSum : Shard::kReplicated, 0,
                  Role(TensorKind::kNormWeight, kFinalNorm, -1, true));
    logits_ = AddTensor("logits", tokens_, vocab_, Shard::kCols, 0, Act(kLmHead, -1));
    g_logits_ = AddTensor("logits.grad", tokens_, vocab_, Shard::kCols, 0, Grad(kLmHead, -1));
    g_head_ln_ = AddTensor("final.ln.grad", tokens_, h_,
                           sp_ ? Shard::kPartialSum : Shard::kReplicated, 0, Grad(kFinalNorm, -1));
    g_head_ln_s_ = sp_ ? ResidualTensor("final.ln.grad.shard",
                                        Grad(kFinalNorm, -1, TensorForm::kSequenceShard))
                       : -1;
    labels_ = AddTensor("labels", tokens_, 1, Shard::kReplicated, 0,
                        Role(TensorKind::kInput, kLmHead, -1));
    // Per token: column r holds TP rank r's log-sum-exp over its vocabulary part, column tp the
    // label's logit (on the rank that holds it, 0 elsewhere); whole on every rank after the
    // all-reduce.
    loss_ = AddTensor("loss", tokens_, plan_.tp + 1, Shard::kReplicated, 0,
                      Role(TensorKind::kLoss, kLmHead, -1));
    if (plan_.model.tied_embeddings) {
      w_head_ = w_embed_, g_w_head_ = g_w_embed_;
      return;
    }
    // Vocabulary-major like the embedding: rank r holds the weights of its vocab_ logits.
    w_head_ =
        AddTensor("lm_head.w", vocab_, h_, Shard::kRows, 0, Role(TensorKind::kWeight, kLmHead, -1));
    g_w_head_ = AddTensor("lm_head.w.grad", vocab_, h_, Shard::kRows, 0,
                          Role(TensorKind::kWeight, kLmHead, -1, true));
  }

  // Vocab-parallel embedding of slice i: each rank looks up the tokens of its vocabulary part
  // (others contribute zero rows), then the partial rows are summed over TP (reduce-scattered
  // with SP) into layer 0's input.
  void EmbeddingForward(int i) {
    OpTags tags = Tags(0, i, -1, Phase::kForward);
    const LayerTensors& t = tensors_[0];
    TensorRole role = Act(TensorSlot::kEmbedding, -1);
    role.slice = static_cast<int8_t>(i);
    int32_t partial =
        AddTensor(fmt::format("embed.s{}", i), slice_tokens_, h_, Shard::kPartialSum, 0, role);
    TensorUse whole{partial, View{0, slice_tokens_, 0, h_}};
    int32_t lookup = Elementwise(OpFunc::kEmbed, tags, 2 * RowBytes(h_), {},
                                 {SliceOf(tokens_in_, i), WholeOf(w_embed_)}, {whole});
    int32_t comm = sp_ ? Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter, tags,
                                    RowBytes(h_), lookup, whole, SliceOf(t.x, i))
                       : Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, tags,
                                    RowBytes(h_), lookup, whole, SliceOf(t.x, i));
    waits_[i].push_back(comm);
    SyncIfNoOverlap(comm);
  }

  // Slice i's embedding gradient, after `grad` wrote the first layer's input gradient: each rank
  // adds the rows of the tokens in its vocabulary part. With SP the gradient is a sequence shard
  // and is all-gathered first (the backward of the forward's reduce-scatter).
  void EmbeddingBackward(int i, int32_t grad) {
    OpTags tags = Tags(0, i, -1, Phase::kBackward);
    const LayerTensors& t = tensors_[0];
    int32_t dy = t.g_x;
    if (sp_) {
      grad = Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, tags, RowBytes(h_), grad,
                        SliceOf(t.g_x, i), SliceOf(g_x_full_, i));
      dy = g_x_full_;
    }
    Elementwise(OpFunc::kEmbedGrad, tags, 2 * RowBytes(h_), {grad},
                {SliceOf(tokens_in_, i), SliceOf(dy, i)}, {WholeOf(g_w_embed_)});
  }

  // Slice i's final residual add, final norm, LM head (vocab-parallel columns) and cross-entropy.
  // Megatron all-reduces the logits' maximum, then the label's logit and the sum of exponentials
  // (three all-reduces of one float per token); here each rank's log-sum-exp over its own
  // vocabulary part and the label's logit take one all-reduce of tp + 1 floats per token (each
  // rank fills its own column), from which every rank combines the same stable log-sum-exp: the
  // same loss in one collective. The loss gradient waits for it.
  void HeadForward(int i) {
    const int l = layers_ - 1;
    const LayerTensors& t = tensors_[l];
    OpTags tags = Tags(l, i, -1, Phase::kForward);
    Deps deps = std::move(waits_[i]);
    waits_[i].clear();
    const double hb = NormRows() * h_ * e_;
    Elementwise(OpFunc::kResidual2, tags, ResidualBytes(hb), std::move(deps),
                {SliceOf(t.mid, i), SliceOf(Reduced(t.fc2, t.fc2_s), i)}, {SliceOf(head_x_, i)});
    int32_t norm = Elementwise(OpFunc::kFinalNorm, tags, 2 * hb, {},
                               {SliceOf(head_x_, i), WholeOf(w_final_norm_)},
                               {SliceOf(Reduced(head_ln_, head_ln_s_), i)});
    if (sp_)
      norm = Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, tags, RowBytes(h_), norm,
                        SliceOf(head_ln_s_, i), SliceOf(head_ln_, i));
    Gemm(OpFunc::kLmHead, tags, slice_tokens_, vocab_, h_, {norm},
         {SliceOf(head_ln_, i), WholeOf(w_head_)}, {SliceOf(logits_, i)});
    int32_t loss = Elementwise(OpFunc::kLoss, tags, LossBytes(Phase::kForward), {},
                               {SliceOf(logits_, i), SliceOf(labels_, i)}, {SliceOf(loss_, i)});
    int32_t comm = Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, tags,
                              static_cast<double>(slice_tokens_) * (plan_.tp + 1) * 4, loss,
                              SliceOf(loss_, i), SliceOf(loss_, i));
    loss_comm_[i] = comm;
    SyncIfNoOverlap(comm);
  }

  // Slice i's loss gradient, LM head input gradient (all-reduced over TP, or reduce-scattered
  // with SP) and weight gradient, then the final norm's backward into the top layer's output
  // gradient. The weight-gradient GEMM runs under the collective.
  void HeadBackward(int i) {
    const int l = layers_ - 1;
    OpTags tags = Tags(l, i, -1, Phase::kBackward);
    Deps after_loss;
    if (loss_comm_[i] >= 0) after_loss.push_back(loss_comm_[i]);
    Elementwise(OpFunc::kLossGrad, tags, LossBytes(Phase::kBackward), std::move(after_loss),
                {SliceOf(logits_, i), SliceOf(labels_, i), SliceOf(loss_, i)},
                {SliceOf(g_logits_, i)});
    int32_t dgrad = Gemm(OpFunc::kLmHeadGradInput, tags, slice_tokens_, h_, vocab_, {},
                         {SliceOf(g_logits_, i), WholeOf(w_head_)}, {SliceOf(g_head_ln_, i)});
    int32_t comm =
        sp_ ? Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter, tags, RowBytes(h_),
                         dgrad, SliceOf(g_head_ln_, i), SliceOf(g_head_ln_s_, i))
            : Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, tags, RowBytes(h_), dgrad,
                         SliceOf(g_head_ln_, i), SliceOf(g_head_ln_, i));
    Gemm(OpFunc::kLmHeadGradWeight, tags, h_, vocab_, slice_tokens_, {},
         {SliceOf(g_logits_, i), SliceOf(head_ln_, i)}, {WholeOf(g_w_head_)});
    const double hb = NormRows() * h_ * e_;
    head_grad_[i] = Elementwise(OpFunc::kFinalNormGrad, tags, 5 * hb, {comm},
                                {SliceOf(head_x_, i), SliceOf(Reduced(g_head_ln_, g_head_ln_s_), i),
                                 WholeOf(w_final_norm_)},
                                {SliceOf(out_grad_, i), WholeOf(g_w_final_norm_)});
  }

  const Plan& plan_;
  LowerOptions options_;
  int p_, q_, layers_;
  bool sp_;
  int c_;   // decomposed-overlap chunks (1: none)
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

}  // namespace

Result<Schedule> Lower(const Plan& plan) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  return Lowering(plan, {}).Run();
}

Result<Schedule> LowerStage(const Plan& plan, const LowerOptions& options) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  if (options.layers == 0 || options.layers > plan.model.layers)
    return Error(
        fmt::format("a pipeline chunk of {} layers of {}", options.layers, plan.model.layers));
  return Lowering(plan, options).Run();
}

}  // namespace domino
