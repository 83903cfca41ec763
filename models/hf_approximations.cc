#include <fmt/format.h>

#include <algorithm>
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

// The layers a `layer_types` list slides on (one "sliding_attention" or "full_attention" a
// layer, as transformers 4.53 on writes for Gemma 2, Gemma 3 and Qwen), or nullopt where the config
// gives none (or an error).
std::optional<std::vector<bool>> ReadLayerTypes(ConfigReader& config, int layers) {
  auto [key, types] = config.Find({"layer_types"});
  if (!types.IsDefined()) return std::nullopt;
  std::vector<bool> sliding(layers);
  bool ok = types.IsSequence() && static_cast<int>(types.size()) == layers;
  for (size_t i = 0; ok && i < types.size(); ++i) {
    ok = types[i].IsScalar() && types[i].Tag() == "!" &&
         (types[i].Scalar() == "sliding_attention" || types[i].Scalar() == "full_attention");
    if (ok) sliding[i] = types[i].Scalar() == "sliding_attention";
  }
  if (!ok) {
    config.FailAt(types.Mark(), key,
                  fmt::format("expected a list of num_hidden_layers ({}) \"sliding_attention\" "
                              "or \"full_attention\"",
                              layers));
    return std::nullopt;
  }
  return sliding;
}

// A window of `tokens` on the layers `sliding` marks (`source` says where the list comes from):
// AttentionWindow states it where every layer slides, where the full layers are every
// full_every-th (Gemma 3's sliding_window_pattern; Gemma 2's every other layer) or where they are
// the first ones (Qwen's max_window_layers), and Megatron-Core launches those; a list that no
// window states exactly is priced and exported as full attention on every layer, its sliding
// layers named.
void AddListedWindow(int tokens, const std::vector<bool>& sliding, const std::string& source,
                     ModelSpec* model) {
  std::vector<int> slide, full;
  for (int i = 0; i < model->layers; ++i) (sliding[i] ? slide : full).push_back(i);
  if (slide.empty()) return;  // every layer attends in full
  AttentionWindow w{.tokens = tokens};
  const bool full_first = std::is_sorted(sliding.begin(), sliding.end());  // full, then sliding
  if (!full.empty()) {
    if (full_first)
      w.first_layer = static_cast<int>(full.size());
    else
      w.full_every = FullEvery(sliding);
  }
  const std::string what = WindowText(w);
  if (full.empty()) {
    model->window = w;
    model->approximations.push_back({ModelFeature::kWindow,
                                     fmt::format("{} on every layer ({})", what, source),
                                     WindowPricing(w.tokens)});
  } else if (full_first || w.full_every > 0) {
    model->window = w;
    model->approximations.push_back(
        {ModelFeature::kWindow,
         fmt::format("{} on {} of {} layers ({}: {} attend{} in full)", what, slide.size(),
                     model->layers, source, LayerList(full), full.size() == 1 ? "s" : ""),
         WindowPricing(w.tokens)});
  } else {
    model->approximations.push_back(
        {ModelFeature::kNone,
         fmt::format("{} on {} ({}), a layer pattern domino's window does not state", what,
                     LayerList(slide), source),
         FullAttentionPricing(w.tokens)});
  }
}

