#include "planner/export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "planner/plan.h"

namespace domino {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// gpt3-2.7b on one DGX H100, tp 8, Domino row split 2 inter-layer: the paper's setting.
constexpr const char* kGpt27bRowSplit = R"yaml(model: gpt3-2.7b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 1024, micro_batch: 4, global_batch: 4}
parallel: {tp: 8, pp: 1, dp: 1}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";

// llama3-8b on two nodes: tp 4 x pp 2 (interleaved, 2 virtual stages) x dp 2, SP, full recompute,
// distributed optimizer, tp-pp-dp placement.
constexpr const char* kLlama8b3dFullRecompute = R"yaml(model: llama3-8b
cluster: dgx-h100:2
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 16}
parallel: {tp: 4, pp: 2, dp: 2, sequence_parallel: true, virtual_stages: 2, placement: tp-pp-dp}
overlap: {row_split: 1, col_split: 1, scope: none}
memory: {recompute: full, distributed_optimizer: true}
)yaml";

// llama3-8b in fp8 with selective recompute, row split 2 intra-layer.
constexpr const char* kLlama8bFp8Selective = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: fp8
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: intra-layer}
memory: {recompute: selective}
)yaml";

// llama3-8b, tp 8, row split 2 inter-layer: runnable by DeepSpeed-Domino, with model differences.
constexpr const char* kLlama8bRowSplit = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";

// Exports a plan given as YAML; fails the test when the plan does not load.
Result<std::string> Export(const char* yaml, ExportTarget target) {
  Result<Plan> plan = ParsePlan(yaml, "plan.yaml");
  EXPECT_TRUE(plan.ok()) << plan.message();
  if (!plan.ok()) return plan.error();
  return ExportPlan(*plan, target);
}

void ExpectExport(const char* yaml, ExportTarget target, const std::string& expected) {
  Result<std::string> text = Export(yaml, target);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(*text, expected);
}

TEST(ExportMegatron, Gpt27bRowSplit) {
  ExpectExport(
      kGpt27bRowSplit, ExportTarget::kMegatron,
      R"txt(# Megatron-LM / Megatron-Core arguments (pretrain_gpt.py) for gpt3-2.7b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# data-parallel size 1 follows from the world size: 8 GPUs / (tp 8 x pp 1)
# vocabulary 50257: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by --make-vocab-size-divisible-by
# differs: Domino row split 2 (μ-batches) with inter-layer overlap: Megatron-LM has no such option; it runs each micro-batch whole and overlaps only the backward input-gradient all-reduce with the weight-gradient GEMM (--tp-comm-overlap is another method: Transformer Engine's collective-matmul decomposition)
--num-layers 32 \
--hidden-size 2560 \
--ffn-hidden-size 10240 \
--num-attention-heads 32 \
--seq-length 1024 \
--max-position-embeddings 2048 \
--position-embedding-type learned_absolute \
--tensor-model-parallel-size 8 \
--pipeline-model-parallel-size 1 \
--micro-batch-size 4 \
--global-batch-size 4 \
--bf16
)txt");
}

TEST(ExportMegatron, Llama8b3dFullRecompute) {
  ExpectExport(
      kLlama8b3dFullRecompute, ExportTarget::kMegatron,
      R"txt(# Megatron-LM / Megatron-Core arguments (pretrain_gpt.py) for llama3-8b on dgx-h100:2 (2 nodes x 8 GPUs): 16 GPUs = tp 4 x pp 2 x dp 2
# data-parallel size 2 follows from the world size: 16 GPUs / (tp 4 x pp 2)
# vocabulary 128256: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by --make-vocab-size-divisible-by
--num-layers 32 \
--hidden-size 4096 \
--ffn-hidden-size 14336 \
--num-attention-heads 32 \
--group-query-attention \
--num-query-groups 8 \
--seq-length 4096 \
--max-position-embeddings 8192 \
--position-embedding-type rope \
--swiglu \
--normalization RMSNorm \
--disable-bias-linear \
--untie-embeddings-and-output-weights \
--tensor-model-parallel-size 4 \
--pipeline-model-parallel-size 2 \
--num-layers-per-virtual-pipeline-stage 8 \
--use-tp-pp-dp-mapping \
--sequence-parallel \
--micro-batch-size 1 \
--global-batch-size 16 \
--recompute-granularity full \
--recompute-method uniform \
--recompute-num-layers 1 \
--use-distributed-optimizer \
--bf16
)txt");
}

