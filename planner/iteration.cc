#include "planner/iteration.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>

#include "models/model_counts.h"
#include "planner/lower.h"

namespace domino {

std::vector<PipelineStep> PipelineOrder(int s, int stages, int chunks, int m) {
  std::vector<PipelineStep> order;
  if (chunks == 1) {
    const int warmup = std::min(m, stages - s - 1);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({f, 0, false});
    for (; f < m; ++f, ++b) {
      order.push_back({f, 0, false});
      order.push_back({b, 0, true});
    }
    for (; b < m; ++b) order.push_back({b, 0, true});
    return order;
  }
  // Interleaved: virtual micro-batch k runs chunk (k mod (stages * chunks)) / stages of
  // micro-batch (k / (stages * chunks)) * stages + k mod stages; backward walks chunks in reverse.
  const int total = m * chunks;
  auto forward = [&](int k) {
    const int group = stages * chunks;
    return PipelineStep{(k / group) * stages + k % stages, (k % group) / stages, false};
  };
  auto backward = [&](int k) {
    PipelineStep step = forward(k);
    step.chunk = chunks - 1 - step.chunk;
    step.backward = true;
    return step;
  };
  const int warmup = std::min(total, (stages - s - 1) * 2 + (chunks - 1) * stages);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(forward(f));
  for (; f < total; ++f, ++b) {
    order.push_back(forward(f));
    order.push_back(backward(b));
  }
  for (; b < total; ++b) order.push_back(backward(b));
  return order;
}

double GradBytes(const Plan& plan) {
  const GradReduce reduce = plan.gradient_reduce();
  const bool half = reduce == GradReduce::kParam ||
                    (reduce == GradReduce::kFp16Param && plan.precision == Dtype::kFp16);
  return half ? 2 : 4;
}

double AdamStateBytes(const Plan& plan) {
  return plan.optimizer_dtype == Dtype::kBf16 ? 3 * 2.0 : 3 * 4.0;
}

double AdamBytesPerParam(const Plan& plan) {
  return 2 + GradBytes(plan) + AdamStateBytes(plan) + 2 + AdamStateBytes(plan);
}

int64_t TiedEmbeddingCopy(const Plan& plan, const ParameterCounts& counts) {
  return plan.model.tied_embeddings && plan.pp > 1 ? counts.embedding : 0;
}

namespace {

// Builds an Iteration stage by stage, in an order where every op's dependencies precede it.
class IterationBuilder {
 public:
  IterationBuilder(const Plan& plan, Iteration* it)
      : plan_(plan),
        it_(*it),
        counts_(CountParameters(plan.model)),
        pp_(plan.pp),
        v_(plan.virtual_stages),
        m_(plan.micro_batches()),
        total_vs_(plan.pp * plan.virtual_stages) {
    const ParameterCounts& c = counts_;
    grad_bytes_ = GradBytes(plan);
    layer_grad_bytes_ = static_cast<double>(c.per_layer) / plan.tp * grad_bytes_;
    const Dtype activation = plan.precision == Dtype::kFp8 ? Dtype::kBf16 : plan.precision;
    activation_bytes_ = static_cast<double>(plan.micro_batch) * plan.local_seq_len() *
                        plan.model.hidden * DtypeBytes(activation) /
                        (plan.sequence_parallel ? plan.tp : 1);
    fsdp_ = plan.dp_cp() > 1 && plan.fsdp;
    // FSDP gathers each layer as a pass needs it and reduces its gradients after every backward,
    // so neither the end-of-step gather nor the last backward's buckets run.
    overlap_grad_ = plan.dp_cp() > 1 && plan.stack.overlap_grad_reduce && !fsdp_;
    gather_ = plan.dp_cp() > 1 && plan.distributed_optimizer && !fsdp_;
    overlap_gather_ = gather_ && plan.stack.overlap_param_gather;
    combined_ = pp_ == 1 && v_ == 1;
  }

