// What a Hugging Face config describes beyond the spec's shape (models/hf_approximations.cc): the
// approximations `domino models` prints, and the features a framework can be told to build, set
// as the model's fields (qkv_bias, qk_norm, post_norms, logit_softcap, rotary_fraction, window).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/hf_config.h"
#include "models/model_spec.h"
#include "tests/models/hf_test_util.h"

namespace domino {
namespace {

using hf_test::ExpectError;
using hf_test::HfDir;
using hf_test::LlamaWith;
using hf_test::Texts;
using ::testing::HasSubstr;

TEST(HfApproximations, WhatASpecCannotSayIsListedAsAnApproximation) {
  // Llama 3 and GPT-2 are what their specs say.
  for (const char* exact : {"Meta-Llama-3-8B", "gpt2"}) {
    Result<ModelSpec> m = LoadModel(HfDir(exact));
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_TRUE(m->approximations.empty()) << exact;
  }
  auto approximations = [](const char* folder) {
    Result<ModelSpec> m = LoadModel(HfDir(folder));
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? Texts(*m) : std::vector<std::string>{};
  };
  EXPECT_THAT(approximations("Qwen2-7B"),
              ::testing::ElementsAre(HasSubstr("biases on Q, K and V only (Qwen2)")));
  // Gemma's GeLU gate (Activation::kGeglu), Gemma 2's post-norms and its soft caps on the
  // attention's scores and the logits are priced (ModelSpec::post_norms, attention_softcap,
  // logit_softcap): no approximation.
  EXPECT_THAT(approximations("gemma-2b"), ::testing::IsEmpty());
  EXPECT_THAT(approximations("gemma-2-9b"),
              ::testing::ElementsAre(HasSubstr("a sliding attention window of 4096 tokens "
                                               "(sliding_window: each query and the 4095 before "
                                               "it) on every other layer")));
  EXPECT_THAT(approximations("Phi-3-mini-4k-instruct"),
              ::testing::ElementsAre(HasSubstr("a sliding attention window of 2047 tokens")));
  EXPECT_THAT(approximations("Mistral-7B-v0.1"),
              ::testing::ElementsAre(HasSubstr("a sliding attention window of 4096 tokens")));
  EXPECT_THAT(approximations("pythia-1.4b"),
              ::testing::ElementsAre(HasSubstr("rotary positions on 25% of each head"),
                                     HasSubstr("attention and MLP side by side")));
  // A context stretched after pretraining: the default sequence is the pretraining length.
  Result<ModelSpec> extended = ParseHfConfig(
      R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
          "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 131072,
          "rope_scaling": {"factor": 8.0, "original_max_position_embeddings": 8192,
                           "rope_type": "llama3"}})",
      "config.json");
  ASSERT_TRUE(extended.ok()) << extended.message();
  EXPECT_EQ(extended->seq_len, 8192);
  // Phi-3's 128k configs say it at the top level.
  Result<ModelSpec> phi = ParseHfConfig(
      R"({"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 64,
          "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
          "partial_rotary_factor": 0.75})",
      "config.json");
  ASSERT_TRUE(phi.ok()) << phi.message();
  EXPECT_EQ(phi->seq_len, 4096);
  EXPECT_THAT(Texts(*phi),
              ::testing::ElementsAre(HasSubstr("rotary positions on 75% of each head")));
  // Left out under longrope, it is Phi3Config's default, 4096; without a scaling it is unused.
  const std::string phi_left_out =
      R"({"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 64,
          "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 131072, %s})";
  auto phi_with = [&](const std::string& rope) {
    std::string text = phi_left_out;
    Result<ModelSpec> m = ParseHfConfig(text.replace(text.find("%s"), 2, rope), "config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? m->seq_len : 0;
  };
  EXPECT_EQ(phi_with(R"("rope_scaling": {"type": "longrope", "long_factor": [1], )"
                     R"("short_factor": [1]})"),
            4096);
  EXPECT_EQ(phi_with(R"("rope_parameters": {"rope_type": "longrope"})"), 4096);
  EXPECT_EQ(phi_with(R"("rope_scaling": {"type": "su"})"), 4096);  // longrope's first name
  EXPECT_EQ(phi_with(R"("rope_scaling": null)"), 131072);
  // transformers 5's Gemma 3 keeps one rope_parameters per layer type: the full attention's
  // says how far the context was stretched.
  Result<ModelSpec> gemma3 = ParseHfConfig(
      R"({"model_type": "gemma3_text", "max_position_embeddings": 131072, "rope_parameters":
          {"full_attention": {"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32768},
           "sliding_attention": {"rope_type": "default"}}})",
      "config.json");
  ASSERT_TRUE(gemma3.ok()) << gemma3.message();
  EXPECT_EQ(gemma3->seq_len, 32768);
}

