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
#include "models/model_limits.h"

namespace domino {
namespace {

enum class Family {
  kLlama,
  kMistral,
  kPhi3,
  kQwen2,
  kQwen3,
  kGemma,
  kGemma2,
  kGemma3,
  kGpt2,
  kGptNeox
};

bool IsGemma(Family family) {
  return family == Family::kGemma || family == Family::kGemma2 || family == Family::kGemma3;
}

struct FamilyName {
  std::string_view model_type;
  std::string_view architecture;  // the class in `architectures`
  Family family;
  // The language model's keys are in `text_config`, beside a vision tower's in vision_config
  // (transformers' Gemma3Config holds a Gemma3TextConfig and a SiglipVisionConfig).
  bool in_text_config = false;
};
constexpr std::array<FamilyName, 11> kFamilies{{
    {"llama", "LlamaForCausalLM", Family::kLlama},
    {"mistral", "MistralForCausalLM", Family::kMistral},
    {"phi3", "Phi3ForCausalLM", Family::kPhi3},
    {"qwen2", "Qwen2ForCausalLM", Family::kQwen2},
    {"qwen3", "Qwen3ForCausalLM", Family::kQwen3},
    {"gemma", "GemmaForCausalLM", Family::kGemma},
    {"gemma2", "Gemma2ForCausalLM", Family::kGemma2},
    {"gemma3_text", "Gemma3ForCausalLM", Family::kGemma3},                // Gemma 3 1B
    {"gemma3", "Gemma3ForConditionalGeneration", Family::kGemma3, true},  // 4B, 12B, 27B
    {"gpt2", "GPT2LMHeadModel", Family::kGpt2},
    {"gpt_neox", "GPTNeoXForCausalLM", Family::kGptNeox},
}};

bool IsGated(Family family) { return family != Family::kGpt2 && family != Family::kGptNeox; }

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

// Reads the keys of one config.json that domino needs and ignores the rest (tokenizer ids, rope
// settings, dtypes). JSON null means "the transformers default", as transformers reads it.
class ConfigReader {
 public:
  // `prefix` names where the keys are in messages ("text_config." for a nested language model).
  ConfigReader(YAML::Node root, std::string file, std::string prefix = "")
      : root_(std::move(root)), file_(std::move(file)), prefix_(std::move(prefix)) {
    if (!root_.IsMap()) FailAt(root_.Mark(), "", "expected a JSON object (a config.json)");
  }

  // The value under the first of `keys` present and not null, or an undefined node.
  std::pair<std::string_view, YAML::Node> Find(std::initializer_list<std::string_view> keys) const {
    if (!root_.IsMap()) return {"", YAML::Node(YAML::NodeType::Undefined)};
    for (std::string_view key : keys) {
      for (const auto& entry : root_) {
        if (entry.first.IsScalar() && entry.first.Scalar() == key && !entry.second.IsNull())
          return {key, entry.second};
      }
    }
    return {"", YAML::Node(YAML::NodeType::Undefined)};
  }

  // The first of `keys` that is present, as an integer within `range`; a missing one is an error
  // naming the first key when `fallback` is empty.
  int64_t Int(std::initializer_list<std::string_view> keys, IntRange range,
              std::optional<int64_t> fallback = std::nullopt) {
    auto [key, value] = Find(keys);
    if (!value.IsDefined()) {
      if (!fallback) Fail(*keys.begin(), "missing required key");
      return fallback.value_or(0);
    }
    int64_t parsed = 0;
    const std::string s = value.IsScalar() ? value.Scalar() : "";
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), parsed);
    // A quoted scalar ("64") is a JSON string, which transformers would not read as a size.
    if (!value.IsScalar() || value.Tag() == "!" || ec != std::errc() ||
        end != s.data() + s.size() || s.empty()) {
      FailAt(value.Mark(), key, "expected an integer");
      return 0;
    }
    if (parsed < range.min || parsed > range.max) {
      FailAt(value.Mark(), key,
             fmt::format("must be between {} and {}, got {}", range.min, range.max, parsed));
      return 0;
    }
    return parsed;
  }

  bool Bool(std::string_view key, bool fallback) {
    auto [found, value] = Find({key});
    if (!value.IsDefined()) return fallback;
    if (value.IsScalar() && value.Tag() != "!" &&
        (value.Scalar() == "true" || value.Scalar() == "false"))
      return value.Scalar() == "true";
    FailAt(value.Mark(), key, "expected true or false");
    return fallback;
  }

  std::optional<std::string> String(std::string_view key) {
    auto [found, value] = Find({key});
    if (!value.IsDefined()) return std::nullopt;
    // JSON's strings are quoted: a number or true is not one (yaml-cpp tags a quoted scalar "!").
    if (!value.IsScalar() || value.Tag() != "!") {
      FailAt(value.Mark(), key, "expected a string");
      return std::nullopt;
    }
    return value.Scalar();
  }

