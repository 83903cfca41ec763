// The CUDA backend's own logic on the fake GPU of fake_cuda_ops.cc: streams, events, the timeline
// it reads back, graph capture and calibration. The fake times ops by fixed rules, so the
// expected times are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "exec/calibrate.h"
#include "exec/communicator.h"
#include "exec/execute.h"
#include "exec/step.h"
#include "planner/iteration.h"
#include "planner/lower.h"
#include "sim/engine.h"
#include "tests/exec/fake_cuda_ops.h"
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

// tiny-gpt over a TP group of two, micro-batch 12 x seq 16.
// The fake's counters start from zero with each test, so that a test sees everything its code
// did, across every runner (context) it made.
struct ResetFakeCounters : testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo&) override { fake::ResetCounters(); }
};
// gtest's listener list takes ownership of a raw pointer.
const bool kResetFakeCountersRegistered = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new ResetFakeCounters);
  return true;
}();

testing_util::PlanKnobs TinyKnobs() {
  testing_util::PlanKnobs k;
  k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/tiny-gpt.yaml";
  k.cluster = "dgx-h100:1:2";
  k.tp = 2;
  k.seq_len = 16;
  k.micro_batch = 12;
  k.global_batch = 12;
  return k;
}

// tiny-gpt for whole steps: tp x cp x pp x dp ranks on one node, micro-batch 4.
testing_util::PlanKnobs StepKnobs(int tp, int cp, int pp, int dp, int global_batch) {
  testing_util::PlanKnobs k = TinyKnobs();
  k.tp = tp, k.cp = cp, k.pp = pp, k.dp = dp;
  k.cluster = "dgx-h100:1:" + std::to_string(tp * cp * pp * dp);
  k.micro_batch = 4;
  k.global_batch = global_batch;
  return k;
}

Plan TinyPlan(int p, OverlapScope scope) {
  testing_util::PlanKnobs k = TinyKnobs();
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
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kEmulate;
  options.cuda.dtype = Dtype::kBf16;
  options.cuda.graph = graph;
  options.cuda.emulated = Emulated(*s);
  options.iterations = iterations;
  SelfCommunicator self;
  return ExecuteSchedule(plan, std::move(s).value(), self, options);
}

// Rank 0 of a TP group of two whose peer is silent: enough for the backend's NCCL bootstrap (an
// all-gather of the unique id) and barriers on the fake GPU, whose NCCL calls are fakes.
class TwoRankStandIn final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Status AllReduce(float*, int64_t) override { return Status::Ok(); }
  Status ReduceScatter(const float* in, float* out, int64_t count) override {
    std::copy(in, in + count, out);
    return Status::Ok();
  }
  Status AllGather(const float* in, float* out, int64_t count) override {
    std::copy(in, in + count, out);
    std::copy(in, in + count, out + count);
    return Status::Ok();
  }
  Status Gather(const float* in, float* out, int64_t count) override {
    return AllGather(in, out, count);
  }
  Status SendRecv(const float* send, int, float* recv, int, int64_t count) override {
    std::copy(send, send + count, recv);
    return Status::Ok();
  }
};

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

// Two whole training steps of tiny-gpt on one rank of the (fake) GPU, two micro-batches, each
// its own runner; `comm` moves the step's data.
Result<ExecuteResult> OneRankSteps(CommMode comm) {
  const Plan plan = testing_util::MakePlan(StepKnobs(1, 1, 1, 1, 8));
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.extent = Extent::kStep;
  options.cuda.comm = comm;
  SelfCommunicator self;
  return Execute(plan, self, options);
}

// Collectives through the host: every op of the iteration run and timed, twice.
TEST(CudaBackendFakeTest, WholeStepsRunOnTheGpu) {
  Result<ExecuteResult> r = OneRankSteps(CommMode::kMpi);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->losses.size(), 2u);
  int passes = 0;
  for (size_t i = 0; i < r->schedule.size(); ++i) {
    const Op& op = r->schedule.ops()[i];
    if (op.kind != OpKind::kPass) continue;
    ++passes;
    EXPECT_GT(r->timeline.ops[i].end_us, r->timeline.ops[i].start_us)
        << r->schedule.Label(static_cast<int32_t>(i));
  }
  EXPECT_EQ(passes, 4);  // each micro-batch's forward and backward
}

