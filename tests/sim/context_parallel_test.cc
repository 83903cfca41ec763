// Context parallelism in the simulator: the gradient group over DP x CP, what a ring step's
// transfer costs, and the planner's search choosing CP for a long sequence (where the CP ring and
// the other groups sit: groups_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "planner/iteration.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "sim/cost_model.h"
#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PlanKnobs;

TEST(ContextParallelSimTest, GradientsAreReducedOverDpTimesCp) {
  // cp 2 x dp 1 reduces and shards exactly as cp 1 x dp 2 does: the same buckets and optimizer
  // step, over a group of two.
  PlanKnobs k;
  k.tp = 8, k.cp = 2, k.dp = 1, k.global_batch = 4;
  k.cluster = "dgx-h100:2";
  k.distributed_optimizer = true;
  PlanKnobs d = k;
  d.cp = 1, d.dp = 2, d.global_batch = 8;
  auto comms = [](const PlanKnobs& knobs) {
    Result<Iteration> it = LowerIteration(MakePlan(knobs), IterationOptions{false});
    EXPECT_TRUE(it.ok()) << it.message();
    std::vector<std::pair<OpFunc, double>> out;
    for (const Op& op : it->schedule.ops())
      if (op.group == Group::kDp || op.kind == OpKind::kOptimizer)
        out.emplace_back(op.func, op.bytes);
    return out;
  };
  const auto cp = comms(k), dp = comms(d);
  EXPECT_EQ(cp, dp);
  EXPECT_GT(cp.size(), 2u);
}

TEST(ContextParallelSimTest, PipelineSendsCarryTheRanksTokens) {
  // gpt3-2.7b (hidden 2560), micro-batch 4 x seq 256 in bf16 over cp 2 and SP over tp 2: a stage
  // sends 4 x 128 x 2560 x 2 B / 2 = 1,310,720 bytes of activations (or their gradient).
  PlanKnobs k;
  k.tp = 2, k.cp = 2, k.pp = 2, k.dp = 1;
  k.sequence_parallel = true;
  k.global_batch = 8;
  Result<Iteration> it = LowerIteration(MakePlan(k), IterationOptions{false});
  ASSERT_TRUE(it.ok()) << it.message();
  int sends = 0;
  for (const Op& op : it->schedule.ops()) {
    if (op.func != OpFunc::kPpSend) continue;
    ++sends;
    EXPECT_DOUBLE_EQ(op.bytes, 4.0 * 128 * 2560 * 2 / 2);
  }
  EXPECT_EQ(sends, 2 * 2);  // 2 micro-batches, forward and backward
}

TEST(ContextParallelSimTest, RingTransferIsPricedAsASendRecvOnItsFabric) {
  PlanKnobs k;
  k.tp = 2, k.cp = 2, k.dp = 4;
  k.cluster = "dgx-h100:2";
  k.global_batch = 16;
  const Plan inside = MakePlan(k);
  Op op;
  op.kind = OpKind::kSendRecv;
  op.stream = Stream::kCpComm;
  op.func = OpFunc::kCpSendRecv;
  op.group = Group::kCp;
  op.bytes = 2621440;
  const OpCost cost = CostModel(inside, {}).Cost(op);
  const CollectiveEstimate nvlink =
      EstimateCollective(inside.cluster.node, Collective::kSendRecv, op.bytes, {2, 1, 2});
  EXPECT_TRUE(cost.is_comm);
  EXPECT_DOUBLE_EQ(cost.alone_us, nvlink.time_us);
  EXPECT_EQ(cost.ctas, nvlink.ctas);  // it takes SMs from the attention beside it
  // The ideal frees only TP collectives: the ring's transfers still cost.
  CostOptions ideal;
  ideal.tp_comm_free = true;
  EXPECT_DOUBLE_EQ(CostModel(inside, ideal).Cost(op).alone_us, nvlink.time_us);
  k.tp = 8, k.cp = 2, k.dp = 1, k.global_batch = 4;
  const Plan across = MakePlan(k);
  const CollectiveEstimate network =
      EstimateCollective(across.cluster.node, Collective::kSendRecv, op.bytes, {2, 2, 1});
  EXPECT_DOUBLE_EQ(CostModel(across, {}).Cost(op).alone_us, network.time_us);
  EXPECT_GT(network.time_us, nvlink.time_us);
}

