#include "exec/calibrate.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "exec/communicator.h"
#include "exec/interpreter.h"
#include "planner/lower.h"
#include "tests/planner/test_plans.h"

namespace domino::exec {
namespace {

Plan TinyGpt() {
  testing_util::PlanKnobs k;
  k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/tiny-gpt.yaml";
  k.cluster = "dgx-h100:1:2";
  k.tp = 2;
  k.seq_len = 16;
  k.micro_batch = 4;
  k.global_batch = 4;
  k.row_split = 2;
  k.scope = OverlapScope::kInterLayer;
  return testing_util::MakePlan(k);
}

// The CPU calibration times every distinct compute op of the layer stack and of the model's ends
// (embedding, final norm, LM head, loss: one layer lowered with both), each once; one rank times
// no collective.
TEST(CalibrateCpuTest, TimesTheLayerStackAndTheModelsEnds) {
  const Plan plan = TinyGpt();
  Result<Schedule> layers = Lower(plan);
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(layers.ok() && ends.ok());
  std::set<std::string> stack, all;
  for (const Op& op : layers->ops())
    if (op.kind != OpKind::kCollective) stack.insert(OpSignature(op));
  all = stack;
  for (const Op& op : ends->ops())
    if (op.kind != OpKind::kCollective) all.insert(OpSignature(op));
  ASSERT_GT(all.size(), stack.size());  // the ends have ops the layer stack lacks

  SelfCommunicator self;
  CalibrateOptions options;
  options.repeats = 1;
  // The watchdog's beats: 1, 2, 3, ..., one per op run (a warm-up pass, then one timed pass).
  std::vector<size_t> beats;
  options.measured = [&beats](size_t n) { beats.push_back(n); };
  Result<HardwareProfile> profile = CalibrateCpu(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  EXPECT_EQ(profile->backend, "cpu");
  EXPECT_FALSE(profile->contention);
  EXPECT_TRUE(profile->collectives.empty());
  std::set<std::string> timed;
  for (const auto& [signature, us] : profile->compute_us) {
    timed.insert(signature);
    EXPECT_GT(us, 0) << signature;
  }
  EXPECT_EQ(timed, all);
  for (const char* end : {"embed|", "embed.grad|", "lm_head|", "loss|", "loss.grad|"}) {
    bool found = false;
    for (const std::string& signature : timed) found |= signature.rfind(end, 0) == 0;
    EXPECT_TRUE(found) << end;
  }
  ASSERT_EQ(beats.size(), 2 * all.size());
  for (size_t i = 0; i < beats.size(); ++i) EXPECT_EQ(beats[i], i + 1);
}

// A Llama-shaped plan on the megatron-core stack, fp8 with context parallelism, holds ops the
// executor runs nothing for (amax updates, the ring's merge kernels, the copies around the
// attention; the amax all-reduces are collectives, which one rank does not time anyway) and the
// ring's transfers: the calibration times every other compute op and none of those.
TEST(CalibrateCpuTest, LeavesOutWhatTheExecutorDoesNotRun) {
  testing_util::PlanKnobs k;
  k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/tiny-llama.yaml";
  k.cluster = "dgx-h100:1:2";
  k.tp = 1;
  k.cp = 2;
  k.seq_len = 32;
  k.micro_batch = 2;
  k.global_batch = 2;
  Plan plan = testing_util::MakePlan(k);
  plan.precision = Dtype::kFp8;
  ASSERT_EQ(plan.stack.name, "megatron-core");
  Result<Schedule> layers = Lower(plan);
  Result<Schedule> ends =
      LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true});
  ASSERT_TRUE(layers.ok() && ends.ok());
  std::set<std::string> expected;
  std::set<OpFunc> left_out;
  for (const Schedule* s : {&*layers, &*ends}) {
    for (const Op& op : s->ops()) {
      if (op.kind == OpKind::kCollective) continue;
      if (RunsNothing(op) || op.kind == OpKind::kSendRecv) {
        left_out.insert(op.func);
      } else {
        expected.insert(OpSignature(op));
      }
    }
  }
  EXPECT_EQ(left_out, (std::set{OpFunc::kCpSendRecv, OpFunc::kCpMerge, OpFunc::kAttnCopy,
                                OpFunc::kAttnCopyGrad, OpFunc::kAmaxUpdate}));
  SelfCommunicator self;
  CalibrateOptions options;
  options.repeats = 1;
  Result<HardwareProfile> profile = CalibrateCpu(plan, self, options);
  ASSERT_TRUE(profile.ok()) << profile.message();
  std::set<std::string> timed;
  for (const auto& [signature, us] : profile->compute_us) timed.insert(signature);
  EXPECT_EQ(timed, expected);
}

}  // namespace
}  // namespace domino::exec