  Status Build() {
    const std::vector<int> layers = ChunkLayers(plan_);
    const std::vector<int> windowed = ChunkWindowedLayers(plan_);
    it_.stages = pp_;
    it_.chunks = v_;
    it_.micro_batches = m_;
    for (int vs = 0; vs < total_vs_; ++vs)
      it_.virtual_stages.push_back({layers[vs], vs == 0, vs == total_vs_ - 1, windowed[vs]});
    orders_.resize(pp_);
    last_backward_.assign(pp_, std::vector<size_t>(v_, 0));
    for (int s = 0; s < pp_; ++s) {
      orders_[s] = PipelineOrder(s, pp_, v_, m_);
      for (size_t i = 0; i < orders_[s].size(); ++i)
        if (orders_[s][i].backward) last_backward_[s][orders_[s][i].chunk] = i;
    }
    if (overlap_grad_) PlanGradSync();
    sends_.assign(2 * static_cast<size_t>(total_vs_) * m_, -1);
    last_pass_.assign(pp_, -1);
    last_send_.assign(pp_, {-1, -1});
    gathers_.assign(total_vs_, {});
    pieces_.assign(pp_, {});
    prefetched_.assign(pp_, -1);
    it_.schedule.Reserve(static_cast<size_t>(pp_) * (orders_.empty() ? 0 : orders_[0].size()) * 3);

    if (overlap_gather_)
      for (int s = 0; s < pp_; ++s) EmitGathers(s, -1);
    std::vector<size_t> next(pp_, 0);
    size_t left = 0;
    for (const auto& order : orders_) left += order.size();
    while (left > 0) {
      bool progress = false;
      for (int s = 0; s < pp_; ++s) {
        while (next[s] < orders_[s].size() && EmitStep(s, next[s])) {
          ++next[s];
          --left;
          progress = true;
        }
      }
      if (!progress) return Error("pipeline schedule deadlocked (a step waits for one never run)");
    }
    // Buckets not overlapped with the backward: reduced after the stage's last pass.
    std::vector<int32_t> dp_tail(pp_, -1);
    for (int s = 0; s < pp_; ++s) {
      dp_tail[s] = last_pass_[s];
      if (plan_.dp_cp() > 1 && !overlap_grad_ && !fsdp_)
        for (int c = 0; c < v_; ++c) dp_tail[s] = EmitBuckets(s, c, last_pass_[s], true);
      if ((overlap_grad_ || fsdp_) && last_bucket_.count(s)) dp_tail[s] = last_bucket_[s];
    }
    // The tied embedding's gradient: summed over the first and last stage once both are final.
    int32_t embedding_sync = -1;
    if (pp_ > 1 && plan_.model.tied_embeddings) {
      const Op op = Comm(OpFunc::kEmbeddingAllReduce, Stream::kDpComm, pp_ - 1, Group::kEmbedding,
                         CollectiveOp::kAllReduce,
                         static_cast<double>(counts_.embedding) / plan_.tp * grad_bytes_,
                         ChunkTags(-1, -1, -1, Phase::kOptimizer));
      const int32_t deps[] = {dp_tail[0], dp_tail[pp_ - 1]};
      embedding_sync = it_.schedule.Add(op, deps);
    }
    for (int s = 0; s < pp_; ++s) {
      double params = 0;
      for (int c = 0; c < v_; ++c) params += ChunkParams(c * pp_ + s);
      Op step;
      step.kind = OpKind::kOptimizer;
      step.func = OpFunc::kOptimizerStep;
      step.stream = Stream::kCompute;
      step.stage = static_cast<int16_t>(s);
      step.tags.phase = Phase::kOptimizer;
      step.bytes = (plan_.distributed_optimizer ? params / plan_.dp_cp() : params) *
                   AdamBytesPerParam(plan_);
      std::vector<int32_t> deps = {dp_tail[s]};
      if (embedding_sync >= 0 && (s == 0 || s == pp_ - 1)) deps.push_back(embedding_sync);
      const int32_t optimizer = it_.schedule.Add(step, deps);
      if (gather_ && !overlap_gather_) EmitGathers(s, optimizer);
    }
    return Status::Ok();
  }