TEST(ContextParallelSimTest, RingTransfersHideUnderAttention) {
  // Llama 3 8B at 32K tokens on one node, tp 2 x cp 4: each forward step's KV block (2 x 4 kv
  // heads x 128 x 8192 tokens x 2 bytes = 16 MiB over NVLink) moves well within its block's
  // attention, so the prediction is that of the blocks alone, plus what the transfers' SMs cost.
  PlanKnobs k;
  k.model = "llama3-8b";
  k.tp = 2, k.cp = 4;
  k.seq_len = 32768, k.micro_batch = 1, k.global_batch = 1;
  k.sequence_parallel = true;
  const Plan plan = MakePlan(k);
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  const CostModel model(plan, {});
  double transfer_us = 0, waited_us = 0;
  const Schedule& s = p->schedule;
  const Timeline& t = p->timeline;
  int32_t previous = -1;  // the compute op before
  for (int32_t i = 0; i < static_cast<int32_t>(s.size()); ++i) {
    const Op& op = s.op(i);
    if (op.func == OpFunc::kCpSendRecv) {
      // Backward steps 1 and 2 carry KV and dKV; step 0 only KV, step 3 only dKV.
      const bool both = op.tags.phase == Phase::kBackward && op.tags.ring_step % 3 != 0;
      EXPECT_DOUBLE_EQ(op.bytes, (both ? 2.0 : 1.0) * 2 * 4 * 128 * 8192 * 2);
      transfer_us += model.Cost(op).alone_us;
    }
    if (op.stream != Stream::kCompute) continue;
    // An attention block that waits for a KV block: idle time on the compute stream before it.
    if (op.kind == OpKind::kAttention && previous >= 0)
      for (int32_t dep : s.deps(op))
        if (s.op(dep).func == OpFunc::kCpSendRecv)
          waited_us += t.ops[i].start_us - t.ops[previous].end_us;
    previous = i;
  }
  EXPECT_GT(transfer_us, 0);
  EXPECT_LT(waited_us, 0.01 * transfer_us);
}

TEST(ContextParallelSimTest, MergeKernelsFollowEachRingStepAsTransformerEngineRunsThem) {
  // Llama 3 8B at 32K tokens, tp 2 x cp 4, on Megatron-Core (Transformer Engine's p2p CP): each
  // ring step's attention block is followed by one merge pass. Per layer, in units of the local
  // output Q = 8192 tokens x 16 heads x 128 x 2 bytes and the KV block KV = 2 x 4 x 128 x 8192 x 2
  // bytes, with f = (4 - j) / 4: forward step 0 2 KV + 4 Q, step j f (KV + 3 Q) + (1 - f) 2.5 Q;
  // backward step 0 6 KV + 2 Q, step j f (3.5 KV + 3 Q) + (1 - f) (5 KV + 4.5 Q). The domino
  // stack folds the merges into its ring and has none.
  PlanKnobs k;
  k.model = "llama3-8b";
  k.tp = 2, k.cp = 4;
  k.seq_len = 32768, k.micro_batch = 1, k.global_batch = 1;
  k.sequence_parallel = true;
  Plan plan = MakePlan(k);
  ASSERT_TRUE(plan.stack.cp_merge_kernels);
  Result<Schedule> s = LowerStage(plan, LowerOptions{plan.model.layers, true, true, true, true});
  ASSERT_TRUE(s.ok()) << s.message();
  const double q = 8192.0 * 16 * 128 * 2, kv = 2.0 * 4 * 128 * 8192 * 2;
  auto expected = [&](int j, bool backward) {
    const double f = (4.0 - j) / 4;
    if (j == 0) return backward ? 6 * kv + 2 * q : 2 * kv + 4 * q;
    return backward ? f * (3.5 * kv + 3 * q) + (1 - f) * (5 * kv + 4.5 * q)
                    : f * (kv + 3 * q) + (1 - f) * 2.5 * q;
  };
  int merges = 0;
  int32_t previous = -1;  // the compute op before
  for (int32_t i = 0; i < static_cast<int32_t>(s->size()); ++i) {
    const Op& op = s->op(i);
    if (op.stream != Stream::kCompute) continue;
    if (op.func == OpFunc::kCpMerge) {
      ++merges;
      const bool backward = op.tags.phase == Phase::kBackward;
      EXPECT_DOUBLE_EQ(op.bytes, expected(op.tags.ring_step, backward));
      ASSERT_GE(previous, 0);
      const Op& block = s->op(previous);
      EXPECT_EQ(block.kind, OpKind::kAttention);
      EXPECT_EQ(block.tags.ring_step, op.tags.ring_step);
      EXPECT_EQ(block.tags.layer, op.tags.layer);
    }
    previous = i;
  }
  EXPECT_EQ(merges, 2 * 4 * plan.model.layers);
  // They cost time: the same plan without them is faster.
  Result<Prediction> with = Predict(plan);
  plan.stack.cp_merge_kernels = false;
  Result<Prediction> without = Predict(plan);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(with->figures.iteration_ms, without->figures.iteration_ms);
  k.stack = "domino";
  Result<Schedule> own =
      LowerStage(MakePlan(k), LowerOptions{plan.model.layers, true, true, true, true});
  ASSERT_TRUE(own.ok()) << own.message();
  for (const Op& op : own->ops()) EXPECT_NE(op.func, OpFunc::kCpMerge);
}

