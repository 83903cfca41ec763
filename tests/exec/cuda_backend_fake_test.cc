// The CUDA backend's own logic on the fake GPU of fake_cuda_ops.cc: streams, events, the timeline
// it reads back, graph capture, NCCL and its teardown. The fake times ops by fixed rules, so the
// expected times are exact. Whole steps: cuda_step_fake_test.cc; calibration:
// cuda_calibrate_fake_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "exec/communicator.h"
#include "exec/execute.h"
#include "planner/lower.h"
#include "sim/engine.h"
#include "tests/exec/fake_cuda_ops.h"
#include "tests/exec/fake_gpu_test_util.h"

namespace domino::exec {
namespace {

using fake_test::TinyKnobs;
using fake_test::TinyPlan;
using fake_test::TwoRankStandIn;

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
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kEmulate;
  options.cuda.dtype = Dtype::kBf16;
  options.cuda.graph = graph;
  options.cuda.emulated = Emulated(*s);
  options.iterations = iterations;
  SelfCommunicator self;
  return ExecuteSchedule(plan, std::move(s).value(), self, options);
}

// The CUDA backend of rank 0 of TinyPlan's TP group of two, on NCCL (fakes) or MPI.
Result<std::unique_ptr<CudaRunner>> NcclRunner(const Plan& plan, const Schedule& s,
                                               Communicator& host, bool graph,
                                               CommMode comm = CommMode::kNccl) {
  CudaOptions options;
  options.comm = comm;
  options.dtype = Dtype::kBf16;
  options.graph = graph;
  return MakeCudaRunner(s, plan.model, 0, plan.tp, /*seed=*/1, options, host);
}

bool Overlap(const OpTime& a, const OpTime& b) {
  return std::max(a.start_us, b.start_us) < std::min(a.end_us, b.end_us);
}

TEST(CudaBackendFakeTest, TheModelsEndsRunOnTheGpu) {
  // The whole model of one micro-batch: embedding, layers, final norm, LM head and loss, every op
  // enqueued and timed (collectives emulated), twice.
  Plan plan = TinyPlan(1, OverlapScope::kNone);
  Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
  ASSERT_TRUE(s.ok()) << s.message();
  int ends = 0;
  for (const Op& op : s->ops())
    ends += op.func == OpFunc::kEmbed || op.func == OpFunc::kEmbedGrad ||
            op.func == OpFunc::kLmHead || op.func == OpFunc::kLoss ||
            op.func == OpFunc::kLossGrad || op.func == OpFunc::kFinalNormGrad;
  EXPECT_GE(ends, 6);
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kEmulate;
  options.cuda.emulated = Emulated(*s);
  options.iterations = 2;
  SelfCommunicator self;
  Result<ExecuteResult> r = ExecuteSchedule(plan, std::move(s).value(), self, options);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->timeline.ops.size(), r->schedule.size());
  for (size_t i = 0; i < r->schedule.size(); ++i)
    EXPECT_GT(r->timeline.ops[i].end_us, r->timeline.ops[i].start_us)
        << r->schedule.Label(static_cast<int32_t>(i));
}

TEST(CudaBackendFakeTest, TokenIdsAndLossStatisticsAreHeldInFp32WhateverTheElementType) {
  // bf16 holds integers exactly only up to 256: ids and labels stay fp32 (4 bytes each). So do
  // the loss statistics: a log-sum-exp near 9 would round by up to 0.03 in bf16, 3% of every
  // logit's gradient. The ids and labels are uploaded, the statistics zeroed by an fp32 upload,
  // and a timing run's random fill leaves all three alone.
  Plan plan = TinyPlan(1, OverlapScope::kNone);
  Result<Schedule> s = LowerForExecution(plan, Extent::kModel);
  ASSERT_TRUE(s.ok()) << s.message();
  int ids = 0, stats = 0;
  for (const Tensor& t : s->tensors()) {
    ids += IsTokens(t.role);
    stats += t.role.kind == TensorKind::kLoss;
  }
  ASSERT_EQ(ids, 2);  // the tokens and the labels
  ASSERT_EQ(stats, 1);
  SelfCommunicator self;
  Result<std::unique_ptr<CudaRunner>> runner = NcclRunner(plan, *s, self, false, CommMode::kMpi);
  ASSERT_TRUE(runner.ok()) << runner.message();
  EXPECT_EQ(fake::Counters().f32_uploads, ids + stats);
  EXPECT_EQ(fake::Counters().f32_overruns, 0);
  ASSERT_TRUE((*runner)->FillRandom(7).ok());
  EXPECT_EQ(fake::Counters().random_fills, static_cast<int>(s->tensors().size()) - ids - stats);
}

