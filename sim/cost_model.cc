#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>

#include "models/model_counts.h"
#include "planner/iteration.h"
#include "sim/gemm_model.h"

namespace domino::sim {
namespace {

Collective ToCollective(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return Collective::kAllReduce;
    case CollectiveOp::kReduceScatter:
      return Collective::kReduceScatter;
    case CollectiveOp::kAllGather:
      return Collective::kAllGather;
    case CollectiveOp::kAllToAll:
      return Collective::kAllToAll;
    case CollectiveOp::kNone:
      break;
  }
  return Collective::kSendRecv;
}

}  // namespace

CostModel::CostModel(const Plan& plan, const CostOptions& options)
    : gpu_(plan.cluster.node.gpu),
      node_(plan.cluster.node),
      options_(options),
      plan_stack_(plan.stack),
      dropout_(plan.applies_dropout()),
      softmax_(plan.softmax_kernels()),
      fp8_cast_(plan.fp8_casts()),
      copy_engine_parts_(plan.copy_engine_parts()),
      tp_group_(TpGroup(plan)),
      dp_group_(DpGroup(plan)),
      pp_pair_(PpPair(plan)),
      embedding_pair_(EmbeddingPair(plan)),
      cp_ring_(CpRing(plan)),
      cp_group_(CpGroup(plan)),
      cp_a2a_group_(CpA2aGroup(plan)),
      stage_group_(StageGroup(plan)) {
  // A precision the GPU lacks runs in the first 16- or 32-bit type it has (fp32's peak is always
  // above 0), never at a zero peak, which would make every op last forever. Plans that pass
  // CheckPlanRules never get here with one.
  auto runnable = [&](Dtype dtype) {
    for (Dtype fallback : {Dtype::kBf16, Dtype::kFp16, Dtype::kTf32, Dtype::kFp32})
      if (gpu_.peak(dtype) <= 0) dtype = fallback;
    return dtype;
  };
  const Dtype dtype = runnable(plan.precision);
  gemm_dtype_ = dtype;
  // Attention runs in 16-bit even when the GEMMs use fp8.
  attention_dtype_ = runnable(dtype == Dtype::kFp8 ? Dtype::kBf16 : dtype);
  gemm_tflops_ = GemmCeilingTflops(gpu_, dtype) * options.tensor_clock;
  attention_tflops_ = gpu_.peak(attention_dtype_) * options.tensor_clock;
  hbm_GBps_ = gpu_.hbm_GBps * gpu_.hbm_efficiency;
  // A calibrated device's measured launch overheads stand in for the GPU's figures.
  const HardwareProfile* profile = options.profile;
  eager_launch_us_ = profile != nullptr && profile->kernel_launch_us > 0 ? profile->kernel_launch_us
                                                                         : gpu_.kernel_launch_us;
  const double graph_launch_us = profile != nullptr && profile->graph_launch_us > 0
                                     ? profile->graph_launch_us
                                     : gpu_.graph_launch_us;
  launch_us_ = options.cuda_graphs.value_or(plan.launches_from_graphs()) ? graph_launch_us
                                                                         : eager_launch_us_;
  attention_ = plan.attention_kernel();
  capped_scores_ = plan.model.attention_softcap > 0 && !plan.stack.fused_attention_softcap;
  fp8_recipe_ = plan.fp8_scaling();
  norm_rows_share_ = plan.sequence_parallel && plan.tp > 1 ? 1.0 / plan.tp : 1.0;
  if (!plan.stack.fused_wgrad_accumulation) {
    // 16-bit gradients accumulate in param.grad: PyTorch's AccumulateGrad stores the first of an
    // iteration's micro-batches and row slices and adds each later one in place (reads both,
    // writes one). fp32 ones go to a main_grad buffer zeroed each iteration, to which Megatron-LM's
    // hook adds every contribution (reads fp32 and the 16-bit gradient, writes fp32): Megatron-LM
    // 6985e58, megatron/model/distributed.py _make_param_hook.
    const double contributions = static_cast<double>(plan.micro_batches()) * plan.row_split;
    const double e = DtypeBytes(attention_dtype_);
    wgrad_accumulate_bytes_ =
        GradBytes(plan) == 2 ? 3 * e * (contributions - 1) / contributions : 4 + e + 4;
  }
  if (plan.row_split >= 2 && !plan.stack.sliced_mlp_fused_wgrad_accumulation) {
    // DeepSpeed-Domino's sliced MLP (deepspeed/runtime/domino/transformer.py, torch.matmul by
    // weight_c and weight_r, one product per slice): autograd sums the p slices' gradients of a
    // weight (p - 1 adds, each reading two and writing one), AccumulateGrad keeps the sum, and the
    // local DDP's hook adds it into main_grad, zeroed each iteration, every micro-batch (reads
    // both, writes main_grad: DeepSpeedExamples training/DeepSpeed-Domino/domino/modules/
    // distributed.py; main_grad in the parameters' type with fp16, in fp32 with bf16,
    // arguments.py). Per slice's GEMM: the average of the two.
    const double p = plan.row_split;
    const double e = DtypeBytes(attention_dtype_);
    const double g = GradBytes(plan);
    sliced_mlp_accumulate_bytes_ = ((p - 1) * 3 * e + g + e + g) / p;
  }
  // A calibrated device: its measured GEMM throughput is what the best shapes achieve, and its
  // measured copy bandwidth is the achieved HBM bandwidth. (A short measurement: the power
  // limit's clock still applies.)
  if (options.profile != nullptr && options.profile->gemm_tflops > 0) {
    const double measured = options.profile->gemm_tflops * options.tensor_clock;
    attention_tflops_ *= measured / gemm_tflops_;
    gemm_tflops_ = measured;
  }
  if (options.profile != nullptr && options.profile->hbm_GBps > 0)
    hbm_GBps_ = options.profile->hbm_GBps;
}

