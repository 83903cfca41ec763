// The engine's launch-order contention (sim/engine.h, OpCost::tail_share, persistent_ctas,
// blocks_comm, stall_share): a GEMM launched while a collective holds SMs stalls for its late
// CTAs' share, a collective launched during a GEMM that keeps every SM waits for its end. Times
// by hand on a device of 100 SMs.
#include <gtest/gtest.h>

#include <vector>

#include "sim/engine.h"
#include "tests/sim/engine_case.h"

namespace domino::sim::engine_contention_test {
namespace {

constexpr double kEps = 1e-9;
constexpr DeviceResources kDevice = testing_util::kEngineDevice;
using Case = testing_util::EngineCase;

// A GEMM of `tiles` tiles of `wave_us` each: its late CTAs' share and whether it keeps every SM.
OpCost Gemm(double tiles, double wave_us, double tail_share, bool blocks_comm = true) {
  OpCost c;
  c.tiles = tiles;
  c.wave_us = wave_us;
  c.tail_share = tail_share;
  c.blocks_comm = blocks_comm;
  c.alone_us = c.BodyUs(kDevice.sms, kDevice.hbm_GBps);
  return c;
}

OpCost Comm(double alone_us, int ctas) {
  OpCost c;
  c.alone_us = alone_us;
  c.ctas = ctas;
  c.is_comm = true;
  return c;
}

TEST(EngineContentionTest, PersistentGemmBesideAShortCollectiveEndsAsIfItWaited) {
  // One wave of 40 us, one persistent CTA per SM; 20 SMs held for 30 us from its launch: the 20
  // late CTAs start at 30 and run their whole 40 us.
  Case c;
  int32_t comm = c.Add(Stream::kTpComm, Comm(30, 20));
  int32_t gemm = c.Add(Stream::kCompute, Gemm(100, 40, 1.0));
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[comm].end_us, 30, kEps);
  EXPECT_NEAR(t.ops[gemm].end_us, 70, kEps);
}

TEST(EngineContentionTest, PersistentGemmBesideALongCollectiveStallsOneBody) {
  // The same GEMM beside 100 us of 20 held SMs: the first CTAs are done at 40, where the late
  // ones start on their SMs (a stall of one body); then the GEMM runs on 80 SMs (2 waves, 80
  // us for all of it) until 100: 60/80 done, the rest at full speed, 0.25 x 40 = 10 us.
  Case c;
  c.Add(Stream::kTpComm, Comm(100, 20));
  int32_t gemm = c.Add(Stream::kCompute, Gemm(100, 40, 1.0));
  EXPECT_NEAR(c.Run().ops[gemm].end_us, 110, kEps);
}

TEST(EngineContentionTest, ManyWaveGemmStallsOneCtasShare) {
  // 400 tiles of 10 us: 40 us alone, 50 us on 80 SMs (5 waves). A CTA is a quarter of it: it
  // stalls 10 us, then runs on the 80 SMs left: 60. The SMs-only model gave 50.
  for (double tail : {0.25, 0.0}) {
    Case c;
    c.Add(Stream::kTpComm, Comm(100, 20));
    int32_t gemm = c.Add(Stream::kCompute, Gemm(400, 10, tail));
    EXPECT_NEAR(c.Run().ops[gemm].end_us, tail > 0 ? 60 : 50, kEps) << "tail " << tail;
  }
}

TEST(EngineContentionTest, StallEndsWithTheCollective) {
  // Held for 5 us only: a stall of at most 10 is cut to 5, then 40 us alone.
  Case c;
  c.Add(Stream::kTpComm, Comm(5, 20));
  int32_t gemm = c.Add(Stream::kCompute, Gemm(400, 10, 0.25));
  EXPECT_NEAR(c.Run().ops[gemm].end_us, 45, kEps);
}

TEST(EngineContentionTest, CollectiveLaunchedDuringAGemmWaitsForItsEnd) {
  // The collective becomes ready at 10 (after a 10 us transfer that holds no SM) while the
  // 40 us GEMM runs: it starts at 40, and the GEMM is not slowed.
  for (bool blocks : {true, false}) {
    Case c;
    int32_t gemm = c.Add(Stream::kCompute, Gemm(100, 40, 1.0, blocks));
    int32_t before = c.Add(Stream::kDpComm, Comm(10, 0));
    int32_t comm = c.Add(Stream::kTpComm, Comm(20, 20), {before});
    Timeline t = c.Run();
    if (blocks) {
      EXPECT_NEAR(t.ops[comm].start_us, 40, kEps);
      EXPECT_NEAR(t.ops[comm].end_us, 60, kEps);
      EXPECT_NEAR(t.ops[gemm].end_us, 40, kEps);
    } else {  // the collective starts at once and takes 20 SMs: 2 waves on 80 SMs
      EXPECT_NEAR(t.ops[comm].start_us, 10, kEps);
      EXPECT_GT(t.ops[gemm].end_us, 40 + kEps);
    }
  }
}

TEST(EngineContentionTest, CollectiveOfAGemmGoesBeforeTheNextGemm) {
  // A's collective and B become ready together at 40: the collective was launched first and
  // holds its SMs, so B (persistent) stalls until it ends at 60 and ends at 100.
  Case c;
  int32_t a = c.Add(Stream::kCompute, Gemm(100, 40, 1.0));
  int32_t comm = c.Add(Stream::kTpComm, Comm(20, 20), {a});
  int32_t b = c.Add(Stream::kCompute, Gemm(100, 40, 1.0));
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[comm].start_us, 40, kEps);
  EXPECT_NEAR(t.ops[b].start_us, 40, kEps);
  EXPECT_NEAR(t.ops[b].end_us, 100, kEps);
}

