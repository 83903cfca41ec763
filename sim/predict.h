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

// Where one iteration's time goes on the critical pipeline stage (the one that finishes last),
// in milliseconds; the parts add up to the iteration time.
struct IterationBreakdown {
  int critical_stage = 0;
  double compute_ms = 0;     // its chunks' forward and backward with TP collectives free
  double exposed_tp_ms = 0;  // what its TP collectives add to that
  double bubble_ms = 0;      // idle in the pipeline schedule itself (with free transfers)
  double exposed_pp_ms = 0;  // idle added by pipeline transfers
  double exposed_dp_ms = 0;  // DP gradient reduction (and parameter all-gather) after backward
  double optimizer_ms = 0;   // Adam step
};

// Prediction is the simulator's answer for one plan (DESIGN.md "Definitions"). The plan is lowered
// to its whole Iteration (planner/iteration.h); each distinct pass (a model chunk's forward,
// backward, or both) is simulated once, real and with free TP collectives, and its time (or a
// piece's) becomes the cost of every pass op naming it; the engine then runs every stage's
// passes, pipeline transfers, DP buckets, embedding sync, parameter gathers and optimizer step
// together, so they contend for SMs and HBM like every other op.
struct Prediction {
  Schedule schedule;            // stage 0's first chunk, one micro-batch, forward and backward
  Timeline timeline;            // its predicted timeline
  Timeline ideal_timeline;      // the same with TP collectives free
  Schedule iteration;           // the whole iteration (Iteration::schedule), every stage
  Timeline iteration_timeline;  // its predicted timeline
  PlanFigures figures;
  IterationBreakdown breakdown;
  double tp_comm_ms = 0;  // uncontended TP collective time per iteration on stage 0
  // Uncontended context-parallel communication per iteration on stage 0: ring transfers,
  // all_gather's gathers and reduce-scatters, a2a's all-to-alls.
  double cp_comm_ms = 0;
  double dp_comm_ms = 0;  // uncontended DP collective time per iteration (stage 0)
  double serial_ms = 0;   // nothing overlapped: every op, transfer and collective in turn
  // MFU with attention counted unmasked, as Megatron-LM, NeMo and the DGX Cloud recipes count it
  // (figures.mfu counts causal attention as half; see README "MFU convention").
  double mfu_full_attention = 0;
  // Per iteration on stage 0, the time ops of each class ran (contended durations summed).
  std::array<double, kOpClassCount> busy_ms{};
  // The power limit (PowerClock): the critical stage's GEMM time over the iteration, the tensor
  // cores' clock this prediction ran them at, and the GEMM share that set it (the prediction at
  // the full clock's; 0 when the clock was not lowered).
  double gemm_duty = 0;
  double tensor_clock = 1;
  double gemm_duty_unheld = 0;
  // The ideal (figures.ideal_ms) holds a clock of its own: with its TP collectives free, its GEMMs
  // fill more of its time, so the power limit lowers the clock further (HoldIdealClock). Its
  // critical stage's GEMM time at that clock, and the clock (tensor_clock when no lower).
  double ideal_gemm_ms = 0;
  double ideal_clock = 0;
};

// The tensor cores' clock, as a fraction of the full one, of a GPU whose GEMMs fill gemm_duty of
// an iteration: 1 - power_duty_slope * max(0, gemm_duty - power_duty_knee), the GPU lowering its
// clock to hold its power limit (GpuSpec::power_duty_knee).
double PowerClock(const GpuSpec& gpu, double gemm_duty);

// Moves a prediction's ideal to the clock its own GEMM share holds under the power limit: the
// ideal's GEMM share at `base_clock` (the run's clock before the power limit, CostOptions'
// tensor_clock) gives PowerClock, and the ideal's GEMM time stretches from tensor_clock to it.
// The ideal stays at most the iteration; exposed TP comm and the hidden fraction follow it.
// Without it, a slow link would lower the ideal: its exposed comm idles the GPU, whose clock the
// ideal took.
void HoldIdealClock(const GpuSpec& gpu, double base_clock, Prediction* p);

// Lowers, costs and simulates a resolved plan. Where its GEMMs fill more of the iteration than
// the GPU's power_duty_knee, it is simulated again with every GEMM and attention main loop at
// PowerClock of that share (once: the second simulation's share is not fed back).
Result<Prediction> Predict(const Plan& plan, const CostOptions& options = {});

// A plan's transformer layers run in a loop on one GPU, as `validate`'s layer rows time them: the
// forward and backward of one micro-batch through them (Prediction::schedule without the
// embedding, final norm, LM head, loss and collectives), at the clock the power limit holds for
// their own GEMM share (a loop of layers runs no optimizer step and none of the model's ends,
// whose share the iteration's clock would count).
struct LayerLoop {
  double ms = 0;
  std::array<double, kOpClassCount> class_ms{};  // by OpClass
  double tensor_clock = 1;
  double gemm_duty = 0;  // the layers' GEMM share at the full clock, which set tensor_clock
};
Result<LayerLoop> PredictLayerLoop(const Plan& plan);

// A lower bound of Predict's ideal_ms for the plan and for every slicing of it (slicing only adds
// work), from its passes alone, without the iteration: each stage runs its m micro-batches'
// passes one after another; its first forward waits for the first micro-batch's forward through
// the stages before it, and after its last backward the earlier stages still run theirs. With
// equal stages this is 1F1B's (m + p - 1)(F + B); with one stage, m (F + B) of the pass that runs
// forward and backward back to back. With FSDP, at least the dp-comm stream's work: each
// micro-batch's two gathers and one reduce-scatter of every layer of the most loaded stage.
Result<double> IdealLowerBoundMs(const Plan& plan, const CostOptions& options = {});

// The same bound from the plan's passes with their TP collectives priced: a lower bound of
// Predict's iteration_ms for this plan alone (not for its other slicings, which may hide more of
// their TP time). In the iteration each pass lasts at least its simulation (pipeline and DP
// traffic only slow it), waits for its input, and the optimizer step and exposed DP reduction
// come after.
Result<double> LowerBoundMs(const Plan& plan, const CostOptions& options = {});

}  // namespace domino::sim

#endif  // DOMINO_SIM_PREDICT_H_
