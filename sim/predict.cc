#include "sim/predict.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "models/model_counts.h"
#include "planner/iteration.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "sim/engine.h"
#include "sim/pass_pieces.h"

namespace domino::sim {
namespace {

constexpr double kUsToMs = 1e-3;

// One distinct pass of the iteration simulated at one clock: as the plan runs it (`real`) and,
// for the figures, with its TP collectives free (`ideal`).
struct PassSim {
  Timeline real, ideal;
  std::vector<OpCost> costs;
  double tp_comm_us = 0, cp_comm_us = 0;
  double stall_share = 0;  // PassShares::stall
  double gemm_share = 0;   // PassShares::gemm
};

bool IsDpSide(const Op& op) { return op.group == Group::kDp || op.group == Group::kEmbedding; }

// Whether `op` of the iteration is a pass of stage 0 that stands for its whole pass schedule: a
// pass cut in pieces counts once, at its layer 0; a combined pass once, at its forward.
bool CountsPassOnce(const Op& op, const Iteration& it) {
  if (op.kind != OpKind::kPass || op.stage != 0 || op.layer_begin > 0) return false;
  const PassSpec& spec = it.passes[op.pass];
  return !(spec.forward && spec.backward && op.func == OpFunc::kBackwardPass);
}

// The share of the TP collectives' time that the iteration hides. With pipeline stages, TP time
// lengthens the fill and drain too, so the exposure can exceed one stage's TP time: nothing is
// hidden then.
double HiddenFraction(double exposed_ms, double tp_comm_ms) {
  return tp_comm_ms > 0 ? std::clamp(1.0 - exposed_ms / tp_comm_ms, 0.0, 1.0) : 1.0;
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

namespace {

// An iteration with its engine prepared (the engine refers to the iteration: never moved).
struct LoweredIteration {
  explicit LoweredIteration(Iteration lowered)
      : iteration(std::move(lowered)), engine(iteration.schedule) {}
  LoweredIteration(const LoweredIteration&) = delete;
  LoweredIteration& operator=(const LoweredIteration&) = delete;
  Iteration iteration;
  Engine engine;
};

// The plan's distinct passes (Iteration::passes), lowered once for every clock a prediction
// simulates them at, each with its engine (which refers to it: held by pointer, never moved).
struct LoweredPasses {
  std::vector<std::unique_ptr<Schedule>> schedules;
  std::vector<Engine> engines;
};

Result<LoweredPasses> LowerPasses(const Plan& plan, const Iteration& it) {
  LoweredPasses out;
  out.schedules.reserve(it.passes.size());
  out.engines.reserve(it.passes.size());
  for (const PassSpec& spec : it.passes) {
    Result<Schedule> schedule =
        LowerStage(plan, LowerOptions{spec.chunk.layers, spec.chunk.embedding, spec.chunk.head,
                                      spec.forward, spec.backward, spec.chunk.windowed_layers});
    if (!schedule.ok()) return schedule.error();
    out.schedules.push_back(std::make_unique<Schedule>(std::move(schedule).value()));
    out.engines.emplace_back(*out.schedules.back());
  }
  return out;
}

// What the iteration's ops depend on (planner/iteration.cc): everything but the slicing, the
// overlap method and the attention kernel, which change only what the passes cost.
struct IterationShape {
  std::vector<int64_t> numbers;
  auto operator<=>(const IterationShape&) const = default;
};
IterationShape ShapeOf(const Plan& plan) {
  const ParameterCounts c = CountParameters(plan.model);
  IterationShape shape;
  shape.numbers = {plan.tp,
                   plan.cp,
                   plan.pp,
                   plan.dp,
                   plan.virtual_stages,
                   plan.micro_batch,
                   plan.global_batch,
                   plan.seq_len,
                   plan.model.hidden,
                   plan.model.layers,
                   static_cast<int64_t>(plan.precision),
                   plan.sequence_parallel,
                   plan.distributed_optimizer,
                   plan.fsdp,
                   static_cast<int64_t>(plan.gradient_reduce()),
                   static_cast<int64_t>(plan.gradient_sync()),
                   plan.p2p_overlapped(),
                   static_cast<int64_t>(plan.pipeline_split),
                   plan.stack.overlap_grad_reduce,
                   plan.stack.overlap_param_gather,
                   plan.model.tied_embeddings,
                   c.per_layer,
                   c.embedding,
                   c.position_embedding,
                   c.final_norm,
                   c.lm_head};
  // The chunks' windowed layers (ChunkShape::windowed_layers).
  for (int windowed : ChunkWindowedLayers(plan)) shape.numbers.push_back(windowed);
  return shape;
}

// The last iteration lowered for figures, per thread: a search evaluates every slicing of one
// shape in a row.
Result<std::shared_ptr<const LoweredIteration>> CachedIteration(const Plan& plan) {
  thread_local IterationShape last_shape;
  thread_local std::shared_ptr<const LoweredIteration> last;
  IterationShape shape = ShapeOf(plan);
  if (last != nullptr && shape == last_shape) return last;
  Result<Iteration> fresh = LowerIteration(plan, IterationOptions{false});
  if (!fresh.ok()) return fresh.error();
  last = std::make_shared<const LoweredIteration>(std::move(fresh).value());
  last_shape = std::move(shape);
  return last;
}

// The iteration at one tensor clock as the plan runs it: its passes simulated, then the iteration
// from them, and the GEMM share of its critical stage (the power limit's input).
struct RealRun {
  std::vector<PassSim> passes;     // real only; PredictAtClock adds the ideal
  std::vector<PassIndex> indexes;  // likewise
  std::vector<int> index_layers;   // by pass: the layers its index tells apart (PartIndex)
  std::vector<OpCost> costs;       // the iteration's ops
  Timeline timeline;
  int critical = 0;  // the first of the stages that finish last
  double gemm_duty = 0;
};

// `unheld`: the same plan's run at another clock, whose passes' costs it takes (they are spent),
// pricing again only the GEMMs and attention, the ops the clock touches.
Result<RealRun> RunReal(const Plan& plan, const CostModel& model, const LoweredIteration& lowered,
                        const LoweredPasses& passes, RealRun* unheld = nullptr);

// One prediction of the lowered iteration with the tensor cores at options.tensor_clock
// (Predict: the power limit's), from its real run at that clock (`model`'s, which RunReal made).
// The prediction takes the representative pass's schedule from `passes`: they are spent.
Result<Prediction> PredictAtClock(const Plan& plan, const CostOptions& options,
                                  const LoweredIteration& lowered, LoweredPasses& passes,
                                  const CostModel& model, RealRun run);

// The passes lowered, RunReal and PredictAtClock at one clock.
Result<Prediction> PredictAt(const Plan& plan, const CostOptions& options,
                             const LoweredIteration& lowered) {
  Result<LoweredPasses> passes = LowerPasses(plan, lowered.iteration);
  if (!passes.ok()) return passes.error();
  const CostModel model(plan, options);
  Result<RealRun> run = RunReal(plan, model, lowered, *passes);
  if (!run.ok()) return run.error();
  return PredictAtClock(plan, options, lowered, *passes, model, std::move(run).value());
}

}  // namespace

double PowerClock(const GpuSpec& gpu, double gemm_duty) {
  return std::max(0.0, 1.0 - gpu.power_duty_slope * std::max(0.0, gemm_duty - gpu.power_duty_knee));
}

void HoldIdealClock(const GpuSpec& gpu, double base_clock, Prediction* p) {
  // The ideal at the iteration's clock c, its critical stage's GEMMs taking g of its t. At the
  // base clock they take g c / base; their share there sets the ideal's own clock, at which
  // they take g c / clock. (Only the GEMMs scale: the power model's rule, PowerClock.)
  const double c = p->tensor_clock, g = p->ideal_gemm_ms, t = p->figures.ideal_ms;
  if (!(g > 0) || !(t > g) || !(c > 0) || !(base_clock > 0)) return;
  const double g_base = g * c / base_clock;
  const double t_base = t - g + g_base;
  const double clock = std::min(c, base_clock * PowerClock(gpu, g_base / t_base));
  if (clock >= c || !(clock > 0)) return;
  PlanFigures& f = p->figures;
  // Never past the iteration, which runs the same GEMMs with the TP collectives on top.
  f.ideal_ms = std::min(f.iteration_ms, t - g + g * c / clock);
  p->ideal_gemm_ms = g * c / clock;
  p->ideal_clock = clock;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  f.hidden_comm_fraction = HiddenFraction(f.exposed_comm_ms, p->tp_comm_ms);
}

Result<Prediction> Predict(const Plan& plan, const CostOptions& options) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  // The iteration and its engine (the same at any clock): lowered here, or (figures only) the
  // cached one of this shape.
  std::shared_ptr<const LoweredIteration> lowered;
  if (options.figures_only) {
    Result<std::shared_ptr<const LoweredIteration>> cached = CachedIteration(plan);
    if (!cached.ok()) return cached.error();
    lowered = *cached;
  } else {
    Result<Iteration> fresh = LowerIteration(plan, IterationOptions{false});
    if (!fresh.ok()) return fresh.error();
    lowered = std::make_shared<const LoweredIteration>(std::move(fresh).value());
  }
  Result<LoweredPasses> passes = LowerPasses(plan, lowered->iteration);
  if (!passes.ok()) return passes.error();
  // The real run at the full clock gives the GEMM share; the figures come at the clock it holds.
  const CostModel model(plan, options);
  Result<RealRun> first = RunReal(plan, model, *lowered, *passes);
  if (!first.ok()) return first.error();
  const double duty = first->gemm_duty;
  const double clock = PowerClock(plan.cluster.node.gpu, duty);
  if (clock >= 1) {
    Result<Prediction> p =
        PredictAtClock(plan, options, *lowered, *passes, model, std::move(first).value());
    if (p.ok()) HoldIdealClock(plan.cluster.node.gpu, options.tensor_clock, &*p);
    return p;
  }
  CostOptions held = options;
  held.tensor_clock = options.tensor_clock * clock;
  const CostModel held_model(plan, held);
  Result<RealRun> second = RunReal(plan, held_model, *lowered, *passes, &*first);
  if (!second.ok()) return second.error();
  Result<Prediction> p =
      PredictAtClock(plan, held, *lowered, *passes, held_model, std::move(second).value());
  if (p.ok()) {
    p->gemm_duty_unheld = duty;
    HoldIdealClock(plan.cluster.node.gpu, options.tensor_clock, &*p);
  }
  return p;
}

namespace {

// The layers' part of a prediction's one-micro-batch timeline (PredictLayerLoop).
LayerLoop LayerLoopOf(const Prediction& p) {
  LayerLoop out;
  for (size_t i = 0; i < p.schedule.size(); ++i) {
    const Op& op = p.schedule.op(static_cast<int32_t>(i));
    const bool end = op.func >= OpFunc::kEmbed && op.func <= OpFunc::kFinalNormGrad;
    const OpClass c = ClassOf(op);
    if (end || c == OpClass::kTpComm || c == OpClass::kOtherComm) continue;
    const double ms = (p.timeline.ops[i].end_us - p.timeline.ops[i].start_us) * 1e-3;
    out.ms += ms;
    out.class_ms[static_cast<int>(c)] += ms;
  }
  return out;
}

}  // namespace

Result<LayerLoop> PredictLayerLoop(const Plan& plan) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  Result<Iteration> fresh = LowerIteration(plan, IterationOptions{false});
  if (!fresh.ok()) return fresh.error();
  const LoweredIteration lowered(std::move(fresh).value());
  CostOptions options;
  Result<Prediction> full = PredictAt(plan, options, lowered);
  if (!full.ok()) return full.error();
  const LayerLoop at_full = LayerLoopOf(*full);
  const double duty =
      at_full.ms > 0 ? at_full.class_ms[static_cast<int>(OpClass::kGemm)] / at_full.ms : 0;
  options.tensor_clock = PowerClock(plan.cluster.node.gpu, duty);
  Result<Prediction> held = PredictAt(plan, options, lowered);
  if (!held.ok()) return held.error();
  LayerLoop out = LayerLoopOf(*held);
  out.tensor_clock = options.tensor_clock;
  out.gemm_duty = duty;
  return out;
}

namespace {

Result<RealRun> RunReal(const Plan& plan, const CostModel& model, const LoweredIteration& lowered,
                        const LoweredPasses& lowered_passes, RealRun* unheld) {
  const Iteration& it = lowered.iteration;
  const int sms = model.device().sms;
  RealRun run;
  run.passes.resize(it.passes.size());
  run.indexes.resize(it.passes.size());
  // A pass whose ops the iteration does not cut in pieces of layers is indexed as one piece.
  const Schedule& s = it.schedule;
  const size_t n = s.size();
  run.index_layers.assign(it.passes.size(), 1);
  for (const Op& op : s.ops())
    if (op.kind == OpKind::kPass && op.layer_begin >= 0)
      run.index_layers[op.pass] = it.passes[op.pass].chunk.layers;
  for (size_t i = 0; i < it.passes.size(); ++i) {
    const PassSpec& spec = it.passes[i];
    const Schedule& schedule = *lowered_passes.schedules[i];
    PassSim& sim = run.passes[i];
    if (unheld == nullptr) {
      sim.costs = model.CostAll(schedule);
    } else {
      sim.costs = std::move(unheld->passes[i].costs);
      for (size_t j = 0; j < schedule.size(); ++j) {
        const Op& op = schedule.ops()[j];
        if (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention)
          sim.costs[j] = model.Cost(op);
      }
    }
    sim.real = lowered_passes.engines[i].Run(sim.costs, model.device());
    const PassShares shares = SharesOf(schedule, sim.costs);
    sim.stall_share = shares.stall;
    sim.gemm_share = shares.gemm;
    const bool combined = spec.forward && spec.backward;
    for (bool backward : {false, true})
      if (combined || backward == spec.backward)
        run.indexes[i].real[backward] =
            IndexPart(schedule, sim.real, sim.costs, backward, combined, run.index_layers[i]);
  }
  // The iteration's op costs: passes from their simulations, the rest from the cost model.
  run.costs.resize(n);
  std::vector<double> stage_gemm_us(plan.pp, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = s.ops()[i];
    if (op.kind != OpKind::kPass) {
      run.costs[i] = model.Cost(op);
      continue;
    }
    const PassSim& sim = run.passes[op.pass];
    const PieceTimes r = Piece(run.indexes[op.pass].real[op.func == OpFunc::kBackwardPass], op);
    run.costs[i] = PassCost(r.duration_us, r.gemm_us, sms, sim.stall_share);
    stage_gemm_us[op.stage] += r.gemm_us * sim.gemm_share;
  }
  run.timeline = lowered.engine.Run(run.costs, model.device());
  // The critical stage's GEMM time over the iteration.
  std::vector<double> finish(plan.pp, 0.0);
  for (size_t i = 0; i < n; ++i)
    finish[s.ops()[i].stage] = std::max(finish[s.ops()[i].stage], run.timeline.ops[i].end_us);
  run.critical = static_cast<int>(std::max_element(finish.begin(), finish.end()) - finish.begin());
  const double end = finish[run.critical];
  if (end > 0 && std::isfinite(end))
    run.gemm_duty = std::min(1.0, stage_gemm_us[run.critical] / end);
  return run;
}

Result<Prediction> PredictAtClock(const Plan& plan, const CostOptions& options,
                                  const LoweredIteration& lowered, LoweredPasses& lowered_passes,
                                  const CostModel& model, RealRun run) {
  const Iteration& it = lowered.iteration;
  const int pp = plan.pp;
  const int sms = model.device().sms;
  const DeviceResources device = model.device();

  // Each distinct pass's ideal: its TP collectives free, as CostModel prices them with
  // tp_comm_free, every other op as it runs.
  std::vector<PassSim>& passes = run.passes;
  std::vector<PassIndex>& indexes = run.indexes;
  for (size_t i = 0; i < it.passes.size(); ++i) {
    const PassSpec& spec = it.passes[i];
    const Schedule& schedule = *lowered_passes.schedules[i];
    PassSim& sim = passes[i];
    // (Freed in place for the run, then restored.)
    std::vector<std::pair<size_t, OpCost>> priced;
    for (size_t j = 0; j < schedule.size(); ++j) {
      const Op& op = schedule.ops()[j];
      if (op.group == Group::kCp || op.group == Group::kCpA2a)
        sim.cp_comm_us += sim.costs[j].alone_us;
      if (op.group != Group::kTp) continue;
      if (op.kind == OpKind::kCollective) sim.tp_comm_us += sim.costs[j].alone_us;
      if (op.kind == OpKind::kCollective || op.kind == OpKind::kSendRecv) {
        priced.emplace_back(j, sim.costs[j]);
        sim.costs[j] = OpCost{};
        sim.costs[j].is_comm = true;
      }
    }
    if (options.tp_comm_free) sim.tp_comm_us = model.TpCommUs(schedule);
    sim.ideal = lowered_passes.engines[i].Run(sim.costs, device);
    for (const auto& [j, cost] : priced) sim.costs[j] = cost;
    const bool combined = spec.forward && spec.backward;
    for (bool backward : {false, true})
      if (combined || backward == spec.backward)
        indexes[i].ideal[backward] =
            IndexPart(schedule, sim.ideal, sim.costs, backward, combined, run.index_layers[i]);
  }

  const Schedule& s = it.schedule;
  const size_t n = s.size();
  const std::vector<OpCost>& real = run.costs;
  std::vector<OpCost> ideal = real, serial = real;
  for (size_t i = 0; i < n; ++i) {
    const Op& op = s.ops()[i];
    if (op.kind != OpKind::kPass) continue;
    const bool backward = op.func == OpFunc::kBackwardPass;
    const PieceTimes r = Piece(indexes[op.pass].real[backward], op);
    const PieceTimes d = Piece(indexes[op.pass].ideal[backward], op);
    ideal[i] = PassCost(d.duration_us, d.gemm_us, sms, passes[op.pass].stall_share);
    serial[i] = PassCost(r.serial_us, 0, sms);
  }
  const Engine& engine = lowered.engine;
  const Timeline& t_real = run.timeline;
  const Timeline t_ideal = engine.Run(ideal, device);
  // For the breakdown: without DP-side collectives, without pipeline transfers too, serialized.
  Timeline t_no_dp, t_no_dp_pp, t_serial;
  const bool breakdown = !options.figures_only;
  if (breakdown) {
    std::vector<OpCost> no_dp = real, no_dp_pp = real;
    for (size_t i = 0; i < n; ++i) {
      const Op& op = s.ops()[i];
      if (IsDpSide(op)) no_dp[i] = no_dp_pp[i] = OpCost{};
      if (op.group == Group::kPp) no_dp_pp[i] = OpCost{};
    }
    t_no_dp = engine.Run(no_dp, device);
    t_no_dp_pp = engine.Run(no_dp_pp, device);
    // Nothing overlapped: each stage's passes, sends and DP-side collectives one at a time in
    // issue order on its compute stream, each at its time alone (a pass at the sum of its ops'),
    // so that a stage waits for its own communication as for its compute; a receive still only
    // waits for its send (queued behind the compute, it could wait for itself).
    Schedule one_stream;
    one_stream.Reserve(n);
    for (size_t i = 0; i < n; ++i) {
      Op op = s.ops()[i];
      if (op.stream != Stream::kPpRecv) op.stream = Stream::kCompute;
      one_stream.Add(op, s.deps(s.ops()[i]));
      if (IsDpSide(op)) serial[i] = real[i];
    }
    t_serial = Engine(one_stream).Run(serial, device);
  }
  const Timeline& r_no_dp = breakdown ? t_no_dp : t_real;
  const Timeline& r_no_dp_pp = breakdown ? t_no_dp_pp : t_real;
  const Timeline& r_serial = breakdown ? t_serial : t_real;
  for (const Timeline* t : {&t_real, &t_ideal, &r_no_dp, &r_no_dp_pp, &r_serial})
    if (!std::isfinite(t->end_us())) return Error("iteration schedule deadlocked");

  // Per stage: finish, end of its last pass, busy time, DP-side time, optimizer.
  struct StageFigures {
    double finish = 0, pass_end_real = 0, pass_end_no_dp = 0, pass_end_free = 0, serial_end = 0;
    double busy = 0, ideal_busy = 0, dp_comm = 0, optimizer = 0, ideal_finish = 0, ideal_gemm = 0;
  };
  std::vector<StageFigures> st(pp);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = s.ops()[i];
    StageFigures& f = st[op.stage];
    f.finish = std::max(f.finish, t_real.ops[i].end_us);
    f.ideal_finish = std::max(f.ideal_finish, t_ideal.ops[i].end_us);
    f.serial_end = std::max(f.serial_end, r_serial.ops[i].end_us);
    if (op.kind == OpKind::kPass) {
      f.pass_end_real = std::max(f.pass_end_real, t_real.ops[i].end_us);
      f.pass_end_no_dp = std::max(f.pass_end_no_dp, r_no_dp.ops[i].end_us);
      f.pass_end_free = std::max(f.pass_end_free, r_no_dp_pp.ops[i].end_us);
      f.busy += real[i].alone_us;
      f.ideal_busy += ideal[i].alone_us;
      f.ideal_gemm += Piece(indexes[op.pass].ideal[op.func == OpFunc::kBackwardPass], op).gemm_us *
                      passes[op.pass].gemm_share;
    }
    if (IsDpSide(op)) f.dp_comm += real[i].alone_us;
    // The tied embedding's sync sits on the last stage, and the first stage's optimizer waits
    // for it as well.
    if (op.group == Group::kEmbedding && op.stage != 0) st[0].dp_comm += real[i].alone_us;
    if (op.kind == OpKind::kOptimizer) f.optimizer += real[i].alone_us;
  }
  const int critical = run.critical;
  const double iteration_us = st[critical].finish;
  double ideal_us = 0, serial_us = 0, ideal_gemm_us = 0;
  for (const StageFigures& f : st) {
    if (f.ideal_finish > ideal_us) ideal_gemm_us = f.ideal_gemm;
    ideal_us = std::max(ideal_us, f.ideal_finish);
    serial_us = std::max(serial_us, breakdown ? f.serial_end : f.serial_end + f.dp_comm);
  }