 private:
  // Parameters per GPU of a virtual stage: its layers' 1/tp share, plus the embedding (first)
  // and the LM head and final norm (last).
  double ChunkParams(int vs) const {
    const ChunkShape& chunk = it_.virtual_stages[vs];
    double params = static_cast<double>(counts_.per_layer) * chunk.layers / plan_.tp;
    return params + ExtraParams(vs);
  }
  double ExtraParams(int vs) const { return EmbeddingParams(vs) + HeadParams(vs); }
  double EmbeddingParams(int vs) const {
    return it_.virtual_stages[vs].embedding
               ? static_cast<double>(counts_.embedding + counts_.position_embedding) / plan_.tp
               : 0;
  }
  // The head's chunk: the final norm and the LM head; with tied embeddings over a pipeline, the
  // last stage's own copy of the word embedding, a parameter in its buckets and optimizer like
  // any other, kept equal to the first stage's by the embedding's all-reduce (Megatron's
  // shared_embedding: language_module.py, setup_embeddings_and_output_layer).
  double HeadParams(int vs) const {
    return it_.virtual_stages[vs].head ? static_cast<double>(counts_.lm_head + counts_.final_norm +
                                                             TiedEmbeddingCopy(plan_, counts_)) /
                                             plan_.tp
                                       : 0;
  }
  // FSDP: the parameters a pass piece of layer `l` of virtual stage `vs` gathers and reduces,
  // the embedding's with the first layer and the head's with the last.
  double LayerUnitParams(int vs, int l) const {
    const int layers = it_.virtual_stages[vs].layers;
    return static_cast<double>(counts_.per_layer) / plan_.tp + (l == 0 ? EmbeddingParams(vs) : 0) +
           (l == layers - 1 ? HeadParams(vs) : 0);
  }

  // A communication op of stage `stage`: a collective (over `group`) or a pipeline transfer.
  static Op Comm(OpFunc func, Stream stream, int stage, Group group, CollectiveOp collective,
                 double bytes, const OpTags& tags) {
    Op op;
    op.kind = collective == CollectiveOp::kNone ? OpKind::kSendRecv : OpKind::kCollective;
    op.func = func;
    op.stream = stream;
    op.stage = static_cast<int16_t>(stage);
    op.group = group;
    op.collective = collective;
    op.bytes = bytes;
    op.tags = tags;
    return op;
  }
  static OpTags ChunkTags(int layer, int micro_batch, int vs, Phase phase) {
    OpTags tags;
    tags.layer = static_cast<int16_t>(layer);
    tags.micro_batch = static_cast<int16_t>(micro_batch);
    tags.virtual_stage = static_cast<int16_t>(vs);
    tags.phase = phase;
    return tags;
  }

  int32_t PassIndex(int vs, bool backward) {
    PassSpec spec{it_.virtual_stages[vs], combined_ || !backward, combined_ || backward};
    auto [found, inserted] = pass_index_.try_emplace(spec, static_cast<int32_t>(it_.passes.size()));
    if (inserted) it_.passes.push_back(spec);
    return found->second;
  }

  int32_t& Send(bool backward, int vs, int mb) {
    return sends_[(static_cast<size_t>(backward) * total_vs_ + vs) * m_ + mb];
  }

  // The parameter all-gather of virtual stage `vs`'s chunk, one op per layer bucket (and one for
  // the embedding or head), after `after` (or at the start of the iteration).
  void EmitGathers(int s, int32_t after) {
    for (int c = 0; c < v_; ++c) {
      const int vs = c * pp_ + s;
      const int layers = it_.virtual_stages[vs].layers;
      auto gather = [&](int layer, double params) {
        const Op op = Comm(OpFunc::kDpAllGather, Stream::kDpComm, s, Group::kDp,
                           CollectiveOp::kAllGather, params * 2,  // 16-bit parameters
                           ChunkTags(layer, -1, vs, Phase::kOptimizer));
        std::vector<int32_t> deps;
        if (after >= 0) deps.push_back(after);
        return it_.schedule.Add(op, deps);
      };
      // In the order the forward needs them: the embedding first, the head last.
      std::vector<int32_t>& ids = gathers_[vs];
      ids.assign(layers, -1);
      const bool extra = ExtraParams(vs) > 0;
      if (extra && it_.virtual_stages[vs].embedding)
        extra_gather_[vs] = gather(-1, ExtraParams(vs));
      for (int l = 0; l < layers; ++l)
        ids[l] = gather(l, static_cast<double>(counts_.per_layer) / plan_.tp);
      if (extra && !it_.virtual_stages[vs].embedding)
        extra_gather_[vs] = gather(-1, ExtraParams(vs));
    }
  }

