// What the exporters of planner/export.h share: the text they build and the settings more than
// one framework spells alike. One exporter per file: export_megatron.cc (Megatron-LM and NeMo),
// export_deepspeed.cc (DeepSpeed-Domino), export_torchtitan.cc; planner/export.cc holds these
// helpers and picks the exporter. Only those files include this header.
#ifndef DOMINO_PLANNER_EXPORT_PARTS_H_
#define DOMINO_PLANNER_EXPORT_PARTS_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"

namespace domino::export_parts {

// The text being built: comment lines first, then the settings.
struct Output {
  std::vector<std::string> comments;  // without the leading "# "
  std::vector<std::string> differs;   // each becomes "# differs: ..."
  std::string body;

  std::string Text() const;
};

// "64 GPUs = tp 8 x pp 2 x dp 4" (with cp when it is above 1).
std::string Degrees(const Plan& plan);

// The first comment line: `what`, for which model on which cluster, and Degrees.
std::string Title(const Plan& plan, std::string_view what);

// The text every export opens with: the Title, then, for a plan whose search stopped early
// (Plan::search_stopped), a line saying that a whole search may find a faster plan.
Output Opening(const Plan& plan, std::string_view what);

// A feature of the model (ModelFeature) that a framework builds when told: its settings, in the
// framework's syntax (arguments, or YAML lines).
struct LaunchedFeature {
  ModelFeature feature = ModelFeature::kNone;
  std::vector<std::string> settings;
};

// What the plan's model file describes and domino prices otherwise (ModelSpec::approximations),
// as differences: "model NAME: WHAT: priced and exported AS", or, for a feature the export
// launches, "model NAME: WHAT: launched (SETTINGS), priced AS", its settings joined by `joiner`:
// the run has it, the prediction does not. Then a feature domino prices that the export does not
// launch (qk_norm without a ModelFeature::kQkNorm in `launched`, post_norms, logit_softcap):
// "...: priced with them, exported without them".
std::vector<std::string> ModelApproximations(const Plan& plan,
                                             std::span<const LaunchedFeature> launched = {},
                                             std::string_view joiner = " ");

// A GeGLU model's MLP where `framework` has no setting for it, launched as `launched` ("model
// NAME: a GeLU-gated MLP (geglu): FRAMEWORK has no setting for it; launched as LAUNCHED");
// nullopt for other activations.
std::optional<std::string> GegluDifference(const ModelSpec& m, std::string_view framework,
                                           std::string_view launched);

// Domino's slicing in words, for the frameworks that have no option for it; nullopt for the
// baseline.
std::optional<std::string> DominoSlicing(const Plan& plan);

// How a plan's decomposed overlap differs from the framework's own (Transformer Engine's
// userbuffers, torchtitan's async TP): they cut each all-gather into tp chunks, and each
// reduce-scatter into `framework_rs_chunks` pieces (TE's pipeline: 4; async TP: tp); nothing for
// Domino's method.
std::vector<std::string> DecomposedDifferences(const Plan& plan, std::string_view framework,
                                               int framework_rs_chunks);

// A bf16 Adam state (Plan::optimizer_dtype) for a framework that keeps its own as
// `framework_keeps` says; nothing for fp32.
std::optional<std::string> OptimizerDtypeDifference(const Plan& plan,
                                                    std::string_view framework_keeps);

// grad_sync layer (every stage's and chunk's buckets under its last backward), which no
// Megatron-Core DDP runs: it keeps one bucket on the stages and chunks after the first.
std::string GradSyncLayerDifference();

// An attention kernel the plan chooses (Plan::attention, `training.attention`) for a framework that
// this export cannot tell to run it, as `framework_runs` says; nothing when the plan leaves it to
// its stack.
std::optional<std::string> AttentionDifference(const Plan& plan, std::string_view framework_runs);

// How the framework casts fp8 inputs: its Plan::fp8_cast and the modules that make it so.
struct FrameworkFp8Cast {
  Fp8Cast cast;
  std::string_view modules;
};

// The plan's kernels that `framework` cannot be told to run: unfused attention without a mask
// (training.softmax scale-softmax: a GPT's attention is causal), the scale, mask and softmax
// unfused where the framework has no switch for it (`unfused_softmax_switch` false), a dropout
// after the attention but not after the MLP (training.mlp_dropout false: the frameworks' hidden
// dropout runs after both), and fp8 inputs cast where the framework's modules do not cast them
// (`fp8`).
std::vector<std::string> KernelDifferences(const Plan& plan, std::string_view framework,
                                           bool unfused_softmax_switch, FrameworkFp8Cast fp8);

// Megatron's and torchtitan's layers per virtual stage count the ends the split counts.
int LayersPerVirtualStage(const Plan& plan);

// Megatron-Core splits layers evenly over the stages unless told otherwise: domino's uneven stages
// (layers only, no interleaving; the middle stages take the remainder first) as its first- and
// last-stage layer counts when the middle stages are equal (`layout` empty), else as an explicit
// layout (E the embedding, t a layer, L the loss, | between stages: `first` and `last` 0).
struct UnevenStages {
  int first = 0, last = 0;
  std::string layout;
};
// Nothing when the stages are even.
std::optional<UnevenStages> MegatronUnevenStages(const Plan& plan);

// The Megatron-Core layer spec names of an attention kernel the plan chooses (AttnBackend:
// flash, Transformer Engine's FlashAttention; unfused; auto lets TE choose: cuDNN's on Hopper).
std::string_view AttentionBackendName(AttentionKernel kernel);

// Megatron needs max_position_embeddings >= seq_length for learned positions.
int MaxPositions(const Plan& plan);

// Command-line arguments one per line, continued with backslashes.
std::string Arguments(const std::vector<std::string>& args);

// The model's features as Megatron-LM's arguments (megatron/training/arguments.py, and from
// core_v0.16.0 the TransformerConfig fields it generates them from): --rotary-percent, and with
// `layer_options` --add-qkv-bias, --qk-layernorm, --window-size and --window-attn-skip-freq.
// DeepSpeed-Domino's Megatron-LM (375395c1) has --rotary-percent only.
std::vector<LaunchedFeature> MegatronFeatures(const ModelSpec& m, bool layer_options);

// The layers a model's window covers as Megatron-Core's window_attn_skip_freq (layers counted from
// 1, a window on those N does not divide), else one 0 or 1 a layer (1: windowed); nothing when it
// covers every layer.
struct WindowLayers {
  int every = 0;
  std::vector<int> pattern;
};
std::optional<WindowLayers> MegatronWindowLayers(const ModelSpec& m);

// The model's shape as Megatron-LM's (and DeepSpeed-Domino's, which forks it) arguments.
// `layer_options`: the framework's layers take grouped-query attention, the MLP's activation and
// the norm from its arguments (Megatron-LM's do; DeepSpeed-Domino's run multi-head attention, GeLU
// and LayerNorm whatever they say). The model's features follow, as MegatronFeatures.
void AddModelArguments(const ModelSpec& m, const Plan& plan, bool layer_options,
                       std::vector<std::string>& args);

// The exporters, as ExportPlan (planner/export.h) describes them.
std::string ExportMegatron(const Plan& plan);
std::string ExportNemo(const Plan& plan);
Result<std::string> ExportDeepSpeed(const Plan& plan);
std::string ExportTorchtitan(const Plan& plan);

}  // namespace domino::export_parts

#endif  // DOMINO_PLANNER_EXPORT_PARTS_H_
