// What a Hugging Face config describes that domino prices without (ModelSpec's qkv_bias, qk_norm,
// rotary_fraction and window) reaches the frameworks that have a setting for it, and every export
// says whether its run has it (planner/export.h).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "planner/export.h"
#include "planner/plan.h"
#include "tests/planner/export_test_plans.h"

namespace domino {
namespace {

using export_test::Export;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string HfDir(const std::string& model) {
  return std::string(DOMINO_SOURCE_DIR) + "/tests/models/data/hf/" + model;
}

// `model` (a path) on one DGX H100, tp 8 with Domino's row split 2: a plan every target takes,
// DeepSpeed-Domino's included.
std::string TpEight(const std::string& model) {
  return "model: " + model + R"(
cluster: dgx-h100:1
precision: bf16
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 8}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)";
}

// The text of one target's export of `plan`; empty, and a failure, where it has none.
std::string ExportText(const std::string& plan, ExportTarget target) {
  Result<std::string> exported = Export(plan.c_str(), target);
  EXPECT_TRUE(exported.ok()) << exported.message();
  return exported.ok() ? *exported : "";
}

// The text of each target's export of `plan`, in ExportTarget's order.
struct Exports {
  std::string megatron, nemo, deepspeed, torchtitan;
};
Exports ExportAll(const std::string& plan) {
  return {ExportText(plan, ExportTarget::kMegatron), ExportText(plan, ExportTarget::kNemo),
          ExportText(plan, ExportTarget::kDeepSpeed), ExportText(plan, ExportTarget::kTorchtitan)};
}

TEST(ExportFeatures, Qwen2LaunchesItsQkvBiasesInMegatron) {
  const std::string plan = "model: " + HfDir("Qwen2-7B") + R"(
cluster: dgx-h100:1:4
precision: bf16
training: {seq_len: 4096, micro_batch: 1, global_batch: 8}
parallel: {tp: 4}
)";
  Result<std::string> text = Export(plan.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(
      *text,
      R"txt(# Megatron-LM / Megatron-Core arguments (pretrain_gpt.py) for Qwen2-7B on dgx-h100:1:4 (1 node x 4 GPUs): 4 GPUs = tp 4 x pp 1 x dp 1
# data-parallel size 1 follows from the world size: 4 GPUs / (tp 4 x pp 1)
# vocabulary 152064: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by --make-vocab-size-divisible-by
# differs: model Qwen2-7B: biases on Q, K and V only (Qwen2): launched (--add-qkv-bias), priced without them
--num-layers 28 \
--hidden-size 3584 \
--ffn-hidden-size 18944 \
--num-attention-heads 28 \
--group-query-attention \
--num-query-groups 4 \
--seq-length 4096 \
--max-position-embeddings 131072 \
--position-embedding-type rope \
--swiglu \
--normalization RMSNorm \
--add-qkv-bias \
--hidden-dropout 0 \
--attention-dropout 0 \
--disable-bias-linear \
--untie-embeddings-and-output-weights \
--tensor-model-parallel-size 4 \
--pipeline-model-parallel-size 1 \
--micro-batch-size 1 \
--global-batch-size 8 \
--bf16
)txt");
  Result<std::string> nemo = Export(plan.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, HasSubstr("# differs: model Qwen2-7B: biases on Q, K and V only (Qwen2): "
                               "launched (qkv_bias: true), priced without them\n"));
  EXPECT_THAT(*nemo, HasSubstr("  bias: false\n"));
  EXPECT_THAT(*nemo, HasSubstr("  position_embedding_type: rope\n  qkv_bias: true\n"));
}

