// What each op of a schedule enqueues on the CUDA backend: its kernels (cuBLAS GEMMs and
// exec/cuda_ops.h) or its collective (NCCL, whole or a decomposed part, or its emulation).
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cuda_backend_impl.h"
#include "exec/nccl_ops.h"

namespace domino::exec::internal {
namespace {

constexpr float kNormEps = 1e-5f;  // as the CPU backend

}  // namespace

Status CudaBackend::Enqueue(int32_t id) {
  const Op& op = schedule_.op(id);
  std::span<const TensorUse> reads = schedule_.reads(op), writes = schedule_.writes(op);
  auto in = [&](size_t i) { return Of(reads[i]); };
  auto out = [&](size_t i) { return Of(writes[i]); };
  Status e;
  switch (op.func) {
    case OpFunc::kQkv:
    case OpFunc::kProj:
    case OpFunc::kFc1:
    case OpFunc::kFc2:
      e = cuda::Gemm(context_, in(0), false, in(1), false, out(0), false);
      break;
    case OpFunc::kQkvGradInput:
    case OpFunc::kProjGradInput:
    case OpFunc::kFc1GradInput:
    case OpFunc::kFc2GradInput:
      e = cuda::Gemm(context_, in(0), false, in(1), true, out(0), false);
      break;
    case OpFunc::kQkvGradWeight:
    case OpFunc::kProjGradWeight:
    case OpFunc::kFc1GradWeight:
    case OpFunc::kFc2GradWeight:
      e = cuda::Gemm(context_, in(0), true, in(1), false, out(0), true);
      break;
    case OpFunc::kAttn:
      e = cuda::Attention(context_, op.sequences, op.seq_len, op.heads, op.kv_heads, op.head_dim,
                          Window(op), model_.attention_softcap, Dropout(op), in(0), out(0));
      break;
    case OpFunc::kAttnGrad:
      e = cuda::AttentionBackward(context_, op.sequences, op.seq_len, op.heads, op.kv_heads,
                                  op.head_dim, Window(op), model_.attention_softcap, Dropout(op),
                                  in(0), in(1), out(0));
      break;
    case OpFunc::kRope:
    case OpFunc::kRopeGrad:  // in place: reads and writes the same view
      e = cuda::Rope(context_, op.heads, op.kv_heads, op.head_dim, op.seq_len,
                     std::max(options_.fill.cp, 1), options_.fill.cp_rank,
                     op.func == OpFunc::kRopeGrad, out(0));
      break;
    case OpFunc::kAct:
      e = Glu()           ? cuda::Glu(context_, GeluGate(), in(0), out(0))
          : SquaredRelu() ? cuda::SquaredRelu(context_, in(0), out(0))
                          : cuda::Gelu(context_, in(0), out(0));
      break;
    case OpFunc::kActGrad:
      e = Glu()           ? cuda::GluBackward(context_, GeluGate(), in(0), in(1), out(0))
          : SquaredRelu() ? cuda::SquaredReluBackward(context_, in(0), in(1), out(0))
                          : cuda::GeluBackward(context_, in(0), in(1), out(0));
      break;
    case OpFunc::kLn1:
    case OpFunc::kLn2:
      e = cuda::NormForward(context_, Rms(), in(0), in(1).data, kNormEps, out(0));
      break;
    case OpFunc::kLn1Grad:
    case OpFunc::kLn2Grad:
      // dx = the residual gradient + the norm's backward; dgamma accumulates.
      if (in(3).data != out(0).data) e = cuda::Copy(context_, in(3), out(0));
      if (e.ok())
        e = cuda::NormBackward(context_, Rms(), in(0), in(2).data, kNormEps, in(1), out(0), true,
                               out(1).data);
      break;
    case OpFunc::kQkNorm:  // Q and K kept in out(1), normalized in place
      e = cuda::HeadNormForward(context_, Rms(), op.heads + op.kv_heads, op.heads, out(0),
                                in(1).data, kNormEps, out(1));
      break;
    case OpFunc::kQkNormGrad:  // the input gradient into out(1), then over the output's
      e = cuda::HeadNormBackward(context_, Rms(), op.heads + op.kv_heads, op.heads, in(0),
                                 in(2).data, kNormEps, in(1), out(1), out(2).data);
      if (e.ok()) e = cuda::Copy(context_, out(1), out(0));
      break;
    case OpFunc::kResidual1:
    case OpFunc::kResidual2:  // the branch through its dropout, as the CPU backend runs it
      e = cuda::Add(context_, in(0), in(1), out(0),
                    BranchDrop(op, op.func == OpFunc::kResidual1 ? 1 : 2, writes[0]));
      break;
    case OpFunc::kDropout1Grad:
    case OpFunc::kDropout2Grad:
      e = cuda::Dropout(context_,
                        BranchDrop(op, op.func == OpFunc::kDropout1Grad ? 1 : 2, writes[0]), in(0),
                        out(0));
      break;
    case OpFunc::kResidualGrad:
      e = cuda::Copy(context_, residual_grads_.at(id), out(0));
      break;
    // The model's ends, as the CPU backend runs them (exec/cpu_backend.cc).
    case OpFunc::kEmbed:
    case OpFunc::kEmbedGrad: {
      const bool backward = op.func == OpFunc::kEmbedGrad;
      const TensorUse& table = backward ? writes[0] : reads[1];
      const int64_t vocab_begin =
          WholeIndex(schedule_.tensors()[table.tensor], rank_, tp_, 0, 0).rows;
      e = backward ? cuda::EmbeddingBackward(context_, in(0), vocab_begin, in(1), out(0))
                   : cuda::Embedding(context_, in(0), vocab_begin, in(1), out(0));
      break;
    }
    case OpFunc::kFinalNorm:
    case OpFunc::kPostNorm1:
    case OpFunc::kPostNorm2:
      e = cuda::NormForward(context_, Rms(), in(0), in(1).data, kNormEps, out(0));
      break;
    case OpFunc::kFinalNormGrad:  // as the CPU backend: dx the norm's backward alone
    case OpFunc::kPostNorm1Grad:
    case OpFunc::kPostNorm2Grad:
      e = cuda::NormBackward(context_, Rms(), in(0), in(2).data, kNormEps, in(1), out(0), false,
                             out(1).data);
      break;
    case OpFunc::kLmHead:  // the weight is vocabulary-major: logits = x W^T
      e = cuda::Gemm(context_, in(0), false, in(1), true, out(0), false);
      break;
    case OpFunc::kLmHeadGradInput:  // dx = dlogits W
      e = cuda::Gemm(context_, in(0), false, in(1), false, out(0), false);
      break;
    case OpFunc::kLmHeadGradWeight:  // dW += dlogits^T x
      e = cuda::Gemm(context_, in(0), true, in(1), false, out(0), true);
      break;
    case OpFunc::kLoss:
    case OpFunc::kLossGrad: {
      const Tensor& logits = schedule_.tensors()[reads[0].tensor];
      const int64_t vocab_begin = WholeIndex(logits, rank_, tp_, 0, reads[0].view.col_begin).cols;
      e = op.func == OpFunc::kLoss
              ? cuda::CrossEntropyStats(context_, in(0), in(1), vocab_begin, model_.vocab, rank_,
                                        model_.logit_softcap, out(0))
              : cuda::CrossEntropyBackward(context_, in(0), in(1), in(2), vocab_begin, model_.vocab,
                                           WholeShape(logits, tp_).rows, model_.logit_softcap,
                                           out(0));
      break;
    }
    default:
      return Error(fmt::format("op {} ({}): not a compute op the CUDA backend runs", id,
                               schedule_.Label(id)));
  }
  return Ok(e, id);
}

Status CudaBackend::EnqueuePart(int32_t id) {
  const Op& op = schedule_.op(id);
  const bool gather = op.collective == CollectiveOp::kAllGather;
  const cuda::DView in = Of(schedule_.reads(op)[0]), out = Of(schedule_.writes(op)[0]);
  const cuda::DView& shard = gather ? in : out;
  const cuda::DView& part = gather ? out : in;
  const int64_t cols = shard.cols, shard_rows = shard.rows, part_rows = part.rows;
  if ((!gather && op.collective != CollectiveOp::kReduceScatter) || part.cols != cols ||
      part_rows * op.parts != shard_rows * tp_ || op.part < 0 || op.part >= op.parts)
    return Error(fmt::format("op {} ({}): part {} of {} does not fit a {} of {} rows over {} ranks",
                             id, schedule_.Label(id), op.part, op.parts, OpFuncName(op.func),
                             shard_rows * tp_, tp_));
  const int64_t lo = op.part * part_rows, hi = lo + part_rows;
  const size_t bytes = cuda::DTypeBytes(cuda::TypeOf(context_));
  Status e;
  const char* src = static_cast<const char*>(in.data);
  if (!Contiguous(in)) {
    e = cuda::Copy(context_, in, cuda::DView{stage_in_, in.rows, in.cols, in.cols});
    src = static_cast<const char*>(stage_in_);
  }
  char* dst = static_cast<char*>(out.data);
  if (!Contiguous(out)) {
    // A reduce-scatter part writes some rows of the shard: the others must come back as they
    // were.
    if (e.ok() && !gather)
      e = cuda::Copy(context_, out, cuda::DView{stage_out_, out.rows, out.cols, out.cols});
    dst = static_cast<char*>(stage_out_);
  }
  std::vector<cuda::NcclPiece> pieces;
  for (int q = 0; q < tp_; ++q) {
    const int64_t a = std::max(lo, q * shard_rows), b = std::min(hi, (q + 1) * shard_rows);
    if (a >= b) continue;
    const size_t in_row = static_cast<size_t>(gather ? a - q * shard_rows : a - lo);
    const size_t out_row = static_cast<size_t>(gather ? a - lo : a - q * shard_rows);
    pieces.push_back(cuda::NcclPiece{src + in_row * cols * bytes, dst + out_row * cols * bytes,
                                     (b - a) * cols, q});
  }
  if (e.ok())
    e = gather ? cuda::NcclBroadcasts(nccl_, pieces.data(), static_cast<int>(pieces.size()))
               : cuda::NcclReduces(nccl_, pieces.data(), static_cast<int>(pieces.size()));
  if (e.ok() && dst == stage_out_)
    e = cuda::Copy(context_, cuda::DView{stage_out_, out.rows, out.cols, out.cols}, out);
  if (!e.ok()) failed_ = true;
  return Ok(e, id);
}

Status CudaBackend::EnqueueCollective(int32_t id) {
  const Op& op = schedule_.op(id);
  if (options_.comm == CommMode::kEmulate) {
    const EmulatedCollective& e = options_.emulated[id];
    return Ok(cuda::EmulateCollective(context_, e.ctas, e.hbm_bytes, e.us), id);
  }
  if (op.parts > 1) return EnqueuePart(id);
  const cuda::DView in = Of(schedule_.reads(op)[0]), out = Of(schedule_.writes(op)[0]);
  const int64_t n_in = in.rows * in.cols, n_out = out.rows * out.cols;
  const bool fits = (op.collective == CollectiveOp::kAllReduce && n_in == n_out) ||
                    (op.collective == CollectiveOp::kReduceScatter && n_in == n_out * tp_) ||
                    (op.collective == CollectiveOp::kAllGather && n_out == n_in * tp_);
  if (!fits)
    return Error(fmt::format("op {} ({}): buffer sizes {} and {} do not fit a {} over {} ranks", id,
                             schedule_.Label(id), n_in, n_out, OpFuncName(op.func), tp_));
  // fp32 tensors (the loss statistics) are all-reduced whole rows at a time, never staged in
  // the element type.
  const bool f32 = Fp32(schedule_.reads(op)[0].tensor);
  if (f32 && (op.collective != CollectiveOp::kAllReduce || !Contiguous(in) || !Contiguous(out)))
    return Error(fmt::format("op {} ({}): an fp32 tensor takes only a contiguous all-reduce", id,
                             schedule_.Label(id)));
  Status e;
  const void* src = in.data;
  if (!Contiguous(in)) {
    e = cuda::Copy(context_, in, cuda::DView{stage_in_, in.rows, in.cols, in.cols});
    src = stage_in_;
  }
  void* dst = Contiguous(out) ? out.data : stage_out_;
  if (e.ok()) {
    switch (op.collective) {
      case CollectiveOp::kAllReduce:
        e = cuda::NcclAllReduce(nccl_, src, dst, n_in, f32);
        break;
      case CollectiveOp::kReduceScatter:
        e = cuda::NcclReduceScatter(nccl_, src, dst, n_out);
        break;
      case CollectiveOp::kAllGather:
        e = cuda::NcclAllGather(nccl_, src, dst, n_in);
        break;
      case CollectiveOp::kAllToAll:  // context parallelism's a2a, which execute refuses
      case CollectiveOp::kNone:
        e = Error("not a collective this executor runs");
        break;
    }
  }
  if (e.ok() && dst == stage_out_)
    e = cuda::Copy(context_, cuda::DView{stage_out_, out.rows, out.cols, out.cols}, out);
  if (!e.ok()) failed_ = true;
  return Ok(e, id);
}

}  // namespace domino::exec::internal
