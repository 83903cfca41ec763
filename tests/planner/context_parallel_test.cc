// Context parallelism in the planner: the plan key and its rules, the lowering's ring attention
// and the memory model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/export.h"
#include "planner/lower.h"
#include "planner/memory_model.h"
#include "tests/planner/test_plans.h"

namespace domino {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::LowerOk;
using testing_util::MakePlan;
using testing_util::PlanKnobs;

// gpt3-2.7b (hidden 2560, 32 heads of 80, MHA): tp 2, 2 sequences of 512 tokens, on 2 or 4
// GPUs of one node.
PlanKnobs Knobs(int cp) {
  PlanKnobs k;
  k.tp = 2;
  k.cp = cp;
  k.cluster = cp == 1 ? "dgx-h100:1:2" : "dgx-h100:1:4";
  k.seq_len = 512;
  k.micro_batch = 2;
  k.global_batch = 2;
  return k;
}

std::vector<Op> OpsOf(const Schedule& s, OpFunc func, int layer = 0) {
  std::vector<Op> out;
  for (const Op& op : s.ops())
    if (op.func == func && op.tags.layer == layer) out.push_back(op);
  return out;
}

TEST(ContextParallelTest, CpOneEmitsNoRingAndKeepsTheWholeSequence) {
  const Schedule s = LowerOk(Knobs(1));
  for (const Op& op : s.ops()) {
    EXPECT_NE(op.stream, Stream::kCpComm);
    EXPECT_NE(op.group, Group::kCp);
    EXPECT_EQ(op.tags.ring_step, -1);
  }
  const std::vector<Op> attn = OpsOf(s, OpFunc::kAttn);
  ASSERT_EQ(attn.size(), 1u);
  EXPECT_EQ(attn[0].seq_len, 512);
  EXPECT_EQ(OpsOf(s, OpFunc::kQkv)[0].m, 1024);  // 2 sequences x 512 tokens
}

TEST(ContextParallelTest, CpTwoHalvesTheGemmsAndPassesKvBlocksAroundTheRing) {
  const Schedule one = LowerOk(Knobs(1));
  const Schedule two = LowerOk(Knobs(2));
  // Every GEMM works on the rank's 2 x 256 tokens: m (or, for weight gradients, k) halves.
  for (OpFunc f : {OpFunc::kQkv, OpFunc::kProj, OpFunc::kFc1, OpFunc::kFc2})
    EXPECT_EQ(OpsOf(two, f)[0].m * 2, OpsOf(one, f)[0].m) << OpFuncName(f);
  EXPECT_EQ(OpsOf(two, OpFunc::kQkv)[0].m, 512);
  EXPECT_EQ(OpsOf(two, OpFunc::kFc2GradWeight)[0].k, 512);
  // Forward: two ring steps, each a causal block of the 256 local tokens; one KV transfer of
  // K and V of 16 heads x 80 x 512 tokens in bf16 = 2 x 16 x 80 x 512 x 2 bytes, under step 0.
  const std::vector<Op> attn = OpsOf(two, OpFunc::kAttn);
  ASSERT_EQ(attn.size(), 2u);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(attn[j].seq_len, 256);
    EXPECT_EQ(attn[j].tags.ring_step, j);
  }
  constexpr double kKvBlock = 2.0 * 16 * 80 * 512 * 2;  // 2,621,440 bytes
  std::vector<Op> transfers;
  for (const Op& op : two.ops())
    if (op.func == OpFunc::kCpSendRecv && op.tags.layer == 0) transfers.push_back(op);
  // Forward one (KV); backward two: KV for step 1, then the accumulated dKV back to its owner.
  ASSERT_EQ(transfers.size(), 3u);
  for (const Op& op : transfers) {
    EXPECT_EQ(op.kind, OpKind::kSendRecv);
    EXPECT_EQ(op.stream, Stream::kCpComm);
    EXPECT_EQ(op.group, Group::kCp);
    EXPECT_DOUBLE_EQ(op.bytes, kKvBlock);
  }
  EXPECT_EQ(transfers[0].tags.phase, Phase::kForward);
  EXPECT_EQ(transfers[1].tags.phase, Phase::kBackward);
  // Per step the attention does a quarter of the whole sequence's work: cp = 2 steps of
  // (s/2)^2 against s^2, so the ring does half of it, the rank's share.
  EXPECT_DOUBLE_EQ(attn[0].flops * 4, OpsOf(one, OpFunc::kAttn)[0].flops);
}

TEST(ContextParallelTest, RingStepsWaitForTheirKvBlock) {
  PlanKnobs k = Knobs(4);
  k.cluster = "dgx-h100:1";
  const Schedule s = LowerOk(k);
  // Forward of layer 0: transfer j runs beside block j, block j+1 waits for it.
  std::vector<int32_t> blocks, transfers;
  for (int32_t i = 0; i < static_cast<int32_t>(s.size()); ++i) {
    const Op& op = s.op(i);
    if (op.tags.layer != 0 || op.tags.phase != Phase::kForward) continue;
    if (op.func == OpFunc::kAttn) blocks.push_back(i);
    if (op.func == OpFunc::kCpSendRecv) transfers.push_back(i);
  }
  ASSERT_EQ(blocks.size(), 4u);
  ASSERT_EQ(transfers.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_LT(transfers[j], blocks[j]);  // issued first, so it runs under the block
    auto deps = s.deps(s.op(blocks[j + 1]));
    EXPECT_NE(std::find(deps.begin(), deps.end(), transfers[j]), deps.end()) << j;
  }
}

