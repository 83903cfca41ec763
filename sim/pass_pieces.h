#ifndef DOMINO_SIM_PASS_PIECES_H_
#define DOMINO_SIM_PASS_PIECES_H_

// How the iteration prices its passes from their simulations (sim/predict.cc): a simulated pass
// indexed by layer, so that a piece of it (a pass cut at layers, Op::layer_begin / layer_end) is
// priced in O(1), and the pass as one op of the iteration. Internal to the predictor.
#include <vector>

#include "planner/schedule.h"
#include "sim/engine.h"
#include "sim/op_cost.h"

namespace domino::sim {

// A pass, one op in the iteration, loses SMs to a collective beside it as its GEMMs would: its
// SM-bound time is spread over this many waves (many, so one lost SM costs its share, not a wave).
constexpr double kPassWaves = 64;

// Where the layers of one part (forward or backward) of a simulated pass end, and what each layer's
// piece holds, so that a piece of the pass (Op::layer_begin/layer_end) is priced in O(1).
struct PartIndex {
  int layers = 1;  // the layers it tells apart: the chunk's, or 1 where no op cuts the pass
  double start_us = 0, end_us = 0;
  // By layer: when the layer's work is done (forward: every layer up to it; backward: every layer
  // from it up), and the piece's SM-bound time and uncontended op sum (prefix sums, layers + 1).
  std::vector<double> done_us, gemm_prefix, serial_prefix;
};

struct PassIndex {
  PartIndex real[2], ideal[2];  // [forward, backward]; a separate pass uses only its own part
};

struct PieceTimes {
  double duration_us = 0, gemm_us = 0, serial_us = 0;
};

// Over a pass's SM-bound time (GEMMs and attention): `stall`, what its GEMMs launched beside a
// collective that holds SMs stall for their late CTAs (OpCost::tail_share), per unit of it over
// a collective that spans many of them; `gemm`, its GEMMs' part, what draws the power the clock
// is held down for (PowerClock).
struct PassShares {
  double stall = 0, gemm = 0;
};

// Whether `op` runs in a pass's backward part (backward or recomputed forward).
inline bool InBackwardPart(const Op& op) { return op.tags.phase != Phase::kForward; }

// A part of a simulated pass: the whole schedule, or (a combined pass) its forward up to the
// first backward-part op's start and its backward from there, as the GPU runs them back to back.
// `layers` is the chunk's count of layers to tell apart (1: the pass is never cut).
PartIndex IndexPart(const Schedule& s, const Timeline& t, const std::vector<OpCost>& costs,
                    bool backward, bool combined, int layers);

// The time of the piece of `part` that `op` (a kPass, whole or Op::layer_begin..layer_end) runs:
// its duration, its SM-bound time and its ops' uncontended sum.
PieceTimes Piece(const PartIndex& part, const Op& op);

// The shares PassShares describes, of a pass schedule priced by `costs`.
PassShares SharesOf(const Schedule& s, const std::vector<OpCost>& costs);

// A pass (or a piece of one) as one op of the iteration: `duration_us` long, `gemm_us` of it
// SM-bound over `sms` SMs in kPassWaves waves, the rest as launch time.
OpCost PassCost(double duration_us, double gemm_us, int sms, double stall_share = 0);

}  // namespace domino::sim

#endif  // DOMINO_SIM_PASS_PIECES_H_