// transformers 5 moves rope_scaling's keys and the legacy partial_rotary_factor, rotary_pct and
// original_max_position_embeddings into one rope_parameters mapping; the same model reads the
// same from either form, and partial_rotary_factor turns part of each head in any rotary family,
// as transformers' rope initialization reads it.
TEST(HfApproximations, Transformers5RopeParametersSayWhatTheLegacyKeysSaid) {
  const std::string shape = R"("num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 131072, )";
  Result<ModelSpec> llama = ParseHfConfig(
      R"({"model_type": "llama", )" + shape +
          R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
          "original_max_position_embeddings": 8192, "partial_rotary_factor": 0.5}})",
      "config.json");
  ASSERT_TRUE(llama.ok()) << llama.message();
  EXPECT_EQ(llama->seq_len, 8192);
  EXPECT_EQ(llama->rotary_fraction, 0.5);
  EXPECT_THAT(Texts(*llama), ::testing::ElementsAre(
                                 "rotary positions on 50% of each head "
                                 "(rope_parameters.partial_rotary_factor 0.5): priced as rotating "
                                 "all of it"));
  // The legacy key on a Llama config too.
  Result<ModelSpec> legacy = ParseHfConfig(
      R"({"model_type": "llama", )" + shape + R"("partial_rotary_factor": 0.5})", "config.json");
  ASSERT_TRUE(legacy.ok()) << legacy.message();
  EXPECT_EQ(legacy->rotary_fraction, 0.5);
  // GPT-NeoX without rotary_pct: GPTNeoXConfig's 0.25, unless rope_parameters says otherwise
  // (RedPajama-INCITE's 1 turns the whole head: no approximation).
  for (const auto& [keys, fraction] :
       {std::pair<std::string, double>{"", 0.25},
        {R"(, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.0})", 1.0},
        {R"(, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25})",
         0.25}}) {
    Result<ModelSpec> neox = ParseHfConfig(
        R"({"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 8, "intermediate_size": 256, "vocab_size": 100,
            "max_position_embeddings": 2048)" +
            keys + "}",
        "config.json");
    ASSERT_TRUE(neox.ok()) << neox.message();
    EXPECT_EQ(neox->rotary_fraction, fraction) << keys;
  }
  ExpectError(LlamaWith(2, R"(  "model_type": "llama", "partial_rotary_factor": "half",)"),
              "bad/config.json:2:51: partial_rotary_factor: expected a number");
  ExpectError(
      LlamaWith(2, R"(  "model_type": "llama", "rope_parameters": {"partial_rotary_factor": 0},)"),
      "bad/config.json:2:71: rope_parameters.partial_rotary_factor: must be above 0 and at most 1, "
      "got 0");
}

