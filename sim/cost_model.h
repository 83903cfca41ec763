#ifndef DOMINO_SIM_COST_MODEL_H_
#define DOMINO_SIM_COST_MODEL_H_

#include <vector>

#include "hardware/collective_cost.h"
#include "hardware/hardware_spec.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/schedule.h"
#include "sim/op_cost.h"

namespace domino::sim {

enum class AttentionKernel { kFlash, kUnfused };

// Options of the cost model that are choices of the training software, not of the hardware.
struct CostOptions {
  bool cuda_graphs = false;  // launch overhead per kernel: graph_launch_us instead of kernel_launch_us
  AttentionKernel attention = AttentionKernel::kFlash;
  bool tp_comm_free = false;  // the ideal: TP collectives cost nothing
  // Measured op times (`domino calibrate`); ops it lacks fall back to the models, which take the
  // profile's measured GEMM throughput and HBM bandwidth when it has them. Not owned.
  const HardwareProfile* profile = nullptr;
};

// Where a plan's TP group sits on the cluster (Megatron placement: TP ranks innermost, inside a
// node while tp <= GPUs per node).
CommGroup TpGroup(const Plan& plan);

// CostModel turns each op of a Schedule into an OpCost for the engine.
//
// GEMM: output tiles of gemm_tile_m x gemm_tile_n; one wave of tiles on all SMs takes
// 2 * tile_m * tile_n * k FLOPs per SM at (peak / SMs) * max_gemm_efficiency * k / (k + 64) (short
// inner dimensions lose efficiency); the time is ceil(tiles / SMs) waves, so a narrow slice that
// leaves SMs idle in its last wave pays for it. The memory side of the roofline is the bytes of
// A, B and C over achieved HBM bandwidth.
// Attention (flash): one tile per 128 query rows per head; causal masking halves the work the
// kernel does (model FLOPs still count it whole); backward does 2.5x the forward's work at the same
// efficiency (it recomputes the scores). Unfused attention: two batched GEMMs at GEMM efficiency,
// and the s x s scores written and read twice through HBM.
// Elementwise: bytes over achieved HBM bandwidth.
// Collectives: EstimateCollective on the fabric the group spans.
// Every compute op pays one kernel launch.
class CostModel {
 public:
  CostModel(const Plan& plan, const CostOptions& options);

  OpCost Cost(const Op& op) const;
  std::vector<OpCost> CostAll(const Schedule& schedule) const;
  DeviceResources device() const;

  // Uncontended time of the TP collectives of a schedule (for the hidden fraction).
  double TpCommUs(const Schedule& schedule) const;

 private:
  OpCost ModelCost(const Op& op) const;  // without the profile
  OpCost GemmCost(double m, double n, double k) const;
  OpCost AttentionCost(const Op& op) const;

  const GpuSpec& gpu_;
  const NodeSpec& node_;
  CostOptions options_;
  CommGroup tp_group_;
  double peak_tflops_ = 0;
  double attention_tflops_ = 0;
  double hbm_GBps_ = 0;  // achieved
  double launch_us_ = 0;
};

}  // namespace domino::sim

#endif  // DOMINO_SIM_COST_MODEL_H_
