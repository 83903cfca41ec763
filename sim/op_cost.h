#ifndef DOMINO_SIM_OP_COST_H_
#define DOMINO_SIM_OP_COST_H_

#include <cmath>

namespace domino::sim {

// OpCost is what the engine needs to time one op alone and beside others. A compute op's body is
// a roofline of two parts: compute, `ceil(tiles / sms) * wave_us` over the SMs it gets (tile and
// wave quantization: fewer SMs mean more waves), and memory, `hbm_bytes / hbm_GBps`; the launch
// overhead adds to either. What a tile writes after its main loop (`tile_epilogue_bytes` each: its
// share of a GEMM's C) overlaps the next wave's main loops, but the last wave's tiles have nothing
// left to hide theirs behind: it follows the roofline. A collective holds `ctas` SMs and moves
// `hbm_bytes` through HBM while it runs for `alone_us`. Times in microseconds, bandwidths in GB/s
// (= 1e3 bytes/us).
struct OpCost {
  double alone_us = 0;   // duration when nothing else runs
  double launch_us = 0;  // compute ops: not subject to contention
  double tiles = 0;      // compute ops: output tiles (0: memory-bound only)
  double wave_us = 0;    // compute ops: time of one wave of tiles on all SMs at full efficiency
  double hbm_bytes = 0;  // HBM traffic of the op
  double tile_epilogue_bytes = 0;  // compute ops: of hbm_bytes, what a tile writes after its loop
  int ctas = 0;                    // collectives: SMs held while running
  bool is_comm = false;
  // Compute ops beside collectives (below); beside the other flags, so that OpCost takes 80
  // bytes: the engine walks arrays of them.
  bool blocks_comm = false;
  // Compute ops beside collectives that hold SMs (sim/engine.h). A GEMM launched while one does
  // ends as late as its CTAs that start late: it stalls up to `tail_share` of its body (one CTA's
  // share of it; 1 for one persistent CTA per SM) while the collective lasts. A collective
  // launched while a GEMM with `blocks_comm` runs (its CTAs keep every SM to its end) waits for
  // its end. A pass (a run of such GEMMs) stalls instead `stall_share` of its body for every unit
  // of body it runs beside one.
  double tail_share = 0;
  double stall_share = 0;
  // A persistent GEMM's CTAs (one per SM at most; 0: not persistent). Only those beyond the SMs
  // the collective leaves wait, none if they all fit: the others run their tiles meanwhile, and
  // the late ones start when the collective frees its SMs or the others finish, whichever comes
  // first, and then take `tail_share` of the body.
  double persistent_ctas = 0;

  // Compute body on `sms` SMs with `hbm_GBps` of HBM bandwidth, excluding launch.
  double BodyUs(int sms, double hbm_GBps) const {
    const double waves = tiles > 0 ? std::ceil(tiles / sms) : 0.0;
    const double last_epilogue = LastEpilogueBytes(sms, waves);
    const double us_per_byte = 1 / (hbm_GBps * 1e3);
    const double compute = waves * wave_us;
    const double memory = hbm_bytes > 0 ? (hbm_bytes - last_epilogue) * us_per_byte : 0.0;
    return (compute > memory ? compute : memory) +
           (last_epilogue > 0 ? last_epilogue * us_per_byte : 0.0);
  }

  // What the last of `waves` waves on `sms` SMs writes after its main loops: no later wave hides
  // it.
  double LastEpilogueBytes(int sms, double waves) const {
    return waves > 0 ? tile_epilogue_bytes * (tiles - (waves - 1) * sms) : 0.0;
  }
};

// The device resources contention is computed against.
struct DeviceResources {
  int sms = 132;
  double hbm_GBps = 3000;  // achieved, not datasheet
};

}  // namespace domino::sim

#endif  // DOMINO_SIM_OP_COST_H_