TEST(HfApproximations, FeaturesAFrameworkCanBuildAreFields) {
  auto load = [](const char* folder) {
    Result<ModelSpec> m = LoadModel(HfDir(folder));
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : ModelSpec{};
  };
  const ModelSpec qwen2 = load("Qwen2-7B");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.bias);
  EXPECT_EQ(qwen2.window.tokens, 0);  // use_sliding_window false
  ASSERT_EQ(qwen2.approximations.size(), 1u);
  EXPECT_EQ(qwen2.approximations[0].feature, ModelFeature::kQkvBias);
  EXPECT_EQ(qwen2.approximations[0].Text(),
            "biases on Q, K and V only (Qwen2): priced without them");

  const ModelSpec qwen3 = load("Qwen3-32B");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.qkv_bias);
  EXPECT_THAT(Texts(qwen3), ::testing::IsEmpty());  // priced: no approximation

  const ModelSpec pythia = load("pythia-1.4b");
  EXPECT_EQ(pythia.rotary_fraction, 0.25);
  EXPECT_THAT(Texts(pythia),
              ::testing::ElementsAre(
                  "rotary positions on 25% of each head (rotary_pct 0.25): priced as rotating all "
                  "of it",
                  "attention and MLP side by side on one input (use_parallel_residual): priced and "
                  "exported one after the other"));

  const ModelSpec mistral = load("Mistral-7B-v0.1");
  // transformers' sliding_window 4096 counts the query: it and the 4095 before it, Megatron-Core's
  // window_size (4095, 0) as Megatron-Bridge's bridges map it.
  EXPECT_EQ(mistral.window.tokens, 4095);
  EXPECT_EQ(mistral.window.keys(), 4096);
  EXPECT_TRUE(mistral.window.Covers(0) && mistral.window.Covers(31));
  EXPECT_THAT(Texts(mistral),
              ::testing::ElementsAre("a sliding attention window of 4096 tokens (sliding_window: "
                                     "each query and the 4095 before it): "
                                     "priced " +
                                     WindowPricing(4095)));
  EXPECT_EQ(load("Phi-3-mini-4k-instruct").window.tokens, 2046);
  EXPECT_EQ(load("Phi-3-mini-4k-instruct").rotary_fraction, 1);

  // Gemma 2 slides on layers 0, 2, 4, ... (transformers' Gemma2Config).
  const ModelSpec gemma2 = load("gemma-2-9b");
  EXPECT_EQ(gemma2.window.tokens, 4095);
  EXPECT_TRUE(gemma2.window.Covers(0));
  EXPECT_FALSE(gemma2.window.Covers(1));
  EXPECT_TRUE(gemma2.window.Covers(40));
  EXPECT_TRUE(gemma2.post_norms);
  EXPECT_EQ(gemma2.logit_softcap, 30);
  EXPECT_EQ(gemma2.attention_softcap, 50);
  EXPECT_EQ(gemma2.activation, Activation::kGeglu);
  ASSERT_EQ(gemma2.approximations.size(), 1u);
  EXPECT_EQ(gemma2.approximations.back().Text(),
            "a sliding attention window of 4096 tokens (sliding_window: each query and the 4095 "
            "before it) on every other layer: "
            "priced " +
                WindowPricing(4095));
}

