#include "sim/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace domino::sim
