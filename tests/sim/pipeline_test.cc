// The whole iteration (planner/iteration.h) run by the engine: pipeline schedules, transfers and
// the ops of every kind, timed by hand where the costs allow it. Its DP side (buckets, FSDP, the
// optimizer step) is iteration_dp_test.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "models/model_counts.h"
#include "planner/iteration.h"
#include "planner/memory_model.h"
#include "sim/cost_model.h"
#include "sim/engine.h"
#include "sim/predict.h"
#include "tests/planner/test_plans.h"

namespace domino::sim {
namespace {

using testing_util::MakePlan;
using testing_util::PipelinePlan;
using testing_util::PlanKnobs;

struct IterationRun {
  Iteration it;
  Timeline timeline;
};

// Every forward pass takes `fwd`, every backward `bwd`, every send `p2p`; nothing else costs
// anything and nothing contends.
IterationRun RunIteration(const Plan& plan, double fwd, double bwd, double p2p = 0) {
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  EXPECT_TRUE(it.ok()) << it.message();
  IterationRun run{std::move(it).value(), {}};
  std::vector<OpCost> costs(run.it.schedule.size());
  for (size_t i = 0; i < costs.size(); ++i) {
    const Op& op = run.it.schedule.ops()[i];
    if (op.func == OpFunc::kForwardPass) costs[i].alone_us = costs[i].launch_us = fwd;
    if (op.func == OpFunc::kBackwardPass) costs[i].alone_us = costs[i].launch_us = bwd;
    if (op.func == OpFunc::kPpSend) {
      costs[i].alone_us = p2p;
      costs[i].is_comm = true;
    }
  }
  run.timeline = Simulate(run.it.schedule, costs, DeviceResources{});
  return run;
}

// The passes of one stage in the order they ran.
std::vector<int32_t> Passes(const IterationRun& run, int stage) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < run.it.schedule.size(); ++i) {
    const Op& op = run.it.schedule.ops()[i];
    if (op.kind == OpKind::kPass && op.stage == stage) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

TEST(PipelineTest, OneFOneBBubbleEmergesExactly) {
  // 2 stages, 4 micro-batches, F = 1, B = 2: (m + p - 1)(F + B) = 5 * 3 = 15; bubble fraction
  // (p - 1) / (m + p - 1) = 1/5 on every stage.
  IterationRun r = RunIteration(PipelinePlan(2, 1, 4), 1, 2);
  EXPECT_DOUBLE_EQ(r.timeline.end_us(), 15);
  for (int s = 0; s < 2; ++s) {
    double busy = 0;
    for (int32_t id : Passes(r, s)) busy += r.timeline.ops[id].end_us - r.timeline.ops[id].start_us;
    EXPECT_DOUBLE_EQ(busy, 12);
    EXPECT_DOUBLE_EQ(1 - busy / r.timeline.end_us(), 1.0 / 5);
  }
  // The same law on deeper pipelines.
  for (auto [p, m] : {std::tuple{4, 8}, std::tuple{8, 16}, std::tuple{4, 4}}) {
    IterationRun deep = RunIteration(PipelinePlan(p, 1, m), 2, 4);
    EXPECT_DOUBLE_EQ(deep.timeline.end_us(), (m + p - 1) * 6.0) << p << " " << m;
  }
}

TEST(PipelineTest, HandTimelineOfTwoStages) {
  // Stage 0: F0 [0,1] F1 [1,2] B0 [4,6] ...; stage 1: F0 [1,2] B0 [2,4] F1 [4,5] ...
  IterationRun r = RunIteration(PipelinePlan(2, 1, 4), 1, 2);
  const std::vector<int32_t> s0 = Passes(r, 0), s1 = Passes(r, 1);
  const Schedule& s = r.it.schedule;
  EXPECT_EQ(s.op(s0[0]).func, OpFunc::kForwardPass);
  EXPECT_DOUBLE_EQ(r.timeline.ops[s0[0]].start_us, 0);
  EXPECT_DOUBLE_EQ(r.timeline.ops[s1[0]].start_us, 1);  // waits for stage 0's F0
  EXPECT_EQ(s.op(s1[1]).func, OpFunc::kBackwardPass);
  EXPECT_DOUBLE_EQ(r.timeline.ops[s1[1]].start_us, 2);  // B0 right after F0 on the last stage
  EXPECT_EQ(s.op(s0[2]).func, OpFunc::kBackwardPass);
  EXPECT_DOUBLE_EQ(r.timeline.ops[s0[2]].start_us, 4);  // waits for stage 1's B0
}

TEST(PipelineTest, TransfersRunOnThePipelineStreamAndDelayTheirReceiver) {
  // One micro-batch through two stages: F0 [0,1], send [1,1.5], F1 [1.5,2.5], B1 [2.5,4.5],
  // send [4.5,5], B0 [5,7].
  IterationRun r = RunIteration(PipelinePlan(2, 1, 1), 1, 2, 0.5);
  EXPECT_DOUBLE_EQ(r.timeline.end_us(), 7);
  int sends = 0, recvs = 0;
  for (size_t i = 0; i < r.it.schedule.size(); ++i) {
    const Op& op = r.it.schedule.ops()[i];
    if (op.func != OpFunc::kPpSend && op.func != OpFunc::kPpRecv) continue;
    EXPECT_EQ(op.stream, Stream::kPpComm);
    EXPECT_EQ(op.group, Group::kPp);
    (op.func == OpFunc::kPpSend ? sends : recvs) += 1;
    if (op.func == OpFunc::kPpSend && op.stage == 1) {
      EXPECT_DOUBLE_EQ(r.timeline.ops[i].start_us, 4.5);
    }
  }
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 2);
}

// Megatron-Core's overlapped transfers (Plan::overlap_p2p): receives go on a stream of their own,
// so none waits behind a send, and a pass also waits for its stage's previous send in its
// direction. 4 stages x 2 chunks, 8 micro-batches, F = 1, B = 2 and sends of 0.5: the batched
// exchange leaves transfers exposed, the overlapped one hides them under the passes between,
// down to what no schedule hides (the first forward's and last backward's trips through the
// pipeline).
TEST(PipelineTest, OverlappedTransfersHideBehindThePassBetween) {
  // The megatron-core stack overlaps an interleaved pipeline's transfers unless the plan says not.
  const Plan overlapped = PipelinePlan(4, 2, 8);
  ASSERT_TRUE(overlapped.stack.overlap_p2p);
  ASSERT_TRUE(overlapped.p2p_overlapped());
  Plan plain = overlapped;
  plain.overlap_p2p = false;
  const IterationRun none = RunIteration(plain, 1, 2, 0);
  const IterationRun batched = RunIteration(plain, 1, 2, 0.5);
  const IterationRun hidden = RunIteration(overlapped, 1, 2, 0.5);
  EXPECT_NEAR(none.timeline.end_us(), 57, 1e-9);  // InterleavingShrinksTheBubble's
  EXPECT_LT(hidden.timeline.end_us(), batched.timeline.end_us());
  EXPECT_GT(hidden.timeline.end_us(), none.timeline.end_us());
  // Without transfers the two schedules are one.
  EXPECT_DOUBLE_EQ(RunIteration(overlapped, 1, 2, 0).timeline.end_us(), none.timeline.end_us());
  const Schedule& s = hidden.it.schedule;
  std::vector<std::array<int32_t, 2>> last_send(4, {-1, -1});
  int recvs = 0, waits = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    if (op.func == OpFunc::kPpRecv) {
      EXPECT_EQ(op.stream, Stream::kPpRecv);
      ++recvs;
    }
    if (op.func == OpFunc::kPpSend) {
      EXPECT_EQ(op.stream, Stream::kPpComm);
      last_send[op.stage][op.tags.phase == Phase::kBackward] = static_cast<int32_t>(i);
    }
    if (op.kind != OpKind::kPass) continue;
    const int32_t previous = last_send[op.stage][op.func == OpFunc::kBackwardPass];
    if (previous < 0) continue;
    const auto deps = s.deps(op);
    EXPECT_NE(std::find(deps.begin(), deps.end(), previous), deps.end()) << s.Label(i);
    ++waits;
  }
  EXPECT_EQ(recvs, 2 * (4 * 2 - 1) * 8);  // every virtual stage but the first, each way
  EXPECT_GT(waits, 0);
  // The rule: Megatron-Core overlaps transfers only in its interleaved schedule, so a plan may
  // not ask for it without one, and the stack's word does not reach a pipeline without chunks.
  Plan one_chunk = PipelinePlan(4, 1, 8);
  EXPECT_FALSE(one_chunk.p2p_overlapped());
  one_chunk.overlap_p2p = true;
  const std::optional<PlanRuleFailure> failure = CheckPlanRules(one_chunk);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->key, "parallel.overlap_p2p");
}

