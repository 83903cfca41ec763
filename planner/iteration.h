#ifndef DOMINO_PLANNER_ITERATION_H_
#define DOMINO_PLANNER_ITERATION_H_

#include <compare>
#include <vector>

#include "models/base/result.h"
#include "models/model_counts.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino {

// One step of a pipeline rank's schedule: a micro-batch's forward or backward pass through its
// model chunk `chunk` (virtual stage chunk * stages + stage, Megatron's interleaving).
struct PipelineStep {
  int micro_batch = 0;
  int chunk = 0;
  bool backward = false;
};

// The per-rank step order of Megatron-LM's schedules: 1F1B warms up with min(m, stages - s - 1)
// forwards, then alternates one forward and one backward, then drains the backwards; the
// interleaved schedule (chunks > 1, micro_batches a multiple of stages) warms up with
// (stages - s - 1) * 2 + (chunks - 1) * stages forwards and walks chunks in groups of `stages`
// micro-batches.
std::vector<PipelineStep> PipelineOrder(int stage, int stages, int chunks, int micro_batches);

// A model chunk (virtual stage): its layers, with the embedding in front (the first) and the
// final norm, LM head and loss behind (the last); `windowed_layers` of them priced with the
// model's sliding window (ChunkWindowedLayers), so that chunks of one shape share a pass.
struct ChunkShape {
  int layers = 0;
  bool embedding = false;
  bool head = false;
  int windowed_layers = 0;
  auto operator<=>(const ChunkShape&) const = default;
};

// A pass schedule of an Iteration: LowerStage of one chunk, forward, backward or (with one
// pipeline stage) both back to back, so that the last forward collectives may overlap the first
// backward work as they do on the GPU.
struct PassSpec {
  ChunkShape chunk;
  bool forward = true;
  bool backward = true;
  auto operator<=>(const PassSpec&) const = default;
};

// Iteration is the whole of one training iteration: every pipeline stage's representative rank
// (TP and DP ranks are symmetric), each with its compute, tp-comm, dp-comm and pp-comm streams.
//
// The compute stream runs the stage's passes in PipelineOrder: one kPass op per micro-batch and
// chunk, forward (kForwardPass) or backward (kBackwardPass), naming its pass schedule (Op::pass).
// Identical micro-batches share one pass schedule, so the iteration stays O(micro-batches) ops
// while each pass keeps every layer op (simulated once per distinct pass). A pass whose layers
// release DP buckets (each chunk's last backward) or wait for gathered parameters (the first
// forward, with the distributed optimizer's overlapped gather) is cut into one piece per layer
// (Op::layer_begin / layer_end).
//
// The pp-comm stream sends each forward's activation to the next virtual stage and each
// backward's input gradient to the previous one (kPpSend: `bytes`), and posts the matching kPpRecv
// just before the pass that needs it; a recv ends when its send has. The dp-comm stream reduces
// one gradient bucket per layer (all-reduce, or reduce-scatter with the distributed optimizer) as
// the last backward releases it (after the last pass when the stack does not overlap them),
// all-reduces the tied embedding's gradient between the first and last stage, and all-gathers the
// updated 16-bit parameters (distributed optimizer) after the step, or at the start, under the
// first forward, when the stack overlaps the gather with the next iteration. The optimizer step
// (kOptimizerStep: Adam, 32 bytes per parameter of the rank's shard) ends the compute stream.
//
// Ops are in an issue order valid for every stream: each op's dependencies precede it, so a
// stream's ops in schedule order are its issue order.
struct Iteration {
  int stages = 1;
  int chunks = 1;  // model chunks per stage (virtual_stages)
  int micro_batches = 1;
  std::vector<ChunkShape> virtual_stages;  // by virtual stage
  std::vector<PassSpec> passes;            // Op::pass of kPass ops indexes these
  std::vector<Schedule> pass_schedules;    // LowerStage of each pass (empty unless lowered)
  Schedule schedule;                       // every stage's ops (Op::stage)
};

struct IterationOptions {
  bool lower_passes = true;  // fill pass_schedules (Predict lowers what it simulates itself)
};

// Lowers a resolved plan to its whole iteration. Fails only on a plan that breaks
// CheckPlanRules.
Result<Iteration> LowerIteration(const Plan& plan, const IterationOptions& options = {});

// Bytes per element of the DP gradients: fp32, or the 16-bit parameters' type where the plan's
// stack reduces in it (StackSpec::grad_reduce).
double GradBytes(const Plan& plan);
// Bytes of Adam state per parameter: master weights, m and v, 4 bytes each in fp32, 2 in bf16
// (Plan::optimizer_dtype).
double AdamStateBytes(const Plan& plan);
// Bytes the optimizer step moves per parameter of the shard it updates: Adam reads the 16-bit
// parameter (2), the gradient (GradBytes) and its state (AdamStateBytes) and writes the
// parameter and its state.
double AdamBytesPerParam(const Plan& plan);
// Parameters of the word embedding's second copy that the last pipeline stage holds when the
// embeddings are tied and pp > 1 (Megatron's shared_embedding), whole (not yet divided by tp);
// 0 otherwise.
int64_t TiedEmbeddingCopy(const Plan& plan, const ParameterCounts& counts);

}  // namespace domino

#endif  // DOMINO_PLANNER_ITERATION_H_
