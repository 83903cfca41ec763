#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/hf_config_reader.h"
#include "models/model_limits.h"

// What a Hugging Face config's family runs that domino prices otherwise: its approximations, and
// the model fields an export launches (Q/K/V-only biases, per-head Q and K norms, partial rotary,
// sliding windows).
namespace domino::hf {
namespace {

// Layer numbers (from 0) in words: "layer 5", "layers 5, 11, 17".
std::string LayerList(const std::vector<int>& layers) {
  std::string text;
  for (int l : layers) text += fmt::format("{}{}", text.empty() ? "" : ", ", l);
  return (layers.size() == 1 ? "layer " : "layers ") + text;
}

// "a sliding attention window of 4096 tokens (sliding_window: each query and the 4095 before
// it)": transformers' count, the query included, and domino's window.tokens.
std::string WindowText(const AttentionWindow& w) {
  return fmt::format(
      "a sliding attention window of {} tokens (sliding_window: each query and the {} before it)",
      w.keys(), w.tokens);
}

// Gemma 3 slides on five layers of six: transformers' Gemma3TextConfig makes layer i full when
// (i + 1) % sliding_window_pattern == 0 (default 6), sliding otherwise; newer transformers (4.53
// on, as we read it) write `layer_types`, one "sliding_attention" or "full_attention" a layer,
// which decides where given.
// AttentionWindow::full_every states such a pattern (and Megatron-Core's integer
// window_attn_skip_freq launches it); a list that no window states exactly is priced and exported
// as full attention on every layer, its sliding layers named.
void AddGemma3Window(ConfigReader& config, AttentionWindow w, ModelSpec* model) {
  std::vector<bool> sliding(model->layers);
  std::string source;
  if (auto [key, types] = config.Find({"layer_types"}); types.IsDefined()) {
    bool ok = types.IsSequence() && static_cast<int>(types.size()) == model->layers;
    for (size_t i = 0; ok && i < types.size(); ++i) {
      ok = types[i].IsScalar() && types[i].Tag() == "!" &&
           (types[i].Scalar() == "sliding_attention" || types[i].Scalar() == "full_attention");
      if (ok) sliding[i] = types[i].Scalar() == "sliding_attention";
    }
    if (!ok) {
      config.FailAt(types.Mark(), key,
                    fmt::format("expected a list of num_hidden_layers ({}) \"sliding_attention\" "
                                "or \"full_attention\"",
                                model->layers));
      return;
    }
    source = "layer_types";
  } else {
    const int64_t pattern =
        config.Int({"sliding_window_pattern"}, IntRange{1, kLayersRange.max}, int64_t{6});
    for (int i = 0; i < model->layers; ++i) sliding[i] = (i + 1) % pattern != 0;
    source = fmt::format("sliding_window_pattern {}", pattern);
  }
  std::vector<int> slide, full;
  for (int i = 0; i < model->layers; ++i) (sliding[i] ? slide : full).push_back(i);
  const std::string attend_in_full =
      fmt::format("{} attend{} in full", LayerList(full), full.size() == 1 ? "s" : "");
  if (slide.empty()) return;  // every layer attends in full
  w.full_every = FullEvery(sliding);
  const std::string what = WindowText(w);
  if (full.empty()) {
    model->window = w;
    model->approximations.push_back({ModelFeature::kWindow,
                                     fmt::format("{} on every layer ({})", what, source),
                                     WindowPricing(w.tokens)});
  } else if (w.full_every > 0) {
    model->window = w;
    model->approximations.push_back(
        {ModelFeature::kWindow,
         fmt::format("{} on {} of {} layers ({}: {})", what, slide.size(), model->layers, source,
                     attend_in_full),
         WindowPricing(w.tokens)});
  } else {
    model->approximations.push_back(
        {ModelFeature::kNone,
         fmt::format("{} on {} ({}), a layer pattern domino's window does not state", what,
                     LayerList(slide), source),
         FullAttentionPricing(w.tokens)});
  }
}

// Mistral's and Phi-3's window (null: none) on every layer, Gemma 2's on every other one from the
// first (transformers' Gemma2Config: layers 0, 2, 4, ... slide); Qwen2's and Qwen3's only with
// use_sliding_window, and there on the layers from max_window_layers on (Qwen2Config and
// Qwen3Config: layer i slides when i >= max_window_layers, default 28; the first ones attend in
// full, whatever the key's docstring says); Gemma 3's as AddGemma3Window says. A window as long
// as the model's sequence changes nothing and is left out.
void AddWindow(ConfigReader& config, Family family, ModelSpec* model) {
  const bool qwen = family == Family::kQwen2 || family == Family::kQwen3;
  const bool windowed = family == Family::kMistral || family == Family::kPhi3 ||
                        family == Family::kGemma2 || family == Family::kGemma3 ||
                        (qwen && config.Bool("use_sliding_window", false));
  // Gemma3TextConfig's default sliding_window is 4096 (the released configs say 512 or 1024).
  const std::optional<double> window = family == Family::kGemma3
                                           ? Number(config, "sliding_window").value_or(4096)
                                           : Number(config, "sliding_window");
  if (!windowed || !window || *window <= 0 || *window >= model->seq_len) return;
  if (*window < 2)
    return config.Fail("sliding_window",
                       "must be at least 2: a window of 1 (each query attending to itself alone) "
                       "is not modelled");
  // transformers' W counts the query itself: W - 1 earlier tokens (AttentionWindow).
  AttentionWindow w{.tokens = static_cast<int>(*window) - 1};
  std::string layers;
  if (family == Family::kGemma2) {
    w.every = 2;
    layers = " on every other layer";
  }
  if (family == Family::kGemma3) {
    AddGemma3Window(config, w, model);
    return;
  }
  if (qwen) {
    w.first_layer = static_cast<int>(
        config.Int({"max_window_layers"}, IntRange{0, kLayersRange.max}, int64_t{28}));
    if (w.first_layer >= model->layers) return;  // every layer attends in full
    layers = w.first_layer == 0
                 ? " on every layer (max_window_layers 0)"
                 : fmt::format(
                       " on the last {} of {} layers (the first max_window_layers {} "
                       "attend in full)",
                       model->layers - w.first_layer, model->layers, w.first_layer);
  }
  model->window = w;
  model->approximations.push_back(
      {ModelFeature::kWindow, fmt::format("{}{}", WindowText(w), layers), WindowPricing(w.tokens)});
}

}  // namespace

void AddApproximations(ConfigReader& config, Family family, ModelSpec* model) {
  std::vector<Approximation>& out = model->approximations;
  if (family == Family::kQwen2) {
    model->qkv_bias = true;
    out.push_back({ModelFeature::kQkvBias, "biases on Q, K and V only (Qwen2)", "without them"});
  }
  // Qwen3's and Gemma 3's q_norm and k_norm: priced (ModelSpec::qk_norm), no approximation.
  if (family == Family::kQwen3 || family == Family::kGemma3) model->qk_norm = true;
  // Gemma's GeLU-gated MLP: priced (Activation::kGeglu), no approximation.
  // Gemma 3 keeps Gemma 2's post-norms (priced: ModelSpec::post_norms, no approximation); its
  // soft-caps are null unless a config sets them (Gemma3TextConfig's defaults), and QK-norm takes
  // their place.
  if (family == Family::kGemma2 || family == Family::kGemma3) {
    model->post_norms = true;
    // Priced (ModelSpec::attention_softcap, logit_softcap): no approximation.
    if (const std::optional<double> cap = Number(config, "attn_logit_softcapping"); cap && *cap > 0)
      model->attention_softcap = *cap;
    if (const std::optional<double> cap = Number(config, "final_logit_softcapping");
        cap && *cap > 0)
      model->logit_softcap = *cap;
  }
  // The share of each head the rotary embeddings turn: partial_rotary_factor, which transformers'
  // rope initialization reads on any config (1 unless given; Phi-4-mini's 0.75), GPT-NeoX's
  // rotary_pct (GPTNeoXConfig's default 0.25), or in transformers 5 either as rope_parameters'
  // partial_rotary_factor (its configs move the legacy keys there). Megatron-Core rotates the
  // first fraction of each head's features, as these families do.
  // Not const: a const node's [] of a missing key is an invalid node, which throws when read.
  YAML::Node parameters = config.Find({"rope_parameters"}).second;
  const YAML::Node factor = parameters.IsMap() ? parameters["partial_rotary_factor"] : YAML::Node();
  const bool nested = factor.IsDefined() && !factor.IsNull();
  const std::string_view key = nested ? "rope_parameters.partial_rotary_factor"
                               : family == Family::kGptNeox ? "rotary_pct"
                                                            : "partial_rotary_factor";
  const YAML::Node value = nested ? factor : config.Find({key}).second;
  const std::optional<double> given = NumberOf(value);
  const bool rotary_positions = family != Family::kGpt2;  // GPT-2 learns its positions
  if (rotary_positions && value.IsDefined() && !given) {
    config.FailAt(value.Mark(), key, "expected a number");
  } else if (rotary_positions) {
    const double rotary = given.value_or(family == Family::kGptNeox ? 0.25 : 1.0);
    if (rotary <= 0 || rotary > 1) {
      config.FailAt(value.Mark(), key,
                    fmt::format("must be above 0 and at most 1, got {:g}", rotary));
    } else if (rotary < 1) {
      model->rotary_fraction = rotary;
      out.push_back({ModelFeature::kPartialRotary,
                     fmt::format("rotary positions on {:g}% of each head ({} {:g})", 100 * rotary,
                                 key, rotary),
                     "as rotating all of it"});
    }
  }
  if (family == Family::kGptNeox) {
    // GPTNeoXConfig's default: use_parallel_residual true.
    if (!config.Bool("attention_bias", true))
      out.push_back({ModelFeature::kNone,
                     "no biases on the attention's linears (attention_bias false), its MLP's kept",
                     "with biases on every linear"});
    if (config.Bool("use_parallel_residual", true))
      out.push_back({ModelFeature::kNone,
                     "attention and MLP side by side on one input (use_parallel_residual)",
                     "one after the other"});
  }
  AddWindow(config, family, model);
}

}  // namespace domino::hf
