#include "tests/exec/fake_gpu_test_util.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/exec/fake_cuda_ops.h"

namespace domino::exec::fake_test {
namespace {

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

}  // namespace

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

Plan TinyPlan(int p, OverlapScope scope) {
  testing_util::PlanKnobs k = TinyKnobs();
  k.row_split = p;
  k.scope = scope;
  return testing_util::MakePlan(k);
}

}  // namespace domino::exec::fake_test
