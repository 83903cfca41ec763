#include "exec/cpu_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/cpu_kernels.h"
#include "exec/positions.h"

namespace domino::exec {
namespace {

constexpr float kNormEps = 1e-5f;

}  // namespace

CpuBackend::CpuBackend(const Schedule& schedule, const ModelSpec& model, int rank, int tp,
                       uint64_t seed, const FillOffsets& offsets)
    : schedule_(schedule), model_(model), rank_(rank), tp_(tp), seed_(seed), offsets_(offsets) {
  const std::vector<Tensor>& tensors = schedule.tensors();
  data_.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    data_[i].assign(static_cast<size_t>(t.rows * t.cols), 0.0f);
    if (IsGiven(t.role))
      FillGiven(t, model_, rank_, tp_, seed_, offsets_, View{0, t.rows, 0, t.cols}, data_[i]);
  }
}

BranchDropout CpuBackend::Dropout(const Op& op, int branch, const TensorUse& residual) const {
  return BranchDropoutAt(offsets_, seed_, rank_, tp_, offsets_.layer + op.tags.layer, branch,
                         schedule_.tensors()[residual.tensor], residual.view);
}

double CpuBackend::BytesFor(const Schedule& schedule) {
  double bytes = 0;
  for (const Tensor& t : schedule.tensors()) bytes += 4.0 * t.rows * t.cols;
  return bytes;
}

Status CpuBackend::Pack(const TensorUse& use, float* out) const {
  const Tensor& t = schedule_.tensors()[use.tensor];
  const std::vector<float>& values = data_[use.tensor];
  const View& v = use.view;
  for (int64_t r = v.row_begin; r < v.row_end; ++r) {
    const float* row = values.data() + r * t.cols;
    out = std::copy(row + v.col_begin, row + v.col_end, out);
  }
  return Status::Ok();
}

Status CpuBackend::Unpack(const TensorUse& use, const float* in) {
  const Tensor& t = schedule_.tensors()[use.tensor];
  std::vector<float>& values = data_[use.tensor];
  const View& v = use.view;
  const int64_t width = v.col_end - v.col_begin;
  for (int64_t r = v.row_begin; r < v.row_end; ++r, in += width)
    std::copy(in, in + width, values.data() + r * t.cols + v.col_begin);
  return Status::Ok();
}