TEST(EngineContentionTest, PassStallsItsShareWhileHeld) {
  // A pass of 64 waves of 1 us on 100 SMs: 64 us alone, 80 on 80 SMs, and half its SM-bound
  // time again (32 us) while a collective holds them all along.
  Case c;
  c.Add(Stream::kDpComm, Comm(200, 20));
  OpCost pass = Gemm(100 * 64, 1, 0, false);
  pass.stall_share = 0.5;
  int32_t p = c.Add(Stream::kCompute, pass);
  EXPECT_NEAR(c.Run().ops[p].end_us, 112, kEps);
}

TEST(EngineContentionTest, StagesTimeAlikeOnTheHeap) {
  // With two stages the engine keeps its events in a heap; each stage's device times the same.
  Case c;
  int32_t ends[2][2];
  for (int stage : {0, 1}) {
    int32_t a = c.Add(Stream::kCompute, Gemm(400, 10, 0.25), {}, stage);
    c.Add(Stream::kTpComm, Comm(5 + 95 * stage, 20), {}, stage);
    int32_t b = c.Add(Stream::kCompute, Gemm(100, 40, 1.0), {}, stage);
    ends[stage][0] = a, ends[stage][1] = b;
  }
  Timeline t = c.Run();
  EXPECT_NEAR(t.ops[ends[0][0]].end_us, 45, kEps);   // stall cut to the 5 us held
  EXPECT_NEAR(t.ops[ends[0][1]].end_us, 85, kEps);   // alone
  EXPECT_NEAR(t.ops[ends[1][0]].end_us, 60, kEps);   // stall 10, 5 waves on 80 SMs
  EXPECT_NEAR(t.ops[ends[1][1]].end_us, 140, kEps);  // launched while held until 100: stall 40
}

TEST(EngineContentionTest, HeldGemmNeverEndsLaterThanAfterTheCollective) {
  // Whatever the hold and the tail, a GEMM launched beside a collective ends no later than if
  // it had waited for the collective (serial), and no earlier than alone.
  for (double tail : {0.0, 0.1, 0.25, 0.5, 1.0})
    for (double hold : {1.0, 7.0, 25.0, 40.0, 55.0, 90.0, 300.0})
      for (int ctas : {8, 20, 50}) {
        Case c;
        c.Add(Stream::kTpComm, Comm(hold, ctas));
        int32_t gemm = c.Add(Stream::kCompute, Gemm(400, 10, tail));
        const double end = c.Run().ops[gemm].end_us;
        EXPECT_LE(end, hold + 40 + kEps) << tail << " " << hold << " " << ctas;
        EXPECT_GE(end, 40 - kEps) << tail << " " << hold << " " << ctas;
      }
}

// A persistent GEMM (OpCost::persistent_ctas): 200 tiles in two waves of 20 us, 40 us alone,
// its late CTAs owing half of it once they start.
OpCost Persistent(double ctas) {
  OpCost c = Gemm(200, 20, 0.5);
  c.persistent_ctas = ctas;
  return c;
}

TEST(EngineContentionTest, PersistentGemmsEarlyCtasRunThroughTheHold) {
  // 100 CTAs, 20 SMs held from its launch: the 80 early CTAs run as if alone; the 20 late ones
  // start when the hold ends (or at 40, when the early ones are done) and take 20 us, on SMs
  // of their own. Held 10 us: 3/4 of the work is left, more than the late CTAs' half: 40.
  // Held 30: 1/4 left, the late half takes 20 us from 30: 50. Held 100: 40 + 20 = 60.
  for (const auto& [hold, end] : {std::pair{10.0, 40.0}, {30.0, 50.0}, {100.0, 60.0}}) {
    Case c;
    c.Add(Stream::kTpComm, Comm(hold, 20));
    int32_t gemm = c.Add(Stream::kCompute, Persistent(100));
    EXPECT_NEAR(c.Run().ops[gemm].end_us, end, kEps) << "held " << hold;
  }
}

TEST(EngineContentionTest, PersistentGemmWhoseCtasAllFitDoesNotWait) {
  // 80 CTAs and 20 of 100 SMs held: every CTA has an SM, nothing waits; the 200 tiles take their
  // three waves on the 80 SMs (60 us) while the SMs are held, two (40 us) once free.
  Case c;
  c.Add(Stream::kTpComm, Comm(300, 20));
  int32_t gemm = c.Add(Stream::kCompute, Persistent(80));
  EXPECT_NEAR(c.Run().ops[gemm].end_us, 60, kEps);
}

}  // namespace
}  // namespace domino::sim::engine_contention_test
