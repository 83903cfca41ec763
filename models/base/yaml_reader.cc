#include "models/base/yaml_reader.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

namespace domino {
namespace {

bool IsNullScalar(const std::string& s) {
  return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// A scalar written as a string ("2", '2' or !!str 2), which YAML reads as text, not a number.
bool IsQuoted(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() > kMax) return fmt::format("'{}...'", s.substr(0, kMax));
  return fmt::format("'{}'", s);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Walks a stream's events for what yaml-cpp accepts and a domino file must not hold: a second,
// non-empty document, which YAML::Load would silently drop; a quoted string never closed,
// which yaml-cpp reads to the end of the file (the keys after it swallowed into one string); and
// a merge key (`<<: *anchor`), which yaml-cpp keeps as a key named "<<" instead of merging, so
// that the keys it stands for read as missing. Events only, at most a few documents:
// YAML::LoadAll can loop without end on some malformed input, and a walk of the loaded tree
// would expand every alias (a few lines can stand for billions of nodes).
class StreamChecker : public YAML::EventHandler {
 public:
  // yaml-cpp's marks count bytes from after a UTF-8 byte order mark.
  explicit StreamChecker(std::string_view text)
      : text_(text.starts_with("\xEF\xBB\xBF") ? text.substr(3) : text) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    start_ = mark, empty_ = true;
    open_.clear();
  }
  void OnDocumentEnd() override {
    if (!empty_ && ++documents_ == 2) second_ = start_;
  }
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { (void)AtKey(); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {
    empty_ = false;
    (void)AtKey();
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t,
                const std::string& value) override {
    empty_ = false;
    if (!unclosed_ && !Closed(mark)) unclosed_ = mark;
    // A plain `<<` is the merge key; a quoted "<<" (or !!str <<) is an ordinary string.
    const bool plain = tag != "!" && tag != "tag:yaml.org,2002:str";
    if (AtKey() && plain && value == "<<" && !merge_) merge_ = mark;
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    empty_ = false;
    (void)AtKey();
    open_.push_back({.map = false});
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    empty_ = false;
    (void)AtKey();
    open_.push_back({.map = true});
  }
  void OnMapEnd() override { Close(); }

  const std::optional<YAML::Mark>& second() const { return second_; }
  const std::optional<YAML::Mark>& unclosed() const { return unclosed_; }
  const std::optional<YAML::Mark>& merge() const { return merge_; }
  const YAML::Mark& document_start() const { return start_; }

 private:
  // A mapping or sequence being read; in a mapping, keys and values alternate.
  struct Open {
    bool map = false;
    bool key_next = true;
  };

  // Called as each node starts: whether it is a mapping's key.
  bool AtKey() {
    if (open_.empty() || !open_.back().map) return false;
    const bool key = open_.back().key_next;
    open_.back().key_next = !key;
    return key;
  }
  void Close() {
    if (!open_.empty()) open_.pop_back();
  }

  // Whether a scalar that starts with a quote at `mark` has its closing quote: a double-quoted
  // one skips backslash escapes, a single-quoted one its doubled quotes ('').
  // The mark of a scalar with a tag or an anchor is the first of these, which may stand on the
  // lines before it: they are skipped, with the blanks and comments after them.
  bool Closed(const YAML::Mark& mark) const {
    if (mark.pos < 0) return true;
    size_t at = mark.pos;
    while (at < text_.size() && (text_[at] == '!' || text_[at] == '&')) {
      while (at < text_.size() && !std::isspace(static_cast<unsigned char>(text_[at]))) ++at;
      while (at < text_.size() &&
             (std::isspace(static_cast<unsigned char>(text_[at])) || text_[at] == '#')) {
        if (text_[at] == '#')
          while (at < text_.size() && text_[at] != '\n') ++at;
        else
          ++at;
      }
    }
    if (at >= text_.size()) return true;
    const char quote = text_[at];
    if (quote != '"' && quote != '\'') return true;
    for (size_t i = at + 1; i < text_.size(); ++i) {
      if (quote == '"' && text_[i] == '\\') {
        ++i;
      } else if (text_[i] == quote) {
        if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;
          continue;
        }
        return true;
      }
    }
    return false;
  }

  std::string_view text_;
  YAML::Mark start_;
  bool empty_ = true;
  int documents_ = 0;
  std::vector<Open> open_;
  std::optional<YAML::Mark> second_, unclosed_, merge_;
};

}  // namespace

Result<YAML::Node> ParseYaml(std::string_view text, std::string_view file) {
  // YAML allows no control character but tab, line feed and carriage return (YAML 1.2, 5.1), and
  // yaml-cpp misreads one (a NUL ends its view of the line): say where the first one is.
  size_t line = 1, column = 1;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f)
      return Error(
          fmt::format("{}:{}:{}: invalid YAML: control character \\x{:02x} (a YAML "
                      "file is text: tabs and line breaks are its only ones)",
                      file, line, column, byte));
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  try {
    YAML::Node root = YAML::Load(std::string(text));
    // A second document would be silently ignored: say so rather than read half the file. An
    // empty one (a trailing '---') holds nothing to lose.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    StreamChecker checker(text);
    constexpr int kMostDocuments = 64;
    int documents = 0;
    while (!checker.second() && parser.HandleNextDocument(checker)) {
      if (++documents == kMostDocuments)
        return Error(
            fmt::format("{}:{}:{}: invalid YAML: document {} ('---'); a domino file "
                        "holds one",
                        file, checker.document_start().line + 1,
                        checker.document_start().column + 1, kMostDocuments));
    }
    if (const std::optional<YAML::Mark>& mark = checker.unclosed()) {
      return Error(
          fmt::format("{}:{}:{}: invalid YAML: a quoted string that is never closed (it "
                      "runs to the end of the file)",
                      file, mark->line + 1, mark->column + 1));
    }
    if (const std::optional<YAML::Mark>& mark = checker.second()) {
      return Error(
          fmt::format("{}:{}:{}: invalid YAML: a second document ('---'); a domino file "
                      "holds one",
                      file, mark->line + 1, mark->column + 1));
    }
    if (const std::optional<YAML::Mark>& mark = checker.merge()) {
      return Error(
          fmt::format("{}:{}:{}: <<: YAML merge keys are not supported; write the keys out", file,
                      mark->line + 1, mark->column + 1));
    }
    return root;
  } catch (const YAML::Exception& e) {
    // yaml-cpp quotes the character it choked on, which may be a newline or a NUL: one line.
    std::string message;
    for (unsigned char c : e.msg)
      message += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, c);
    return Error(fmt::format("{}:{}:{}: invalid YAML: {}", file, e.mark.line + 1, e.mark.column + 1,
                             message));
  }
}