TEST(ExportFeatures, Qwen3sQkNormIsLaunchedWhereTheFrameworkHasIt) {
  const Exports e = ExportAll(TpEight(HfDir("Qwen3-32B")));
  EXPECT_THAT(e.megatron, HasSubstr("--normalization RMSNorm \\\n--qk-layernorm \\\n"));
  // Priced and launched: no difference.
  EXPECT_THAT(e.megatron, Not(HasSubstr("on each head of Q and of K")));
  // NeMo's default layer spec builds no Q/K norm: the decoder-block spec takes the key.
  EXPECT_THAT(e.nemo, HasSubstr("  position_embedding_type: rope\n  qk_layernorm: true\n  name: "
                                "decoder_block_gpt\n"));
  EXPECT_THAT(e.nemo, Not(HasSubstr("on each head of Q and of K")));
  // DeepSpeed-Domino's layers and torchtitan's llama3 have no such setting.
  for (const std::string* text : {&e.deepspeed, &e.torchtitan}) {
    EXPECT_THAT(*text, HasSubstr("# differs: model Qwen3-32B: an RMSNorm on each head of Q and of "
                                 "K (qk_norm): priced with them, exported without them\n"));
    EXPECT_THAT(*text, Not(HasSubstr("qk-layernorm")));
  }
}

TEST(ExportFeatures, Gemma2sPricedPostNormsAndSoftCapsAreNotLaunched) {
  const Exports e = ExportAll(TpEight(HfDir("gemma-2-9b")));
  for (const std::string* text : {&e.megatron, &e.nemo, &e.deepspeed, &e.torchtitan}) {
    EXPECT_THAT(*text, HasSubstr("# differs: model gemma-2-9b: logits soft-capped at 30 "
                                 "(logit_softcap): priced with the cap, exported without it\n"));
    EXPECT_THAT(*text, HasSubstr("(post_norms): priced with them, exported without them\n"));
    EXPECT_THAT(*text, HasSubstr("# differs: model gemma-2-9b: attention scores soft-capped at 50 "
                                 "(attention_softcap): priced with the cap, exported without "
                                 "it\n"));
  }
}

// Gemma's GeLU-gated MLP: NeMo's fast-geglu (without the bias-activation fusion, which takes no
// such gate, as NeMo's Gemma configs set it); Megatron-LM has no flag for it and launches SwiGLU's
// matrices; DeepSpeed-Domino's layers run GeLU and torchtitan's llama3 SwiGLU.
TEST(ExportFeatures, GemmasGeluGateIsFastGegluInNemoAndADifferenceElsewhere) {
  const Exports e = ExportAll(TpEight(HfDir("gemma-2-9b")));
  EXPECT_THAT(e.nemo, HasSubstr("  activation: fast-geglu\n"));
  EXPECT_THAT(e.nemo, HasSubstr("  bias_activation_fusion: false\n"));
  EXPECT_THAT(e.nemo, Not(HasSubstr("GeLU-gated")));
  EXPECT_THAT(e.megatron, HasSubstr("--swiglu"));
  EXPECT_THAT(e.megatron,
              HasSubstr("# differs: model gemma-2-9b: a GeLU-gated MLP (geglu): Megatron-LM has no "
                        "setting for it; launched as SwiGLU (--swiglu), the same three matrices "
                        "with a SiLU gate\n"));
  EXPECT_THAT(e.deepspeed, HasSubstr("GeGLU MLP: DeepSpeed-Domino's layers run GeLU"));
  EXPECT_THAT(e.torchtitan, HasSubstr("a GeLU-gated MLP (GeGLU)"));
  // A SwiGLU model says none of it.
  const Exports llama = ExportAll(TpEight("llama3-8b"));
  for (const std::string* text :
       {&llama.megatron, &llama.nemo, &llama.deepspeed, &llama.torchtitan})
    EXPECT_THAT(*text, Not(HasSubstr("GeGLU")));
  EXPECT_THAT(llama.nemo, HasSubstr("  activation: swiglu\n"));
}

