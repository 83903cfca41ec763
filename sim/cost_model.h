#ifndef DOMINO_SIM_COST_MODEL_H_
#define DOMINO_SIM_COST_MODEL_H_

#include <optional>
#include <vector>

#include "hardware/collective_cost.h"
#include "hardware/hardware_spec.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/schedule.h"
#include "sim/gemm_model.h"
#include "sim/groups.h"
#include "sim/op_cost.h"

namespace domino::sim {

using ::domino::AttentionKernel;

// Options of a prediction. The software's choices come from the plan's stack (StackSpec) and the
// plan's overrides of it (its attention kernel, loss, gradient type, launch mode); cuda_graphs
// below replaces the plan's launch mode for what-if studies.
struct CostOptions {
  // Launch overhead per kernel: graph_launch_us instead of kernel_launch_us. Default: the stack's.
  std::optional<bool> cuda_graphs;
  bool tp_comm_free = false;  // the ideal: TP collectives cost nothing
  // Predict only the figures (the planner's search): no breakdown, serialized bound,
  // representative timeline or iteration in the result, and the lowered iteration of the last
  // plan with the same shape (degrees, batch, model, stack; any slicing) is reused.
  bool figures_only = false;
  // Measured op times (`domino calibrate`); ops it lacks fall back to the models, which take the
  // profile's measured GEMM throughput and HBM bandwidth when it has them. Not owned.
  const HardwareProfile* profile = nullptr;
  // The tensor cores' rate as a fraction of the GPU's (its clock held down by the power limit,
  // Predict's PowerClock): every GEMM and attention main loop runs this much slower. 1: none.
  double tensor_clock = 1.0;
};

// CostModel turns each op of a Schedule into an OpCost for the engine.
//
// GEMM: the GEMM model (sim/gemm_model.h): tiles in waves over the SMs, stream-K for long inner
// dimensions, A, B and C through HBM; its fixed time adds to the launch.
// Attention (flash): one tile per 128 query rows per head; causal masking halves the work the
// kernel does (model FLOPs count it halved too: TrainingFlopsPerToken kCausal); backward does 2.5x
// the forward's work at the same efficiency (it recomputes the scores). Unfused attention (the
// stack's choice): the QK^T and PV products (four in backward) as batched GEMMs over the whole
// s x s, then the score passes through HBM the stack's kernels make (softmax fused or not,
// dropout, a soft cap; fp32 scores with P recomputed in the backward, StackSpec::fp32_scores),
// added to the GEMM time rather than overlapped with it. Elementwise: bytes over achieved HBM
// bandwidth. Collectives: EstimateCollective on the fabric the group spans (TP, DP, the pipeline
// neighbours, the embedding pair, the CP ring's neighbours); a decomposed all-gather part on copy
// engines (Plan::copy_engine, TP inside one node) is peer copies: kernel_launch_us + the rows it
// lacks over NVLink at nvlink.GBps_per_direction * nvlink.efficiency, no CTAs, twice its bytes
// through HBM (reduce-scatter parts stay SM-driven NCCL collectives); a decomposed all-gather's
// first part holds the rank's own rows (TE's ring starts from the local shard), so only the others'
// rows of it move. A pipeline send moves its bytes to the neighbour; its recv costs nothing (it
// ends when the send does). A CP ring step (kCpSendRecv) is a send/recv of its bytes between CP
// neighbours (CpRing): it sends one way while receiving the other, each direction at the link's
// per-direction bandwidth; all_gather's and a2a's collectives span the CP group (CpGroup),
// a2a+p2p's all-to-alls its a2a group (CpA2aGroup). A
// calibrated profile's collectives are the TP group's. Optimizer step: its bytes over achieved HBM
// bandwidth, one launch. Every compute op pays one kernel launch.
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
  bool OnCopyEngine(const Op& op) const;
  double MovedFraction(const Op& op) const;  // of a collective's bytes: see cost_model.cc
  // The GEMM model's kernel at the ceiling of `dtype` (sim/gemm_model.h), and its cost with the
  // launch.
  GemmEstimate GemmEstimateOf(double m, double n, double k, Dtype dtype) const;
  OpCost GemmCost(const GemmEstimate& g) const;
  // A GEMM op as the training frameworks run it: the LM head in 16-bit under fp8, and an fp8
  // GEMM's activation operand quantized first (its time added to the op's fixed time).
  OpCost FrameworkGemmCost(const Op& op) const;
  OpCost AttentionCost(const Op& op) const;

  const GpuSpec& gpu_;
  const NodeSpec& node_;
  CostOptions options_;
  StackSpec plan_stack_;
  bool dropout_ = false;                             // Plan::applies_dropout
  SoftmaxKernels softmax_ = SoftmaxKernels::kFused;  // Plan::softmax_kernels
  // Unfused attention's scores soft-capped by kernels of their own (ModelSpec::attention_softcap
  // without StackSpec::fused_attention_softcap).
  bool capped_scores_ = false;
  Fp8Cast fp8_cast_ = Fp8Cast::kNormAndActivation;  // Plan::fp8_casts
  bool copy_engine_parts_ = false;  // decomposed collective parts take no SMs (Plan::copy_engine)
  CommGroup tp_group_, dp_group_, pp_pair_, embedding_pair_, cp_ring_, cp_group_, cp_a2a_group_,
      stage_group_;
  CommGroup GroupOf(const Op& op) const;
  Dtype gemm_dtype_ = Dtype::kBf16;       // the plan's precision, where the GPU has it
  Dtype attention_dtype_ = Dtype::kBf16;  // 16-bit even under fp8
  double gemm_tflops_ = 0;                // GEMM main-loop ceiling (GemmCeilingTflops)
  double attention_tflops_ = 0;           // dense peak of the attention's dtype
  double hbm_GBps_ = 0;                   // achieved
  double launch_us_ = 0;
  double eager_launch_us_ = 0;  // a kernel launched from the host (copy-engine copies are)
  // GemmEstimateOf's kernels by shape and dtype, with their contention (GemmContentionOf): a
  // pass repeats each layer's few shapes, and the kernel choice prices a dozen candidates. A model
  // is used by one thread at a time.
  struct GemmKey {
    double m, n, k;
    Dtype dtype;
    bool operator==(const GemmKey&) const = default;
  };
  struct GemmMemo {
    GemmKey key;
    GemmEstimate estimate;
    GemmContention contention;
  };
  const GemmMemo& GemmMemoOf(double m, double n, double k, Dtype dtype) const;
  mutable std::vector<GemmMemo> gemm_memo_;
  AttentionKernel attention_ = AttentionKernel::kFlash;
  Fp8Recipe fp8_recipe_ = Fp8Recipe::kDelayed;
  // The share of a norm-fed GEMM's rows the norm writes on this rank: 1 / tp under sequence
  // parallelism (the GEMM gathers the rest), else all of them.
  double norm_rows_share_ = 1.0;
  // Bytes per weight element of the pass that adds a weight-gradient GEMM's output into the
  // accumulated gradient (StackSpec::fused_wgrad_accumulation false), averaged over the
  // iteration's contributions; 0 when the GEMM adds it itself.
  double wgrad_accumulate_bytes_ = 0;
  // The same for the MLP's weight gradients of a row-split layer, per slice's GEMM
  // (StackSpec::sliced_mlp_fused_wgrad_accumulation false).
  double sliced_mlp_accumulate_bytes_ = 0;
};

}  // namespace domino::sim

#endif  // DOMINO_SIM_COST_MODEL_H_
