// The tensors a lowering declares: each layer's (LayerTensors), the embedding's and the head's,
// with their shapes, shards and roles.

#include <fmt/format.h>

#include <initializer_list>
#include <vector>

#include "planner/lowering.h"

namespace domino::lowering {

LayerTensors Lowering::MakeTensors(int l) {
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
    return AddTensor(name(what), rows, cols, shard, part,
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

// The word embedding's table (vocabulary-major: this rank's vocab_ rows of hidden columns), the
// tokens it looks up and, with sequence parallelism, the whole gradient of the first layer's
// input that its backward all-gathers. With tied embeddings the LM head reads the same table.
void Lowering::MakeEmbeddingTensors() {
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

void Lowering::MakeHeadTensors() {
  using enum TensorSlot;
  const int top = layers_ - 1;
  // The head's tensors belong to no layer, except the top layer's output (its input).
  head_x_ = ResidualTensor("final.x", Act(kOut, top));
  head_ln_ = AddTensor("final.ln", tokens_, h_, Shard::kReplicated, 0, Act(kFinalNorm, -1));
  head_ln_s_ =
      sp_ ? ResidualTensor("final.ln.shard", Act(kFinalNorm, -1, TensorForm::kSequenceShard)) : -1;
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
  g_head_ln_s_ =
      sp_ ? ResidualTensor("final.ln.grad.shard", Grad(kFinalNorm, -1, TensorForm::kSequenceShard))
          : -1;
  labels_ =
      AddTensor("labels", tokens_, 1, Shard::kReplicated, 0, Role(TensorKind::kInput, kLmHead, -1));
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

}  // namespace domino::lowering
