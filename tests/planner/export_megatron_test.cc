// Megatron-LM arguments and NeMo YAML for the shared plans, byte for byte (planner/export.h), and
// how a model's or cluster's shape reaches the launch settings of every target.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "planner/export.h"
#include "planner/plan.h"
#include "tests/planner/export_test_plans.h"

namespace domino {
namespace {

using export_test::ExpectExport;
using export_test::Export;
using export_test::kGpt27bRowSplit;
using export_test::kLlama8b3dFullRecompute;
using export_test::kLlama8bFp8Selective;
using ::testing::HasSubstr;
using ::testing::Not;

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
--hidden-dropout 0 \
--attention-dropout 0 \
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
--hidden-dropout 0 \
--attention-dropout 0 \
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
--overlap-grad-reduce \
--overlap-param-gather \
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
--hidden-dropout 0 \
--attention-dropout 0 \
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
  transformer_engine: true
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
  hidden_dropout: 0.0
  attention_dropout: 0.0
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
  transformer_engine: true
  micro_batch_size: 1
  global_batch_size: 16
  tensor_model_parallel_size: 4
  pipeline_model_parallel_size: 2
  virtual_pipeline_model_parallel_size: 2
  overlap_p2p_comm: true
  batch_p2p_comm: false
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
  hidden_dropout: 0.0
  attention_dropout: 0.0
  optim:
    name: distributed_fused_adam
    grad_sync_dtype: fp32
    overlap_grad_sync: true
    overlap_param_sync: true
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
  transformer_engine: true
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
  hidden_dropout: 0.0
  attention_dropout: 0.0
  fp8: true
  fp8_hybrid: true
  optim:
    name: fused_adam
)txt");
}

TEST(Export, HeadsWiderThanHiddenOverHeadsAreEachFrameworksKvChannels) {
  // Qwen3-32B's shape in small: 8 heads of 64 over a hidden of 256 (Q 512 wide).
  constexpr const char* kWide =
      R"yaml(model: {name: wide, layers: 2, hidden: 256, heads: 8, kv_heads: 2, head_dim: 64, ffn: 1024, vocab: 1000, seq_len: 128, activation: swiglu, norm: rmsnorm, bias: false, tied_embeddings: false}
cluster: dgx-h100:1:2
precision: bf16
training: {seq_len: 128, micro_batch: 2, global_batch: 2}
parallel: {tp: 2}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)yaml";
  for (ExportTarget target : {ExportTarget::kMegatron, ExportTarget::kDeepSpeed}) {
    Result<std::string> text = Export(kWide, target);
    ASSERT_TRUE(text.ok()) << text.message();
    EXPECT_THAT(*text, HasSubstr("--num-attention-heads 8 \\\n--kv-channels 64 \\\n"));
  }
  Result<std::string> nemo = Export(kWide, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("  num_query_groups: 2\n  kv_channels: 64\n"));
  Result<std::string> titan = Export(kWide, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, HasSubstr("# differs: torchtitan's llama3 model makes each head dim / "
                                "n_heads = 32 wide; wide's are 64 (Q 512 wide over a hidden of "
                                "256)"));
  // Heads hidden / heads wide say nothing of it.
  Result<std::string> plain = Export(kGpt27bRowSplit, ExportTarget::kMegatron);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_THAT(*plain, Not(HasSubstr("kv-channels")));
}

// A GB200 NVL72 rack is one NVLink domain of 18 hosts of 4 GPUs: launchers count hosts.
TEST(ExportMegatron, ARackIsHostsOfFourForTheLaunchers) {
  constexpr const char* kRacks = R"yaml(model: llama3-70b
cluster: gb200-nvl72:2
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 36}
parallel: {tp: 4, dp: 36}
)yaml";
  Result<Plan> plan = ParsePlan(kRacks, "plan.yaml");
  ASSERT_TRUE(plan.ok()) << plan.message();
  Result<std::string> nemo = ExportPlan(*plan, ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, ::testing::HasSubstr("on gb200-nvl72:2 (2 nodes x 72 GPUs, 36 hosts x 4): "));
  EXPECT_THAT(*nemo, ::testing::HasSubstr("trainer:\n  devices: 4\n  num_nodes: 36\n"));
  Result<std::string> titan = ExportPlan(*plan, ExportTarget::kTorchtitan);
  ASSERT_TRUE(titan.ok()) << titan.message();
  EXPECT_THAT(*titan, ::testing::HasSubstr("torchrun --nnodes 36 --nproc_per_node 4 "));
}

}  // namespace
}  // namespace domino
