#ifndef DOMINO_SIM_PIPELINE_H_
#define DOMINO_SIM_PIPELINE_H_

#include <vector>

#include "models/base/result.h"

namespace domino::sim {

// Time of one micro-batch's forward and backward through one model chunk (virtual stage) on one
// pipeline rank, from the layer-stack simulation of that chunk.
struct ChunkTimes {
  double fwd_us = 0;
  double bwd_us = 0;
};

// A pipeline of `stages` ranks, each holding `chunks` model chunks (virtual stages; chunk c of
// rank s is virtual stage c * stages + s, Megatron's interleaving), running `micro_batches`
// micro-batches under 1F1B (chunks = 1) or interleaved 1F1B (chunks > 1, micro_batches a
// multiple of stages).
struct PipelineSpec {
  int stages = 1;
  int chunks = 1;
  int micro_batches = 1;
  std::vector<ChunkTimes> times;  // times[s * chunks + c]
  double p2p_us = 0;              // one activation (or gradient) transfer between virtual stages
};

struct PipelineOp {
  int micro_batch = 0;
  int chunk = 0;
  bool backward = false;
  double start_us = 0, end_us = 0;
};

struct PipelineResult {
  std::vector<std::vector<PipelineOp>> stages;  // per rank, in execution order
  // Per rank and chunk (index s * chunks + c): when that chunk's last backward starts and ends,
  // after which its gradients are final (data-parallel reduction may finish them).
  std::vector<double> last_backward_start_us, last_backward_end_us;
  std::vector<double> stage_end_us;  // per rank: end of its last op
  double end_us = 0;                 // the last rank's end
};

// The per-rank op order of Megatron-LM's schedules: 1F1B warms up with min(m, stages - s - 1)
// forwards, then alternates one forward and one backward, then drains the backwards; the
// interleaved schedule warms up with (stages - s - 1) * 2 + (chunks - 1) * stages forwards and
// walks chunks in groups of `stages` micro-batches.
std::vector<PipelineOp> PipelineOrder(int stage, int stages, int chunks, int micro_batches);

// Runs the pipeline event by event: every rank runs its ops in PipelineOrder, each when its
// input has arrived (the previous virtual stage's forward, or the next one's backward, plus
// p2p_us), so bubbles come out of the simulation rather than a formula. With equal chunk times
// and p2p_us = 0, 1F1B takes (m + stages - 1) (fwd + bwd). Fails on an impossible spec.
Result<PipelineResult> SimulatePipeline(const PipelineSpec& spec);

}  // namespace domino::sim

#endif  // DOMINO_SIM_PIPELINE_H_
