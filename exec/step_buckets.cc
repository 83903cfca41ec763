#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "exec/step_runner.h"

namespace domino::exec::whole_step {

// Sums the bucket's gradients over the micro-batches and scales them to the global batch's
// mean; sequence-parallel partial sums (norm gains) are summed over TP.
Status StepRunner::Finalize(Chunk& c, Bucket& b) {
  if (b.final) return Status::Ok();
  b.final = true;
  if (device_) {
    const float scale =
        1.0f / static_cast<float>(static_cast<int64_t>(c.mbs.size()) * plan_.dp_cp());
    DOMINO_RETURN_IF_ERROR(device_->Zero(b.d_grad, static_cast<int64_t>(b.grad.size())));
    for (const Param& p : b.params) {
      DOMINO_RETURN_IF_ERROR(device_->Accumulate(c.runners, p.grad, b.d_grad + p.offset, scale));
      if (c.schedule.tensors()[p.grad].shard == Shard::kPartialSum)
        DOMINO_RETURN_IF_ERROR(device_->AllReduceTp(b.d_grad + p.offset, p.size));
    }
    return Status::Ok();
  }
  std::fill(b.grad.begin(), b.grad.end(), 0.0f);
  for (const Param& p : b.params)
    for (auto& backend : c.mbs) {
      Result<std::vector<float>> g = backend->Read(p.grad);
      if (!g.ok()) return g.error();
      for (int64_t i = 0; i < p.size; ++i) b.grad[p.offset + i] += (*g)[i];
    }
  const float scale = 1.0f / static_cast<float>(static_cast<int64_t>(c.mbs.size()) * plan_.dp_cp());
  for (float& x : b.grad) x *= scale;
  for (const Param& p : b.params)
    if (c.schedule.tensors()[p.grad].shard == Shard::kPartialSum)
      DOMINO_RETURN_IF_ERROR(g_.tp->AllReduce(b.grad.data() + p.offset, p.size));
  return Status::Ok();
}

// FSDP: the buckets an op of layer `layer` of the chunk gathers and reduces, as the lowering
// counts them: the layer's, the embedding's with the first layer (its lookup runs in the first
// forward piece, its gradient is whole after the last backward piece) and the head's (with the
// last stage's copy of a tied embedding) with the last layer.
std::vector<Bucket*> StepRunner::LayerUnit(Chunk& c, int layer) {
  std::vector<Bucket*> unit;
  const bool first = layer == 0, last = layer == c.shape.layers - 1;
  for (Bucket& b : c.buckets) {
    const bool embedding = b.key == kEmbeddingBucket;
    if (b.key == layer || (first && embedding && c.shape.embedding) ||
        (last && c.shape.head && (b.key == kExtraBucket || (embedding && !c.shape.embedding))))
      unit.push_back(&b);
  }
  return unit;
}

// FSDP: micro-batch `mb`'s gradient of the bucket, scaled to the global batch's mean (norm gains'
// sequence-parallel partial sums summed over TP), reduce-scattered over DP and added to this
// rank's shard of the bucket's gradient, which the step started at zero.
Status StepRunner::ReduceMicroBatch(Chunk& c, Bucket& b, int mb) {
  if (mb < 0 || mb >= static_cast<int>(c.mbs.size()))
    return Error(fmt::format("FSDP reduce-scatter of micro-batch {}: not this rank's", mb));
  const float scale = 1.0f / static_cast<float>(static_cast<int64_t>(c.mbs.size()) * plan_.dp_cp());
  const int64_t padded = static_cast<int64_t>(b.grad.size()), mine = Replica() * b.shard;
  if (device_) {
    DOMINO_RETURN_IF_ERROR(device_->Zero(b.d_scratch, padded));
    CudaRunner* const runner[] = {c.runners[mb]};
    for (const Param& p : b.params) {
      DOMINO_RETURN_IF_ERROR(device_->Accumulate(runner, p.grad, b.d_scratch + p.offset, scale));
      if (c.schedule.tensors()[p.grad].shard == Shard::kPartialSum)
        DOMINO_RETURN_IF_ERROR(device_->AllReduceTp(b.d_scratch + p.offset, p.size));
    }
    DOMINO_RETURN_IF_ERROR(device_->ReduceScatterDp(b.d_scratch, b.shard));
    return device_->Add(b.d_scratch + mine, b.d_grad + mine, b.shard);
  }
  reduce_.assign(static_cast<size_t>(padded), 0.0f);
  for (const Param& p : b.params) {
    Result<std::vector<float>> g = c.mbs[mb]->Read(p.grad);
    if (!g.ok()) return g.error();
    for (int64_t i = 0; i < p.size; ++i) reduce_[p.offset + i] = (*g)[i] * scale;
    if (c.schedule.tensors()[p.grad].shard == Shard::kPartialSum)
      DOMINO_RETURN_IF_ERROR(g_.tp->AllReduce(reduce_.data() + p.offset, p.size));
  }
  shard_.resize(static_cast<size_t>(b.shard));
  DOMINO_RETURN_IF_ERROR(g_.dp->ReduceScatter(reduce_.data(), shard_.data(), b.shard));
  for (int64_t i = 0; i < b.shard; ++i) b.grad[mine + i] += shard_[i];
  return Status::Ok();
}

Status StepRunner::ReduceOverDp(Bucket& b, bool scatter) {
  if (device_)
    return scatter ? device_->ReduceScatterDp(b.d_grad, b.shard)
                   : device_->AllReduceDp(b.d_grad, static_cast<int64_t>(b.grad.size()));
  if (!scatter) return g_.dp->AllReduce(b.grad.data(), static_cast<int64_t>(b.grad.size()));
  shard_.resize(static_cast<size_t>(b.shard));
  DOMINO_RETURN_IF_ERROR(g_.dp->ReduceScatter(b.grad.data(), shard_.data(), b.shard));
  std::copy(shard_.begin(), shard_.end(), b.grad.begin() + Replica() * b.shard);
  return Status::Ok();
}

// All-gathers each DP rank's shard of `flat` (or of its device copy) into the whole of it.
Status StepRunner::GatherShards(std::vector<float>& flat, float* device) {
  const int64_t shard = static_cast<int64_t>(flat.size()) / plan_.dp_cp();
  if (device_) return device_->AllGatherDp(device, shard);
  shard_.assign(flat.begin() + Replica() * shard, flat.begin() + (Replica() + 1) * shard);
  return g_.dp->AllGather(shard_.data(), flat.data(), shard);
}

// The tied word embedding's gradient, summed over the first and the last stage.
Status StepRunner::SyncEmbedding() {
  const int peer = me_.pp == 0 ? it_.stages - 1 : 0;
  Chunk* c = ChunkOf(me_.pp == 0 ? 0 : static_cast<int>(it_.virtual_stages.size()) - 1);
  Bucket* b = nullptr;
  if (c != nullptr)
    for (Bucket& bucket : c->buckets)
      if (bucket.key == kEmbeddingBucket) b = &bucket;
  if (b == nullptr) return Error("the embedding's gradient sync needs the word embedding here");
  DOMINO_RETURN_IF_ERROR(Finalize(*c, *b));
  const auto [lo, hi] = Owned(*b);
  if (device_) {
    DOMINO_RETURN_IF_ERROR(device_->SendFloats(b->d_grad + lo, hi - lo, peer));
    DOMINO_RETURN_IF_ERROR(device_->RecvFloats(b->d_recv, hi - lo, peer));
    return device_->Add(b->d_recv, b->d_grad + lo, hi - lo);
  }
  DOMINO_RETURN_IF_ERROR(g_.pp->Send(b->grad.data() + lo, hi - lo, peer));
  shard_.resize(static_cast<size_t>(hi - lo));
  DOMINO_RETURN_IF_ERROR(g_.pp->Recv(shard_.data(), hi - lo, peer));
  for (int64_t i = lo; i < hi; ++i) b->grad[i] += shard_[i - lo];
  return Status::Ok();
}

// Adam on the rank's range of every bucket; the weights follow now, or after the gathers of
// the distributed optimizer.
Status StepRunner::Optimize(int step) {
  const AdamOptions& a = options_.adam;
  const double c1 = 1 - std::pow(a.beta1, step), c2 = 1 - std::pow(a.beta2, step);
  for (auto& c : chunks_) {
    for (Bucket& b : c->buckets) {
      DOMINO_RETURN_IF_ERROR(Finalize(*c, b));
      const auto [lo, hi] = Owned(b);
      if (device_) {
        DOMINO_RETURN_IF_ERROR(device_->Adam(b.d_master + lo, b.d_m + lo, b.d_v + lo, b.d_grad + lo,
                                             hi - lo, a, step));
        if (!Sharded()) DOMINO_RETURN_IF_ERROR(WriteWeights(*c, b));
        b.stale = Sharded();
        continue;
      }
      for (int64_t i = lo; i < hi; ++i) {
        const double g = b.grad[i];
        const double m = a.beta1 * b.m[i] + (1 - a.beta1) * g;
        const double v = a.beta2 * b.v[i] + (1 - a.beta2) * g * g;
        b.m[i] = static_cast<float>(m), b.v[i] = static_cast<float>(v);
        b.master[i] =
            static_cast<float>(b.master[i] - a.lr * (m / c1) / (std::sqrt(v / c2) + a.eps));
      }
      if (!Sharded()) DOMINO_RETURN_IF_ERROR(WriteWeights(*c, b));
      b.stale = Sharded();
    }
  }
  return Status::Ok();
}

// A parameter gather (the distributed optimizer's after the step, or one of FSDP's per-layer
// ones): every rank's shard of the master weights into the whole, then into the micro-batches'
// copies if the step moved them since the last gather wrote them.
Status StepRunner::GatherWeights(Chunk& c, Bucket& b) {
  DOMINO_RETURN_IF_ERROR(GatherShards(b.master, b.d_master));
  if (!b.stale) return Status::Ok();
  b.stale = false;
  return WriteWeights(c, b);
}

// The bucket's weights from the master weights, into every copy the micro-batches hold: on the
// GPU one, the first runner's, which it lends to the others (exec/step.cc); on the CPU each
// micro-batch's own.
Status StepRunner::WriteWeights(Chunk& c, const Bucket& b) {
  if (device_) {
    const std::span<CudaRunner* const> owner = std::span(c.runners).first(1);
    for (const Param& p : b.params)
      DOMINO_RETURN_IF_ERROR(device_->Store(b.d_master + p.offset, owner, p.value));
    return Status::Ok();
  }
  const size_t copies = c.cuda.empty() ? c.mbs.size() : 1;
  for (auto& backend : std::span(c.mbs).first(copies))
    for (const Param& p : b.params)
      DOMINO_RETURN_IF_ERROR(Write(c, *backend, p.value, b.master.data() + p.offset));
  return Status::Ok();
}

}  // namespace domino::exec::whole_step
