#include "exec/step.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cpu_kernels.h"
#include "exec/cuda_backend.h"
#include "exec/dropout.h"
#include "exec/interpreter.h"
#include "exec/step_device.h"
#include "exec/step_runner.h"
#include "planner/lower.h"

namespace domino::exec {
namespace whole_step {

TensorRole RoleOf(TensorKind kind, TensorSlot slot, int layer, bool gradient, TensorForm form) {
  TensorRole role;
  role.kind = kind, role.slot = slot, role.gradient = gradient, role.form = form;
  role.layer = static_cast<int16_t>(layer);
  return role;
}

int BucketKey(const TensorRole& role) {
  if (role.layer >= 0) return role.layer;
  return role.slot == TensorSlot::kEmbedding ? kEmbeddingBucket : kExtraBucket;
}

Result<Schedule> LowerChunk(const Plan& plan, const ChunkShape& shape) {
  return LowerStage(plan, LowerOptions{shape.layers, shape.embedding, shape.head, true, true});
}

// The chunk's parameters by bucket, its boundary tensors and where its forward ends.
Status Describe(const Plan& plan, Chunk& c) {
  const std::vector<Tensor>& tensors = c.schedule.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRole& role = tensors[i].role;
    if ((role.kind != TensorKind::kWeight && role.kind != TensorKind::kNormWeight) || role.gradient)
      continue;
    TensorRole grad_role = role;
    grad_role.gradient = true;
    Param p;
    p.value = static_cast<int32_t>(i);
    p.grad = FindTensor(tensors, grad_role);
    if (p.grad < 0)
      return Error(fmt::format("chunk {}: weight {} has no gradient tensor", c.vs, RoleName(role)));
    p.size = tensors[i].rows * tensors[i].cols;
    const int key = BucketKey(role);
    auto it = std::find_if(c.buckets.begin(), c.buckets.end(),
                           [&](const Bucket& b) { return b.key == key; });
    if (it == c.buckets.end()) {
      Bucket bucket;
      bucket.key = key;
      c.buckets.push_back(std::move(bucket));
      it = c.buckets.end() - 1;
    }
    p.offset = it->size;
    it->size += p.size;
    it->params.push_back(p);
  }
  for (Bucket& b : c.buckets) {
    b.shard = (b.size + plan.dp_cp() - 1) / plan.dp_cp();
    const size_t padded = static_cast<size_t>(b.shard * plan.dp_cp());
    b.grad.assign(padded, 0.0f);
    b.master.assign(padded, 0.0f);
    b.m.assign(padded, 0.0f);
    b.v.assign(padded, 0.0f);
  }
  const int top = c.shape.layers - 1;
  using enum TensorSlot;
  c.input = FindTensor(tensors, RoleOf(TensorKind::kInput, kX, 0, false));
  c.input_grad = FindTensor(tensors, RoleOf(TensorKind::kInput, kX, 0, true));
  c.out_mid = FindTensor(tensors, RoleOf(TensorKind::kActivation, kMid, top, false));
  c.out_mlp =
      FindTensor(tensors, StackMlpOutputRole(top, plan.sequence_parallel, plan.model.post_norms));
  c.out_grad = FindTensor(tensors, RoleOf(TensorKind::kActivation, kOut, top, true));
  c.loss = FindTensor(tensors, RoleOf(TensorKind::kLoss, kLmHead, -1, false));
  if ((!c.shape.embedding && (c.input < 0 || c.input_grad < 0)) ||
      (!c.shape.head && (c.out_mid < 0 || c.out_mlp < 0 || c.out_grad < 0)) ||
      (c.shape.head && c.loss < 0))
    return Error(fmt::format("chunk {}: its schedule lacks a boundary tensor", c.vs));
  const std::vector<Op>& ops = c.schedule.ops();
  c.forward_end = ops.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool forward = ops[i].tags.phase == Phase::kForward;
    if (!forward && c.forward_end == ops.size()) c.forward_end = i;
    if (forward && c.forward_end < i)
      return Error(fmt::format("chunk {}: forward op {} ({}) follows the backward", c.vs, i,
                               c.schedule.Label(static_cast<int32_t>(i))));
  }
  return Status::Ok();
}

