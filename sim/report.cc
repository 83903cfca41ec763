#include "sim/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "sim/predict.h"

namespace domino::sim {

std::string TimelineYaml(const Schedule& schedule, const Timeline& timeline) {
  // A whole iteration's timeline holds passes (forward and backward of each micro-batch).
  const bool passes =
      std::ranges::any_of(schedule.ops(), [](const Op& op) { return op.kind == OpKind::kPass; });
  // The count comes first, so that a copy cut short (at a line: the YAML still parses) lists
  // fewer ops than it declares.
  std::string out = fmt::format(
      "timeline:  # {} on one rank, in issue order: [op, class, start_us, end_us]\n"
      "  op_count: {}\n"
      "  ops:\n",
      passes ? "a whole iteration" : "one micro-batch", schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    out += fmt::format("    - [{}, {}, {:.3f}, {:.3f}]\n", schedule.Label(id),
                       OpClassName(ClassOf(schedule.op(id))), timeline.ops[i].start_us,
                       timeline.ops[i].end_us);
  }
  return out;
}

namespace {

constexpr std::array<std::pair<std::string_view, ReportKind>, 3> kReportKinds{{
    {"simulate", ReportKind::kSimulate},
    {"simulate-iteration", ReportKind::kSimulateIteration},
    {"execute", ReportKind::kExecute},
}};

}  // namespace

std::string ReportYaml(const Plan& plan, ReportKind kind, std::string_view comment,
                       const Schedule& schedule, const Timeline& timeline) {
  std::string_view name;
  for (const auto& [each_name, each] : kReportKinds)
    if (each == kind) name = each_name;
  return fmt::format("# {}\nreport: {}\n", comment, name) + PlanToYaml(plan) +
         TimelineYaml(schedule, timeline);
}

Result<Report> LoadReport(const std::string& path) {
  Result<Plan> plan = LoadPlan(path);
  if (!plan.ok()) return plan.error();
  Report report;
  report.plan = std::move(plan).value();
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  Result<YAML::Node> root = ParseYaml(*text, path);
  if (!root.ok()) return root.error();
  YAML::Node timeline = (*root)["timeline"];
  if (const YAML::Node kind = std::as_const(*root)["report"]) {
    YamlMap map(*root, path);
    ReportKind read = ReportKind::kSimulate;
    map.Enum("report", &read, Need::kOptional, kReportKinds);
    if (map.failed()) return map.Finish().error();
    if (!timeline)
      return Error(
          fmt::format("{}:{}:{}: report: {}, but no timeline: block follows: the file "
                      "was cut short",
                      path, kind.Mark().line + 1, kind.Mark().column + 1, kind.Scalar()));
  }
  if (!timeline) return report;
  auto fail = [&](const YAML::Node& node, const std::string& rule) {
    return Error(fmt::format("{}:{}:{}: timeline.ops: {}", path, node.Mark().line + 1,
                             node.Mark().column + 1, rule));
  };
  // A report written before op_count has none: its ops are taken as listed.
  int64_t declared = -1;
  auto miscounted = [&](size_t listed) {
    const YAML::Mark at = std::as_const(timeline)["op_count"].Mark();
    return Error(
        fmt::format("{}:{}:{}: timeline.op_count: {} ops declared, {} listed in "
                    "timeline.ops{}",
                    path, at.line + 1, at.column + 1, declared, listed,
                    std::cmp_less(listed, declared) ? ": the file was cut short" : ""));
  };
  YAML::Node ops;
  if (timeline.IsMap()) {
    YamlMap map(timeline, path, "timeline");
    map.Int("op_count", &declared, Need::kOptional, IntRange{.min = 0});
    // Cut after op_count: no ops, or `ops:` with nothing under it.
    if (const YAML::Node listed = std::as_const(timeline)["ops"];
        declared > 0 && (!listed || listed.IsNull()))
      return miscounted(0);
    ops = map.Raw("ops");
    DOMINO_RETURN_IF_ERROR(map.Finish());
  }
  if (!ops || !ops.IsSequence())
    return fail(timeline, "expected a list of [op, class, start_us, end_us]");
  if (declared >= 0 && std::cmp_not_equal(ops.size(), declared)) return miscounted(ops.size());
  std::vector<std::string_view> classes;
  for (int c = 0; c < kOpClassCount; ++c) classes.push_back(OpClassName(static_cast<OpClass>(c)));
  // A time written as a string ("92.3") is text, as in every domino file.
  auto quoted = [](const YAML::Node& n) {
    return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
  };
  for (const YAML::Node& entry : ops) {
    if (!entry.IsSequence() || entry.size() != 4)
      return fail(entry, "each entry is [op, class, start_us, end_us]");
    ReportOp op;
    try {
      op.label = entry[0].as<std::string>();
      op.op_class = entry[1].as<std::string>();
      op.start_us = entry[2].as<double>();
      op.end_us = entry[3].as<double>();
    } catch (const YAML::Exception&) {
      return fail(entry, "each entry is [op, class, start_us, end_us] with numbers for the times");
    }
    if (quoted(entry[2]) || quoted(entry[3]))
      return fail(entry, "each entry is [op, class, start_us, end_us] with numbers for the times");
    if (std::ranges::find(classes, op.op_class) == classes.end())
      return fail(entry[1], fmt::format("unknown op class '{}' (expected {})", op.op_class,
                                        fmt::join(classes, " | ")));
    // Microseconds from the timeline's start: finite, not negative, within a day and more.
    constexpr double kMaxUs = 1e11;
    if (!std::isfinite(op.start_us) || !std::isfinite(op.end_us) || op.start_us < 0 ||
        op.end_us > kMaxUs)
      return fail(entry, fmt::format("start_us and end_us are microseconds from the timeline's "
                                     "start: finite, from 0 to {:g}",
                                     kMaxUs));
    if (op.end_us < op.start_us) return fail(entry, "an op must not end before it starts");
    report.ops.push_back(std::move(op));
  }
  return report;
}

}  // namespace domino::sim