// The sliding window a family's config sets, transformers' sliding_window W (W - 1 tokens before
// each query, AttentionWindow), on the layers its class places it:
// - Mistral and Phi-3: every layer. Left out, MistralConfig's default 4096, Phi3Config's none.
// - Gemma 2: layers 0, 2, 4, ... (Gemma2Config), default 4096.
// - Gemma 3: five layers of six, layer i full when (i + 1) % sliding_window_pattern == 0
//   (Gemma3TextConfig, default 6), default 4096.
// - Qwen2 and Qwen3: only with use_sliding_window, and there on the layers from max_window_layers
//   on (Qwen2Config and Qwen3Config: layer i slides when i >= max_window_layers, default 28; the
//   first ones attend in full, whatever the key's docstring says), default 4096.
// A `layer_types` list, where Gemma 2, Gemma 3 or Qwen give one, decides which layers slide
// instead. A null sliding_window is no window (MistralConfig, Phi3Config, Qwen: None); on Gemma's
// sliding layers it is an error, as transformers' mask raises. A window as long as the model's
// sequence changes nothing and is left out.
void AddWindow(ConfigReader& config, Family family, ModelSpec* model) {
  const bool qwen = family == Family::kQwen2 || family == Family::kQwen3;
  const bool gemma = family == Family::kGemma2 || family == Family::kGemma3;
  if (!(family == Family::kMistral || family == Family::kPhi3 || gemma ||
        (qwen && config.Bool("use_sliding_window", false))))
    return;
  std::optional<std::vector<bool>> sliding = family == Family::kMistral || family == Family::kPhi3
                                                 ? std::nullopt
                                                 : ReadLayerTypes(config, model->layers);
  std::string source = "layer_types";
  if (config.error()) return;
  if (!sliding && family == Family::kGemma3) {
    const int64_t pattern =
        config.Int({"sliding_window_pattern"}, IntRange{1, kLayersRange.max}, int64_t{6});
    if (config.error()) return;  // a pattern out of range reads as 0: no layer is divided by it
    sliding.emplace(model->layers);
    for (int i = 0; i < model->layers; ++i) (*sliding)[i] = (i + 1) % pattern != 0;
    source = fmt::format("sliding_window_pattern {}", pattern);
  }
  const bool slides =
      !sliding || std::find(sliding->begin(), sliding->end(), true) != sliding->end();
  if (config.IsNull("sliding_window")) {
    if (gemma && slides)
      config.Fail("sliding_window",
                  "null, but the model has sliding layers (transformers' mask raises for them)");
    return;
  }
  const std::optional<double> window = config.NumberOr(
      "sliding_window", family == Family::kPhi3 ? std::nullopt : std::optional<double>(4096));
  if (!window || *window <= 0 || *window >= model->seq_len) return;
  if (*window < 2)
    return config.Fail("sliding_window",
                       "must be at least 2: a window of 1 (each query attending to itself alone) "
                       "is not modelled");
  // transformers' W counts the query itself: W - 1 earlier tokens (AttentionWindow).
  const int tokens = static_cast<int>(*window) - 1;
  if (sliding) return AddListedWindow(tokens, *sliding, source, model);
  AttentionWindow w{.tokens = tokens};
  std::string layers;
  if (family == Family::kGemma2) {
    w.every = 2;
    layers = " on every other layer";
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
    // Priced (ModelSpec::attention_softcap, logit_softcap): no approximation. Left out, Gemma 2's
    // are Gemma2Config's defaults, 50 and 30 (Gemma3TextConfig's are None); null is none.
    const bool gemma2 = family == Family::kGemma2;
    if (const std::optional<double> cap = config.NumberOr(
            "attn_logit_softcapping", gemma2 ? std::optional<double>(50.0) : std::nullopt);
        cap && *cap > 0)
      model->attention_softcap = *cap;
    if (const std::optional<double> cap = config.NumberOr(
            "final_logit_softcapping", gemma2 ? std::optional<double>(30.0) : std::nullopt);
        cap && *cap > 0)
      model->logit_softcap = *cap;
  }
  // EmbeddingGemma's encoder (Gemma3TextConfig's use_bidirectional_attention) attends both ways.
  if (family == Family::kGemma3 && config.Bool("use_bidirectional_attention", false))
    config.Fail("use_bidirectional_attention",
                "true: attention over the whole sequence both ways (EmbeddingGemma's), which "
                "domino does not model: it prices causal decoders");
  // Biases on one side only: transformers' attention_bias biases Q, K, V and the output
  // projection, Llama's mlp_bias the MLP; ModelSpec::bias puts them on every linear.
  if (family == Family::kLlama || family == Family::kQwen3 || IsGemma(family)) {
    const bool attention = config.Bool("attention_bias", false);
    const bool mlp = family == Family::kLlama && config.Bool("mlp_bias", false);
    if (attention != mlp)
      out.push_back({ModelFeature::kNone,
                     attention ? "biases on the attention's linears only (attention_bias), none "
                                 "on the MLP's"
                               : "biases on the MLP's linears only (mlp_bias), none on the "
                                 "attention's",
                     "with biases on every linear"});
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
  // GPT-NeoX's rotary_pct has no meaning for null (GPTNeoXConfig multiplies by it).
  if (family == Family::kGptNeox && !nested && config.IsNull(key))
    config.Fail(key, "expected a number, got null");
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