Status CpuBackend::Run(const Schedule& schedule, int32_t id) {
  const Op& op = schedule.op(id);
  std::span<const TensorUse> reads = schedule.reads(op), writes = schedule.writes(op);
  auto fail = [&](std::string_view why) {
    return Error(fmt::format("op {} ({}): {}", id, schedule.Label(id), why));
  };
  auto in = [&](size_t i) {
    const TensorUse& u = reads[i];
    const Tensor& t = schedule.tensors()[u.tensor];
    return cpu::ConstMat(data_[u.tensor].data() + u.view.row_begin * t.cols + u.view.col_begin,
                         u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin,
                         t.cols);
  };
  auto out = [&](size_t i) {
    const TensorUse& u = writes[i];
    const Tensor& t = schedule.tensors()[u.tensor];
    return cpu::Mat{data_[u.tensor].data() + u.view.row_begin * t.cols + u.view.col_begin,
                    u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin, t.cols};
  };
  auto need = [&](size_t r, size_t w) { return reads.size() == r && writes.size() == w; };
  const cpu::NormKind norm =
      model_.norm == Norm::kRmsNorm ? cpu::NormKind::kRmsNorm : cpu::NormKind::kLayerNorm;

  switch (op.func) {
    case OpFunc::kQkv:
    case OpFunc::kProj:
    case OpFunc::kFc1:
    case OpFunc::kFc2:
    case OpFunc::kQkvGradInput:
    case OpFunc::kProjGradInput:
    case OpFunc::kFc1GradInput:
    case OpFunc::kFc2GradInput:
    case OpFunc::kQkvGradWeight:
    case OpFunc::kProjGradWeight:
    case OpFunc::kFc1GradWeight:
    case OpFunc::kFc2GradWeight: {
      if (!need(2, 1)) return fail("a GEMM reads two tensors and writes one");
      const bool dgrad = op.func == OpFunc::kQkvGradInput || op.func == OpFunc::kProjGradInput ||
                         op.func == OpFunc::kFc1GradInput || op.func == OpFunc::kFc2GradInput;
      const bool wgrad = op.func == OpFunc::kQkvGradWeight || op.func == OpFunc::kProjGradWeight ||
                         op.func == OpFunc::kFc1GradWeight || op.func == OpFunc::kFc2GradWeight;
      // Forward C = A B; input gradient dX = dY W^T; weight gradient dW += X^T dY.
      cpu::ConstMat a = in(0), b = in(1);
      cpu::Mat c = out(0);
      const int64_t m = wgrad ? a.cols : a.rows, k = wgrad ? a.rows : a.cols;
      const int64_t n = dgrad ? b.rows : b.cols, kb = dgrad ? b.cols : b.rows;
      if (k != kb || c.rows != m || c.cols != n) return fail("GEMM shapes do not agree");
      cpu::Gemm(a, wgrad, b, dgrad, c, wgrad);
      return Status::Ok();
    }
    case OpFunc::kAttn:
    case OpFunc::kAttnGrad: {
      const bool backward = op.func == OpFunc::kAttnGrad;
      if (!need(backward ? 2 : 1, 1)) return fail("attention reads qkv (and the output gradient)");
      // The model's sliding window where it covers the layer (the chunk's first layer on), which
      // the schedule prices only where a stack's kernels skip what lies outside it, and its soft
      // cap on the scores.
      const int layer = offsets_.layer + op.tags.layer;
      cpu::AttentionShape shape{
          op.sequences,
          op.seq_len,
          op.heads,
          op.kv_heads,
          op.head_dim,
          model_.window.TokensAt(layer),
          model_.attention_softcap,
          AttentionDropoutAt(offsets_, seed_, rank_, layer, op, reads[0].view)};
      cpu::ConstMat qkv = in(0);
      if (qkv.rows != shape.sequences * shape.seq_len ||
          qkv.cols != (shape.heads + 2 * shape.kv_heads) * shape.head_dim)
        return fail("attention shape does not match its qkv view");
      if (backward)
        cpu::AttentionBackward(shape, qkv, in(1), out(0));
      else
        cpu::AttentionForward(shape, qkv, out(0));
      return Status::Ok();
    }
    case OpFunc::kRope:
    case OpFunc::kRopeGrad: {
      // In place on a row slice's Q and K (forward) or their gradients (backward).
      if (!need(1, 1) || reads[0].tensor != writes[0].tensor || reads[0].view != writes[0].view)
        return fail("rotary embeddings read and write the same qkv view");
      const cpu::RopeShape shape{op.heads, op.kv_heads, op.head_dim};
      cpu::Mat qkv = out(0);
      if (op.head_dim % 2 != 0)
        return fail(
            fmt::format("rotary positions rotate pairs: the head width {} is odd", op.head_dim));
      if (op.seq_len <= 0 || qkv.rows % op.seq_len != 0 ||
          qkv.cols != (shape.heads + 2 * shape.kv_heads) * shape.head_dim)
        return fail("rotary shape does not match its qkv view");
      std::vector<int64_t> positions(static_cast<size_t>(qkv.rows));
      for (int64_t r = 0; r < qkv.rows; ++r)
        positions[r] = RowPosition(r, op.seq_len, offsets_.cp, offsets_.cp_rank);
      cpu::Rope(shape, positions.data(), op.func == OpFunc::kRopeGrad, qkv);
      return Status::Ok();
    }
    case OpFunc::kAct:
    case OpFunc::kActGrad: {
      const bool backward = op.func == OpFunc::kActGrad;
      if (!need(backward ? 2 : 1, 1)) return fail("an activation reads its input (and gradient)");
      cpu::ConstMat x = in(0);
      const bool glu = Gated(model_.activation);  // input [gate | up]
      const cpu::Gate gate =
          model_.activation == Activation::kGeglu ? cpu::Gate::kGelu : cpu::Gate::kSilu;
      const bool squared = model_.activation == Activation::kSquaredRelu;
      const int64_t y_cols = backward ? in(1).cols : out(0).cols;
      if (x.cols != (glu ? 2 * y_cols : y_cols) || x.rows != out(0).rows)
        return fail(glu ? "a gated unit's input must be twice as wide as its output"
                        : "the activation's input and output must have the same shape");
      if (backward) {
        if (glu)
          cpu::GluBackward(gate, x, in(1), out(0));
        else if (squared)
          cpu::SquaredReluBackward(x, in(1), out(0));
        else
          cpu::GeluBackward(x, in(1), out(0));
      } else {
        if (glu)
          cpu::GluForward(gate, x, out(0));
        else if (squared)
          cpu::SquaredReluForward(x, out(0));
        else
          cpu::GeluForward(x, out(0));
      }
      return Status::Ok();
    }
    case OpFunc::kLn1:
    case OpFunc::kLn2:
      if (!need(2, 1)) return fail("a norm reads its input and weight and writes one tensor");
      cpu::NormForward(norm, in(0), in(1).data, kNormEps, out(0));
      return Status::Ok();
    case OpFunc::kLn1Grad:
    case OpFunc::kLn2Grad: {
      // dx = (gradient through the residual) + norm backward of dy; dgamma accumulates.
      if (!need(4, 2)) return fail("a norm backward reads x, dy, gamma and the residual gradient");
      cpu::Mat dx = out(0);
      cpu::ConstMat residual = in(3);
      for (int64_t r = 0; r < dx.rows; ++r)
        std::copy(residual.data + r * residual.stride,
                  residual.data + r * residual.stride + dx.cols, dx.data + r * dx.stride);
      cpu::NormBackward(norm, in(0), in(2).data, kNormEps, in(1), dx, /*accumulate_dx=*/true,
                        out(1).data);
      return Status::Ok();
    }
    case OpFunc::kQkNorm:
    case OpFunc::kQkNormGrad: {
      // A norm over each head's head_dim columns of [Q | K], Q's heads with the first gain and
      // K's with the second (gains [Q's | K's]).
      const bool backward = op.func == OpFunc::kQkNormGrad;
      if (!need(backward ? 3 : 2, backward ? 3 : 2))
        return fail(backward ? "the QK-norm's backward reads Q and K, their gradients and the gains"
                             : "the QK-norm reads Q, K and the gains");
      const int64_t d = op.head_dim, heads = op.heads + op.kv_heads;
      const cpu::ConstMat x = in(0);
      const cpu::ConstMat gains = in(backward ? 2 : 1);
      if (d <= 0 || x.cols != heads * d || gains.cols != 2 * d)
        return fail("the QK-norm's shape does not match its views");
      auto head = [&](auto m, int64_t j) {
        m.data += j * d;
        m.cols = d;
        return m;
      };
      auto gain = [&](int64_t j) { return gains.data + (j < op.heads ? 0 : d); };
      if (!backward) {
        // Keep Q and K as they came, then normalize them in place.
        cpu::Mat kept = out(1), y = out(0);
        for (int64_t r = 0; r < x.rows; ++r)
          std::copy(x.data + r * x.stride, x.data + r * x.stride + x.cols,
                    kept.data + r * kept.stride);
        for (int64_t j = 0; j < heads; ++j)
          cpu::NormForward(norm, head(cpu::ConstMat(kept), j), gain(j), kNormEps, head(y, j));
        return Status::Ok();
      }
      // The input gradient into g_qk, then over the output gradient it replaces.
      cpu::Mat dx = out(1), dy_out = out(0);
      for (int64_t j = 0; j < heads; ++j)
        cpu::NormBackward(norm, head(in(0), j), gain(j), kNormEps, head(in(1), j), head(dx, j),
                          /*accumulate_dx=*/false, out(2).data + (j < op.heads ? 0 : d));
      for (int64_t r = 0; r < dx.rows; ++r)
        std::copy(dx.data + r * dx.stride, dx.data + r * dx.stride + dx.cols,
                  dy_out.data + r * dy_out.stride);
      return Status::Ok();
    }
    case OpFunc::kResidual1:
    case OpFunc::kResidual2:
      // The branch (the second tensor) through its dropout, placed by the residual it writes.
      if (!need(2, 1)) return fail("a residual add reads two tensors and writes one");
      cpu::Add(in(0), in(1), out(0), Dropout(op, op.func == OpFunc::kResidual1 ? 1 : 2, writes[0]));
      return Status::Ok();
    case OpFunc::kDropout1Grad:
    case OpFunc::kDropout2Grad:
      if (!need(1, 1)) return fail("a dropout's backward reads a gradient and writes one");
      cpu::Dropout(in(0), Dropout(op, op.func == OpFunc::kDropout1Grad ? 1 : 2, writes[0]), out(0));
      return Status::Ok();
    case OpFunc::kEmbed:
    case OpFunc::kEmbedGrad: {
      // Tokens and the table's (or its gradient's) vocabulary rows; out-of-part tokens add 0.
      const bool backward = op.func == OpFunc::kEmbedGrad;
      if (!need(2, 1)) return fail("the embedding reads tokens and a table (or gradient)");
      const TensorUse& table = backward ? writes[0] : reads[1];
      const Tensor& t = schedule.tensors()[table.tensor];
      if (t.shard != Shard::kRows || in(0).cols != 1 ||
          (backward ? in(1).cols : out(0).cols) != t.cols)
        return fail("the embedding needs a column of tokens and a vocabulary-row table");
      const int64_t vocab_begin = WholeIndex(t, rank_, tp_, 0, 0).rows;
      if (backward)
        cpu::EmbeddingBackward(in(0), vocab_begin, in(1), out(0));
      else
        cpu::EmbeddingForward(in(0), vocab_begin, in(1), out(0));
      return Status::Ok();
    }
    case OpFunc::kFinalNorm:
    case OpFunc::kPostNorm1:
    case OpFunc::kPostNorm2:
      if (!need(2, 1)) return fail("a norm reads its input and weight and writes one tensor");
      cpu::NormForward(norm, in(0), in(1).data, kNormEps, out(0));
      return Status::Ok();
    case OpFunc::kFinalNormGrad:
    case OpFunc::kPostNorm1Grad:
    case OpFunc::kPostNorm2Grad:
      // The residual stream ends here, or (a post-norm) the gradient leaves it for the branch: dx
      // is the norm's backward alone; dgamma accumulates.
      if (!need(3, 2)) return fail("a norm's backward reads x, dy and gamma");
      cpu::NormBackward(norm, in(0), in(2).data, kNormEps, in(1), out(0), /*accumulate_dx=*/false,
                        out(1).data);
      return Status::Ok();
    case OpFunc::kLmHead:
    case OpFunc::kLmHeadGradInput:
    case OpFunc::kLmHeadGradWeight: {
      // The weight is vocabulary-major (vocab x hidden): logits = X W^T, dX = dlogits W,
      // dW += dlogits^T X.
      if (!need(2, 1)) return fail("a GEMM reads two tensors and writes one");
      cpu::ConstMat a = in(0), b = in(1);
      cpu::Mat c = out(0);
      const bool forward = op.func == OpFunc::kLmHead, wgrad = op.func == OpFunc::kLmHeadGradWeight;
      const int64_t m = wgrad ? a.cols : a.rows, k = wgrad ? a.rows : a.cols;
      const int64_t n = forward ? b.rows : b.cols, kb = forward ? b.cols : b.rows;
      if (k != kb || c.rows != m || c.cols != n) return fail("GEMM shapes do not agree");
      cpu::Gemm(a, wgrad, b, forward, c, wgrad);
      return Status::Ok();
    }
    case OpFunc::kLoss:
    case OpFunc::kLossGrad: {
      const bool backward = op.func == OpFunc::kLossGrad;
      if (!need(backward ? 3 : 2, 1))
        return fail("the loss reads logits and labels (and, backward, the loss statistics)");
      const Tensor& logits = schedule.tensors()[reads[0].tensor];
      const int64_t vocab_begin = WholeIndex(logits, rank_, tp_, 0, reads[0].view.col_begin).cols;
      const cpu::ConstMat stats = backward ? in(2) : cpu::ConstMat(out(0));
      if (stats.cols != tp_ + 1 || stats.rows != in(0).rows || in(1).cols != 1)
        return fail(fmt::format("the loss statistics need tp + 1 = {} columns per token", tp_ + 1));
      if (backward)
        cpu::CrossEntropyBackward(in(0), in(1), in(2), vocab_begin, model_.vocab,
                                  WholeShape(logits, tp_).rows, out(0), model_.logit_softcap);
      else
        cpu::CrossEntropyStats(in(0), in(1), vocab_begin, model_.vocab, rank_, out(0),
                               model_.logit_softcap);
      return Status::Ok();
    }
    case OpFunc::kResidualGrad: {
      // The loss gradient of the stack's output: reference values of the written tensor.
      if (!need(0, 1)) return fail("the output gradient writes one tensor");
      const TensorUse& u = writes[0];
      FillGiven(schedule.tensors()[u.tensor], model_, rank_, tp_, seed_, offsets_, u.view,
                data_[u.tensor]);
      return Status::Ok();
    }
    default:
      break;
  }
  return fail("not a compute op the CPU backend runs");
}

}  // namespace domino::exec
