// Benchmarks of the simulator: `build/tests/bench/simulate_bench`.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "planner/lower.h"
#include "sim/engine.h"
#include "sim/predict.h"

namespace domino {
namespace {

// GPT-3 13B, 40 layers, forward and backward, row split p = 4, on one DGX-H100 (tp 8).
Plan Gpt3_13B(int row_split) {
  Plan plan;
  plan.model_ref = "gpt3-13b";
  plan.cluster_ref = "dgx-h100:1";
  plan.tp = 8;
  plan.seq_len = 1024;
  plan.micro_batch = 16;
  plan.global_batch = 16;
  plan.row_split = row_split;
  plan.scope = row_split > 1 ? OverlapScope::kInterLayer : OverlapScope::kNone;
  if (!ResolvePlan(plan).ok()) std::abort();
  return plan;
}

// One full prediction: lowering, costing, and two simulations (the plan and its ideal).
void BM_PredictGpt3_13B(benchmark::State& state) {
  Plan plan = Gpt3_13B(static_cast<int>(state.range(0)));
  size_t ops = 0;
  for (auto _ : state) {
    Result<sim::Prediction> p = sim::Predict(plan);
    benchmark::DoNotOptimize(p.ok());
    ops = p->schedule.size();
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(BM_PredictGpt3_13B)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond);

// The discrete-event engine alone on a lowered, costed schedule.
void BM_EngineGpt3_13B(benchmark::State& state) {
  Plan plan = Gpt3_13B(static_cast<int>(state.range(0)));
  Schedule schedule = std::move(Lower(plan)).value();
  sim::CostModel model(plan, {});
  std::vector<sim::OpCost> costs = model.CostAll(schedule);
  for (auto _ : state) {
    Timeline timeline = sim::Simulate(schedule, costs, model.device());
    benchmark::DoNotOptimize(timeline.ops.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(schedule.size()));
}
BENCHMARK(BM_EngineGpt3_13B)->Arg(4)->Unit(benchmark::kMicrosecond);

// Lowering alone.
void BM_LowerGpt3_13B(benchmark::State& state) {
  Plan plan = Gpt3_13B(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    Result<Schedule> schedule = Lower(plan);
    benchmark::DoNotOptimize(schedule.ok());
  }
}
BENCHMARK(BM_LowerGpt3_13B)->Arg(4)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace domino

BENCHMARK_MAIN();
