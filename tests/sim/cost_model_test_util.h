// Ops the cost model's tests price (cost_model_test.cc, cost_model_comm_test.cc).
#ifndef DOMINO_TESTS_SIM_COST_MODEL_TEST_UTIL_H_
#define DOMINO_TESTS_SIM_COST_MODEL_TEST_UTIL_H_

#include <cstdint>

#include "planner/schedule.h"

namespace domino::sim::cost_model_test {

inline constexpr double kMiB = 1024.0 * 1024.0;

// A 16-bit GEMM op C[m, n] = A[m, k] B[k, n].
inline Op Gemm(int64_t m, int64_t n, int64_t k) {
  Op op;
  op.kind = OpKind::kGemm;
  op.m = m, op.n = n, op.k = k;
  op.flops = 2.0 * m * n * k;
  op.bytes = 2.0 * (m * k + k * n + m * n);
  return op;
}

// A TP collective over `bytes` (nccl-tests size) on the TP stream.
inline Op TpCollective(CollectiveOp kind, double bytes) {
  Op op;
  op.kind = OpKind::kCollective;
  op.stream = Stream::kTpComm;
  op.collective = kind;
  op.group = Group::kTp;
  op.bytes = bytes;
  return op;
}

}  // namespace domino::sim::cost_model_test

#endif  // DOMINO_TESTS_SIM_COST_MODEL_TEST_UTIL_H_
