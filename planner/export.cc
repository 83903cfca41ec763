#include "planner/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "planner/export_parts.h"
#include "planner/iteration.h"

namespace domino {
namespace export_parts {

std::string Output::Text() const {
  std::string text;
  for (const std::string& line : comments) text += "# " + line + "\n";
  for (const std::string& line : differs) text += "# differs: " + line + "\n";
  return text + body;
}

std::string Degrees(const Plan& plan) {
  if (plan.cp > 1)
    return fmt::format("{} GPUs = tp {} x cp {} x pp {} x dp {}", plan.cluster.total_gpus(),
                       plan.tp, plan.cp, plan.pp, plan.dp);
  return fmt::format("{} GPUs = tp {} x pp {} x dp {}", plan.cluster.total_gpus(), plan.tp, plan.pp,
                     plan.dp);
}

std::string Title(const Plan& plan, std::string_view what) {
  // Where a node is a rack of hosts (GB200 NVL72), the hosts the launch line counts too.
  const ClusterSpec& c = plan.cluster;
  const std::string hosts =
      c.launch_gpus_per_host() == c.gpus_per_node
          ? ""
          : fmt::format(", {} hosts x {}", c.hosts(), c.launch_gpus_per_host());
  return fmt::format("{} for {} on {} ({} node{} x {} GPUs{}): {}", what, plan.model.name, c.name,
                     c.nodes, c.nodes == 1 ? "" : "s", c.gpus_per_node, hosts, Degrees(plan));
}

Output Opening(const Plan& plan, std::string_view what) {
  Output out;
  out.comments.push_back(Title(plan, what));
  if (!plan.search_stopped.empty())
    out.comments.push_back(
        fmt::format("partial: the best plan of a `domino plan` search stopped {}, before it "
                    "covered its space; a whole search may find a faster one",
                    plan.search_stopped));
  return out;
}

std::vector<std::string> ModelApproximations(const Plan& plan,
                                             std::span<const LaunchedFeature> launched,
                                             std::string_view joiner) {
  std::vector<std::string> out;
  const bool priced_window = plan.prices_window();
  for (const Approximation& a : plan.model.approximations) {
    const auto it = std::find_if(launched.begin(), launched.end(), [&](const LaunchedFeature& f) {
      return a.feature != ModelFeature::kNone && f.feature == a.feature;
    });
    // A window is priced as such where the plan's stack runs it (Plan::prices_window), else as
    // full causal attention: what the approximation's `as` says in general, said of this plan.
    std::string as = a.as;
    const bool window = a.feature == ModelFeature::kWindow;
    if (window) as = FullAttentionPricing(plan.model.window.tokens);
    if (it == launched.end()) {
      out.push_back(
          window && priced_window
              ? fmt::format("model {}: {}: priced as the window, exported {}", plan.model.name,
                            a.what, as)
              : fmt::format("model {}: {}: priced and exported {}", plan.model.name, a.what, as));
      continue;
    }
    if (window && priced_window) continue;  // launched as priced: no difference
    std::string settings;
    for (const std::string& s : it->settings)
      settings += fmt::format("{}{}", settings.empty() ? "" : joiner, s);
    out.push_back(fmt::format("model {}: {}: launched ({}), priced {}", plan.model.name, a.what,
                              settings, as));
  }
  // Features domino prices (no approximation) that the export does not launch: the QK-norm where
  // the framework has no setting for it, the logits' soft cap and post-norms everywhere (none of
  // these frameworks has one).
  for (const PricedFeature& p : PricedFeatures(plan.model)) {
    const bool launches =
        p.feature != ModelFeature::kNone &&
        std::any_of(launched.begin(), launched.end(),
                    [&](const LaunchedFeature& f) { return f.feature == p.feature; });
    if (!launches)
      out.push_back(fmt::format("model {}: {}: {}", plan.model.name, p.what, p.exported));
  }
  return out;
}

std::optional<std::string> GegluDifference(const ModelSpec& m, std::string_view framework,
                                           std::string_view launched) {
  if (m.activation != Activation::kGeglu) return std::nullopt;
  return fmt::format("model {}: a GeLU-gated MLP (geglu): {} has no setting for it; launched as {}",
                     m.name, framework, launched);
}

std::optional<std::string> DominoSlicing(const Plan& plan) {
  if (plan.row_split == 1 && plan.col_split == 1 && plan.scope == OverlapScope::kNone)
    return std::nullopt;
  std::vector<std::string> parts;
  if (plan.row_split > 1) parts.push_back(fmt::format("row split {} (μ-batches)", plan.row_split));
  if (plan.col_split > 1) parts.push_back(fmt::format("column split {}", plan.col_split));
  std::string slicing = parts.empty() ? std::string("no split") : parts[0];
  if (parts.size() == 2) slicing += " x " + parts[1];
  return fmt::format("Domino {} with {} overlap", slicing, ScopeName(plan.scope));
}

std::string GradSyncLayerDifference() {
  return "grad_sync layer: Megatron-Core's DDP keeps one gradient bucket on the pipeline stages "
         "after the first and on the model chunks after the first, reduced after their last "
         "backward (megatron, or megatron-aligned as Megatron-LM launches it by default)";
}

std::optional<std::string> OptimizerDtypeDifference(const Plan& plan,
                                                    std::string_view framework_keeps) {
  if (plan.optimizer_dtype == Dtype::kFp32) return std::nullopt;
  return fmt::format("optimizer_dtype {}: {}", DtypeName(plan.optimizer_dtype), framework_keeps);
}

std::optional<std::string> AttentionDifference(const Plan& plan, std::string_view framework_runs) {
  if (!plan.attention) return std::nullopt;
  return fmt::format("attention {}: {}", AttentionKernelName(*plan.attention), framework_runs);
}

std::vector<std::string> KernelDifferences(const Plan& plan, std::string_view framework,
                                           bool unfused_softmax_switch, FrameworkFp8Cast fp8) {
  std::vector<std::string> out;
  if (plan.softmax == SoftmaxKernels::kScaleSoftmax)
    out.push_back(fmt::format("softmax scale-softmax: {}'s GPT attention masks the scores causally",
                              framework));
  if (plan.softmax == SoftmaxKernels::kScaleMaskSoftmax && !unfused_softmax_switch)
    out.push_back(fmt::format(
        "softmax scale-mask-softmax: {} has no switch for the unfused scale, mask and softmax",
        framework));
  if (!plan.branch_dropout(false) && plan.applies_dropout())
    out.push_back(fmt::format(
        "mlp_dropout false: {}'s hidden dropout runs after the MLP too, as after the attention",
        framework));
  if (plan.precision == Dtype::kFp8 && plan.fp8_casts() != fp8.cast)
    out.push_back(fmt::format("fp8_cast {}: {} casts as fp8_cast {} does ({})",
                              Fp8CastName(plan.fp8_casts()), framework, Fp8CastName(fp8.cast),
                              fp8.modules));
  return out;
}

std::vector<std::string> DecomposedDifferences(const Plan& plan, std::string_view framework,
                                               int framework_rs_chunks) {
  std::vector<std::string> out;
  if (plan.method == OverlapMethod::kDomino) return out;
  if (plan.decomposed_chunks() != plan.tp)
    out.push_back(
        fmt::format("decomposed overlap in {} chunks: {} cuts each all-gather into tp "
                    "({}) chunks",
                    plan.decomposed_chunks(), framework, plan.tp));
  if (plan.decomposed_rs_chunks() != framework_rs_chunks)
    out.push_back(fmt::format("decomposed reduce-scatter in {} pieces: {} cuts it into {}",
                              plan.decomposed_rs_chunks(), framework, framework_rs_chunks));
  return out;
}

int LayersPerVirtualStage(const Plan& plan) {
  return static_cast<int>(plan.split_units() / (plan.pp * plan.virtual_stages));
}

std::optional<UnevenStages> MegatronUnevenStages(const Plan& plan) {
  if (plan.pp < 2 || plan.virtual_stages > 1 || plan.pipeline_split != PipelineSplit::kLayers ||
      plan.model.layers % plan.pp == 0)
    return std::nullopt;
  const std::vector<int> stages = ChunkLayers(plan);
  UnevenStages out;
  if (std::adjacent_find(stages.begin() + 1, stages.end() - 1, std::not_equal_to<>()) ==
      stages.end() - 1) {
    out.first = stages.front(), out.last = stages.back();
    return out;
  }
  for (size_t s = 0; s < stages.size(); ++s)
    out.layout += fmt::format("{}{}t*{}{}", s == 0 ? "" : "|", s == 0 ? "E" : "", stages[s],
                              s + 1 == stages.size() ? "L" : "");
  return out;
}

std::string_view AttentionBackendName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFlash2:
      return "flash";
    case AttentionKernel::kUnfused:
      return "unfused";
    case AttentionKernel::kFlash:
    case AttentionKernel::kFlex:  // no backend of Megatron-LM's; a capped model's differs line
      break;
  }
  return "auto";
}