TEST(ExportFeatures, PartialRotaryIsARotaryPercent) {
  const Exports e = ExportAll(TpEight(HfDir("pythia-1.4b")));
  const std::string launched =
      "# differs: model pythia-1.4b: rotary positions on 25% of each head (rotary_pct 0.25): "
      "launched (--rotary-percent 0.25), priced as rotating all of it\n";
  // DeepSpeed-Domino's language model reads Megatron-LM's --rotary-percent too.
  for (const std::string* text : {&e.megatron, &e.deepspeed}) {
    EXPECT_THAT(*text, HasSubstr("--position-embedding-type rope \\\n--rotary-percent 0.25 \\\n"));
    EXPECT_THAT(*text, HasSubstr(launched));
  }
  EXPECT_THAT(e.nemo, HasSubstr("  position_embedding_type: rope\n  rotary_percentage: 0.25\n"));
  EXPECT_THAT(e.nemo, HasSubstr("(rotary_pct 0.25): launched (rotary_percentage: 0.25), priced as "
                                "rotating all of it\n"));
  EXPECT_THAT(e.torchtitan, HasSubstr("(rotary_pct 0.25): priced and exported as rotating all of "
                                      "it\n"));
  // What no framework can be told stays "priced and exported".
  EXPECT_THAT(e.megatron, HasSubstr("(use_parallel_residual): priced and exported one after the "
                                    "other\n"));
}

TEST(ExportFeatures, ASlidingWindowIsAWindowSizeOnItsLayers) {
  // Mistral's window on every layer, which the plan (megatron-core, cp 1) prices: Megatron-LM and
  // NeMo launch it, no difference; DeepSpeed-Domino and torchtitan run full causal attention. Its
  // sliding_window 4096 counts the query: window_size (4095, 0), as Megatron-Bridge maps it.
  const Exports mistral = ExportAll(TpEight(HfDir("Mistral-7B-v0.1")));
  EXPECT_THAT(mistral.megatron, HasSubstr("--window-size 4095,0 \\\n--hidden-dropout"));
  EXPECT_THAT(mistral.megatron, Not(HasSubstr("sliding attention window")));
  EXPECT_THAT(mistral.nemo, HasSubstr("  window_size: [4095, 0]\n  share_embeddings"));
  EXPECT_THAT(mistral.nemo, Not(HasSubstr("sliding attention window")));
  for (const std::string* text : {&mistral.deepspeed, &mistral.torchtitan}) {
    EXPECT_THAT(*text, HasSubstr("(sliding_window: each query and the 4095 before it): priced as "
                                 "the window, exported as full causal attention, the same up to "
                                 "4096 tokens\n"));
    EXPECT_THAT(*text, Not(HasSubstr("window-size")));
  }
  // A stack whose kernels run no window prices it as full causal attention.
  const Exports unpriced = ExportAll(TpEight(HfDir("Mistral-7B-v0.1")) + "stack: domino\n");
  EXPECT_THAT(unpriced.megatron,
              HasSubstr("# differs: model Mistral-7B-v0.1: a sliding attention window of 4096 "
                        "tokens (sliding_window: each query and the 4095 before it): launched "
                        "(--window-size 4095,0), priced as full causal attention, the same up to "
                        "4096 tokens\n"));
  // Gemma 2's on layers 0, 2, 4, ...: Megatron-Core's full attention on every second layer.
  const Exports gemma = ExportAll(TpEight(HfDir("gemma-2-9b")));
  EXPECT_THAT(gemma.megatron, HasSubstr("--window-size 4095,0 \\\n--window-attn-skip-freq 2 \\\n"));
  EXPECT_THAT(gemma.megatron, Not(HasSubstr("sliding attention window")));
  EXPECT_THAT(gemma.nemo, HasSubstr("  window_size: [4095, 0]\n  window_attn_skip_freq: 2\n"));
  EXPECT_THAT(gemma.deepspeed, HasSubstr("4095 before it) on every other layer: priced as the "
                                         "window, exported as full causal attention"));
}

