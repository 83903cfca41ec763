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
// settings, dtypes). A key left out takes its config class's default (the caller's fallback). A
// JSON null is not that default: transformers 4 passes it to the class as None and transformers
// 5's strict config classes refuse it where they declare a number or a bool, so a null means
// what the class makes of None where it says (num_key_value_heads: the heads; sliding_window and
// the soft caps: none; the caller's `if_null`) and is an error elsewhere.
class ConfigReader {
 public:
  // `prefix` names where the keys are in messages ("text_config." for a nested language model).
  ConfigReader(YAML::Node root, std::string file, std::string prefix = "")
      : root_(std::move(root)), file_(std::move(file)), prefix_(std::move(prefix)) {
    if (!root_.IsMap()) FailAt(root_.Mark(), "", "expected a JSON object (a config.json)");
  }

  // The value under the first of `keys` present and not null, or an undefined node.
  std::pair<std::string_view, YAML::Node> Find(std::initializer_list<std::string_view> keys) const {
    return FindWhere(keys, false);
  }
  // The first of `keys` present with a JSON null (its node, for its mark), or an undefined node.
  std::pair<std::string_view, YAML::Node> FindNull(
      std::initializer_list<std::string_view> keys) const {
    return FindWhere(keys, true);
  }
  // Whether `key` is present with a JSON null.
  bool IsNull(std::string_view key) const { return FindNull({key}).second.IsDefined(); }

  // The first of `keys` given a value, as an integer within `range`. None given: `if_null` where
  // one is null (an error without it), else `fallback` (an error naming the first key without
  // it).
  int64_t Int(std::initializer_list<std::string_view> keys, IntRange range,
              std::optional<int64_t> fallback = std::nullopt,
              std::optional<int64_t> if_null = std::nullopt) {
    auto [key, value] = Find(keys);
    if (!value.IsDefined()) {
      if (auto [null_key, null] = FindNull(keys); null.IsDefined()) {
        if (!if_null) FailAt(null.Mark(), null_key, "expected an integer, got null");
        return if_null.value_or(fallback.value_or(0));
      }
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

  // `key`'s value; `fallback` where it is left out. A null is an error (transformers 4 reads it as
  // false, transformers 5 refuses it).
  bool Bool(std::string_view key, bool fallback) {
    auto [found, value] = Find({key});
    if (!value.IsDefined()) {
      if (auto [null_key, null] = FindNull({key}); null.IsDefined())
        FailAt(null.Mark(), key, "expected true or false, got null");
      return fallback;
    }
    if (value.IsScalar() && value.Tag() != "!" &&
        (value.Scalar() == "true" || value.Scalar() == "false"))
      return value.Scalar() == "true";
    FailAt(value.Mark(), key, "expected true or false");
    return fallback;
  }

  // `key`'s number: `left_out` where the config leaves it out, none for a null (a window or a soft
  // cap the class makes None), an error for what is not a number.
  std::optional<double> NumberOr(std::string_view key, std::optional<double> left_out);

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

  // Fails at `key`'s value (or its null), else at the object's start.
  void Fail(std::string_view key, std::string_view rule) {
    YAML::Node value = Find({key}).second;
    if (!value.IsDefined()) value = FindNull({key}).second;
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
  std::pair<std::string_view, YAML::Node> FindWhere(std::initializer_list<std::string_view> keys,
                                                    bool null) const {
    if (!root_.IsMap()) return {"", YAML::Node(YAML::NodeType::Undefined)};
    for (std::string_view key : keys) {
      for (const auto& entry : root_) {
        if (entry.first.IsScalar() && entry.first.Scalar() == key && entry.second.IsNull() == null)
          return {key, entry.second};
      }
    }
    return {"", YAML::Node(YAML::NodeType::Undefined)};
  }

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
inline std::optional<double> ConfigReader::NumberOr(std::string_view key,
                                                    std::optional<double> left_out) {
  if (IsNull(key)) return std::nullopt;
  const YAML::Node value = Find({key}).second;
  if (!value.IsDefined()) return left_out;
  const std::optional<double> number = NumberOf(value);
  if (!number || value.Tag() == "!") FailAt(value.Mark(), key, "expected a number");
  return value.Tag() == "!" ? std::nullopt : number;
}

// What the family's modeling code runs that domino prices otherwise (ModelSpec::approximations),
// with the fields that state what a framework can be told to build (ModelSpec::qkv_bias, qk_norm,
// rotary_fraction, window): hf_approximations.cc. Errors go to `config`.
void AddApproximations(ConfigReader& config, Family family, ModelSpec* model);

}  // namespace domino::hf

#endif  // DOMINO_MODELS_HF_CONFIG_READER_H_