int MaxPositions(const Plan& plan) { return std::max(plan.model.seq_len, plan.seq_len); }

std::string Arguments(const std::vector<std::string>& args) {
  std::string text;
  for (size_t i = 0; i < args.size(); ++i) text += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
  return text;
}

std::optional<WindowLayers> MegatronWindowLayers(const ModelSpec& m) {
  std::vector<bool> windowed(m.layers);
  for (int l = 0; l < m.layers; ++l) windowed[l] = m.window.Covers(l);
  if (std::find(windowed.begin(), windowed.end(), false) == windowed.end()) return std::nullopt;
  // Megatron-Core's integer N puts full attention on layer numbers (from 1) that N divides
  // (megatron/core/transformer/utils.py, is_layer_window_attention): Gemma 2's is 2.
  if (const int n = FullEvery(windowed); n > 0) return WindowLayers{.every = n, .pattern = {}};
  return WindowLayers{.pattern = std::vector<int>(windowed.begin(), windowed.end())};
}

// Megatron-LM's arguments for a model's features. --add-qkv-bias keeps Q, K and V's biases under
// --disable-bias-linear (Qwen2); --qk-layernorm norms each head of Q and K with --normalization's
// norm (RMSNorm: Qwen3's q_norm and k_norm). Both are arguments of megatron/training/arguments.py
// up to core_v0.15, and from core_v0.16.0 generated from TransformerConfig's add_qkv_bias and
// qk_layernorm (megatron/core/transformer/transformer_config.py) by ArgumentGroupFactory
// (megatron/training/argument_utils.py: "--" and the field's name with dashes).
// --rotary-percent rotates that fraction of each head (arguments.py; DeepSpeed-Domino's
// domino/language_model.py reads it too). --window-size L,R (tuple_type) and
// --window-attn-skip-freq (moe_freq_type: an integer or a Python list expression, 1 a windowed
// layer) are arguments.py's from core_v0.15.0; `window.tokens` is its left size as it is
// (AttentionWindow: transformers' sliding_window W is window_size (W - 1, 0)).
std::vector<LaunchedFeature> MegatronFeatures(const ModelSpec& m, bool layer_options) {
  std::vector<LaunchedFeature> out;
  if (layer_options && m.qkv_bias && !m.bias)
    out.push_back({ModelFeature::kQkvBias, {"--add-qkv-bias"}});
  if (layer_options && m.qk_norm) out.push_back({ModelFeature::kQkNorm, {"--qk-layernorm"}});
  if (!m.learned_positions() && m.rotary_fraction < 1)
    out.push_back(
        {ModelFeature::kPartialRotary, {fmt::format("--rotary-percent {:g}", m.rotary_fraction)}});
  if (layer_options && m.window.tokens > 0) {
    LaunchedFeature window{ModelFeature::kWindow,
                           {fmt::format("--window-size {},0", m.window.tokens)}};
    if (std::optional<WindowLayers> layers = MegatronWindowLayers(m)) {
      std::string freq = std::to_string(layers->every);
      if (layers->every == 0) {  // runs of equal layers: "[0]*28+[1]*36"
        freq.clear();
        for (size_t l = 0; l < layers->pattern.size();) {
          size_t end = l;
          while (end < layers->pattern.size() && layers->pattern[end] == layers->pattern[l]) ++end;
          freq += fmt::format("{}[{}]*{}", freq.empty() ? "" : "+", layers->pattern[l], end - l);
          l = end;
        }
        freq = "\"" + freq + "\"";
      }
      window.settings.push_back("--window-attn-skip-freq " + freq);
    }
    out.push_back(std::move(window));
  }
  return out;
}