TEST(ExportMegatron, Llama8bFp8Selective) {
  ExpectExport(
      kLlama8bFp8Selective, ExportTarget::kMegatron,
      R"txt(# Megatron-LM / Megatron-Core arguments (pretrain_gpt.py) for llama3-8b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# data-parallel size 1 follows from the world size: 8 GPUs / (tp 8 x pp 1)
# vocabulary 128256: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by --make-vocab-size-divisible-by
# differs: Domino row split 2 (μ-batches) with intra-layer overlap: Megatron-LM has no such option; it runs each micro-batch whole and overlaps only the backward input-gradient all-reduce with the weight-gradient GEMM (--tp-comm-overlap is another method: Transformer Engine's collective-matmul decomposition)
--num-layers 32 \
--hidden-size 4096 \
--ffn-hidden-size 14336 \
--num-attention-heads 32 \
--group-query-attention \
--num-query-groups 8 \
--seq-length 2048 \
--max-position-embeddings 8192 \
--position-embedding-type rope \
--swiglu \
--normalization RMSNorm \
--disable-bias-linear \
--untie-embeddings-and-output-weights \
--tensor-model-parallel-size 8 \
--pipeline-model-parallel-size 1 \
--micro-batch-size 2 \
--global-batch-size 2 \
--recompute-granularity selective \
--bf16 \
--fp8-format hybrid
)txt");
}

TEST(ExportNemo, Gpt27bRowSplit) {
  ExpectExport(
      kGpt27bRowSplit, ExportTarget::kNemo,
      R"txt(# NeMo overrides of megatron_gpt_config.yaml for gpt3-2.7b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# differs: Domino row split 2 (μ-batches) with inter-layer overlap: NeMo has no such key; Megatron-Core runs each micro-batch whole (model.ub_tp_comm_overlap is another method: collective-matmul decomposition)
trainer:
  devices: 8
  num_nodes: 1
  precision: bf16-mixed
model:
  micro_batch_size: 4
  global_batch_size: 4
  tensor_model_parallel_size: 8
  pipeline_model_parallel_size: 1
  virtual_pipeline_model_parallel_size: null
  sequence_parallel: false
  encoder_seq_length: 1024
  max_position_embeddings: 2048
  num_layers: 32
  hidden_size: 2560
  ffn_hidden_size: 10240
  num_attention_heads: 32
  num_query_groups: null
  activation: gelu
  normalization: layernorm
  bias: true
  position_embedding_type: learned_absolute
  share_embeddings_and_output_weights: true
  activations_checkpoint_granularity: null
  activations_checkpoint_method: null
  activations_checkpoint_num_layers: null
  optim:
    name: fused_adam
)txt");
}

TEST(ExportNemo, Llama8b3dFullRecompute) {
  ExpectExport(
      kLlama8b3dFullRecompute, ExportTarget::kNemo,
      R"txt(# NeMo overrides of megatron_gpt_config.yaml for llama3-8b on dgx-h100:2 (2 nodes x 8 GPUs): 16 GPUs = tp 4 x pp 2 x dp 2
trainer:
  devices: 8
  num_nodes: 2
  precision: bf16-mixed
model:
  micro_batch_size: 1
  global_batch_size: 16
  tensor_model_parallel_size: 4
  pipeline_model_parallel_size: 2
  virtual_pipeline_model_parallel_size: 2
  use_tp_pp_dp_mapping: true
  sequence_parallel: true
  encoder_seq_length: 4096
  max_position_embeddings: 8192
  num_layers: 32
  hidden_size: 4096
  ffn_hidden_size: 14336
  num_attention_heads: 32
  num_query_groups: 8
  activation: swiglu
  normalization: rmsnorm
  bias: false
  position_embedding_type: rope
  share_embeddings_and_output_weights: false
  activations_checkpoint_granularity: full
  activations_checkpoint_method: uniform
  activations_checkpoint_num_layers: 1
  optim:
    name: distributed_fused_adam
    grad_sync_dtype: fp32
)txt");
}

