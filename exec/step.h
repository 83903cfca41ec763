#ifndef DOMINO_EXEC_STEP_H_
#define DOMINO_EXEC_STEP_H_

#include <string>

#include "exec/communicator.h"
#include "exec/execute.h"
#include "models/base/result.h"
#include "planner/iteration.h"
#include "planner/plan.h"

namespace domino::exec {

// Where a world rank sits in a plan's layout: TP innermost, then CP, then DP and pipeline
// (tp-cp-dp-pp, as Megatron-LM places them) or pipeline and DP (tp-cp-pp-dp), as the simulator
// places them.
struct RankCoords {
  int tp = 0, pp = 0, dp = 0, cp = 0;
  bool operator==(const RankCoords&) const = default;
};
RankCoords CoordsOf(const Plan& plan, int world_rank);
int WorldRank(const Plan& plan, const RankCoords& coords);
// "tp 2 x pp 2 x dp 2" (with cp when it is above 1).
std::string RanksText(const Plan& plan);

// The plan of the single-rank reference of a whole training step: tp = cp = pp = dp = 1, no
// slicing, no sequence parallelism, no distributed optimizer or recompute, every layer, the same
// global batch (so the same micro-batches, run one after another).
Plan StepReferencePlan(const Plan& plan);

// Runs options.steps training iterations of `iteration` (LowerIteration of the plan) on the CPU
// backend, or on the CUDA backend (compute on the GPU; with CommMode::kMpi every collective and
// transfer through the host communicators, with kNccl the pipeline transfers and the buckets on
// the device: exec/step_device.h), this process being rank world.rank() of tp x cp x pp x dp
// ranks (placed by CoordsOf), and walks its pipeline stage's ops of the iteration's schedule in
// issue order:
//  - a pass (or a piece of one) runs the forward or backward ops of its model chunk's schedule
//    (LowerStage of the chunk, forward and backward, every TP op and collective) for its
//    micro-batch; each micro-batch keeps its own activations until its backward;
//  - kPpSend / kPpRecv move the chunk's output (forward) or its input's gradient (backward) to or
//    from the neighbour stage; a recv whose send is not in the schedule receives nothing;
//  - a DP bucket (kDpAllReduce, or kDpReduceScatter with the distributed optimizer) sums its
//    layer's weight gradients over the micro-batches, scales them by 1 / (micro-batches x dp x
//    cp) (the loss is the mean over the global batch's tokens), all-reduces sequence-parallel
//    norm gradients over TP (partial sums) and reduces over DP x CP; gradients no bucket reduced
//    are summed and scaled alone at the optimizer step;
//  - kEmbeddingAllReduce sums the tied word embedding's gradient of the first and last stage;
//  - kOptimizerStep runs Adam (options.adam) on the fp32 master weights (with the distributed
//    optimizer, the rank's DP x CP shard of each bucket) and kDpAllGather gathers the updated
//    weights;
//  - with FSDP (plan.fsdp) kFsdpAllGather gathers one layer's master weights (with the first
//    layer the embedding's, with the last the head's) into every micro-batch's copy before each
//    forward and backward piece that uses them, and kFsdpReduceScatter scales one micro-batch's
//    gradients of the layer, reduce-scatters them over DP x CP and adds them to the rank's shard
//    (the step starts the shards at zero; no bucket op runs);
//  - with context parallelism (cp > 1) each rank holds its CP rank's tokens of every sequence
//    (CpPosition) and the attention core runs as the plan's cp_communication(), op by op as the
//    schedule has it (exec/cp_attention.h): the ring's blocks and transfers, all_gather's
//    gather, chunks and reduce-scatter, a2a's all-to-alls around the attention over 1/cp of the
//    heads, a2a+p2p's within its groups around the ring between them.
// Micro-batch g = dp_rank x micro-batches + i of a step reads tokens [g x tokens, (g + 1) x
// tokens) of the seed's token stream; every step reads the same batch.
//
// With options.check, rank 0 also runs StepReferencePlan(plan) the same way on one rank and
// compares the loss of every step, and after the last step every weight's gradient and every
// updated weight (gathered over TP and, with the distributed optimizer, DP x CP), from each
// stage's first TP, CP and DP rank; every rank learns the verdict. The result's timeline is this
// rank's last step (its stage's ops; the others' stay zero), its loss the last step's mean loss.
Result<ExecuteResult> ExecuteIteration(const Plan& plan, const Iteration& iteration,
                                       Communicator& world, const ExecuteOptions& options);

// The same, for the plan's own iteration.
Result<ExecuteResult> ExecuteStep(const Plan& plan, Communicator& world,
                                  const ExecuteOptions& options);

// Host bytes the CPU backend holds per rank for a whole step: every micro-batch's tensors of the
// rank's model chunks.
double StepBytesPerRank(const Plan& plan);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_STEP_H_
