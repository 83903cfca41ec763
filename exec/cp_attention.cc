#include "exec/cp_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "exec/positions.h"

namespace domino::exec {

namespace {

// Copies the columns of share `j` of one row between the full row [Q | K | V] (or [Q]) of a TP
// rank's heads and the share's row [Q_j | K_j | V_j] (or [Q_j]), whose heads are the j-th
// `q_share` / `kv_share` columns of each: into the share (`to_share`) or back.
void MapShare(int j, int64_t q_share, int64_t kv_share, int64_t shares, bool with_kv, float* full,
              float* share, bool to_share) {
  struct Segment {
    int64_t full, share, count;
  };
  const int64_t q = q_share * shares, kv = kv_share * shares;
  const Segment segments[] = {{j * q_share, 0, q_share},
                              {q + j * kv_share, q_share, kv_share},
                              {q + kv + j * kv_share, q_share + kv_share, kv_share}};
  for (int k = 0; k < (with_kv ? 3 : 1); ++k) {
    const Segment& s = segments[k];
    if (to_share) {
      std::copy_n(full + s.full, s.count, share + s.share);
    } else {
      std::copy_n(share + s.share, s.count, full + s.full);
    }
  }
}

}  // namespace

Result<std::unique_ptr<CpAttention>> CpAttention::Create(const Plan& plan, Communicator& cp) {
  if (cp.size() != plan.cp)
    return Error(
        fmt::format("context parallelism over {} ranks; the plan has cp {}", cp.size(), plan.cp));
  std::unique_ptr<CpAttention> a(new CpAttention(plan, cp));
  a->comm_ = plan.cp_communication();
  switch (a->comm_) {
    case CpComm::kP2p:
      a->ring_ = plan.cp, a->ring_group_ = &cp;
      break;
    case CpComm::kAllGather:
      break;
    case CpComm::kA2a:
      a->a2a_ = plan.cp, a->a2a_group_ = &cp;
      break;
    case CpComm::kA2aP2p: {
      const int g = plan.cp_a2a_ranks(), rank = cp.rank();
      a->a2a_ = g, a->ring_ = plan.cp / g;
      Result<std::unique_ptr<Communicator>> group = cp.Split(rank / g, rank % g);
      if (!group.ok()) return group.error();
      Result<std::unique_ptr<Communicator>> ring = cp.Split(rank % g, rank / g);
      if (!ring.ok()) return ring.error();
      a->a2a_split_ = std::move(group).value();
      a->ring_split_ = std::move(ring).value();
      a->a2a_group_ = a->a2a_split_.get(), a->ring_group_ = a->ring_split_.get();
      break;
    }
  }
  return a;
}

double CpAttention::HostFlopsPerCore(const Plan& plan) {
  const double sequences = static_cast<double>(plan.micro_batch) / plan.row_split;
  const double local = static_cast<double>(plan.local_seq_len());
  // Causal: each query sees the keys before it, half the sequence on average.
  return 4.0 * sequences * local * (plan.seq_len / 2.0) * (plan.model.heads / plan.tp) *
         plan.model.head_width();
}

bool CpAttention::Runs(const Op& op) {
  switch (op.func) {
    case OpFunc::kAttn:
    case OpFunc::kAttnGrad:
    case OpFunc::kCpSendRecv:
    case OpFunc::kCpAllGather:
    case OpFunc::kCpReduceScatter:
    case OpFunc::kCpAllToAll:
      return true;
    default:
      return false;
  }
}

CpAttention::Dims CpAttention::DimsOf(const Schedule& s, int32_t id) const {
  const View& view = s.reads(s.op(id))[0].view;
  return Dims{plan_.model.heads / plan_.tp / a2a_, plan_.model.kv_heads / plan_.tp / a2a_,
              plan_.model.head_width(), plan_.local_seq_len(), view.row_end - view.row_begin};
}

CpAttention::Rows CpAttention::RowsOf(int first, int ranks, int64_t rows) const {
  const int64_t local = plan_.local_seq_len();
  Rows at;
  for (int k = 0; k < ranks; ++k)
    for (int64_t r = 0; r < rows; ++r) {
      at.seq.push_back(r / local);
      at.pos.push_back(CpPosition(r % local, plan_.seq_len, plan_.cp, first + k));
    }
  return at;
}

CpAttention::Rows CpAttention::KeysAt(int owner, int64_t rows) const {
  return RowsOf(owner * a2a_, a2a_, rows);
}

Status CpAttention::Run(const Schedule& s, int32_t id, Backend& backend, int window,
                        const AttentionDropout& dropout) {
  const Op& op = s.op(id);
  if (s.reads(op).empty() || s.writes(op).empty())
    return Error(fmt::format("op {} ({}): no tensor to read or write", id, s.Label(id)));
  const Key key{&backend, op.tags.layer, op.tags.row_slice, static_cast<int>(op.tags.phase)};
  auto wrong = [&] {
    return Error(fmt::format("op {} ({}): not an op of context parallelism's {}", id, s.Label(id),
                             CpCommName(comm_)));
  };
  switch (op.func) {
    case OpFunc::kCpAllGather:
      if (comm_ != CpComm::kAllGather) return wrong();
      return Gather(s, id, backend, key);
    case OpFunc::kCpReduceScatter:
      if (comm_ != CpComm::kAllGather) return wrong();
      return ReduceScatter(s, id, backend, key);
    case OpFunc::kCpAllToAll:
      if (a2a_ == 1) return wrong();
      return Trade(s, id, backend, key);
    case OpFunc::kCpSendRecv:
      if (ring_ == 1) return wrong();
      return Transfer(s, id, backend, key);
    case OpFunc::kAttn:
    case OpFunc::kAttnGrad:
      return Attend(s, id, backend, key, window, dropout);
    default:
      return wrong();
  }
}

void CpAttention::Start(const Dims& dm, Core& c, const float* src, int64_t src_cols, int64_t first,
                        bool backward) const {
  const int64_t n = static_cast<int64_t>(c.at.pos.size()), kv = dm.kv_cols();
  const int64_t width = backward ? 4 * kv : 2 * kv;
  Keys own;
  own.owner = cp_.rank() / a2a_;
  own.data.assign(static_cast<size_t>(n * width), 0.0f);
  for (int64_t r = 0; r < n; ++r)
    std::copy_n(src + r * src_cols + first, 2 * kv, own.data.data() + r * width);
  c.keys.assign(1, std::move(own));
}

Status CpAttention::PassOn(Core& c) {
  Keys& k = c.keys[0];
  const int me = ring_group_->rank(), n = ring_group_->size();
  c.next.data.resize(k.data.size());
  c.next.owner = (k.owner + n - 1) % n;
  return ring_group_->SendRecv(k.data.data(), (me + 1) % n, c.next.data.data(), (me + n - 1) % n,
                               static_cast<int64_t>(k.data.size()));
}

Result<CpAttention::Core*> CpAttention::CoreOf(const Schedule& s, int32_t id, Backend& backend,
                                               const Key& key) {
  auto found = cores_.find(key);
  if (found != cores_.end()) return &found->second;
  const Op& op = s.op(id);
  if (comm_ != CpComm::kP2p || op.tags.ring_step != 0)
    return Error(fmt::format("op {} ({}): the attention's {} before its first", id, s.Label(id),
                             op.func == OpFunc::kCpSendRecv ? "transfer" : "step"));
  // The ring starts with the rank's own block: the K and V columns of its qkv rows (a transfer
  // reads just those).
  const Dims dm = DimsOf(s, id);
  const TensorUse& use = s.reads(op)[0];
  const int64_t cols = use.view.col_end - use.view.col_begin;
  std::vector<float> packed(static_cast<size_t>(dm.rows * cols));
  DOMINO_RETURN_IF_ERROR(backend.Pack(use, packed.data()));
  Core c;
  c.at = RowsOf(cp_.rank(), 1, dm.rows);
  Start(dm, c, packed.data(), cols, cols == 2 * dm.kv_cols() ? 0 : dm.q_cols(),
        op.tags.phase == Phase::kBackward);
  return &cores_.emplace(key, std::move(c)).first->second;
}

const CpAttention::Saved* CpAttention::SavedOf(const Key& key) const {
  const auto found = outputs_.find({std::get<0>(key), std::get<1>(key), std::get<2>(key)});
  return found == outputs_.end() ? nullptr : &found->second;
}

Status CpAttention::Transfer(const Schedule& s, int32_t id, Backend& backend, const Key& key) {
  const Op& op = s.op(id);
  const int step = op.tags.ring_step;
  if (step < 0 || step >= ring_)
    return Error(fmt::format("op {} ({}): not a step of a ring of {}", id, s.Label(id), ring_));
  Result<Core*> found = CoreOf(s, id, backend, key);
  if (!found.ok()) return found.error();
  Core& c = **found;
  if (op.tags.phase != Phase::kBackward) {  // prefetch the next block; step j computes with this
    DOMINO_RETURN_IF_ERROR(PassOn(c));
    c.has_next = true;
  } else if (step > 0) {  // the block moves on with the gradients added to it so far
    DOMINO_RETURN_IF_ERROR(PassOn(c));
    std::swap(c.keys[0], c.next);
  }
  return Status::Ok();
}

Status CpAttention::Gather(const Schedule& s, int32_t id, Backend& backend, const Key& key) {
  if (cores_.count(key))
    return Error(fmt::format("op {} ({}): keys gathered twice for one attention", id, s.Label(id)));
  const Op& op = s.op(id);
  const Dims dm = DimsOf(s, id);
  const int64_t kv = dm.kv_cols(), count = dm.rows * 2 * kv;
  const int64_t width = op.tags.phase == Phase::kBackward ? 4 * kv : 2 * kv;
  std::vector<float> own(static_cast<size_t>(count)), all(static_cast<size_t>(count * plan_.cp));
  DOMINO_RETURN_IF_ERROR(backend.Pack(s.reads(op)[0], own.data()));
  DOMINO_RETURN_IF_ERROR(cp_.AllGather(own.data(), all.data(), count));
  Core c;
  c.at = RowsOf(cp_.rank(), 1, dm.rows);
  c.keys.resize(static_cast<size_t>(plan_.cp));
  for (int o = 0; o < plan_.cp; ++o) {
    Keys& k = c.keys[o];
    k.owner = o;
    k.data.assign(static_cast<size_t>(dm.rows * width), 0.0f);
    for (int64_t r = 0; r < dm.rows; ++r)
      std::copy_n(all.data() + o * count + r * 2 * kv, 2 * kv, k.data.data() + r * width);
  }
  cores_.emplace(key, std::move(c));
  return Status::Ok();
}

Status CpAttention::ReduceScatter(const Schedule& s, int32_t id, Backend& backend, const Key& key) {
  auto found = cores_.find(key);
  if (found == cores_.end() || !found->second.done)
    return Error(
        fmt::format("op {} ({}): a reduce-scatter of gradients not yet computed", id, s.Label(id)));
  const Core& c = found->second;
  const Dims dm = DimsOf(s, id);
  const int64_t kv = dm.kv_cols(), count = dm.rows * 2 * kv;
  std::vector<float> all(static_cast<size_t>(count * plan_.cp)), own(static_cast<size_t>(count));
  for (int o = 0; o < plan_.cp; ++o)
    for (int64_t r = 0; r < dm.rows; ++r)
      std::copy_n(c.keys[o].data.data() + r * 4 * kv + 2 * kv, 2 * kv,
                  all.data() + o * count + r * 2 * kv);
  DOMINO_RETURN_IF_ERROR(cp_.ReduceScatter(all.data(), own.data(), count));
  DOMINO_RETURN_IF_ERROR(backend.Unpack(s.writes(s.op(id))[0], own.data()));
  cores_.erase(found);
  return Status::Ok();
}

Status CpAttention::Trade(const Schedule& s, int32_t id, Backend& backend, const Key& key) {
  const Op& op = s.op(id);
  const bool backward = op.tags.phase == Phase::kBackward;
  Communicator& group = *a2a_group_;
  const int a = a2a_;
  const Dims dm = DimsOf(s, id);
  const int64_t q = dm.q_cols(), kv = dm.kv_cols(), rows = dm.rows;
  // `share` columns a row of this rank's heads, `full` of the TP rank's: [Q | K | V], or [Q] for
  // the output and its gradient.
  auto found = cores_.find(key);
  if (found == cores_.end()) {
    // The trade in: forward the rank's qkv rows, backward the output's gradient.
    const int64_t share = backward ? q : q + 2 * kv, full = share * a;
    std::vector<float> in(static_cast<size_t>(rows * full));
    std::vector<float> send(in.size()), recv(in.size());
    DOMINO_RETURN_IF_ERROR(backend.Pack(s.reads(op)[0], in.data()));
    for (int j = 0; j < a; ++j)
      for (int64_t r = 0; r < rows; ++r)
        MapShare(j, q, kv, a, !backward, in.data() + r * full, send.data() + (j * rows + r) * share,
                 true);
    DOMINO_RETURN_IF_ERROR(group.AllToAll(send.data(), recv.data(), rows * share));
    Core c;
    if (!backward) {
      c.qkv = std::move(recv);
      c.at = RowsOf(cp_.rank() / a * a, a, rows);
    } else {
      c.saved = SavedOf(key);
      if (c.saved == nullptr)
        return Error(fmt::format("op {} ({}): no forward attention to take the backward of", id,
                                 s.Label(id)));
      c.dout = std::move(recv);
      c.qkv = c.saved->qkv;
      c.at = c.saved->at;
    }
    Start(dm, c, c.qkv.data(), q + 2 * kv, q, backward);
    cores_.emplace(key, std::move(c));
    return Status::Ok();
  }
  Core& c = found->second;
  if (!c.done)
    return Error(
        fmt::format("op {} ({}): an all-to-all before the attention is computed", id, s.Label(id)));
  // The trade out: each source's rows of the result go home, with this rank's heads.
  const int64_t share = backward ? q + 2 * kv : q, full = share * a;
  std::vector<float> recv(c.result.size()), out(static_cast<size_t>(rows * full));
  DOMINO_RETURN_IF_ERROR(group.AllToAll(c.result.data(), recv.data(), rows * share));
  for (int j = 0; j < a; ++j)
    for (int64_t r = 0; r < rows; ++r)
      MapShare(j, q, kv, a, backward, out.data() + r * full, recv.data() + (j * rows + r) * share,
               false);
  DOMINO_RETURN_IF_ERROR(backend.Unpack(s.writes(op)[0], out.data()));
  cores_.erase(found);
  return Status::Ok();
}

Status CpAttention::Attend(const Schedule& s, int32_t id, Backend& backend, const Key& key,
                           int window, AttentionDropout dropout) {
  const Op& op = s.op(id);
  const bool backward = op.func == OpFunc::kAttnGrad;
  const bool gathered = comm_ == CpComm::kAllGather;
  const int steps = gathered ? 2 : ring_;
  const int step = std::max<int>(op.tags.ring_step, 0);  // a2a's one core has no step
  if (step >= steps || (op.tags.ring_step < 0 && steps > 1))
    return Error(
        fmt::format("op {} ({}): not a step of an attention of {}", id, s.Label(id), steps));
  Result<Core*> found = CoreOf(s, id, backend, key);
  if (!found.ok()) return found.error();
  Core& c = **found;
  const Dims dm = DimsOf(s, id);
  const int64_t n = static_cast<int64_t>(c.at.pos.size());
  std::span<const TensorUse> reads = s.reads(op);
  if (a2a_ == 1) {  // the rank's own rows: the op reads them (and the output's gradient)
    if (c.qkv.empty()) {
      c.qkv.resize(static_cast<size_t>(n * (dm.q_cols() + 2 * dm.kv_cols())));
      DOMINO_RETURN_IF_ERROR(backend.Pack(reads[0], c.qkv.data()));
    }
    if (backward && c.dout.empty()) {
      if (reads.size() != 2)
        return Error(fmt::format("op {} ({}): no output gradient", id, s.Label(id)));
      c.dout.resize(static_cast<size_t>(n * dm.q_cols()));
      DOMINO_RETURN_IF_ERROR(backend.Pack(reads[1], c.dout.data()));
      c.saved = SavedOf(key);
    }
  }
  if (backward && c.saved == nullptr)
    return Error(
        fmt::format("op {} ({}): no forward attention to take the backward of", id, s.Label(id)));
  const size_t queries = static_cast<size_t>(n * dm.heads);
  if (backward && c.dq.empty()) c.dq.assign(static_cast<size_t>(n * dm.q_cols()), 0.0f);
  if (!backward && c.max.empty()) {
    c.max.assign(queries, -INFINITY);
    c.sum.assign(queries, 0.0);
    c.acc.assign(queries * static_cast<size_t>(dm.dim), 0.0);
  }
  // The masks' places: the slice's sequences from its first, and a2a's share of the TP rank's
  // heads (share j goes to the group's rank j).
  dropout.first_sequence += s.reads(op)[0].view.row_begin / dm.local;
  if (a2a_ > 1) dropout.first_head += a2a_group_->rank() * dm.heads;
  if (gathered) {
    for (Keys& k : c.keys) Fold(dm, c, k, backward, step, window, dropout);
  } else {
    Fold(dm, c, c.keys[0], backward, -1, window, dropout);
    if (!backward && c.has_next) {
      std::swap(c.keys[0], c.next);
      c.has_next = false;
    }
  }
  if (step != steps - 1) return Status::Ok();
  return Finish(s, id, backend, key, c, dm, backward);
}

Status CpAttention::Finish(const Schedule& s, int32_t id, Backend& backend, const Key& key, Core& c,
                           const Dims& dm, bool backward) {
  const int64_t n = static_cast<int64_t>(c.at.pos.size()), q = dm.q_cols(), kv = dm.kv_cols();
  const bool gathered = comm_ == CpComm::kAllGather;
  if (!backward) {
    Saved saved;
    saved.out.resize(static_cast<size_t>(n * q));
    saved.lse.resize(c.max.size());
    for (size_t i = 0; i < c.max.size(); ++i) {
      saved.lse[i] = static_cast<float>(c.max[i] + std::log(c.sum[i]));
      for (int64_t k = 0; k < dm.dim; ++k)
        saved.out[i * dm.dim + k] = static_cast<float>(c.acc[i * dm.dim + k] / c.sum[i]);
    }
    saved.qkv = std::move(c.qkv);
    saved.at = std::move(c.at);
    c.result = saved.out;
    outputs_[{std::get<0>(key), std::get<1>(key), std::get<2>(key)}] = std::move(saved);
  } else {
    // The ring: one more pass brings this rank's block home with every rank's gradients in it.
    if (!gathered && ring_ > 1) {
      DOMINO_RETURN_IF_ERROR(PassOn(c));
      std::swap(c.keys[0], c.next);
    }
    // [dQ | dK | dV]; all_gather's dK and dV of every rank wait for the reduce-scatter.
    const int64_t cols = q + 2 * kv;
    c.result.assign(static_cast<size_t>(n * cols), 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(c.dq.data() + r * q, q, c.result.data() + r * cols);
      if (!gathered)
        std::copy_n(c.keys[0].data.data() + r * 4 * kv + 2 * kv, 2 * kv,
                    c.result.data() + r * cols + q);
    }
  }
  c.done = true;
  if (a2a_ > 1) return Status::Ok();  // the trade out writes it
  DOMINO_RETURN_IF_ERROR(backend.Unpack(s.writes(s.op(id))[0], c.result.data()));
  if (!(gathered && backward)) cores_.erase(key);
  return Status::Ok();
}

// Folds `keys` into the core's queries, causally by position within each sequence (and within
// the window). Forward: the online softmax. Backward: P = exp(scale q k - lse), dV += P dO, dS =
// P (dO v - rowsum(dO o)), dQ += scale dS k, dK += scale dS q.
void CpAttention::Fold(const Dims& dm, Core& c, Keys& keys, bool backward, int chunk, int window,
                       const AttentionDropout& dropout) const {
  const Rows at = KeysAt(keys.owner, dm.rows);
  const int64_t d = dm.dim, q_cols = dm.q_cols(), kv = dm.kv_cols(), cols = q_cols + 2 * kv;
  const int64_t width = backward ? 4 * kv : 2 * kv, group = dm.heads / dm.kv_heads;
  const int64_t n = static_cast<int64_t>(c.at.pos.size());
  const int64_t m = static_cast<int64_t>(at.pos.size()), half = dm.local / 2;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double cap = plan_.model.attention_softcap;  // 0: none
  for (int64_t row = 0; row < n; ++row) {
    if (chunk >= 0 && (row % dm.local) / half != chunk) continue;
    for (int64_t h = 0; h < dm.heads; ++h) {
      const int64_t g = h / group, qh = row * dm.heads + h;
      const float* qv = c.qkv.data() + row * cols + h * d;
      double o_dot = 0;  // backward: rowsum(dO o) of this query and head
      const float* dO = backward ? c.dout.data() + row * q_cols + h * d : nullptr;
      if (backward)
        for (int64_t k = 0; k < d; ++k) o_dot += double{dO[k]} * c.saved->out[qh * d + k];
      for (int64_t u = 0; u < m; ++u) {
        if (at.seq[u] != c.at.seq[row] || at.pos[u] > c.at.pos[row] ||
            (window > 0 && c.at.pos[row] - at.pos[u] > window))
          continue;
        float* key_row = keys.data.data() + u * width;
        const float* kr = key_row + g * d;
        const float* vr = key_row + kv + g * d;
        double score = 0;
        for (int64_t k = 0; k < d; ++k) score += double{qv[k]} * kr[k];
        score *= scale;
        double cap_grad = 1;  // the soft cap's derivative, 1 - tanh^2
        if (cap > 0) {
          const double th = std::tanh(score / cap);
          score = cap * th;
          cap_grad = 1 - th * th;
        }
        // The dropout mask of this query and key: it scales the key's weight in the output (and
        // backward, dV and dP), not the softmax's sum.
        const double drop = dropout.Scale(c.at.seq[row], h, c.at.pos[row], at.pos[u]);
        if (!backward) {
          const double mx = std::max(c.max[qh], score);
          const double rescale = std::exp(c.max[qh] - mx), w = std::exp(score - mx);
          c.sum[qh] = c.sum[qh] * rescale + w;
          for (int64_t k = 0; k < d; ++k)
            c.acc[qh * d + k] = c.acc[qh * d + k] * rescale + w * drop * vr[k];
          c.max[qh] = mx;
          continue;
        }
        const double p = std::exp(score - c.saved->lse[qh]);
        double dp = 0;
        for (int64_t k = 0; k < d; ++k) dp += double{dO[k]} * vr[k];
        dp *= drop;
        const double ds = p * (dp - o_dot) * cap_grad;
        float* dk = key_row + 2 * kv + g * d;
        float* dv = key_row + 3 * kv + g * d;
        float* dq = c.dq.data() + row * q_cols + h * d;
        for (int64_t k = 0; k < d; ++k) {
          dv[k] += static_cast<float>(p * drop * dO[k]);
          dq[k] += static_cast<float>(scale * ds * kr[k]);
          dk[k] += static_cast<float>(scale * ds * qv[k]);
        }
      }
    }
  }
}

}  // namespace domino::exec