TEST(ExportNemo, Llama8bFp8Selective) {
  ExpectExport(
      kLlama8bFp8Selective, ExportTarget::kNemo,
      R"txt(# NeMo overrides of megatron_gpt_config.yaml for llama3-8b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# differs: Domino row split 2 (μ-batches) with intra-layer overlap: NeMo has no such key; Megatron-Core runs each micro-batch whole (model.ub_tp_comm_overlap is another method: collective-matmul decomposition)
trainer:
  devices: 8
  num_nodes: 1
  precision: bf16-mixed
model:
  micro_batch_size: 2
  global_batch_size: 2
  tensor_model_parallel_size: 8
  pipeline_model_parallel_size: 1
  virtual_pipeline_model_parallel_size: null
  sequence_parallel: false
  encoder_seq_length: 2048
  max_position_embeddings: 8192
  num_layers: 32
  hidden_size: 4096
  ffn_hidden_size: 14336
  num_attention_heads: 32
  num_query_groups: 8
  activation: swiglu
  normalization: rmsnorm
  bias: false
  position_embedding_type: rope
  share_embeddings_and_output_weights: false
  activations_checkpoint_granularity: selective
  activations_checkpoint_method: null
  activations_checkpoint_num_layers: null
  transformer_engine: true
  fp8: true
  fp8_hybrid: true
  optim:
    name: fused_adam
)txt");
}

TEST(ExportDeepSpeed, Gpt27bRowSplit) {
  ExpectExport(
      kGpt27bRowSplit, ExportTarget::kDeepSpeed,
      R"txt(# DeepSpeed config and DeepSpeed-Domino arguments (DeepSpeedExamples/training/DeepSpeed-Domino) for gpt3-2.7b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# launch: deepspeed --num_gpus 8 pretrain_gpt.py ARGUMENTS; DeepSpeed-Domino takes batch and precision from its arguments, the DeepSpeed config states them for a DeepSpeed engine
# --- ds_config.json
{
  "train_batch_size": 4,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 0}
}
# --- DeepSpeed-Domino arguments
--num-layers 32 \
--hidden-size 2560 \
--ffn-hidden-size 10240 \
--num-attention-heads 32 \
--seq-length 1024 \
--max-position-embeddings 2048 \
--position-embedding-type learned_absolute \
--tensor-model-parallel-size 8 \
--micro-batch-size 4 \
--global-batch-size 4 \
--bf16
)txt");
}

TEST(ExportDeepSpeed, Llama8bRowSplit) {
  ExpectExport(
      kLlama8bRowSplit, ExportTarget::kDeepSpeed,
      R"txt(# DeepSpeed config and DeepSpeed-Domino arguments (DeepSpeedExamples/training/DeepSpeed-Domino) for llama3-8b on dgx-h100:1 (1 node x 8 GPUs): 8 GPUs = tp 8 x pp 1 x dp 1
# launch: deepspeed --num_gpus 8 pretrain_llama.py ARGUMENTS; DeepSpeed-Domino takes batch and precision from its arguments, the DeepSpeed config states them for a DeepSpeed engine
# differs: 8 key/value heads: DeepSpeed-Domino has no grouped-query attention and runs 32 (multi-head)
# differs: ffn 14336: with --swiglu DeepSpeed-Domino sets the MLP width to int(8h/3/64)*64 = 10880, whatever --ffn-hidden-size says
# differs: no biases: DeepSpeed-Domino puts a bias on every linear layer
# differs: untied embeddings: DeepSpeed-Domino ties the LM head to the token embedding
# --- ds_config.json
{
  "train_batch_size": 2,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 0}
}
# --- DeepSpeed-Domino arguments
--num-layers 32 \
--hidden-size 4096 \
--ffn-hidden-size 14336 \
--num-attention-heads 32 \
--seq-length 2048 \
--max-position-embeddings 8192 \
--position-embedding-type rope \
--swiglu \
--normalization RMSNorm \
--tensor-model-parallel-size 8 \
--micro-batch-size 2 \
--global-batch-size 2 \
--bf16
)txt");
}

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
# differs: distributed optimizer: torchtitan shards with FSDP, which shards parameters and gradients as well as optimizer state
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
[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]

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

TEST(ExportDeepSpeed, RefusesLlama8b3dFullRecompute) {
  Result<std::string> text = Export(kLlama8b3dFullRecompute, ExportTarget::kDeepSpeed);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(
      text.message(),
      "DeepSpeed-Domino cannot run this plan: row split 1 (it always cuts a micro-batch into "
      "exactly 2 μ-batches); pp 2 (it has no pipeline); sequence parallelism (it has none); dp 2 "
      "(its data-parallel size is fixed at 1); 8 micro-batches per iteration (it runs one: global "
      "batch = micro-batch); recompute full (it has none); distributed optimizer (it has none)");
}