  void Fail(std::string_view key, std::string_view rule) {
    auto [found, value] = Find({key});
    FailAt(value.IsDefined() ? value.Mark() : root_.Mark(), key, rule);
  }

  void FailAt(const YAML::Mark& mark, std::string_view key, std::string_view rule) {
    if (error_) return;
    const int line = mark.is_null() ? 1 : mark.line + 1;
    const int column = mark.is_null() ? 1 : mark.column + 1;
    error_ =
        key.empty()
            ? Error(fmt::format("{}:{}:{}: {}", file_, line, column, rule))
            : Error(fmt::format("{}:{}:{}: {}{}: {}", file_, line, column, prefix_, key, rule));
  }

  const std::optional<Error>& error() const { return error_; }

 private:
  YAML::Node root_;
  std::string file_;
  std::string prefix_;
  std::optional<Error> error_;
};

// A number a JSON value holds (a float or an integer), else nullopt; Number: the config's at `key`.
std::optional<double> NumberOf(const YAML::Node& value) {
  if (!value.IsScalar()) return std::nullopt;
  const std::string text = value.Scalar();
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}
std::optional<double> Number(const ConfigReader& config, std::string_view key) {
  return NumberOf(config.Find({key}).second);
}

// Why an architecture outside the families is not read, where the config says: experts (Mixtral's
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

void CheckActivation(ConfigReader& config, Family family) {
  const std::string_view key = family == Family::kGpt2 ? "activation_function" : "hidden_act";
  // Gemma's newer configs name the approximate GeLU it runs in `hidden_activation`.
  auto [found, value] =
      IsGemma(family) ? config.Find({"hidden_activation", key}) : config.Find({key});
  if (!value.IsDefined()) return;
  const std::string name = value.IsScalar() ? value.Scalar() : "";
  const bool ok = Contains(kGeluNames, name) || (IsGated(family) && Contains(kSiluNames, name));
  if (!ok) {
    config.FailAt(value.Mark(), found,
                  fmt::format("unsupported activation '{}': domino models {} MLPs", name,
                              IsGated(family) ? "gated SiLU or GeLU (SwiGLU-shaped)" : "GeLU"));
  }
}

// Layer numbers (from 0) in words: "layer 5", "layers 5, 11, 17".
std::string LayerList(const std::vector<int>& layers) {
  std::string text;
  for (int l : layers) text += fmt::format("{}{}", text.empty() ? "" : ", ", l);
  return (layers.size() == 1 ? "layer " : "layers ") + text;
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
  const std::string what =
      fmt::format("a sliding attention window of {} tokens (sliding_window)", w.tokens);
  const std::string as =
      fmt::format("as full causal attention, the same up to {} tokens", w.tokens);
  if (full.empty()) {
    model->window = w;
    model->approximations.push_back(
        {ModelFeature::kWindow, fmt::format("{} on every layer ({})", what, source), as});
  } else if (w.full_every > 0) {
    model->window = w;
    model->approximations.push_back(
        {ModelFeature::kWindow,
         fmt::format("{} on {} of {} layers ({}: {})", what, slide.size(), model->layers, source,
                     attend_in_full),
         as});
  } else {
    model->approximations.push_back(
        {ModelFeature::kNone,
         fmt::format("{} on {} ({}), a layer pattern domino's window does not state", what,
                     LayerList(slide), source),
         as});
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
  AttentionWindow w{.tokens = static_cast<int>(*window)};
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
      {ModelFeature::kWindow,
       fmt::format("a sliding attention window of {} tokens (sliding_window){}", w.tokens, layers),
       fmt::format("as full causal attention, the same up to {} tokens", w.tokens)});
}

