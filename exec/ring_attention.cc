#include "exec/ring_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <span>

#include "exec/reference.h"

namespace domino::exec {

Status RingAttention::Run(const Schedule& s, int32_t id, Backend& backend) {
  const Op& op = s.op(id);
  const int cp = plan_.cp, step = op.tags.ring_step;
  const bool backward = op.tags.phase == Phase::kBackward;
  const bool transfer = op.func == OpFunc::kCpSendRecv;
  std::span<const TensorUse> reads = s.reads(op), writes = s.writes(op);
  if (reads.empty() || step < 0 || step >= cp)
    return Error(fmt::format("op {} ({}): not a step of a ring of {}", id, s.Label(id), cp));
  RingShape shape{plan_.model.heads / plan_.tp, plan_.model.kv_heads / plan_.tp,
                  plan_.model.head_width(), plan_.local_seq_len(),
                  reads[0].view.row_end - reads[0].view.row_begin};
  const int64_t kv = shape.kv_cols(), width = backward ? 4 * kv : 2 * kv;
  const RingKey key{&backend, op.tags.layer, op.tags.row_slice, static_cast<int>(op.tags.phase)};
  auto found = rings_.find(key);
  if (found == rings_.end()) {
    if (step != 0)
      return Error(fmt::format("op {} ({}): ring step {} before step 0", id, s.Label(id), step));
    // The rank's own block: the K and V columns of its qkv rows (a transfer reads just those).
    const TensorUse& use = reads[0];
    const int64_t cols = use.view.col_end - use.view.col_begin;
    std::vector<float> packed(static_cast<size_t>(shape.rows * cols));
    DOMINO_RETURN_IF_ERROR(backend.Pack(use, packed.data()));
    const int64_t first = cols == 2 * kv ? 0 : shape.q_cols();
    Ring ring;
    ring.owner = cp_rank_;
    ring.block.assign(static_cast<size_t>(shape.rows * width), 0.0f);
    for (int64_t r = 0; r < shape.rows; ++r)
      std::copy_n(packed.data() + r * cols + first, 2 * kv, ring.block.data() + r * width);
    const size_t queries = static_cast<size_t>(shape.rows * shape.heads);
    if (backward) {
      ring.dq.assign(static_cast<size_t>(shape.rows * shape.q_cols()), 0.0f);
    } else {
      ring.max.assign(queries, -INFINITY);
      ring.sum.assign(queries, 0.0);
      ring.acc.assign(queries * shape.dim, 0.0);
    }
    found = rings_.emplace(key, std::move(ring)).first;
  }
  Ring& ring = found->second;
  const int next = (cp_rank_ + 1) % cp, prev = (cp_rank_ + cp - 1) % cp;
  auto pass_on = [&](std::vector<float>& into) {
    into.resize(ring.block.size());
    return cp_.SendRecv(ring.block.data(), next, into.data(), prev,
                        static_cast<int64_t>(ring.block.size()));
  };
  if (transfer) {
    if (!backward) {  // prefetch the next block; step j still computes with the current one
      DOMINO_RETURN_IF_ERROR(pass_on(ring.next));
      ring.has_next = true;
    } else if (step > 0) {  // the block moves on with the gradients added to it so far
      DOMINO_RETURN_IF_ERROR(pass_on(ring.next));
      ring.block.swap(ring.next);
      ring.owner = (ring.owner + cp - 1) % cp;
    }
    return Status::Ok();
  }
  // A block: this rank's queries against the current block's keys.
  std::vector<float> qkv(static_cast<size_t>(shape.rows * (shape.q_cols() + 2 * kv)));
  DOMINO_RETURN_IF_ERROR(backend.Pack(reads[0], qkv.data()));
  std::vector<float> dout;
  const RingOutput* saved = nullptr;
  if (backward) {
    if (reads.size() != 2)
      return Error(fmt::format("op {} ({}): no output gradient", id, s.Label(id)));
    dout.resize(static_cast<size_t>(shape.rows * shape.q_cols()));
    DOMINO_RETURN_IF_ERROR(backend.Pack(reads[1], dout.data()));
    const auto out = outputs_.find({&backend, op.tags.layer, op.tags.row_slice});
    if (out == outputs_.end())
      return Error(
          fmt::format("op {} ({}): no forward ring to take the backward of", id, s.Label(id)));
    saved = &out->second;
  }
  Block(shape, qkv, dout, saved, ring, backward);
  if (!backward && ring.has_next) {
    ring.block.swap(ring.next);
    ring.owner = (ring.owner + cp - 1) % cp;
    ring.has_next = false;
  }
  if (step != cp - 1) return Status::Ok();
  // The ring is done.
  const int64_t q_cols = shape.q_cols();
  if (!backward) {
    RingOutput out;
    out.out.resize(static_cast<size_t>(shape.rows * q_cols));
    out.lse.resize(ring.max.size());
    for (size_t i = 0; i < ring.max.size(); ++i) {
      out.lse[i] = static_cast<float>(ring.max[i] + std::log(ring.sum[i]));
      for (int64_t c = 0; c < shape.dim; ++c)
        out.out[i * shape.dim + c] = static_cast<float>(ring.acc[i * shape.dim + c] / ring.sum[i]);
    }
    DOMINO_RETURN_IF_ERROR(backend.Unpack(writes[0], out.out.data()));
    outputs_[{&backend, op.tags.layer, op.tags.row_slice}] = std::move(out);
  } else {
    // One more pass brings this rank's block home with every rank's gradients in it.
    DOMINO_RETURN_IF_ERROR(pass_on(ring.next));
    ring.block.swap(ring.next);
    const int64_t cols = q_cols + 2 * kv;
    std::vector<float> dqkv(static_cast<size_t>(shape.rows * cols));
    for (int64_t r = 0; r < shape.rows; ++r) {
      std::copy_n(ring.dq.data() + r * q_cols, q_cols, dqkv.data() + r * cols);
      std::copy_n(ring.block.data() + r * width + 2 * kv, 2 * kv, dqkv.data() + r * cols + q_cols);
    }
    DOMINO_RETURN_IF_ERROR(backend.Unpack(writes[0], dqkv.data()));
  }
  rings_.erase(found);
  return Status::Ok();
}

// One block of the ring: local queries (rows of `qkv`) against the keys of `ring.block`
// (tokens of CP rank ring.owner), causal by position in the sequence. Forward: folds them into
// the online softmax. Backward: P = exp(scale q k - lse), dV += P dO, dS = P (dO v - rowsum(dO
// o)), dQ += scale dS k, dK += scale dS q.
void RingAttention::Block(const RingShape& sh, const std::vector<float>& qkv,
                          const std::vector<float>& dout, const RingOutput* saved, Ring& ring,
                          bool backward) const {
  const int64_t d = sh.dim, q_cols = sh.q_cols(), kv = sh.kv_cols(), cols = q_cols + 2 * kv;
  const int64_t width = backward ? 4 * kv : 2 * kv, group = sh.heads / sh.kv_heads;
  const int64_t local = sh.local, sequences = sh.rows / local;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t b = 0; b < sequences; ++b) {
    for (int64_t t = 0; t < local; ++t) {
      const int64_t row = b * local + t;
      const int64_t pq = CpPosition(t, plan_.seq_len, plan_.cp, cp_rank_);
      for (int64_t h = 0; h < sh.heads; ++h) {
        const int64_t g = h / group, qh = row * sh.heads + h;
        const float* q = qkv.data() + row * cols + h * d;
        double o_dot = 0;  // backward: rowsum(dO o) of this query and head
        const float* dO = backward ? dout.data() + row * q_cols + h * d : nullptr;
        if (backward)
          for (int64_t c = 0; c < d; ++c) o_dot += double{dO[c]} * saved->out[qh * d + c];
        for (int64_t u = 0; u < local; ++u) {
          if (CpPosition(u, plan_.seq_len, plan_.cp, ring.owner) > pq) continue;
          float* key_row = ring.block.data() + (b * local + u) * width;
          const float* k = key_row + g * d;
          const float* v = key_row + kv + g * d;
          double score = 0;
          for (int64_t c = 0; c < d; ++c) score += double{q[c]} * k[c];
          score *= scale;
          if (!backward) {
            const double m = std::max(ring.max[qh], score);
            const double rescale = std::exp(ring.max[qh] - m), w = std::exp(score - m);
            ring.sum[qh] = ring.sum[qh] * rescale + w;
            for (int64_t c = 0; c < d; ++c)
              ring.acc[qh * d + c] = ring.acc[qh * d + c] * rescale + w * v[c];
            ring.max[qh] = m;
            continue;
          }
          const double p = std::exp(score - saved->lse[qh]);
          double dp = 0;
          for (int64_t c = 0; c < d; ++c) dp += double{dO[c]} * v[c];
          const double ds = p * (dp - o_dot);
          float* dk = key_row + 2 * kv + g * d;
          float* dv = key_row + 3 * kv + g * d;
          float* dq = ring.dq.data() + row * q_cols + h * d;
          for (int64_t c = 0; c < d; ++c) {
            dv[c] += static_cast<float>(p * dO[c]);
            dq[c] += static_cast<float>(scale * ds * k[c]);
            dk[c] += static_cast<float>(scale * ds * q[c]);
          }
        }
      }
    }
  }
}

}  // namespace domino::exec
