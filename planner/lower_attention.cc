// Context parallelism (cp > 1) gives each rank seq_len / cp tokens of every sequence (chunks r
// and 2cp-1-r of 2cp, Megatron-Core's causal load balance): every GEMM, norm and collective works
// on those tokens, and the attention core runs as the plan's CpComm: all_gather and a2a below
// (GatheredAttentionCore, AllToAllAttentionCore), a2a+p2p (a2a's trades in groups around a ring
// over them, AttentionCore), or ring attention as Transformer Engine's "p2p" CP runs it, which
// this comment describes. Forward: cp steps, step j an attention block of the
// local queries against the KV block that started j ranks back; while block j computes, the cp-comm
// stream passes the block on (sends it to the next CP rank, receives the next one: 2 * kv_heads/tp
// * head_dim * local tokens
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

#include <algorithm>
#include <initializer_list>
#include <span>
#include <vector>

#include "planner/lowering.h"

namespace domino::lowering {

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
// Over a ring of `steps` ranks (cp, or a2a+p2p's cp / cp_a2a, whose ranks hold cp_a2a times the
// tokens of 1/cp_a2a of the heads: the same Q and KV bytes).
double Lowering::CpMergeBytes(int step, bool backward, int steps) const {
  const double q = static_cast<double>(slice_tokens_) * a_ * d_ * e_, kv = KvBlockBytes();
  if (step == 0) return backward ? 6 * kv + 2 * q : 2 * kv + 4 * q;
  const double f = static_cast<double>(steps - step) / steps;
  return backward ? f * (3.5 * kv + 3 * q) + (1 - f) * (5 * kv + 4.5 * q)
                  : f * (kv + 3 * q) + (1 - f) * 2.5 * q;
}

// One ring step's transfer on the cp-comm stream: sends `bytes` to the next CP rank and
// receives as many from the previous one, in place in `buffers` (the KV columns of qkv, and
// backward those of its gradient).
int32_t Lowering::RingTransfer(const OpTags& tags, int step, double bytes, Deps deps,
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
// or with context parallelism as the plan's cp_communication() runs it.
void Lowering::AttentionCore(OpFunc func, const OpTags& tags, int l, int i) {
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
  switch (plan_.cp_communication()) {
    case CpComm::kP2p:
      return RingAttentionCore(func, tags, l, i, 1);
    case CpComm::kAllGather:
      return GatheredAttentionCore(func, tags, l, i);
    case CpComm::kA2a:
      return AllToAllAttentionCore(func, tags, l, i);
    case CpComm::kA2aP2p: {
      // a2a+p2p (AttnFuncWithCPAndKVP2P with two CP groups): a2a's trade inside each group of
      // cp_a2a ranks, then the ring over the groups with their tokens and 1/cp_a2a of the heads;
      // backward, the output's gradient in, the ring's backward, dQ, dK and dV out.
      const TensorUse in = backward ? SliceOf(t.g_ctx, i) : SliceOf(t.qkv, i);
      const TensorUse out = backward ? SliceOf(t.g_qkv, i) : SliceOf(t.ctx, i);
      CpTrade(tags, in, RowBytes(backward ? a_ * d_ : qkv_n_), Group::kCpA2a);
      RingAttentionCore(func, tags, l, i, plan_.cp_a2a_ranks());
      return CpTrade(tags, out, RowBytes(backward ? qkv_n_ : a_ * d_), Group::kCpA2a);
    }
  }
}

int32_t Lowering::CpCollective(OpFunc func, CollectiveOp kind, const OpTags& tags, double bytes,
                               TensorUse in, TensorUse out, Group group) {
  Op op;
  op.kind = OpKind::kCollective;
  op.stream = Stream::kCpComm;
  op.func = func;
  op.collective = kind;
  op.group = group;
  op.tags = tags;
  op.bytes = bytes;
  const int32_t deps[] = {last_compute_};
  const int32_t id = s_.Add(op, std::span(deps, last_compute_ >= 0 ? 1 : 0), std::span(&in, 1),
                            std::span(&out, 1));
  sync_.push_back(id);
  return id;
}

// Context parallelism's all_gather as Transformer Engine runs it (TransformerEngine
// pytorch/attention/dot_product_attention/context_parallel.py, AttnFuncWithCPAndKVAllGather, the
// sbhd layout Megatron-Core uses), for the CP rank whose work is the most, cp - 1 (its chunks
// cp - 1 and cp lie nearest the middle: with the causal mask every rank does the same work, with a
// sliding window those two see the most keys). Forward: K and V all-gathered on the compute
// stream, unoverlapped (nccl-tests size: cp times the rank's KV block), and put back in sequence
// order (index_select: a read and a write of the gathered KV); then each of the rank's two chunks
// of s / 2cp queries attends to the keys before it (op.first_query: its position; within the
// window, the kernel gets only the keys it covers), its queries copied out and its output copied
// in (four passes over the local queries' size in all). Backward: the gather and its reorder
// again, dK and dV of the whole sequence zero-filled, the two chunks' backward (their q, out and
// dout parts copied out, dq copied in: eight passes), each chunk's dK and dV added into the
// range of keys it saw (a read of each and a write), reordered back, and reduce-scattered
// (unoverlapped); the QKV input gradient waits for that.
void Lowering::GatheredAttentionCore(OpFunc func, const OpTags& tags, int l, int i) {
  const LayerTensors& t = tensors_[l];
  const bool backward = func == OpFunc::kAttnGrad;
  const double factor = backward ? 2.0 : 1.0;
  const int64_t chunk = plan_.local_seq_len() / 2;
  const double kv = KvBlockBytes(), gathered = cp_ * kv;
  const double q = RowBytes(a_ * d_);
  const View kv_cols{i * slice_tokens_, (i + 1) * slice_tokens_, a_ * d_, qkv_n_};
  const TensorUse qkv = SliceOf(t.qkv, i);
  CpCollective(OpFunc::kCpAllGather, CollectiveOp::kAllGather, tags, gathered, Use(t.qkv, kv_cols),
               Use(t.qkv, kv_cols));
  Elementwise(OpFunc::kCpCopy, tags, 2 * gathered, {}, {qkv}, {qkv});
  const int window = AttentionOp(func, tags, factor).window;
  double seen_keys = 0;  // the two chunks' key ranges, in tokens
  for (int j = 0; j < 2; ++j) {
    OpTags step_tags = tags;
    step_tags.ring_step = static_cast<int8_t>(j);
    Op op = AttentionOp(func, step_tags, factor);
    const int64_t first = (cp_ - 1 + j) * chunk;
    op.seq_len = chunk;
    op.first_query = static_cast<int32_t>(first);
    const int64_t keys = first + chunk - (window > 0 ? std::max<int64_t>(0, first - window) : 0);
    seen_keys += static_cast<double>(keys);
    op.flops = factor * 4.0 * op.sequences * chunk * keys * a_ * d_;
    op.bytes =
        static_cast<double>(op.sequences) * (2 * a_ * chunk + 2 * g_ * keys) * d_ * e_ * factor;
    if (backward) {
      Compute(op, {}, {qkv, SliceOf(t.g_ctx, i)}, {SliceOf(t.g_qkv, i)});
    } else {
      Compute(op, {}, {qkv}, {SliceOf(t.ctx, i)});
    }
  }
  if (!backward) {
    Elementwise(OpFunc::kCpCopy, tags, 4 * q, {}, {qkv}, {SliceOf(t.ctx, i)});
    return;
  }
  const TensorUse g_qkv = SliceOf(t.g_qkv, i);
  // Zero fill, the chunks' copies and adds, the reorder back.
  const double adds = 3 * kv * seen_keys / (2.0 * static_cast<double>(chunk));
  Elementwise(OpFunc::kCpCopy, tags, gathered + 8 * q + adds + 2 * gathered, {}, {g_qkv}, {g_qkv});
  CpCollective(OpFunc::kCpReduceScatter, CollectiveOp::kReduceScatter, tags, gathered,
               Use(t.g_qkv, kv_cols), Use(t.g_qkv, kv_cols));
}

// Context parallelism's a2a as Transformer Engine runs it (context_parallel.py,
// AttnFuncWithCPAndQKVOA2A and flash_attn_a2a_communicate, the sbhd layout): each rank trades its
// sequence shard of Q, K and V for all the sequence's tokens of 1/cp of its heads, runs the
// attention over the whole sequence with them (causal, within the window where the stack runs
// it), and trades the output back. Around each all-to-all (nccl-tests size: the tensor on this
// rank) the tensors are copied twice, a movedim before it and the chunk reorder after it (four
// passes over the tensor). Backward: dout the same way in, then dQ, dK and dV out. The
// all-to-alls are waited for (TE's cp stream, which the compute stream waits on) and overlap only
// each other's copies, which are priced in line.
void Lowering::AllToAllAttentionCore(OpFunc func, const OpTags& tags, int l, int i) {
  const LayerTensors& t = tensors_[l];
  const bool backward = func == OpFunc::kAttnGrad;
  const double factor = backward ? 2.0 : 1.0;
  const double qkv_bytes = RowBytes(qkv_n_), out_bytes = RowBytes(a_ * d_);
  const TensorUse qkv = SliceOf(t.qkv, i);
  Op op = AttentionOp(func, tags, factor);
  op.seq_len = plan_.seq_len;
  op.heads = a_ / cp_, op.kv_heads = g_ / cp_;
  op.flops = factor * 4.0 * op.sequences * op.seq_len * op.seq_len * op.heads * d_;
  if (backward) {
    CpTrade(tags, SliceOf(t.g_ctx, i), out_bytes, Group::kCp);
    Compute(op, {}, {qkv, SliceOf(t.g_ctx, i)}, {SliceOf(t.g_qkv, i)});
    CpTrade(tags, SliceOf(t.g_qkv, i), qkv_bytes, Group::kCp);
  } else {
    CpTrade(tags, qkv, qkv_bytes, Group::kCp);
    Compute(op, {}, {qkv}, {SliceOf(t.ctx, i)});
    CpTrade(tags, SliceOf(t.ctx, i), out_bytes, Group::kCp);
  }
}

// One all-to-all of `tensor` (`bytes` on this rank) over `group` with Transformer Engine's copies
// around it (flash_attn_a2a_communicate, sbhd: a movedim before, the chunk reorder after, two
// passes each).
void Lowering::CpTrade(const OpTags& tags, TensorUse tensor, double bytes, Group group) {
  Elementwise(OpFunc::kCpCopy, tags, 2 * bytes, {}, {tensor}, {tensor});
  CpCollective(OpFunc::kCpAllToAll, CollectiveOp::kAllToAll, tags, bytes, tensor, tensor, group);
  Elementwise(OpFunc::kCpCopy, tags, 2 * bytes, {}, {tensor}, {tensor});
}

// Context parallelism's p2p ring described at the top of this file, of cp steps; under a2a+p2p,
// of cp / a2a steps after the trade inside groups of `a2a` ranks, each rank then holding a2a times
// the tokens of 1/a2a of the heads (the same Q and KV bytes, each block a2a times the work).
void Lowering::RingAttentionCore(OpFunc func, const OpTags& tags, int l, int i, int a2a) {
  const LayerTensors& t = tensors_[l];
  const bool backward = func == OpFunc::kAttnGrad;
  const double factor = backward ? 2.0 : 1.0;
  const int steps = cp_ / a2a;
  const int64_t rows = slice_tokens_;
  const View kv{i * rows, (i + 1) * rows, a_ * d_, qkv_n_};
  // A block of the ring: the causal block of the rank's tokens (Attention's op, widened by a2a).
  auto block_op = [&](const OpTags& step_tags, std::initializer_list<TensorUse> reads,
                      std::initializer_list<TensorUse> writes, Deps deps) {
    Op op = AttentionOp(func, step_tags, factor);
    op.seq_len *= a2a;
    op.heads /= a2a, op.kv_heads /= a2a;
    op.flops *= a2a;
    return Compute(op, std::move(deps), reads, writes);
  };
  int32_t transfer = -1, block = -1;
  for (int j = 0; j < steps; ++j) {
    OpTags step_tags = tags;
    step_tags.ring_step = static_cast<int8_t>(j);
    if (backward) {
      // Step j sends the KV block for step j+1 and the dKV accumulated through step j-1.
      const double bytes = KvBlockBytes() * (j == 0 || j == steps - 1 ? 1 : 2);
      Deps after = j == 0 ? Deps{last_compute_} : Deps{transfer, block};
      const int32_t next =
          RingTransfer(tags, j, bytes, std::move(after), {Use(t.qkv, kv), Use(t.g_qkv, kv)});
      block = block_op(step_tags, {SliceOf(t.qkv, i), SliceOf(t.g_ctx, i)}, {SliceOf(t.g_qkv, i)},
                       j == 0 ? Deps{} : Deps{transfer});
      // The next transfer carries the dKV this merge accumulates.
      if (plan_.stack.cp_merge_kernels)
        block = Elementwise(OpFunc::kCpMerge, step_tags, CpMergeBytes(j, true, steps), {},
                            {SliceOf(t.g_qkv, i)}, {SliceOf(t.g_qkv, i)});
      transfer = next;
    } else {
      // Double-buffered: step j's transfer receives into the buffer block j-1 read.
      int32_t next = -1;
      if (j + 1 < steps)
        next = RingTransfer(tags, j, KvBlockBytes(),
                            j == 0 ? Deps{last_compute_} : Deps{transfer, block}, {Use(t.qkv, kv)});
      block = block_op(step_tags, {SliceOf(t.qkv, i)}, {SliceOf(t.ctx, i)},
                       j == 0 ? Deps{} : Deps{transfer});
      if (plan_.stack.cp_merge_kernels)
        Elementwise(OpFunc::kCpMerge, step_tags, CpMergeBytes(j, false, steps), {},
                    {SliceOf(t.ctx, i)}, {SliceOf(t.ctx, i)});
      transfer = next;
    }
  }
  // The gradient of this rank's KV arrives with the last transfer.
  if (backward) sync_.push_back(transfer);
}

// Rotary embeddings over row slice i's Q and K (kRope) or their gradients (kRopeGrad), in place
// on `qkv` (the slice's qkv or its gradient): StackSpec::rope's passes over them (RopeKernel);
// none when the model has learned positions or the stack runs none. The op carries the
// attention's shape (its rows are whole local sequences) for the executor's kernel.
void Lowering::Rope(OpFunc func, const OpTags& tags, int32_t qkv, int i) {
  if (!RotatesQk()) return;
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

// The norm on each head of Q and of K (ModelSpec::qk_norm) over row slice i, between the QKV GEMM
// and the rotary embeddings as Megatron-Core's SelfAttention runs its q_layernorm and
// k_layernorm (Transformer Engine's norms on the split Q and K): a read and a write of Q and K.
// The op keeps them as they came in `qk` (the input the norm's backward reads, which Transformer
// Engine's norm saves) and normalizes them in place in qkv. Nothing without qk_norm.
void Lowering::QkNorm(const OpTags& tags, const LayerTensors& t, int i) {
  if (t.qk < 0) return;
  const TensorUse qk_of_qkv = QkOf(t.qkv, i);
  Compute(QkNormOp(OpFunc::kQkNorm, tags, 2), {}, {qk_of_qkv, WholeOf(t.w_qk_norm)},
          {qk_of_qkv, SliceOf(t.qk, i)});
}

// The norm's backward over row slice i, after the rotary embeddings' (the gradients of Q and K
// that come out of it are those of the norm's output): a read of Q and K as they came and of
// their gradients, and a write of the gradients of what the QKV GEMM produced (the norm's input
// gradient, in `g_qk`, then in place in QKV's gradient for its input-gradient GEMM), the gains'
// gradients accumulated in the same pass (Transformer Engine's norm backward).
void Lowering::QkNormGrad(const OpTags& tags, const LayerTensors& t, int i) {
  if (t.qk < 0) return;
  const TensorUse qk_of_grad = QkOf(t.g_qkv, i);
  Compute(QkNormOp(OpFunc::kQkNormGrad, tags, 3), {},
          {SliceOf(t.qk, i), qk_of_grad, WholeOf(t.w_qk_norm)},
          {qk_of_grad, SliceOf(t.g_qk, i), WholeOf(t.g_w_qk_norm)});
}

// Q and K, the first (a + g) d columns, of row slice i of `qkv` (QKV or its gradient).
TensorUse Lowering::QkOf(int32_t qkv, int i) const {
  return Use(qkv, View{i * slice_tokens_, (i + 1) * slice_tokens_, 0, (a_ + g_) * d_});
}

// A QK-norm op that makes `passes` passes over a slice's Q and K; it carries the heads' shape for
// the executor's kernels.
Op Lowering::QkNormOp(OpFunc func, const OpTags& tags, int passes) const {
  Op op;
  op.kind = OpKind::kElementwise;
  op.func = func;
  op.tags = tags;
  op.bytes = passes * RowBytes((a_ + g_) * d_);
  op.heads = a_, op.kv_heads = g_, op.head_dim = d_;
  return op;
}

// The copies around the attention core that StackSpec::attention_copies describes
// (AttentionCopies), over row slice i of `tensor`: forward, before the core (kAttnCopy on qkv) or
// after it (`after_core`, kAttnCopy on ctx); backward, before the QKV GEMM's input gradient
// (kAttnCopyGrad on qkv's gradient). In units of a pass (a read or a write) over columns of the
// slice's rows:
// - megatron, forward: Q when the model groups its queries (a_ > g_); before the fused kernels V
//   too when the model is rotary, after unfused attention the context; backward: all of QKV
//   twice, unless the fused kernels' multi-head attention with learned positions copied nothing;
// - permute: all of QKV twice before the core and the context twice after it; backward, QKV four
//   times with row slices (the split's concatenation and the reshape's copy), twice without
//   (Megatron-LM's own layer).
void Lowering::CopiesAroundAttention(OpFunc func, const OpTags& tags, int32_t tensor, int i,
                                     bool after_core) {
  const AttentionCopies copies = plan_.stack.attention_copies;
  if (copies == AttentionCopies::kNone) return;
  const bool unfused = plan_.attention_kernel() == AttentionKernel::kUnfused;
  const bool grouped = a_ > g_;
  const bool rotary = RotatesQk();
  const bool backward = func == OpFunc::kAttnCopyGrad;
  int64_t cols = 0;
  if (copies == AttentionCopies::kPermute && !unfused) {
    if (backward) {
      cols = (p_ > 1 ? 4 : 2) * qkv_n_;
    } else {
      cols = after_core ? 2 * a_ * d_ : 2 * qkv_n_;
    }
  } else if (backward) {
    cols = unfused || grouped || rotary ? 2 * qkv_n_ : 0;
  } else if (after_core) {
    cols = unfused ? 2 * a_ * d_ : 0;
  } else {
    cols = 2 * d_ * ((grouped ? a_ : 0) + (rotary && !unfused ? g_ : 0));
  }
  if (cols == 0) return;
  Elementwise(func, tags, RowBytes(cols), {}, {SliceOf(tensor, i)}, {SliceOf(tensor, i)});
}

}  // namespace domino::lowering
