#ifndef DOMINO_TOOLS_EMULATION_H_
#define DOMINO_TOOLS_EMULATION_H_

#include <vector>

#include "exec/cuda_backend.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/schedule.h"

namespace domino::cli {

// What each TP collective of the schedule costs on the plan's cluster when alone (the simulator's
// cost model): the emulated collectives of `execute --comm emulate` hold its CTAs and make its HBM
// traffic for that long, so the compute beside them feels the same contention. Indexed by op id;
// compute ops get zeros.
std::vector<exec::EmulatedCollective> EmulatedCollectives(const Plan& plan,
                                                          const Schedule& schedule,
                                                          bool cuda_graphs);

// The simulator's time for compute op `op` (priced with `profile`) while a collective holding
// `ctas` SMs and streaming `hbm_GBps` of HBM traffic runs the whole time beside it: what
// `calibrate --backend cuda` measures as a contention sample, predicted by the engine.
double PredictedBesideUs(const Plan& plan, const HardwareProfile& profile, const Op& op, int ctas,
                         double hbm_GBps);

// The largest TP collective of the schedule as EmulatedCollectives prices it (zeros without one).
exec::EmulatedCollective LargestCollective(const Plan& plan, const Schedule& schedule);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_EMULATION_H_
