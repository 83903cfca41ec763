// The CUDA backend's own logic on the fake GPU of fake_cuda_ops.cc: streams, events, the timeline
// it reads back, graph capture and calibration. The fake times ops by fixed rules, so the
// expected times are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "exec/calibrate.h"
#include "exec/communicator.h"
#include "exec/execute.h"
#include "planner/lower.h"
#include "sim/engine.h"
#include "tests/exec/fake_cuda_ops.h"
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

Plan TinyPlan(int p, OverlapScope scope) {
  testing_util::PlanKnobs k;
  k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/tiny-gpt.yaml";
  k.cluster = "dgx-h100:1:2";
  k.tp = 2;
  k.seq_len = 16;
  k.micro_batch = 12;
  k.global_batch = 12;
  k.row_split = p;
  k.scope = scope;
  return testing_util::MakePlan(k);
}

// Emulated collectives as fast as 1 GB/s of their buffer: 1 us per kB.
std::vector<EmulatedCollective> Emulated(const Schedule& s) {
  std::vector<EmulatedCollective> e(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    if (s.ops()[i].kind == OpKind::kCollective)
      e[i] = {16, s.ops()[i].bytes, s.ops()[i].bytes * 1e-3};
  return e;
}

Result<ExecuteResult> RunEmulated(const Plan& plan, bool graph, int iterations = 1) {
  Result<Schedule> s = Lower(plan);
  if (!s.ok()) return s.error();
  ExecuteOptions options;
  options.backend = "cuda";
  options.cuda.comm = "emulate";
  options.cuda.dtype = "bf16";
  options.cuda.graph = graph;
  options.cuda.emulated = Emulated(*s);
  options.iterations = iterations;
  SelfCommunicator self;
  return ExecuteSchedule(plan, std::move(s).value(), self, options);
}

bool Overlap(const OpTime& a, const OpTime& b) {
  return std::max(a.start_us, b.start_us) < std::min(a.end_us, b.end_us);
}

// Every op waits for its dependencies and for the op before it on its stream; each lasts what
// the fake says; a collective overlaps independent compute; every collective was emulated.
TEST(CudaBackendFakeTest, EmulatedRunKeepsEveryOrderAndOverlaps) {
  Result<ExecuteResult> r = RunEmulated(TinyPlan(2, OverlapScope::kInterLayer), false);
  ASSERT_TRUE(r.ok()) << r.message();
  const Schedule& s = r->schedule;
  const std::vector<OpTime>& t = r->timeline.ops;
  ASSERT_EQ(t.size(), s.size());
  const std::vector<EmulatedCollective> emulated = Emulated(s);
  int collectives = 0;
  bool overlapped = false;
  int32_t last[2] = {-1, -1};
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    const int stream = op.stream == Stream::kCompute ? 0 : 1;
    EXPECT_GE(t[i].start_us, 0);
    for (int32_t d : s.deps(op)) EXPECT_GE(t[i].start_us, t[d].end_us) << s.Label(i);
    if (last[stream] >= 0) {
      EXPECT_GE(t[i].start_us, t[last[stream]].end_us) << s.Label(i);
    }
    last[stream] = static_cast<int32_t>(i);
    const double us = t[i].end_us - t[i].start_us;
    if (op.kind == OpKind::kCollective) {
      ++collectives;
      EXPECT_NEAR(us, emulated[i].us, 1e-3) << s.Label(i);
      for (size_t j = 0; j < s.size(); ++j)
        overlapped |= s.ops()[j].stream == Stream::kCompute && Overlap(t[i], t[j]);
    }
    if (op.kind == OpKind::kGemm) {
      EXPECT_NEAR(us, fake::kLaunchUs + op.flops * fake::kUsPerFlop, 1e-3) << s.Label(i);
    }
  }
  EXPECT_GT(collectives, 0);
  EXPECT_TRUE(overlapped);
  EXPECT_EQ(fake::Counters().emulated, collectives);
  EXPECT_EQ(fake::Counters().emulated_ctas, 16);
  EXPECT_GT(fake::Counters().waits, 0);
}

