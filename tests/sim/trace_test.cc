#include "sim/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using nlohmann::json;

TEST(TraceTest, HandBuiltTimelineIsWrittenExactly) {
  Schedule s;
  Op gemm;
  gemm.kind = OpKind::kGemm;
  gemm.func = OpFunc::kFc1;
  gemm.m = 64, gemm.n = 128, gemm.k = 32;
  gemm.tags.layer = 2;
  int32_t a = s.Add(gemm, {});
  Op comm;
  comm.kind = OpKind::kCollective;
  comm.stream = Stream::kTpComm;
  comm.func = OpFunc::kTpAllReduce;
  comm.bytes = 4096;
  comm.tags.layer = 2;
  comm.tags.row_slice = 1;
  int32_t deps[] = {a};
  s.Add(comm, deps);
  Timeline t;
  t.ops = {{0, 12.5}, {12.5, 12.5}};  // a zero-length op is kept

  json trace = json::parse(TraceJson(s, t, 3, "stage 3"));
  const json& events = trace.at("traceEvents");
  ASSERT_EQ(events.size(), 1u + kStreamCount + 2);
  const json& x0 = events[1 + kStreamCount];
  EXPECT_EQ(x0["name"], "fc1 L2 fwd");
  EXPECT_EQ(x0["ph"], "X");
  EXPECT_EQ(x0["ts"], 0.0);
  EXPECT_EQ(x0["dur"], 12.5);
  EXPECT_EQ(x0["pid"], 3);
  EXPECT_EQ(x0["tid"], 0);
  EXPECT_EQ(x0["args"]["m"], 64);
  EXPECT_EQ(x0["args"]["k"], 32);
  const json& x1 = events[2 + kStreamCount];
  EXPECT_EQ(x1["name"], "tp.allreduce L2 s1 fwd");
  EXPECT_EQ(x1["ts"], 12.5);
  EXPECT_EQ(x1["dur"], 0.0);
  EXPECT_EQ(x1["tid"], 1);
  EXPECT_EQ(x1["args"]["bytes"], 4096.0);
  EXPECT_EQ(x1["args"]["row_slice"], 1);
  EXPECT_EQ(events[0]["args"]["name"], "stage 3");
}

TEST(TraceTest, PredictedTimelineIsAValidTrace) {
  testing_util::PlanKnobs knobs;
  knobs.row_split = 2;
  knobs.col_split = 2;
  knobs.scope = OverlapScope::kInterLayer;
  Plan plan = testing_util::MakePlan(knobs);
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  std::string text = TraceJson(p->schedule, p->timeline);
  EXPECT_EQ(text, TraceJson(p->schedule, p->timeline));  // deterministic
  ASSERT_TRUE(json::accept(text));
  json trace = json::parse(text);
  ASSERT_TRUE(trace.contains("traceEvents"));
  const json& events = trace["traceEvents"];
  ASSERT_TRUE(events.is_array());

  size_t complete = 0, metadata = 0;
  std::set<int> named_threads;
  for (const json& e : events) {
    ASSERT_TRUE(e.contains("ph"));
    if (e["ph"] == "M") {
      ++metadata;
      EXPECT_EQ(e["pid"], 0);
      if (e["name"] == "thread_name") {
        int tid = e["tid"];
        named_threads.insert(tid);
        EXPECT_EQ(e["args"]["name"], std::string(StreamName(static_cast<Stream>(tid))));
      } else {
        EXPECT_EQ(e["name"], "process_name");
        EXPECT_EQ(e["args"]["name"], "rank 0");
      }
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const size_t i = complete++;
    ASSERT_LT(i, p->schedule.size());
    for (const char* key : {"name", "ph", "ts", "dur", "pid", "tid"})
      ASSERT_TRUE(e.contains(key)) << key;
    EXPECT_EQ(e["name"], p->schedule.Label(static_cast<int32_t>(i)));
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_EQ(e["ts"].get<double>(), p->timeline.ops[i].start_us);
    EXPECT_EQ(e["pid"], 0);
    int tid = e["tid"];
    EXPECT_GE(tid, 0);
    EXPECT_LT(tid, kStreamCount);
    EXPECT_EQ(tid, static_cast<int>(p->schedule.ops()[i].stream));
  }
  EXPECT_EQ(complete, p->schedule.size());
  EXPECT_EQ(metadata, 1u + kStreamCount);
  EXPECT_EQ(events.size(), p->schedule.size() + 1 + kStreamCount);
  EXPECT_EQ(named_threads, (std::set<int>{0, 1, 2, 3, 4, 5}));
}

TEST(TraceTest, IterationTraceHasAProcessPerStageAndItsStreams) {
  // tp 2 x pp 2 x dp 2 of GPT-3 2.7B: the predicted iteration as a trace shows each stage as a
  // process, pipeline sends and recvs on pp-comm and DP buckets on dp-comm.
  testing_util::PlanKnobs k;
  k.tp = 2;
  k.pp = 2;
  k.dp = 2;
  k.micro_batch = 2;
  k.global_batch = 8;
  Result<Prediction> p = Predict(testing_util::MakePlan(k));
  ASSERT_TRUE(p.ok()) << p.message();
  json trace = json::parse(TraceJson(p->iteration, p->iteration_timeline));
  std::set<std::string> processes;
  std::set<std::pair<int, std::string>> placed;  // (tid, category)
  std::set<int> pids;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("name") == "process_name")
      processes.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") != "X") continue;
    pids.insert(e.at("pid").get<int>());
    placed.insert({e.at("tid").get<int>(), e.at("cat").get<std::string>()});
  }
  EXPECT_EQ(processes, (std::set<std::string>{"stage 0", "stage 1"}));
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  const int pp_comm = static_cast<int>(Stream::kPpComm),
            dp_comm = static_cast<int>(Stream::kDpComm);
  const int compute = static_cast<int>(Stream::kCompute);
  EXPECT_TRUE(placed.count({pp_comm, "pp.send"}));
  EXPECT_TRUE(placed.count({pp_comm, "pp.recv"}));
  EXPECT_TRUE(placed.count({dp_comm, "dp.allreduce"}));
  EXPECT_TRUE(placed.count({dp_comm, "embedding.allreduce"}));
  EXPECT_TRUE(placed.count({compute, "forward"}));
  EXPECT_TRUE(placed.count({compute, "backward"}));
  EXPECT_TRUE(placed.count({compute, "optimizer"}));
}

}  // namespace
}  // namespace domino::sim
