#include "sim/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

#include "models/base/file_io.h"
#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

std::string TempPath(const char* name) {
  return testing::TempDir() + "/" + std::to_string(::getpid()) + "_" + name;
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ReportTest, TimelineRoundTripsThroughAReport) {
  testing_util::PlanKnobs k;
  k.row_split = 2;
  k.scope = OverlapScope::kInterLayer;
  Plan plan = testing_util::MakePlan(k);
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  Plan report = plan;
  report.predicted = p->figures;
  const std::string path = TempPath("report.yaml");
  WriteText(path, PlanToYaml(report, "test") + TimelineYaml(p->schedule, p->timeline));
  Result<Report> back = LoadReport(path);
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_TRUE(back->plan.predicted.has_value());
  EXPECT_NEAR(back->plan.predicted->iteration_ms, p->figures.iteration_ms, 1e-3);
  ASSERT_EQ(back->ops.size(), p->schedule.size());
  for (size_t i = 0; i < back->ops.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    EXPECT_EQ(back->ops[i].label, p->schedule.Label(id));
    EXPECT_EQ(back->ops[i].op_class, OpClassName(ClassOf(p->schedule.op(id))));
    EXPECT_NEAR(back->ops[i].start_us, p->timeline.ops[i].start_us, 1e-3);
    EXPECT_NEAR(back->ops[i].end_us, p->timeline.ops[i].end_us, 1e-3);
  }
  // A report is still a plan.
  Result<Plan> as_plan = LoadPlan(path);
  ASSERT_TRUE(as_plan.ok()) << as_plan.message();
  EXPECT_EQ(as_plan->row_split, 2);
  std::remove(path.c_str());
}

TEST(ReportTest, AReportWithoutTimelineHasNoOps) {
  Plan plan = testing_util::MakePlan({});
  const std::string path = TempPath("plan.yaml");
  WriteText(path, PlanToYaml(plan));
  Result<Report> back = LoadReport(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_TRUE(back->ops.empty());
  std::remove(path.c_str());
}

TEST(ReportTest, MalformedTimelineNamesTheLine) {
  Plan plan = testing_util::MakePlan({});
  const std::string path = TempPath("bad.yaml");
  std::string yaml = PlanToYaml(plan);
  const int line = static_cast<int>(std::count(yaml.begin(), yaml.end(), '\n')) + 3;
  WriteText(path, yaml + "timeline:\n  ops:\n    - [qkv L0 fwd, gemm, 10, 5]\n");
  Result<Report> back = LoadReport(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.message().find(path + ":" + std::to_string(line) + ":"), std::string::npos)
      << back.message();
  EXPECT_NE(back.message().find("must not end before it starts"), std::string::npos);
  WriteText(path, yaml + "timeline:\n  ops:\n    - [qkv L0 fwd, gemm, ten, 5]\n");
  back = LoadReport(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.message().find("timeline.ops"), std::string::npos) << back.message();
  std::remove(path.c_str());
}

// A report's timeline declares its op count before its ops: a copy cut short at a line boundary
// (whose YAML still parses) is refused, naming what it lacks, where it was read as a shorter
// timeline; so is one whose ops were added to. A report written before op_count still reads.
TEST(ReportTest, ATimelineCutShortIsAnError) {
  Plan plan = testing_util::MakePlan({});
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  plan.predicted = p->figures;
  const std::string head = PlanToYaml(plan, "test");
  const std::string timeline = TimelineYaml(p->schedule, p->timeline);
  const std::string count = "  op_count: " + std::to_string(p->schedule.size()) + "\n";
  ASSERT_NE(timeline.find("\n" + count + "  ops:\n"), std::string::npos) << timeline;
  const int line = static_cast<int>(std::count(head.begin(), head.end(), '\n')) + 2;
  const std::string where = ":" + std::to_string(line) + ":13: timeline.op_count: ";
  const std::string path = TempPath("cut.yaml");
  // Cut after the count, after `ops:` (0 ops listed), and after the first op.
  for (const auto& [lines_kept, listed] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{2, 1}}) {
    size_t end = timeline.find(count) + count.size();
    for (int kept = 0; kept < lines_kept; ++kept) end = timeline.find('\n', end) + 1;
    WriteText(path, head + timeline.substr(0, end));
    Result<Report> back = LoadReport(path);
    ASSERT_FALSE(back.ok()) << lines_kept << " lines kept";
    EXPECT_EQ(back.message(), path + where + std::to_string(p->schedule.size()) +
                                  " ops declared, " + std::to_string(listed) +
                                  " listed in timeline.ops: the file was cut short");
  }
  WriteText(path, head + timeline + "    - [extra L0 mb0 fwd, gemm, 1, 2]\n");
  Result<Report> added = LoadReport(path);
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.message(), path + where + std::to_string(p->schedule.size()) + " ops declared, " +
                                 std::to_string(p->schedule.size() + 1) +
                                 " listed in timeline.ops");
  std::string older = timeline;
  older.erase(older.find(count), count.size());
  WriteText(path, head + older);
  Result<Report> back = LoadReport(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->ops.size(), p->schedule.size());
  std::remove(path.c_str());
}

// A report names its writer before its plan: cut anywhere before its timeline, it is refused,
// where a plan (or a report written before the key) without a timeline is read without ops.
TEST(ReportTest, AReportCutBeforeItsTimelineIsAnError) {
  Plan plan = testing_util::MakePlan({});
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  plan.predicted = p->figures;
  const std::string whole =
      ReportYaml(plan, ReportKind::kExecute, "test", p->schedule, p->timeline);
  ASSERT_EQ(whole.rfind("# test\nreport: execute\nmodel: ", 0), 0u) << whole;
  const std::string path = TempPath("cut_before.yaml");
  WriteText(path, whole);
  Result<Report> back = LoadReport(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->ops.size(), p->schedule.size());
  // Cut at the end of each line from the plan's last one to the one before `timeline:`.
  const size_t timeline = whole.find("\ntimeline:") + 1;
  for (const std::string_view cut : {std::string_view(whole).substr(0, timeline),
                                     std::string_view(whole).substr(0, whole.find("predicted:"))}) {
    WriteText(path, std::string(cut));
    Result<Report> short_one = LoadReport(path);
    ASSERT_FALSE(short_one.ok()) << cut;
    EXPECT_EQ(short_one.message(), path +
                                       ":2:9: report: execute, but no timeline: block "
                                       "follows: the file was cut short");
  }
  // Another writer's name is refused; without the key, the same file is a plan.
  std::string other = whole;
  other.replace(other.find("execute"), 7, "train");
  WriteText(path, other);
  Result<Report> wrong = LoadReport(path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.message(),
            path +
                ":2:9: report: unknown value 'train' (expected simulate | simulate-iteration "
                "| execute)");
  WriteText(path, whole.substr(0, timeline).erase(whole.find("report:"), 16));
  Result<Report> as_plan = LoadReport(path);
  ASSERT_TRUE(as_plan.ok()) << as_plan.message();
  EXPECT_TRUE(as_plan->ops.empty());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace domino::sim
