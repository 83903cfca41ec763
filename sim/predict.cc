#include "sim/predict.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "models/model_counts.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "sim/engine.h"
#include "sim/pipeline.h"

namespace domino::sim {
namespace {

constexpr double kUsToMs = 1e-3;
// Adam with fp32 master weights, bf16/fp16 parameters and fp32 gradients: read the parameter
// (2), gradient (4), master (4), m (4), v (4); write parameter, master, m, v: 32 bytes per
// parameter through HBM.
constexpr double kAdamBytesPerParam = 32;
constexpr double kGradBytes = 4;  // Megatron accumulates and reduces gradients in fp32

// The groups of a plan on the cluster: TP ranks innermost, then DP and PP in the plan's order.
// A DP group's ranks are `stride` apart (tp, or tp * pp); pipeline neighbours tp * dp (or tp).
CommGroup DpGroup(const Plan& plan) {
  const int64_t stride =
      plan.placement == Placement::kTpDpPp ? plan.tp : static_cast<int64_t>(plan.tp) * plan.pp;
  const int per_node =
      static_cast<int>(std::clamp<int64_t>(plan.cluster.gpus_per_node / stride, 1, plan.dp));
  return CommGroup{plan.dp, (plan.dp + per_node - 1) / per_node, per_node};
}
CommGroup PpPair(const Plan& plan) {
  const int64_t stride =
      plan.placement == Placement::kTpDpPp ? static_cast<int64_t>(plan.tp) * plan.dp : plan.tp;
  if (stride < plan.cluster.gpus_per_node) return CommGroup{2, 1, 2};
  return CommGroup{2, 2, 1};
}

struct ChunkKey {
  int layers;
  bool embedding, head;
  auto operator<=>(const ChunkKey&) const = default;
};

// Forward and backward times of one chunk, real and with free TP collectives, plus its
// uncontended op sum (for the serialized bound).
struct ChunkSim {
  ChunkTimes real, ideal, serial;  // serial: every op's uncontended time, summed
  double tp_comm_us = 0;
  // With one stage, the chunk's schedule and timelines are the prediction's representative.
  Schedule schedule;
  Timeline timeline, ideal_timeline;
};

Timeline Run(const Schedule& s, const CostModel& model, double* serial_us = nullptr) {
  std::vector<OpCost> costs = model.CostAll(s);
  if (serial_us)
    for (const OpCost& c : costs) *serial_us += c.alone_us;
  return Simulate(s, costs, model.device());
}

Result<ChunkSim> SimulateChunk(const Plan& plan, const ChunkKey& key, const CostModel& real,
                               const CostModel& ideal) {
  ChunkSim sim;
  LowerOptions options{key.layers, key.embedding, key.head, true, true};
  if (plan.pp == 1) {
    // One stage: forward and backward back to back in one schedule (the last forward
    // collectives may overlap the first backward work); the pipeline sees it as one block.
    Result<Schedule> both = LowerStage(plan, options);
    if (!both.ok()) return both.error();
    sim.timeline = Run(*both, real, &sim.serial.fwd_us);
    sim.ideal_timeline = Run(*both, ideal);
    // The pipeline sees forward up to the first backward op and backward after it, so that DP
    // buckets are released while the backward runs.
    auto split = [&](const Timeline& t, ChunkTimes* out) {
      double backward_start = t.end_us();
      for (size_t i = 0; i < both->size(); ++i)
        if (both->ops()[i].tags.phase == Phase::kBackward)
          backward_start = std::min(backward_start, t.ops[i].start_us);
      out->fwd_us = backward_start;
      out->bwd_us = t.end_us() - backward_start;
    };
    split(sim.timeline, &sim.real);
    split(sim.ideal_timeline, &sim.ideal);
    sim.tp_comm_us = real.TpCommUs(*both);
    sim.schedule = std::move(both).value();
    return sim;
  }
  for (bool forward : {true, false}) {
    options.forward = forward;
    options.backward = !forward;
    Result<Schedule> pass = LowerStage(plan, options);
    if (!pass.ok()) return pass.error();
    (forward ? sim.real.fwd_us : sim.real.bwd_us) =
        Run(*pass, real, forward ? &sim.serial.fwd_us : &sim.serial.bwd_us).end_us();
    (forward ? sim.ideal.fwd_us : sim.ideal.bwd_us) = Run(*pass, ideal).end_us();
    sim.tp_comm_us += real.TpCommUs(*pass);
  }
  return sim;
}

// Parameters per GPU of a chunk: its layers' 1/tp share, plus the embedding (first) and the LM
// head and final norm (last; the tied embedding's gradient is shared with the first stage).
double ChunkParams(const Plan& plan, const ChunkKey& key, const ParameterCounts& counts) {
  double params = static_cast<double>(counts.per_layer) * key.layers / plan.tp;
  if (key.embedding)
    params += static_cast<double>(counts.embedding + counts.position_embedding) / plan.tp;
  if (key.head) params += static_cast<double>(counts.lm_head + counts.final_norm) / plan.tp;
  return params;
}

// When the DP reduction of one stage's gradients ends: one bucket per layer, released evenly
// while its chunk's last backward runs (embedding and head buckets at that backward's end),
// reduced one after another on the DP stream. Returns the end and adds the uncontended
// collective time to *comm_us.
double DpDone(const Plan& plan, const std::vector<ChunkKey>& keys, int stage,
              const PipelineResult& pipe, const ParameterCounts& counts, double* comm_us) {
  const CommGroup group = DpGroup(plan);
  const Collective kind =
      plan.distributed_optimizer ? Collective::kReduceScatter : Collective::kAllReduce;
  struct Bucket {
    double ready_us, bytes;
  };
  std::vector<Bucket> buckets;
  const int v = plan.virtual_stages;
  for (int c = 0; c < v; ++c) {
    const ChunkKey& key = keys[c * plan.pp + stage];
    const double start = pipe.last_backward_start_us[stage * v + c];
    const double end = pipe.last_backward_end_us[stage * v + c];
    const double layer_bytes = static_cast<double>(counts.per_layer) / plan.tp * kGradBytes;
    // Backward walks the layers top down: the top layer's gradients are ready first.
    // Without overlap (the stack reduces after the pipeline flush) every bucket waits for the
    // stage's last backward.
    const bool overlap = plan.stack.overlap_grad_reduce;
    const double flush = pipe.stage_end_us[stage];
    for (int l = 0; l < key.layers; ++l)
      buckets.push_back(
          {overlap ? start + (end - start) * (l + 1) / key.layers : flush, layer_bytes});
    const double extra = (ChunkParams(plan, key, counts) -
                          static_cast<double>(counts.per_layer) * key.layers / plan.tp) *
                         kGradBytes;
    if (extra > 0) buckets.push_back({overlap ? end : flush, extra});
  }
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const Bucket& a, const Bucket& b) { return a.ready_us < b.ready_us; });
  double done = 0;
  for (const Bucket& b : buckets) {
    double t = EstimateCollective(plan.cluster.node, kind, b.bytes, group).time_us;
    *comm_us += t;
    done = std::max(done, b.ready_us) + t;
  }
  return done;
}

}  // namespace

