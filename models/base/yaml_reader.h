#ifndef DOMINO_MODELS_BASE_YAML_READER_H_
#define DOMINO_MODELS_BASE_YAML_READER_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/base/result.h"

namespace domino {

// Parses YAML text. `file` is only used in messages: a syntax error becomes
// "FILE:LINE:COLUMN: invalid YAML: WHAT". A file holds one document: a second one is an error.
// A merge key (`<<: *anchor`) is an error too, "FILE:LINE:COLUMN: <<: ...": yaml-cpp does not
// merge, so the keys it stands for would read as missing. Anchors and aliases are read.
Result<YAML::Node> ParseYaml(std::string_view text, std::string_view file);

// Bounds for an integer or real value; both ends inclusive.
struct IntRange {
  int64_t min = 1;
  int64_t max = int64_t{1} << 40;
};
struct RealRange {
  double min = 0.0;
  double max = 1e18;
  bool min_exclusive = true;  // most quantities (bandwidths, sizes) must be > 0
};

enum class Need { kRequired, kOptional };

// YamlMap reads one YAML mapping strictly, the way every domino loader reads its files:
// each getter names a key it knows; a missing required key, a value of the wrong type or outside
// its range, an unknown enum value, a duplicate key, and — at Finish() — any key no getter asked
// for are errors. An error reads "FILE:LINE:COLUMN: KEY.PATH: RULE" with 1-based line and column,
// and an unknown key gets the nearest known key as a suggestion. Only the first error is kept;
// maps opened with Map() share it with their parent. Getters leave `*out` untouched on error or
// when an optional key is absent, so callers put defaults there first.
class YamlMap {
 public:
  // `node` must be a mapping; otherwise the first getter call or Finish() reports it.
  YamlMap(YAML::Node node, std::string file, std::string key_path = "");

  void Int(std::string_view key, int64_t* out, Need need, IntRange range = {});
  void Int(std::string_view key, int* out, Need need, IntRange range = {});
  void Real(std::string_view key, double* out, Need need, RealRange range = {});
  void Bool(std::string_view key, bool* out, Need need);
  void String(std::string_view key, std::string* out, Need need);
  // A String that names something (a model, a GPU, a study): no control characters, as it is
  // printed in tables and headers one line each.
  void Name(std::string_view key, std::string* out, Need need);

  // Reads a string that must be one of `names`; stores the matching value.
  // `names` is any range of std::pair<std::string_view, T> (an array or a span).
  template <typename T, typename Names>
  void Enum(std::string_view key, T* out, Need need, const Names& names) {
    std::string text;
    if (!ReadEnumText(
            key, need, names.size(), [&](size_t i) { return names[i].first; }, &text))
      return;
    for (const auto& [name, value] : names)
      if (name == text) *out = value;
  }

  // Opens the sub-mapping under `key`. Returns nullopt when an optional key is absent or on error.
  std::optional<YamlMap> Map(std::string_view key, Need need);

  bool Has(std::string_view key) const;

  // Accepts `key` (optional) without reading it, and returns its node (undefined when absent):
  // for a block another reader parses, such as a report's timeline.
  YAML::Node Raw(std::string_view key) { return Lookup(key, Need::kOptional); }

  // Records an error at `key` (or at this map when `key` is empty) for rules a loader checks
  // itself, such as "hidden must be divisible by heads". Keeps the first error only.
  void Fail(std::string_view key, std::string_view rule);

  // Checks for unknown and duplicate keys, then returns the first error seen in this map or any
  // map sharing its error (parents and children).
  Status Finish();

  bool failed() const { return error_->has_value(); }
  const std::string& file() const { return file_; }
  const std::string& key_path() const { return key_path_; }

 private:
  YAML::Node Lookup(std::string_view key, Need need);
  std::string Where(const YAML::Mark& mark) const;
  std::string PathOf(std::string_view key) const;
  void FailAt(const YAML::Mark& mark, std::string_view key, std::string_view rule);
  bool ReadEnumText(std::string_view key, Need need, size_t count,
                    const std::function<std::string_view(size_t)>& name_at, std::string* out);

  YAML::Node node_;
  std::string file_;
  std::string key_path_;
  std::vector<std::string> known_;
  // The required key whose absence is the current error, if that is the error: Finish() replaces
  // it by an unknown key that is a misspelling of it ("hiden" for "hidden"), a better message.
  std::optional<std::string> missing_key_;
  std::shared_ptr<std::optional<Error>> error_;
};

// Returns the candidate nearest to `word` by edit distance, or "" when none is close enough to be
// a plausible typo.
std::string NearestWord(std::string_view word, std::span<const std::string> candidates);

// `text` as a YAML double-quoted scalar, for the files domino writes: quotes and backslashes
// escaped, control characters (and DEL) as \xNN, so any name reads back as it was.
std::string YamlQuoted(std::string_view text);

}  // namespace domino

#endif  // DOMINO_MODELS_BASE_YAML_READER_H_
