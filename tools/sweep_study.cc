#include "tools/sweep_study.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "hardware/hardware_spec.h"
#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "models/model_spec.h"
#include "planner/stack.h"

namespace domino::cli {
namespace {

constexpr const char* kKeys[] = {"network_GBps", "nvlink_GBps", "nodes", "node",     "seq_len",
                                 "micro_batch",  "model",       "stack", "precision"};
constexpr const char* kKeyList =
    "network_GBps, nvlink_GBps, nodes, node, seq_len, micro_batch, model, stack, precision";

// What a value of `key` must be, where a look at it tells (a model, stack or node is looked up as
// the points will); empty if it is fine.
std::string ValueRule(const std::string& key, const std::string& value) {
  if (key == "model")
    if (Result<ModelSpec> model = LoadModel(value); !model.ok()) return model.message();
  if (key == "stack")
    if (Result<StackSpec> stack = LoadStack(value); !stack.ok()) return stack.message();
  if (key == "node")
    if (Result<NodeSpec> node = LoadNode(value); !node.ok()) return node.message();
  int number = 0;
  if ((key == "nodes" || key == "seq_len" || key == "micro_batch") &&
      !PositiveDecimalInt(value, &number))
    return fmt::format("expected a positive decimal integer, got '{}'", value);
  if (key == "precision" && value != "bf16" && value != "fp16" && value != "fp8")
    return fmt::format("expected bf16, fp16 or fp8, got '{}'", value);
  if ((key == "network_GBps" || key == "nvlink_GBps") && !SweepBandwidth(value))
    return fmt::format("expected a bandwidth from 0.001 to 1000000 GB/s, got '{}'", value);
  return "";
}

}  // namespace

std::optional<double> SweepBandwidth(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  const double GBps = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(GBps) || GBps < 1e-3 || GBps > 1e6)
    return std::nullopt;
  return GBps;
}

bool KnownSweepKey(std::string_view key) {
  for (const char* k : kKeys)
    if (key == k) return true;
  return false;
}

Result<Axis> ParseAxis(const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return Error(fmt::format("--vary {}: expected KEY=V1,V2,...", text));
  Axis axis;
  axis.key = text.substr(0, eq);
  if (!KnownSweepKey(axis.key))
    return Error(fmt::format("--vary {}: unknown key '{}' ({})", text, axis.key, kKeyList));
  std::string rest = text.substr(eq + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    if (end == start) return Error(fmt::format("--vary {}: an empty value", text));
    const std::string value = rest.substr(start, end - start);
    if (std::string rule = ValueRule(axis.key, value); !rule.empty())
      return Error(fmt::format("--vary {}: {}", text, rule));
    if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end())
      return Error(fmt::format("--vary {}: '{}' is given twice", text, value));
    axis.values.push_back(value);
    start = end + 1;
  }
  if (axis.values.empty()) return Error(fmt::format("--vary {}: no values", text));
  return axis;
}

bool PositiveDecimalInt(std::string_view text, int* out) {
  if (text.empty() || text.size() > 9 || text[0] == '0' ||
      text.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  *out = 0;
  for (char c : text) *out = *out * 10 + (c - '0');
  return true;
}

Result<Study> ParseStudy(std::string_view text, std::string_view file) {
  const std::string path(file);
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, path);
  Study study;
  map.Name("name", &study.name, Need::kRequired);
  YAML::Node grid = map.Raw("grid");
  YAML::Node fixed = map.Raw("fixed");
  DOMINO_RETURN_IF_ERROR(map.Finish());
  auto where = [&](const YAML::Node& n, const std::string& key, const std::string& rule) {
    return Error(
        fmt::format("{}:{}:{}: {}: {}", path, n.Mark().line + 1, n.Mark().column + 1, key, rule));
  };
  if (!grid || !grid.IsMap() || grid.size() == 0)
    return where(*root, "grid", "expected a mapping of keys to lists of values");
  // A key given twice: YAML readers keep one of the two, a study takes neither.
  auto given_twice = [](const YAML::Node& block, const YAML::Node& key) {
    int seen = 0;
    for (const auto& entry : block) seen += entry.first.Scalar() == key.Scalar();
    return seen > 1;
  };
  for (const auto& entry : grid) {
    const std::string key = entry.first.Scalar();
    if (!KnownSweepKey(key))
      return where(entry.first, "grid." + key, fmt::format("unknown key ({})", kKeyList));
    if (given_twice(grid, entry.first)) return where(entry.first, "grid." + key, "given twice");
    if (!entry.second.IsSequence() || entry.second.size() == 0)
      return where(entry.second, "grid." + key, "expected a non-empty list of values");
    Axis axis;
    axis.key = key;
    for (const auto& v : entry.second) {
      if (!v.IsScalar()) return where(v, "grid." + key, "expected a scalar value");
      const std::string& value = v.Scalar();
      if (std::string rule = ValueRule(key, value); !rule.empty())
        return where(v, "grid." + key, rule);
      if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end())
        return where(v, "grid." + key, fmt::format("'{}' is given twice", value));
      axis.values.push_back(value);
    }
    study.axes.push_back(std::move(axis));
  }
  if (fixed) {
    if (!fixed.IsMap()) return where(fixed, "fixed", "expected a mapping of keys to values");
    for (const auto& entry : fixed) {
      const std::string key = entry.first.Scalar();
      if (!KnownSweepKey(key)) return where(entry.first, "fixed." + key, "unknown key");
      if (given_twice(fixed, entry.first)) return where(entry.first, "fixed." + key, "given twice");
      if (!entry.second.IsScalar()) return where(entry.second, "fixed." + key, "expected a value");
      if (std::string rule = ValueRule(key, entry.second.Scalar()); !rule.empty())
        return where(entry.second, "fixed." + key, rule);
      if (grid[key])
        return where(entry.first, "fixed." + key,
                     "the grid varies it too: give it in grid or in fixed, not in both");
      study.fixed.emplace_back(key, entry.second.Scalar());
    }
  }
  return study;
}

Result<Study> LoadStudy(const std::string& path) {
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  return ParseStudy(*text, path);
}

Result<size_t> CountSweepPoints(const std::vector<Axis>& axes) {
  size_t total = 1;
  for (const Axis& a : axes) {
    if (a.values.size() > kMaxSweepPoints / total)
      return Error(
          fmt::format("the grid has more than {} points: split the sweep", kMaxSweepPoints));
    total *= a.values.size();
  }
  return total;
}

}  // namespace domino::cli