Result<Groups> SplitGroups(const Plan& plan, Communicator& world, const RankCoords& me) {
  Groups g;
  const int tp = plan.tp, cp = plan.cp, dp = plan.dp;
  struct Split {
    std::unique_ptr<Communicator>* into;
    int color, key;
  };
  const Split splits[] = {
      {&g.tp, (me.pp * dp + me.dp) * cp + me.cp, me.tp},
      {&g.cp, (me.pp * dp + me.dp) * tp + me.tp, me.cp},
      {&g.pp, (me.dp * cp + me.cp) * tp + me.tp, me.pp},
      {&g.dp, me.pp * tp + me.tp, me.dp * cp + me.cp},
  };
  for (const Split& split : splits) {
    Result<std::unique_ptr<Communicator>> made = world.Split(split.color, split.key);
    if (!made.ok()) return made.error();
    *split.into = std::move(made).value();
  }
  return g;
}

Status StepRunner::Init() {
  if (plan_.cp > 1) {
    Result<std::unique_ptr<CpAttention>> cp = CpAttention::Create(plan_, *g_.cp);
    if (!cp.ok()) return cp.error();
    cp_attention_ = std::move(cp).value();
  }
  const int vs_total = static_cast<int>(it_.virtual_stages.size());
  std::vector<int> first(vs_total + 1, 0);
  for (int vs = 0; vs < vs_total; ++vs) first[vs + 1] = first[vs] + it_.virtual_stages[vs].layers;
  const int m = it_.micro_batches;
  const int64_t tokens = static_cast<int64_t>(plan_.micro_batch) * plan_.seq_len;
  for (int c = 0; c < it_.chunks; ++c) {
    auto chunk = std::make_unique<Chunk>();
    chunk->vs = c * it_.stages + me_.pp;
    chunk->first_layer = first[chunk->vs];
    chunk->shape = it_.virtual_stages[chunk->vs];
    Result<Schedule> s = LowerChunk(plan_, chunk->shape);
    if (!s.ok()) return s.error();
    chunk->schedule = std::move(s).value();
    if (options_.alter_chunk) options_.alter_chunk(chunk->schedule);
    DOMINO_RETURN_IF_ERROR(Describe(plan_, *chunk));
    for (int mb = 0; mb < m; ++mb) {
      const int64_t global_mb = static_cast<int64_t>(me_.dp) * m + mb;
      FillOffsets fill{chunk->first_layer, global_mb * tokens, plan_.cp, me_.cp, plan_.seq_len};
      SetDropout(plan_, &fill);
      chunk->fills.push_back(fill);
      if (options_.backend == BackendKind::kCuda) {
        CudaOptions cuda = options_.cuda;
        cuda.fill = fill;
        // With NCCL the runners borrow the step's TP communicator (StepDevice::TpCollective).
        cuda.lent_nccl = cuda.comm == CommMode::kNccl;
        // One copy of the weights: the first micro-batch's runner lends them to the others.
        if (mb > 0) cuda.weights_from = chunk->runners[0];
        Result<std::unique_ptr<CudaRunner>> runner = MakeCudaRunner(
            chunk->schedule, plan_.model, me_.tp, plan_.tp, options_.seed, cuda, *g_.tp);
        if (!runner.ok()) return runner.error();
        chunk->cuda.push_back(std::move(runner).value());
        chunk->runners.push_back(chunk->cuda.back().get());
        chunk->mbs.push_back(&chunk->cuda.back()->backend());
      } else {
        chunk->cpu.push_back(std::make_unique<CpuBackend>(chunk->schedule, plan_.model, me_.tp,
                                                          plan_.tp, options_.seed, fill));
        chunk->mbs.push_back(chunk->cpu.back().get());
      }
    }
    chunk->cursor.assign(m, 0);
    // The master weights start as the backends' initial weights.
    for (Bucket& b : chunk->buckets)
      for (const Param& p : b.params) {
        Result<std::vector<float>> w = chunk->mbs[0]->Read(p.value);
        if (!w.ok()) return w.error();
        std::copy(w->begin(), w->end(), b.master.begin() + p.offset);
      }
    chunks_.push_back(std::move(chunk));
  }
  // The sends the schedule has, so that a recv without one receives nothing.
  for (const Op& op : it_.schedule.ops())
    if (op.func == OpFunc::kPpSend)
      sends_.insert({op.tags.phase != Phase::kForward, op.tags.virtual_stage, op.tags.micro_batch});
  for (size_t i = 0; i < it_.schedule.size(); ++i) {
    const Op& op = it_.schedule.ops()[i];
    const bool embedding_peer = op.func == OpFunc::kEmbeddingAllReduce && me_.pp == 0;
    if (op.stage == me_.pp || embedding_peer) mine_.push_back(static_cast<int32_t>(i));
  }
  if (options_.backend == BackendKind::kCuda && options_.cuda.comm == CommMode::kNccl)
    DOMINO_RETURN_IF_ERROR(InitDevice());
  return Status::Ok();
}

