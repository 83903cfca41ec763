// A plan's rules: the bounds of its numbers, how its layers split over the pipeline, and what
// its degrees, splits and shapes must satisfy together (planner/plan.h CheckPlanRules).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan.h"

namespace domino {

std::optional<std::string> CheckBound(const PlanIntBound& bound, int64_t value) {
  if (value >= bound.min && value <= bound.max) return std::nullopt;
  if (bound.min == 1 && value <= 0) return fmt::format("must be a positive integer, got {}", value);
  return fmt::format("must be between {} and {}, got {}", bound.min, bound.max, value);
}

std::vector<int> ChunkLayers(const Plan& plan) {
  const int pp = plan.pp, v = plan.virtual_stages, layers = plan.model.layers;
  if (plan.pipeline_split != PipelineSplit::kLayers) {
    std::vector<int> out(pp * v, static_cast<int>(plan.split_units() / (pp * v)));
    if (plan.split_counts_embedding()) --out.front();
    if (plan.split_counts_loss()) --out.back();
    return out;
  }
  if (v > 1) return std::vector<int>(pp * v, layers / (pp * v));
  std::vector<int> out(pp, layers / pp);
  int extra = layers % pp;
  // The first stage also embeds and the last also runs the LM head: they take the remainder last.
  for (int s = 1; s + 1 < pp && extra > 0; ++s, --extra) ++out[s];
  if (extra > 0 && pp > 1) ++out[pp - 1], --extra;
  if (extra > 0) ++out[0];
  return out;
}

std::vector<int> ChunkWindowedLayers(const Plan& plan) {
  const std::vector<int> layers = ChunkLayers(plan);
  std::vector<int> out(layers.size(), 0);
  if (!plan.RunsWindow()) return out;
  int first = 0;
  for (size_t vs = 0; vs < layers.size(); ++vs) {
    for (int l = first; l < first + layers[vs]; ++l) out[vs] += plan.WindowedLayer(l) ? 1 : 0;
    first += layers[vs];
  }
  return out;
}

std::optional<PlanRuleFailure> CheckPipelineSplit(const Plan& p) {
  const int64_t chunks = static_cast<int64_t>(p.pp) * p.virtual_stages;
  const std::string_view split = PipelineSplitName(p.pipeline_split);
  if (p.pipeline_split == PipelineSplit::kLayers) {
    if (p.virtual_stages > 1 && p.model.layers % chunks != 0)
      return PlanRuleFailure{
          "parallel.virtual_stages",
          fmt::format("pp*virtual_stages = {}*{} must divide the model's {} layers (or, with "
                      "parallel.pipeline_split ends, embedding or loss, the layers plus the ends "
                      "it counts)",
                      p.pp, p.virtual_stages, p.model.layers)};
    return std::nullopt;
  }
  const int64_t units = p.split_units();
  if (units % chunks != 0)
    return PlanRuleFailure{
        "parallel.pipeline_split",
        fmt::format("pipeline_split {} counts {} units ({} layers{}{}); pp*virtual_stages = {}*{} "
                    "must divide them",
                    split, units, p.model.layers,
                    p.split_counts_embedding() ? " + the embedding" : "",
                    p.split_counts_loss() ? " + the loss" : "", p.pp, p.virtual_stages)};
  // The first chunk gives a layer to the embedding, the last one to the loss (one chunk: both).
  const int64_t fewest = units / chunks - (chunks == 1 ? units - p.model.layers : 1);
  if (fewest < 1)
    return PlanRuleFailure{"parallel.pipeline_split",
                           fmt::format("pipeline_split {} leaves the first or the last of {} model "
                                       "chunks ({} units each) without a transformer layer",
                                       split, chunks, units / chunks)};
  return std::nullopt;
}

std::optional<PlanRuleFailure> CheckPlanWideRules(const Plan& p) {
  if (p.fp8_recipe && p.precision != Dtype::kFp8)
    return PlanRuleFailure{"training.fp8_recipe",
                           fmt::format("an fp8 recipe needs precision fp8 (the plan's is {})",
                                       DtypeName(p.precision))};
  if (p.mlp_dropout && !p.applies_dropout())
    return PlanRuleFailure{
        "training.mlp_dropout",
        fmt::format("says whether the MLP's hidden dropout runs, and the plan runs no dropout "
                    "(training.dropout{})",
                    p.dropout ? " false" : fmt::format(" unset: stack {} has none", p.stack.name))};
  if (p.fp8_cast && p.precision != Dtype::kFp8)
    return PlanRuleFailure{"training.fp8_cast",
                           fmt::format("says how fp8 inputs are cast and needs precision fp8 (the "
                                       "plan's is {})",
                                       DtypeName(p.precision))};
  if (p.attention && *p.attention != AttentionKernel::kUnfused &&
      p.model.head_width() > Plan::kMaxFusedHeadDim)
    return PlanRuleFailure{
        "training.attention",
        fmt::format("{} kernels take heads up to {} wide (FlashAttention 2's and cuDNN's); the "
                    "model's are {} (unfused attention runs them)",
                    AttentionKernelName(*p.attention), Plan::kMaxFusedHeadDim,
                    p.model.head_width())};
  // The softmax's kernels are unfused attention's: flash kernels keep the scores on chip and are
  // priced causal, and the executor's own attention (fp32_scores) runs its own kernels.
  if (p.softmax && p.attention_kernel() != AttentionKernel::kUnfused)
    return PlanRuleFailure{
        "training.softmax",
        fmt::format("says which kernels unfused attention runs over the scores; the plan's "
                    "attention is {} (training.attention unfused runs them)",
                    AttentionKernelName(p.attention_kernel()))};
  if (p.softmax && p.stack.fp32_scores)
    return PlanRuleFailure{"training.softmax",
                           fmt::format("stack {} runs its own attention kernels over fp32 scores "
                                       "(fp32_scores); its softmax is not a choice",
                                       p.stack.name)};
  const GpuSpec& gpu = p.cluster.node.gpu;
  if (gpu.peak(p.precision) <= 0)
    return PlanRuleFailure{"precision",
                           fmt::format("the {} has no {} peak (peak_tflops.{} is 0): choose a "
                                       "precision it runs",
                                       gpu.name, DtypeName(p.precision), DtypeName(p.precision))};
  return std::nullopt;
}

// parallel.cp_comm and cp_a2a: only with context parallelism, run by the stack, a2a with cp
// dividing each TP rank's heads, a2a+p2p with groups that do and leave a ring, cp_a2a only with
// a2a+p2p, and no ring over a window the stack's kernels run (Transformer Engine's
// attn_forward_func_with_cp asserts a2a or all_gather for a windowed layer).
std::optional<PlanRuleFailure> CheckCpComm(const Plan& p) {
  auto fail_at = [](std::string_view key, std::string rule) {
    return std::optional<PlanRuleFailure>(PlanRuleFailure{std::string(key), std::move(rule)});
  };
  auto fail = [&](std::string rule) { return fail_at("parallel.cp_comm", std::move(rule)); };
  auto fail_a2a = [&](std::string rule) { return fail_at("parallel.cp_a2a", std::move(rule)); };
  if (p.cp == 1) {
    if (p.cp_a2a > 0)
      return fail_a2a(
          fmt::format("cp_a2a ({}) sizes the a2a groups of a2a+p2p context parallelism, and "
                      "the plan's cp is 1",
                      p.cp_a2a));
    if (p.cp_comm)
      return fail(
          fmt::format("cp_comm ({}) says how context parallelism communicates, and the "
                      "plan's cp is 1",
                      CpCommName(*p.cp_comm)));
    return std::nullopt;
  }
  const CpComm comm = p.cp_communication();
  if (comm != CpComm::kP2p && !p.stack.te_cp_comm_types)
    return fail(
        fmt::format("stack {} runs context parallelism as the p2p ring only, not {} "
                    "(megatron-core, Transformer Engine's, and domino run all four)",
                    p.stack.name, CpCommName(comm)));
  if (comm == CpComm::kA2a && !p.cp_divides_heads())
    return fail(
        fmt::format("a2a scatters each tensor-parallel rank's heads over the CP group: cp "
                    "({}) must divide its {} query heads and {} key/value heads "
                    "(heads/tp, kv_heads/tp); all_gather has no such rule",
                    p.cp, p.model.heads / p.tp, p.model.kv_heads / p.tp));
  if (p.cp_a2a > 0 && comm != CpComm::kA2aP2p)
    return fail_a2a(
        fmt::format("cp_a2a ({}) sizes the a2a groups of a2a+p2p; the plan's cp_comm is {}",
                    p.cp_a2a, CpCommName(comm)));
  if (comm == CpComm::kA2aP2p) {
    const int a = p.cp_a2a_ranks();
    if (p.cp_a2a == 0 && a == 0)
      return fail(fmt::format(
          "a2a+p2p needs a2a groups of at least 2 ranks that divide cp ({}) and each "
          "tensor-parallel rank's {} query heads and {} key/value heads, leaving a ring of at "
          "least 2: none does",
          p.cp, p.model.heads / p.tp, p.model.kv_heads / p.tp));
    if (a < 2 || p.cp % a != 0 || p.cp / a < 2)
      return fail_a2a(
          fmt::format("a2a+p2p: cp_a2a ({}) must divide cp ({}) and leave a ring of at "
                      "least 2 (2 <= cp_a2a <= cp / 2)",
                      a, p.cp));
    if (!p.divides_heads(a))
      return fail_a2a(
          fmt::format("a2a+p2p scatters each tensor-parallel rank's heads over its a2a "
                      "group: cp_a2a ({}) must divide its {} query heads and {} "
                      "key/value heads (heads/tp, kv_heads/tp)",
                      a, p.model.heads / p.tp, p.model.kv_heads / p.tp));
  }
  if ((comm == CpComm::kP2p || comm == CpComm::kA2aP2p) && p.stack.te_cp_comm_types &&
      p.StackRunsWindow())
    return fail(fmt::format(
        "Transformer Engine's p2p ring{} refuses a sliding window, and the model's window of {} "
        "tokens covers {} of its {} layers: cp_comm a2a{} or all_gather",
        comm == CpComm::kA2aP2p ? " (a2a+p2p's)" : "", p.model.window.tokens,
        p.model.window.CoveredLayers(p.model.layers), p.model.layers,
        p.cp_divides_heads() ? "" : " (once cp divides each TP rank's heads)"));
  return std::nullopt;
}

std::optional<PlanRuleFailure> CheckPlanRules(const Plan& p) {
  const ModelSpec& m = p.model;
  auto fail = [](std::string key, std::string rule) {
    return std::optional<PlanRuleFailure>(PlanRuleFailure{std::move(key), std::move(rule)});
  };
  const std::pair<const PlanIntBound*, int> bounded[] = {
      {&kSeqLenBound, p.seq_len},
      {&kMicroBatchBound, p.micro_batch},
      {&kGlobalBatchBound, p.global_batch},
      {&kTpBound, p.tp},
      {&kCpBound, p.cp},
      {&kPpBound, p.pp},
      {&kDpBound, p.dp},
      {&kVirtualStagesBound, p.virtual_stages},
      {&kRowSplitBound, p.row_split},
      {&kColSplitBound, p.col_split},
      {&kRecomputeLayersBound, p.recompute_layers},
  };
  for (const auto& [bound, value] : bounded)
    if (std::optional<std::string> rule = CheckBound(*bound, value))
      return fail(std::string(bound->key), *rule);
  if (auto failure = CheckPlanWideRules(p)) return failure;
  int64_t gpus = static_cast<int64_t>(p.tp) * p.cp * p.pp * p.dp;
  if (gpus != p.cluster.total_gpus() && p.cp == 1)
    return fail("parallel.tp",
                fmt::format("tp*pp*dp = {}*{}*{} = {} must equal the cluster's {} GPUs", p.tp, p.pp,
                            p.dp, gpus, p.cluster.total_gpus()));
  if (gpus != p.cluster.total_gpus())
    return fail("parallel.cp",
                fmt::format("tp*cp*pp*dp = {}*{}*{}*{} = {} must equal the cluster's {} GPUs", p.tp,
                            p.cp, p.pp, p.dp, gpus, p.cluster.total_gpus()));
  // Causal load balance: each rank holds two of the 2*cp chunks of every sequence.
  if (p.cp > 1 && p.seq_len % (2 * p.cp) != 0)
    return fail("parallel.cp",
                fmt::format("context parallelism cuts each sequence into 2*cp = {} chunks (two per "
                            "rank, for causal load balance): 2*cp must divide seq_len ({})",
                            2 * p.cp, p.seq_len));
  // A framework's ring attention runs over its fused kernels: Transformer Engine disables
  // UnfusedDotProductAttention under context parallelism, Megatron-Core's local attention asserts
  // cp 1, and so does Megatron-Bridge's Gemma 2 attention (FlexAttention and unfused alike). This
  // project's executor (fp32_scores) runs its own over its attention.
  if (const AttentionKernel kernel = p.attention_kernel();
      p.cp > 1 && (kernel == AttentionKernel::kUnfused || kernel == AttentionKernel::kFlex) &&
      !p.stack.fp32_scores) {
    std::string why;
    if (!p.attention && p.stack.attention != AttentionKernel::kUnfused)
      why = m.head_width() > Plan::kMaxFusedHeadDim
                ? fmt::format(" (its heads, {} wide, are too wide for the fused kernels)",
                              m.head_width())
                : " (the model's attention_softcap, which the fused kernels do not take)";
    return fail("parallel.cp",
                fmt::format("context parallelism needs Transformer Engine's fused attention (it "
                            "runs no other under it); the plan's attention is {}{}",
                            AttentionKernelName(kernel), why));
  }
  if (auto failure = CheckCpComm(p)) return failure;
  if (m.heads % p.tp != 0)
    return fail("parallel.tp",
                fmt::format("tp ({}) must divide the model's heads ({})", p.tp, m.heads));
  if (m.kv_heads % p.tp != 0)
    return fail("parallel.tp",
                fmt::format("tp ({}) must divide the model's kv_heads ({})", p.tp, m.kv_heads));
  if (m.ffn % p.tp != 0)
    return fail("parallel.tp",
                fmt::format("tp ({}) must divide the model's ffn ({})", p.tp, m.ffn));
  if (p.pp > m.layers)
    return fail("parallel.pp",
                fmt::format("pp ({}) must not exceed the model's {} layers", p.pp, m.layers));
  if (auto failure = CheckPipelineSplit(p)) return failure;
  if (p.virtual_stages > 1 && p.pp == 1)
    return fail("parallel.virtual_stages", "virtual_stages > 1 needs pp >= 2");
  if (p.overlap_p2p.value_or(false) && p.virtual_stages == 1)
    return fail("parallel.overlap_p2p",
                "overlap_p2p needs virtual_stages >= 2 (Megatron-Core overlaps pipeline transfers "
                "only in its interleaved schedule)");
  if (p.virtual_stages > 1 && p.dp > 0 && p.micro_batch > 0 &&
      (p.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp)) % p.pp != 0)
    return fail("parallel.virtual_stages",
                fmt::format("the interleaved schedule needs the micro-batches per iteration ({}) "
                            "to be a multiple of pp ({})",
                            p.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp), p.pp));
  if (p.micro_batch % p.row_split != 0)
    return fail("overlap.row_split", fmt::format("row_split ({}) must divide micro_batch ({})",
                                                 p.row_split, p.micro_batch));
  if (m.hidden % p.col_split != 0)
    return fail(
        "overlap.col_split",
        fmt::format("col_split ({}) must divide the model's hidden ({})", p.col_split, m.hidden));
  if (p.scope == OverlapScope::kInterLayer && p.row_split < 2)
    return fail("overlap.scope",
                "inter-layer overlap needs row_split >= 2 (only independent row slices can cross a "
                "layer boundary)");
  if (p.sequence_parallel && p.col_split > 1)
    return fail("overlap.col_split", "column split is not supported with sequence_parallel");
  if (p.sequence_parallel && p.seq_len % p.tp != 0 && p.cp == 1)
    return fail(
        "parallel.sequence_parallel",
        fmt::format("sequence parallelism needs tp ({}) to divide seq_len ({})", p.tp, p.seq_len));
  if (p.sequence_parallel && p.local_seq_len() % p.tp != 0)
    return fail("parallel.sequence_parallel",
                fmt::format("sequence parallelism needs tp ({}) to divide each rank's part of the "
                            "sequence (seq_len/cp = {})",
                            p.tp, p.local_seq_len()));
  if (p.method == OverlapMethod::kDomino && p.copy_engine.value_or(false))
    return fail("overlap.copy_engine",
                "copy engines move decomposed parts: it needs overlap.method decomposed or both");
  // Under Domino's method nothing is decomposed: one piece, as `--format json` writes it.
  if (p.method == OverlapMethod::kDomino && p.chunks != 0 && p.chunks != 1)
    return fail("overlap.chunks",
                "chunks cut decomposed collectives: it needs overlap.method decomposed or both");
  if (p.method == OverlapMethod::kDomino && p.rs_chunks != 0 && p.rs_chunks != 1)
    return fail("overlap.rs_chunks",
                "rs_chunks cut decomposed reduce-scatters: it needs overlap.method decomposed or "
                "both");
  if (p.method != OverlapMethod::kDomino) {
    const std::string_view method = MethodName(p.method);
    if (p.tp < 2)
      return fail("overlap.method",
                  fmt::format("{} overlap decomposes TP collectives, and with tp 1 there are "
                              "none: it needs parallel.tp >= 2",
                              method));
    if (!p.sequence_parallel)
      return fail("overlap.method",
                  fmt::format("{} overlap decomposes sequence parallelism's all-gathers and "
                              "reduce-scatters: it needs parallel.sequence_parallel: true",
                              method));
    if (p.method == OverlapMethod::kDecomposed && p.row_split > 1)
      return fail("overlap.method",
                  "decomposed overlap runs without Domino's row split (row_split "
                  "1); method both decomposes each row slice");
    if (p.method == OverlapMethod::kBoth && p.row_split < 2)
      return fail("overlap.method",
                  "method both decomposes each of Domino's row slices: it needs "
                  "row_split >= 2 (method decomposed runs without them)");
    if (p.chunks < 0 || p.chunks > kMaxSplit)
      return fail("overlap.chunks", *CheckBound(kChunksBound, p.chunks));
    const int chunks = p.decomposed_chunks();
    if (chunks > kMaxSplit)
      return fail("overlap.chunks", fmt::format("chunks defaults to tp ({}), more than {}: set "
                                                "overlap.chunks between 1 and {}",
                                                p.tp, kMaxSplit, kMaxSplit));
    const int64_t slice_tokens =
        static_cast<int64_t>(p.micro_batch) / p.row_split * p.local_seq_len();
    // `what` (a count of pieces) must cut a row slice's tokens evenly.
    const auto slice_rule = [&](std::string key, std::string_view what) {
      return fail(std::move(key), fmt::format("{} must divide the tokens of a row slice "
                                              "(micro_batch/row_split*seq_len{} = {})",
                                              what, p.cp > 1 ? "/cp" : "", slice_tokens));
    };
    if (slice_tokens % chunks != 0)
      return slice_rule("overlap.chunks", fmt::format("chunks ({})", chunks));
    if (p.rs_chunks < 0 || p.rs_chunks > kMaxSplit)
      return fail("overlap.rs_chunks", *CheckBound(kRsChunksBound, p.rs_chunks));
    const int rs_chunks = p.decomposed_rs_chunks();
    if (slice_tokens % rs_chunks != 0)
      return slice_rule(
          "overlap.rs_chunks",
          fmt::format("rs_chunks ({}{})", rs_chunks,
                      p.rs_chunks > 0 ? "" : fmt::format(": the {} stack's", p.stack.name)));
  }
  if (p.recompute_layers > 0 && p.recompute != Recompute::kFull)
    return fail("memory.recompute_layers",
                "recompute_layers counts the layers full recompute redoes: it needs "
                "memory.recompute: full");
  if (p.recompute_layers > m.layers)
    return fail("memory.recompute_layers",
                fmt::format("recompute_layers ({}) must not exceed the model's {} layers",
                            p.recompute_layers, m.layers));
  if (p.fsdp && !p.distributed_optimizer)
    return fail("memory.fsdp",
                "fsdp shards the optimizer state as well as parameters and gradients: it needs "
                "memory.distributed_optimizer: true");
  if (p.fsdp && p.dp_cp() == 1)
    return fail("memory.fsdp", "fsdp shards over the DP x CP ranks: it needs dp x cp > 1");
  if (p.global_batch % (static_cast<int64_t>(p.micro_batch) * p.dp) != 0)
    return fail("training.global_batch",
                fmt::format("micro_batch*dp = {}*{} must divide global_batch ({})", p.micro_batch,
                            p.dp, p.global_batch));
  // Last, so that a plan breaking a rule is told that rule first.
  // Bounded above, so these products fit easily in 64 bits.
  const int64_t micro_batches = p.global_batch / (static_cast<int64_t>(p.micro_batch) * p.dp);
  const int64_t layer_passes =
      micro_batches * m.layers * p.row_split * p.col_split * p.decomposed_chunks();
  if (layer_passes > kMaxLayerPasses)
    return fail(
        "training.global_batch",
        fmt::format("{} micro-batch(es) of {} layers in {} slice(s) is {} layer passes, "
                    "more than the {} one plan may simulate; use a smaller global_batch "
                    "or a larger micro_batch",
                    micro_batches, m.layers, p.row_split * p.col_split * p.decomposed_chunks(),
                    layer_passes, kMaxLayerPasses));
  return std::nullopt;
}

}  // namespace domino