DeviceResources CostModel::device() const { return DeviceResources{gpu_.sms, hbm_GBps_}; }

const CostModel::GemmMemo& CostModel::GemmMemoOf(double m, double n, double k, Dtype dtype) const {
  const GemmKey key{m, n, k, dtype};
  // The latest shapes first: a pass's ops come layer by layer.
  for (auto it = gemm_memo_.rbegin(); it != gemm_memo_.rend(); ++it)
    if (it->key == key) return *it;
  const double tflops =
      dtype == gemm_dtype_ ? gemm_tflops_ : attention_tflops_ * gpu_.max_gemm_efficiency;
  const GemmEstimate g = EstimateGemm(gpu_, tflops, m, n, k, DtypeBytes(dtype), 2);
  gemm_memo_.push_back(GemmMemo{key, g, GemmContentionOf(gpu_, g, m, n, k)});
  return gemm_memo_.back();
}

GemmEstimate CostModel::GemmEstimateOf(double m, double n, double k, Dtype dtype) const {
  return GemmMemoOf(m, n, k, dtype).estimate;
}

OpCost CostModel::GemmCost(const GemmEstimate& g) const {
  OpCost cost = g.cost;
  cost.launch_us = launch_us_ + g.fixed_us;
  return cost;
}

OpCost CostModel::FrameworkGemmCost(const Op& op) const {
  const bool lm_head = op.func == OpFunc::kLmHead || op.func == OpFunc::kLmHeadGradInput ||
                       op.func == OpFunc::kLmHeadGradWeight;
  // fp8 training keeps the output layer in 16-bit: Megatron-Core builds it as its own
  // ColumnParallelLinear, outside Transformer Engine's fp8 autocast, and torchtitan's float8
  // conversion skips `output` by default.
  const Dtype dtype = lm_head ? attention_dtype_ : gemm_dtype_;
  const double m = static_cast<double>(op.m), n = static_cast<double>(op.n),
               k = static_cast<double>(op.k);
  const GemmMemo& g = GemmMemoOf(m, n, k, dtype);
  OpCost cost = GemmCost(g.estimate);
  // A piece of a decomposed collective's GEMM runs on the SMs its collective leaves (Transformer
  // Engine's set_sm_margin, which NeMo's userbuffers configs set for the split reduce-scatters;
  // the all-gather parts go on copy engines and hold no SM): no CTA of it waits, and it lets
  // collectives in. The GEMMs under TE's bulk overlaps (set_sm_margin false) take every SM.
  if (op.tags.chunk < 0) g.contention.ApplyTo(cost);
  const bool wgrad = op.func == OpFunc::kQkvGradWeight || op.func == OpFunc::kProjGradWeight ||
                     op.func == OpFunc::kFc1GradWeight || op.func == OpFunc::kFc2GradWeight ||
                     op.func == OpFunc::kLmHeadGradWeight;
  const bool mlp_wgrad = op.func == OpFunc::kFc1GradWeight || op.func == OpFunc::kFc2GradWeight;
  const double accumulate_bytes = mlp_wgrad && sliced_mlp_accumulate_bytes_ > 0
                                      ? sliced_mlp_accumulate_bytes_
                                      : wgrad_accumulate_bytes_;
  if (wgrad && accumulate_bytes > 0) {
    // The weight's gradient (m x n) added into the accumulated one, a kernel after the GEMM.
    cost.launch_us += launch_us_ + static_cast<double>(op.m) * static_cast<double>(op.n) *
                                       accumulate_bytes / (hbm_GBps_ * 1e3);
  }
  if (dtype != Dtype::kFp8) return cost;
  // An fp8 GEMM's activation operand is quantized first (Transformer Engine's Linear: the input
  // quantizer before the forward GEMM, the grad-output quantizer before dgrad), into row-wise and
  // column-wise copies, the column-wise one for the weight gradient. A column chunk of dgrad
  // shares its chunk 0's quantized operand. What runs depends on the operand's producer and the
  // recipe (TE v1.9 layernorm_mlp.py; v2.8 csrc/extensions/normalization.cpp, activation.cpp,
  // quantizer.cpp):
  // - the QKV and FC1 inputs (a norm's output) and the FC2 input (the activation's), delayed
  //   scaling: the norm or activation writes the fp8 copy itself, a byte an element less than the
  //   16 bits its pass is priced with (under sequence parallelism the norm writes the rank's
  //   1 / tp of the rows the GEMM gathers), and a transpose reads it and writes the column-wise
  //   one: 2 bytes an element, less that byte;
  // - the same, current scaling: the norm or activation writes 16 bits and finds the amax, and a
  //   cast reads them and writes both copies: e + 2;
  // - the projection's input (attention's output) and every grad output: one cast that finds the
  //   amax as it goes (delayed), e + 2, or a pass for the amax first (current), 2e + 2;
  // - a QKV, FC1 or FC2 input its norm or activation writes in 16 bits (StackSpec::fp8_cast: the
  //   FC2 input under Megatron-Core, whose MLP runs its own bias-activation kernel before
  //   TERowParallelLinear; every one of them in a layer of te.LayerNorm and te.Linear): the same
  //   cast, and under sequence parallelism the linear casts the rank's rows before it gathers them
  //   (a byte each less than the cast writes) and transposes the gathered ones, 2 bytes an element
  //   (TE v1.9 linear.py: cast_to_fp8, gather_along_first_dim, fp8_transpose).
  const bool norm_fed = op.func == OpFunc::kQkv || op.func == OpFunc::kFc1;
  const bool fused_producer = (norm_fed && fp8_cast_ != Fp8Cast::kLinear) ||
                              (op.func == OpFunc::kFc2 && fp8_cast_ == Fp8Cast::kNormAndActivation);
  const bool forward = norm_fed || op.func == OpFunc::kFc2 || op.func == OpFunc::kProj;
  const bool dgrad = op.func == OpFunc::kQkvGradInput || op.func == OpFunc::kProjGradInput ||
                     op.func == OpFunc::kFc1GradInput || op.func == OpFunc::kFc2GradInput;
  if (!forward && !(dgrad && op.tags.col_chunk <= 0)) return cost;
  const double operand = static_cast<double>(op.m) * static_cast<double>(op.k);
  const double e = DtypeBytes(attention_dtype_);
  const bool current = fp8_recipe_ == Fp8Recipe::kCurrent;
  const double unwritten = norm_fed ? norm_rows_share_ : 1.0;
  const double cast = current ? 2 * e + 2 : e + 2;
  const bool cast_then_gathered = !fused_producer && norm_fed && norm_rows_share_ < 1;
  const double bytes_per_element = fused_producer       ? (current ? e + 2 : 2.0 - unwritten)
                                   : cast_then_gathered ? norm_rows_share_ * (cast - 1) + 2
                                                        : cast;
  // The amax pass of its own is one more kernel, and so is the transpose of gathered rows.
  const double launches = (current && !fused_producer ? 2 : 1) + (cast_then_gathered ? 1 : 0);
  cost.launch_us += launches * launch_us_ + operand * bytes_per_element / (hbm_GBps_ * 1e3);
  return cost;
}