TEST(HfApproximations, Gemma3sLayerTypesSayWhichLayersSlide) {
  auto gemma3 = [](const std::string& keys) {
    std::string text =
        LlamaWith(2, R"(  "model_type": "gemma3_text", "sliding_window": 64, )" + keys + ",");
    Result<ModelSpec> m = ParseHfConfig(text, "gemma3/config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : ModelSpec{};
  };
  // LlamaWith's: 2 layers, 256 positions. A pattern of 2 is Gemma 2's.
  const ModelSpec two = gemma3(R"("sliding_window_pattern": 2)");
  EXPECT_TRUE(two.window.Covers(0));
  EXPECT_FALSE(two.window.Covers(1));
  EXPECT_THAT(Texts(two).back(),
              HasSubstr("on 1 of 2 layers (sliding_window_pattern 2: layer 1 attends in full)"));
  // Newer transformers write layer_types, which decides over the pattern.
  const ModelSpec listed =
      gemma3(R"("sliding_window_pattern": 6, "layer_types": ["sliding_attention", )"
             R"("full_attention"])");
  EXPECT_EQ(listed.window.full_every, 2);
  EXPECT_THAT(Texts(listed).back(),
              HasSubstr("on 1 of 2 layers (layer_types: layer 1 attends in full)"));
  const ModelSpec all = gemma3(R"("layer_types": ["sliding_attention", "sliding_attention"])");
  EXPECT_TRUE(all.window.Covers(0) && all.window.Covers(1));
  EXPECT_THAT(
      Texts(all).back(),
      HasSubstr("64 tokens (sliding_window: each query and the 63 before it) on every layer "
                "(layer_types): priced as the window"));
  // A pattern of 1: every layer attends in full, and no window is listed.
  const ModelSpec none = gemma3(R"("sliding_window_pattern": 1)");
  EXPECT_EQ(none.window.tokens, 0);
  EXPECT_TRUE(none.approximations.empty());
  // Full layers first, then sliding ones: Qwen's max_window_layers pattern (first_layer).
  const ModelSpec first = gemma3(R"("layer_types": ["full_attention", "sliding_attention"])");
  EXPECT_EQ(first.window.tokens, 63);
  EXPECT_EQ(first.window.first_layer, 1);
  EXPECT_FALSE(first.window.Covers(0));
  EXPECT_TRUE(first.window.Covers(1));
  EXPECT_THAT(Texts(first).back(),
              HasSubstr("on 1 of 2 layers (layer_types: layer 0 attends in full)"));
  // One sliding layer before two full ones: no window states it, so none is set and the export
  // says it differs.
  Result<ModelSpec> odd = ParseHfConfig(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": 64,
          "max_position_embeddings": 256, "layer_types": ["sliding_attention",
          "full_attention", "full_attention"]})",
      "gemma3/config.json");
  ASSERT_TRUE(odd.ok()) << odd.message();
  EXPECT_EQ(odd->window.tokens, 0);
  ASSERT_EQ(odd->approximations.size(), 1u);
  EXPECT_EQ(odd->approximations.back().feature, ModelFeature::kNone);
  EXPECT_EQ(odd->approximations.back().Text(),
            "a sliding attention window of 64 tokens (sliding_window: each query and the 63 before "
            "it) on layer 0 (layer_types), a "
            "layer pattern domino's window does not state: priced and exported as full causal "
            "attention, the same up to 64 tokens");

  // A window of the query alone has no Megatron-Core window (tokens 0 is none).
  ExpectError(LlamaWith(2, R"(  "model_type": "gemma3_text", "sliding_window": 1,)"),
              "bad/config.json:2:50: sliding_window: must be at least 2: a window of 1 (each query "
              "attending to itself alone) is not modelled");
  ExpectError(LlamaWith(2, R"(  "model_type": "gemma3_text", "sliding_window": 64,
  "layer_types": ["sliding_attention"],)"),
              "bad/config.json:3:18: layer_types: expected a list of num_hidden_layers (2) "
              "\"sliding_attention\" or \"full_attention\"");
  // A pattern of 0 is an error (it once divided by zero).
  ExpectError(LlamaWith(2, R"(  "model_type": "gemma3_text", "sliding_window": 64,
  "sliding_window_pattern": 0,)"),
              "bad/config.json:3:29: sliding_window_pattern: must be between 1 and 32767, got 0");
  // Gemma3ForConditionalGeneration's errors name the key in text_config.
  ExpectError(R"({"model_type": "gemma3", "text_config": {"hidden_size": "64"}})",
              "bad/config.json:1:57: text_config.hidden_size: expected an integer");
  ExpectError(R"({"model_type": "gemma3", "vision_config": {}})",
              "bad/config.json:1:1: text_config: missing required key (the language model's "
              "config)");
  ExpectError(R"({"model_type": "gemma3", "text_config": {"model_type": "llama"}})",
              "bad/config.json:1:56: text_config.model_type: expected gemma3_text in a gemma3 "
              "config, got 'llama'");
}