  // Gradient buckets of virtual stage `c * pp + s` released by `after`: every layer's, and the
  // embedding's or head's, when `all`; otherwise only layer `layer` (or the extra one for -1).
  int32_t EmitBuckets(int s, int c, int32_t after, bool all, int layer = -1) {
    const int vs = c * pp_ + s;
    auto bucket = [&](int l, double bytes) {
      const bool shard = plan_.distributed_optimizer;
      const Op op =
          Comm(shard ? OpFunc::kDpReduceScatter : OpFunc::kDpAllReduce, Stream::kDpComm, s,
               Group::kDp, shard ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce, bytes,
               ChunkTags(l, -1, vs, Phase::kBackward));
      const int32_t deps[] = {after};
      return last_bucket_[s] = it_.schedule.Add(op, deps);
    };
    int32_t id = after;
    const int layers = it_.virtual_stages[vs].layers;
    if (all) {
      for (int l = layers - 1; l >= 0; --l) id = bucket(l, layer_grad_bytes_);
      if (ExtraParams(vs) > 0) id = bucket(-1, ExtraParams(vs) * grad_bytes_);
    } else if (layer >= 0) {
      id = bucket(layer, layer_grad_bytes_);
    } else if (ExtraParams(vs) > 0) {
      id = bucket(-1, ExtraParams(vs) * grad_bytes_);
    }
    return id;
  }

  // FSDP: the all-gather of layer `l`'s parameters of virtual stage `vs` on the dp-comm stream,
  // after the stage's pass piece two before the one it feeds (so that at most the running
  // layer's and the next one's gathered parameters are held: one layer of prefetch).
  int32_t EmitLayerGather(int s, int vs, int l, Phase phase) {
    const Op op = Comm(OpFunc::kFsdpAllGather, Stream::kDpComm, s, Group::kDp,
                       CollectiveOp::kAllGather, LayerUnitParams(vs, l) * 2,  // 16-bit parameters
                       ChunkTags(l, -1, vs, phase));
    const std::vector<int32_t>& pieces = pieces_[s];
    std::vector<int32_t> deps;
    if (pieces.size() >= 2) deps.push_back(pieces[pieces.size() - 2]);
    return it_.schedule.Add(op, deps);
  }

  // FSDP: step `index` of stage `s` as one piece per layer, forward in layer order and backward
  // from the top, each after its layer's gather; each backward piece releases its gradients'
  // reduce-scatter. The next piece's gather (of this pass, or of the stage's next step) is issued
  // before this piece's reduce-scatter, as FSDP prefetches. Returns the last piece.
  int32_t EmitShardedPass(int s, size_t index, const Op& pass, std::vector<int32_t>& deps) {
    const PipelineStep& step = orders_[s][index];
    const int vs = step.chunk * pp_ + s;
    const int layers = it_.virtual_stages[vs].layers;
    const Phase phase = step.backward ? Phase::kBackward : Phase::kForward;
    auto layer_at = [](const PipelineStep& st, int i, int n) {
      return st.backward ? n - 1 - i : i;
    };
    int32_t gather = prefetched_[s];
    if (gather < 0) gather = EmitLayerGather(s, vs, layer_at(step, 0, layers), phase);
    prefetched_[s] = -1;
    int32_t last = -1;
    for (int i = 0; i < layers; ++i) {
      const int l = layer_at(step, i, layers);
      Op piece = pass;
      piece.layer_begin = static_cast<int16_t>(l);
      piece.layer_end = static_cast<int16_t>(l + 1);
      deps.push_back(gather);
      last = it_.schedule.Add(piece, deps);
      deps.clear();
      pieces_[s].push_back(last);
      // The next piece's gather before this one's reduce-scatter (the dp-comm stream's order).
      gather = -1;
      if (i + 1 < layers) {
        gather = EmitLayerGather(s, vs, layer_at(step, i + 1, layers), phase);
      } else if (index + 1 < orders_[s].size()) {
        const PipelineStep& next = orders_[s][index + 1];
        const int next_vs = next.chunk * pp_ + s;
        const int next_layers = it_.virtual_stages[next_vs].layers;
        if (next_layers > 0)
          prefetched_[s] = EmitLayerGather(s, next_vs, layer_at(next, 0, next_layers),
                                           next.backward ? Phase::kBackward : Phase::kForward);
      }
      if (step.backward) {
        const Op reduce = Comm(OpFunc::kFsdpReduceScatter, Stream::kDpComm, s, Group::kDp,
                               CollectiveOp::kReduceScatter, LayerUnitParams(vs, l) * grad_bytes_,
                               ChunkTags(l, step.micro_batch, vs, Phase::kBackward));
        const int32_t after[] = {last};
        last_bucket_[s] = it_.schedule.Add(reduce, after);
      }
    }
    return last;
  }

