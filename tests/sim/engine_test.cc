#include "sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include "planner/lower.h"
#include "sim/cost_model.h"
#include "tests/planner/test_plans.h"
#include "tests/sim/engine_case.h"

namespace domino::sim {
namespace {

constexpr double kEps = 1e-9;

constexpr DeviceResources kDevice = testing_util::kEngineDevice;

OpCost Compute(double tiles, double wave_us, double hbm_bytes = 0, double launch_us = 0) {
  OpCost c;
  c.tiles = tiles;
  c.wave_us = wave_us;
  c.hbm_bytes = hbm_bytes;
  c.launch_us = launch_us;
  c.alone_us = launch_us + c.BodyUs(kDevice.sms, kDevice.hbm_GBps);
  return c;
}

OpCost Comm(double alone_us, int ctas = 0, double hbm_bytes = 0) {
  OpCost c;
  c.alone_us = alone_us;
  c.ctas = ctas;
  c.hbm_bytes = hbm_bytes;
  c.is_comm = true;
  return c;
}

using Case = testing_util::EngineCase;

TEST(EngineTest, IndependentStreamsRunConcurrently) {
  Case c;
  int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10));  // one wave: 10 us
  int32_t comm = c.Add(Stream::kTpComm, Comm(6));
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[gemm].start_us, 0, kEps);
  EXPECT_NEAR(t.ops[gemm].end_us, 10, kEps);
  EXPECT_NEAR(t.ops[comm].start_us, 0, kEps);
  EXPECT_NEAR(t.ops[comm].end_us, 6, kEps);
  EXPECT_NEAR(t.end_us(), 10, kEps);  // max, not sum
}

TEST(EngineTest, DependencySerializesStreams) {
  Case c;
  int32_t comm = c.Add(Stream::kTpComm, Comm(6));
  int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10), {comm});
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[gemm].start_us, 6, kEps);
  EXPECT_NEAR(t.ops[gemm].end_us, 16, kEps);
  EXPECT_NEAR(t.end_us(), 16, kEps);
}

TEST(EngineTest, SameStreamRunsInIssueOrder) {
  Case c;
  int32_t a = c.Add(Stream::kCompute, Compute(150, 4));      // 2 waves: 8 us
  int32_t b = c.Add(Stream::kCompute, Compute(0, 0, 0, 7));  // launch only: 7 us
  int32_t x = c.Add(Stream::kTpComm, Comm(3));
  int32_t y = c.Add(Stream::kTpComm, Comm(2));
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[a].end_us, 8, kEps);
  EXPECT_NEAR(t.ops[b].start_us, 8, kEps);
  EXPECT_NEAR(t.ops[b].end_us, 15, kEps);
  EXPECT_NEAR(t.ops[x].end_us, 3, kEps);
  EXPECT_NEAR(t.ops[y].start_us, 3, kEps);
  EXPECT_NEAR(t.ops[y].end_us, 5, kEps);
}

TEST(EngineTest, ZeroCostOpsTakeNoTime) {
  Case c;
  int32_t free_first = c.Add(Stream::kTpComm, Comm(0));
  int32_t a = c.Add(Stream::kCompute, Compute(100, 10), {free_first});
  int32_t free_mid = c.Add(Stream::kTpComm, Comm(0), {a});
  int32_t b = c.Add(Stream::kCompute, Compute(100, 10), {free_mid});
  Timeline t = c.Run();
  EXPECT_EQ(t.ops[free_first].start_us, 0);
  EXPECT_EQ(t.ops[free_first].end_us, 0);
  EXPECT_NEAR(t.ops[a].start_us, 0, kEps);
  EXPECT_NEAR(t.ops[free_mid].start_us, 10, kEps);
  EXPECT_NEAR(t.ops[free_mid].end_us, 10, kEps);
  EXPECT_NEAR(t.ops[b].start_us, 10, kEps);
  EXPECT_NEAR(t.ops[b].end_us, 20, kEps);
}