// Gemma 3 (4B): QK-norm, and a window on five layers of six, which Megatron-Core's integer skip
// frequency states (layer numbers from 1 that 6 divides attend in full).
TEST(ExportFeatures, Gemma3LaunchesItsQkNormAndItsFiveOfSixWindow) {
  // TpEight's plan on 4 GPUs: the 4B has 4 key/value heads.
  const std::string plan = "model: " + HfDir("gemma-3-4b-pt") + R"(
cluster: dgx-h100:1:4
precision: bf16
training: {seq_len: 2048, micro_batch: 2, global_batch: 2}
parallel: {tp: 4}
overlap: {row_split: 2, col_split: 1, scope: inter-layer}
)";
  const Exports e = ExportAll(plan);
  EXPECT_THAT(e.megatron, HasSubstr("--normalization RMSNorm \\\n--qk-layernorm \\\n"
                                    "--window-size 1023,0 \\\n--window-attn-skip-freq 6 \\\n"));
  EXPECT_THAT(e.megatron, Not(HasSubstr("on each head of Q and of K")));  // priced: no difference
  // Its post-norms are priced, and no framework here builds them.
  for (const std::string* text : {&e.megatron, &e.nemo, &e.deepspeed, &e.torchtitan})
    EXPECT_THAT(*text, HasSubstr("# differs: model gemma-3-4b-pt: an RMSNorm after the attention "
                                 "and after the MLP besides the ones before them (post_norms): "
                                 "priced with them, exported without them\n"));
  EXPECT_THAT(e.megatron, Not(HasSubstr("sliding attention window")));
  EXPECT_THAT(e.megatron,
              HasSubstr("# differs: model gemma-3-4b-pt: a vision tower (vision_config) and its "
                        "projection into the language model (Gemma3ForConditionalGeneration): "
                        "priced and exported as the language model alone\n"));
  EXPECT_THAT(e.nemo, HasSubstr("  qk_layernorm: true\n  name: decoder_block_gpt\n"
                                "  window_size: [1023, 0]\n  window_attn_skip_freq: 6\n"));
  for (const std::string* text : {&e.deepspeed, &e.torchtitan}) {
    EXPECT_THAT(*text, HasSubstr("attend in full): priced as the window, exported as full causal "
                                 "attention, the same up to 1024 tokens\n"));
    EXPECT_THAT(*text, Not(HasSubstr("window-attn-skip-freq")));
  }
}

TEST(ExportFeatures, QwensWindowFromMaxWindowLayersIsALayerPattern) {
  // A Qwen2 config with its window on: layers 2 to 5 of 6 (max_window_layers 2).
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "export_features_qwen2";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "num_hidden_layers": 6,
      "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 4096,
      "use_sliding_window": true, "sliding_window": 1024, "max_window_layers": 2})";
  const Exports e = ExportAll(TpEight(dir.string()));
  EXPECT_THAT(e.megatron, HasSubstr("--add-qkv-bias \\\n--window-size 1023,0 \\\n"
                                    "--window-attn-skip-freq \"[0]*2+[1]*4\" \\\n"));
  EXPECT_THAT(e.megatron, Not(HasSubstr("sliding attention window")));
  EXPECT_THAT(e.nemo, HasSubstr("  qkv_bias: true\n  window_size: [1023, 0]\n"
                                "  window_attn_skip_freq: [0, 0, 1, 1, 1, 1]\n"));
}

// `model` (a path) over `cluster`'s GPUs in tp x cp, one sequence of 8,192 tokens a step, on
// `stack`.
std::string TpCp(const std::string& model, const std::string& cluster, int tp, int cp,
                 std::string_view stack = "megatron-core") {
  return fmt::format(R"(model: {}
cluster: {}
stack: {}
precision: bf16
training: {{seq_len: 8192, micro_batch: 1, global_batch: 1}}
parallel: {{tp: {}, cp: {}}}
)",
                     model, cluster, stack, tp, cp);
}