// A window a config leaves out is its class's default (MistralConfig, Gemma2Config,
// Gemma3TextConfig, Qwen2Config and Qwen3Config: 4096; Phi3Config: none); null is none, and an
// error on Gemma's sliding layers. A layer_types list decides where Gemma 2 and Qwen slide too.
TEST(HfApproximations, ALeftOutWindowIsTheClasssDefault) {
  // LlamaWith's 2 layers, with 8192 positions and the family `type`.
  auto config = [](const std::string& type, const std::string& keys) {
    std::string text = LlamaWith(
        5, R"(  "max_position_embeddings": 8192)" + (keys.empty() ? "" : ", " + keys) + ",");
    return text.replace(text.find("\"llama\""), 7, "\"" + type + "\"");
  };
  auto parse = [&](const std::string& type, const std::string& keys) {
    Result<ModelSpec> m = ParseHfConfig(config(type, keys), "window/config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : ModelSpec{};
  };
  const ModelSpec mistral = parse("mistral", "");
  EXPECT_EQ(mistral.window.tokens, 4095);
  EXPECT_TRUE(mistral.window.Covers(0) && mistral.window.Covers(1));
  EXPECT_EQ(parse("mistral", R"("sliding_window": null)").window.tokens, 0);
  EXPECT_EQ(parse("phi3", "").window.tokens, 0);  // Phi3Config's None
  const ModelSpec gemma2 = parse("gemma2", "");
  EXPECT_EQ(gemma2.window.tokens, 4095);
  EXPECT_TRUE(gemma2.window.Covers(0));
  EXPECT_FALSE(gemma2.window.Covers(1));
  EXPECT_EQ(parse("gemma3_text", "").window.tokens, 4095);
  EXPECT_EQ(parse("qwen2", "").window.tokens, 0);  // no use_sliding_window
  const ModelSpec qwen = parse("qwen3", R"("use_sliding_window": true, "max_window_layers": 1)");
  EXPECT_EQ(qwen.window.tokens, 4095);
  EXPECT_EQ(qwen.window.first_layer, 1);
  EXPECT_EQ(parse("qwen2", R"("use_sliding_window": true, "sliding_window": null)").window.tokens,
            0);
  // Gemma's sliding layers need a window: transformers' mask raises for a null one.
  ExpectError(config("gemma2", R"("sliding_window": null)"),
              "bad/config.json:5:54: sliding_window: null, but the model has sliding layers "
              "(transformers' mask raises for them)");
  EXPECT_EQ(parse("gemma3_text", R"("sliding_window": null, "layer_types": ["full_attention", )"
                                 R"("full_attention"])")
                .window.tokens,
            0);
  // layer_types decides over Gemma 2's every other layer and Qwen's max_window_layers.
  const ModelSpec listed = parse(
      "gemma2", R"("sliding_window": 64, "layer_types": ["full_attention", "sliding_attention"])");
  EXPECT_FALSE(listed.window.Covers(0));
  EXPECT_TRUE(listed.window.Covers(1));
  EXPECT_THAT(Texts(listed).back(),
              HasSubstr("on 1 of 2 layers (layer_types: layer 0 attends in full)"));
  const ModelSpec qwen_listed =
      parse("qwen2", R"("use_sliding_window": true, "max_window_layers": 28, )"
                     R"("layer_types": ["sliding_attention", "sliding_attention"])");
  EXPECT_TRUE(qwen_listed.window.Covers(0) && qwen_listed.window.Covers(1));
  EXPECT_EQ(
      parse("qwen2", R"("layer_types": ["sliding_attention", "sliding_attention"])").window.tokens,
      0);  // the list places a window use_sliding_window does not give
  // Gemma 2's soft caps left out are Gemma2Config's 50 and 30; null is none.
  EXPECT_EQ(gemma2.attention_softcap, 50);
  EXPECT_EQ(gemma2.logit_softcap, 30);
  const ModelSpec uncapped =
      parse("gemma2", R"("attn_logit_softcapping": null, "final_logit_softcapping": null)");
  EXPECT_EQ(uncapped.attention_softcap, 0);
  EXPECT_EQ(uncapped.logit_softcap, 0);
  EXPECT_EQ(parse("gemma3_text", "").attention_softcap, 0);  // Gemma3TextConfig's None
  ExpectError(config("mistral", R"("sliding_window": "4096")"),
              "bad/config.json:5:54: sliding_window: expected a number");
  ExpectError(config("gemma2", R"("attn_logit_softcapping": true)"),
              "bad/config.json:5:62: attn_logit_softcapping: expected a number");
  // EmbeddingGemma attends both ways; GPT-NeoX's null rotary_pct has no meaning.
  ExpectError(config("gemma3_text", R"("use_bidirectional_attention": true)"),
              "bad/config.json:5:67: use_bidirectional_attention: true: attention over the whole "
              "sequence both ways (EmbeddingGemma's), which domino does not model: it prices "
              "causal decoders");
  ExpectError(config("gpt_neox", R"("rotary_pct": null)"),
              "bad/config.json:5:50: rotary_pct: expected a number, got null");
  ExpectError(config("gpt_neox", R"("use_parallel_residual": null)"),
              "bad/config.json:5:61: use_parallel_residual: expected true or false, got null");
}

// Qwen2Config and Qwen3Config slide layer i when use_sliding_window and i >= max_window_layers
// (default 28): the first max_window_layers attend in full.
TEST(HfApproximations, QwenSlidesFromMaxWindowLayersOn) {
  auto qwen = [](const std::string& type, const std::string& keys) {
    std::string text = LlamaWith(2, "  \"model_type\": \"" + type + "\", " + keys + ",");
    Result<ModelSpec> m = ParseHfConfig(text, "qwen/config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : ModelSpec{};
  };
  // LlamaWith's: 2 layers, 256 positions.
  const ModelSpec last = qwen("qwen2", R"("use_sliding_window": true, "sliding_window": 64, )"
                                       R"("max_window_layers": 1)");
  EXPECT_EQ(last.window.tokens, 63);
  EXPECT_EQ(last.window.first_layer, 1);
  EXPECT_FALSE(last.window.Covers(0));
  EXPECT_TRUE(last.window.Covers(1));
  EXPECT_THAT(Texts(last),
              ::testing::ElementsAre(HasSubstr("Qwen2"),
                                     "a sliding attention window of 64 tokens (sliding_window: "
                                     "each query and the 63 before it) on "
                                     "the last 1 of 2 layers (the first max_window_layers 1 attend "
                                     "in full): priced " +
                                         WindowPricing(63)));
  const ModelSpec all = qwen("qwen3", R"("use_sliding_window": true, "sliding_window": 64, )"
                                      R"("max_window_layers": 0)");
  EXPECT_TRUE(all.window.Covers(0) && all.window.Covers(1));
  EXPECT_THAT(
      Texts(all).back(),
      HasSubstr("64 tokens (sliding_window: each query and the 63 before it) on every layer "
                "(max_window_layers 0): priced as the window"));
  // The default 28 covers no layer of 2; nor does a window without use_sliding_window.
  EXPECT_EQ(qwen("qwen2", R"("use_sliding_window": true, "sliding_window": 64)").window.tokens, 0);
  EXPECT_EQ(qwen("qwen2", R"("sliding_window": 64, "max_window_layers": 0)").window.tokens, 0);
  EXPECT_EQ(qwen("qwen2", R"("sliding_window": 64, "max_window_layers": 0)").approximations.size(),
            1u);
  ExpectError(LlamaWith(2, R"(  "model_type": "qwen2", "use_sliding_window": true,
  "sliding_window": 64, "max_window_layers": -1,)"),
              "bad/config.json:3:46: max_window_layers: must be between 0 and 32767, got -1");
  ExpectError(LlamaWith(2, R"(  "model_type": "phi3", "partial_rotary_factor": 1.5,)"),
              "bad/config.json:2:50: partial_rotary_factor: must be above 0 and at most 1, got "
              "1.5");
}

}  // namespace
}  // namespace domino