OpCost CostModel::AttentionCost(const Op& op) const {
  const double s = static_cast<double>(op.seq_len);
  const double d = static_cast<double>(op.head_dim);
  const double batch_heads = static_cast<double>(op.sequences) * op.heads;
  const bool backward = op.tags.phase == Phase::kBackward;
  const double e = 2;  // attention runs in 16-bit
  OpCost cost;
  if (attention_ != AttentionKernel::kUnfused) {
    constexpr double kBlock = 128;
    cost.tiles = batch_heads * std::ceil(s / kBlock);
    // Each query block attends to s/2 keys on average under the causal mask (CausalKeys: fewer
    // with a sliding window), and takes as long again as the GPU's overhead keys would
    // (attention_overhead_keys; FlashAttention-2's own, flash2_overhead_keys, where the plan runs
    // it).
    // FlexAttention at FlashAttention-2's constants (AttentionKernel::kFlex).
    const bool flash2 =
        attention_ == AttentionKernel::kFlash2 || attention_ == AttentionKernel::kFlex;
    const double overhead_keys =
        flash2 ? (backward ? gpu_.flash2_backward_overhead_keys : gpu_.flash2_overhead_keys)
               : (backward ? gpu_.attention_backward_overhead_keys : gpu_.attention_overhead_keys);
    double work = (backward ? 2.5 : 1.0) * 4.0 * kBlock *
                  (CausalKeys(s, op.window, op.first_query) + overhead_keys) * d;
    const double efficiency =
        flash2 ? (backward ? gpu_.flash2_backward_efficiency : gpu_.flash2_efficiency)
               : (backward ? gpu_.attention_backward_efficiency : gpu_.attention_efficiency);
    cost.wave_us = work / (attention_tflops_ * 1e6 / gpu_.sms * efficiency);
    cost.hbm_bytes = op.bytes;
    cost.launch_us = launch_us_;
  } else {
    // QK^T and PV (backward: four products) as batched GEMMs over the whole s x s (the mask is
    // applied, not skipped), then the scores' passes through HBM, one kernel after another: the
    // parts add up, so the memory time rides on the waves. Passes over the s x s scores, in units
    // of one read or write: forward writes S, the softmax's kernels read and write it (one
    // kernel fused; scale, mask and softmax, three; scale and softmax without a mask, two),
    // dropout reads, writes and stores a 1-byte mask, PV reads P; backward writes dP, reads P for
    // dV, undoes dropout, reads P and dP and writes dS for the softmax (and reads and writes it
    // for the scale's own kernel: five), and reads dS for dQ and dK. A soft cap on the scores
    // as PyTorch kernels of its own (capped_scores_: the division, the tanh and the product, each
    // a read and a write) adds 6 forward, and 7 backward (the product's and the division's
    // gradients a read and a write each, the tanh's reads its output and the gradient).
    const StackSpec& stack = plan_stack_;
    const double cap_passes = capped_scores_ ? (backward ? 7 : 6) : 0;
    const double dropout = dropout_ ? 2.5 : 0;
    const bool fused = softmax_ == SoftmaxKernels::kFused;
    const double softmax_kernels =
        fused ? 1 : (softmax_ == SoftmaxKernels::kScaleMaskSoftmax ? 3 : 2);
    const double passes =
        backward ? 2 + dropout + (fused ? 3 : 5) + 2 : 1 + 2 * softmax_kernels + dropout + 1;
    double score_bytes = (passes + cap_passes) * e;
    double products = backward ? 4 : 2;
    if (stack.fp32_scores) {
      // The executor's kernels (exec/cuda_attention.cu), bytes per score. Forward: the QK^T GEMM
      // writes S in fp32 (4); the softmax reads the causal half for the maximum, reads and writes
      // it for the exponentials (2 + 4), reads it again and writes the whole row in fp32 and as
      // a 16-bit copy (2 + 6); PV reads that copy (2): 20. Backward: P again (18, one more
      // GEMM), dP written in fp32 (4), P's copy read for dV (2), the softmax backward reads P and
      // dP twice (16) and writes dS in fp32 and as a copy (6), dQ and dK read the copy (4): 50.
      score_bytes = (backward ? 50 : 20) + cap_passes * 4;
      products = backward ? 5 : 2;
    }
    OpCost gemm = GemmCost(GemmEstimateOf(s, s, d, attention_dtype_));
    const double gemm_us = std::ceil(batch_heads * gemm.tiles * products / gpu_.sms) * gemm.wave_us;
    const double scores_us = batch_heads * s * s * score_bytes / (hbm_GBps_ * 1e3);
    const double memory_us = static_cast<double>(op.bytes) / (hbm_GBps_ * 1e3);
    cost.tiles = batch_heads * gemm.tiles * products;
    cost.wave_us = gemm.wave_us * (gemm_us + scores_us + memory_us) / gemm_us;
    cost.launch_us = gemm.launch_us;  // the launch and the GEMMs' fixed time
  }
  return cost;
}