std::string_view OpClassName(OpClass op_class) {
  static constexpr std::array<std::string_view, kOpClassCount> kNames = {
      "gemm", "attention", "elementwise", "tp-comm", "other-comm"};
  return kNames[static_cast<int>(op_class)];
}

OpClass ClassOf(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm:
      return OpClass::kGemm;
    case OpKind::kAttention:
      return OpClass::kAttention;
    case OpKind::kElementwise:
    case OpKind::kOptimizer:
    case OpKind::kPass:
      return OpClass::kElementwise;
    case OpKind::kCollective:
    case OpKind::kSendRecv:
      return op.group == Group::kTp ? OpClass::kTpComm : OpClass::kOtherComm;
  }
  return OpClass::kElementwise;
}

Result<Prediction> Predict(const Plan& plan, const CostOptions& options) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  CostModel model(plan, options);
  CostOptions ideal_options = options;
  ideal_options.tp_comm_free = true;
  CostModel ideal_model(plan, ideal_options);

  const int pp = plan.pp, v = plan.virtual_stages, m = plan.micro_batches();
  const std::vector<int> layers = ChunkLayers(plan);
  const int virtual_stages = pp * v;
  std::vector<ChunkKey> keys;  // by virtual stage
  for (int vs = 0; vs < virtual_stages; ++vs)
    keys.push_back({layers[vs], vs == 0, vs == virtual_stages - 1});
  std::map<ChunkKey, ChunkSim> sims;  // each distinct chunk simulated once
  for (const ChunkKey& key : keys) {
    if (sims.count(key)) continue;
    Result<ChunkSim> sim = SimulateChunk(plan, key, model, ideal_model);
    if (!sim.ok()) return sim.error();
    sims.emplace(key, std::move(sim).value());
  }

  PipelineSpec spec;
  spec.stages = pp;
  spec.chunks = v;
  spec.micro_batches = m;
  const double activation_bytes =
      static_cast<double>(plan.micro_batch) * plan.seq_len * plan.model.hidden *
      DtypeBytes(plan.precision == Dtype::kFp8 ? Dtype::kBf16 : plan.precision) /
      (plan.sequence_parallel ? plan.tp : 1);
  spec.p2p_us = pp > 1 ? EstimateCollective(plan.cluster.node, Collective::kSendRecv,
                                            activation_bytes, PpPair(plan))
                             .time_us
                       : 0;
  auto times = [&](bool ideal, bool serial) {
    std::vector<ChunkTimes> out(virtual_stages);
    for (int s = 0; s < pp; ++s) {
      for (int c = 0; c < v; ++c) {
        const ChunkSim& sim = sims.at(keys[c * pp + s]);
        out[s * v + c] = serial ? sim.serial : ideal ? sim.ideal : sim.real;
      }
    }
    return out;
  };
  spec.times = times(false, false);
  Result<PipelineResult> pipe = SimulatePipeline(spec);
  if (!pipe.ok()) return pipe.error();
  PipelineSpec free_p2p = spec;
  free_p2p.p2p_us = 0;
  Result<PipelineResult> pipe_free = SimulatePipeline(free_p2p);
  PipelineSpec ideal_spec = spec;
  ideal_spec.times = times(true, false);
  Result<PipelineResult> pipe_ideal = SimulatePipeline(ideal_spec);
  if (!pipe_free.ok() || !pipe_ideal.ok()) return Error("pipeline simulation failed");

  // Data parallelism, optimizer and the end of the iteration, per stage.
  const ParameterCounts counts = CountParameters(plan.model);
  const double hbm_GBps = plan.cluster.node.gpu.hbm_GBps * plan.cluster.node.gpu.hbm_efficiency;
  struct StageEnd {
    double finish_us, dp_done_us, optimizer_us, dp_comm_us, params;
  };
  auto stage_ends = [&](const PipelineResult& p) {
    std::vector<StageEnd> ends(pp);
    for (int s = 0; s < pp; ++s) {
      StageEnd& e = ends[s];
      e.params = 0;
      for (int c = 0; c < v; ++c) e.params += ChunkParams(plan, keys[c * pp + s], counts);
      e.dp_comm_us = 0;
      e.dp_done_us = plan.dp > 1 ? DpDone(plan, keys, s, p, counts, &e.dp_comm_us) : 0;
      // With the distributed optimizer each rank steps its 1/dp shard, then the updated shards
      // are all-gathered as 16-bit parameters.
      double gather_us = plan.dp > 1 && plan.distributed_optimizer
                             ? EstimateCollective(plan.cluster.node, Collective::kAllGather,
                                                  e.params * 2, DpGroup(plan))
                                   .time_us
                             : 0;
      e.dp_comm_us += gather_us;
      const double step_params = plan.distributed_optimizer ? e.params / plan.dp : e.params;
      e.optimizer_us = step_params * kAdamBytesPerParam / (hbm_GBps * 1e3) +
                       plan.cluster.node.gpu.kernel_launch_us;
      // Overlapped with the next iteration's first forward (one micro-batch through every
      // chunk of the stage), the gather costs only what that forward does not cover.
      double exposed_gather_us = gather_us;
      if (plan.stack.overlap_param_gather) {
        double first_forward_us = 0;
        for (int c = 0; c < v; ++c) first_forward_us += sims.at(keys[c * pp + s]).real.fwd_us;
        exposed_gather_us = std::max(0.0, gather_us - first_forward_us);
      }
      e.finish_us = std::max(p.stage_end_us[s], e.dp_done_us) + e.optimizer_us + exposed_gather_us;
    }
    return ends;
  };
  std::vector<StageEnd> ends = stage_ends(*pipe);
  std::vector<StageEnd> ideal_ends = stage_ends(*pipe_ideal);
  int critical = 0;
  for (int s = 0; s < pp; ++s)
    if (ends[s].finish_us > ends[critical].finish_us) critical = s;
  double ideal_us = 0;
  for (const StageEnd& e : ideal_ends) ideal_us = std::max(ideal_us, e.finish_us);
  const double iteration_us = ends[critical].finish_us;

  Prediction p;
  IterationBreakdown& b = p.breakdown;
  b.critical_stage = critical;
  double real_busy = 0, ideal_busy = 0;
  for (int c = 0; c < v; ++c) {
    const ChunkSim& sim = sims.at(keys[c * pp + critical]);
    real_busy += m * (sim.real.fwd_us + sim.real.bwd_us);
    ideal_busy += m * (sim.ideal.fwd_us + sim.ideal.bwd_us);
  }
  const StageEnd& ce = ends[critical];
  b.compute_ms = ideal_busy * kUsToMs;
  b.exposed_tp_ms = (real_busy - ideal_busy) * kUsToMs;
  b.optimizer_ms = ce.optimizer_us * kUsToMs;
  b.exposed_dp_ms =
      std::max(0.0, (ce.finish_us - pipe->stage_end_us[critical] - ce.optimizer_us) * kUsToMs);
  if (pp > 1) {  // (with one stage the pipeline is the busy time itself, up to rounding)
    b.bubble_ms = std::max(0.0, pipe_free->stage_end_us[critical] - real_busy) * kUsToMs;
    b.exposed_pp_ms =
        std::max(0.0, (pipe->stage_end_us[critical] - real_busy) * kUsToMs - b.bubble_ms);
  }
  // Whatever rounding is left goes to compute, so that the parts add up to the iteration.
  b.compute_ms = iteration_us * kUsToMs - b.exposed_tp_ms - b.bubble_ms - b.exposed_pp_ms -
                 b.optimizer_ms - b.exposed_dp_ms;

  // The representative micro-batch: stage 0's first chunk, forward and backward together.
  {
    const ChunkKey& key = keys[0];
    if (pp == 1) {  // already simulated as the only chunk
      ChunkSim& only = sims.at(key);
      p.schedule = std::move(only.schedule);
      p.timeline = std::move(only.timeline);
      p.ideal_timeline = std::move(only.ideal_timeline);
    } else {
      Result<Schedule> schedule =
          LowerStage(plan, LowerOptions{key.layers, key.embedding, key.head, true, true});
      if (!schedule.ok()) return schedule.error();
      p.schedule = std::move(schedule).value();
      p.timeline = Run(p.schedule, model);
      p.ideal_timeline = Run(p.schedule, ideal_model);
    }
    const double per_iteration = static_cast<double>(m) * v;
    for (size_t i = 0; i < p.schedule.size(); ++i) {
      const OpTime& t = p.timeline.ops[i];
      p.busy_ms[static_cast<int>(ClassOf(p.schedule.ops()[i]))] +=
          (t.end_us - t.start_us) * kUsToMs * per_iteration;
    }
  }
  double tp_comm_us = 0, model_flops_per_token = TrainingFlopsPerToken(plan.model, plan.seq_len,
                                                                       AttentionCount::kCausal);
  for (int c = 0; c < v; ++c) tp_comm_us += sims.at(keys[c * pp]).tp_comm_us;
  p.tp_comm_ms = tp_comm_us * m * kUsToMs;
  p.dp_comm_ms = ends[0].dp_comm_us * kUsToMs;

  // Serialized: every chunk's ops back to back in the pipeline, then DP collectives and the step.
  {
    PipelineSpec serial = spec;
    serial.times = times(false, true);
    Result<PipelineResult> pipe_serial = SimulatePipeline(serial);
    if (!pipe_serial.ok()) return pipe_serial.error();
    double serial_us = 0;
    for (int s = 0; s < pp; ++s)
      serial_us = std::max(
          serial_us, pipe_serial->stage_end_us[s] + ends[s].dp_comm_us + ends[s].optimizer_us);
    p.serial_ms = serial_us * kUsToMs;
  }

  PlanFigures& f = p.figures;
  f.iteration_ms = iteration_us * kUsToMs;
  f.ideal_ms = ideal_us * kUsToMs;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  // With pipeline stages, TP time lengthens the fill and drain too, so the exposure can exceed
  // one stage's TP time: nothing is hidden then.
  f.hidden_comm_fraction =
      p.tp_comm_ms > 0 ? std::clamp(1.0 - f.exposed_comm_ms / p.tp_comm_ms, 0.0, 1.0) : 1.0;
  const double seconds = f.iteration_ms * 1e-3;
  const double tokens = static_cast<double>(plan.global_batch) * plan.seq_len;
  f.tokens_per_s = tokens / seconds;
  f.tflops_per_gpu = model_flops_per_token * tokens / plan.cluster.total_gpus() / seconds / 1e12;
  double peak = plan.cluster.node.gpu.peak(plan.precision);
  if (peak <= 0) peak = plan.cluster.node.gpu.peak(Dtype::kBf16);
  f.mfu = f.tflops_per_gpu / peak;
  p.mfu_full_attention = f.mfu * TrainingFlopsPerToken(plan.model, plan.seq_len) /
                         TrainingFlopsPerToken(plan.model, plan.seq_len, AttentionCount::kCausal);
  f.memory_gib_per_gpu =
      EstimateMemory(plan, AttentionOf(plan, options) == AttentionKernel::kFlash).total_bytes() /
      (1 << 30);
  return p;
}

}  // namespace domino::sim
