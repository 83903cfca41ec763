#include "tools/emulation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/lower.h"
#include "sim/cost_model.h"
#include "tests/planner/test_plans.h"

namespace domino::cli {
namespace {

// GPT-3 13B at TP 8 with row split 2: the shapes `execute --comm emulate` runs on one GPU.
Plan Gpt13bTp8() {
  testing_util::PlanKnobs k;
  k.model = "gpt3-13b";
  k.seq_len = 2048;
  k.micro_batch = 4;
  k.global_batch = 4;
  k.row_split = 2;
  k.scope = OverlapScope::kInterLayer;
  return testing_util::MakePlan(k);
}

// Every TP collective gets the cost model's CTAs, HBM traffic and time alone; compute ops get
// nothing; the emulated time adds up to the model's TP comm time (what hides or stays exposed).
TEST(EmulationTest, EveryCollectiveIsPricedAsTheCostModelPricesIt) {
  Plan plan = Gpt13bTp8();
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<exec::EmulatedCollective> emulated = EmulatedCollectives(plan, *s, false);
  ASSERT_EQ(emulated.size(), s->size());
  double total_us = 0, largest_us = 0;
  int collectives = 0;
  for (size_t i = 0; i < s->size(); ++i) {
    const exec::EmulatedCollective& e = emulated[i];
    if (s->ops()[i].kind != OpKind::kCollective) {
      EXPECT_EQ(e.ctas, 0);
      EXPECT_EQ(e.us, 0);
      EXPECT_EQ(e.hbm_bytes, 0);
      continue;
    }
    ++collectives;
    EXPECT_GT(e.ctas, 0) << s->Label(static_cast<int32_t>(i));
    EXPECT_GT(e.hbm_bytes, 0);
    EXPECT_GT(e.us, 0);
    total_us += e.us;
    largest_us = std::max(largest_us, e.us);
  }
  EXPECT_GT(collectives, 0);
  const double model_us = sim::CostModel(plan, {}).TpCommUs(*s);
  EXPECT_NEAR(total_us, model_us, 1e-9 * model_us);
  EXPECT_EQ(LargestCollective(plan, *s).us, largest_us);
}

// Under CUDA graphs only compute launches get cheaper: the collectives' prices do not change.
TEST(EmulationTest, GraphsLeaveCollectivesAlone) {
  Plan plan = Gpt13bTp8();
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  const auto eager = EmulatedCollectives(plan, *s, false),
             graphed = EmulatedCollectives(plan, *s, true);
  for (size_t i = 0; i < s->size(); ++i) EXPECT_EQ(eager[i].us, graphed[i].us);
}

// The engine's prediction for a contention sample: with nothing beside, the op's time alone; a
// collective holding SMs slows a GEMM of several waves, one streaming HBM slows a memory-bound op.
TEST(EmulationTest, PredictedBesideTimesFollowTheContentionRule) {
  Plan plan = Gpt13bTp8();
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  HardwareProfile gpu;
  gpu.device = "NVIDIA H200";
  gpu.backend = "cuda";
  const Op* gemm = nullptr;
  const Op* memory = nullptr;
  for (const Op& op : s->ops()) {
    if (op.kind == OpKind::kGemm && (!gemm || op.flops > gemm->flops)) gemm = &op;
    if (op.kind == OpKind::kElementwise && (!memory || op.bytes > memory->bytes)) memory = &op;
  }
  ASSERT_TRUE(gemm && memory);
  sim::CostOptions options;
  options.profile = &gpu;
  const sim::CostModel model(plan, options);
  EXPECT_NEAR(PredictedBesideUs(plan, gpu, *gemm, 0, 0), model.Cost(*gemm).alone_us, 1e-9);
  EXPECT_GT(PredictedBesideUs(plan, gpu, *gemm, 32, 0), model.Cost(*gemm).alone_us);
  const double hbm = model.device().hbm_GBps;
  EXPECT_NEAR(PredictedBesideUs(plan, gpu, *memory, 0, 0), model.Cost(*memory).alone_us, 1e-9);
  EXPECT_GT(PredictedBesideUs(plan, gpu, *memory, 16, 0.9 * hbm), model.Cost(*memory).alone_us);
}

}  // namespace
}  // namespace domino::cli
