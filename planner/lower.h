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

// What LowerStage emits: a model chunk of `layers` layers (-1: model.layers / pp), with the
// vocab-parallel embedding in front (the first virtual stage) and/or the final norm, LM head and
// cross-entropy loss behind (the last), its forward pass, its backward pass, or both. The
// plan's recompute adds forward ops (phase recompute) to the backward pass: the attention core
// (selective) or each whole layer (full).
// `windowed_layers` of the chunk's layers run the model's sliding window (Plan::WindowedLayer):
// the first ones, which prices a chunk whose windowed layers lie elsewhere (Gemma 2's every
// other one) within a layer's overlap of its own order.
struct LowerOptions {
  int layers = -1;
  bool embedding = false;
  bool head = false;
  bool forward = true;
  bool backward = true;
  int windowed_layers = 0;
};
Result<Schedule> LowerStage(const Plan& plan, const LowerOptions& options);

// The role of the top layer's MLP output that a stack without the head hands on with its mid (the
// next stage's input is their sum): fc2 after its collective (with sequence parallelism `sp`, the
// reduce-scattered shard), or with post-norms (ModelSpec::post_norms) its normalized copy.
TensorRole StackMlpOutputRole(int top, bool sp, bool post_norms);

}  // namespace domino

#endif  // DOMINO_PLANNER_LOWER_H_
