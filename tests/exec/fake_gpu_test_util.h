// What the tests of the CUDA backend on the fake GPU (fake_cuda_ops.cc) share: the tiny-gpt
// plans they run and a stand-in for rank 0's TP peer. Linking fake_gpu_test_util.cc also resets
// the fake's counters as each test starts, so that a test sees everything its code did, across
// every runner (context) it made.
#ifndef DOMINO_TESTS_EXEC_FAKE_GPU_TEST_UTIL_H_
#define DOMINO_TESTS_EXEC_FAKE_GPU_TEST_UTIL_H_

#include <algorithm>

#include "exec/communicator.h"
#include "planner/plan.h"
#include "tests/planner/test_plans.h"

namespace domino::exec::fake_test {

// tiny-gpt over a TP group of two, micro-batch 12 x seq 16.
testing_util::PlanKnobs TinyKnobs();
// TinyKnobs with `p` row slices in `scope`.
Plan TinyPlan(int p, OverlapScope scope);

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

}  // namespace domino::exec::fake_test

#endif  // DOMINO_TESTS_EXEC_FAKE_GPU_TEST_UTIL_H_
