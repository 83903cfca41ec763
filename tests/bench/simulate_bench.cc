// Benchmarks of the simulator: `build/tests/bench/simulate_bench`.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "planner/lower.h"
#include "sim/allocator.h"
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

// Whole iterations of 3D-parallel plans: every distinct pass simulated once, then the whole
// iteration (every stage's passes, pipeline transfers, DP buckets, optimizer) in the engine.
Plan ThreeD(const char* model, const char* cluster, int pp, int dp, int v, int micro_batches,
            int seq_len) {
  Plan plan;
  plan.model_ref = model;
  plan.cluster_ref = cluster;
  plan.tp = 8;
  plan.pp = pp;
  plan.dp = dp;
  plan.virtual_stages = v;
  plan.seq_len = seq_len;
  plan.micro_batch = 1;
  plan.global_batch = micro_batches * dp;
  plan.sequence_parallel = true;
  plan.distributed_optimizer = true;
  plan.recompute = Recompute::kSelective;
  if (!ResolvePlan(plan).ok()) std::abort();
  return plan;
}

// GPT-3 175B on 1,024 A100s: tp 8, pp 8, dp 16, interleaved (3 chunks), 128 micro-batches.
void BM_PredictGpt3_175B_1024Gpus(benchmark::State& state) {
  Plan plan = ThreeD("gpt3-175b", "dgx-a100:128", 8, 16, 3, 128, 2048);
  for (auto _ : state) {
    Result<sim::Prediction> p = sim::Predict(plan);
    if (!p.ok()) std::abort();
    benchmark::DoNotOptimize(p->figures.iteration_ms);
  }
}
BENCHMARK(BM_PredictGpt3_175B_1024Gpus)->Unit(benchmark::kMillisecond);

// Llama 3 405B on 16,384 H100s: tp 8, pp 16 (uneven: 7, 8 x 14, 7 layers), dp 128, 16
// micro-batches of 8192 tokens.
void BM_PredictLlama3_405B_16384Gpus(benchmark::State& state) {
  Plan plan = ThreeD("llama3-405b", "dgx-h100:2048", 16, 128, 1, 16, 8192);
  for (auto _ : state) {
    Result<sim::Prediction> p = sim::Predict(plan);
    if (!p.ok()) std::abort();
    benchmark::DoNotOptimize(p->figures.iteration_ms);
  }
}
BENCHMARK(BM_PredictLlama3_405B_16384Gpus)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace domino

// As the domino command runs predictions (tools/main.cc): the allocator keeps what it frees.
int main(int argc, char** argv) {
  domino::sim::KeepFreedMemory();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
