#include "models/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <utility>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "models/hf_config.h"
#include "models/model_limits.h"

namespace domino {

std::string FullAttentionPricing(int tokens) {
  return fmt::format("as full causal attention, the same up to {} tokens",
                     AttentionWindow{.tokens = tokens}.keys());
}

std::string WindowPricing(int tokens) {
  return "as the window where the plan's stack runs it (megatron-core) and context parallelism, "
         "if any, is not the p2p ring, else " +
         FullAttentionPricing(tokens);
}

int FullEvery(const std::vector<bool>& windowed) {
  const int layers = static_cast<int>(windowed.size());
  if (std::find(windowed.begin(), windowed.end(), false) == windowed.end()) return 0;
  for (int n = 2; n <= layers; ++n) {
    bool same = true;
    for (int i = 0; i < layers && same; ++i) same = windowed[i] == ((i + 1) % n != 0);
    if (same) return n;
  }
  return 0;
}
namespace {

constexpr std::array<std::pair<std::string_view, Activation>, 4> kActivations{{
    {"gelu", Activation::kGelu},
    {"swiglu", Activation::kSwiglu},
    {"squared-relu", Activation::kSquaredRelu},
    {"geglu", Activation::kGeglu},
}};
constexpr std::array<std::pair<std::string_view, Norm>, 2> kNorms{{
    {"layernorm", Norm::kLayerNorm},
    {"rmsnorm", Norm::kRmsNorm},
}};
constexpr std::array<std::pair<std::string_view, Positions>, 2> kPositions{{
    {"learned", Positions::kLearned},
    {"rotary", Positions::kRotary},
}};

}  // namespace

std::string_view PositionsName(Positions positions) {
  for (const auto& [name, value] : kPositions)
    if (value == positions) return name;
  return "by-norm";
}

std::string_view ActivationName(Activation activation) {
  for (const auto& [name, value] : kActivations)
    if (value == activation) return name;
  return "unknown";
}

std::string_view NormName(Norm norm) {
  for (const auto& [name, value] : kNorms)
    if (value == norm) return name;
  return "unknown";
}

std::vector<PricedFeature> PricedFeatures(const ModelSpec& m) {
  const std::string_view norm = m.norm == Norm::kRmsNorm ? "an RMSNorm" : "a LayerNorm";
  std::vector<PricedFeature> out;
  if (m.qk_norm)
    out.push_back({ModelFeature::kQkNorm,
                   fmt::format("{} on each head of Q and of K (qk_norm)", norm),
                   "priced with them, exported without them"});
  if (m.attention_softcap > 0)
    out.push_back({ModelFeature::kNone,
                   fmt::format("attention scores soft-capped at {:g} (attention_softcap)",
                               m.attention_softcap),
                   "priced with the cap, exported without it"});
  if (m.logit_softcap > 0)
    out.push_back({ModelFeature::kNone,
                   fmt::format("logits soft-capped at {:g} (logit_softcap)", m.logit_softcap),
                   "priced with the cap, exported without it"});
  if (m.post_norms)
    out.push_back({ModelFeature::kNone,
                   fmt::format("{} after the attention and after the MLP besides the ones before "
                               "them (post_norms)",
                               norm),
                   "priced with them, exported without them"});
  return out;
}

std::string Approximation::Text() const {
  return fmt::format("{}: priced {}{}", what, feature == ModelFeature::kNone ? "and exported " : "",
                     as);
}

namespace {

// `window:` as a number of tokens (every layer) or a mapping of AttentionWindow's fields.
void ReadWindow(YamlMap& map, ModelSpec* model) {
  const YAML::Node node = map.Raw("window");
  if (!node.IsDefined()) return;
  AttentionWindow w;
  if (!node.IsScalar() && !node.IsMap()) {
    return map.Fail("window",
                    "expected a number of tokens or a mapping (tokens, first_layer, "
                    "every, full_every)");
  } else if (node.IsScalar()) {
    map.Int("window", &w.tokens, Need::kOptional, kSeqLenRange);
  } else if (std::optional<YamlMap> sub = map.Map("window", Need::kOptional)) {
    sub->Int("tokens", &w.tokens, Need::kRequired, kSeqLenRange);
    sub->Int("first_layer", &w.first_layer, Need::kOptional, IntRange{0, kLayersRange.max});
    sub->Int("every", &w.every, Need::kOptional, kLayersRange);
    sub->Int("full_every", &w.full_every, Need::kOptional, IntRange{0, kLayersRange.max});
    if (!sub->failed() && w.full_every == 1)
      sub->Fail("full_every",
                "must be 0 (no full layers) or at least 2: 1 would make every layer "
                "attend in full");
    if (!sub->failed() && w.first_layer >= model->layers)
      sub->Fail("first_layer",
                fmt::format("must be below layers ({}): layers count from 0", model->layers));
    (void)sub->Finish();
  }
  if (map.failed()) return;
  const int covered = w.CoveredLayers(model->layers);
  if (covered == 0) return map.Fail("window", "covers no layer: every layer would attend in full");
  model->window = w;
  model->approximations.push_back(
      {ModelFeature::kWindow,
       fmt::format(
           "a sliding attention window of {} tokens before each query (window) {}", w.tokens,
           covered == model->layers ? std::string("on every layer")
                                    : fmt::format("on {} of {} layers", covered, model->layers)),
       WindowPricing(w.tokens)});
}

// The attention's features (ModelSpec::qkv_bias, qk_norm, rotary_fraction, window), which
// ParseHfConfig sets from a config.json. Each one given but qk_norm, which domino prices, is an
// approximation too: domino prices the model without it, and an export launches it.
void ReadFeatures(YamlMap& map, ModelSpec* model) {
  map.Bool("qkv_bias", &model->qkv_bias, Need::kOptional);
  map.Bool("qk_norm", &model->qk_norm, Need::kOptional);
  map.Bool("post_norms", &model->post_norms, Need::kOptional);
  map.Real("logit_softcap", &model->logit_softcap, Need::kOptional, RealRange{0, 1e6});
  map.Real("attention_softcap", &model->attention_softcap, Need::kOptional, RealRange{0, 1e6});
  map.Real("rotary_fraction", &model->rotary_fraction, Need::kOptional, RealRange{0, 1});
  if (map.failed()) return;
  std::vector<Approximation>& out = model->approximations;
  if (model->qkv_bias && model->bias)
    return map.Fail("qkv_bias",
                    "biases on Q, K and V only need bias: false (with bias true, "
                    "every linear has its biases)");
  if (model->qkv_bias)
    out.push_back({ModelFeature::kQkvBias, "biases on Q, K and V only (qkv_bias)", "without them"});
  if (model->rotary_fraction < 1) {
    if (model->learned_positions())
      return map.Fail("rotary_fraction",
                      "needs rotary positions; this model's are learned "
                      "(positions: rotary, or norm: rmsnorm)");
    out.push_back({ModelFeature::kPartialRotary,
                   fmt::format("rotary positions on {:g}% of each head (rotary_fraction {:g})",
                               100 * model->rotary_fraction, model->rotary_fraction),
                   "as rotating all of it"});
  }
  ReadWindow(map, model);
}

}  // namespace

ModelSpec ReadModel(YamlMap& map) {
  ModelSpec model;
  map.Name("name", &model.name, Need::kRequired);
  map.Int("layers", &model.layers, Need::kRequired, kLayersRange);
  map.Int("hidden", &model.hidden, Need::kRequired, kHiddenRange);
  map.Int("heads", &model.heads, Need::kRequired, kHeadsRange);
  model.kv_heads = model.heads;
  map.Int("kv_heads", &model.kv_heads, Need::kOptional, kHeadsRange);
  map.Int("head_dim", &model.head_dim, Need::kOptional, kHiddenRange);
  map.Int("ffn", &model.ffn, Need::kRequired, kFfnRange);
  map.Int("vocab", &model.vocab, Need::kRequired, kVocabRange);
  map.Int("seq_len", &model.seq_len, Need::kRequired, kSeqLenRange);
  map.Enum<Activation>("activation", &model.activation, Need::kRequired, kActivations);
  map.Enum<Norm>("norm", &model.norm, Need::kRequired, kNorms);
  map.Enum<Positions>("positions", &model.positions, Need::kOptional, kPositions);
  map.Bool("bias", &model.bias, Need::kOptional);
  map.Bool("tied_embeddings", &model.tied_embeddings, Need::kOptional);

  // Cross-field rules need every size read successfully (and so nonzero) first.
  if (!map.failed()) {
    if (model.head_dim == 0 && model.hidden % model.heads != 0) {
      map.Fail("hidden", fmt::format("hidden ({}) must be divisible by heads ({}), or head_dim "
                                     "given",
                                     model.hidden, model.heads));
    } else if (model.heads % model.kv_heads != 0) {
      map.Fail("kv_heads", fmt::format("heads ({}) must be divisible by kv_heads ({})", model.heads,
                                       model.kv_heads));
    }
    const int64_t width =
        int64_t{model.heads} * (model.head_dim > 0 ? model.head_dim : model.hidden / model.heads);
    if (!map.failed() && width > kAttentionWidthRange.max) {
      map.Fail("head_dim",
               fmt::format("heads x head_dim = {} x {} = {} must be at most {}", model.heads,
                           model.head_dim, width, kAttentionWidthRange.max));
    } else if (!map.failed() && !model.learned_positions() && model.head_width() % 2 != 0) {
      // Rotary embeddings turn pairs of a head's features (Megatron, Transformer Engine and
      // transformers alike).
      map.Fail(
          model.head_dim > 0 ? "head_dim" : "heads",
          fmt::format("rotary positions need an even head width; {} is odd{}", model.head_width(),
                      model.head_dim > 0
                          ? ""
                          : fmt::format(" (hidden {} / heads {})", model.hidden, model.heads)));
    }
    if (int64_t{model.heads} * model.head_dim == model.hidden) model.head_dim = 0;
  }
  if (!map.failed()) ReadFeatures(map, &model);
  return model;
}

Result<ModelSpec> ParseModel(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, std::string(file));
  ModelSpec model = ReadModel(map);
  DOMINO_RETURN_IF_ERROR(map.Finish());
  return model;
}