TEST(ExportDeepSpeed, RefusesLlama8bFp8Selective) {
  Result<std::string> text = Export(kLlama8bFp8Selective, ExportTarget::kDeepSpeed);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.message(),
            "DeepSpeed-Domino cannot run this plan: recompute selective (it has none); fp8 (it "
            "runs fp16, bf16 or fp32)");
}

TEST(Export, EveryTargetIsNamedAndDeterministic) {
  ASSERT_EQ(ExportTargetNames().size(), 4u);
  for (const auto& [name, target] : ExportTargetNames()) {
    Result<std::string> first = Export(kGpt27bRowSplit, target);
    ASSERT_TRUE(first.ok()) << name << ": " << first.message();
    EXPECT_EQ(first->substr(0, 2), "# ") << name;
    EXPECT_EQ(*first, *Export(kGpt27bRowSplit, target)) << name;
  }
}

TEST(Export, BaselinePlanDiffersInNothingForMegatron) {
  std::string yaml = kGpt27bRowSplit;
  yaml.replace(yaml.find("row_split: 2"), 12, "row_split: 1");
  yaml.replace(yaml.find("inter-layer"), 11, "none");
  Result<std::string> text = Export(yaml.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_THAT(*text, Not(HasSubstr("# differs")));
}

// llama3-8b, tp 8 with sequence parallelism and decomposed collective-matmul overlap: Transformer
// Engine's --tp-comm-overlap and torchtitan's async TP.
constexpr const char* kLlama8bDecomposed = R"yaml(model: llama3-8b
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 1}
parallel: {tp: 8, sequence_parallel: true}
overlap: {method: decomposed, chunks: 4}
)yaml";