// Runs one iteration (step `step`, from 1); `timeline` gets this rank's ops' times.
Status StepRunner::Step(int step, Timeline* timeline) {
  using Clock = std::chrono::steady_clock;
  for (auto& c : chunks_) {
    std::fill(c->cursor.begin(), c->cursor.end(), 0);
    for (auto& b : c->buckets) {
      b.final = Fsdp();
      if (!Fsdp()) continue;
      std::fill(b.grad.begin(), b.grad.end(), 0.0f);
      if (device_)
        DOMINO_RETURN_IF_ERROR(device_->Zero(b.d_grad, static_cast<int64_t>(b.grad.size())));
    }
    for (auto& backend : c->mbs) DOMINO_RETURN_IF_ERROR(ZeroComputed(*c, *backend));
  }
  timeline->ops.assign(it_.schedule.size(), OpTime{});
  const Clock::time_point t0 = Clock::now();
  auto since = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - t0).count();
  };
  for (size_t n = 0; n < mine_.size(); ++n) {
    const int32_t id = mine_[n];
    const Clock::time_point start = Clock::now();
    DOMINO_RETURN_IF_ERROR(RunIterationOp(id, step));
    timeline->ops[id] = OpTime{since(start), since(Clock::now())};
    if (options_.progress)
      options_.progress((step - 1) * mine_.size() + n + 1, options_.steps * mine_.size());
  }
  return device_ ? device_->Finish() : Status::Ok();
}

// This rank's mean loss over its micro-batches, averaged over DP x CP; last stage only.
Result<double> StepRunner::Loss() {
  Chunk* last = ChunkOf(static_cast<int>(it_.virtual_stages.size()) - 1);
  if (last == nullptr) return 0.0;
  const Tensor& t = last->schedule.tensors()[last->loss];
  double sum = 0;
  for (auto& backend : last->mbs) {
    Result<std::vector<float>> stats = backend->Read(last->loss);
    if (!stats.ok()) return stats.error();
    sum += cpu::MeanCrossEntropy(cpu::ConstMat(stats->data(), t.rows, t.cols, t.cols));
  }
  float mean = static_cast<float>(sum / static_cast<double>(last->mbs.size()));
  DOMINO_RETURN_IF_ERROR(g_.dp->AllReduce(&mean, 1));
  return static_cast<double>(mean) / plan_.dp_cp();
}

// Makes the first micro-batch's backend hold the whole final gradient and the updated weights
// of every parameter (gathering the distributed optimizer's shards over DP), for the check.
Status StepRunner::Settle() {
  for (auto& c : chunks_) {
    for (Bucket& b : c->buckets) {
      DOMINO_RETURN_IF_ERROR(Finalize(*c, b));
      if (Sharded()) {
        DOMINO_RETURN_IF_ERROR(GatherShards(b.grad, b.d_grad));
        DOMINO_RETURN_IF_ERROR(GatherShards(b.master, b.d_master));
      }
      if (device_) {
        const int64_t padded = static_cast<int64_t>(b.grad.size());
        DOMINO_RETURN_IF_ERROR(device_->Download(b.d_grad, b.grad.data(), padded));
        DOMINO_RETURN_IF_ERROR(device_->Download(b.d_master, b.master.data(), padded));
      }
      for (const Param& p : b.params) {
        DOMINO_RETURN_IF_ERROR(Write(*c, *c->mbs[0], p.grad, b.grad.data() + p.offset));
        DOMINO_RETURN_IF_ERROR(Write(*c, *c->mbs[0], p.value, b.master.data() + p.offset));
      }
    }
  }
  return Status::Ok();
}