TEST(PipelineTest, InterleavingShrinksTheBubble) {
  // Megatron: the bubble shrinks by the number of chunks. Same work (each chunk half a stage).
  IterationRun plain = RunIteration(PipelinePlan(4, 1, 8), 2, 4);
  IterationRun inter = RunIteration(PipelinePlan(4, 2, 8), 1, 2);
  EXPECT_DOUBLE_EQ(plain.timeline.end_us(), (8 + 3) * 6.0);
  // Ideal interleaved bubble: (p - 1) (F + B) / v = 3 * 6 / 2 = 9 on top of 48 of work.
  EXPECT_NEAR(inter.timeline.end_us(), 48 + 9, 1e-9);
}

TEST(PipelineTest, EveryPassRunsOnceInAValidOrder) {
  for (auto [p, v, m] : {std::tuple{4, 1, 6}, std::tuple{4, 2, 8}, std::tuple{2, 2, 2}}) {
    IterationRun r = RunIteration(PipelinePlan(p, v, m), 1, 2, 0.1);
    for (int s = 0; s < p; ++s) {
      std::set<std::tuple<int, int, bool>> seen;
      double last = 0;
      for (int32_t id : Passes(r, s)) {
        const Op& op = r.it.schedule.op(id);
        EXPECT_EQ(op.stream, Stream::kCompute);
        EXPECT_TRUE(seen.insert({op.tags.micro_batch, op.tags.virtual_stage,
                                 op.func == OpFunc::kBackwardPass})
                        .second);
        EXPECT_GE(r.timeline.ops[id].start_us, last);
        last = r.timeline.ops[id].end_us;
      }
      EXPECT_EQ(static_cast<int>(seen.size()), 2 * v * m);
    }
  }
}

