#include "exec/stream_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "planner/lower.h"
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

int32_t AddOp(Schedule& s, Stream stream, std::vector<int32_t> deps) {
  Op op;
  op.stream = stream;
  op.kind = stream == Stream::kCompute ? OpKind::kGemm : OpKind::kCollective;
  op.func = stream == Stream::kCompute ? OpFunc::kQkv : OpFunc::kTpAllReduce;
  if (stream != Stream::kCompute) op.collective = CollectiveOp::kAllReduce;
  return s.Add(op, deps);
}

// Worked by hand: each op waits only for the latest op of the other stream it depends on that its
// stream has not already waited past.
TEST(StreamPlanTest, WaitsOnlyWhereAStreamHasNotWaitedPast) {
  Schedule s;
  const Stream c = Stream::kCompute, t = Stream::kTpComm;
  AddOp(s, c, {});      // 0
  AddOp(s, t, {0});     // 1: waits for 0
  AddOp(s, c, {});      // 2
  AddOp(s, c, {1});     // 3: waits for 1
  AddOp(s, t, {2});     // 4: waits for 2 (past 0)
  AddOp(s, c, {3, 4});  // 5: 3 is its own stream's; waits for 4
  AddOp(s, t, {0});     // 6: comm already waited past 0 (for 2)
  AddOp(s, c, {1, 4});  // 7: compute already waited past 4
  Result<std::vector<StreamStep>> steps = PlanStreams(s);
  ASSERT_TRUE(steps.ok()) << steps.message();
  const std::vector<std::vector<int32_t>> waits = {{}, {0}, {}, {1}, {2}, {4}, {}, {}};
  const std::vector<bool> done = {true, true, true, false, true, false, false, false};
  const std::vector<Stream> stream = {c, t, c, c, t, c, t, c};
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_EQ((*steps)[i].wait_for, waits[i]) << "op " << i;
    EXPECT_EQ((*steps)[i].record_done, done[i]) << "op " << i;
    EXPECT_EQ((*steps)[i].stream, stream[i]) << "op " << i;
  }
}

TEST(StreamPlanTest, RefusesStreamsTheExecutorDoesNotRun) {
  Schedule s;
  AddOp(s, Stream::kCompute, {});
  AddOp(s, Stream::kDpComm, {0});
  Result<std::vector<StreamStep>> steps = PlanStreams(s);
  ASSERT_FALSE(steps.ok());
  EXPECT_NE(steps.message().find("dp-comm"), std::string::npos) << steps.message();
}

// On every lowering the executor runs: each dependency on another stream is covered by a wait of
// the op's stream, at or before the op, on an op of that stream at or after the dependency; and
// no op waits for more events than it has dependencies on other streams.
TEST(StreamPlanTest, EveryCrossStreamDependencyIsCoveredOnRealLowerings) {
  struct Knobs {
    int p, q;
    OverlapScope scope;
    bool sp;
  };
  for (const Knobs& k :
       {Knobs{1, 1, OverlapScope::kNone, false}, Knobs{2, 1, OverlapScope::kInterLayer, false},
        Knobs{4, 1, OverlapScope::kIntraLayer, false},
        Knobs{1, 2, OverlapScope::kIntraLayer, false},
        Knobs{2, 2, OverlapScope::kInterLayer, false},
        Knobs{2, 1, OverlapScope::kInterLayer, true}}) {
    PlanKnobs knobs;
    knobs.row_split = k.p;
    knobs.col_split = k.q;
    knobs.scope = k.scope;
    knobs.sequence_parallel = k.sp;
    Plan plan = MakePlan(knobs);
    Result<Schedule> s = Lower(plan);
    ASSERT_TRUE(s.ok()) << s.message();
    Result<std::vector<StreamStep>> steps = PlanStreams(*s);
    ASSERT_TRUE(steps.ok()) << steps.message();
    size_t waits = 0;
    // covered[a][b]: the latest op of stream b that stream a has waited for, so far.
    int32_t covered[kStreamCount][kStreamCount];
    for (auto& row : covered) std::fill(std::begin(row), std::end(row), -1);
    auto at = [&](Stream a, Stream b) -> int32_t& {
      return covered[static_cast<int>(a)][static_cast<int>(b)];
    };
    for (size_t i = 0; i < s->size(); ++i) {
      const StreamStep& step = (*steps)[i];
      for (int32_t w : step.wait_for) {
        ASSERT_LT(w, static_cast<int32_t>(i));
        EXPECT_TRUE((*steps)[w].record_done);
        EXPECT_NE((*steps)[w].stream, step.stream);
        at(step.stream, (*steps)[w].stream) = std::max(at(step.stream, (*steps)[w].stream), w);
      }
      size_t cross = 0;
      for (int32_t d : s->deps(s->ops()[i])) {
        if ((*steps)[d].stream == step.stream) continue;
        ++cross;
        EXPECT_GE(at(step.stream, (*steps)[d].stream), d)
            << "p " << k.p << " q " << k.q << ": op " << i << " (" << s->Label(i) << ") dep " << d;
      }
      EXPECT_LE(step.wait_for.size(), cross);
      waits += step.wait_for.size();
    }
    EXPECT_GT(waits, 0u);
  }
}

}  // namespace
}  // namespace domino::exec