TEST(EngineTest, CollectiveTakesSmsFromTheGemm) {
  // 100 tiles: one wave on 100 SMs (10 us), two waves on the 80 SMs a 20-CTA collective leaves.
  {
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t comm = c.Add(Stream::kTpComm, Comm(100, 20));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[gemm].end_us, 20, kEps);  // ceil(100/80) * 10 throughout
    EXPECT_NEAR(t.ops[comm].end_us, 100, kEps);
  }
  {
    // The collective ends first: 5 us at 1/20 per us does 0.25 of the GEMM; the remaining 0.75
    // at 1/10 per us takes 7.5 us: 12.5.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t comm = c.Add(Stream::kTpComm, Comm(5, 20));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[comm].end_us, 5, kEps);
    EXPECT_NEAR(t.ops[gemm].end_us, 12.5, kEps);
  }
  {
    // The launch (2 us) is not slowed: 5 us at 1/(2+20) does 5/22; 17/22 left at 1/12 per us.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10, 0, 2));
    c.Add(Stream::kTpComm, Comm(5, 20));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[gemm].end_us, 5 + 12.0 * 17 / 22, kEps);
  }
  {
    // 150 tiles need 2 waves on 100 SMs and on 80 SMs alike: no slowdown.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(150, 10));
    c.Add(Stream::kTpComm, Comm(5, 20));
    EXPECT_NEAR(c.Run().ops[gemm].end_us, 20, kEps);
  }
}

// Decomposed collective matmul, as planner/lower.cc emits it: a 200-tile GEMM (two waves on 100
// SMs, 20 us) after an 8 us all-gather, cut into two 100-tile pieces (10 us each) and two 4 us
// parts; piece k waits for part k only.
TEST(EngineTest, TwoChunkAllGatherGemmPipelines) {
  {
    // Unsplit: 8 + 20 = 28 us.
    Case c;
    int32_t ag = c.Add(Stream::kTpComm, Comm(8));
    int32_t gemm = c.Add(Stream::kCompute, Compute(200, 10), {ag});
    EXPECT_NEAR(c.Run().ops[gemm].end_us, 28, kEps);
  }
  {
    // Part 0 alone (0-4), piece 0 (4-14) beside part 1 (4-8), piece 1 (14-24): 4 us exposed.
    Case c;
    int32_t ag0 = c.Add(Stream::kTpComm, Comm(4));
    int32_t gemm0 = c.Add(Stream::kCompute, Compute(100, 10), {ag0});
    int32_t ag1 = c.Add(Stream::kTpComm, Comm(4));
    int32_t gemm1 = c.Add(Stream::kCompute, Compute(100, 10), {ag1});
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[ag1].start_us, 4, kEps);
    EXPECT_NEAR(t.ops[ag1].end_us, 8, kEps);
    EXPECT_NEAR(t.ops[gemm0].start_us, 4, kEps);
    EXPECT_NEAR(t.ops[gemm0].end_us, 14, kEps);
    EXPECT_NEAR(t.ops[gemm1].end_us, 24, kEps);
  }
  {
    // The parts take 20 CTAs: piece 0 runs on 80 SMs (two waves, 1/20 per us) beside part 1,
    // 0.2 done at 8 us, the other 0.8 alone in 8 us: 16; piece 1 16-26.
    Case c;
    int32_t ag0 = c.Add(Stream::kTpComm, Comm(4, 20));
    int32_t gemm0 = c.Add(Stream::kCompute, Compute(100, 10), {ag0});
    int32_t ag1 = c.Add(Stream::kTpComm, Comm(4, 20));
    int32_t gemm1 = c.Add(Stream::kCompute, Compute(100, 10), {ag1});
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[ag1].end_us, 8, kEps);
    EXPECT_NEAR(t.ops[gemm0].end_us, 16, kEps);
    EXPECT_NEAR(t.ops[gemm1].start_us, 16, kEps);
    EXPECT_NEAR(t.ops[gemm1].end_us, 26, kEps);
  }
}