void AddModelArguments(const ModelSpec& m, const Plan& plan, bool layer_options,
                       std::vector<std::string>& args) {
  args.push_back(fmt::format("--num-layers {}", m.layers));
  args.push_back(fmt::format("--hidden-size {}", m.hidden));
  args.push_back(fmt::format("--ffn-hidden-size {}", m.ffn));
  args.push_back(fmt::format("--num-attention-heads {}", m.heads));
  // Heads not hidden / heads wide: Megatron-LM's and DeepSpeed-Domino's attention projects to
  // kv_channels x heads (its default hidden / heads).
  if (m.head_dim > 0) args.push_back(fmt::format("--kv-channels {}", m.head_dim));
  if (layer_options && m.kv_heads != m.heads) {
    args.push_back("--group-query-attention");
    args.push_back(fmt::format("--num-query-groups {}", m.kv_heads));
  }
  args.push_back(fmt::format("--seq-length {}", plan.seq_len));
  args.push_back(fmt::format("--max-position-embeddings {}", MaxPositions(plan)));
  args.push_back(fmt::format("--position-embedding-type {}",
                             m.learned_positions() ? "learned_absolute" : "rope"));
  // GeGLU has no flag of its own (--quick-geglu is x sigmoid(1.702 x)): SwiGLU's three matrices,
  // a `# differs:` line says (GegluDifference).
  if (layer_options && Gated(m.activation)) args.push_back("--swiglu");
  if (layer_options && m.activation == Activation::kSquaredRelu) args.push_back("--squared-relu");
  if (layer_options && m.norm == Norm::kRmsNorm) args.push_back("--normalization RMSNorm");
  for (const LaunchedFeature& f : MegatronFeatures(m, layer_options))
    args.insert(args.end(), f.settings.begin(), f.settings.end());
  // Megatron-LM's hidden and attention dropout are 0.1 unless set (DeepSpeed-Domino's too).
  if (!plan.applies_dropout()) {
    args.push_back("--hidden-dropout 0");
    args.push_back("--attention-dropout 0");
  }
}

}  // namespace export_parts

namespace {

constexpr std::array<std::pair<std::string_view, ExportTarget>, 4> kTargets{{
    {"megatron", ExportTarget::kMegatron},
    {"nemo", ExportTarget::kNemo},
    {"deepspeed", ExportTarget::kDeepSpeed},
    {"torchtitan", ExportTarget::kTorchtitan},
}};

}  // namespace

std::span<const std::pair<std::string_view, ExportTarget>> ExportTargetNames() { return kTargets; }

Result<std::string> ExportPlan(const Plan& plan, ExportTarget target) {
  switch (target) {
    case ExportTarget::kMegatron:
      return export_parts::ExportMegatron(plan);
    case ExportTarget::kNemo:
      return export_parts::ExportNemo(plan);
    case ExportTarget::kDeepSpeed:
      return export_parts::ExportDeepSpeed(plan);
    case ExportTarget::kTorchtitan:
      return export_parts::ExportTorchtitan(plan);
  }
  return Error("unknown export target");
}

}  // namespace domino
