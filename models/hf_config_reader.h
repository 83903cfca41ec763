#ifndef DOMINO_MODELS_HF_CONFIG_READER_H_
#define DOMINO_MODELS_HF_CONFIG_READER_H_

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "models/base/result.h"
#include "models/base/yaml_reader.h"
#include "models/model_spec.h"

// The parts of the Hugging Face config reader (models/hf_config.h) that its two files share:
// hf_config.cc reads the families' sizes, hf_approximations.cc what a family runs that domino
// prices otherwise. Not for use elsewhere.
namespace domino::hf {

// The families ParseHfConfig reads (hf_config.cc names each by model_type and architecture).
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

inline bool IsGemma(Family family) {
  return family == Family::kGemma || family == Family::kGemma2 || family == Family::kGemma3;
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
inline std::optional<double> NumberOf(const YAML::Node& value) {
  if (!value.IsScalar()) return std::nullopt;
  const std::string text = value.Scalar();
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}
inline std::optional<double> Number(const ConfigReader& config, std::string_view key) {
  return NumberOf(config.Find({key}).second);
}

// What the family's modeling code runs that domino prices otherwise (ModelSpec::approximations),
// with the fields that state what a framework can be told to build (ModelSpec::qkv_bias, qk_norm,
// rotary_fraction, window): hf_approximations.cc. Errors go to `config`.
void AddApproximations(ConfigReader& config, Family family, ModelSpec* model);

}  // namespace domino::hf

#endif  // DOMINO_MODELS_HF_CONFIG_READER_H_
