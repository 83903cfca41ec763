#include "models/hf_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "models/hf_config_reader.h"
#include "models/model_limits.h"

namespace domino {
namespace {

using hf::ConfigReader;
using hf::Family;
using hf::IsGemma;
using hf::Number;
using hf::NumberOf;

struct FamilyName {
  std::string_view model_type;
  std::string_view architecture;  // the class in `architectures`
  Family family;
  std::string_view config_class;  // transformers' class of the (language model's) config
  // The language model's keys are in `text_config`, beside a vision tower's in vision_config
  // (transformers' Gemma3Config holds a Gemma3TextConfig and a SiglipVisionConfig).
  bool in_text_config = false;
};
constexpr std::array<FamilyName, 11> kFamilies{{
    {"llama", "LlamaForCausalLM", Family::kLlama, "LlamaConfig"},
    {"mistral", "MistralForCausalLM", Family::kMistral, "MistralConfig"},
    {"phi3", "Phi3ForCausalLM", Family::kPhi3, "Phi3Config"},
    {"qwen2", "Qwen2ForCausalLM", Family::kQwen2, "Qwen2Config"},
    {"qwen3", "Qwen3ForCausalLM", Family::kQwen3, "Qwen3Config"},
    {"gemma", "GemmaForCausalLM", Family::kGemma, "GemmaConfig"},
    {"gemma2", "Gemma2ForCausalLM", Family::kGemma2, "Gemma2Config"},
    {"gemma3_text", "Gemma3ForCausalLM", Family::kGemma3, "Gemma3TextConfig"},  // Gemma 3 1B
    {"gemma3", "Gemma3ForConditionalGeneration", Family::kGemma3, "Gemma3TextConfig",
     true},  // 4B, 12B, 27B
    {"gpt2", "GPT2LMHeadModel", Family::kGpt2, "GPT2Config"},
    {"gpt_neox", "GPTNeoXForCausalLM", Family::kGptNeox, "GPTNeoXConfig"},
}};

bool IsGated(Family family) { return family != Family::kGpt2 && family != Family::kGptNeox; }

// The key/value heads of a gated family's config that leaves num_key_value_heads out: its class's
// default (MistralConfig 8; Qwen2Config and Qwen3Config 32; GemmaConfig 16; Gemma2Config and
// Gemma3TextConfig 4), or nullopt for the heads (LlamaConfig's and Phi3Config's None).
std::optional<int> KvHeadsDefault(Family family) {
  switch (family) {
    case Family::kMistral:
      return 8;
    case Family::kQwen2:
    case Family::kQwen3:
      return 32;
    case Family::kGemma:
      return 16;
    case Family::kGemma2:
    case Family::kGemma3:
      return 4;
    default:
      return std::nullopt;
  }
}

// Activations transformers names for the MLPs domino models: gated (SiLU or GeLU gate, three
// matrices) in the Llama family, plain GeLU (two matrices) in GPT-2 and GPT-NeoX.
constexpr std::array<std::string_view, 6> kGeluNames{
    "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate"};
constexpr std::array<std::string_view, 2> kSiluNames{"silu", "swish"};

template <size_t N>
bool Contains(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

// num_local_experts, Qwen's num_experts, DeepSeek's n_routed_experts) or a language model nested
// in text_config (Llava, Mistral 3; Gemma 3's is read).
std::string WhyUnsupported(const ConfigReader& config) {
  for (std::string_view key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    if (std::optional<double> experts = NumberOf(config.Find({key}).second);
        experts && *experts > 1)
      return fmt::format(": a mixture of experts ({} {:g}), which domino does not model", key,
                         *experts);
  }
  if (config.Find({"text_config"}).second.IsMap())
    return ": its language model is in text_config, which domino does not read (give its sizes "
           "in a model YAML)";
  return "";
}

// The family from `model_type`, else from the first class in `architectures`.
const FamilyName* ReadFamily(ConfigReader& config) {
  std::string known;
  for (const FamilyName& f : kFamilies)
    known += fmt::format("{}{}", known.empty() ? "" : ", ", f.model_type);
  if (std::optional<std::string> type = config.String("model_type")) {
    for (const FamilyName& f : kFamilies)
      if (f.model_type == *type) return &f;
    config.Fail("model_type", fmt::format("unsupported architecture '{}'{}; domino reads {}", *type,
                                          WhyUnsupported(config), known));
    return nullptr;
  }
  auto [key, list] = config.Find({"architectures"});
  if (list.IsSequence() && list.size() > 0 && list[0].IsScalar()) {
    for (const FamilyName& f : kFamilies)
      if (f.architecture == list[0].Scalar()) return &f;
    config.FailAt(list[0].Mark(), "architectures",
                  fmt::format("unsupported architecture '{}'{}; domino reads {}", list[0].Scalar(),
                              WhyUnsupported(config), known));
    return nullptr;
  }
  config.Fail("model_type",
              fmt::format("missing required key (nor an `architectures` list): a Hugging Face "
                          "config names its architecture, one of {}",
                          known));
  return nullptr;
}

// The MLP's activation: GeLU (two matrices) in GPT-2 and GPT-NeoX; in the gated families SwiGLU,
// or GeGLU where the config names a GeLU (Gemma's gelu_pytorch_tanh, its default when it names
// none: transformers' GemmaConfig and its successors).
Activation ReadActivation(ConfigReader& config, Family family) {
  // The key the family's MLP reads: GPT-2's activation_function, Gemma 2's and Gemma 3's
  // hidden_activation (Gemma2MLP, Gemma3MLP), the others' hidden_act (Gemma 1's GemmaMLP too).
  const std::string_view key = family == Family::kGpt2 ? "activation_function"
                               : family == Family::kGemma2 || family == Family::kGemma3
                                   ? "hidden_activation"
                                   : "hidden_act";
  if (auto [null_key, null] = config.FindNull({key}); null.IsDefined()) {
    config.FailAt(null.Mark(), key, "expected an activation's name, got null");
    return Activation::kGelu;
  }
  auto [found, value] = config.Find({key});
  if (!IsGated(family)) {
    if (value.IsDefined() && !(value.IsScalar() && Contains(kGeluNames, value.Scalar())))
      config.FailAt(value.Mark(), found,
                    fmt::format("unsupported activation '{}': domino models GeLU MLPs",
                                value.IsScalar() ? value.Scalar() : ""));
    return Activation::kGelu;
  }
  if (!value.IsDefined()) return IsGemma(family) ? Activation::kGeglu : Activation::kSwiglu;
  const std::string name = value.IsScalar() ? value.Scalar() : "";
  if (Contains(kGeluNames, name)) return Activation::kGeglu;
  if (!Contains(kSiluNames, name))
    config.FailAt(value.Mark(), found,
                  fmt::format("unsupported activation '{}': domino models gated SiLU (SwiGLU) or "
                              "GeLU (GeGLU) MLPs",
                              name));
  return Activation::kSwiglu;
}

std::string NameFromPath(std::string_view file) {
  std::filesystem::path path(file);
  if (path.filename() == "config.json") {
    // The folder's own name, also where the path names it "." or ".." ("./config.json").
    std::error_code ec;
    const std::filesystem::path folder =
        std::filesystem::absolute(path, ec).lexically_normal().parent_path().filename();
    if (!ec && !folder.empty()) return folder.string();
  }
  return path.stem().string();
}

}  // namespace

Result<ModelSpec> ParseHfConfig(std::string_view text, std::string_view file) {
  // JSON's own grammar first, as Transformers' json.load reads it: YAML, which then reads the keys
  // and marks errors, would also take a trailing comma, a comment or an unquoted word.
  if (!nlohmann::json::accept(text)) {
    try {
      [[maybe_unused]] const nlohmann::json parsed = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      // A syntax error knows its byte; a number out of range (1e400) names its text.
      size_t byte = text.size();
      if (const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
        byte = syntax->byte;
      } else if (std::string_view what = e.what(); what.find('\'') != std::string_view::npos) {
        const size_t open = what.find('\'');
        const size_t close = what.find('\'', open + 1);
        const size_t at = close == std::string_view::npos
                              ? std::string_view::npos
                              : text.find(what.substr(open + 1, close - open - 1));
        if (at != std::string_view::npos) byte = at + 1;
      }
      size_t line = 1, column = 1;
      for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          column = 1;
        } else {
          ++column;
        }
      }
      std::string reason = e.what();
      if (size_t at = reason.find(": syntax error"); at != std::string::npos)
        reason = reason.substr(at + 2);
      else if (reason.starts_with("[json.exception.") && reason.find("] ") != std::string::npos)
        reason = reason.substr(reason.find("] ") + 2);
      return Error(fmt::format("{}:{}:{}: invalid JSON: {}", file, line, column, reason));
    }
  }
  // yaml-cpp refuses a UTF-16 surrogate escape (json.dumps writes characters past U+FFFF as a
  // pair of them, as in an emoji label); the keys domino reads hold none, so each becomes '?'
  // (the escape of U+003F, as long: the marks stay where they were).
  std::string json(text);
  for (size_t i = 0; i + 1 < json.size(); ++i) {
    if (json[i] != '\\') continue;
    if (json[i + 1] == 'u' && i + 5 < json.size()) {
      unsigned value = 0;
      auto [end, ec] = std::from_chars(json.data() + i + 2, json.data() + i + 6, value, 16);
      if (ec == std::errc() && end == json.data() + i + 6 && value >= 0xD800 && value <= 0xDFFF)
        json.replace(i + 2, 4, "003F");
    }
    ++i;  // the escaped character (a backslash escaping another is not an escape's start)
  }
  Result<YAML::Node> root = ParseYaml(json, file);  // JSON is YAML: one parser, marks for errors
  if (!root.ok()) {
    std::string message = root.message();
    if (size_t at = message.find(": invalid YAML: "); at != std::string::npos)
      message.replace(at, 16, ": invalid JSON: ");
    if (size_t at = message.find("a second document ('---'); a domino file holds one");
        at != std::string::npos)
      message.replace(at, message.size() - at, "text after the JSON object");
    return Error(message);
  }
  // A key given twice: JSON readers keep the last, YAML's the first; domino takes neither.
  if (root->IsMap()) {
    std::vector<std::string> keys;
    for (const auto& entry : *root) {
      const std::string key = entry.first.Scalar();
      if (std::find(keys.begin(), keys.end(), key) != keys.end())
        return Error(fmt::format("{}:{}:{}: {}: given twice", file, entry.first.Mark().line + 1,
                                 entry.first.Mark().column + 1, key));
      keys.push_back(key);
    }
  }
  ConfigReader outer(*root, std::string(file));
  if (outer.error()) return *outer.error();
  const FamilyName* family_name = ReadFamily(outer);
  if (outer.error()) return *outer.error();
  // Gemma3ForConditionalGeneration's language model is a Gemma3TextConfig in text_config: its
  // keys are read there, marked where they are in the file.
  std::optional<ConfigReader> nested_config;
  if (family_name->in_text_config) {
    auto [key, nested] = outer.Find({"text_config"});
    if (!nested.IsMap()) {
      outer.Fail("text_config", nested.IsDefined()
                                    ? "expected a JSON object (the language model's config)"
                                    : "missing required key (the language model's config)");
      return *outer.error();
    }
    nested_config.emplace(nested, std::string(file), "text_config.");
    if (std::optional<std::string> type = nested_config->String("model_type");
        type && *type != "gemma3_text")
      nested_config->Fail("model_type", fmt::format("expected gemma3_text in a {} config, got '{}'",
                                                    family_name->model_type, *type));
    if (nested_config->error()) return *nested_config->error();
  }
  ConfigReader& config = nested_config ? *nested_config : outer;
  const Family family = family_name->family;
  const bool gpt2 = family == Family::kGpt2;