// The row-parallel side: the same GEMM before a 12 us reduce-scatter, cut into two pieces whose
// 6 us parts reduce-scatter while the next piece computes; only the last part is exposed.
TEST(EngineTest, TwoChunkGemmReduceScatterPipelines) {
  {
    // Unsplit: 20 + 12 = 32 us.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(200, 10));
    int32_t rs = c.Add(Stream::kTpComm, Comm(12), {gemm});
    EXPECT_NEAR(c.Run().ops[rs].end_us, 32, kEps);
  }
  {
    // Piece 0 (0-10), part 0 (10-16) beside piece 1 (10-20), part 1 (20-26).
    Case c;
    int32_t gemm0 = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t rs0 = c.Add(Stream::kTpComm, Comm(6), {gemm0});
    int32_t gemm1 = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t rs1 = c.Add(Stream::kTpComm, Comm(6), {gemm1});
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[rs0].start_us, 10, kEps);
    EXPECT_NEAR(t.ops[rs0].end_us, 16, kEps);
    EXPECT_NEAR(t.ops[gemm1].end_us, 20, kEps);
    EXPECT_NEAR(t.ops[rs1].start_us, 20, kEps);
    EXPECT_NEAR(t.ops[rs1].end_us, 26, kEps);
  }
  {
    // With 20 CTAs: piece 1 does 6/20 = 0.3 beside part 0 (10-16), the other 0.7 alone in 7 us:
    // 23; part 1 23-29.
    Case c;
    int32_t gemm0 = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t rs0 = c.Add(Stream::kTpComm, Comm(6, 20), {gemm0});
    int32_t gemm1 = c.Add(Stream::kCompute, Compute(100, 10));
    int32_t rs1 = c.Add(Stream::kTpComm, Comm(6, 20), {gemm1});
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[rs0].end_us, 16, kEps);
    EXPECT_NEAR(t.ops[gemm1].end_us, 23, kEps);
    EXPECT_NEAR(t.ops[rs1].start_us, 23, kEps);
    EXPECT_NEAR(t.ops[rs1].end_us, 29, kEps);
  }
}

TEST(EngineTest, HbmIsSharedWhenOversubscribed) {
  // HBM (1000 GB/s) is offered in proportion to SMs: 80 to the compute op, 20 to a 20-CTA
  // collective, so 800 : 200 GB/s, and what one side does not need goes to the other.
  {
    // Memory-bound op: 20e6 bytes in 20 us (demand 1000 GB/s); collective 10 us moving 10e6
    // bytes (1000 GB/s). The op gets 800: done at 25 us. The collective gets 200, a fifth of its
    // demand: 0.2 * 25/10 = 0.5 done by then, the other half alone in 5 us: 30.
    Case c;
    int32_t op = c.Add(Stream::kCompute, Compute(0, 0, 20e6));
    int32_t comm = c.Add(Stream::kTpComm, Comm(10, 20, 10e6));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[op].end_us, 25, kEps);
    EXPECT_NEAR(t.ops[comm].end_us, 30, kEps);
  }
  {
    // Compute-bound GEMM (10 us) moving 4e6 bytes (400 GB/s) beside 500 GB/s: fits, no slowdown.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10, 4e6));
    int32_t comm = c.Add(Stream::kTpComm, Comm(10, 0, 5e6));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[gemm].end_us, 10, kEps);
    EXPECT_NEAR(t.ops[comm].end_us, 10, kEps);
  }
  {
    // 150 tiles take 2 waves (20 us) on 100 or 80 SMs alike. Moving 18e6 bytes the GEMM needs
    // 900 GB/s, the collective (10 us, 6e6 bytes) 600: both are short. The GEMM gets 800 and
    // takes 20 * 9/8 = 22.5 us; the collective gets 200 (1/3 speed): 0.75 done by then, the
    // rest alone in 2.5 us: 25.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(150, 10, 18e6));
    int32_t comm = c.Add(Stream::kTpComm, Comm(10, 20, 6e6));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[gemm].end_us, 22.5, kEps);
    EXPECT_NEAR(t.ops[comm].end_us, 25, kEps);
  }
  {
    // SMs and HBM together: on 80 SMs the GEMM takes 20 us, so it needs 8e6 / 20 = 400 GB/s of
    // its 800; the collective gets the other 600 of its 700 and runs at 6/7 speed: 70/6 us. The
    // GEMM did (70/6)/20 = 7/12 by then and the rest alone at 1/10 per us (800 GB/s fits):
    // 70/6 + 50/12 = 95/6.
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Compute(100, 10, 8e6));
    int32_t comm = c.Add(Stream::kTpComm, Comm(10, 20, 7e6));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[comm].end_us, 70.0 / 6, kEps);
    EXPECT_NEAR(t.ops[gemm].end_us, 95.0 / 6, kEps);
  }
}

