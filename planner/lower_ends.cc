// The model's ends as a lowering emits them: the vocab-parallel embedding in front of the first
// layer; the final norm, the LM head and the cross-entropy loss behind the last, forward and
// backward.

#include <fmt/format.h>

#include <initializer_list>
#include <vector>

#include "planner/iteration.h"
#include "planner/lowering.h"

namespace domino::lowering {

// HBM traffic of the loss over this rank's logits (slice_tokens x vocab / tp), per element, as
// the plan's (or its stack's) CrossEntropy runs it (planner/stack.h). Megatron's vocab-parallel
// cross-entropy: forward casts the 16-bit logits to an fp32 copy
// (read e, write 4), then max (read 4), subtract, exp (read and write 4 each), sum (read 4),
// divide (read and write 4): e + 36 bytes; backward scales the softmax by the loss gradient
// (read and write 4) and casts it back (read 4, write e): 12 + e. In fp32 the cast is no copy.
// A soft cap on the logits (ModelSpec::logit_softcap: cap * tanh(logits / cap) as three PyTorch
// kernels, Megatron-Bridge's logit_softcapping) reads and writes them three times before the
// loss, 6 e; its autograd 7 e after it: the product's and the quotient's backward read and write
// the gradient, tanh's reads its saved output and the gradient and writes. A stack whose loss
// kernels take the cap as they go (StackSpec::fused_logit_softcap) moves no more bytes for it.
double Lowering::LossBytes(Phase phase) const {
  const double elements = static_cast<double>(slice_tokens_) * vocab_;
  const double cast = e_ < 4 ? 4 + e_ : 0;
  const bool forward = phase == Phase::kForward;
  const bool cap_passes = plan_.model.logit_softcap > 0 && !plan_.stack.fused_logit_softcap;
  const double cap = cap_passes ? (forward ? 6 : 7) * e_ : 0;
  switch (plan_.loss_kernels()) {
    case CrossEntropy::kFused:
      return elements * ((forward ? e_ : 2 * e_) + cap);
    case CrossEntropy::kTe:
      return elements * ((forward ? 3 * e_ : 2 * e_) + cap);
    case CrossEntropy::kMegatronFused:
      return elements * ((forward ? e_ + 20 : 4 + e_) + cap);
    case CrossEntropy::kVocabParallel:
      break;
  }
  return elements * ((forward ? cast + 32 : cast + 8) + cap);
}

// Vocab-parallel embedding of slice i: each rank looks up the tokens of its vocabulary part
// (others contribute zero rows), then the partial rows are summed over TP (reduce-scattered
// with SP) into layer 0's input.
void Lowering::EmbeddingForward(int i) {
  OpTags tags = Tags(0, i, -1, Phase::kForward);
  const LayerTensors& t = tensors_[0];
  TensorRole role = Act(TensorSlot::kEmbedding, -1);
  role.slice = static_cast<int8_t>(i);
  int32_t partial = AddTensor(slice_tokens_, h_, Shard::kPartialSum, 0, role);
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
// adds the rows of the tokens in its vocabulary part (reads the gradient's rows, writes as many).
// With SP the gradient is a sequence shard and is all-gathered first (the backward of the
// forward's reduce-scatter). A stack with a dense embedding gradient (StackSpec::
// dense_embedding_grad) also zero-fills the rank's vocabulary part of the table in 16 bits and
// adds it into the accumulated gradient (a 16-bit read, a read and a write in the gradients'
// type), once per micro-batch: each of the p slices' ops takes 1/p of it.
void Lowering::EmbeddingBackward(int i, int32_t grad) {
  OpTags tags = Tags(0, i, -1, Phase::kBackward);
  const LayerTensors& t = tensors_[0];
  int32_t dy = t.g_x;
  if (sp_) {
    grad = Collective(OpFunc::kTpAllGather, CollectiveOp::kAllGather, tags, RowBytes(h_), grad,
                      SliceOf(t.g_x, i), SliceOf(g_x_full_, i));
    dy = g_x_full_;
  }
  double bytes = 2 * RowBytes(h_);
  if (plan_.stack.dense_embedding_grad)
    bytes += static_cast<double>(vocab_) * h_ * (2 * e_ + 2 * GradBytes(plan_)) / p_;
  Elementwise(OpFunc::kEmbedGrad, tags, bytes, {grad}, {SliceOf(tokens_in_, i), SliceOf(dy, i)},
              {WholeOf(g_w_embed_)});
}

// Slice i's final residual add, final norm, LM head (vocab-parallel columns) and cross-entropy.
// Megatron all-reduces the logits' maximum, then the label's logit and the sum of exponentials
// (three all-reduces of one float per token); here each rank's log-sum-exp over its own
// vocabulary part and the label's logit take one all-reduce of tp + 1 floats per token (each
// rank fills its own column), from which every rank combines the same stable log-sum-exp: the
// same loss in one collective. The loss gradient waits for it.
void Lowering::HeadForward(int i) {
  const int l = layers_ - 1;
  const LayerTensors& t = tensors_[l];
  OpTags tags = Tags(l, i, -1, Phase::kForward);
  Deps deps = std::move(waits_[i]);
  waits_[i].clear();
  const double hb = NormRows() * h_ * e_;
  const int32_t branch =
      PostNorm(OpFunc::kPostNorm2, tags, deps, Reduced(t.fc2, t.fc2_s), t.w_post2, t.post2, i);
  Elementwise(OpFunc::kResidual2, tags, ResidualBytes(hb, false), std::move(deps),
              {SliceOf(t.mid, i), SliceOf(branch, i)}, {SliceOf(head_x_, i)});
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
void Lowering::HeadBackward(int i) {
  const int l = layers_ - 1;
  OpTags tags = Tags(l, i, -1, Phase::kBackward);
  Deps after_loss;
  if (loss_comm_[i] >= 0) after_loss.push_back(loss_comm_[i]);
  Elementwise(OpFunc::kLossGrad, tags, LossBytes(Phase::kBackward), std::move(after_loss),
              {SliceOf(logits_, i), SliceOf(labels_, i), SliceOf(loss_, i)},
              {SliceOf(g_logits_, i)});
  int32_t dgrad = Gemm(OpFunc::kLmHeadGradInput, tags, slice_tokens_, h_, vocab_, {},
                       {SliceOf(g_logits_, i), WholeOf(w_head_)}, {SliceOf(g_head_ln_, i)});
  auto weight_grad = [&] {
    return Gemm(OpFunc::kLmHeadGradWeight, tags, h_, vocab_, slice_tokens_, {},
                {SliceOf(g_logits_, i), SliceOf(head_ln_, i)}, {WholeOf(g_w_head_)});
  };
  // The head is a column-parallel linear: its input gradient's collective runs under the weight
  // gradient, or after it (StackSpec::wgrad_overlaps_tp_comm, as for QKV and fc1).
  const bool overlap_wgrad = plan_.stack.wgrad_overlaps_tp_comm;
  const int32_t producer = overlap_wgrad ? dgrad : weight_grad();
  int32_t comm =
      sp_ ? Collective(OpFunc::kTpReduceScatter, CollectiveOp::kReduceScatter, tags, RowBytes(h_),
                       producer, SliceOf(g_head_ln_, i), SliceOf(g_head_ln_s_, i))
          : Collective(OpFunc::kTpAllReduce, CollectiveOp::kAllReduce, tags, RowBytes(h_), producer,
                       SliceOf(g_head_ln_, i), SliceOf(g_head_ln_, i));
  if (overlap_wgrad) weight_grad();
  const double hb = NormRows() * h_ * e_;
  // The final norm's backward.
  head_grad_[i] = Elementwise(
      OpFunc::kFinalNormGrad, tags, 5 * hb, {comm},
      {SliceOf(head_x_, i), SliceOf(Reduced(g_head_ln_, g_head_ln_s_), i), WholeOf(w_final_norm_)},
      {SliceOf(out_grad_, i), WholeOf(g_w_final_norm_)});
}

}  // namespace domino::lowering
