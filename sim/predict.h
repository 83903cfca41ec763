#ifndef DOMINO_SIM_PREDICT_H_
#define DOMINO_SIM_PREDICT_H_

#include <array>
#include <string_view>

#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "sim/cost_model.h"

namespace domino::sim {

// Classes of ops for breakdowns.
enum class OpClass { kGemm, kAttention, kElementwise, kTpComm, kOtherComm };
inline constexpr int kOpClassCount = 5;
std::string_view OpClassName(OpClass op_class);  // "gemm", "attention", "elementwise", ...
OpClass ClassOf(const Op& op);

// Prediction is the simulator's answer for one plan: the schedule it ran, the predicted timeline
// and its ideal twin (TP collectives free), and the plan's figures (DESIGN.md "Definitions").
// Times cover one iteration: the micro-batches of one pipeline stage run one after another, each
// a forward and backward pass through the stage's layer stack. Embedding, LM head, optimizer and
// pipeline/data-parallel communication are not simulated yet.
struct Prediction {
  Schedule schedule;
  Timeline timeline;        // one micro-batch
  Timeline ideal_timeline;  // one micro-batch, TP collectives free
  PlanFigures figures;
  double tp_comm_ms = 0;     // uncontended TP collective time per iteration
  double serial_ms = 0;      // every op back to back, uncontended, per iteration
  // Per iteration, the time ops of each class ran (contended durations summed).
  std::array<double, kOpClassCount> busy_ms{};
};

// Lowers, costs and simulates a resolved plan.
Result<Prediction> Predict(const Plan& plan, const CostOptions& options = {});

}  // namespace domino::sim

#endif  // DOMINO_SIM_PREDICT_H_