TEST(Export, DecomposedOverlapMapsToEachFrameworksCommOverlap) {
  Result<std::string> megatron = Export(kLlama8bDecomposed, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--tp-comm-overlap"));
  // 4 chunks where TE cuts into tp = 8, and TE's ring order: both said.
  EXPECT_THAT(*megatron, HasSubstr("# differs: decomposed overlap in 4 chunks: Transformer Engine "
                                   "cuts each collective into tp (8) chunks"));
  EXPECT_THAT(*megatron, HasSubstr("ring order"));
  Result<std::string> nemo = Export(kLlama8bDecomposed, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  ub_tp_comm_overlap: true\n"));
  Result<std::string> titan = Export(kLlama8bDecomposed, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("enable_async_tensor_parallel = true"));
  Result<std::string> deepspeed = Export(kLlama8bDecomposed, ExportTarget::kDeepSpeed);
  ASSERT_FALSE(deepspeed.ok());
  EXPECT_THAT(deepspeed.message(), HasSubstr("decomposed collective-matmul overlap (it has none)"));
  // A decomposed plan is no Megatron baseline.
  Result<Plan> plan = ParsePlan(kLlama8bDecomposed, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_FALSE(plan->is_baseline());
}

// Llama 3.1 405B on pp 8 x vp 8 as Megatron-Bridge splits it: the embedding and the loss count
// as a layer each (128 units, 2 per chunk).
constexpr const char* kLlama405bEnds = R"yaml(model: llama3-405b
cluster: dgx-h100:64
precision: bf16
training: {seq_len: 8192, micro_batch: 1, global_batch: 256}
parallel: {tp: 8, cp: 2, pp: 8, dp: 4, sequence_parallel: true, virtual_stages: 8, pipeline_split: ends}
memory: {distributed_optimizer: true}
)yaml";

// The same model counting layers only, on pp 16 without interleaving: 7, 8 x 14, 7 layers.
std::string Llama405bUneven() {
  std::string yaml = kLlama405bEnds;
  yaml.replace(yaml.find(", virtual_stages: 8, pipeline_split: ends"), 41, "");
  yaml.replace(yaml.find("pp: 8, dp: 4"), 12, "pp: 16, dp: 2");
  return yaml;
}

TEST(Export, APipelineSplitThatCountsTheEndsMapsToEachFramework) {
  Result<std::string> megatron = Export(kLlama405bEnds, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--num-layers-per-virtual-pipeline-stage 2 \\\n"));
  EXPECT_THAT(*megatron, HasSubstr("--account-for-embedding-in-pipeline-split \\\n"));
  EXPECT_THAT(*megatron, HasSubstr("--account-for-loss-in-pipeline-split \\\n"));
  Result<std::string> titan = Export(kLlama405bEnds, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("pipeline_parallel_layers_per_stage = 2\n"
                                "pipeline_parallel_first_stage_less_layers = 1\n"
                                "pipeline_parallel_last_stage_less_layers = 1\n"));
  Result<std::string> nemo = Export(kLlama405bEnds, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: pipeline_split ends: megatron_gpt_config.yaml has no "
                               "key for it"));
  // Counting layers only, uneven stages: torchtitan puts the remainder elsewhere, and says so.
  const std::string uneven = Llama405bUneven();
  Result<std::string> titan_uneven = Export(uneven.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan_uneven.ok()) << titan_uneven.message();
  EXPECT_THAT(*titan_uneven, HasSubstr("# differs: uneven stages: torchtitan gives the 14 layers "
                                       "left over by pp 16 to the first stages"));
  EXPECT_THAT(*titan_uneven, HasSubstr("pipeline_parallel_first_stage_less_layers = 0\n"));
}

TEST(Export, TheGradientTypeIsSaidWhereTheFrameworkWouldPickAnother) {
  // llama3-8b 3D with bf16 gradients (memory.grad_reduce: param): Megatron reduces bf16 gradients
  // in fp32 unless --grad-reduce-in-bf16, NeMo's distributed optimizer takes grad_sync_dtype,
  // torchtitan reduces in float32 unless told; the fp32 default says nothing to Megatron.
  std::string bf16(kLlama8b3dFullRecompute);
  bf16.replace(bf16.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, grad_reduce: param}");
  Result<std::string> megatron = Export(bf16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--grad-reduce-in-bf16"));
  Result<std::string> nemo = Export(bf16.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("    grad_sync_dtype: bf16\n"));
  Result<std::string> titan = Export(bf16.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("mixed_precision_reduce = \"bfloat16\"\n"));
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kMegatron);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("grad")));
  // fp16 under megatron-core reduces in fp16, as Megatron does by default; fp32 gradients need
  // --accumulate-allreduce-grads-in-fp32.
  std::string fp16(kLlama8b3dFullRecompute);
  fp16.replace(fp16.find("precision: bf16"), 15, "precision: fp16");
  Result<std::string> half = Export(fp16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(half.ok()) << half.message();
  EXPECT_THAT(*half, Not(HasSubstr("grad")));
  fp16.replace(fp16.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, grad_reduce: fp32}");
  Result<std::string> full = Export(fp16.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_THAT(*full, HasSubstr("--accumulate-allreduce-grads-in-fp32"));
}

TEST(Export, FsdpMapsToEachFrameworksFullSharding) {
  std::string fsdp(kLlama8b3dFullRecompute);
  fsdp.replace(fsdp.find("distributed_optimizer: true}"), 28,
               "distributed_optimizer: true, fsdp: true}");
  Result<std::string> megatron = Export(fsdp.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--use-distributed-optimizer \\\n--use-megatron-fsdp \\\n"
                                   "--data-parallel-sharding-strategy optim_grads_params"));
  Result<std::string> nemo = Export(fsdp.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: fsdp: not set here"));
  // torchtitan's FSDP is what the plan asks for: no line says otherwise.
  Result<std::string> titan = Export(fsdp.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("data_parallel_shard_degree = 2\n"));
  EXPECT_THAT(*titan, Not(HasSubstr("distributed optimizer:")));
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kTorchtitan);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, HasSubstr("distributed optimizer:"));
  EXPECT_THAT(*plain, Not(HasSubstr("fsdp")));
}

TEST(Export, RecomputingSomeLayersIsMegatronsBlockMethod) {
  std::string some(kLlama8b3dFullRecompute);
  some.replace(some.find("recompute: full"), 15, "recompute: full, recompute_layers: 3");
  Result<std::string> megatron = Export(some.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--recompute-granularity full \\\n--recompute-method block "
                                   "\\\n--recompute-num-layers 3"));
  Result<std::string> nemo = Export(some.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  activations_checkpoint_method: block\n"
                               "  activations_checkpoint_num_layers: 3\n"));
  Result<std::string> titan = Export(some.c_str(), ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("# differs: recompute_layers 3"));
}