TEST(PipelineTest, PipelineOrderIsMegatrons) {
  // 1F1B on the first of 4 stages with 6 micro-batches: 3 warm-up forwards, then F/B pairs.
  std::vector<PipelineStep> order = PipelineOrder(0, 4, 1, 6);
  ASSERT_EQ(order.size(), 12u);
  EXPECT_FALSE(order[2].backward);
  EXPECT_FALSE(order[3].backward);
  EXPECT_TRUE(order[4].backward);
  EXPECT_EQ(order[4].micro_batch, 0);
  // The last stage alternates from the start.
  std::vector<PipelineStep> last = PipelineOrder(3, 4, 1, 6);
  EXPECT_TRUE(last[1].backward);
}

TEST(PipelineTest, EveryOpKindStreamAndGroupIsEmitted) {
  // A 4D plan (context parallelism too) with the distributed optimizer and an interleaved
  // pipeline whose transfers overlap: between the iteration and its pass schedules every op
  // kind, stream and group of the IR appears.
  PlanKnobs k;
  k.model = "gpt3-2.7b";
  k.tp = 2;
  k.cp = 2;
  k.pp = 2;
  k.dp = 2;
  k.virtual_stages = 2;
  k.cluster = "dgx-h100:2";
  k.micro_batch = 1;
  k.global_batch = 4;
  k.distributed_optimizer = true;
  Plan plan = MakePlan(k);
  plan.overlap_p2p = true;
  Result<Iteration> it = LowerIteration(plan);
  ASSERT_TRUE(it.ok()) << it.message();
  std::set<OpKind> kinds;
  std::set<Stream> streams;
  std::set<Group> groups;
  std::set<OpFunc> funcs;
  auto note = [&](const Schedule& s) {
    for (const Op& op : s.ops()) {
      kinds.insert(op.kind);
      streams.insert(op.stream);
      groups.insert(op.group);
      funcs.insert(op.func);
    }
  };
  note(it->schedule);
  for (const Schedule& pass : it->pass_schedules) note(pass);
  EXPECT_EQ(kinds.size(), 7u);  // GEMM, attention, elementwise, collective, send/recv, optimizer,
                                // pass
  EXPECT_EQ(streams.size(), static_cast<size_t>(kStreamCount));
  EXPECT_EQ(groups.size(), 6u);  // none, TP, DP, PP, embedding, CP
  for (OpFunc f : {OpFunc::kPpSend, OpFunc::kPpRecv, OpFunc::kDpReduceScatter, OpFunc::kDpAllGather,
                   OpFunc::kEmbeddingAllReduce, OpFunc::kOptimizerStep, OpFunc::kCpSendRecv})
    EXPECT_TRUE(funcs.count(f)) << OpFuncName(f);
}