// With --comm nccl a whole step keeps its buckets on the device: each step sums every
// micro-batch's weight gradients there, runs Adam there and writes the weights back.
TEST(CudaBackendFakeTest, WholeStepsKeepTheirBucketsOnTheGpu) {
  Result<ExecuteResult> r = OneRankSteps(CommMode::kNccl);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->losses.size(), 2u);
  // tiny-gpt: 2 layers of 6 parameters, the embedding and the final norm, in 4 buckets.
  const int params = 2 * 6 + 2, buckets = 4, micro_batches = 2, steps = 2;
  const fake::Stats& c = fake::Counters();
  EXPECT_EQ(c.accumulates, params * micro_batches * steps);
  EXPECT_EQ(c.adam_steps, buckets * steps);
  EXPECT_EQ(c.stores, params * micro_batches * steps);
  EXPECT_EQ(c.nccl_collectives, 0);  // one rank: no communicator
  EXPECT_EQ(c.nccl_sends + c.nccl_recvs, 0);
}

// Runs `iteration` on the plan's ranks as threads of the fake GPU: each rank's status, and what it
// counted (the fake's counters are per thread).
std::vector<fake::Stats> FakeRanks(const Plan& plan, const Iteration& iteration,
                                   const ExecuteOptions& options, std::vector<Status>* status) {
  const int ranks = plan.tp * plan.cp * plan.pp * plan.dp;
  LocalGroup group(ranks);
  status->assign(ranks, Status::Ok());
  std::vector<fake::Stats> counted(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      Result<ExecuteResult> r = ExecuteIteration(plan, iteration, group.member(rank), options);
      (*status)[rank] = r.ok() ? Status::Ok() : r.error();
      counted[rank] = fake::Counters();
    });
  for (std::thread& t : threads) t.join();
  return counted;
}

// Four ranks (pp 2 x dp 2, distributed optimizer): every pipeline send is a device send matched by
// a device receive, the tied embedding's gradient crosses between the first and last stage both
// ways, and the buckets reduce-scatter and all-gather over DP on NCCL.
TEST(CudaBackendFakeTest, WholeStepsMoveThePipelineAndTheBucketsOnNccl) {
  testing_util::PlanKnobs k = StepKnobs(1, 1, 2, 2, 16);  // two micro-batches per replica
  k.distributed_optimizer = true;
  const Plan plan = testing_util::MakePlan(k);
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kNccl;
  options.steps = 2;
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  ASSERT_TRUE(it.ok()) << it.message();
  int sends = 0, syncs = 0, dp_ops = 0;
  for (const Op& op : it->schedule.ops()) {
    sends += op.func == OpFunc::kPpSend;
    syncs += op.func == OpFunc::kEmbeddingAllReduce;
    dp_ops += op.func == OpFunc::kDpReduceScatter || op.func == OpFunc::kDpAllGather;
  }
  ASSERT_GT(sends, 0);
  ASSERT_EQ(syncs, 1);
  std::vector<Status> status;
  const std::vector<fake::Stats> counted = FakeRanks(plan, *it, options, &status);
  int sent = 0, received = 0, collectives = 0;
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank].message();
    sent += counted[rank].nccl_sends;
    received += counted[rank].nccl_recvs;
    collectives += counted[rank].nccl_collectives;
    EXPECT_GT(counted[rank].adam_steps, 0) << rank;
  }
  // Each replica's stages send what the schedule says, plus the embedding sync's two sends.
  EXPECT_EQ(sent, (sends + 2 * syncs) * plan.dp * options.steps);
  EXPECT_EQ(received, sent);
  // A reduce-scatter and an all-gather per bucket: the first stage's layer and embedding, the
  // last stage's layer, final norm and tied LM head (the embedding's copy); its bucket ops of
  // the chunk's other parameters cover the latter two.
  ASSERT_EQ(dp_ops, 2 * 4);
  EXPECT_EQ(collectives, 2 * (2 + 3) * plan.dp * options.steps);
}

