// torchtitan job configs for the shared plans, byte for byte (planner/export.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "planner/export.h"
#include "planner/plan.h"
#include "tests/planner/export_test_plans.h"

namespace domino {
namespace {

using export_test::ExpectExport;
using export_test::kGpt27bRowSplit;
using export_test::kLlama8b3dFullRecompute;
using export_test::kLlama8bFp8Selective;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ExportTorchtitan, Gpt27bRowSplit) {
  ExpectExport(
      kGpt27bRowSplit, ExportTarget::kTorchtitan,
      R"txt(# torchtitan job config (TOML) for gpt3-2.7b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# launch: torchrun --nnodes 1 --nproc_per_node 8 -m torchtitan.train --job.config_file THIS.toml
# differs: torchtitan's llama3 model has RMSNorm, SwiGLU, rotary positions, no biases and an untied LM head; gpt3-2.7b has LayerNorm, a GeLU MLP, learned positions, biases, tied embeddings
# differs: no llama3 flavor has this shape; register flavor "gpt3-2.7b" in torchtitan/models/llama3: dim 2560, n_layers 32, n_heads 32, n_kv_heads 32, vocab_size 50257, FFN width 10240
# differs: Domino row split 2 (μ-batches) with inter-layer overlap: torchtitan has no such option (enable_async_tensor_parallel is another method: collective-matmul decomposition under torch.compile)
# differs: no sequence parallelism: torchtitan's tensor parallelism always shards norms along the sequence (sequence parallel)
[model]
name = "llama3"
flavor = "gpt3-2.7b"

[training]
local_batch_size = 4
global_batch_size = 4
seq_len = 1024
mixed_precision_param = "bfloat16"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 1
tensor_parallel_degree = 8
pipeline_parallel_degree = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "none"
)txt");
}

TEST(ExportTorchtitan, Llama8b3dFullRecompute) {
  ExpectExport(
      kLlama8b3dFullRecompute, ExportTarget::kTorchtitan,
      R"txt(# torchtitan job config (TOML) for llama3-8b on dgx-h100:2 (2 nodes x 8 GPUs): 16 GPUs = tp 4 x pp 2 x dp 2
# launch: torchrun --nnodes 2 --nproc_per_node 8 -m torchtitan.train --job.config_file THIS.toml
# differs: the distributed optimizer: torchtitan runs FSDP, which shards parameters and gradients as well as optimizer state, over the dp x cp ranks
# differs: placement tp-pp-dp: torchtitan's device mesh puts pipeline stages outermost (tp-dp-pp)
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 8
global_batch_size = 16
seq_len = 4096
mixed_precision_param = "bfloat16"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 2
tensor_parallel_degree = 4
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 1
pipeline_parallel_layers_per_stage = 8
pipeline_parallel_first_stage_less_layers = 0
pipeline_parallel_last_stage_less_layers = 0
context_parallel_degree = 1

[activation_checkpoint]
mode = "full"
)txt");
}

TEST(ExportTorchtitan, Llama8bFp8Selective) {
  ExpectExport(
      kLlama8bFp8Selective, ExportTarget::kTorchtitan,
      R"txt(# torchtitan job config (TOML) for llama3-8b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# launch: torchrun --nnodes 1 --nproc_per_node 8 -m torchtitan.train --job.config_file THIS.toml
# differs: Domino row split 2 (μ-batches) with intra-layer overlap: torchtitan has no such option (enable_async_tensor_parallel is another method: collective-matmul decomposition under torch.compile)
# differs: no sequence parallelism: torchtitan's tensor parallelism always shards norms along the sequence (sequence parallel)
# differs: fp8_recipe delayed: torchtitan's float8 converter (torchao, recipe tensorwise) scales each tensor from its own amax, as fp8_recipe current prices it
# differs: fp8_cast norm: torchtitan casts as fp8_cast linear does (torchao's float8 linears cast their 16-bit inputs themselves)
[model]
name = "llama3"
flavor = "8B"
converters = ["quantize.linear.float8"]

[training]
local_batch_size = 2
global_batch_size = 2
seq_len = 2048
mixed_precision_param = "bfloat16"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 1
tensor_parallel_degree = 8
pipeline_parallel_degree = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
)txt");
}

TEST(ExportTorchtitan, DataParallelismIsDdpOnlyAlone) {
  // Replicated data parallelism beside tp or pp: torchtitan's DDP refuses more than one
  // dimension, so the ranks shard with FSDP, and the export says so.
  Result<Plan> plan = ParsePlan(kLlama8b3dFullRecompute, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  Plan p = *plan;
  p.distributed_optimizer = false;
  Result<std::string> beside = ExportPlan(p, ExportTarget::kTorchtitan);
  ASSERT_TRUE(beside.ok()) << beside.message();
  EXPECT_THAT(*beside, HasSubstr("data_parallel_replicate_degree = 1\n"
                                 "data_parallel_shard_degree = 2\n"));
  EXPECT_THAT(*beside, HasSubstr("# differs: data parallelism beside tensor or pipeline "
                                 "parallelism (its DDP runs only alone): torchtitan runs FSDP"));
  // Alone it is DDP, as the plan runs it.
  p.tp = 1, p.pp = 1, p.virtual_stages = 1, p.dp = 16, p.sequence_parallel = false;
  p.placement = Placement::kTpDpPp, p.global_batch = 16;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  Result<std::string> alone = ExportPlan(p, ExportTarget::kTorchtitan);
  ASSERT_TRUE(alone.ok()) << alone.message();
  EXPECT_THAT(*alone, HasSubstr("data_parallel_replicate_degree = 16\n"
                                "data_parallel_shard_degree = 1\n"));
  EXPECT_THAT(*alone, Not(HasSubstr("torchtitan runs FSDP")));
  // Context parallelism always shards over dp x cp, even with dp 1.
  p.dp = 8, p.cp = 2, p.global_batch = 8;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  Result<std::string> cp = ExportPlan(p, ExportTarget::kTorchtitan);
  ASSERT_TRUE(cp.ok()) << cp.message();
  EXPECT_THAT(*cp, HasSubstr("data_parallel_shard_degree = 8\n"));
  EXPECT_THAT(*cp, HasSubstr("# differs: context parallelism (torchtitan shards over dp x cp "
                             "whenever cp > 1): torchtitan runs FSDP"));
  // FSDP over the cp ranks alone is what the plan asks for.
  p.dp = 1, p.tp = 8, p.global_batch = 1, p.distributed_optimizer = true, p.fsdp = true;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  Result<std::string> cp_only = ExportPlan(p, ExportTarget::kTorchtitan);
  ASSERT_TRUE(cp_only.ok()) << cp_only.message();
  EXPECT_THAT(*cp_only, Not(HasSubstr("FSDP")));
  EXPECT_THAT(*cp_only, Not(HasSubstr("fsdp")));
}

}  // namespace
}  // namespace domino