// Without contention the GPU runs a schedule exactly as the simulator's engine does: given each
// op's duration as the fake measured it, the engine's timeline is the executor's, op for op, for
// the baseline, row slices in both scopes, column chunks and 2D.
TEST(CudaBackendFakeTest, TimelineIsTheEnginesForTheSameDurations) {
  struct Strategy {
    int p, q;
    OverlapScope scope;
  };
  for (const Strategy& st :
       {Strategy{1, 1, OverlapScope::kNone}, Strategy{2, 1, OverlapScope::kInterLayer},
        Strategy{4, 1, OverlapScope::kIntraLayer}, Strategy{1, 2, OverlapScope::kIntraLayer},
        Strategy{2, 2, OverlapScope::kInterLayer}}) {
    Plan plan = TinyPlan(st.p, st.scope);
    plan.col_split = st.q;
    ASSERT_TRUE(ResolvePlan(plan).ok());
    Result<ExecuteResult> r = RunEmulated(plan, false);
    ASSERT_TRUE(r.ok()) << r.message();
    const std::vector<OpTime>& t = r->timeline.ops;
    std::vector<sim::OpCost> costs(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      costs[i].alone_us = t[i].end_us - t[i].start_us;
      if (r->schedule.ops()[i].kind == OpKind::kCollective) {
        costs[i].is_comm = true;
      } else {
        costs[i].launch_us = costs[i].alone_us;  // a fixed cost: nothing contends here
      }
    }
    const Timeline engine = sim::Simulate(r->schedule, costs, sim::DeviceResources{});
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_NEAR(t[i].start_us, engine.ops[i].start_us, 1e-3)
          << "p " << st.p << " q " << st.q << ": " << r->schedule.Label(static_cast<int32_t>(i));
      EXPECT_NEAR(t[i].end_us, engine.ops[i].end_us, 1e-3);
    }
  }
}

// A captured graph replays the same timeline as the eager run: captured once, launched per run
// (after one eager warm-up run).
TEST(CudaBackendFakeTest, GraphReplayGivesTheEagerTimeline) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<ExecuteResult> eager = RunEmulated(plan, false);
  Result<ExecuteResult> graph = RunEmulated(plan, true, 3);
  ASSERT_TRUE(eager.ok()) << eager.message();
  ASSERT_TRUE(graph.ok()) << graph.message();
  EXPECT_EQ(fake::Counters().captures, 1);
  EXPECT_EQ(fake::Counters().graph_launches, 3);
  ASSERT_EQ(eager->timeline.ops.size(), graph->timeline.ops.size());
  for (size_t i = 0; i < eager->timeline.ops.size(); ++i) {
    EXPECT_NEAR(graph->timeline.ops[i].start_us, eager->timeline.ops[i].start_us, 1e-3);
    EXPECT_NEAR(graph->timeline.ops[i].end_us, eager->timeline.ops[i].end_us, 1e-3);
  }
}

// Calibration times each distinct op alone with events, measures the device, and times the
// largest GEMM and memory-bound op beside an emulated collective (the fake's streams do not
// contend, so beside equals alone here).
TEST(CudaBackendFakeTest, CalibrationTimesEveryDistinctOp) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  CalibrateOptions options;
  options.repeats = 3;
  options.beside = EmulatedCollective{16, 1e6, 100};
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(profile->backend, "cuda");
  EXPECT_EQ(profile->device, "fake GPU");
  EXPECT_TRUE(profile->contention);
  EXPECT_TRUE(profile->collectives.empty());  // one rank: no collectives to time
  EXPECT_EQ(profile->gemm_tflops, fake::kPeakTflops);
  EXPECT_EQ(profile->hbm_GBps, fake::kHbmGBps);
  for (const Op& op : s->ops()) {
    if (op.kind == OpKind::kCollective) continue;
    ASSERT_TRUE(profile->compute_us.count(OpSignature(op))) << OpSignature(op);
    if (op.kind == OpKind::kGemm) {
      EXPECT_NEAR(profile->compute_us.at(OpSignature(op)),
                  fake::kLaunchUs + op.flops * fake::kUsPerFlop, 1e-3);
    }
  }
  ASSERT_EQ(profile->contention_samples.size(), 2u);
  for (const auto& c : profile->contention_samples) {
    EXPECT_EQ(c.ctas, 16);
    EXPECT_NEAR(c.hbm_GBps, 1e6 / 100 * 1e-3, 1e-9);
    EXPECT_NEAR(c.beside_us, c.alone_us, 1e-3);
  }
}

}  // namespace
}  // namespace domino::exec