CommGroup CostModel::GroupOf(const Op& op) const {
  switch (op.group) {
    case Group::kDp:
      return dp_group_;
    case Group::kPp:
      return pp_pair_;
    case Group::kEmbedding:
      return embedding_pair_;
    case Group::kCp:  // a ring step's neighbours, or the whole group's collective
      return op.kind == OpKind::kSendRecv ? cp_ring_ : cp_group_;
    case Group::kCpA2a:
      return cp_a2a_group_;
    case Group::kStage:
      return stage_group_;
    case Group::kTp:
    case Group::kNone:
      break;
  }
  return tp_group_;
}

OpCost CostModel::Cost(const Op& op) const {
  OpCost cost;
  // The profile measured kernels and the TP group's collectives.
  const bool measured = op.kind != OpKind::kCollective || op.group == Group::kTp;
  if (options_.profile != nullptr && measured && op.kind != OpKind::kPass &&
      !(op.group == Group::kTp && options_.tp_comm_free && op.kind == OpKind::kCollective)) {
    const double us = options_.profile->Lookup(op, tp_group_.size);
    if (us >= 0 && op.kind != OpKind::kCollective && op.kind != OpKind::kSendRecv) {
      if (!options_.profile->contention) {
        // A measured kernel on a device that runs one op at a time: a fixed cost.
        cost.alone_us = cost.launch_us = us;
        return cost;
      }
      // A measured kernel on a GPU: the model's roofline scaled to the measured time, so it still
      // loses SMs and HBM bandwidth to a collective beside it as the model says.
      cost = ModelCost(op);
      const double body = cost.BodyUs(gpu_.sms, hbm_GBps_);
      const double target = std::max(0.0, us - cost.launch_us);
      if (body > 0) {
        cost.wave_us *= target / body;
        cost.hbm_bytes *= target / body;
        cost.tile_epilogue_bytes *= target / body;
      } else {
        cost.launch_us = us;
      }
      cost.alone_us = us;
      return cost;
    }
    if (us >= 0 && op.kind == OpKind::kCollective) {
      CollectiveEstimate estimate =
          EstimateCollective(node_, ToCollective(op.collective), op.bytes, tp_group_);
      cost.is_comm = true;
      cost.alone_us = us;
      cost.ctas = options_.profile->contention && !OnCopyEngine(op) ? estimate.ctas : 0;
      cost.hbm_bytes = options_.profile->contention ? estimate.hbm_bytes : 0;
      return cost;
    }
  }
  return ModelCost(op);
}

