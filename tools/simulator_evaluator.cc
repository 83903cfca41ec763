#include "tools/simulator_evaluator.h"

#include <cstdint>

#include "sim/predict.h"

namespace domino::cli {
namespace {

// Passes per iteration (micro-batches x chunks x stages) from which a plan's own lower bound is
// worth computing before its iteration is simulated (gpt3-13b's and gpt-530b's searches: below
// it the bound cost about what it saved).
constexpr int64_t kBoundMinPasses = 32;

}  // namespace

Result<PlanFigures> SimulatorEvaluator::Evaluate(const Plan& plan) {
  sim::CostOptions options;
  options.figures_only = true;  // the ranking needs nothing else
  Result<sim::Prediction> p = sim::Predict(plan, options);
  if (!p.ok()) return p.error();
  return p->figures;
}

double SimulatorEvaluator::LowerBoundMs(const Plan& plan) {
  Result<double> bound = sim::IdealLowerBoundMs(plan);
  return bound.ok() ? *bound : 0;
}

double SimulatorEvaluator::PlanLowerBoundMs(const Plan& plan) {
  // The bound simulates the plan's passes; an iteration of few passes costs little more, so it
  // pays only for long iterations (kBoundMinPasses and up).
  if (static_cast<int64_t>(plan.micro_batches()) * plan.virtual_stages * plan.pp < kBoundMinPasses)
    return 0;
  Result<double> bound = sim::LowerBoundMs(plan);
  return bound.ok() ? *bound : 0;
}

}  // namespace domino::cli
