#ifndef DOMINO_TOOLS_SIMULATOR_EVALUATOR_H_
#define DOMINO_TOOLS_SIMULATOR_EVALUATOR_H_

#include "planner/search.h"

namespace domino::cli {

// SimulatorEvaluator scores a search's candidates with the simulator (sim::Predict, figures
// only) and prunes them with its lower bounds: a configuration's ideal (sim::IdealLowerBoundMs)
// and, for iterations of many passes, a plan's own (sim::LowerBoundMs). Stateless: safe to call
// from several threads at once.
class SimulatorEvaluator : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override;
  double LowerBoundMs(const Plan& plan) override;
  double PlanLowerBoundMs(const Plan& plan) override;
};

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_SIMULATOR_EVALUATOR_H_