std::string NearestWord(std::string_view word, std::span<const std::string> candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

YamlMap::YamlMap(YAML::Node node, std::string file, std::string key_path)
    : node_(std::move(node)),
      file_(std::move(file)),
      key_path_(std::move(key_path)),
      error_(std::make_shared<std::optional<Error>>()) {
  if (!node_.IsMap()) {
    std::string what = key_path_.empty() ? "the document" : key_path_;
    *error_ = Error(
        fmt::format("{}: {}: expected a mapping of keys to values", Where(node_.Mark()), what));
  }
}

std::string YamlMap::Where(const YAML::Mark& mark) const {
  if (mark.is_null()) return fmt::format("{}:1:1", file_);
  return fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1);
}

std::string YamlMap::PathOf(std::string_view key) const {
  if (key_path_.empty()) return std::string(key);
  if (key.empty()) return key_path_;
  return fmt::format("{}.{}", key_path_, key);
}

void YamlMap::FailAt(const YAML::Mark& mark, std::string_view key, std::string_view rule) {
  if (error_->has_value()) return;
  std::string path = PathOf(key);
  if (path.empty()) {
    *error_ = Error(fmt::format("{}: {}", Where(mark), rule));
  } else {
    *error_ = Error(fmt::format("{}: {}: {}", Where(mark), path, rule));
  }
}

void YamlMap::Fail(std::string_view key, std::string_view rule) {
  YAML::Mark mark = node_.Mark();
  if (!key.empty() && node_.IsMap()) {
    for (const auto& entry : node_)
      if (entry.first.IsScalar() && entry.first.Scalar() == key) mark = entry.second.Mark();
  }
  FailAt(mark, key, rule);
}

bool YamlMap::Has(std::string_view key) const {
  if (!node_.IsMap()) return false;
  for (const auto& entry : node_)
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return true;
  return false;
}

YAML::Node YamlMap::Lookup(std::string_view key, Need need) {
  known_.emplace_back(key);
  if (error_->has_value() || !node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& entry : node_) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) {
      if (entry.second.IsNull() || (entry.second.IsScalar() && entry.second.Tag() != "!" &&
                                    IsNullScalar(entry.second.Scalar()))) {
        // An empty value's mark is the next token's, often on the next line: point at the key.
        FailAt(entry.first.Mark(), key, "has no value");
        return YAML::Node(YAML::NodeType::Undefined);
      }
      return entry.second;
    }
  }
  if (need == Need::kRequired) {
    missing_key_ = std::string(key);
    FailAt(node_.Mark(), key, "missing required key");
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

void YamlMap::Int(std::string_view key, int64_t* out, Need need, IntRange range) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return;
  if (!value.IsScalar()) return FailAt(value.Mark(), key, "expected an integer");
  const std::string& s = value.Scalar();
  if (IsQuoted(value))
    return FailAt(value.Mark(), key,
                  fmt::format("expected an integer, got the string {}", Quote(s)));
  int64_t parsed = 0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), parsed);
  if (ec == std::errc::result_out_of_range)
    return FailAt(value.Mark(), key, fmt::format("{} is out of range", Quote(s)));
  if (ec != std::errc() || end != s.data() + s.size() || begin == s.data() + s.size())
    return FailAt(value.Mark(), key, fmt::format("expected an integer, got {}", Quote(s)));
  if (parsed < range.min || parsed > range.max) {
    std::string rule =
        range.min == 1 && parsed <= 0
            ? fmt::format("must be a positive integer, got {}", parsed)
            : fmt::format("must be between {} and {}, got {}", range.min, range.max, parsed);
    return FailAt(value.Mark(), key, rule);
  }
  *out = parsed;
}