  ModelSpec model;
  model.name = NameFromPath(file);
  // Printed in tables and headers one line each: a control character in a folder's name is not.
  std::replace_if(
      model.name.begin(), model.name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; },
      '_');
  // Gemma 3's sizes default as transformers' Gemma3TextConfig sets them: the released 4B, 12B and
  // 27B configs leave out what equals them (the 4B's heads, vocabulary and positions). The other
  // families' configs give every size, and domino asks for them.
  const bool gemma3 = family == Family::kGemma3;
  auto gemma3_default = [gemma3](int64_t value) {
    return gemma3 ? std::optional<int64_t>(value) : std::nullopt;
  };
  model.layers = static_cast<int>(
      config.Int(gpt2 ? std::initializer_list<std::string_view>{"n_layer", "num_hidden_layers"}
                      : std::initializer_list<std::string_view>{"num_hidden_layers", "n_layer"},
                 kLayersRange, gemma3_default(26)));
  model.hidden = static_cast<int>(
      config.Int(gpt2 ? std::initializer_list<std::string_view>{"n_embd", "hidden_size"}
                      : std::initializer_list<std::string_view>{"hidden_size", "n_embd"},
                 kHiddenRange, gemma3_default(2304)));
  model.heads = static_cast<int>(
      config.Int(gpt2 ? std::initializer_list<std::string_view>{"n_head", "num_attention_heads"}
                      : std::initializer_list<std::string_view>{"num_attention_heads", "n_head"},
                 kHeadsRange, gemma3_default(8)));
  // Grouped key/value heads in the gated families only. Left out, a config's are its class's
  // default (KvHeadsDefault); null, the heads where the class says so (LlamaConfig, MistralConfig,
  // Phi3Config, Qwen2Config and Qwen3Config: `if num_key_value_heads is None`).
  const std::optional<int> kv_default = KvHeadsDefault(family);
  model.kv_heads = model.heads;
  if (IsGated(family))
    model.kv_heads = static_cast<int>(config.Int(
        {"num_key_value_heads"}, kHeadsRange, kv_default.value_or(std::max(model.heads, 1)),
        IsGemma(family) ? std::nullopt : std::optional<int64_t>(std::max(model.heads, 1))));
  // GPT-2's MLP is n_inner wide, 4 x n_embd where it is null or left out (GPT2MLP).
  model.ffn = static_cast<int>(
      gpt2
          ? config.Int({"n_inner"}, kFfnRange, int64_t{4} * model.hidden, int64_t{4} * model.hidden)
          : config.Int({"intermediate_size", "n_inner"}, kFfnRange, gemma3_default(9216)));
  model.vocab = config.Int({"vocab_size"}, kVocabRange, gemma3_default(262'208));
  model.seq_len = static_cast<int>(config.Int(
      gpt2 ? std::initializer_list<std::string_view>{"n_positions", "max_position_embeddings"}
           : std::initializer_list<std::string_view>{"max_position_embeddings", "n_positions"},
      kSeqLenRange, gemma3_default(131'072)));
  // A context extended after pretraining (Llama 3.1's rope_scaling: 8,192 tokens stretched to
  // 131,072; Phi-3's top-level key: 4,096 to 131,072) trains at the length it was pretrained at:
  // the default sequence is that one. transformers 5 writes rope_scaling's keys and the top-level
  // one into a single rope_parameters mapping, for Gemma 3 one per layer type (the full
  // attention's is the model's context).
  // Not const: a const node's [] of a missing key is an invalid node, which throws when read.
  YAML::Node scaling = config.Find({"rope_scaling"}).second;
  YAML::Node parameters = config.Find({"rope_parameters"}).second;
  if (parameters.IsMap() && parameters["full_attention"].IsMap())
    parameters = parameters["full_attention"];
  const std::array<std::optional<double>, 3> given{
      scaling.IsMap() ? NumberOf(scaling["original_max_position_embeddings"]) : std::nullopt,
      parameters.IsMap() ? NumberOf(parameters["original_max_position_embeddings"]) : std::nullopt,
      Number(config, "original_max_position_embeddings")};
  // Phi-3's longrope ("su" in its first configs) stretches Phi3Config's
  // original_max_position_embeddings, 4096 where the config leaves it out.
  auto longrope = [](YAML::Node rope) {
    if (!rope.IsMap()) return false;
    for (const char* key : {"rope_type", "type"})
      if (rope[key].IsScalar() && (rope[key].Scalar() == "longrope" || rope[key].Scalar() == "su"))
        return true;
    return false;
  };
  const std::optional<double> class_default =
      family == Family::kPhi3 && (longrope(scaling) || longrope(parameters)) &&
              std::none_of(given.begin(), given.end(), [](auto g) { return g.has_value(); })
          ? std::optional<double>(4096)
          : std::nullopt;
  for (const std::optional<double> original : {given[0], given[1], given[2], class_default}) {
    if (original && *original >= 1 && *original < model.seq_len &&
        *original == std::floor(*original))
      model.seq_len = static_cast<int>(*original);
  }
  model.activation = ReadActivation(config, family);
  model.norm = IsGated(family) ? Norm::kRmsNorm : Norm::kLayerNorm;
  // GPT-2 learns absolute positions (wpe) and the Llama family rotates Q and K, as their norms
  // say by default; GPT-NeoX has LayerNorm and rotates part of each head (rotary_pct).
  if (family == Family::kGptNeox) model.positions = Positions::kRotary;
  switch (family) {
    case Family::kGpt2:
    case Family::kGptNeox:  // attention_bias false takes the attention's only: see approximations
      model.bias = true;
      break;
    case Family::kLlama:  // attention_bias on q/k/v/o_proj, mlp_bias on the MLP's
    {
      const bool attention = config.Bool("attention_bias", false);
      model.bias = config.Bool("mlp_bias", false) || attention;
      break;
    }
    case Family::kQwen3:  // attention_bias only: their MLPs have none
    case Family::kGemma:
    case Family::kGemma2:
    case Family::kGemma3:
      model.bias = config.Bool("attention_bias", false);
      break;
    case Family::kMistral:
    case Family::kPhi3:
    case Family::kQwen2:  // Qwen2's Q, K and V biases only: see the header
      model.bias = false;
      break;
  }
  const bool tied_by_default = family == Family::kGpt2 || IsGemma(family);
  model.tied_embeddings = config.Bool("tie_word_embeddings", tied_by_default);
  // Gemma3ForConditionalGeneration ties its embeddings as the outer config says where it says
  // (transformers 5 reads Gemma3Config's tie_word_embeddings; 4 read text_config's).
  if (family_name->in_text_config && outer.Find({"tie_word_embeddings"}).second.IsDefined())
    model.tied_embeddings = outer.Bool("tie_word_embeddings", tied_by_default);
  if (outer.error()) return *outer.error();
  if (config.error()) return *config.error();
  AddApproximations(config, family, &model);
  // Gemma3Config builds a SigLIP vision tower whether or not vision_config is given.
  if (family_name->in_text_config)
    model.approximations.push_back(
        {ModelFeature::kNone,
         fmt::format("a vision tower (vision_config) and its projection into the language model "
                     "({})",
                     family_name->architecture),
         "as the language model alone"});

  // Heads as wide as head_dim, which need not be hidden / heads (Gemma-7B: 16 x 256 over 3072;
  // Qwen3-32B: 64 x 128 over 5120). Absent, transformers' config classes default it to 256
  // (GemmaConfig), 128 (Qwen3Config) or hidden / heads (the others).
  // GPT-2's and GPT-NeoX's heads are always hidden / heads wide (transformers reads no head_dim).
  const int64_t family_head_dim = IsGemma(family) ? 256 : family == Family::kQwen3 ? 128 : 0;
  // A null head_dim is hidden / heads where the class says so (LlamaConfig, MistralConfig).
  const bool head_dim_may_be_null = family == Family::kLlama || family == Family::kMistral;
  if (IsGated(family))
    model.head_dim = static_cast<int>(
        config.Int({"head_dim"}, kHiddenRange, family_head_dim,
                   head_dim_may_be_null ? std::optional<int64_t>(0) : std::nullopt));
  if (model.head_dim == 0 && model.hidden % model.heads != 0) {
    config.Fail(gpt2 ? "n_embd" : "hidden_size",
                fmt::format("{} must be divisible by the {} attention heads{}", model.hidden,
                            model.heads, IsGated(family) ? ", or head_dim given" : ""));
  } else if (model.heads % model.kv_heads != 0) {
    const bool left_out = !config.Find({"num_key_value_heads"}).second.IsDefined();
    config.Fail("num_key_value_heads",
                fmt::format("the {} attention heads must be divisible by the {} key/value heads{}",
                            model.heads, model.kv_heads,
                            left_out ? fmt::format(" ({}'s default, the key left out)",
                                                   family_name->config_class)
                                     : ""));
  } else if (int64_t width = int64_t{model.heads} * model.head_width();
             width > kAttentionWidthRange.max) {
    config.Fail("head_dim",
                fmt::format("num_attention_heads x head_dim = {} x {} = {} must be at most {}",
                            model.heads, model.head_dim, width, kAttentionWidthRange.max));
  } else if (!model.learned_positions() && model.head_width() % 2 != 0) {
    config.Fail(
        model.head_dim > 0 ? "head_dim" : "num_attention_heads",
        fmt::format("rotary positions need an even head width; {} is odd", model.head_width()));
  }
  if (int64_t{model.heads} * model.head_dim == model.hidden) model.head_dim = 0;
  if (config.error()) return *config.error();
  return model;
}

bool IsHfConfigPath(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return true;
  return std::filesystem::path(path).extension() == ".json";
}

Result<ModelSpec> LoadHfConfig(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "config.json").string();
    if (!std::filesystem::exists(file, ec)) {
      return Error(fmt::format("{}: a model directory must hold a Hugging Face config.json", path));
    }
  }
  Result<std::string> text = ReadTextFile(file);
  if (!text.ok()) return text.error();
  return ParseHfConfig(*text, file);
}

}  // namespace domino
