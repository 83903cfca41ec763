#include "planner/lower.h"

#include <fmt/format.h>

#include <initializer_list>
#include <vector>

#include "planner/lowering.h"

namespace domino {
namespace lowering {

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
// that feeds or drains a GEMM, and that GEMM, into pieces of the slice's rows: the all-gather
// before QKV and fc1 (and, backward, the gradient's before the proj and fc2 input-gradient GEMMs)
// in c parts, GEMM piece k waiting only for part k, so part k+1 moves while piece k computes; the
// proj and fc2 GEMMs in rc pieces (Plan::decomposed_rs_chunks: Transformer Engine pipelines them
// in 4 whatever tp is), each piece's reduce-scatter part running under the next piece.
// Only the last reduce-scatter part has nothing left to hide behind. Scope none then makes the
// next compute op wait for all of a block's parts, not for each: the pieces are one GEMM. With
// c = rc = 1 the schedule is plain sequence parallelism, op for op.
//
// Context parallelism turns the attention core into ring attention: lower_attention.cc.

Lowering::Lowering(const Plan& plan, const LowerOptions& options)
    : plan_(plan),
      options_(options),
      p_(plan.row_split),
      q_(plan.col_split),
      layers_(options.layers > 0 ? options.layers : plan.model.layers / plan.pp),
      sp_(plan.sequence_parallel),
      c_(plan.decomposed_chunks()),
      rc_(plan.decomposed_rs_chunks()),
      cp_(plan.cp),
      scope_(plan.scope) {
  const ModelSpec& m = plan.model;
  int t = plan.tp;
  h_ = m.hidden;
  d_ = m.head_width();
  a_ = m.heads / t;
  g_ = m.kv_heads / t;
  f_ = m.ffn / t;
  f1_ = Gated(m.activation) ? 2 * f_ : f_;
  qkv_n_ = (a_ + 2 * g_) * d_;
  e_ = DtypeBytes(plan.precision == Dtype::kFp8 ? Dtype::kBf16 : plan.precision);
  tokens_ = static_cast<int64_t>(plan.micro_batch) * plan.local_seq_len();
  slice_tokens_ = tokens_ / p_;
  // Megatron pads the vocabulary to a multiple of 128 per TP rank.
  vocab_ = (m.vocab + 128 * t - 1) / (128 * t) * 128;
  waits_.assign(p_, {});
}

Schedule Lowering::Run() {
  // A layer's ops per row slice: about 24, 8 more per column chunk, and the pieces of its
  // decomposed collectives and GEMMs; about 40 tensors (SP's shards among them), a few more per
  // row slice at the ends.
  s_.Reserve(static_cast<size_t>(layers_) * p_ * (24 + 8 * q_ + 6 * (c_ + rc_ - 2)),
             static_cast<size_t>(layers_) * 40 + 16 + 2 * p_);
  for (int l = 0; l < layers_; ++l) tensors_.push_back(MakeTensors(l));
  out_grad_ = ResidualTensor(Grad(TensorSlot::kOut, layers_ - 1));
  if (options_.embedding || (options_.head && plan_.model.tied_embeddings)) MakeEmbeddingTensors();
  if (options_.head) MakeHeadTensors();
  if (options_.forward) {
    if (options_.embedding)
      for (int i = 0; i < p_; ++i) EmbeddingForward(i);
    for (int l = 0; l < layers_; ++l) {
      Barrier();
      ForwardBlock(l, Block::kAttention);
      ForwardBlock(l, Block::kMlp);
    }
    // A stack without the head hands its top layer's mid and MLP output to the next stage, which
    // adds them (exec/step.h): with post-norms, the MLP output normalized.
    if (!options_.head && plan_.model.post_norms) {
      const LayerTensors& top = tensors_[layers_ - 1];
      for (int i = 0; i < p_; ++i) {
        Deps deps = std::move(waits_[i]);
        waits_[i].clear();
        PostNorm(OpFunc::kPostNorm2, Tags(layers_ - 1, i, -1, fwd_phase_), deps,
                 Reduced(top.fc2, top.fc2_s), top.w_post2, top.post2, i);
      }
    }
    AmaxReduction(Phase::kForward);
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
    AmaxReduction(Phase::kBackward);
  }
  return std::move(s_);
}

OpTags Lowering::Tags(int layer, int slice, int chunk, Phase phase) const {
  OpTags tags;
  tags.layer = static_cast<int16_t>(layer);
  tags.micro_batch = 0;
  tags.row_slice = static_cast<int8_t>(p_ > 1 ? slice : -1);
  tags.col_chunk = static_cast<int8_t>(chunk);
  tags.phase = phase;
  return tags;
}

// Appends a compute op; it also waits for whatever the scope says must be done first.
int32_t Lowering::Compute(Op op, Deps deps, std::initializer_list<TensorUse> reads,
                          std::initializer_list<TensorUse> writes) {
  op.stream = Stream::kCompute;
  deps.insert(deps.end(), sync_.begin(), sync_.end());
  sync_.clear();
  return last_compute_ = s_.Add(op, deps, std::span(reads.begin(), reads.size()),
                                std::span(writes.begin(), writes.size()));
}

int32_t Lowering::Gemm(OpFunc func, const OpTags& tags, int64_t m, int64_t n, int64_t k, Deps deps,
                       std::initializer_list<TensorUse> reads,
                       std::initializer_list<TensorUse> writes) {
  Op op;
  op.kind = OpKind::kGemm;
  op.func = func;
  op.tags = tags;
  op.m = m, op.n = n, op.k = k;
  op.flops = 2.0 * m * n * k;
  op.bytes = static_cast<double>(m * k + k * n + m * n) * e_;
  return Compute(op, std::move(deps), reads, writes);
}

int32_t Lowering::Elementwise(OpFunc func, const OpTags& tags, double bytes, Deps deps,
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
Op Lowering::AttentionOp(OpFunc func, const OpTags& tags, double flops_factor) const {
  Op op;
  op.kind = OpKind::kAttention;
  op.func = func;
  op.tags = tags;
  op.sequences = plan_.micro_batch / p_;
  op.seq_len = plan_.local_seq_len();
  op.heads = a_, op.kv_heads = g_, op.head_dim = d_;
  if (tags.layer >= 0 && tags.layer < options_.windowed_layers)
    op.window = plan_.model.window.tokens;
  op.flops = flops_factor * 4.0 * op.sequences * op.seq_len * op.seq_len * a_ * d_;
  op.bytes = static_cast<double>(slice_tokens_) * (2 * a_ + 2 * g_) * d_ * e_ * flops_factor;
  return op;
}

int32_t Lowering::Attention(OpFunc func, const OpTags& tags, double flops_factor,
                            std::initializer_list<TensorUse> reads,
                            std::initializer_list<TensorUse> writes, Deps deps) {
  return Compute(AttentionOp(func, tags, flops_factor), std::move(deps), reads, writes);
}

// Appends a TP collective over `bytes` (nccl-tests size) that waits for `producer`. It reads
// `in` and writes `out` (the same view for an in-place all-reduce): a reduce-scatter reads the
// whole slice and writes this rank's shard of it, an all-gather the reverse.
// A part of a decomposed collective moves `bytes` / parts (see Op::part).
int32_t Lowering::Collective(OpFunc func, CollectiveOp kind, const OpTags& tags, double bytes,
                             int32_t producer, TensorUse in, TensorUse out, int part, int parts) {
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

// Forward entry of (block, slice): residual add of the previous block's result and the norm.
// Returns what the block's first GEMM must wait for: the norm, or its all-gather (one part per
// decomposed chunk, which GEMM piece k waits for).
Lowering::Deps Lowering::ForwardEntry(int l, Block block, int i) {
  const LayerTensors& t = tensors_[l];
  Deps deps = std::move(waits_[i]);
  waits_[i].clear();
  double hb = NormRows() * h_ * e_;
  OpTags tags = Tags(l, i, -1, fwd_phase_);
  int32_t norm;
  if (block == Block::kAttention) {
    if (l > 0 && !recomputing_) {  // a recomputed layer starts from its saved input
      const LayerTensors& prev = tensors_[l - 1];
      const OpTags prev_tags = Tags(l - 1, i, -1, fwd_phase_);
      const int32_t branch = PostNorm(OpFunc::kPostNorm2, prev_tags, deps,
                                      Reduced(prev.fc2, prev.fc2_s), prev.w_post2, prev.post2, i);
      Elementwise(OpFunc::kResidual2, prev_tags, ResidualBytes(hb, false), std::move(deps),
                  {SliceOf(prev.mid, i), SliceOf(branch, i)}, {SliceOf(t.x, i)});
      deps = {};
    }
    norm = Elementwise(OpFunc::kLn1, tags, 2 * hb, std::move(deps),
                       {SliceOf(t.x, i), WholeOf(t.w_ln1)}, {SliceOf(Reduced(t.ln1, t.ln1_s), i)});
  } else {
    const int32_t branch =
        PostNorm(OpFunc::kPostNorm1, tags, deps, Reduced(t.proj, t.proj_s), t.w_post1, t.post1, i);
    Elementwise(OpFunc::kResidual1, tags, ResidualBytes(hb, true), std::move(deps),
                {SliceOf(t.x, i), SliceOf(branch, i)}, {SliceOf(t.mid, i)});
    norm = Elementwise(OpFunc::kLn2, tags, 2 * hb, {}, {SliceOf(t.mid, i), WholeOf(t.w_ln2)},
                       {SliceOf(Reduced(t.ln2, t.ln2_s), i)});
  }
  if (!sp_) return {norm};
  bool attn = block == Block::kAttention;
  norm = TpAmaxReduction(tags, norm);
  return GatherParts(tags, norm, SliceOf(attn ? t.ln1_s : t.ln2_s, i), attn ? t.ln1 : t.ln2, i);
}

int32_t Lowering::PostNorm(OpFunc func, const OpTags& tags, Deps& deps, int32_t out, int32_t gain,
                           int32_t normed, int i) {
  if (!plan_.model.post_norms) return out;
  Elementwise(func, tags, 2 * NormRows() * h_ * e_, std::move(deps),
              {SliceOf(out, i), WholeOf(gain)}, {SliceOf(normed, i)});
  deps = {};
  return normed;
}

int32_t Lowering::PostNormGrad(OpFunc func, const OpTags& tags, int32_t producer, int32_t out,
                               int32_t gain, int32_t dy, int32_t dx, int32_t dw, int i) {
  if (!plan_.model.post_norms) return producer;
  return Elementwise(func, tags, 3 * NormRows() * h_ * e_, {producer},
                     {SliceOf(out, i), SliceOf(dy, i), WholeOf(gain)},
                     {SliceOf(dx, i), WholeOf(dw)});
}

// The all-gather of slice i's shard `in` into `whole`, in c parts (one part: the plain one).
Lowering::Deps Lowering::GatherParts(const OpTags& tags, int32_t producer, TensorUse in,
                                     int32_t whole, int i) {
  Deps parts;
  for (int k = 0; k < c_; ++k)
    parts.push_back(Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, PieceTags(tags, k),
                               LinearGatherBytes(), producer, in, Use(whole, Piece(i, k, h_)), k,
                               c_));
  return parts;
}

// Forward compute of (block, slice) after its entry, ending in the row-parallel GEMM's
// collective(s), which the slice's next entry waits for.
void Lowering::ForwardCompute(int l, Block block, int i, const Deps& entry) {
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
    QkNorm(tags, t, i);
    Rope(OpFunc::kRope, tags, t.qkv, i);
    CopiesAroundAttention(OpFunc::kAttnCopy, tags, t.qkv, i);
    AttentionCore(OpFunc::kAttn, tags, l, i);
    CopiesAroundAttention(OpFunc::kAttnCopy, tags, t.ctx, i, /*after_core=*/true);
    in = t.ctx, w_out = t.w_proj, out = t.proj, k = a_ * d_;
  } else {
    for (int j = 0; j < pieces; ++j)
      Gemm(OpFunc::kFc1, PieceTags(tags, j), piece_rows, f1_, h_, PieceDeps(entry, j),
           {Use(t.ln2, Piece(i, j, h_)), WholeOf(t.w_fc1)}, {Use(t.fc1, Piece(i, j, f1_))});
    // Read the first linear's output, write the activation; a bias the stack does not fuse
    // into the activation is one more pass over the first linear's output. Squared ReLU
    // unfused is two kernels (Megatron-Core's activations.squared_relu, torch.pow(F.relu(x),
    // 2); its bias_activation_fusion takes only GeLU and SwiGLU): four passes, and its bias
    // always one of its own. GeGLU unfused is seven (UnfusedGegluPasses), its bias its own too.
    const bool squared =
        plan_.model.activation == Activation::kSquaredRelu && !plan_.stack.fused_squared_relu;
    const bool geglu = UnfusedGeglu();
    double act_bytes = (squared ? 4 * f_
                        : geglu ? UnfusedGegluPasses(Phase::kForward) * f_
                                : f1_ + f_) *
                       RowBytes(1);
    if (plan_.model.bias && (squared || geglu || !plan_.stack.fused_bias_gelu))
      act_bytes += 2 * f1_ * RowBytes(1);
    Elementwise(OpFunc::kAct, tags, act_bytes, {}, {SliceOf(t.fc1, i)}, {SliceOf(t.act, i)});
    in = t.act, w_out = t.w_fc2, out = t.fc2, k = f_;
  }
  OpFunc func = block == Block::kAttention ? OpFunc::kProj : OpFunc::kFc2;
  if (sp_) {
    // The row-parallel GEMM in rc pieces, each piece's reduce-scatter part under the next piece.
    int32_t shard = block == Block::kAttention ? t.proj_s : t.fc2_s;
    Deps parts;
    for (int j = 0; j < rc_; ++j) {
      OpTags piece_tags = PieceTags(tags, j, rc_);
      int32_t gemm =
          Gemm(func, piece_tags, slice_tokens_ / rc_, h_, k, {},
               {Use(in, Piece(i, j, k, rc_)), WholeOf(w_out)}, {Use(out, Piece(i, j, h_, rc_))});
      parts.push_back(Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter, piece_tags,
                                 RowBytes(h_), gemm, Use(out, Piece(i, j, h_, rc_)),
                                 SliceOf(shard, i), j, rc_));
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

void Lowering::ForwardBlock(int l, Block block) {
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
Lowering::Deps Lowering::BackwardEntry(int l, Block block, int i, bool final) {
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
    grad_out =
        Elementwise(OpFunc::kResidualGrad, tags, hb, std::move(deps), {}, {SliceOf(out_grad_, i)});
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
    grad_out = final
                   ? NormGrad(OpFunc::kLn1Grad, tags, std::move(deps), i, t.x,
                              Reduced(t.g_ln1, t.g_ln1_s), t.w_ln1, t.g_mid, t.g_x, t.g_w_ln1)
                   : NormGrad(OpFunc::kLn2Grad, tags, std::move(deps), i, t.mid,
                              Reduced(t.g_ln2, t.g_ln2_s), t.w_ln2, OutGrad(l), t.g_mid, t.g_w_ln2);
  }
  const LayerTensors& t = tensors_[l];
  // The branch's dropout's backward, then a post-norm's, turn the residual gradient into the
  // branch's (BranchGradient).
  if (!final) {
    const bool mlp = block == Block::kMlp;
    if (const int32_t dropped = mlp ? t.g_drop2 : t.g_drop1; dropped >= 0) {
      grad_out = Elementwise(mlp ? OpFunc::kDropout2Grad : OpFunc::kDropout1Grad,
                             Tags(l, i, -1, Phase::kBackward), BranchGradBytes(hb, !mlp),
                             {grad_out}, {SliceOf(grad_tensor, i)}, {SliceOf(dropped, i)});
      grad_tensor = dropped;
    }
    grad_out = PostNormGrad(mlp ? OpFunc::kPostNorm2Grad : OpFunc::kPostNorm1Grad,
                            Tags(l, i, -1, Phase::kBackward), grad_out,
                            mlp ? Reduced(t.fc2, t.fc2_s) : Reduced(t.proj, t.proj_s),
                            mlp ? t.w_post2 : t.w_post1, grad_tensor, mlp ? t.g_post2 : t.g_post1,
                            mlp ? t.g_w_post2 : t.g_w_post1, i);
    grad_tensor = BranchGradient(l, !mlp);
  }
  if (!sp_ || final) return {grad_out};
  int32_t full = block == Block::kMlp ? t.g_out_full : t.g_mid_full;
  grad_out = TpAmaxReduction(tags, grad_out);
  return GatherParts(tags, grad_out, SliceOf(grad_tensor, i), full, i);
}

void Lowering::BackwardCompute(int l, Block block, int i, const Deps& entry) {
  const LayerTensors& t = tensors_[l];
  OpTags tags = Tags(l, i, -1, Phase::kBackward);
  bool attn = block == Block::kAttention;
  // Row-parallel GEMM (proj or fc2): input gradient (in decomposed pieces with SP, piece k under
  // the gradient's all-gather part k+1), then weight gradient. No collective of its own.
  int64_t k_in = attn ? a_ * d_ : f_;
  int32_t grad_y = Reduced(BranchGradient(l, attn), attn ? t.g_mid_full : t.g_out_full);
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
    QkNormGrad(tags, t, i);
    CopiesAroundAttention(OpFunc::kAttnCopyGrad, tags, t.g_qkv, i);
  } else {
    // Unfused squared ReLU's autograd: pow's backward, grad * (2 * r.pow(1)), three kernels
    // (seven passes: PyTorch's pow_backward), then relu's threshold_backward (three).
    const bool squared =
        plan_.model.activation == Activation::kSquaredRelu && !plan_.stack.fused_squared_relu;
    double bytes = (squared          ? 10 * f_
                    : UnfusedGeglu() ? UnfusedGegluPasses(Phase::kBackward) * f_
                                     : 2 * f1_ + f_) *
                   RowBytes(1);
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
  auto weight_grad = [&] {
    Deps wgrad_deps;
    if (gather >= 0) wgrad_deps.push_back(gather);
    return Gemm(attn ? OpFunc::kQkvGradWeight : OpFunc::kFc1GradWeight, tags, h_, n_out,
                slice_tokens_, std::move(wgrad_deps), {SliceOf(norm_out, i), SliceOf(g_out, i)},
                {WholeOf(attn ? t.g_w_qkv : t.g_w_fc1)});
  };
  auto collective = [&](const OpTags& chunk_tags, int j, int32_t producer) {
    return sp_ ? Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter, chunk_tags,
                            RowBytes(h_), producer, SliceOf(g_norm, i), SliceOf(g_norm_s, i))
               : Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, chunk_tags,
                            RowBytes(h_ / q_), producer, Use(g_norm, Chunk(i, j, h_)),
                            Use(g_norm, Chunk(i, j, h_)));
  };
  // Without the stack's wgrad_overlaps_tp_comm (for fc1 of a row-split layer, also
  // sliced_fc1_wgrad_overlaps_tp_comm), a chunk's collective is launched only after the weight
  // gradient (PyTorch's linear backward computes both gradients before the collective's autograd
  // function runs), so nothing of the block runs under it.
  const bool overlap_wgrad = plan_.stack.wgrad_overlaps_tp_comm &&
                             (attn || p_ == 1 || plan_.stack.sliced_fc1_wgrad_overlaps_tp_comm);
  std::vector<int32_t> gemms, comms;
  for (int j = 0; j < q_; ++j) {
    OpTags chunk_tags = Tags(l, i, q_ > 1 ? j : -1, Phase::kBackward);
    View w_rows{j * (h_ / q_), (j + 1) * (h_ / q_), 0, n_out};
    gemms.push_back(Gemm(attn ? OpFunc::kQkvGradInput : OpFunc::kFc1GradInput, chunk_tags,
                         slice_tokens_, h_ / q_, n_out, {}, {SliceOf(g_out, i), Use(w, w_rows)},
                         {Use(g_norm, Chunk(i, j, h_))}));
    if (overlap_wgrad) comms.push_back(collective(chunk_tags, j, gemms.back()));
  }
  const int32_t wgrad = weight_grad();
  for (int j = 0; j < q_ && !overlap_wgrad; ++j)
    comms.push_back(collective(Tags(l, i, q_ > 1 ? j : -1, Phase::kBackward), j, wgrad));
  for (int32_t comm : comms) {
    waits_[i].push_back(comm);
    SyncIfNoOverlap(comm);
  }
}

void Lowering::BackwardBlock(int l, Block block) {
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
void Lowering::RecomputeLayer(int l) {
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

}  // namespace lowering

TensorRole StackMlpOutputRole(int top, bool sp, bool post_norms) {
  TensorRole role;
  role.kind = TensorKind::kActivation;
  role.layer = static_cast<int16_t>(top);
  role.slot = post_norms ? TensorSlot::kPostNorm2 : TensorSlot::kFc2;
  if (sp && !post_norms) role.form = TensorForm::kSequenceShard;
  return role;
}

Result<Schedule> Lower(const Plan& plan) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  return lowering::Lowering(plan, {}).Run();
}

Result<Schedule> LowerStage(const Plan& plan, const LowerOptions& options) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  if (options.layers == 0 || options.layers > plan.model.layers)
    return Error(
        fmt::format("a pipeline chunk of {} layers of {}", options.layers, plan.model.layers));
  return lowering::Lowering(plan, options).Run();
}

}  // namespace domino
