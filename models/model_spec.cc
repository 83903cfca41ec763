#include "models/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "models/hf_config.h"
#include "models/model_limits.h"

namespace domino {

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

constexpr std::array<std::pair<std::string_view, Activation>, 3> kActivations{{
    {"gelu", Activation::kGelu},
    {"swiglu", Activation::kSwiglu},
    {"squared-relu", Activation::kSquaredRelu},
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

std::string Approximation::Text() const {
  return fmt::format("{}: priced {}{}", what, feature == ModelFeature::kNone ? "and exported " : "",
                     as);
}

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
  return fmt::format(
      "{{name: \"{}\", layers: {}, hidden: {}, heads: {}, kv_heads: {}, {}ffn: {}, vocab: {}, "
      "seq_len: {}, activation: {}, norm: {}, {}bias: {}, tied_embeddings: {}}}",
      name, m.layers, m.hidden, m.heads, m.kv_heads,
      m.head_dim > 0 ? fmt::format("head_dim: {}, ", m.head_dim) : "", m.ffn, m.vocab, m.seq_len,
      ActivationName(m.activation), NormName(m.norm),
      m.positions == Positions::kByNorm
          ? ""
          : fmt::format("positions: {}, ", PositionsName(m.positions)),
      m.bias, m.tied_embeddings);
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