TEST(Export, TheLossKernelsMapToEachFrameworksFusion) {
  for (const auto& [loss, megatron, nemo] :
       {std::tuple{"megatron-fused", "--cross-entropy-fusion-impl native",
                   "  cross_entropy_loss_fusion: true\n"},
        std::tuple{"te", "--cross-entropy-fusion-impl te", "# differs: cross_entropy te:"}}) {
    SCOPED_TRACE(loss);
    std::string yaml(kLlama8b3dFullRecompute);
    yaml.replace(yaml.find("global_batch: 16}"), 17,
                 std::string("global_batch: 16, cross_entropy: ") + loss + "}");
    Result<std::string> m = Export(yaml.c_str(), ExportTarget::kMegatron);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_THAT(*m, HasSubstr("--cross-entropy-loss-fusion \\\n"));
    EXPECT_THAT(*m, HasSubstr(megatron));
    Result<std::string> n = Export(yaml.c_str(), ExportTarget::kNemo);
    ASSERT_TRUE(n.ok()) << n.message();
    EXPECT_THAT(*n, HasSubstr(nemo));
  }
  Result<std::string> plain = Export(kLlama8b3dFullRecompute, ExportTarget::kNemo);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("cross_entropy")));
}

TEST(Export, UnevenStagesTellMegatronHowTheyAreCut) {
  // 126 layers on pp 16: 7, 8 x 14, 7 (equal middle stages): the first and last stage's counts.
  const std::string uneven = Llama405bUneven();
  Result<std::string> megatron = Export(uneven.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--decoder-first-pipeline-num-layers 7 \\\n"
                                   "--decoder-last-pipeline-num-layers 7 \\\n"));
  Result<std::string> nemo = Export(uneven.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: uneven stages (126 layers on pp 16)"));
  // 29 layers on pp 4: 7, 8, 7, 7, whose middle stages differ: a layout.
  Result<Plan> plan = ParsePlan(kLlama8b3dFullRecompute, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  Plan p = *plan;
  p.pp = 4, p.dp = 1, p.virtual_stages = 1, p.global_batch = p.micro_batch * 4;
  p.model.layers = 29;
  ASSERT_FALSE(CheckPlanRules(p).has_value()) << CheckPlanRules(p)->rule;
  ASSERT_EQ(ChunkLayers(p), (std::vector<int>{7, 8, 7, 7}));
  Result<std::string> layout = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(layout.ok()) << layout.message();
  EXPECT_THAT(*layout, HasSubstr("--pipeline-model-parallel-layout \"Et*7|t*8|t*7|t*7L\""));
  EXPECT_THAT(*layout, Not(HasSubstr("--decoder-first-pipeline-num-layers")));
  // Even stages need neither.
  p.model.layers = 32;
  Result<std::string> even = ExportPlan(p, ExportTarget::kMegatron);
  ASSERT_TRUE(even.ok()) << even.message();
  EXPECT_THAT(*even, Not(HasSubstr("pipeline-num-layers")));
  EXPECT_THAT(*even, Not(HasSubstr("layout")));
}

TEST(Export, SquaredReluMapsToEachFramework) {
  // A Nemotron-4-like MLP (LayerNorm, no gating, relu(x)^2): Megatron's --squared-relu, NeMo's
  // activation key; DeepSpeed-Domino's GPT script and torchtitan's Llama say what they run instead.
  constexpr const char* kSquared =
      R"yaml(model: {name: sq, layers: 2, hidden: 256, heads: 8, ffn: 1024, vocab: 1000, seq_len: 128, activation: squared-relu, norm: layernorm, bias: false, tied_embeddings: false}
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 128, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";
  Result<std::string> megatron = Export(kSquared, ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, HasSubstr("--squared-relu"));
  EXPECT_THAT(*megatron, Not(HasSubstr("--swiglu")));
  Result<std::string> nemo = Export(kSquared, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  activation: squared-relu\n"));
  Result<std::string> deepspeed = Export(kSquared, ExportTarget::kDeepSpeed);
  ASSERT_TRUE(deepspeed.ok()) << deepspeed.message();
  EXPECT_THAT(*deepspeed, HasSubstr("squared-ReLU MLP: DeepSpeed-Domino's models run GeLU (GPT) or "
                                    "SwiGLU (Llama); this export runs GeLU"));
  Result<std::string> titan = Export(kSquared, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("a squared-ReLU MLP"));
  EXPECT_THAT(*titan, Not(HasSubstr("a GeLU MLP")));
}

}  // namespace
}  // namespace domino