// The chunk of an iteration op of this rank's stage.
Result<Chunk*> StepRunner::StageChunk(const Op& op, int32_t id) {
  Chunk* c = ChunkOf(op.tags.virtual_stage);
  if (c == nullptr)
    return Error(fmt::format("iteration op {} ({}): virtual stage {} is not this rank's", id,
                             it_.schedule.Label(id), op.tags.virtual_stage));
  return c;
}

Result<Chunk*> StepRunner::MyChunk(const Op& op, int32_t id) {
  Chunk* c = ChunkOf(op.tags.virtual_stage);
  if (c == nullptr || op.tags.micro_batch >= static_cast<int>(c->mbs.size()))
    return Error(
        fmt::format("iteration op {} ({}): virtual stage {} micro-batch {} is not this "
                    "rank's",
                    id, it_.schedule.Label(id), op.tags.virtual_stage, op.tags.micro_batch));
  return c;
}

Status StepRunner::RunIterationOp(int32_t id, int step) {
  const Op& op = it_.schedule.op(id);
  switch (op.func) {
    case OpFunc::kForwardPass:
    case OpFunc::kBackwardPass:
      return RunPass(op, id);
    case OpFunc::kPpSend:
    case OpFunc::kPpRecv:
      return Transfer(op, id);
    case OpFunc::kDpAllReduce:
    case OpFunc::kDpReduceScatter:
    case OpFunc::kDpAllGather: {
      Result<Chunk*> found = StageChunk(op, id);
      if (!found.ok()) return found.error();
      Chunk* c = *found;
      for (Bucket& b : c->buckets) {
        const bool mine = op.tags.layer >= 0 ? b.key == op.tags.layer : b.key < 0;
        if (!mine) continue;
        if (op.func == OpFunc::kDpAllGather) {
          DOMINO_RETURN_IF_ERROR(GatherWeights(*c, b));
        } else {
          DOMINO_RETURN_IF_ERROR(Finalize(*c, b));
          DOMINO_RETURN_IF_ERROR(ReduceOverDp(b, op.func == OpFunc::kDpReduceScatter));
        }
      }
      return Status::Ok();
    }
    case OpFunc::kFsdpAllGather:
    case OpFunc::kFsdpReduceScatter: {
      Result<Chunk*> found = StageChunk(op, id);
      if (!found.ok()) return found.error();
      Chunk* c = *found;
      for (Bucket* b : LayerUnit(*c, op.tags.layer)) {
        if (op.func == OpFunc::kFsdpAllGather) {
          DOMINO_RETURN_IF_ERROR(GatherWeights(*c, *b));
        } else {
          DOMINO_RETURN_IF_ERROR(ReduceMicroBatch(*c, *b, op.tags.micro_batch));
        }
      }
      return Status::Ok();
    }
    case OpFunc::kEmbeddingAllReduce:
      return SyncEmbedding();
    case OpFunc::kOptimizerStep:
      return Optimize(step);
    default:
      break;
  }
  return Error(fmt::format("iteration op {} ({}): not an op the step executor runs", id,
                           it_.schedule.Label(id)));
}