TEST(PipelineTest, PredictionRunsTheIterationInTheEngine) {
  // tp 2 x pp 2 x dp 2 of GPT-3 2.7B: the predicted iteration holds every stage's passes,
  // transfers and buckets; the breakdown adds up; DP collectives beside the backward slow it
  // (contention) but never make it faster than with free DP collectives.
  PlanKnobs k;
  k.tp = 2;
  k.pp = 2;
  k.dp = 2;
  k.micro_batch = 2;
  k.global_batch = 16;
  const Plan plan = MakePlan(k);
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  const Schedule& s = p->iteration;
  ASSERT_EQ(p->iteration_timeline.ops.size(), s.size());
  std::set<int> stages;
  int dp_ops = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    stages.insert(s.ops()[i].stage);
    if (s.ops()[i].group == Group::kDp) ++dp_ops;
  }
  EXPECT_EQ(stages.size(), 2u);
  EXPECT_GT(dp_ops, 0);
  const IterationBreakdown& b = p->breakdown;
  EXPECT_NEAR(b.compute_ms + b.exposed_tp_ms + b.bubble_ms + b.exposed_pp_ms + b.exposed_dp_ms +
                  b.optimizer_ms,
              p->figures.iteration_ms, 1e-9 * p->figures.iteration_ms);
  EXPECT_GT(b.bubble_ms, 0);
  EXPECT_GT(b.optimizer_ms, 0);
  EXPECT_NEAR(p->iteration_timeline.end_us() * 1e-3, p->figures.iteration_ms, 1e-9);
  EXPECT_LE(p->figures.ideal_ms, p->figures.iteration_ms);
  EXPECT_LE(p->figures.iteration_ms, p->serial_ms);
}

TEST(PipelineTest, TheTiedEmbeddingsSyncIsDpSideOnBothEndStages) {
  // GPT-3 2.7B ties its embedding: over pp 2 with dp 1, the first and last stage sum its
  // gradient, and both optimizers wait for it. It is the only DP-side collective, counted on
  // stage 0 as well, and the serialized bound holds it: never below the iteration.
  PlanKnobs k;
  k.cluster = "dgx-h100:1:2";
  k.tp = 1;
  k.pp = 2;
  k.micro_batch = 1;
  const Plan plan = MakePlan(k);
  ASSERT_TRUE(plan.model.tied_embeddings);
  Result<Prediction> p = Predict(plan);
  ASSERT_TRUE(p.ok()) << p.message();
  double sync_us = 0;
  for (size_t i = 0; i < p->iteration.size(); ++i) {
    const Op& op = p->iteration.ops()[i];
    if (op.group == Group::kDp) ADD_FAILURE() << "dp 1 has no DP bucket";
    if (op.group == Group::kEmbedding)
      sync_us += p->iteration_timeline.ops[i].end_us - p->iteration_timeline.ops[i].start_us;
  }
  EXPECT_GT(sync_us, 0);
  EXPECT_NEAR(p->dp_comm_ms, sync_us * 1e-3, 1e-9);
  // Here nothing overlaps the sync: the bound meets the iteration, to rounding.
  EXPECT_LE(p->figures.iteration_ms, p->serial_ms * (1 + 1e-12));
}

TEST(PipelineTest, IterationOpsArePricedByTheCostModel) {
  // The optimizer step pays the stack's launch (smaller under CUDA graphs) plus its bytes over
  // HBM; a DP bucket is priced on the DP group (across nodes here), a pipeline recv costs nothing.
  PlanKnobs k;
  k.tp = 8;
  k.pp = 1;
  k.dp = 2;
  k.global_batch = 8;
  k.cluster = "dgx-h100:2";
  const Plan plan = MakePlan(k);
  Op step;
  step.kind = OpKind::kOptimizer;
  step.func = OpFunc::kOptimizerStep;
  step.bytes = 3e9;
  CostOptions eager, graphs;
  eager.cuda_graphs = false;
  graphs.cuda_graphs = true;
  const OpCost a = CostModel(plan, eager).Cost(step), b = CostModel(plan, graphs).Cost(step);
  const GpuSpec& gpu = plan.cluster.node.gpu;
  EXPECT_NEAR(a.alone_us - b.alone_us, gpu.kernel_launch_us - gpu.graph_launch_us, 1e-9);
  EXPECT_NEAR(a.alone_us, gpu.kernel_launch_us + 3e9 / (gpu.hbm_GBps * gpu.hbm_efficiency * 1e3),
              1e-6);
  Op bucket;
  bucket.kind = OpKind::kCollective;
  bucket.collective = CollectiveOp::kAllReduce;
  bucket.group = Group::kDp;
  bucket.stream = Stream::kDpComm;
  bucket.bytes = 64e6;
  const OpCost dp = CostModel(plan, {}).Cost(bucket);
  EXPECT_NEAR(
      dp.alone_us,
      EstimateCollective(plan.cluster.node, Collective::kAllReduce, 64e6, DpGroup(plan)).time_us,
      1e-9);
  EXPECT_EQ(DpGroup(plan).nodes_spanned, 2);
  Op recv;
  recv.kind = OpKind::kSendRecv;
  recv.func = OpFunc::kPpRecv;
  recv.group = Group::kPp;
  recv.bytes = 1e6;
  EXPECT_EQ(CostModel(plan, {}).Cost(recv).alone_us, 0);
}

