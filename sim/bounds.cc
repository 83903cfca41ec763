// The lower bounds of an iteration that let the planner prune without simulating it
// (IdealLowerBoundMs, LowerBoundMs: sim/predict.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "models/model_counts.h"
#include "planner/iteration.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "sim/engine.h"
#include "sim/predict.h"

namespace domino::sim {
namespace {

constexpr double kUsToMs = 1e-3;

// The bound of IdealLowerBoundMs from passes priced by `costs`.
Result<double> PassesBoundMs(const Plan& plan, const CostModel& ideal) {
  const int pp = plan.pp, v = plan.virtual_stages, m = plan.micro_batches();
  const std::vector<int> layers = ChunkLayers(plan), windowed = ChunkWindowedLayers(plan);
  const int total = pp * v;
  if (total == 1) {  // one pass, forward and backward back to back, as Predict runs it
    Result<Schedule> s =
        LowerStage(plan, LowerOptions{layers[0], true, true, true, true, windowed[0]});
    if (!s.ok()) return s.error();
    return m * Simulate(*s, ideal.CostAll(*s), ideal.device()).end_us() * kUsToMs;
  }
  // Ideal forward and backward of each virtual stage, each distinct pass simulated once.
  std::vector<double> fwd(total), bwd(total);
  std::map<std::tuple<int, bool, bool, bool, int>, double> done;
  auto pass_us = [&](int vs, bool forward) -> Result<double> {
    const bool first = vs == 0, last = vs == total - 1;
    const auto key = std::make_tuple(layers[vs], first, last, forward, windowed[vs]);
    if (auto it = done.find(key); it != done.end()) return it->second;
    Result<Schedule> s =
        LowerStage(plan, LowerOptions{layers[vs], first, last, forward, !forward, windowed[vs]});
    if (!s.ok()) return s.error();
    const double us = Simulate(*s, ideal.CostAll(*s), ideal.device()).end_us();
    done.emplace(key, us);
    return us;
  };
  for (int vs = 0; vs < total; ++vs) {
    Result<double> f = pass_us(vs, true), b = pass_us(vs, false);
    if (!f.ok()) return f.error();
    if (!b.ok()) return b.error();
    fwd[vs] = *f, bwd[vs] = *b;
  }
  double bound = 0, chain = 0;  // chain: the first stages' forward and backward of one micro-batch
  for (int s = 0; s < pp; ++s) {
    double busy = 0;
    for (int c = 0; c < v; ++c) busy += m * (fwd[c * pp + s] + bwd[c * pp + s]);
    bound = std::max(bound, chain + busy);
    chain += fwd[s] + bwd[s];
  }
  return bound * kUsToMs;
}

// FSDP: every micro-batch gathers each layer of a stage twice (forward and backward) and
// reduce-scatters it once, one after another on the stage's dp-comm stream, so that stream's busy
// time bounds the iteration from below whatever the slicing (which moves no parameters). Only the
// layers' parameters are counted (the ends' add to it), each collective priced alone (contention
// only slows it).
double FsdpStreamBoundMs(const Plan& plan, const CostModel& costs) {
  if (!plan.fsdp || plan.dp_cp() == 1) return 0;
  const double layer = static_cast<double>(CountParameters(plan.model).per_layer) / plan.tp;
  auto collective_us = [&](CollectiveOp collective, double bytes) {
    Op op;
    op.kind = OpKind::kCollective;
    op.stream = Stream::kDpComm;
    op.group = Group::kDp;
    op.collective = collective;
    op.bytes = bytes;
    return costs.Cost(op).alone_us;
  };
  const double per_layer_us = 2 * collective_us(CollectiveOp::kAllGather, layer * 2) +
                              collective_us(CollectiveOp::kReduceScatter, layer * GradBytes(plan));
  const std::vector<int> layers = ChunkLayers(plan);
  int most = 0;  // the most layers one stage holds
  for (int s = 0; s < plan.pp; ++s) {
    int held = 0;
    for (int c = 0; c < plan.virtual_stages; ++c) held += layers[c * plan.pp + s];
    most = std::max(most, held);
  }
  return plan.micro_batches() * most * per_layer_us * kUsToMs;
}

Status CheckRules(const Plan& plan) {
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  return Status::Ok();
}

}  // namespace

Result<double> IdealLowerBoundMs(const Plan& plan, const CostOptions& options) {
  DOMINO_RETURN_IF_ERROR(CheckRules(plan));
  CostOptions ideal_options = options;
  ideal_options.tp_comm_free = true;
  const CostModel costs(plan, ideal_options);
  Result<double> passes = PassesBoundMs(plan, costs);
  if (!passes.ok()) return passes.error();
  return std::max(*passes, FsdpStreamBoundMs(plan, costs));
}

Result<double> LowerBoundMs(const Plan& plan, const CostOptions& options) {
  DOMINO_RETURN_IF_ERROR(CheckRules(plan));
  const CostModel costs(plan, options);
  Result<double> passes = PassesBoundMs(plan, costs);
  if (!passes.ok()) return passes.error();
  return std::max(*passes, FsdpStreamBoundMs(plan, costs));
}

}  // namespace domino::sim