// A pass, or a piece of one: the micro-batch's forward or backward ops of the chunk, from where
// it stopped; a piece runs through the last op of its layers (the last piece to the end).
Status StepRunner::RunPass(const Op& op, int32_t id) {
  Result<Chunk*> found = MyChunk(op, id);
  if (!found.ok()) return found.error();
  Chunk& c = **found;
  const int mb = op.tags.micro_batch;
  const bool backward = op.func == OpFunc::kBackwardPass;
  const Schedule& s = c.schedule;
  const size_t begin = backward ? c.forward_end : 0, end = backward ? s.size() : c.forward_end;
  size_t& cursor = c.cursor[mb];
  cursor = std::max(cursor, begin);
  size_t stop = end;
  const bool last_piece =
      op.layer_begin < 0 || (backward ? op.layer_begin == 0 : op.layer_end >= c.shape.layers);
  if (!last_piece) {
    stop = cursor;
    for (size_t i = cursor; i < end; ++i) {
      const int layer = s.ops()[i].tags.layer;
      if (layer >= op.layer_begin && layer < op.layer_end) stop = i + 1;
    }
  }
  Backend& backend = *c.mbs[mb];
  for (; cursor < stop; ++cursor) {
    const Op& o = s.ops()[cursor];
    // The stack's output gradient comes from the next stage (kPpRecv), not from a fill.
    if (o.func == OpFunc::kResidualGrad) continue;
    // A stack's merge kernels, amax reductions and copies around the attention (interpreter.h).
    if (RunsNothing(o)) continue;
    if (cp_attention_ && CpAttention::Runs(o)) {
      // The layer's dropout masks from the micro-batch's first sequence and the TP rank's first
      // head, as the backends place theirs (FillOffsets).
      const int layer = c.first_layer + o.tags.layer;
      const AttentionDropout dropout{
          plan_.applies_dropout() ? kDropoutRate : 0, AttentionDropoutStream(options_.seed, layer),
          (static_cast<int64_t>(me_.dp) * it_.micro_batches + mb) * plan_.micro_batch,
          static_cast<int64_t>(me_.tp) * (plan_.model.heads / plan_.tp)};
      DOMINO_RETURN_IF_ERROR(cp_attention_->Run(s, static_cast<int32_t>(cursor), backend,
                                                plan_.model.window.TokensAt(layer), dropout));
      continue;
    }
    if (device_ && o.kind == OpKind::kCollective && plan_.tp > 1) {
      DOMINO_RETURN_IF_ERROR(device_->TpCollective(*c.runners[mb], static_cast<int32_t>(cursor)));
      continue;
    }
    DOMINO_RETURN_IF_ERROR(
        RunOp(s, static_cast<int32_t>(cursor), backend, *g_.tp, scratch_in_, scratch_out_));
  }
  return Status::Ok();
}

Status StepRunner::Transfer(const Op& op, int32_t id) {
  Result<Chunk*> found = MyChunk(op, id);
  if (!found.ok()) return found.error();
  Chunk& c = **found;
  Backend& backend = *c.mbs[op.tags.micro_batch];
  const bool backward = op.tags.phase != Phase::kForward;
  const int vs = c.vs;
  if (op.func == OpFunc::kPpSend) {
    const int to = StageOf(backward ? vs - 1 : vs + 1);
    if (backward) {
      if (device_) return device_->Send(*c.runners[op.tags.micro_batch], c.input_grad, to);
      Result<std::vector<float>> grad = backend.Read(c.input_grad);
      if (!grad.ok()) return grad.error();
      return g_.pp->Send(grad->data(), static_cast<int64_t>(grad->size()), to);
    }
    // The stack's output: the top layer's mid plus its MLP output (after its collective) through
    // the MLP branch's dropout, placed by the output's rows: each row slice's run of them (a
    // sequence-parallel shard's rows are whole rows only within a slice).
    const Tensor& out = c.schedule.tensors()[c.out_mid];
    const int64_t slices = out.shard == Shard::kSequence ? std::max<int64_t>(out.part_cols, 1) : 1;
    std::vector<DroppedRows> dropout;
    for (int64_t s = 0; s < slices; ++s) {
      const View rows{s * out.rows / slices, (s + 1) * out.rows / slices, 0, out.cols};
      dropout.push_back(
          {rows.row_begin, rows.row_end,
           BranchDropoutAt(c.fills[op.tags.micro_batch], options_.seed, me_.tp, plan_.tp,
                           c.first_layer + c.shape.layers - 1, 2, out, rows)});
    }
    if (device_)
      return device_->SendSum(*c.runners[op.tags.micro_batch], c.out_mid, c.out_mlp, dropout, to);
    Result<std::vector<float>> mid = backend.Read(c.out_mid);
    Result<std::vector<float>> mlp = backend.Read(c.out_mlp);
    if (!mid.ok()) return mid.error();
    if (!mlp.ok()) return mlp.error();
    if (mid->size() != mlp->size())
      return Error(fmt::format("iteration op {}: the output's parts differ in size", id));
    for (const DroppedRows& run : dropout)
      for (int64_t r = run.row_begin; r < run.row_end; ++r)
        for (int64_t j = 0; j < out.cols; ++j)
          (*mid)[r * out.cols + j] +=
              (*mlp)[r * out.cols + j] * run.dropout.Scale(r - run.row_begin, j);
    return g_.pp->Send(mid->data(), static_cast<int64_t>(mid->size()), to);
  }
  const int from_vs = backward ? vs + 1 : vs - 1;
  if (!sends_.count({backward, static_cast<int16_t>(from_vs), op.tags.micro_batch}))
    return Status::Ok();  // nothing was sent: the input stays as it is
  const int32_t into = backward ? c.out_grad : c.input;
  if (device_) return device_->Recv(*c.runners[op.tags.micro_batch], into, StageOf(from_vs));
  const Tensor& t = c.schedule.tensors()[into];
  recv_.resize(static_cast<size_t>(t.rows * t.cols));
  DOMINO_RETURN_IF_ERROR(
      g_.pp->Recv(recv_.data(), static_cast<int64_t>(recv_.size()), StageOf(from_vs)));
  return Write(c, backend, into, recv_.data());
}