TEST(ContextParallelTest, ActivationsHalveWeightsDoNot) {
  PlanKnobs k = Knobs(1);
  k.dp = 2;
  k.cluster = "dgx-h100:1:4";
  k.global_batch = 4;
  const MemoryEstimate dp2 = EstimateMemory(MakePlan(k));
  const MemoryEstimate cp2 = EstimateMemory(MakePlan(Knobs(2)));
  EXPECT_DOUBLE_EQ(cp2.activation_bytes * 2, dp2.activation_bytes);
  EXPECT_DOUBLE_EQ(cp2.weights_and_optimizer_bytes, dp2.weights_and_optimizer_bytes);
  // The distributed optimizer shards over DP x CP: 6 + 12/2 bytes per parameter either way.
  k.distributed_optimizer = true;
  PlanKnobs c = Knobs(2);
  c.distributed_optimizer = true;
  EXPECT_DOUBLE_EQ(EstimateMemory(MakePlan(c)).weights_and_optimizer_bytes,
                   EstimateMemory(MakePlan(k)).weights_and_optimizer_bytes);
}

constexpr char kPlan[] =
    "model: gpt3-2.7b\n"
    "cluster: dgx-h100:1\n"
    "training: {seq_len: 512, micro_batch: 2, global_batch: 2}\n"
    "parallel: {tp: 2, cp: 4, pp: 1, dp: 1}\n";