// FSDP on four ranks (pp 2 x dp 2): each layer's master weights gathered on NCCL before every
// forward and backward piece, each micro-batch's gradients summed on the device and
// reduce-scattered after its backward piece; no end-of-step bucket or gather runs.
TEST(CudaBackendFakeTest, FsdpStepsGatherAndReduceEachLayerOnNccl) {
  testing_util::PlanKnobs k = StepKnobs(1, 1, 2, 2, 16);  // two micro-batches per replica
  k.distributed_optimizer = true;
  Plan plan = testing_util::MakePlan(k);
  plan.fsdp = true;
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kNccl;
  options.steps = 2;
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  ASSERT_TRUE(it.ok()) << it.message();
  std::vector<Status> status;
  const std::vector<fake::Stats> counted = FakeRanks(plan, *it, options, &status);
  int collectives = 0, accumulates = 0;
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank].message();
    collectives += counted[rank].nccl_collectives;
    accumulates += counted[rank].accumulates;
    EXPECT_GT(counted[rank].adam_steps, 0) << rank;
  }
  // tiny-gpt, one layer per stage, two micro-batches: per step a stage gathers its layer 4 times
  // (each micro-batch's forward and backward) and reduce-scatters it twice, each op over the
  // layer's unit of buckets: the first stage's layer and embedding (2 buckets, 7 parameters), the
  // last stage's layer, final norm and the tied LM head's copy of the embedding (3 buckets, 8
  // parameters). Collectives: (6 x 2 + 6 x 3) per replica and step. Device sums: one per
  // parameter and reduce-scatter (2 x 7 + 2 x 8), one per bucket and reduce-scatter adding the
  // shard to the rank's gradient (2 x 2 + 2 x 3), and the tied embedding's sync on both stages (2).
  EXPECT_EQ(collectives, (6 * 2 + 6 * 3) * plan.dp * options.steps);
  EXPECT_EQ(accumulates, (2 * 7 + 2 * 8 + 2 * 2 + 2 * 3 + 2) * plan.dp * options.steps);
}

// Context parallelism's ring passes its blocks through the host; the rest of the step runs on
// the device all the same.
TEST(CudaBackendFakeTest, WholeStepsWithContextParallelismRunOnNccl) {
  const Plan plan = testing_util::MakePlan(StepKnobs(1, 2, 1, 1, 4));
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kNccl;
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  ASSERT_TRUE(it.ok()) << it.message();
  std::vector<Status> status;
  const std::vector<fake::Stats> counted = FakeRanks(plan, *it, options, &status);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank].message();
    EXPECT_GT(counted[rank].nccl_collectives, 0) << rank;  // the buckets, over DP x CP
  }
}

// tp 2 x pp 2 with sequence parallelism: every micro-batch's pass runs its TP collectives on the
// step's NCCL communicator (lent to its runner), and the norm gains' partial gradients are summed
// over TP in fp32 on NCCL once a step.
TEST(CudaBackendFakeTest, WholeStepsRunThePassesTpCollectivesOnNccl) {
  testing_util::PlanKnobs k = StepKnobs(2, 1, 2, 1, 8);  // two micro-batches
  k.sequence_parallel = true;
  const Plan plan = testing_util::MakePlan(k);
  ExecuteOptions options;
  options.backend = BackendKind::kCuda;
  options.cuda.comm = CommMode::kNccl;
  Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
  ASSERT_TRUE(it.ok()) << it.message();
  // Per stage: the TP collectives of its chunk's pass and its partial-sum gradients.
  std::vector<int> expected(2, 0), expected_f32(2, 0);
  for (int stage = 0; stage < 2; ++stage) {
    const ChunkShape& shape = it->virtual_stages[stage];
    Result<Schedule> pass =
        LowerStage(plan, LowerOptions{shape.layers, shape.embedding, shape.head, true, true});
    ASSERT_TRUE(pass.ok()) << pass.message();
    int collectives = 0, partial = 0;
    int loss = 0;  // all-reduces of the fp32 loss statistics (the last stage's)
    for (const Op& op : pass->ops()) {
      collectives += op.kind == OpKind::kCollective;
      loss += op.kind == OpKind::kCollective &&
              pass->tensors()[pass->reads(op)[0].tensor].role.kind == TensorKind::kLoss;
    }
    EXPECT_EQ(loss > 0, shape.head) << stage;
    for (const Tensor& t : pass->tensors())
      partial += t.role.gradient && t.role.kind == TensorKind::kNormWeight &&
                 t.shard == Shard::kPartialSum;
    ASSERT_GT(collectives, 0);
    ASSERT_GT(partial, 0);
    expected[stage] = (collectives * it->micro_batches + partial) * options.steps;
    expected_f32[stage] = loss * it->micro_batches * options.steps;
  }
  std::vector<Status> status;
  const std::vector<fake::Stats> counted = FakeRanks(plan, *it, options, &status);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank].message();
    EXPECT_EQ(counted[rank].nccl_collectives, expected[CoordsOf(plan, rank).pp]) << rank;
    EXPECT_EQ(counted[rank].nccl_f32_allreduces, expected_f32[CoordsOf(plan, rank).pp]) << rank;
  }
}