double CostModel::MovedFraction(const Op& op) const {
  // Transformer Engine's ring exchange starts with the GEMM on the rank's own shard while the
  // first transfer moves, and async TP likewise: a decomposed all-gather's first part holds the
  // rank's own rows, and only the other ranks' rows of it (all but parts / tp of it) move.
  if (op.collective != CollectiveOp::kAllGather || op.group != Group::kTp || op.parts <= 1 ||
      op.part != 0)
    return 1.0;
  return std::max(0.0, 1.0 - static_cast<double>(op.parts) / tp_group_.size);
}

bool CostModel::OnCopyEngine(const Op& op) const {
  // Copy engines only copy, and only to NVLink peers: all-gather parts inside one node (TE's ring
  // exchange, use_ce). A reduce-scatter part needs SMs for its sums (TE's pipelined
  // reduce-scatter runs on 16 of them), and a group across nodes goes through NCCL.
  return copy_engine_parts_ && op.kind == OpKind::kCollective && op.parts > 1 &&
         op.collective == CollectiveOp::kAllGather && op.group == Group::kTp &&
         tp_group_.nodes_spanned == 1;
}

OpCost CostModel::ModelCost(const Op& op) const {
  OpCost cost;
  switch (op.kind) {
    case OpKind::kGemm:
      cost = FrameworkGemmCost(op);
      break;
    case OpKind::kAttention:
      cost = AttentionCost(op);
      break;
    case OpKind::kPass:  // priced by the predictor from its pass's simulation
    case OpKind::kElementwise:
    case OpKind::kOptimizer:
      cost.hbm_bytes = op.bytes;
      cost.launch_us = launch_us_;
      break;
    case OpKind::kCollective:
    case OpKind::kSendRecv: {
      cost.is_comm = true;
      if (op.group == Group::kTp && options_.tp_comm_free) return cost;
      if (op.func == OpFunc::kPpRecv) return cost;  // ends when its send does
      const Collective kind =
          op.kind == OpKind::kSendRecv ? Collective::kSendRecv : ToCollective(op.collective);
      const double moved = op.bytes * MovedFraction(op);
      if (moved <= 0) return cost;  // the rank's own rows only: nothing moves
      if (OnCopyEngine(op)) {
        // Peer copies over NVLink: each rank receives the part's rows it lacks at the link's
        // achieved rate, one copy launch each, none of NCCL's protocol latency or its bandwidth
        // ramp with size; no SMs; HBM reads the rows on one side and writes them on the other.
        cost.alone_us = eager_launch_us_ +
                        moved / (node_.nvlink.GBps_per_direction * node_.nvlink.efficiency * 1e3);
        cost.hbm_bytes = 2 * moved;
        return cost;
      }
      CollectiveEstimate estimate = EstimateCollective(node_, kind, moved, GroupOf(op));
      cost.alone_us = estimate.time_us;
      cost.ctas = estimate.ctas;
      cost.hbm_bytes = estimate.hbm_bytes;
      return cost;
    }
  }
  cost.alone_us = cost.launch_us + cost.BodyUs(gpu_.sms, hbm_GBps_);
  return cost;
}

std::vector<OpCost> CostModel::CostAll(const Schedule& schedule) const {
  std::vector<OpCost> costs;
  costs.reserve(schedule.size());
  for (const Op& op : schedule.ops()) costs.push_back(Cost(op));
  return costs;
}

double CostModel::TpCommUs(const Schedule& schedule) const {
  CostOptions priced = options_;
  priced.tp_comm_free = false;
  CostModel model(*this);
  model.options_ = priced;
  double total = 0;
  for (const Op& op : schedule.ops())
    if (op.kind == OpKind::kCollective && op.group == Group::kTp) total += model.Cost(op).alone_us;
  return total;
}

}  // namespace domino::sim
