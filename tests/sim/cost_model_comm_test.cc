#include <gtest/gtest.h>

#include "planner/lower.h"
#include "sim/cost_model.h"
#include "sim/predict.h"
#include "tests/hardware/test_node.h"
#include "tests/planner/test_plans.h"
#include "tests/sim/cost_model_test_util.h"

// The cost model's communication: which ranks a TP group holds, what its collectives cost (as
// EstimateCollective says, on copy engines for decomposed all-gather parts), and the ring and
// hierarchical all-reduce by hand.
namespace domino::sim {
namespace {

using cost_model_test::Gemm;
using cost_model_test::kMiB;
using cost_model_test::TpCollective;

TEST(CostModelTest, TpGroupFollowsMegatronPlacement) {
  struct Expect {
    testing_util::PlanKnobs knobs;
    CommGroup group;
  };
  testing_util::PlanKnobs two;
  two.cluster = "dgx-h100:1:2", two.tp = 2;
  testing_util::PlanKnobs thirty_two;
  thirty_two.model = "gpt3-13b", thirty_two.cluster = "dgx-h100:4", thirty_two.tp = 32;
  for (const Expect& e :
       {Expect{{}, {8, 1, 8}}, Expect{two, {2, 1, 2}}, Expect{thirty_two, {32, 4, 8}}}) {
    CommGroup g = TpGroup(testing_util::MakePlan(e.knobs));
    EXPECT_EQ(g.size, e.group.size);
    EXPECT_EQ(g.nodes_spanned, e.group.nodes_spanned);
    EXPECT_EQ(g.gpus_per_node_in_group, e.group.gpus_per_node_in_group);
  }
}

// Groups that do not tile their nodes evenly: 4 TP ranks on nodes of 3 GPUs (3 + 1, or 2 + 2),
// 6 DP ranks on nodes of 4 (4 + 2). Each is priced by its emptiest node, and stays a group
// EstimateCollective takes (the long fuzz found `plan --cluster dgx-h100:4:3` asserting in a tp 4
// candidate).
TEST(CostModelTest, GroupsThatStraddleNodesUnevenlyStayConsistent) {
  testing_util::PlanKnobs knobs;
  knobs.cluster = "dgx-h100:4:3", knobs.tp = 4, knobs.pp = 3;
  knobs.model = "gpt3-13b";
  const Plan tp4 = testing_util::MakePlan(knobs);
  const CommGroup tp = TpGroup(tp4);
  EXPECT_EQ(tp.size, 4);
  EXPECT_EQ(tp.nodes_spanned, 2);
  EXPECT_EQ(tp.gpus_per_node_in_group, 1);
  EXPECT_TRUE(CheckCommGroup(tp4.cluster.node, tp).ok());
  knobs.cluster = "dgx-h100:3:4", knobs.tp = 1, knobs.pp = 2, knobs.dp = 6;
  knobs.global_batch = 24;
  const Plan dp6 = testing_util::MakePlan(knobs);
  const CommGroup dp = DpGroup(dp6);
  EXPECT_EQ(dp.size, 6);
  EXPECT_EQ(dp.gpus_per_node_in_group, 2);
  EXPECT_EQ(dp.nodes_spanned, 2);
  EXPECT_TRUE(CheckCommGroup(dp6.cluster.node, dp).ok());
  // Whole simulations run (the assertion inside EstimateCollective held).
  EXPECT_TRUE(Predict(tp4, {}).ok());
  EXPECT_TRUE(Predict(dp6, {}).ok());
}

TEST(CostModelTest, TpCollectivesCostWhatEstimateCollectiveSays) {
  testing_util::PlanKnobs thirty_two;
  thirty_two.model = "gpt3-13b", thirty_two.cluster = "dgx-h100:4", thirty_two.tp = 32;
  testing_util::PlanKnobs a100;
  a100.cluster = "dgx-a100:1";
  for (const auto& knobs : {testing_util::PlanKnobs{}, thirty_two, a100}) {
    Plan plan = testing_util::MakePlan(knobs);
    CostModel model(plan, {});
    for (CollectiveOp kind :
         {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather}) {
      for (double bytes : {64.0 * 1024, 4 * kMiB, 80 * kMiB}) {
        Collective c = kind == CollectiveOp::kAllReduce       ? Collective::kAllReduce
                       : kind == CollectiveOp::kReduceScatter ? Collective::kReduceScatter
                                                              : Collective::kAllGather;
        CollectiveEstimate e = EstimateCollective(plan.cluster.node, c, bytes, TpGroup(plan));
        OpCost cost = model.Cost(TpCollective(kind, bytes));
        EXPECT_TRUE(cost.is_comm);
        EXPECT_EQ(cost.alone_us, e.time_us);
        EXPECT_EQ(cost.ctas, e.ctas);
        EXPECT_EQ(cost.hbm_bytes, e.hbm_bytes);
        EXPECT_EQ(cost.tiles, 0);
        EXPECT_GT(cost.alone_us, 0);
      }
    }
  }
}

// A decomposed part is priced as the collective it is a part of, at its own (smaller) size; on
// copy engines it keeps its time and HBM traffic but takes no SMs. A whole collective is never
// on copy engines.
TEST(CostModelTest, DecomposedAllGatherPartsOnCopyEnginesArePeerCopies) {
  testing_util::PlanKnobs knobs;  // gpt3-2.7b, tp 8 on one DGX-H100
  knobs.sequence_parallel = true;
  knobs.method = OverlapMethod::kDecomposed;
  Plan sm = testing_util::MakePlan(knobs);
  // Unset, the stack decides: Megatron-Core's decomposed overlap is TE's userbuffers, whose ring
  // exchange copies with copy engines; domino's own executor runs NCCL parts.
  EXPECT_FALSE(sm.copy_engine.has_value());
  EXPECT_TRUE(sm.copy_engine_parts());
  knobs.stack = "domino";
  EXPECT_FALSE(testing_util::MakePlan(knobs).copy_engine_parts());
  knobs.stack = "";
  sm.copy_engine = false;
  Plan ce = sm;
  ce.copy_engine = true;
  ASSERT_FALSE(CheckPlanRules(ce).has_value());
  Op part = TpCollective(CollectiveOp::kAllGather, 4 * kMiB);
  part.part = 1, part.parts = 8;
  const Op whole = TpCollective(CollectiveOp::kAllGather, 4 * kMiB);
  OpCost on_sms = CostModel(sm, {}).Cost(part), on_ce = CostModel(ce, {}).Cost(part);
  CollectiveEstimate e =
      EstimateCollective(sm.cluster.node, Collective::kAllGather, 4 * kMiB, TpGroup(sm));
  EXPECT_EQ(on_sms.alone_us, e.time_us);
  EXPECT_EQ(on_sms.ctas, e.ctas);
  EXPECT_GT(on_sms.ctas, 0);
  // On copy engines: one copy launch (4 us) and the part's 4 MiB over NVLink at 450 * 0.81 GB/s,
  // with no NCCL latency or bandwidth ramp, no SMs, and the bytes read on one side and written
  // on the other.
  EXPECT_NEAR(on_ce.alone_us, 4 + 4 * kMiB / (450 * 0.81 * 1e3), 1e-9);
  EXPECT_LT(on_ce.alone_us, e.time_us);
  EXPECT_EQ(on_ce.ctas, 0);
  EXPECT_EQ(on_ce.hbm_bytes, 2 * 4 * kMiB);
  // The whole collective, and a reduce-scatter part (its sums need SMs), stay NCCL's.
  EXPECT_EQ(CostModel(ce, {}).Cost(whole).ctas, e.ctas);
  Op rs_part = TpCollective(CollectiveOp::kReduceScatter, 4 * kMiB);
  rs_part.part = 1, rs_part.parts = 8;
  CollectiveEstimate rs =
      EstimateCollective(sm.cluster.node, Collective::kReduceScatter, 4 * kMiB, TpGroup(sm));
  EXPECT_EQ(CostModel(ce, {}).Cost(rs_part).alone_us, rs.time_us);
  EXPECT_EQ(CostModel(ce, {}).Cost(rs_part).ctas, rs.ctas);
  // TP across two nodes: no copy engine reaches the other node's GPUs.
  knobs.cluster = "dgx-h100:2";
  knobs.tp = 16;
  Plan across = testing_util::MakePlan(knobs);
  across.copy_engine = true;
  CollectiveEstimate two_nodes =
      EstimateCollective(across.cluster.node, Collective::kAllGather, 4 * kMiB, TpGroup(across));
  EXPECT_EQ(CostModel(across, {}).Cost(part).alone_us, two_nodes.time_us);
}

TEST(CostModelTest, TpCommFreeIsTheIdeal) {
  Plan plan = testing_util::MakePlan({});
  CostOptions ideal;
  ideal.tp_comm_free = true;
  CostModel model(plan, ideal);
  OpCost c = model.Cost(TpCollective(CollectiveOp::kAllReduce, 64 * kMiB));
  EXPECT_TRUE(c.is_comm);
  EXPECT_EQ(c.alone_us, 0);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_EQ(c.hbm_bytes, 0);
  // Compute is priced as without the option.
  EXPECT_EQ(model.Cost(Gemm(1024, 1024, 1024)).alone_us,
            CostModel(plan, {}).Cost(Gemm(1024, 1024, 1024)).alone_us);

  // TpCommUs prices the collectives even in the ideal; it sums them.
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  CostModel real(plan, {});
  double sum = 0;
  for (const Op& op : s->ops())
    if (op.kind == OpKind::kCollective) sum += real.Cost(op).alone_us;
  EXPECT_GT(sum, 0);
  EXPECT_NEAR(real.TpCommUs(*s), sum, 1e-9 * sum);
  EXPECT_NEAR(model.TpCommUs(*s), sum, 1e-9 * sum);
}

// A DGX-H100 node without NVLS, so ring figures can be checked by hand.
Plan RingPlan(int nodes) {
  Plan plan;
  // No bandwidth ramp and no LL protocol: the figures below are Simple and LL128.
  NodeSpec& node = plan.cluster.node;
  node = testing_util::HandCheckedNode();
  Result<GpuSpec> gpu = LoadGpu("h100-sxm");
  EXPECT_TRUE(gpu.ok());
  if (gpu.ok()) node.gpu = *gpu;
  plan.cluster.nodes = nodes;
  plan.cluster.gpus_per_node = 8;
  plan.tp = 8 * nodes;
  return plan;
}

TEST(CostModelTest, RingAllReduceByHand) {
  Plan plan = RingPlan(1);
  CostModel model(plan, {});
  // 8 ranks: busbw factor 2*7/8 = 1.75, 14 ring steps, NVLink busbw 450 * 0.81 = 364.5 GB/s.
  // 64 MiB: Simple 8.4 + 14*3.4 + 67108864*1.75/364.5e3 = 378.196 beats LL128's 384.276.
  OpCost big = model.Cost(TpCollective(CollectiveOp::kAllReduce, 64 * kMiB));
  EXPECT_NEAR(big.alone_us, 8.4 + 14 * 3.4 + 64 * kMiB * 1.75 / 364.5e3, 1e-9);
  EXPECT_NEAR(big.alone_us, 378.19619204389573, 1e-9);
  EXPECT_EQ(big.ctas, 16);
  EXPECT_DOUBLE_EQ(big.hbm_bytes, 64 * kMiB * 1.75 * 2.5);
  // 1 MiB: LL128 14 + 14*1.9 + 1048576*1.75/(364.5e3*0.9375) = 45.970 beats Simple's 61.034.
  OpCost small = model.Cost(TpCollective(CollectiveOp::kAllReduce, kMiB));
  EXPECT_NEAR(small.alone_us, 14 + 14 * 1.9 + kMiB * 1.75 / (364.5e3 * 0.9375), 1e-9);
  EXPECT_NEAR(small.alone_us, 45.96993653406492, 1e-9);
}

TEST(CostModelTest, HierarchicalAllReduceByHand) {
  Plan plan = RingPlan(2);  // tp 16 over two nodes, 8 per node
  CostModel model(plan, {});
  // f = 2*15/16 = 1.875; network 8 NICs * 50 * 0.93 = 372 GB/s > NVLink's 364.5, so NVLink
  // bounds the transfer; 2 network steps and 28 NVLink steps. LL128 wins at 64 MiB:
  // 14 + 2*4 + 28*1.9 + (67108864*1.875/364.5e3) / 0.9375 = 443.424.
  OpCost c = model.Cost(TpCollective(CollectiveOp::kAllReduce, 64 * kMiB));
  EXPECT_NEAR(c.alone_us, 14 + 2 * 4 + 28 * 1.9 + 64 * kMiB * 1.875 / 364.5e3 / 0.9375, 1e-9);
  EXPECT_NEAR(c.alone_us, 443.424219478738, 1e-9);
}

// Transformer Engine's ring exchange starts from the rank's own shard: the first part of a
// decomposed all-gather moves only the other ranks' rows of it (none with one part per rank); its
// other parts, and reduce-scatter parts, move all of theirs.
TEST(CostModelTest, DecomposedAllGathersFirstPartHoldsTheRanksOwnRows) {
  testing_util::PlanKnobs knobs;  // tp 8
  knobs.sequence_parallel = true;
  knobs.method = OverlapMethod::kDecomposed;
  Plan plan = testing_util::MakePlan(knobs);
  plan.copy_engine = false;  // NCCL parts
  const CostModel model(plan, {});
  auto estimate = [&](Collective kind, double bytes) {
    return EstimateCollective(plan.cluster.node, kind, bytes, TpGroup(plan)).time_us;
  };
  Op first = TpCollective(CollectiveOp::kAllGather, 4 * kMiB);
  first.part = 0, first.parts = 8;
  EXPECT_EQ(model.Cost(first).alone_us, 0);
  first.parts = 2;  // ranks 0-3's rows: three of the four move
  EXPECT_EQ(model.Cost(first).alone_us, estimate(Collective::kAllGather, 3 * kMiB));
  Op second = first;
  second.part = 1;
  EXPECT_EQ(model.Cost(second).alone_us, estimate(Collective::kAllGather, 4 * kMiB));
  Op reduce = TpCollective(CollectiveOp::kReduceScatter, 4 * kMiB);
  reduce.part = 0, reduce.parts = 2;
  EXPECT_EQ(model.Cost(reduce).alone_us, estimate(Collective::kReduceScatter, 4 * kMiB));
}

}  // namespace
}  // namespace domino::sim