TEST(ContextParallelTest, PlanYamlRoundTripsCp) {
  Result<Plan> plan = ParsePlan(kPlan, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_EQ(plan->cp, 4);
  const std::string yaml = PlanToYaml(*plan);
  EXPECT_THAT(yaml, HasSubstr("parallel: {tp: 2, cp: 4, pp: 1,"));
  Result<Plan> back = ParsePlan(yaml, "back.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->cp, 4);
  EXPECT_EQ(PlanToYaml(*back), yaml);
  // Without context parallelism the key is not written: such plans keep their YAML.
  back->cp = 1, back->tp = 8;
  EXPECT_THAT(PlanToYaml(*back), HasSubstr("parallel: {tp: 8, pp: 1,"));
  // The ring, the default, is written only when the plan names it; another comm type always.
  std::string gathered = kPlan;
  gathered.replace(gathered.find("cp: 4"), 5, "cp: 4, cp_comm: all_gather");
  Result<Plan> comm = ParsePlan(gathered, "plan.yaml");
  ASSERT_TRUE(comm.ok()) << comm.message();
  EXPECT_EQ(comm->cp_communication(), CpComm::kAllGather);
  EXPECT_THAT(PlanToYaml(*comm), HasSubstr("parallel: {tp: 2, cp: 4, cp_comm: all_gather, pp: 1,"));
  Result<Plan> again = ParsePlan(PlanToYaml(*comm), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(PlanToYaml(*again), PlanToYaml(*comm));
  // a2a+p2p's groups are written though not named: 8 / tp 2 = 4 GPUs beside each TP pair, 2 of
  // which divide cp 4 leaving a ring of 2.
  std::string h = kPlan;
  h.replace(h.find("cp: 4"), 5, "cp: 4, cp_comm: a2a+p2p");
  Result<Plan> hierarchical = ParsePlan(h, "plan.yaml");
  ASSERT_TRUE(hierarchical.ok()) << hierarchical.message();
  EXPECT_THAT(PlanToYaml(*hierarchical), HasSubstr("cp: 4, cp_comm: a2a+p2p, cp_a2a: 2, pp: 1,"));
  // A windowed model's default, a2a, is written though not named.
  std::string windowed = kPlan;
  windowed.replace(windowed.find("model: gpt3-2.7b"), 16,
                   "model: {name: w, layers: 4, hidden: 256, heads: 8, ffn: 1024, vocab: 1000, "
                   "seq_len: 512, activation: gelu, norm: layernorm, window: 64}");
  Result<Plan> window = ParsePlan(windowed, "plan.yaml");
  ASSERT_TRUE(window.ok()) << window.message();
  EXPECT_THAT(PlanToYaml(*window), HasSubstr("cp: 4, cp_comm: a2a,"));  // cp divides 4 heads a rank
  // A misspelt type names the key and the choices.
  std::string typo = kPlan;
  typo.replace(typo.find("cp: 4"), 5, "cp: 4, cp_comm: ring");
  Result<Plan> bad = ParsePlan(typo, "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("plan.yaml:4:"));
  EXPECT_THAT(bad.message(), HasSubstr("cp_comm"));
  EXPECT_THAT(bad.message(), HasSubstr("p2p"));
}

TEST(ContextParallelTest, BadCpNamesTheKeyAndTheRule) {
  std::string text = kPlan;
  text.replace(text.find("seq_len: 512"), 12, "seq_len: 500");
  Result<Plan> odd = ParsePlan(text, "plan.yaml");
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(odd.message(), HasSubstr("plan.yaml:4:"));
  EXPECT_THAT(odd.message(), HasSubstr("cp: context parallelism cuts each sequence into 2*cp = 8 "
                                       "chunks (two per rank, for causal load balance): 2*cp "
                                       "must divide seq_len (500)"));
  std::string count = kPlan;
  count.replace(count.find("cp: 4"), 5, "cp: 2");
  Result<Plan> gpus = ParsePlan(count, "plan.yaml");
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(gpus.message(),
              HasSubstr("tp*cp*pp*dp = 2*2*1*1 = 4 must equal the cluster's 8 GPUs"));
  std::string zero = kPlan;
  zero.replace(zero.find("cp: 4"), 5, "cp: 0");
  Result<Plan> bad = ParsePlan(zero, "plan.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("cp: must be a positive integer, got 0"));
}

TEST(ContextParallelTest, SequenceParallelismSplitsTheLocalSequence) {
  PlanKnobs k = Knobs(2);
  k.seq_len = 4;  // 2 local tokens per sequence: tp 2 divides them
  k.sequence_parallel = true;
  EXPECT_FALSE(CheckPlanRules(MakePlan(k)));
  Plan plan = MakePlan(k);
  plan.tp = 4, plan.cp = 2, plan.cluster.nodes = 1;
  plan.cluster.gpus_per_node = 8;
  std::optional<PlanRuleFailure> failure = CheckPlanRules(plan);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->key, "parallel.sequence_parallel");
  EXPECT_THAT(failure->rule, HasSubstr("(seq_len/cp = 2)"));
}

TEST(ContextParallelTest, ExportNamesEachFrameworksCpSetting) {
  Result<Plan> plan = ParsePlan(kPlan, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  Result<std::string> megatron = ExportPlan(*plan, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok());
  EXPECT_THAT(*megatron, HasSubstr("--context-parallel-size 4"));
  EXPECT_THAT(*megatron, HasSubstr("--cp-comm-type p2p"));
  EXPECT_THAT(*megatron, HasSubstr("8 GPUs / (tp 2 x cp 4 x pp 1)"));
  Result<std::string> nemo = ExportPlan(*plan, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok());
  EXPECT_THAT(*nemo, HasSubstr("  context_parallel_size: 4\n"));
  // Without a sliding window NeMo keeps Megatron-Core's default, the p2p ring.
  EXPECT_THAT(*nemo, Not(HasSubstr("cp_comm_type")));
  Result<std::string> titan = ExportPlan(*plan, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok());
  EXPECT_THAT(*titan, HasSubstr("context_parallel_degree = 4\n"));
  Result<std::string> deepspeed = ExportPlan(*plan, ExportTarget::kDeepSpeed);
  ASSERT_FALSE(deepspeed.ok());
  EXPECT_THAT(deepspeed.message(), HasSubstr("cp 4 (it has no context parallelism)"));
  EXPECT_EQ(deepspeed.message().find('\n'), std::string::npos);
  // The plan's comm type; a2a+p2p with its hierarchical sizes, which NeMo lacks.
  std::string gathered = kPlan;
  gathered.replace(gathered.find("cp: 4"), 5, "cp: 4, cp_comm: all_gather");
  Result<Plan> ag = ParsePlan(gathered, "plan.yaml");
  ASSERT_TRUE(ag.ok()) << ag.message();
  EXPECT_THAT(*ExportPlan(*ag, ExportTarget::kMegatron),
              HasSubstr("--cp-comm-type all_gather \\\n"));
  EXPECT_THAT(*ExportPlan(*ag, ExportTarget::kNemo), HasSubstr("  cp_comm_type: all_gather\n"));
  EXPECT_THAT(*ExportPlan(*ag, ExportTarget::kTorchtitan),
              HasSubstr("# differs: cp_comm all_gather: torchtitan runs context parallelism as "
                        "PyTorch's ring attention"));
  std::string hierarchical = kPlan;
  hierarchical.replace(hierarchical.find("cp: 4"), 5, "cp: 4, cp_comm: a2a+p2p");
  Result<Plan> h = ParsePlan(hierarchical, "plan.yaml");
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_THAT(*ExportPlan(*h, ExportTarget::kMegatron),
              HasSubstr("--cp-comm-type a2a+p2p \\\n--hierarchical-context-parallel-sizes 2 2 "
                        "\\\n"));
  const std::string h_nemo = *ExportPlan(*h, ExportTarget::kNemo);
  EXPECT_THAT(h_nemo, HasSubstr("# differs: cp_comm a2a+p2p (a2a groups of 2): NeMo builds no "
                                "hierarchical context-parallel groups"));
  EXPECT_THAT(h_nemo, Not(HasSubstr("\n  cp_comm_type:")));  // the ring, NeMo's default
}

}  // namespace
}  // namespace domino