TEST(ContextParallelSimTest, SearchTriesCpOnlyForLongSequencesOrWhenNothingFits) {
  Plan base = MakePlan({});
  SearchSpace space;
  base.seq_len = 2048;
  EXPECT_EQ(SearchCpDegrees(base, space, true), std::vector<int>{1});
  EXPECT_EQ(SearchCpDegrees(base, space, false), std::vector<int>{1});  // 2048/2 < 4096 tokens
  base.seq_len = 16384;
  EXPECT_EQ(SearchCpDegrees(base, space, true), (std::vector<int>{1, 2, 4}));  // 8 GPUs: cp <= 8
  base.seq_len = 8192;
  EXPECT_EQ(SearchCpDegrees(base, space, false), (std::vector<int>{1, 2}));
  space.cp = 8;
  EXPECT_EQ(SearchCpDegrees(base, space, true), std::vector<int>{8});
}

// The planner's evaluator: figures only, and the lower bound that prunes.
class Simulator : public Evaluator {
 public:
  Result<PlanFigures> Evaluate(const Plan& plan) override {
    CostOptions options;
    options.figures_only = true;
    Result<Prediction> p = Predict(plan, options);
    if (!p.ok()) return p.error();
    return p->figures;
  }
  double LowerBoundMs(const Plan& plan) override {
    Result<double> bound = IdealLowerBoundMs(plan);
    return bound.ok() ? *bound : 0;
  }
};

TEST(ContextParallelSimTest, SearchChoosesCpForLlama3_405bAt128kTokens) {
  // Llama 3 405B pre-training's long-context stage: 131,072-token sequences, 16M tokens a batch
  // (128 sequences), on 16,384 H100.
  Plan base;
  base.model_ref = "llama3-405b";
  base.cluster_ref = "dgx-h100:2048";
  base.seq_len = 131072;
  base.micro_batch = 1;
  base.global_batch = 128;
  ASSERT_TRUE(ResolvePlan(base, /*check_rules=*/false).ok());
  Simulator simulator;
  Result<SearchResult> result = SearchPlans(base, SearchSpace{}, simulator);
  ASSERT_TRUE(result.ok()) << result.message();
  ASSERT_FALSE(result->ranked.empty());
  const Plan& best = result->ranked.front().plan;
  EXPECT_GT(best.cp, 1) << DescribeCandidate(best);
  EXPECT_EQ(static_cast<int64_t>(best.tp) * best.cp * best.pp * best.dp, 16384);
  EXPECT_LE(EstimateMemory(best).total_bytes(), best.cluster.node.gpu.memory_bytes());
  // Better than the best plan without context parallelism.
  SearchSpace no_cp;
  no_cp.cp = 1;
  Result<SearchResult> without = SearchPlans(base, no_cp, simulator);
  ASSERT_TRUE(without.ok()) << without.message();
  ASSERT_FALSE(without->ranked.empty());
  EXPECT_LT(result->ranked.front().figures.iteration_ms,
            without->ranked.front().figures.iteration_ms / 2);
}

}  // namespace
}  // namespace domino::sim