TEST(PipelineTest, FiguresOnlyAgreesWithTheFullPrediction) {
  // The planner's mode reuses the lowered iteration across slicings of one shape: the figures
  // must be those of a full prediction, whatever was evaluated before.
  CostOptions fast;
  fast.figures_only = true;
  auto knobs = [] {  // tp 2 x pp 2 x dp 2, 8 micro-batches of 4
    PlanKnobs k;
    k.tp = 2;
    k.pp = 2;
    k.dp = 2;
    k.micro_batch = 4;
    k.global_batch = 32;
    return k;
  };
  for (int row_split : {1, 2, 1, 4}) {
    for (bool sp : {false, true}) {
      PlanKnobs k = knobs();
      k.row_split = row_split;
      k.scope = row_split > 1 ? OverlapScope::kInterLayer : OverlapScope::kNone;
      k.sequence_parallel = sp;
      k.distributed_optimizer = sp;
      const Plan plan = MakePlan(k);
      Result<Prediction> full = Predict(plan), quick = Predict(plan, fast);
      ASSERT_TRUE(full.ok() && quick.ok());
      EXPECT_EQ(quick->figures.iteration_ms, full->figures.iteration_ms) << row_split << sp;
      EXPECT_EQ(quick->figures.ideal_ms, full->figures.ideal_ms);
      EXPECT_EQ(quick->figures.hidden_comm_fraction, full->figures.hidden_comm_fraction);
      EXPECT_EQ(quick->figures.memory_gib_per_gpu, full->figures.memory_gib_per_gpu);
      EXPECT_TRUE(quick->iteration.ops().empty());  // nothing but the figures
    }
  }
  // Plans that differ from the one before only in what the iteration alone holds (parameters
  // sharded with FSDP, the type gradients are reduced in, when the last ones are launched,
  // whether interleaved transfers overlap, the layers a pipeline split gives each stage) each get
  // their own iteration.
  PlanKnobs k = knobs();
  k.distributed_optimizer = true;
  Plan base = MakePlan(k);
  Plan fsdp = base, grads = base, synced = base;
  fsdp.fsdp = true;
  grads.grad_reduce = GradReduce::kParam;
  synced.grad_sync = GradSync::kLayer;
  k.virtual_stages = 2;
  Plan interleaved = MakePlan(k), batched = interleaved;
  batched.overlap_p2p = false;
  k.virtual_stages = 1;
  // pp 3 over 32 layers: 10, 11, 11 by layers; counting the loss as a layer, 11, 11, 10.
  k.pp = 3;
  k.cluster = "dgx-h100:2:6";
  Plan thirds = MakePlan(k), split = thirds;
  split.pipeline_split = PipelineSplit::kLoss;
  ASSERT_NE(ChunkLayers(split), ChunkLayers(thirds));
  for (const Plan* plan :
       {&base, &fsdp, &base, &grads, &base, &synced, &interleaved, &batched, &thirds, &split}) {
    Result<Prediction> full = Predict(*plan), quick = Predict(*plan, fast);
    ASSERT_TRUE(full.ok() && quick.ok()) << (full.ok() ? quick.message() : full.message());
    EXPECT_EQ(quick->figures.iteration_ms, full->figures.iteration_ms)
        << "fsdp " << plan->fsdp << ", grad_reduce " << GradReduceName(plan->gradient_reduce())
        << ", grad_sync " << GradSyncName(plan->gradient_sync()) << ", p2p overlapped "
        << plan->p2p_overlapped() << ", split " << PipelineSplitName(plan->pipeline_split);
  }
}

}  // namespace
}  // namespace domino::sim