  // When each chunk's gradients are reduced (StackSpec::grad_sync): during_[s][c], bucket by
  // bucket under the chunk's last backward; otherwise all of them after the steps that
  // released_after_[s] lists them at.
  void PlanGradSync() {
    const GradSync sync = plan_.gradient_sync();
    during_.assign(pp_, std::vector<bool>(v_, false));
    released_after_.assign(pp_, {});
    for (int s = 0; s < pp_; ++s) {
      const std::vector<PipelineStep>& order = orders_[s];
      released_after_[s].resize(order.size());
      std::vector<size_t> backwards;  // the stage's backward steps, in order
      for (size_t i = 0; i < order.size(); ++i)
        if (order[i].backward) backwards.push_back(i);
      for (int c = 0; c < v_; ++c) {
        const bool first = s == 0 && c == 0;
        // A pass of no layer has no pieces to release buckets by (the plan rules allow none).
        const bool layers = it_.virtual_stages[c * pp_ + s].layers > 0;
        if (layers && (sync == GradSync::kLayer || (first && sync == GradSync::kMegatron) ||
                       (s == 0 && v_ == 1 && sync == GradSync::kMegatronAligned))) {
          during_[s][c] = true;
          continue;
        }
        size_t after = last_backward_[s][c];
        if (sync == GradSync::kMegatronAligned && v_ > 1) {
          // Megatron-Core's interleaved schedule launches a chunk's grad_sync_func after the
          // backward step `stage` steps past the chunk's last one (schedules.py at core_r0.9.0,
          // backward_step_helper), the remaining chunks' after the loop.
          const auto at = std::find(backwards.begin(), backwards.end(), after);
          const size_t k = static_cast<size_t>(at - backwards.begin()) + s;
          after = k < backwards.size() ? backwards[k] : backwards.back();
        }
        released_after_[s][after].push_back(c);
      }
    }
  }

  // Emits step `index` of stage `s` if its input has been sent; returns false if not yet.
  bool EmitStep(int s, size_t index) {
    const PipelineStep& step = orders_[s][index];
    const int vs = step.chunk * pp_ + s;
    const int mb = step.micro_batch;
    int32_t input = -1;
    if (!step.backward && vs > 0) input = Send(false, vs - 1, mb);
    if (step.backward && vs + 1 < total_vs_) input = Send(true, vs + 1, mb);
    const bool needs_input = (!step.backward && vs > 0) || (step.backward && vs + 1 < total_vs_);
    if (needs_input && input < 0) return false;

    const OpTags tags = ChunkTags(-1, mb, vs, step.backward ? Phase::kBackward : Phase::kForward);
    std::vector<int32_t> deps;
    if (needs_input) {
      // Overlapped, Megatron-Core posts a step's receive with the send of the step before in the
      // same direction, so it never waits behind a send: a stream of its own, in step order (a
      // receive completes before its pass starts, so the order delays none).
      const Op recv =
          Comm(OpFunc::kPpRecv, plan_.p2p_overlapped() ? Stream::kPpRecv : Stream::kPpComm, s,
               Group::kPp, CollectiveOp::kNone, activation_bytes_, tags);
      const int32_t send[] = {input};
      deps.push_back(it_.schedule.Add(recv, send));
    }
    // Overlapped, a pass also waits for the stage's previous send in its direction (Megatron-Core
    // waits on that send's handle with the receive's, schedules.py at core_r0.9.0): hidden under
    // the pass between them once forwards and backwards alternate.
    int32_t& previous_send = last_send_[s][step.backward ? 1 : 0];
    if (plan_.p2p_overlapped() && previous_send >= 0) deps.push_back(previous_send);
    Op pass;
    pass.kind = OpKind::kPass;
    pass.func = step.backward ? OpFunc::kBackwardPass : OpFunc::kForwardPass;
    pass.stream = Stream::kCompute;
    pass.stage = static_cast<int16_t>(s);
    pass.pass = PassIndex(vs, step.backward);
    pass.tags = tags;
    const int layers = it_.virtual_stages[vs].layers;
    int32_t last = -1;
    const bool release = step.backward && overlap_grad_ && last_backward_[s][step.chunk] == index &&
                         during_[s][step.chunk];
    const bool gathered = !step.backward && overlap_gather_ && layers > 0 && mb == 0;
    if (fsdp_ && layers > 0) {
      last = EmitShardedPass(s, index, pass, deps);
    } else if (release) {
      // Top layer first: its gradients are final first.
      for (int l = layers - 1; l >= 0; --l) {
        Op piece = pass;
        piece.layer_begin = static_cast<int16_t>(l);
        piece.layer_end = static_cast<int16_t>(l + 1);
        last = it_.schedule.Add(piece, deps);
        deps.clear();
        EmitBuckets(s, step.chunk, last, false, l);
      }
      EmitBuckets(s, step.chunk, last, false, -1);
    } else if (gathered) {
      const std::vector<int32_t>& gathers = gathers_[vs];
      const auto extra = extra_gather_.find(vs);
      for (int l = 0; l < layers; ++l) {
        Op piece = pass;
        piece.layer_begin = static_cast<int16_t>(l);
        piece.layer_end = static_cast<int16_t>(l + 1);
        deps.push_back(gathers[l]);
        // The embedding's parameters before the first layer, the head's by the last.
        if (extra != extra_gather_.end() &&
            ((l == 0 && it_.virtual_stages[vs].embedding) || l == layers - 1))
          deps.push_back(extra->second);
        last = it_.schedule.Add(piece, deps);
        deps.clear();
      }
    } else {
      last = it_.schedule.Add(pass, deps);
    }
    last_pass_[s] = last;
    if (overlap_grad_)
      for (const int c : released_after_[s][index]) EmitBuckets(s, c, last, true);

    const bool sends = step.backward ? vs > 0 : vs + 1 < total_vs_;
    if (sends) {
      const Op send = Comm(OpFunc::kPpSend, Stream::kPpComm, s, Group::kPp, CollectiveOp::kNone,
                           activation_bytes_, tags);
      const int32_t after[] = {last};
      Send(step.backward, vs, mb) = previous_send = it_.schedule.Add(send, after);
    }
    return true;
  }