// Every op waits for its dependencies and for the op before it on its stream; each lasts what
// the fake says; a collective overlaps independent compute; every collective was emulated.
// The model's ends have CPU kernels only: a whole-model schedule is refused up front, naming the
// first such op, rather than failing half-way through a run.
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
  std::vector<size_t> beats;  // the watchdog's
  options.measured = [&beats](size_t n) { beats.push_back(n); };
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(profile->backend, "cuda");
  EXPECT_EQ(profile->device, "fake GPU");
  EXPECT_TRUE(profile->contention);
  EXPECT_TRUE(profile->collectives.empty());  // one rank: no collectives to time
  EXPECT_EQ(profile->gemm_tflops, fake::kPeakTflops);
  EXPECT_EQ(profile->hbm_GBps, fake::kHbmGBps);
  EXPECT_EQ(profile->kernel_launch_us, fake::kLaunchUs);
  // Random values fill the tensors: none but the token ids is computed and uploaded first.
  EXPECT_EQ(fake::Counters().uploads, fake::Counters().f32_uploads);
  EXPECT_EQ(profile->graph_launch_us, fake::kGraphLaunchUs);
  EXPECT_TRUE(profile->gemm_soak_tflops.empty());  // no soak asked for
  EXPECT_TRUE(profile->gemm_samples.empty());
  // The device's peak: 8192^3, 10 warm-up runs, the mean of 20.
  ASSERT_EQ(fake::Counters().gemm_shapes.size(), 1u);
  EXPECT_EQ(fake::Counters().gemm_shapes[0], (std::array<int64_t, 6>{8192, 8192, 8192, 10, 20, 0}));
  EXPECT_EQ(fake::Counters().soaks + fake::Counters().fp8_soaks, 0);
  // The layer stack's ops and the model's ends' (embedding, final norm, LM head, loss), timed
  // on a second runner: one layer with both ends.
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(ends.ok());
  std::set<std::string> signatures;
  for (const Schedule* schedule : {&*s, &*ends}) {
    for (const Op& op : schedule->ops()) {
      if (op.kind == OpKind::kCollective) continue;
      signatures.insert(OpSignature(op));
      ASSERT_TRUE(profile->compute_us.count(OpSignature(op))) << OpSignature(op);
      if (op.kind == OpKind::kGemm) {
        EXPECT_NEAR(profile->compute_us.at(OpSignature(op)),
                    fake::kLaunchUs + op.flops * fake::kUsPerFlop, 1e-3);
      }
    }
  }
  EXPECT_EQ(profile->compute_us.size(), signatures.size());
  // The layer stack's runner is gone before the ends' is made.
  EXPECT_EQ(fake::Counters().most_live_contexts, 1);
  EXPECT_EQ(fake::Counters().live_contexts, 0);
  for (const char* end : {"embed|", "lm_head|", "loss|", "loss.grad|"})
    EXPECT_TRUE(std::any_of(signatures.begin(), signatures.end(), [&](const std::string& sig) {
      return sig.rfind(end, 0) == 0;
    })) << end;
  ASSERT_EQ(profile->contention_samples.size(), 2u);
  for (const auto& c : profile->contention_samples) {
    EXPECT_EQ(c.ctas, 16);
    EXPECT_NEAR(c.hbm_GBps, 1e6 / 100 * 1e-3, 1e-9);
    EXPECT_NEAR(c.beside_us, c.alone_us, 1e-3);
  }
  // One beat per measurement: each distinct op, the GEMM peak, HBM, the launch overheads and the
  // two contention samples.
  ASSERT_EQ(beats.size(), signatures.size() + 5);
  for (size_t i = 0; i < beats.size(); ++i) EXPECT_EQ(beats[i], i + 1);
}