TEST(EngineTest, AFasterCollectiveTakesNoMoreThanItsShareOfHbm) {
  // A memory-bound op of 10 us (1000 GB/s) beside a 20-CTA collective moving 10e6 HBM bytes.
  // 100 us collective: 100 GB/s fits in its 200; the op gets 900 and takes 100/9 us.
  // 40 us collective: 250 GB/s, capped at 200; the op gets 800 and takes 12.5 us; the collective
  //   did 0.8 * 12.5/40 = 0.25 by then, the rest alone: 12.5 + 30 = 42.5.
  // 10 us collective: 1000 GB/s, still 200; the op again takes 12.5 us; the collective did
  //   0.2 * 12.5/10 = 0.25, the rest alone: 12.5 + 7.5 = 20.
  for (auto [comm_us, op_end, comm_end] :
       {std::tuple{100.0, 100.0 / 9, 100.0}, std::tuple{40.0, 12.5, 42.5},
        std::tuple{10.0, 12.5, 20.0}}) {
    Case c;
    int32_t op = c.Add(Stream::kCompute, Compute(0, 0, 10e6));
    int32_t comm = c.Add(Stream::kTpComm, Comm(comm_us, 20, 10e6));
    Timeline t = c.Run();
    EXPECT_NEAR(t.ops[op].end_us, op_end, kEps) << comm_us;
    EXPECT_NEAR(t.ops[comm].end_us, comm_end, kEps) << comm_us;
  }
}

TEST(EngineTest, HbmLeftByACollectiveThatFitsGoesToTheOthers) {
  // A memory-bound op (10e6 bytes, 1000 GB/s) beside two 20-CTA collectives: TP needs 100 GB/s,
  // DP 1000. Offers by SMs (60 : 20 : 20) are 600 : 200 : 200; TP keeps its 100 and the other
  // 900 is split 60 : 20, so the op gets 675 and takes 10 / 0.675 us; DP (225 GB/s, 10 us alone)
  // has done 0.3333 by then and is still running.
  Case c;
  int32_t op = c.Add(Stream::kCompute, Compute(0, 0, 10e6));
  int32_t tp = c.Add(Stream::kTpComm, Comm(100, 20, 10e6));
  int32_t dp = c.Add(Stream::kDpComm, Comm(10, 20, 10e6));
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[op].end_us, 10 / 0.675, kEps);
  EXPECT_GT(t.ops[dp].end_us, t.ops[op].end_us);
  EXPECT_NEAR(t.ops[tp].end_us, 100, kEps);  // never short of bandwidth
}

TEST(EngineTest, TwoCollectivesTakeTheirCtasTogether) {
  // TP and DP collectives of 20 CTAs each leave 60 SMs for the GEMM while both run.
  Case c;
  int32_t gemm = c.Add(Stream::kCompute, Compute(130, 10));  // 2 waves alone: 20 us
  c.Add(Stream::kTpComm, Comm(100, 20));
  c.Add(Stream::kDpComm, Comm(4, 20));
  // 130 tiles: ceil(130/60) = 3 waves (30 us) for 4 us, then ceil(130/80) = 2 waves (20 us).
  // 4/30 done at 4 us; 26/30 left at 1/20 per us: 4 + 52/3.
  EXPECT_NEAR(c.Run().ops[gemm].end_us, 4 + 52.0 / 3, kEps);
}