// What the family's modeling code runs that domino prices otherwise (ModelSpec::approximations),
// with the fields that state what a framework can be told to build (ModelSpec::qkv_bias, qk_norm,
// rotary_fraction, window).
void AddApproximations(ConfigReader& config, Family family, ModelSpec* model) {
  std::vector<Approximation>& out = model->approximations;
  if (family == Family::kQwen2) {
    model->qkv_bias = true;
    out.push_back({ModelFeature::kQkvBias, "biases on Q, K and V only (Qwen2)", "without them"});
  }
  if (family == Family::kQwen3 || family == Family::kGemma3) {
    model->qk_norm = true;
    out.push_back({ModelFeature::kQkNorm,
                   fmt::format("an RMSNorm on each head of Q and of K ({}'s q_norm and k_norm)",
                               family == Family::kQwen3 ? "Qwen3" : "Gemma 3"),
                   "without them"});
  }
  if (IsGemma(family))
    out.push_back({ModelFeature::kNone, "a GeLU-gated MLP (Gemma's GeGLU)",
                   "as SwiGLU (a SiLU gate), the same three matrices"});
  // Gemma 3 keeps Gemma 2's post-norms; its soft-caps are null unless a config sets them
  // (Gemma3TextConfig's defaults), and QK-norm takes their place.
  if (family == Family::kGemma2 || family == Family::kGemma3) {
    out.push_back({ModelFeature::kNone,
                   fmt::format("an RMSNorm after the attention and after the MLP besides the ones "
                               "before them ({}'s post-norms)",
                               family == Family::kGemma2 ? "Gemma 2" : "Gemma 3"),
                   "with the norms before only"});
    if (const std::optional<double> cap = Number(config, "attn_logit_softcapping"); cap && *cap > 0)
      out.push_back(
          {ModelFeature::kNone,
           fmt::format("attention scores soft-capped at {:g} (attn_logit_softcapping)", *cap),
           "without the cap"});
    if (const std::optional<double> cap = Number(config, "final_logit_softcapping");
        cap && *cap > 0)
      out.push_back({ModelFeature::kNone,
                     fmt::format("logits soft-capped at {:g} (final_logit_softcapping)", *cap),
                     "without the cap"});
  }
  // Phi-3's partial_rotary_factor (1 unless given; Phi-4-mini's 0.75), GPT-NeoX's rotary_pct
  // (GPTNeoXConfig's default 0.25). Megatron-Core rotates the first fraction of each head's
  // features, as both families do.
  const std::string_view key = family == Family::kPhi3      ? "partial_rotary_factor"
                               : family == Family::kGptNeox ? "rotary_pct"
                                                            : "";
  if (!key.empty()) {
    const double rotary = Number(config, key).value_or(family == Family::kGptNeox ? 0.25 : 1.0);
    if (rotary <= 0 || rotary > 1) {
      config.Fail(key, fmt::format("must be above 0 and at most 1, got {:g}", rotary));
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
  model.kv_heads = static_cast<int>(
      config.Int({"num_key_value_heads"}, kHeadsRange, gemma3 ? 4 : std::max(model.heads, 1)));
  model.ffn = static_cast<int>(
      gpt2 ? config.Int({"n_inner", "intermediate_size"}, kFfnRange, int64_t{4} * model.hidden)
           : config.Int({"intermediate_size", "n_inner"}, kFfnRange, gemma3_default(9216)));
  model.vocab = config.Int({"vocab_size"}, kVocabRange, gemma3_default(262'208));
  model.seq_len = static_cast<int>(config.Int(
      gpt2 ? std::initializer_list<std::string_view>{"n_positions", "max_position_embeddings"}
           : std::initializer_list<std::string_view>{"max_position_embeddings", "n_positions"},
      kSeqLenRange, gemma3_default(131'072)));
  // A context extended after pretraining (Llama 3.1's rope_scaling: 8,192 tokens stretched to
  // 131,072; Phi-3's top-level key: 4,096 to 131,072) trains at the length it was pretrained at:
  // the default sequence is that one.
  auto [scaling_key, scaling] = config.Find({"rope_scaling"});
  for (const std::optional<double> original :
       {scaling.IsMap() ? NumberOf(scaling["original_max_position_embeddings"]) : std::nullopt,
        Number(config, "original_max_position_embeddings")}) {
    if (original && *original >= 1 && *original < model.seq_len &&
        *original == std::floor(*original))
      model.seq_len = static_cast<int>(*original);
  }
  CheckActivation(config, family);
  model.activation = IsGated(family) ? Activation::kSwiglu : Activation::kGelu;
  model.norm = IsGated(family) ? Norm::kRmsNorm : Norm::kLayerNorm;
  // GPT-2 learns absolute positions (wpe) and the Llama family rotates Q and K, as their norms
  // say by default; GPT-NeoX has LayerNorm and rotates part of each head (rotary_pct).
  if (family == Family::kGptNeox) model.positions = Positions::kRotary;
  switch (family) {
    case Family::kGpt2:
    case Family::kGptNeox:  // attention_bias false takes the attention's only: see approximations
      model.bias = true;
      break;
    case Family::kLlama:
    case Family::kQwen3:
    case Family::kGemma:
    case Family::kGemma2:
    case Family::kGemma3:
      model.bias = config.Bool("attention_bias", false) || config.Bool("mlp_bias", false);
      break;
    case Family::kMistral:
    case Family::kPhi3:
    case Family::kQwen2:  // Qwen2's Q, K and V biases only: see the header
      model.bias = false;
      break;
  }
  const bool tied_by_default = family == Family::kGpt2 || IsGemma(family);
  model.tied_embeddings = config.Bool("tie_word_embeddings", tied_by_default);
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
  if (IsGated(family))
    model.head_dim = static_cast<int>(config.Int({"head_dim"}, kHiddenRange, family_head_dim));
  if (model.head_dim == 0 && model.hidden % model.heads != 0) {
    config.Fail(gpt2 ? "n_embd" : "hidden_size",
                fmt::format("{} must be divisible by the {} attention heads{}", model.hidden,
                            model.heads, IsGated(family) ? ", or head_dim given" : ""));
  } else if (model.heads % model.kv_heads != 0) {
    config.Fail("num_key_value_heads",
                fmt::format("the {} attention heads must be divisible by the {} key/value heads",
                            model.heads, model.kv_heads));
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