// NCCL's finalize waits until no CUDA graph holds work of its communicator: the backend must
// destroy its graph before it finalizes, or `execute --comm nccl --cuda-graph` hangs at exit.

// A soak runs before anything is timed and keeps each second's TFLOP/s; GEMM shapes are timed
// as mamf-finder times them (half as many warm-up runs as timed ones, 100 timed runs for the
// short shapes, about a quarter of a second's worth for the long ones, never under 10).
TEST(CudaBackendFakeTest, CalibrationSoaksAndTimesGemmShapes) {
  const Plan plan = TinyPlan(1, OverlapScope::kNone);
  CalibrateOptions options;
  options.repeats = 1;
  options.soak_seconds = 3.5;  // three whole windows of one second
  options.gemm_shapes = {
      {1024, 1024, 1024}, {16384, 16384, 16384}, {802816, 192, 768}, {32768, 32768, 32768}};
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(
      profile->gemm_soak_tflops,
      (std::vector<double>{fake::kPeakTflops, fake::kPeakTflops * 0.99, fake::kPeakTflops * 0.98}));
  ASSERT_EQ(profile->gemm_samples.size(), 4u);
  EXPECT_EQ(profile->gemm_samples[1].m, 16384);
  EXPECT_EQ(profile->gemm_samples[2].n, 192);
  EXPECT_EQ(profile->gemm_samples[2].tflops, fake::kPeakTflops);
  // At 400 TFLOP/s 1024^3 takes 5.4 us: 100 runs; 16384^3 22 ms: 11 (a quarter of a second);
  // 802816 x 192 x 768 0.59 ms: 100; 32768^3 176 ms: the floor of 10.
  const auto& calls = fake::Counters().gemm_shapes;
  ASSERT_EQ(calls.size(), 5u);  // the four shapes, then the peak
  EXPECT_EQ(calls[0], (std::array<int64_t, 6>{1024, 1024, 1024, 50, 100, 0}));
  EXPECT_EQ(calls[1], (std::array<int64_t, 6>{16384, 16384, 16384, 5, 11, 0}));
  EXPECT_EQ(calls[2], (std::array<int64_t, 6>{802816, 192, 768, 50, 100, 0}));
  EXPECT_EQ(calls[3], (std::array<int64_t, 6>{32768, 32768, 32768, 5, 10, 0}));
  EXPECT_EQ(fake::Counters().soaks, 1);
  EXPECT_EQ(fake::Counters().fp8_soaks, 0);  // not asked for
  EXPECT_TRUE(profile->gemm_soak_fp8_tflops.empty());
}