// The device transport: its pipeline links (every send of the iteration, and both directions
// between the first and last stage for the tied embedding) and each bucket's fp32 buffers,
// the master weights starting as the host's.
Status StepRunner::InitDevice() {
  std::vector<std::pair<int, int>> links;
  for (const Op& op : it_.schedule.ops()) {
    if (op.func == OpFunc::kPpSend) {
      const int vs = op.tags.virtual_stage;
      links.emplace_back(op.stage, StageOf(op.tags.phase != Phase::kForward ? vs - 1 : vs + 1));
    } else if (op.func == OpFunc::kEmbeddingAllReduce) {
      links.emplace_back(0, it_.stages - 1);
      links.emplace_back(it_.stages - 1, 0);
    }
  }
  Result<std::unique_ptr<StepDevice>> device =
      MakeStepDevice(options_.cuda, links, *g_.tp, *g_.pp, *g_.dp);
  if (!device.ok()) return device.error();
  device_ = std::move(device).value();
  for (auto& c : chunks_) {
    for (Bucket& b : c->buckets) {
      const int64_t padded = static_cast<int64_t>(b.grad.size());
      for (float** d : {&b.d_grad, &b.d_master, &b.d_m, &b.d_v}) {
        Result<float*> made = device_->Floats(padded);
        if (!made.ok()) return made.error();
        *d = *made;
      }
      DOMINO_RETURN_IF_ERROR(device_->Upload(b.master.data(), b.d_master, padded));
      if (b.key == kEmbeddingBucket) {
        Result<float*> recv = device_->Floats(padded);
        if (!recv.ok()) return recv.error();
        b.d_recv = *recv;
      }
      if (Fsdp()) {
        Result<float*> scratch = device_->Floats(padded);
        if (!scratch.ok()) return scratch.error();
        b.d_scratch = *scratch;
      }
    }
  }
  return Status::Ok();
}

}  // namespace whole_step

RankCoords CoordsOf(const Plan& plan, int world_rank) {
  RankCoords c;
  c.tp = world_rank % plan.tp;
  c.cp = world_rank / plan.tp % plan.cp;
  const int rest = world_rank / plan.tp / plan.cp;
  if (plan.placement == Placement::kTpDpPp) {
    c.dp = rest % plan.dp, c.pp = rest / plan.dp;
  } else {
    c.pp = rest % plan.pp, c.dp = rest / plan.pp;
  }
  return c;
}

