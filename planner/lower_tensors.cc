// The tensors a lowering declares: each layer's (LayerTensors), the embedding's and the head's,
// with their shapes, shards and roles.

#include <initializer_list>
#include <vector>

#include "planner/lowering.h"

namespace domino::lowering {

LayerTensors Lowering::MakeTensors(int l) {
  LayerTensors t{};
  using enum TensorSlot;
  using F = TensorForm;
  auto act = [&](const TensorRole& role, int64_t cols, Shard shard = Shard::kReplicated,
                 int64_t part = 0) { return AddTensor(tokens_, cols, shard, part, role); };
  // A GEMM weight (`norm`: a norm's gain) or its gradient.
  auto weight = [&](TensorSlot slot, bool norm, bool gradient, int64_t rows, int64_t cols,
                    Shard shard, int64_t part = 0) {
    return AddTensor(rows, cols, shard, part,
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
  t.x = ResidualTensor(Role(x_kind, kX, l)), t.mid = ResidualTensor(Act(kMid, l));
  t.ln1 = act(Act(kLn1, l), h_), t.ln2 = act(Act(kLn2, l), h_);
  t.qkv = act(Act(kQkv, l), qkv_n_, Shard::kQkvCols, kv);
  t.ctx = act(Act(kCtx, l), a_ * d_, Shard::kCols);
  t.proj = act(Act(kProj, l), h_, partial);
  t.fc1 = act(Act(kFc1, l), f1_, fc1_shard);
  t.act = act(Act(kAct, l), f_, Shard::kCols);
  t.fc2 = act(Act(kFc2, l), h_, partial);
  t.g_x = ResidualTensor(Role(x_kind, kX, l, true));
  t.g_mid = ResidualTensor(Grad(kMid, l));
  t.g_ln1 = act(Grad(kLn1, l), h_, partial);
  t.g_ln2 = act(Grad(kLn2, l), h_, partial);
  t.g_qkv = act(Grad(kQkv, l), qkv_n_, Shard::kQkvCols, kv);
  t.g_ctx = act(Grad(kCtx, l), a_ * d_, Shard::kCols);
  t.g_fc1 = act(Grad(kFc1, l), f1_, fc1_shard);
  t.g_act = act(Grad(kAct, l), f_, Shard::kCols);
  t.ln1_s = t.ln2_s = t.proj_s = t.fc2_s = t.g_ln1_s = t.g_ln2_s = -1;
  t.g_mid_full = t.g_out_full = -1;
  if (sp_) {
    t.ln1_s = ResidualTensor(Act(kLn1, l, F::kSequenceShard));
    t.ln2_s = ResidualTensor(Act(kLn2, l, F::kSequenceShard));
    t.proj_s = ResidualTensor(Act(kProj, l, F::kSequenceShard));
    t.fc2_s = ResidualTensor(Act(kFc2, l, F::kSequenceShard));
    t.g_ln1_s = ResidualTensor(Grad(kLn1, l, F::kSequenceShard));
    t.g_ln2_s = ResidualTensor(Grad(kLn2, l, F::kSequenceShard));
    t.g_mid_full = act(Grad(kMid, l, F::kGathered), h_);
    t.g_out_full = act(Grad(kOut, l, F::kGathered), h_);
  }
  t.w_qkv = weight(kQkv, false, false, h_, qkv_n_, Shard::kQkvCols, kv);
  t.w_proj = weight(kProj, false, false, a_ * d_, h_, Shard::kRows);
  t.w_fc1 = weight(kFc1, false, false, h_, f1_, fc1_shard);
  t.w_fc2 = weight(kFc2, false, false, f_, h_, Shard::kRows);
  t.w_ln1 = weight(kLn1, true, false, 1, h_, Shard::kReplicated);
  t.w_ln2 = weight(kLn2, true, false, 1, h_, Shard::kReplicated);
  t.g_w_qkv = weight(kQkv, false, true, h_, qkv_n_, Shard::kQkvCols, kv);
  t.g_w_proj = weight(kProj, false, true, a_ * d_, h_, Shard::kRows);
  t.g_w_fc1 = weight(kFc1, false, true, h_, f1_, fc1_shard);
  t.g_w_fc2 = weight(kFc2, false, true, f_, h_, Shard::kRows);
  // Each rank's norms see its own tokens under SP: their weight gradients are partial sums.
  t.g_w_ln1 = weight(kLn1, true, true, 1, h_, partial);
  t.g_w_ln2 = weight(kLn2, true, true, 1, h_, partial);
  t.post1 = t.post2 = t.g_post1 = t.g_post2 = -1;
  t.w_post1 = t.w_post2 = t.g_w_post1 = t.g_w_post2 = -1;
  if (plan_.model.post_norms) {
    t.post1 = ResidualTensor(Act(kPostNorm1, l)), t.post2 = ResidualTensor(Act(kPostNorm2, l));
    t.g_post1 = ResidualTensor(Grad(kPostNorm1, l));
    t.g_post2 = ResidualTensor(Grad(kPostNorm2, l));
    t.w_post1 = weight(kPostNorm1, true, false, 1, h_, Shard::kReplicated);
    t.w_post2 = weight(kPostNorm2, true, false, 1, h_, Shard::kReplicated);
    // Under SP each rank normalizes its own tokens: partial sums, as the other norms' gains.
    t.g_w_post1 = weight(kPostNorm1, true, true, 1, h_, partial);
    t.g_w_post2 = weight(kPostNorm2, true, true, 1, h_, partial);
  }
  t.g_drop1 = plan_.branch_dropout(true) ? ResidualTensor(Grad(kDropout1, l)) : -1;
  t.g_drop2 = plan_.branch_dropout(false) ? ResidualTensor(Grad(kDropout2, l)) : -1;
  t.qk = t.g_qk = t.w_qk_norm = t.g_w_qk_norm = -1;
  if (plan_.model.qk_norm) {
    t.qk = act(Act(kQkNorm, l), (a_ + g_) * d_, Shard::kQkCols, kv);
    t.g_qk = act(Grad(kQkNorm, l), (a_ + g_) * d_, Shard::kQkCols, kv);
    t.w_qk_norm = weight(kQkNorm, true, false, 1, 2 * d_, Shard::kReplicated);
    // Each rank normalizes its own heads (and, under SP, all its tokens' of them): the gains'
    // gradients are partial sums over TP.
    t.g_w_qk_norm = weight(kQkNorm, true, true, 1, 2 * d_,
                           plan_.tp > 1 ? Shard::kPartialSum : Shard::kReplicated);
  }
  return t;
}

// The word embedding's table (vocabulary-major: this rank's vocab_ rows of hidden columns), the
// tokens it looks up and, with sequence parallelism, the whole gradient of the first layer's
// input that its backward all-gathers. With tied embeddings the LM head reads the same table.
void Lowering::MakeEmbeddingTensors() {
  using enum TensorSlot;
  TensorRole table = Role(TensorKind::kWeight, kEmbedding, -1);
  w_embed_ = AddTensor(vocab_, h_, Shard::kRows, 0, table);
  table.gradient = true;
  g_w_embed_ = AddTensor(vocab_, h_, Shard::kRows, 0, table);
  if (!options_.embedding) return;
  tokens_in_ =
      AddTensor(tokens_, 1, Shard::kReplicated, 0, Role(TensorKind::kInput, kEmbedding, -1));
  if (sp_)
    g_x_full_ = AddTensor(tokens_, h_, Shard::kReplicated, 0, Grad(kX, 0, TensorForm::kGathered));
}

void Lowering::MakeHeadTensors() {
  using enum TensorSlot;
  const int top = layers_ - 1;
  // The head's tensors belong to no layer, except the top layer's output (its input).
  head_x_ = ResidualTensor(Act(kOut, top));
  head_ln_ = AddTensor(tokens_, h_, Shard::kReplicated, 0, Act(kFinalNorm, -1));
  head_ln_s_ = sp_ ? ResidualTensor(Act(kFinalNorm, -1, TensorForm::kSequenceShard)) : -1;
  w_final_norm_ =
      AddTensor(1, h_, Shard::kReplicated, 0, Role(TensorKind::kNormWeight, kFinalNorm, -1));
  // Each rank's norm sees its own tokens under SP: the gain's gradient is a partial sum.
  g_w_final_norm_ = AddTensor(1, h_, sp_ ? Shard::kPartialSum : Shard::kReplicated, 0,
                              Role(TensorKind::kNormWeight, kFinalNorm, -1, true));
  logits_ = AddTensor(tokens_, vocab_, Shard::kCols, 0, Act(kLmHead, -1));
  g_logits_ = AddTensor(tokens_, vocab_, Shard::kCols, 0, Grad(kLmHead, -1));
  g_head_ln_ = AddTensor(tokens_, h_, sp_ ? Shard::kPartialSum : Shard::kReplicated, 0,
                         Grad(kFinalNorm, -1));
  g_head_ln_s_ = sp_ ? ResidualTensor(Grad(kFinalNorm, -1, TensorForm::kSequenceShard)) : -1;
  labels_ = AddTensor(tokens_, 1, Shard::kReplicated, 0, Role(TensorKind::kInput, kLmHead, -1));
  // Per token: column r holds TP rank r's log-sum-exp over its vocabulary part, column tp the
  // label's logit (on the rank that holds it, 0 elsewhere); whole on every rank after the
  // all-reduce.
  loss_ =
      AddTensor(tokens_, plan_.tp + 1, Shard::kReplicated, 0, Role(TensorKind::kLoss, kLmHead, -1));
  if (plan_.model.tied_embeddings) {
    w_head_ = w_embed_, g_w_head_ = g_w_embed_;
    return;
  }
  // Vocabulary-major like the embedding: rank r holds the weights of its vocab_ logits.
  w_head_ = AddTensor(vocab_, h_, Shard::kRows, 0, Role(TensorKind::kWeight, kLmHead, -1));
  g_w_head_ = AddTensor(vocab_, h_, Shard::kRows, 0, Role(TensorKind::kWeight, kLmHead, -1, true));
}

}  // namespace domino::lowering
