#ifndef DOMINO_PLANNER_LOWER_H_
#define DOMINO_PLANNER_LOWER_H_

#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino {

// Lower turns a resolved Plan into the Schedule of one micro-batch's forward and backward pass
// through the layer stack of one pipeline stage (model.layers / pp layers) on one TP rank, with
// the plan's row split p, column split q, overlap scope and sequence parallelism. The ideal
// (TP collectives free) is the same schedule with zero-cost collectives, chosen by the cost model,
// so prediction and ideal differ only in communication. Fails only on a plan that breaks
// CheckPlanRules.
Result<Schedule> Lower(const Plan& plan);

}  // namespace domino

#endif  // DOMINO_PLANNER_LOWER_H_