// A runner given another's weights (a whole step's later micro-batches) reads that runner's
// weights and norm gains in place: nothing of them is allocated or uploaded again, while its
// activations and gradients are its own. A runner of another schedule cannot lend them.
TEST(CudaBackendFakeTest, ARunnerReadsTheWeightsItIsLent) {
  const Plan plan = TinyPlan(1, OverlapScope::kNone);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok()) << s.message();
  SelfCommunicator self;
  Result<std::unique_ptr<CudaRunner>> owner = NcclRunner(plan, *s, self, false, CommMode::kMpi);
  ASSERT_TRUE(owner.ok()) << owner.message();
  const int uploads = fake::Counters().uploads;
  CudaOptions options;
  options.dtype = Dtype::kBf16;
  options.weights_from = owner->get();
  Result<std::unique_ptr<CudaRunner>> lent =
      MakeCudaRunner(*s, plan.model, 0, plan.tp, /*seed=*/1, options, self);
  ASSERT_TRUE(lent.ok()) << lent.message();
  int weights = 0, given = 0;
  for (size_t i = 0; i < s->tensors().size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const TensorRole& role = s->tensors()[i].role;
    const bool weight = !role.gradient &&
                        (role.kind == TensorKind::kWeight || role.kind == TensorKind::kNormWeight);
    weights += weight;
    given += IsGiven(role) && !weight;
    EXPECT_EQ((*lent)->Device(id).data == (*owner)->Device(id).data, weight) << RoleName(role);
  }
  EXPECT_EQ(weights, 6 * plan.model.layers);
  // The lent runner uploads only its own given values (the stage's input) and the residual
  // gradient its backward starts from.
  EXPECT_EQ(fake::Counters().uploads - uploads, given + 1);
  // A runner of another schedule: its weights have other shapes.
  testing_util::PlanKnobs one = TinyKnobs();
  one.tp = 1;
  one.cluster = "dgx-h100:1:1";
  Result<Schedule> other = Lower(testing_util::MakePlan(one));
  ASSERT_TRUE(other.ok()) << other.message();
  Result<std::unique_ptr<CudaRunner>> wrong =
      MakeCudaRunner(*other, plan.model, 0, 1, /*seed=*/1, options, self);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("the runner lending weights holds"), std::string::npos)
      << wrong.message();
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

// NCCL's finalize waits until no CUDA graph holds work of its communicator: the backend must
// destroy its graph before it finalizes, or `execute --comm nccl --cuda-graph` hangs at exit.
TEST(CudaBackendFakeTest, GraphIsDestroyedBeforeTheNcclCommunicator) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  TwoRankStandIn host;
  {
    Result<std::unique_ptr<CudaRunner>> runner = NcclRunner(plan, *s, host, /*graph=*/true);
    ASSERT_TRUE(runner.ok()) << runner.message();
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*runner)->Run(host, {}).ok());
    EXPECT_EQ(fake::Counters().captures, 1);
  }
  EXPECT_EQ(fake::Counters().teardown,
            (std::vector<std::string>{"graph", "nccl finalize", "context"}));
  EXPECT_FALSE(fake::Counters().nccl_teardown_would_hang);
}

// Weight and norm-weight gradients accumulate (row slices add up). A graph's first run is an eager
// warm-up, then the capture, then a replay: without zeroing them inside the graph every gradient
// came out twice. The fake counts the accumulating writes into each buffer since its last zero.
TEST(CudaBackendFakeTest, EveryRunStartsTheGradientsFromZero) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> grads;
  for (size_t t = 0; t < s->tensors().size(); ++t) {
    const TensorRole& role = s->tensors()[t].role;
    if (role.gradient && (role.kind == TensorKind::kWeight || role.kind == TensorKind::kNormWeight))
      grads.push_back(static_cast<int32_t>(t));
  }
  ASSERT_EQ(grads.size(), 6u * plan.model.layers);
  auto counts = [&](CudaRunner& runner) {
    std::vector<float> c;
    for (int32_t t : grads) {
      Result<std::vector<float>> values = runner.backend().Read(t);
      EXPECT_TRUE(values.ok()) << values.message();
      c.push_back(values.ok() ? (*values)[0] : -1.0f);
    }
    return c;
  };
  TwoRankStandIn host;
  Result<std::unique_ptr<CudaRunner>> eager = NcclRunner(plan, *s, host, /*graph=*/false);
  ASSERT_TRUE(eager.ok()) << eager.message();
  ASSERT_TRUE((*eager)->Run(host, {}).ok());
  const std::vector<float> once = counts(**eager);
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_GE(grads[i], 0);
    EXPECT_EQ(once[i], plan.row_split)
        << RoleName(s->tensors()[grads[i]].role);  // one per row slice
  }
  ASSERT_TRUE((*eager)->Run(host, {}).ok());
  EXPECT_EQ(counts(**eager), once) << "a second iteration";

  Result<std::unique_ptr<CudaRunner>> graph = NcclRunner(plan, *s, host, /*graph=*/true);
  ASSERT_TRUE(graph.ok()) << graph.message();
  ASSERT_TRUE((*graph)->Run(host, {}).ok());
  EXPECT_EQ(counts(**graph), once) << "eager warm-up, then the graph's first replay";
  ASSERT_TRUE((*graph)->Run(host, {}).ok());
  EXPECT_EQ(counts(**graph), once) << "the second replay";

  Result<std::unique_ptr<CudaRunner>> mpi = NcclRunner(plan, *s, host, false, CommMode::kMpi);
  ASSERT_TRUE(mpi.ok()) << mpi.message();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*mpi)->Run(host, {}).ok());
  EXPECT_EQ(counts(**mpi), once) << "host collectives, second run";
}

