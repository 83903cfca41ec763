// DeepSpeed-Domino configs for the plans its public code runs, and its refusals (planner/export.h).
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
using export_test::kLlama8bRowSplit;

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
--hidden-dropout 0 \
--attention-dropout 0 \
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
# launch: deepspeed --num_gpus 8 pretrain_gpt.py ARGUMENTS; DeepSpeed-Domino takes batch and precision from its arguments, the DeepSpeed config states them for a DeepSpeed engine
# differs: RMSNorm: DeepSpeed-Domino's layers run LayerNorm
# differs: SwiGLU MLP: DeepSpeed-Domino's layers run GeLU (over ffn 14336)
# differs: 8 key/value heads: DeepSpeed-Domino has no grouped-query attention and runs 32 (multi-head)
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
--hidden-dropout 0 \
--attention-dropout 0 \
--disable-bias-linear \
--untie-embeddings-and-output-weights \
--tensor-model-parallel-size 8 \
--micro-batch-size 2 \
--global-batch-size 2 \
--bf16
)txt");
}

TEST(ExportDeepSpeed, ARunOverTwoNodesLaunchesThroughAHostfile) {
  // tp 16 over two DGX nodes: DeepSpeed's launcher counts GPUs per node.
  std::string plan = kGpt27bRowSplit;
  plan.replace(plan.find("dgx-h100:1"), 10, "dgx-h100:2");
  plan.replace(plan.find("tp: 8"), 5, "tp: 16");
  Result<std::string> text = Export(plan.c_str(), ExportTarget::kDeepSpeed);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_NE(text->find("# launch: deepspeed --hostfile HOSTFILE --num_nodes 2 --num_gpus 8 "
                       "pretrain_gpt.py ARGUMENTS (HOSTFILE: a line `HOST slots=8` per host);"),
            std::string::npos)
      << *text;
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

}  // namespace
}  // namespace domino