// Transformer Engine runs no window over its p2p ring: a windowed model's plan on megatron-core
// runs a2a where cp divides each tensor-parallel rank's heads and key/value heads
// (Plan::cp_communication), priced and launched so. A plan on a stack that runs only the ring
// (this project's executor's) launches a2a too, and says it was priced as the ring.
TEST(ExportFeatures, ContextParallelismOverAWindowIsA2aWhereTheHeadsSplit) {
  // Mistral's 32 heads and 8 key/value heads over tp 2: 16 and 4 a rank, which cp 2 divides.
  const std::string plan = TpCp(HfDir("Mistral-7B-v0.1"), "dgx-h100:1:4", 2, 2);
  Result<std::string> megatron = Export(plan.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_EQ(
      *megatron,
      R"txt(# Megatron-LM / Megatron-Core arguments (pretrain_gpt.py) for Mistral-7B-v0.1 on dgx-h100:1:4 (1 node x 4 GPUs): 4 GPUs = tp 2 x cp 2 x pp 1 x dp 1
# data-parallel size 1 follows from the world size: 4 GPUs / (tp 2 x cp 2 x pp 1)
# vocabulary 32000: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by --make-vocab-size-divisible-by
--num-layers 32 \
--hidden-size 4096 \
--ffn-hidden-size 14336 \
--num-attention-heads 32 \
--group-query-attention \
--num-query-groups 8 \
--seq-length 8192 \
--max-position-embeddings 32768 \
--position-embedding-type rope \
--swiglu \
--normalization RMSNorm \
--window-size 4095,0 \
--hidden-dropout 0 \
--attention-dropout 0 \
--disable-bias-linear \
--untie-embeddings-and-output-weights \
--tensor-model-parallel-size 2 \
--pipeline-model-parallel-size 1 \
--context-parallel-size 2 \
--cp-comm-type a2a \
--micro-batch-size 1 \
--global-batch-size 1 \
--overlap-grad-reduce \
--bf16
)txt");
  Result<std::string> nemo = Export(plan.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, Not(HasSubstr("# differs:")));
  EXPECT_THAT(*nemo, HasSubstr("\n  context_parallel_size: 2\n  cp_comm_type: a2a\n"
                               "  virtual_pipeline_model_parallel_size: null\n"));
  const std::string ring = TpCp(HfDir("Mistral-7B-v0.1"), "dgx-h100:1:4", 2, 2, "domino");
  EXPECT_THAT(ExportText(ring, ExportTarget::kMegatron),
              AllOf(HasSubstr("\n# differs: context parallelism over a sliding window: launched "
                              "(--cp-comm-type a2a), priced as the p2p ring the plan's stack "
                              "domino runs, which Transformer Engine refuses with a window\n"),
                    HasSubstr("\n--context-parallel-size 2 \\\n--cp-comm-type a2a \\\n")));
  // Gemma 3's window on five layers of six: one comm type for all of them. (Gemma 2's soft-capped
  // attention runs no context parallelism on megatron-core: Megatron-Bridge's asserts cp 1.)
  const std::string gemma = TpCp(HfDir("gemma-3-4b-pt"), "dgx-h100:1:4", 2, 2);
  EXPECT_THAT(ParsePlan(TpCp(HfDir("gemma-2-9b"), "dgx-h100:1:4", 2, 2), "plan.yaml").message(),
              HasSubstr("the plan's attention is flex"));
  EXPECT_THAT(ExportText(gemma, ExportTarget::kMegatron),
              HasSubstr("\n--context-parallel-size 2 \\\n--cp-comm-type a2a \\\n"));
  EXPECT_THAT(ExportText(gemma, ExportTarget::kNemo),
              HasSubstr("\n  context_parallel_size: 2\n  cp_comm_type: a2a\n"));
  // torchtitan launches no window, and its own ring.
  EXPECT_THAT(ExportText(gemma, ExportTarget::kTorchtitan),
              AllOf(HasSubstr("context_parallel_degree = 2\n"),
                    HasSubstr("\n# differs: cp_comm a2a: torchtitan runs context parallelism as "
                              "PyTorch's ring attention "
                              "(torch.distributed.tensor.experimental.context_parallel), priced "
                              "as Transformer Engine's a2a\n"),
                    Not(HasSubstr("context parallelism over a sliding window"))));
}

// Where cp does not divide a rank's heads, all_gather, which has no rule on heads.
TEST(ExportFeatures, ContextParallelismOverAWindowIsAllGatherWhereTheHeadsDoNotSplit) {
  // tp 4 leaves 8 heads and 2 key/value heads a rank: cp 4 divides the first only.
  const std::string plan = TpCp(HfDir("Mistral-7B-v0.1"), "dgx-h100:2", 4, 4);
  Result<std::string> megatron = Export(plan.c_str(), ExportTarget::kMegatron);
  ASSERT_TRUE(megatron.ok()) << megatron.message();
  EXPECT_THAT(*megatron, Not(HasSubstr("context parallelism over a sliding window")));
  EXPECT_THAT(*megatron,
              HasSubstr("\n--context-parallel-size 4 \\\n--cp-comm-type all_gather \\\n"));
  Result<std::string> nemo = Export(plan.c_str(), ExportTarget::kNemo);
  ASSERT_TRUE(nemo.ok()) << nemo.message();
  EXPECT_THAT(*nemo, Not(HasSubstr("context parallelism over a sliding window")));
  EXPECT_THAT(*nemo, HasSubstr("\n  context_parallel_size: 4\n  cp_comm_type: all_gather\n"));
  const std::string ring = TpCp(HfDir("Mistral-7B-v0.1"), "dgx-h100:2", 4, 4, "domino");
  EXPECT_THAT(ExportText(ring, ExportTarget::kNemo),
              HasSubstr("\n# differs: context parallelism over a sliding window: launched "
                        "(cp_comm_type: all_gather), priced as the p2p ring the plan's stack "
                        "domino runs, which Transformer Engine refuses with a window (a2a needs "
                        "cp 4 to divide the 8 heads and 2 key/value heads per tensor-parallel "
                        "rank)\n"));
}

// Without context parallelism a window changes no comm type.
TEST(ExportFeatures, AWindowWithoutContextParallelismSetsNoCommType) {
  const Exports e = ExportAll(TpEight(HfDir("Mistral-7B-v0.1")));
  EXPECT_THAT(e.megatron, HasSubstr("\n--tensor-model-parallel-size 8 \\\n"
                                    "--pipeline-model-parallel-size 1 \\\n--micro-batch-size 2"));
  EXPECT_THAT(e.nemo, HasSubstr("\n  pipeline_model_parallel_size: 1\n"
                                "  virtual_pipeline_model_parallel_size: null\n"));
  for (const std::string* text : {&e.megatron, &e.nemo}) {
    EXPECT_THAT(*text, Not(HasSubstr("cp-comm-type")));
    EXPECT_THAT(*text, Not(HasSubstr("cp_comm_type")));
    EXPECT_THAT(*text, Not(HasSubstr("context parallelism over a sliding window")));
  }
}

TEST(ExportFeatures, ADropoutAfterTheAttentionOnlyIsNamedAsADifference) {
  // training.mlp_dropout false: every framework's hidden dropout runs after both branches.
  std::string drop(kLlama8b3dFullRecompute);
  drop.replace(drop.find("global_batch: 16}"), 17,
               "global_batch: 16, dropout: true, mlp_dropout: false}");
  for (const auto& [target, name] :
       {std::pair{ExportTarget::kMegatron, "Megatron-LM"}, std::pair{ExportTarget::kNemo, "NeMo"},
        std::pair{ExportTarget::kTorchtitan, "torchtitan"}}) {
    Result<std::string> out = Export(drop.c_str(), target);
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_THAT(*out, HasSubstr(fmt::format("# differs: mlp_dropout false: {}'s hidden dropout "
                                            "runs after the MLP too, as after the attention",
                                            name)));
  }
}

}  // namespace

}  // namespace domino