// A non-blocking NCCL call finishes enqueueing on NCCL's thread: its start event, recorded on an
// idle comm stream before the call, must wait behind a gate or it times the host's enqueueing
// (kNcclEnqueueUs in the fake) instead of the GPU's collective.
TEST(CudaBackendFakeTest, NcclCollectivesAreTimedOnTheGpuNotTheHost) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  TwoRankStandIn host;
  Result<std::unique_ptr<CudaRunner>> runner = NcclRunner(plan, *s, host, /*graph=*/false);
  ASSERT_TRUE(runner.ok()) << runner.message();
  Result<Timeline> t = (*runner)->Run(host, {});
  ASSERT_TRUE(t.ok()) << t.message();
  int collectives = 0;
  for (size_t i = 0; i < s->size(); ++i) {
    if (s->ops()[i].kind != OpKind::kCollective) continue;
    ++collectives;
    EXPECT_NEAR(t->ops[i].end_us - t->ops[i].start_us, fake::kNcclUs, 1e-3)
        << s->Label(static_cast<int32_t>(i));
  }
  EXPECT_GT(collectives, 0);
  EXPECT_EQ(fake::Counters().gates, collectives);
  // As nccl-tests times them: batches queued behind a gate, so no host time at all.
  for (size_t i = 0; i < s->size(); ++i) {
    if (s->ops()[i].kind != OpKind::kCollective) continue;
    Result<double> us = (*runner)->TimeCollective(static_cast<int32_t>(i), 3, host);
    ASSERT_TRUE(us.ok()) << us.message();
    EXPECT_NEAR(*us, fake::kNcclUs, 1e-3);
    break;
  }
}

// Decomposed collective-matmul overlap: emulated, its parts run as kernels like any collective;
// on NCCL each part is one group of rooted collectives (a broadcast or reduce per rank whose
// shard holds some of the part's rows) on the comm stream, timed like any collective.
TEST(CudaBackendFakeTest, DecomposedPartsRunEmulatedAndOnNccl) {
  for (int chunks : {0, 3}) {  // tp parts (a shard each), or 3 parts of a 2-rank group
    SCOPED_TRACE(chunks);
    testing_util::PlanKnobs k = TinyKnobs();
    k.sequence_parallel = true;
    k.method = OverlapMethod::kDecomposed;
    k.chunks = chunks;
    k.rs_chunks = chunks > 0 ? chunks : 2;  // the reduce-scatters in as many parts
    const Plan plan = testing_util::MakePlan(k);
    Result<ExecuteResult> emulated = RunEmulated(plan, /*graph=*/false);
    ASSERT_TRUE(emulated.ok()) << emulated.message();
    Result<Schedule> s = Lower(plan);
    ASSERT_TRUE(s.ok());
    fake::ResetCounters();  // the NCCL run's only
    TwoRankStandIn host;
    Result<std::unique_ptr<CudaRunner>> runner = NcclRunner(plan, *s, host, /*graph=*/false);
    ASSERT_TRUE(runner.ok()) << runner.message();
    Result<Timeline> t = (*runner)->Run(host, {});
    ASSERT_TRUE(t.ok()) << t.message();
    // Every part is one group on the comm stream; a part holds one rank's rows (tp parts of a
    // two-rank group) or spans two ranks' (3 parts: the middle one).
    int parts = 0, pieces = 0;
    const int parts_per = chunks == 0 ? 2 : chunks;
    for (size_t i = 0; i < s->size(); ++i) {
      const Op& op = s->ops()[i];
      if (op.kind != OpKind::kCollective || op.parts <= 1) continue;
      ASSERT_EQ(op.parts, parts_per);
      ++parts;
      pieces += parts_per == 3 && op.part == 1 ? 2 : 1;
      EXPECT_NEAR(t->ops[i].end_us - t->ops[i].start_us, fake::kNcclUs, 1e-3)
          << s->Label(static_cast<int32_t>(i));
    }
    EXPECT_GT(parts, 0);
    EXPECT_EQ(fake::Counters().nccl_groups, parts);
    EXPECT_EQ(fake::Counters().nccl_group_pieces, pieces);
  }
}

// NCCL refuses minCTAs > maxCTAs, and compares them before filling an unset one: the backend
// passes both, or says why not before NCCL is asked.
TEST(CudaBackendFakeTest, NcclGetsAConsistentCtaPair) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  TwoRankStandIn host;
  CudaOptions options;
  options.comm = CommMode::kNccl;
  options.min_ctas = 16;  // a minimum alone: NCCL's own maximum (64) fills in
  EXPECT_TRUE(MakeCudaRunner(*s, plan.model, 0, 2, 1, options, host).ok());
  options.max_ctas = 8;
  Result<std::unique_ptr<CudaRunner>> bad = MakeCudaRunner(*s, plan.model, 0, 2, 1, options, host);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("minimum CTAs per collective (16) exceeds its maximum (8)"),
            std::string::npos)
      << bad.message();
}

}  // namespace
}  // namespace domino::exec