std::string ModelToFlowYaml(const ModelSpec& m) {
  std::string name;
  for (char c : m.name) {  // a YAML double-quoted scalar
    if (static_cast<unsigned char>(c) < 0x20) {
      name += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      continue;
    }
    if (c == '"' || c == '\\') name += '\\';
    name += c;
  }
  // The attention's features, each where it is set.
  std::string features;
  if (m.qkv_bias) features += ", qkv_bias: true";
  if (m.qk_norm) features += ", qk_norm: true";
  if (m.post_norms) features += ", post_norms: true";
  if (m.logit_softcap > 0) features += fmt::format(", logit_softcap: {}", m.logit_softcap);
  if (m.attention_softcap > 0)
    features += fmt::format(", attention_softcap: {}", m.attention_softcap);
  if (m.rotary_fraction < 1) features += fmt::format(", rotary_fraction: {}", m.rotary_fraction);
  if (m.window.tokens > 0) {
    const AttentionWindow& w = m.window;
    features += fmt::format(", window: {{tokens: {}", w.tokens);
    if (w.first_layer > 0) features += fmt::format(", first_layer: {}", w.first_layer);
    if (w.every > 1) features += fmt::format(", every: {}", w.every);
    if (w.full_every > 0) features += fmt::format(", full_every: {}", w.full_every);
    features += "}";
  }
  return fmt::format(
      "{{name: \"{}\", layers: {}, hidden: {}, heads: {}, kv_heads: {}, {}ffn: {}, vocab: {}, "
      "seq_len: {}, activation: {}, norm: {}, {}bias: {}, tied_embeddings: {}{}}}",
      name, m.layers, m.hidden, m.heads, m.kv_heads,
      m.head_dim > 0 ? fmt::format("head_dim: {}, ", m.head_dim) : "", m.ffn, m.vocab, m.seq_len,
      ActivationName(m.activation), NormName(m.norm),
      m.positions == Positions::kByNorm
          ? ""
          : fmt::format("positions: {}, ", PositionsName(m.positions)),
      m.bias, m.tied_embeddings, features);
}

Result<ModelSpec> LoadModel(std::string_view name_or_path) {
  if (const EmbeddedFile* entry = FindEmbedded(ModelCatalog(), name_or_path))
    return ParseModel(entry->text, entry->path);

  std::string path(name_or_path);
  std::error_code ec;
  if (!path.empty() && std::filesystem::exists(path, ec)) {
    if (IsHfConfigPath(path)) return LoadHfConfig(path);
    Result<std::string> text = ReadTextFile(path);
    if (!text.ok()) return text.error();
    return ParseModel(*text, path);
  }

  std::string names;
  for (const EmbeddedFile& file : ModelCatalog())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", file.name);
  return Error(fmt::format("unknown model '{}': not a catalog name ({}) nor a readable file",
                           name_or_path, names));
}

}  // namespace domino
