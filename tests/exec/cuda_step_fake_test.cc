// Whole training steps of the CUDA backend on the fake GPU of fake_cuda_ops.cc: every
// micro-batch's runner, the step's buckets and optimizer on the device, pipeline sends and
// receives, FSDP's gathers and reduce-scatters, context parallelism's ring and the passes' TP
// collectives on NCCL (fakes), counted per rank.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/communicator.h"
#include "exec/execute.h"
#include "exec/step.h"
#include "planner/iteration.h"
#include "tests/exec/fake_cuda_ops.h"
#include "tests/exec/fake_gpu_test_util.h"

namespace domino::exec {
namespace {

using fake_test::TinyKnobs;

// tiny-gpt for whole steps: tp x cp x pp x dp ranks on one node, micro-batch 4.
testing_util::PlanKnobs StepKnobs(int tp, int cp, int pp, int dp, int global_batch) {
  testing_util::PlanKnobs k = TinyKnobs();
  k.tp = tp, k.cp = cp, k.pp = pp, k.dp = dp;
  k.cluster = "dgx-h100:1:" + std::to_string(tp * cp * pp * dp);
  k.micro_batch = 4;
  k.global_batch = global_batch;
  return k;
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
TEST(CudaStepFakeTest, WholeStepsRunOnTheGpu) {
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
// micro-batch's weight gradients there, runs Adam there and writes the weights back into the one
// copy the micro-batches share.
TEST(CudaStepFakeTest, WholeStepsKeepTheirBucketsOnTheGpu) {
  Result<ExecuteResult> r = OneRankSteps(CommMode::kNccl);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->losses.size(), 2u);
  // tiny-gpt: 2 layers of 6 parameters, the embedding and the final norm, in 4 buckets.
  const int params = 2 * 6 + 2, buckets = 4, micro_batches = 2, steps = 2;
  const fake::Stats& c = fake::Counters();
  EXPECT_EQ(c.accumulates, params * micro_batches * steps);
  EXPECT_EQ(c.adam_steps, buckets * steps);
  EXPECT_EQ(c.stores, params * steps);
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
      if (!r.ok()) group.Stop();  // the others would wait for this rank forever
      counted[rank] = fake::Counters();
    });
  for (std::thread& t : threads) t.join();
  return counted;
}

// Four ranks (pp 2 x dp 2, distributed optimizer): every pipeline send is a device send matched by
// a device receive, the tied embedding's gradient crosses between the first and last stage both
// ways, and the buckets reduce-scatter and all-gather over DP on NCCL.
TEST(CudaStepFakeTest, WholeStepsMoveThePipelineAndTheBucketsOnNccl) {
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
TEST(CudaStepFakeTest, FsdpStepsGatherAndReduceEachLayerOnNccl) {
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

// Context parallelism's attention core passes its blocks through the host, as each comm type
// lays it out; the rest of the step runs on the device all the same.
TEST(CudaStepFakeTest, WholeStepsWithContextParallelismRunOnNccl) {
  for (const auto& [comm, cp] : {std::pair{CpComm::kP2p, 2}, std::pair{CpComm::kAllGather, 2},
                                 std::pair{CpComm::kA2a, 2}, std::pair{CpComm::kA2aP2p, 4}}) {
    Plan plan = testing_util::MakePlan(StepKnobs(1, cp, 1, 1, 4 * cp));
    plan.cp_comm = comm;
    ASSERT_FALSE(CheckPlanRules(plan).has_value()) << CheckPlanRules(plan)->rule;
    ExecuteOptions options;
    options.backend = BackendKind::kCuda;
    options.cuda.comm = CommMode::kNccl;
    Result<Iteration> it = LowerIteration(plan, IterationOptions{false});
    ASSERT_TRUE(it.ok()) << it.message();
    std::vector<Status> status;
    const std::vector<fake::Stats> counted = FakeRanks(plan, *it, options, &status);
    for (int rank = 0; rank < cp; ++rank) {
      ASSERT_TRUE(status[rank].ok())
          << CpCommName(comm) << " rank " << rank << ": " << status[rank].message();
      EXPECT_GT(counted[rank].nccl_collectives, 0) << rank;  // the buckets, over DP x CP
    }
  }
}

// tp 2 x pp 2 with sequence parallelism: every micro-batch's pass runs its TP collectives on the
// step's NCCL communicator (lent to its runner), and the norm gains' partial gradients are summed
// over TP in fp32 on NCCL once a step.
TEST(CudaStepFakeTest, WholeStepsRunThePassesTpCollectivesOnNccl) {
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

}  // namespace
}  // namespace domino::exec