  Prediction p;
  IterationBreakdown& b = p.breakdown;
  const StageFigures& c = st[critical];
  b.critical_stage = critical;
  b.exposed_tp_ms = (c.busy - c.ideal_busy) * kUsToMs;
  b.optimizer_ms = c.optimizer * kUsToMs;
  if (pp > 1) {  // (with one stage the passes run back to back: no bubble)
    b.bubble_ms = std::max(0.0, c.pass_end_free - c.busy) * kUsToMs;
    b.exposed_pp_ms = std::max(0.0, c.pass_end_no_dp - c.pass_end_free) * kUsToMs;
  }
  b.exposed_dp_ms = std::max(0.0, c.finish - c.pass_end_no_dp - c.optimizer) * kUsToMs;
  // Whatever is left is compute, so that the parts add up to the iteration.
  b.compute_ms = iteration_us * kUsToMs - b.exposed_tp_ms - b.bubble_ms - b.exposed_pp_ms -
                 b.optimizer_ms - b.exposed_dp_ms;

  // Stage 0's busy time by op class: each of its passes' ops (contended within the pass), every
  // chunk's own, as the passes ran. (Before the representative pass takes its schedule.)
  if (breakdown) {
    std::vector<std::array<double, kOpClassCount>> pass_busy(it.passes.size());
    for (size_t k = 0; k < it.passes.size(); ++k) {
      const Schedule& schedule = *lowered_passes.schedules[k];
      for (size_t j = 0; j < schedule.size(); ++j) {
        const OpTime& t = passes[k].real.ops[j];
        pass_busy[k][static_cast<int>(ClassOf(schedule.ops()[j]))] += t.end_us - t.start_us;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const Op& op = s.ops()[i];
      if (!CountsPassOnce(op, it)) continue;
      for (int c = 0; c < kOpClassCount; ++c) p.busy_ms[c] += pass_busy[op.pass][c] * kUsToMs;
    }
  }

  // The representative micro-batch: stage 0's first chunk, forward and backward together.
  if (breakdown) {
    const ChunkShape& chunk = it.virtual_stages[0];
    const PassSpec whole{chunk, true, true};
    auto found = std::find(it.passes.begin(), it.passes.end(), whole);
    if (found != it.passes.end()) {
      PassSim& only = passes[found - it.passes.begin()];
      // (The engines are done with it.)
      p.schedule = std::move(*lowered_passes.schedules[found - it.passes.begin()]);
      p.timeline = std::move(only.real);
      p.ideal_timeline = std::move(only.ideal);
    } else {
      Result<Schedule> schedule =
          LowerStage(plan, LowerOptions{chunk.layers, chunk.embedding, chunk.head, true, true,
                                        chunk.windowed_layers});
      if (!schedule.ok()) return schedule.error();
      p.schedule = std::move(schedule).value();
      CostOptions ideal_options = options;
      ideal_options.tp_comm_free = true;
      p.timeline = Simulate(p.schedule, model.CostAll(p.schedule), device);
      p.ideal_timeline =
          Simulate(p.schedule, CostModel(plan, ideal_options).CostAll(p.schedule), device);
    }
  }
  // TP and CP communication of stage 0: each of its passes' (whole, uncontended), once per
  // micro-batch.
  for (size_t i = 0; i < n; ++i) {
    const Op& op = s.ops()[i];
    if (!CountsPassOnce(op, it)) continue;
    p.tp_comm_ms += passes[op.pass].tp_comm_us * kUsToMs;
    p.cp_comm_ms += passes[op.pass].cp_comm_us * kUsToMs;
  }
  p.gemm_duty = run.gemm_duty;
  p.tensor_clock = options.tensor_clock;
  p.ideal_gemm_ms = ideal_gemm_us * kUsToMs;
  p.ideal_clock = options.tensor_clock;
  p.dp_comm_ms = st[0].dp_comm * kUsToMs;
  p.serial_ms = serial_us * kUsToMs;
  if (breakdown) {
    p.iteration = it.schedule;
    p.iteration_timeline = t_real;
  }

  PlanFigures& f = p.figures;
  // The attention FLOPs its kernels compute: within the window where the plan prices it.
  const AttentionCount counted =
      plan.prices_window() ? AttentionCount::kCausalWindow : AttentionCount::kCausal;
  const double model_flops_per_token = TrainingFlopsPerToken(plan.model, plan.seq_len, counted);
  f.iteration_ms = iteration_us * kUsToMs;
  // Never past the iteration (the same ops with the TP collectives on top): summed in another
  // order, the two can differ in their last bit.
  f.ideal_ms = std::min(ideal_us, iteration_us) * kUsToMs;
  f.exposed_comm_ms = f.iteration_ms - f.ideal_ms;
  f.hidden_comm_fraction = HiddenFraction(f.exposed_comm_ms, p.tp_comm_ms);
  const double seconds = f.iteration_ms * 1e-3;
  const double tokens = static_cast<double>(plan.global_batch) * plan.seq_len;
  f.tokens_per_s = tokens / seconds;
  f.tflops_per_gpu = model_flops_per_token * tokens / plan.cluster.total_gpus() / seconds / 1e12;
  double peak = plan.cluster.node.gpu.peak(plan.precision);
  if (peak <= 0) peak = plan.cluster.node.gpu.peak(Dtype::kBf16);
  f.mfu = f.tflops_per_gpu / peak;
  p.mfu_full_attention =
      f.mfu * TrainingFlopsPerToken(plan.model, plan.seq_len) / model_flops_per_token;
  f.memory_gib_per_gpu = EstimateMemory(plan).total_bytes() / (1 << 30);
  return p;
}

}  // namespace

}  // namespace domino::sim
