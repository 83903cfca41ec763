#ifndef DOMINO_SIM_REPORT_H_
#define DOMINO_SIM_REPORT_H_

#include <string>
#include <string_view>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"
#include "planner/schedule.h"

namespace domino::sim {

// The `timeline:` block a report ends with: every op of one micro-batch on one rank, in issue
// order, as [label, class, start_us, end_us]. `domino compare` matches two reports' ops by label
// (and by occurrence, for labels that repeat).
std::string TimelineYaml(const Schedule& schedule, const Timeline& timeline);

// Who wrote a report: `domino simulate --report`, `simulate --report-iteration` or `execute
// --report`. A report names it in its `report:` key, written before its plan, so that a copy cut
// short before its timeline is refused rather than read as a plan.
enum class ReportKind { kSimulate, kSimulateIteration, kExecute };

// A whole report: `# comment`, `report: KIND`, the plan (PlanToYaml, with its figures) and the
// timeline.
std::string ReportYaml(const Plan& plan, ReportKind kind, std::string_view comment,
                       const Schedule& schedule, const Timeline& timeline);

struct ReportOp {
  std::string label;
  std::string op_class;  // OpClassName
  double start_us = 0, end_us = 0;
};

// A report read back: the plan with its predicted:/measured: blocks, and its timeline (empty
// when the report has none).
struct Report {
  Plan plan;
  std::vector<ReportOp> ops;
};

// Loads a report written by `domino simulate --report` or `domino execute --report`. Errors name
// the file, line and key. A file without `report:` (a plan, or a report written before it) may
// have no timeline; one with it must have its timeline, whole (timeline.op_count).
Result<Report> LoadReport(const std::string& path);

}  // namespace domino::sim

#endif  // DOMINO_SIM_REPORT_H_