// A lowered schedule costed by the real cost model.
struct Lowered {
  Plan plan;
  Schedule schedule;
  std::vector<OpCost> costs;
  DeviceResources device;
};

Lowered LowerAndCost(const testing_util::PlanKnobs& knobs) {
  Lowered l;
  l.plan = testing_util::MakePlan(knobs);
  Result<Schedule> s = Lower(l.plan);
  EXPECT_TRUE(s.ok()) << s.message();
  if (s.ok()) l.schedule = std::move(s).value();
  CostModel model(l.plan, {});
  l.costs = model.CostAll(l.schedule);
  l.device = model.device();
  return l;
}

TEST(EngineTest, LoweredScheduleRespectsStreamsAndDeps) {
  for (auto [p, q, scope] :
       {std::tuple{2, 1, OverlapScope::kInterLayer}, std::tuple{2, 2, OverlapScope::kIntraLayer},
        std::tuple{1, 1, OverlapScope::kNone}}) {
    testing_util::PlanKnobs knobs;
    knobs.row_split = p, knobs.col_split = q, knobs.scope = scope;
    Lowered l = LowerAndCost(knobs);
    Timeline t = Simulate(l.schedule, l.costs, l.device);
    Timeline again = Simulate(l.schedule, l.costs, l.device);
    ASSERT_EQ(t.ops.size(), l.schedule.size());
    std::array<double, kStreamCount> stream_end{};
    for (size_t i = 0; i < l.schedule.size(); ++i) {
      const Op& op = l.schedule.ops()[i];
      const OpTime& ot = t.ops[i];
      EXPECT_EQ(ot.start_us, again.ops[i].start_us);  // deterministic, bit for bit
      EXPECT_EQ(ot.end_us, again.ops[i].end_us);
      // An op starts as soon as its stream and its dependencies let it, or (a collective that
      // needs SMs) when the GEMM that kept them all since then ends, and never runs faster than
      // alone.
      double ready = stream_end[static_cast<int>(op.stream)];
      for (int32_t dep : l.schedule.deps(op)) ready = std::max(ready, t.ops[dep].end_us);
      const double tolerance = kEps * std::max(1.0, ready);
      bool waited = false;
      if (ot.start_us > ready + tolerance && l.costs[i].is_comm && l.costs[i].ctas > 0)
        for (size_t j = 0; j < l.schedule.size() && !waited; ++j)
          waited = l.costs[j].blocks_comm && t.ops[j].start_us < ready &&
                   std::abs(t.ops[j].end_us - ot.start_us) <= tolerance;
      if (!waited) {
        EXPECT_NEAR(ot.start_us, ready, tolerance) << l.schedule.Label(static_cast<int32_t>(i));
      }
      EXPECT_GE(ot.end_us - ot.start_us, l.costs[i].alone_us * (1 - 1e-9));
      stream_end[static_cast<int>(op.stream)] = ot.end_us;
    }
  }
}

TEST(EngineTest, WithoutSlicesIntraLayerEqualsNone) {
  // p = q = 1: a layer has no independent work, so the intra-layer barrier waits only for what
  // the data already waits for, and the timelines are identical (also with SP).
  for (bool sp : {false, true}) {
    testing_util::PlanKnobs knobs;
    knobs.sequence_parallel = sp;
    Lowered none = LowerAndCost(knobs);
    knobs.scope = OverlapScope::kIntraLayer;
    Lowered intra = LowerAndCost(knobs);
    ASSERT_EQ(none.schedule.size(), intra.schedule.size());
    Timeline a = Simulate(none.schedule, none.costs, none.device);
    Timeline b = Simulate(intra.schedule, intra.costs, intra.device);
    for (size_t i = 0; i < a.ops.size(); ++i) {
      EXPECT_EQ(a.ops[i].start_us, b.ops[i].start_us)
          << sp << " " << none.schedule.Label(static_cast<int32_t>(i));
      EXPECT_EQ(a.ops[i].end_us, b.ops[i].end_us);
    }
  }
}

}  // namespace
}  // namespace domino::sim
