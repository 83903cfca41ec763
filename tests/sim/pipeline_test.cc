#include "sim/pipeline.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace domino::sim {
namespace {

PipelineSpec Equal(int stages, int chunks, int m, double fwd, double bwd, double p2p = 0) {
  PipelineSpec spec;
  spec.stages = stages;
  spec.chunks = chunks;
  spec.micro_batches = m;
  spec.times.assign(stages * chunks, ChunkTimes{fwd, bwd});
  spec.p2p_us = p2p;
  return spec;
}

TEST(PipelineTest, OneFOneBBubbleEmergesExactly) {
  // 2 stages, 4 micro-batches, F = 1, B = 2: (m + p - 1)(F + B) = 5 * 3 = 15; bubble fraction
  // (p - 1) / (m + p - 1) = 1/5 on every stage.
  Result<PipelineResult> r = SimulatePipeline(Equal(2, 1, 4, 1, 2));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_DOUBLE_EQ(r->end_us, 15);
  for (int s = 0; s < 2; ++s) {
    double busy = 0;
    for (const PipelineOp& op : r->stages[s]) busy += op.end_us - op.start_us;
    EXPECT_DOUBLE_EQ(busy, 12);
    EXPECT_DOUBLE_EQ(1 - busy / r->end_us, 1.0 / 5);
  }
  // The same law on a deeper pipeline.
  for (auto [p, m] : {std::tuple{4, 8}, std::tuple{8, 16}, std::tuple{3, 3}}) {
    Result<PipelineResult> deep = SimulatePipeline(Equal(p, 1, m, 2, 4));
    ASSERT_TRUE(deep.ok());
    EXPECT_DOUBLE_EQ(deep->end_us, (m + p - 1) * 6.0) << p << " " << m;
  }
}

TEST(PipelineTest, HandTimelineOfTwoStages) {
  // Stage 0: F0 [0,1] F1 [1,2] B0 [4,6] F2 [6,7] B1 ... ; stage 1: F0 [1,2] B0 [2,4] F1 [4,5] ...
  Result<PipelineResult> r = SimulatePipeline(Equal(2, 1, 4, 1, 2));
  ASSERT_TRUE(r.ok());
  const auto& s0 = r->stages[0];
  const auto& s1 = r->stages[1];
  EXPECT_FALSE(s0[0].backward);
  EXPECT_DOUBLE_EQ(s0[0].start_us, 0);
  EXPECT_DOUBLE_EQ(s1[0].start_us, 1);  // F0 on stage 1 waits for stage 0's F0
  EXPECT_TRUE(s1[1].backward);
  EXPECT_DOUBLE_EQ(s1[1].start_us, 2);  // B0 right after F0 on the last stage
  EXPECT_DOUBLE_EQ(s0[2].start_us, 4);  // B0 on stage 0 waits for stage 1's B0
}

TEST(PipelineTest, TransfersDelayTheDependentOps) {
  // One micro-batch through two stages: F0 [0,1], +0.5, F1 [1.5,2.5], B1 [2.5,4.5], +0.5,
  // B0 [5,7].
  Result<PipelineResult> r = SimulatePipeline(Equal(2, 1, 1, 1, 2, 0.5));
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->end_us, 7);
  EXPECT_DOUBLE_EQ(r->last_backward_start_us[0], 5);
  EXPECT_DOUBLE_EQ(r->last_backward_end_us[1], 4.5);
}

TEST(PipelineTest, InterleavingShrinksTheBubble) {
  // Megatron: the bubble shrinks by the number of chunks. Same work (each chunk half a stage).
  Result<PipelineResult> plain = SimulatePipeline(Equal(4, 1, 8, 2, 4));
  Result<PipelineResult> inter = SimulatePipeline(Equal(4, 2, 8, 1, 2));
  ASSERT_TRUE(plain.ok() && inter.ok()) << inter.message();
  EXPECT_DOUBLE_EQ(plain->end_us, (8 + 3) * 6.0);
  EXPECT_LT(inter->end_us, plain->end_us);
  // Ideal interleaved bubble: (p - 1) (F + B) / v = 3 * 6 / 2 = 9 on top of 48 of work.
  EXPECT_NEAR(inter->end_us, 48 + 9, 1e-9);
}

TEST(PipelineTest, EveryOpRunsOnceInAValidOrder) {
  for (auto [p, v, m] : {std::tuple{4, 1, 6}, std::tuple{4, 3, 8}, std::tuple{2, 2, 2}}) {
    Result<PipelineResult> r = SimulatePipeline(Equal(p, v, m, 1, 2, 0.1));
    ASSERT_TRUE(r.ok()) << r.message();
    for (int s = 0; s < p; ++s) {
      std::set<std::tuple<int, int, bool>> seen;
      double last = 0;
      for (const PipelineOp& op : r->stages[s]) {
        EXPECT_TRUE(seen.insert({op.micro_batch, op.chunk, op.backward}).second);
        EXPECT_GE(op.start_us, last);
        last = op.end_us;
      }
      EXPECT_EQ(static_cast<int>(seen.size()), 2 * v * m);
    }
  }
}

TEST(PipelineTest, RejectsImpossibleSpecs) {
  EXPECT_FALSE(SimulatePipeline(Equal(4, 2, 6, 1, 2)).ok());  // 6 not a multiple of 4
  PipelineSpec bad = Equal(2, 1, 2, 1, 1);
  bad.times.pop_back();
  EXPECT_FALSE(SimulatePipeline(bad).ok());
}

}  // namespace
}  // namespace domino::sim
