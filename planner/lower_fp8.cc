// fp8 scaling's amax reductions as a lowering emits them (StackSpec::fp8_amax_reduction): over TP
// before a sequence-parallel all-gather under current scaling, and over the stage's GPUs after a
// chunk's passes under delayed scaling.

#include <utility>

#include "planner/lowering.h"

namespace domino::lowering {

// The amax all-reduce of fp8 scaling over `group` (StackSpec::fp8_amax_reduction): blocking,
// so it goes on the compute stream, after `deps`.
int32_t Lowering::AmaxAllReduce(Group group, const OpTags& tags, double bytes, Deps deps) {
  Op reduce;
  reduce.kind = OpKind::kCollective;
  reduce.func = OpFunc::kAmaxAllReduce;
  reduce.collective = CollectiveOp::kAllReduce;
  reduce.group = group;
  reduce.tags = tags;
  reduce.bytes = bytes;
  return Compute(reduce, std::move(deps), {}, {});
}

// fp8 current scaling with sequence parallelism: a tensor scaled before it is all-gathered over
// TP, the input of QKV and fc1 forward and the output gradient of proj and fc2 backward, takes the
// maximum of its amax over the TP group first (Transformer Engine 2.x sets the TP group as the
// amax reduction group of a column-parallel linear's input quantizer and a row-parallel one's
// output-gradient quantizer under sequence parallelism: pytorch/module/linear.py and
// layernorm_linear.py, set_quantizer_amax_reduction_group). One fp32 after `producer`; returns
// it (or `producer`).
int32_t Lowering::TpAmaxReduction(const OpTags& tags, int32_t producer) {
  if (plan_.precision != Dtype::kFp8 || plan_.fp8_scaling() != Fp8Recipe::kCurrent ||
      !plan_.stack.fp8_amax_reduction || plan_.tp == 1)
    return producer;
  return AmaxAllReduce(Group::kTp, tags, 4, {producer});
}

// fp8 delayed scaling (current scaling keeps no history): the amaxes of the tensors the chunk's
// layers scaled, reduced over the stage's GPUs, and the update of their histories and scales.
// Forward, the fp8 meta of each of a layer's four GEMMs holds three (input, weight, output);
// backward two (output gradient, input gradient): fp32 each. The update reads and writes each
// amax and writes the scale and its inverse.
void Lowering::AmaxReduction(Phase phase) {
  if (plan_.precision != Dtype::kFp8 || plan_.fp8_scaling() != Fp8Recipe::kDelayed ||
      !plan_.stack.fp8_amax_reduction || layers_ == 0)
    return;
  const double tensors = 4.0 * layers_ * (phase == Phase::kForward ? 3 : 2);
  OpTags tags = Tags(phase == Phase::kForward ? layers_ - 1 : 0, 0, -1, phase);
  tags.row_slice = -1;  // the chunk's, every slice's
  AmaxAllReduce(Group::kStage, tags, tensors * 4, {});
  Elementwise(OpFunc::kAmaxUpdate, tags, tensors * 4 * 4, {}, {}, {});
}

}  // namespace domino::lowering