int WorldRank(const Plan& plan, const RankCoords& c) {
  const int outer =
      plan.placement == Placement::kTpDpPp ? c.dp + plan.dp * c.pp : c.pp + plan.pp * c.dp;
  return c.tp + plan.tp * (c.cp + plan.cp * outer);
}

std::string RanksText(const Plan& plan) {
  return plan.cp > 1
             ? fmt::format("tp {} x cp {} x pp {} x dp {}", plan.tp, plan.cp, plan.pp, plan.dp)
             : fmt::format("tp {} x pp {} x dp {}", plan.tp, plan.pp, plan.dp);
}

Plan StepReferencePlan(const Plan& plan) {
  Plan ref = ReferencePlan(plan);
  ref.model.layers = plan.model.layers;  // every layer
  ref.global_batch = plan.global_batch;  // every micro-batch, one after another
  ref.distributed_optimizer = false;
  ref.fsdp = false;
  ref.recompute = Recompute::kNone;
  return ref;
}

double StepBytesPerRank(const Plan& plan) {
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  if (!it.ok()) return 0;
  double bytes = 0;
  for (int c = 0; c < it->chunks; ++c) {
    // The largest chunk of any stage: every rank holds one of each chunk index.
    double largest = 0;
    for (int s = 0; s < it->stages; ++s) {
      Result<Schedule> sched = whole_step::LowerChunk(plan, it->virtual_stages[c * it->stages + s]);
      if (sched.ok()) largest = std::max(largest, CpuBackend::BytesFor(*sched));
    }
    bytes += largest * it->micro_batches;
  }
  return bytes;
}

Result<ExecuteResult> ExecuteIteration(const Plan& plan, const Iteration& it, Communicator& world,
                                       const ExecuteOptions& options) {
  const int ranks = plan.tp * plan.cp * plan.pp * plan.dp;
  if (world.size() != ranks)
    return Error(fmt::format("the plan has {} = {} ranks; {} were launched", RanksText(plan), ranks,
                             world.size()));
  if (options.steps < 1) return Error(fmt::format("steps {}: at least 1", options.steps));
  if (options.backend == BackendKind::kCuda && options.cuda.comm == CommMode::kEmulate)
    return Error(
        "whole steps on the CUDA backend move their data through the launch communicator "
        "(--comm mpi) or NCCL (--comm nccl), not emulated collectives");
  const RankCoords me = CoordsOf(plan, world.rank());
  Result<whole_step::Groups> groups = whole_step::SplitGroups(plan, world, me);
  if (!groups.ok()) return groups.error();
  whole_step::StepRunner run(plan, it, me, std::move(groups).value(), options);
  DOMINO_RETURN_IF_ERROR(run.Init());
  ExecuteResult result;
  result.schedule = it.schedule;
  const int last_stage = it.stages - 1;
  const int loss_rank = WorldRank(plan, RankCoords{0, last_stage, 0, 0});
  for (int step = 1; step <= options.steps; ++step) {
    DOMINO_RETURN_IF_ERROR(run.Step(step, &result.timeline));
    double loss = 0;
    if (me.pp == last_stage) {
      Result<double> mean = run.Loss();
      if (!mean.ok()) return mean.error();
      loss = *mean;
    }
    // Rank 0 reports every step's loss.
    float value = static_cast<float>(loss);
    if (world.rank() == loss_rank) DOMINO_RETURN_IF_ERROR(world.Send(&value, 1, 0));
    if (world.rank() == 0) DOMINO_RETURN_IF_ERROR(world.Recv(&value, 1, loss_rank));
    result.losses.push_back(value);
  }
  if (!result.losses.empty()) result.loss = result.losses.back();
  if (options.check)
    DOMINO_RETURN_IF_ERROR(
        whole_step::CheckStep(plan, it, run, me, world, options, result.losses, &result));
  return result;
}

Result<ExecuteResult> ExecuteStep(const Plan& plan, Communicator& world,
                                  const ExecuteOptions& options) {
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  if (!it.ok()) return it.error();
  return ExecuteIteration(plan, *it, world, options);
}

}  // namespace domino::exec
