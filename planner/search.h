#ifndef DOMINO_PLANNER_SEARCH_H_
#define DOMINO_PLANNER_SEARCH_H_

#include <functional>
#include <string>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"

namespace domino {

// Evaluator scores a candidate plan. The planner never links the simulator: tools/ wires this
// interface to it, and tests can pass a fake.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual Result<PlanFigures> Evaluate(const Plan& plan) = 0;
};

// What the search may vary. Degrees not pinned are enumerated over the divisors that satisfy
// CheckPlanRules; pinned ones (> 0) are fixed.
struct SearchSpace {
  // pp > 1 is not searched yet; dp defaults to 1 because data-parallel gradient communication
  // is not simulated yet, which would flatter every dp > 1.
  int tp = 0, pp = 1, dp = 1;
  std::vector<int> row_splits = {1, 2, 4, 8};
  std::vector<int> col_splits = {1, 2, 4};
  bool try_sequence_parallel = true;
};

struct Candidate {
  Plan plan;
  PlanFigures figures;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // best first, by tokens/s, ties broken by the plan's YAML
  int evaluated = 0;
  int rejected = 0;  // candidates that broke a plan rule
  std::vector<std::string> rejections;  // "tp=3: tp (3) must divide the model's heads (64)"
};

// Enumerates plans around `base` (its model, cluster, batch and memory options) and ranks them by
// predicted tokens/s. Deterministic. `progress`, when set, is called after each evaluation with
// (done, total).
Result<SearchResult> SearchPlans(const Plan& base, const SearchSpace& space, Evaluator& evaluator,
                                 const std::function<void(int, int)>& progress = {});

}  // namespace domino

#endif  // DOMINO_PLANNER_SEARCH_H_