void YamlMap::Int(std::string_view key, int* out, Need need, IntRange range) {
  range.max = std::min<int64_t>(range.max, std::numeric_limits<int>::max());
  int64_t wide = *out;
  Int(key, &wide, need, range);
  *out = static_cast<int>(wide);
}

void YamlMap::Real(std::string_view key, double* out, Need need, RealRange range) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return;
  if (!value.IsScalar()) return FailAt(value.Mark(), key, "expected a number");
  const std::string& s = value.Scalar();
  if (IsQuoted(value))
    return FailAt(value.Mark(), key, fmt::format("expected a number, got the string {}", Quote(s)));
  double parsed = 0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), parsed);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(parsed))
    return FailAt(value.Mark(), key, fmt::format("expected a finite number, got {}", Quote(s)));
  bool below = range.min_exclusive ? parsed <= range.min : parsed < range.min;
  if (below || parsed > range.max) {
    std::string rule = range.min_exclusive && range.min == 0.0 && parsed <= 0
                           ? fmt::format("must be greater than 0, got {}", s)
                           : fmt::format("must be {} {} and at most {}, got {}",
                                         range.min_exclusive ? "greater than" : "at least",
                                         range.min, range.max, s);
    return FailAt(value.Mark(), key, rule);
  }
  *out = parsed;
}

void YamlMap::Bool(std::string_view key, bool* out, Need need) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return;
  const std::string s = value.IsScalar() ? value.Scalar() : "";
  if (IsQuoted(value))
    return FailAt(value.Mark(), key,
                  fmt::format("expected true or false, got the string {}", Quote(s)));
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
  } else {
    FailAt(value.Mark(), key, fmt::format("expected true or false, got {}", Quote(s)));
  }
}

void YamlMap::String(std::string_view key, std::string* out, Need need) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return;
  if (!value.IsScalar() || value.Scalar().empty())
    return FailAt(value.Mark(), key, "expected a non-empty string");
  *out = value.Scalar();
}

void YamlMap::Name(std::string_view key, std::string* out, Need need) {
  std::string text;
  String(key, &text, need);
  if (text.empty()) return;
  // A name goes into tables, comments of exported configs and file headers, one line each.
  if (std::any_of(text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
    return Fail(key, "must not hold control characters (a newline, a tab)");
  *out = std::move(text);
}

bool YamlMap::ReadEnumText(std::string_view key, Need need, size_t count,
                           const std::function<std::string_view(size_t)>& name_at,
                           std::string* out) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return false;
  std::string text = value.IsScalar() ? value.Scalar() : "";
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    names.emplace_back(name_at(i));
    if (names.back() == text) {
      *out = text;
      return true;
    }
  }
  std::string allowed;
  for (const std::string& name : names) allowed += (allowed.empty() ? "" : " | ") + name;
  FailAt(value.Mark(), key, fmt::format("unknown value {} (expected {})", Quote(text), allowed));
  return false;
}

std::optional<YamlMap> YamlMap::Map(std::string_view key, Need need) {
  YAML::Node value = Lookup(key, need);
  if (!value.IsDefined()) return std::nullopt;
  YamlMap child(value, file_, PathOf(key));
  if (child.failed()) {
    FailAt(value.Mark(), key, "expected a mapping of keys to values");
    return std::nullopt;
  }
  child.error_ = error_;
  return child;
}

Status YamlMap::Finish() {
  if (!error_->has_value() && node_.IsMap()) {
    std::set<std::string> seen;
    for (const auto& entry : node_) {
      if (!entry.first.IsScalar()) {
        FailAt(entry.first.Mark(), "", "keys must be plain strings");
        break;
      }
      const std::string& key = entry.first.Scalar();
      if (!seen.insert(key).second) {
        FailAt(entry.first.Mark(), key, "duplicate key");
        break;
      }
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
        std::string nearest = NearestWord(key, known_);
        std::string hint = nearest.empty() ? "" : fmt::format(" (did you mean '{}'?)", nearest);
        FailAt(entry.first.Mark(), key, fmt::format("unknown key{}", hint));
        break;
      }
    }
  }
  if (missing_key_.has_value() && node_.IsMap()) {
    for (const auto& entry : node_) {
      if (!entry.first.IsScalar()) continue;
      const std::string& key = entry.first.Scalar();
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      if (NearestWord(key, known_) == *missing_key_) {
        error_->reset();
        FailAt(entry.first.Mark(), key,
               fmt::format("unknown key (did you mean '{}'?)", *missing_key_));
        break;
      }
    }
  }
  if (error_->has_value()) return **error_;
  return Status::Ok();
}

std::string YamlQuoted(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace domino