  const Plan& plan_;
  Iteration& it_;
  ParameterCounts counts_;
  const int pp_, v_, m_, total_vs_;
  double grad_bytes_ = 4, layer_grad_bytes_ = 0, activation_bytes_ = 0;
  bool fsdp_ = false, overlap_grad_ = false, gather_ = false, overlap_gather_ = false,
       combined_ = false;
  std::vector<std::vector<PipelineStep>> orders_;
  std::vector<std::vector<size_t>> last_backward_;  // by stage and chunk: its last backward step
  std::vector<std::vector<bool>> during_;           // by stage and chunk (PlanGradSync)
  std::vector<std::vector<std::vector<int>>> released_after_;  // by stage and step: chunks
  std::vector<int32_t> sends_;                     // by (backward, virtual stage, micro-batch)
  std::vector<int32_t> last_pass_;                 // by stage
  std::vector<std::array<int32_t, 2>> last_send_;  // by stage: forward's, backward's
  std::map<int, int32_t> last_bucket_;
  std::vector<std::vector<int32_t>> gathers_;  // by virtual stage: per layer
  std::map<int, int32_t> extra_gather_;        // by virtual stage: the embedding's or head's
  std::vector<std::vector<int32_t>> pieces_;   // FSDP, by stage: its pass pieces so far
  std::vector<int32_t> prefetched_;            // FSDP, by stage: the next piece's gather, or -1
  std::map<PassSpec, int32_t> pass_index_;
};

}  // namespace

Result<Iteration> LowerIteration(const Plan& plan, const IterationOptions& options) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  Iteration it;
  IterationBuilder builder(plan, &it);
  DOMINO_RETURN_IF_ERROR(builder.Build());
  if (options.lower_passes) {
    for (const PassSpec& pass : it.passes) {
      Result<Schedule> schedule =
          LowerStage(plan, LowerOptions{pass.chunk.layers, pass.chunk.embedding, pass.chunk.head,
                                        pass.forward, pass.backward, pass.chunk.windowed_layers});
      if (!schedule.ok()) return schedule.error();
      it.pass_schedules.push_back(std::move(schedule).value());
    }
  }
  return it;
}

}  // namespace domino