// --fp8-gemms: the soak and the shapes again in fp8, after the 16-bit ones; a shape whose m or k
// is off the multiples of 16 stays 16-bit only, one without an fp8 kernel is skipped (and said)
// while the later ones are measured; each is told as it is measured.
TEST(CudaBackendFakeTest, CalibrationRepeatsTheGemmsInFp8) {
  const Plan plan = TinyPlan(1, OverlapScope::kNone);
  CalibrateOptions options;
  options.repeats = 1;
  options.soak_seconds = 2;
  options.fp8_gemms = true;
  options.gemm_shapes = {{1024, 1024, 1024},
                         {1000, 1024, 1024},
                         {1024, fake::kNoFp8KernelN, 1024},
                         {1024, 2145, 1024}};
  std::vector<std::string> told;
  options.progress = [&](const std::string& line) { told.push_back(line); };
  SelfCommunicator self;
  Result<HardwareProfile> profile = CalibrateCuda(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(fake::Counters().soaks, 1);
  EXPECT_EQ(fake::Counters().fp8_soaks, 1);
  EXPECT_EQ(profile->gemm_soak_fp8_tflops,
            (std::vector<double>{2 * fake::kPeakTflops, 2 * fake::kPeakTflops * 0.99}));
  EXPECT_EQ(profile->gemm_fp8_error,
            "1024x7x1024: CUDA backend: cuBLASLt has no fp8 kernel for this shape");
  // Four 16-bit, two fp8 (1000 is not 16 k; n = 7 has no fp8 kernel).
  ASSERT_EQ(profile->gemm_samples.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(profile->gemm_samples[i].fp8) << i;
  EXPECT_TRUE(profile->gemm_samples[4].fp8);
  EXPECT_EQ(profile->gemm_samples[4].m, 1024);
  EXPECT_EQ(profile->gemm_samples[5].n, 2145);
  EXPECT_EQ(profile->gemm_samples[5].tflops, 2 * fake::kPeakTflops);
  // The soaks, the shapes, the launch overheads, the model's ends.
  ASSERT_EQ(told.size(), 2u + 7u + 1u + 1u);
  EXPECT_EQ(told[1],
            "soak fp8 8192^3: 1000.0 TFLOP/s in the first second, 990.0 in the last "
            "(-1.0%)");
  EXPECT_EQ(told[7],
            "gemm 1024x7x1024 fp8: not measured (CUDA backend: cuBLASLt has no fp8 kernel for this "
            "shape)");
  EXPECT_EQ(told[8], "gemm 1024x2145x1024 fp8: 1000.0 TFLOP/s");
  EXPECT_EQ(told[9],
            "kernel launch: 2.00 us per kernel launched one by one, 0.50 from a CUDA graph");
  Result<Schedule> layers = Lower(plan);
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(layers.ok() && ends.ok());
  std::set<std::string> stack, ends_only;
  for (const Op& op : layers->ops()) stack.insert(OpSignature(op));
  for (const Op& op : ends->ops())
    if (op.kind != OpKind::kCollective && !stack.count(OpSignature(op)))
      ends_only.insert(OpSignature(op));
  EXPECT_EQ(told[10], "the model's ends (embedding, final norm, LM head, loss): " +
                          std::to_string(ends_only.size()) + " more compute ops timed");
}
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
    EXPECT_EQ(once[i], plan.row_split) << s->tensors()[grads[i]].name;  // one per row slice
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

// Calibration times ops on random operands (every tensor filled before timing) and collectives
// as nccl-tests does, in batches on the GPU.
TEST(CudaBackendFakeTest, CalibrationFillsRandomOperandsAndBatchesCollectives) {
  const Plan plan = TinyPlan(2, OverlapScope::kInterLayer);
  Result<Schedule> s = Lower(plan);
  ASSERT_TRUE(s.ok());
  TwoRankStandIn host;
  CalibrateOptions options;
  options.repeats = 3;
  Result<HardwareProfile> profile = CalibrateCuda(plan, host, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  // Each collective of the layer stack and of the model's ends (the loss's and the embedding's
  // all-reduces) once, distinct by kind and size; every tensor of both filled with random values
  // but the token ids and labels.
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(ends.ok());
  EXPECT_GE(fake::Counters().random_fills,
            static_cast<int>(s->tensors().size() + ends->tensors().size()) - 2);
  std::set<std::pair<std::string, double>> distinct;
  for (const Schedule* schedule : {&*s, &*ends})
    for (const Op& op : schedule->ops())
      if (op.kind == OpKind::kCollective)
        distinct.emplace(CollectiveKindName(op.collective), op.bytes);
  std::set<std::pair<std::string, double>> timed;
  for (const auto& c : profile->collectives) timed.emplace(c.kind, c.bytes);
  EXPECT_EQ(timed, distinct);
  EXPECT_EQ(profile->collectives.size(), distinct.size());
  for (const auto& c : profile->collectives) EXPECT_NEAR(c.us, fake::kNcclUs, 1e-3) << c.kind;
}

}  // namespace
}  // namespace domino::exec
