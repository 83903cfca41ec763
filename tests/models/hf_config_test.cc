#include "models/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "models/model_counts.h"
#include "models/model_spec.h"
#include "tests/models/hf_test_util.h"

namespace domino {
namespace {

using hf_test::ExpectError;
using hf_test::HfDir;
using hf_test::LlamaWith;
using hf_test::Texts;
using ::testing::HasSubstr;

struct Published {
  const char* folder;
  int64_t parameters;  // as the model card or paper states it
};

// Published totals: Llama 3 model card (8.03B), Qwen2 technical report (7.62B), Mistral 7B
// (7.24B), GPT-2 small (124M as counted by transformers), Pythia paper Table 1 (1.41B), Gemma
// report Table 2 (2.51B and 8.54B with embeddings), Gemma 2 report Table 1 (9.24B), Qwen3-32B
// model card (32.8B), Phi-3 report (3.8B), Gemma 3 report Table 1 (1B: 302M embedding and 698M
// non-embedding; 4B: 675M and 3,209M, its 417M vision encoder left out as domino leaves it out).
// Gemma-7B's and Qwen3-32B's heads are wider than hidden / heads (16 x 256 over 3072, 64 x 128
// over 5120).
class PublishedCount : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedCount, WithinOnePercent) {
  Result<ModelSpec> model = LoadModel(HfDir(GetParam().folder) + "/config.json");
  ASSERT_TRUE(model.ok()) << model.message();
  const double total = static_cast<double>(CountParameters(*model).total);
  const double published = static_cast<double>(GetParam().parameters);
  EXPECT_LT(std::abs(total - published) / published, 0.01)
      << GetParam().folder << ": domino counts " << total << ", published " << published;
}

INSTANTIATE_TEST_SUITE_P(
    HfConfig, PublishedCount,
    ::testing::Values(
        Published{"Meta-Llama-3-8B", 8'030'261'248}, Published{"Qwen2-7B", 7'615'616'512},
        Published{"Mistral-7B-v0.1", 7'241'732'096}, Published{"gpt2", 124'439'808},
        Published{"pythia-1.4b", 1'414'647'808}, Published{"gemma-2b", 2'506'172'416},
        Published{"gemma-7b", 8'537'680'896}, Published{"Qwen3-32B", 32'800'000'000},
        Published{"gemma-2-9b", 9'241'705'984}, Published{"Phi-3-mini-4k-instruct", 3'800'000'000},
        Published{"gemma-3-1b-pt", 1'000'000'000}, Published{"gemma-3-4b-pt", 3'884'000'000}),
    [](const auto& info) {
      std::string name = info.param.folder;
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

TEST(HfConfig, Llama3EightBIsTheCatalogModel) {
  Result<ModelSpec> hf = LoadModel(HfDir("Meta-Llama-3-8B"));  // a directory holding config.json
  ASSERT_TRUE(hf.ok()) << hf.message();
  Result<ModelSpec> catalog = LoadModel("llama3-8b");
  ASSERT_TRUE(catalog.ok()) << catalog.message();
  EXPECT_EQ(hf->name, "Meta-Llama-3-8B");
  EXPECT_EQ(ModelToFlowYaml(*hf).substr(ModelToFlowYaml(*hf).find(',')),
            ModelToFlowYaml(*catalog).substr(ModelToFlowYaml(*catalog).find(',')));
  EXPECT_EQ(CountParameters(*hf).total, 8'030'261'248);  // exact: no approximation applies
}

TEST(HfConfig, FamiliesMapToDominoShapes) {
  Result<ModelSpec> qwen = LoadModel(HfDir("Qwen2-7B"));
  ASSERT_TRUE(qwen.ok()) << qwen.message();
  EXPECT_EQ(qwen->layers, 28);
  EXPECT_EQ(qwen->hidden, 3584);
  EXPECT_EQ(qwen->heads, 28);
  EXPECT_EQ(qwen->kv_heads, 4);
  EXPECT_EQ(qwen->ffn, 18944);
  EXPECT_EQ(qwen->vocab, 152064);
  EXPECT_EQ(qwen->seq_len, 131072);
  EXPECT_EQ(qwen->activation, Activation::kSwiglu);
  EXPECT_EQ(qwen->norm, Norm::kRmsNorm);
  EXPECT_FALSE(qwen->bias);
  EXPECT_FALSE(qwen->tied_embeddings);

  Result<ModelSpec> gpt2 = LoadModel(HfDir("gpt2") + "/config.json");
  ASSERT_TRUE(gpt2.ok()) << gpt2.message();
  EXPECT_EQ(gpt2->name, "gpt2");
  EXPECT_EQ(gpt2->layers, 12);
  EXPECT_EQ(gpt2->hidden, 768);
  EXPECT_EQ(gpt2->kv_heads, 12);
  EXPECT_EQ(gpt2->ffn, 4 * 768);  // n_inner: null
  EXPECT_EQ(gpt2->seq_len, 1024);
  EXPECT_EQ(gpt2->activation, Activation::kGelu);
  EXPECT_TRUE(gpt2->learned_positions());  // wpe
  EXPECT_EQ(gpt2->norm, Norm::kLayerNorm);
  EXPECT_TRUE(gpt2->bias);
  EXPECT_TRUE(gpt2->tied_embeddings);  // the transformers default, absent from the file

  Result<ModelSpec> gemma = LoadModel(HfDir("gemma-2b"));
  ASSERT_TRUE(gemma.ok()) << gemma.message();
  EXPECT_EQ(gemma->kv_heads, 1);
  EXPECT_EQ(gemma->head_width(), 256);  // 8 x 256 = 2048: hidden / heads
  EXPECT_EQ(gemma->head_dim, 0);
  EXPECT_EQ(gemma->activation, Activation::kGeglu);  // hidden_act gelu: a GeLU gate
  EXPECT_TRUE(gemma->tied_embeddings);

  Result<ModelSpec> pythia = LoadModel(HfDir("pythia-1.4b"));
  ASSERT_TRUE(pythia.ok()) << pythia.message();
  EXPECT_EQ(pythia->kv_heads, 16);
  EXPECT_EQ(pythia->norm, Norm::kLayerNorm);
  EXPECT_FALSE(pythia->learned_positions());  // GPT-NeoX: LayerNorm and rotary positions
  EXPECT_FALSE(pythia->tied_embeddings);
}

TEST(HfConfig, ReadsCharactersPastTheBasicPlaneAsJsonDumpsWritesThem) {
  // json.dumps escapes an emoji as a UTF-16 surrogate pair; a backslash escaping a backslash
  // before "ud83d" is no escape of one.
  Result<ModelSpec> m = ParseHfConfig(
      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 8, "vocab_size": 100,
          "n_positions": 16, "id2label": {"0": "\ud83d\ude00", "1": "\\ud83d"}})",
      "config.json");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->layers, 2);
  // A malformed file still gets its position.
  Result<ModelSpec> bad = ParseHfConfig("{\"model_type\": \"gpt2\",\n \"n_layer\": }", "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("c.json:2:"));
}

TEST(HfConfig, ArchitecturesNameTheFamilyWithoutModelType) {
  Result<ModelSpec> model = ParseHfConfig(
      R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
          "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
          "num_key_value_heads": 2, "vocab_size": 100})",
      "/some/where/mini.json");
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_EQ(model->name, "mini");
  EXPECT_EQ(model->kv_heads, 2);
  EXPECT_EQ(model->activation, Activation::kSwiglu);
}

TEST(HfConfig, AConfigInTheWorkingFolderIsNamedAfterIt) {
  const std::string text =
      R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
          "vocab_size": 100})";
  const std::string here = std::filesystem::current_path().filename().string();
  for (const char* file : {"./config.json", "config.json"}) {
    Result<ModelSpec> model = ParseHfConfig(text, file);
    ASSERT_TRUE(model.ok()) << model.message();
    EXPECT_EQ(model->name, here) << file;
  }
  Result<ModelSpec> nested = ParseHfConfig(text, "/models/tiny/./config.json");
  ASSERT_TRUE(nested.ok()) << nested.message();
  EXPECT_EQ(nested->name, "tiny");
}

TEST(HfConfig, RefusesWhatItCannotRead) {
  ASSERT_TRUE(ParseHfConfig(LlamaWith(0, ""), "bad/config.json").ok());
  const std::string known =
      "llama, mistral, phi3, qwen2, qwen3, gemma, gemma2, gemma3_text, gemma3, gpt2, gpt_neox";
  ExpectError(
      LlamaWith(2, R"(  "model_type": "bert",)"),
      "bad/config.json:2:17: model_type: unsupported architecture 'bert'; domino reads " + known);
  // Why, where the config says: experts, or a language model nested in text_config (other than
  // Gemma 3's).
  ExpectError(LlamaWith(2, R"(  "model_type": "mixtral", "num_local_experts": 8,)"),
              "bad/config.json:2:17: model_type: unsupported architecture 'mixtral': a mixture "
              "of experts (num_local_experts 8), which domino does not model; domino reads " +
                  known);
  ExpectError(LlamaWith(2, R"(  "architectures": ["LlavaForConditionalGeneration"],
  "text_config": {"hidden_size": 2560},)"),
              "bad/config.json:2:21: architectures: unsupported architecture "
              "'LlavaForConditionalGeneration': its language model is in text_config, which "
              "domino does not read (give its sizes in a model YAML); domino reads " +
                  known);
  ExpectError(LlamaWith(2, R"(  "torch_dtype": "bfloat16",)"),
              "bad/config.json:1:1: model_type: missing required key (nor an `architectures` "
              "list): a Hugging Face config names its architecture, one of " +
                  known);
  ExpectError(LlamaWith(2, R"(  "architectures": ["BertForMaskedLM"],)"),
              "bad/config.json:2:21: architectures: unsupported architecture 'BertForMaskedLM'; "
              "domino reads " +
                  known);
  ExpectError(LlamaWith(3, R"(  "hidden_sizes": 64,)"),
              "bad/config.json:1:1: hidden_size: missing required key");
  ExpectError(LlamaWith(3, R"(  "hidden_size": "64",)"),
              "bad/config.json:3:18: hidden_size: expected an integer");
  ExpectError(LlamaWith(8, R"(  "num_hidden_layers": 0,)"),
              "bad/config.json:8:24: num_hidden_layers: must be between 1 and 32767, got 0");
  ExpectError(LlamaWith(7, R"(  "num_key_value_heads": 3,)"),
              "bad/config.json:7:26: num_key_value_heads: the 4 attention heads must be "
              "divisible by the 3 key/value heads");
  ExpectError(LlamaWith(7, R"(  "hidden_act": "relu",)"),
              "bad/config.json:7:17: hidden_act: unsupported activation 'relu': domino models "
              "gated SiLU (SwiGLU) or GeLU (GeGLU) MLPs");
  ExpectError(LlamaWith(7, R"(  "head_dim": 0,)"),
              "bad/config.json:7:15: head_dim: must be between 1 and 1000000, got 0");
  ExpectError(LlamaWith(7, R"(  "head_dim": 7,)"),
              "bad/config.json:7:15: head_dim: rotary positions need an even head width; 7 is "
              "odd");
  ExpectError(LlamaWith(3, R"(  "hidden_size": 66,)"),
              "bad/config.json:3:18: hidden_size: 66 must be divisible by the 4 attention heads, "
              "or head_dim given");
  ExpectError("[1, 2]", "bad/config.json:1:1: expected a JSON object (a config.json)");
  ExpectError("{\"model_type\": \"llama\"",
              "bad/config.json:1:23: invalid JSON: syntax error while parsing object - unexpected "
              "end of input; expected '}'");
  // What YAML takes and JSON readers (Transformers' json.load) refuse.
  ExpectError(LlamaWith(9, R"(  "vocab_size": 100,)"),
              "bad/config.json:10:1: invalid JSON: syntax error while parsing object key - "
              "unexpected '}'; expected string literal");
  ExpectError(LlamaWith(3, "  # the width"),
              "bad/config.json:3:3: invalid JSON: syntax error while parsing object key - invalid "
              "literal; last read: '\"llama\",<U+000A>  #'; expected string literal");
  ExpectError(LlamaWith(2, R"(  "model_type": 5,)"),
              "bad/config.json:2:17: model_type: expected a string");
}

// A key a config leaves out takes its transformers class's default; a null is what the class
// makes of None where it says, and an error elsewhere (transformers 5 refuses it).
TEST(HfConfig, ALeftOutKeyIsItsClasssDefaultAndANullItsNone) {
  auto parse = [](const std::string& text) {
    Result<ModelSpec> m = ParseHfConfig(text, "family/config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? *m : ModelSpec{};
  };
  // LlamaWith's 4 heads and 2 key/value heads (line 7); 32 heads where the default must divide.
  auto replaced = [](std::string text, const std::string& from, const std::string& to) {
    return text.replace(text.find(from), from.size(), to);
  };
  auto kv_left_out = [&](const std::string& type) {
    return parse(replaced(replaced(LlamaWith(7, ""), "llama", type), "\"num_attention_heads\": 4",
                          "\"num_attention_heads\": 32"))
        .kv_heads;
  };
  EXPECT_EQ(kv_left_out("llama"), 32);  // LlamaConfig's None: the heads
  EXPECT_EQ(kv_left_out("phi3"), 32);
  EXPECT_EQ(kv_left_out("mistral"), 8);  // MistralConfig's default
  EXPECT_EQ(kv_left_out("qwen2"), 32);
  EXPECT_EQ(kv_left_out("qwen3"), 32);
  EXPECT_EQ(kv_left_out("gemma"), 16);
  EXPECT_EQ(kv_left_out("gemma2"), 4);
  EXPECT_EQ(kv_left_out("gemma3_text"), 4);
  // A default that does not divide the heads says where it came from.
  ExpectError(replaced(LlamaWith(7, ""), "llama", "mistral"),
              "bad/config.json:1:1: num_key_value_heads: the 4 attention heads must be divisible "
              "by the 8 key/value heads (MistralConfig's default, the key left out)");
  // Null: the heads where the class says so (Llama to Qwen3), an error in Gemma's.
  EXPECT_EQ(parse(LlamaWith(7, R"(  "num_key_value_heads": null,)")).kv_heads, 4);
  ExpectError(replaced(LlamaWith(7, R"(  "num_key_value_heads": null,)"), "llama", "gemma"),
              "bad/config.json:7:26: num_key_value_heads: expected an integer, got null");
  // GPT-2 and GPT-NeoX have no grouped key/value heads: the key is not theirs.
  EXPECT_EQ(parse(LlamaWith(2, R"(  "model_type": "gpt_neox",)")).kv_heads, 4);
  // A null size, bool or activation is an error; a null head_dim is hidden / heads in Llama and
  // Mistral (their classes' None), an error in the others.
  ExpectError(LlamaWith(3, R"(  "hidden_size": null,)"),
              "bad/config.json:3:18: hidden_size: expected an integer, got null");
  ExpectError(LlamaWith(2, R"(  "model_type": "llama", "tie_word_embeddings": null,)"),
              "bad/config.json:2:49: tie_word_embeddings: expected true or false, got null");
  ExpectError(LlamaWith(2, R"(  "model_type": "llama", "hidden_act": null,)"),
              "bad/config.json:2:40: hidden_act: expected an activation's name, got null");
  EXPECT_EQ(parse(LlamaWith(2, R"(  "model_type": "llama", "head_dim": null,)")).head_dim, 0);
  ExpectError(LlamaWith(2, R"(  "model_type": "qwen3", "head_dim": null,)"),
              "bad/config.json:2:38: head_dim: expected an integer, got null");
  // GPT-2's MLP is n_inner wide, 4 x n_embd for null; intermediate_size is not GPT-2's key.
  const ModelSpec gpt2 = parse(
      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 256,
          "vocab_size": 100, "n_inner": null, "intermediate_size": 777})");
  EXPECT_EQ(gpt2.ffn, 256);
  // Gemma3ForConditionalGeneration's own tie_word_embeddings, where given, over text_config's
  // (transformers 5 reads the outer one).
  const std::string gemma3 = R"({"model_type": "gemma3", %s"text_config": {"hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
      "tie_word_embeddings": false}})";
  auto with_outer = [&](const std::string& outer) { return replaced(gemma3, "%s", outer); };
  EXPECT_FALSE(parse(with_outer("")).tied_embeddings);
  EXPECT_TRUE(parse(with_outer(R"("tie_word_embeddings": true, )")).tied_embeddings);
  // The key each family's MLP reads: Gemma's hidden_act, Gemma 2's and 3's hidden_activation.
  EXPECT_EQ(parse(LlamaWith(2, R"(  "model_type": "gemma", "hidden_act": "silu",
  "hidden_activation": "gelu_pytorch_tanh",)"))
                .activation,
            Activation::kSwiglu);
  EXPECT_EQ(parse(LlamaWith(2, R"(  "model_type": "gemma2", "hidden_act": "silu",)")).activation,
            Activation::kGeglu);  // Gemma2Config's hidden_activation default
  // Biases: Llama's attention_bias and mlp_bias; Qwen3's and Gemma's MLPs have none.
  EXPECT_FALSE(parse(LlamaWith(2, R"(  "model_type": "qwen3", "mlp_bias": true,)")).bias);
  const ModelSpec attention_bias =
      parse(LlamaWith(2, R"(  "model_type": "llama", "attention_bias": true,)"));
  EXPECT_TRUE(attention_bias.bias);
  EXPECT_THAT(Texts(attention_bias),
              ::testing::ElementsAre("biases on the attention's linears only (attention_bias), "
                                     "none on the MLP's: priced and exported with biases on every "
                                     "linear"));
  EXPECT_TRUE(Texts(parse(LlamaWith(2, R"(  "model_type": "llama", "attention_bias": true,
  "mlp_bias": true,)")))
                  .empty());
}

// Heads wider than hidden / heads: Q and the attention's output are heads x head_dim wide, K and
// V kv_heads x head_dim; the family's default head_dim where the key is absent.
TEST(HfConfig, HeadsNeedNotBeHiddenOverHeadsWide) {
  Result<ModelSpec> gemma = LoadModel(HfDir("gemma-7b"));
  ASSERT_TRUE(gemma.ok()) << gemma.message();
  EXPECT_EQ(gemma->head_dim, 256);
  EXPECT_EQ(gemma->q_hidden(), 4096);
  EXPECT_EQ(gemma->kv_hidden(), 4096);
  // The Gemma report's Table 2: 7,751,248,896 non-embedding parameters.
  const ParameterCounts counts = CountParameters(*gemma);
  EXPECT_EQ(counts.total - counts.embedding, 7'751'248'896);

  Result<ModelSpec> qwen = LoadModel(HfDir("Qwen3-32B"));
  ASSERT_TRUE(qwen.ok()) << qwen.message();
  EXPECT_EQ(qwen->heads, 64);
  EXPECT_EQ(qwen->kv_heads, 8);
  EXPECT_EQ(qwen->head_dim, 128);
  EXPECT_EQ(qwen->q_hidden(), 8192);
  EXPECT_EQ(qwen->kv_hidden(), 1024);
  EXPECT_EQ(qwen->seq_len, 40960);
  EXPECT_FALSE(qwen->bias);
  EXPECT_FALSE(qwen->tied_embeddings);
  EXPECT_EQ(qwen->activation, Activation::kSwiglu);
  EXPECT_TRUE(qwen->qk_norm);
  EXPECT_THAT(Texts(*qwen), ::testing::IsEmpty());  // its QK-norm is priced

  // Absent: 256 in Gemma, 128 in Qwen3, hidden / heads (16 here) elsewhere; given as hidden /
  // heads, the spec is the one without it.
  auto head_dim = [](const std::string& type, const std::string& line) {
    std::string text = LlamaWith(2, "  \"model_type\": \"" + type + "\",");
    if (!line.empty()) text.replace(text.find("{\n") + 2, 0, line + "\n");
    Result<ModelSpec> m = ParseHfConfig(text, "c/config.json");
    EXPECT_TRUE(m.ok()) << m.message();
    return m.ok() ? std::pair{m->head_dim, m->head_width()} : std::pair{-1, -1};
  };
  EXPECT_EQ(head_dim("gemma", ""), std::pair(256, 256));
  EXPECT_EQ(head_dim("qwen3", ""), std::pair(128, 128));
  EXPECT_EQ(head_dim("llama", ""), std::pair(0, 16));
  EXPECT_EQ(head_dim("mistral", R"(  "head_dim": 16,)"), std::pair(0, 16));
  EXPECT_EQ(head_dim("mistral", R"(  "head_dim": 24,)"), std::pair(24, 24));
  // GPT-2 and GPT-NeoX read none: transformers makes their heads n_embd / n_head wide.
  Result<ModelSpec> neox = ParseHfConfig(
      R"({"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "head_dim": 32,
          "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 64})",
      "config.json");
  ASSERT_TRUE(neox.ok()) << neox.message();
  EXPECT_EQ(neox->head_dim, 0);
  EXPECT_EQ(neox->head_width(), 8);
}

// What a framework can be told to build is a field besides its approximation, which says how
// domino prices it; an export says whether it launches it (planner/export.h).
// Gemma 3: 1B's Gemma3ForCausalLM (gemma3_text) and 4B's Gemma3ForConditionalGeneration, whose
// language model is its text_config and whose vision tower domino leaves out. Five layers of six
// slide (Gemma3TextConfig: layer i attends in full when (i + 1) % sliding_window_pattern == 0).
TEST(HfConfig, Gemma3ReadsItsTextModel) {
  Result<ModelSpec> one = LoadModel(HfDir("gemma-3-1b-pt"));
  ASSERT_TRUE(one.ok()) << one.message();
  EXPECT_EQ(one->name, "gemma-3-1b-pt");
  EXPECT_EQ(one->layers, 26);
  EXPECT_EQ(one->hidden, 1152);
  EXPECT_EQ(one->heads, 4);
  EXPECT_EQ(one->kv_heads, 1);
  EXPECT_EQ(one->head_dim, 256);  // 4 x 256 over a hidden of 1152
  EXPECT_EQ(one->ffn, 6912);
  EXPECT_EQ(one->vocab, 262144);
  EXPECT_EQ(one->seq_len, 32768);
  EXPECT_EQ(one->activation, Activation::kGeglu);  // hidden_activation gelu_pytorch_tanh
  EXPECT_EQ(one->norm, Norm::kRmsNorm);
  EXPECT_FALSE(one->bias);
  EXPECT_TRUE(one->tied_embeddings);
  EXPECT_TRUE(one->qk_norm);
  EXPECT_TRUE(one->post_norms);
  EXPECT_EQ(one->window.tokens, 511);  // the query and 511 before it
  EXPECT_EQ(one->window.full_every, 6);
  for (int layer = 0; layer < one->layers; ++layer)
    EXPECT_EQ(one->window.Covers(layer), (layer + 1) % 6 != 0) << layer;
  EXPECT_THAT(
      Texts(*one),
      ::testing::ElementsAre(
          "a sliding attention window of 512 tokens (sliding_window: each query and the 511 "
          "before it) on 22 of 26 layers "
          "(sliding_window_pattern 6: layers 5, 11, 17, 23 attend in full): priced " +
          WindowPricing(511)));

  // The 4B's text_config leaves out the heads, the vocabulary and the positions: Gemma3TextConfig's
  // 8, 4 and 256 wide, 262,208 and 131,072.
  Result<ModelSpec> four = LoadModel(HfDir("gemma-3-4b-pt"));
  ASSERT_TRUE(four.ok()) << four.message();
  EXPECT_EQ(four->layers, 34);
  EXPECT_EQ(four->hidden, 2560);
  EXPECT_EQ(four->heads, 8);
  EXPECT_EQ(four->kv_heads, 4);
  EXPECT_EQ(four->head_dim, 256);
  EXPECT_EQ(four->ffn, 10240);
  EXPECT_EQ(four->vocab, 262208);
  EXPECT_EQ(four->seq_len, 131072);
  EXPECT_TRUE(four->tied_embeddings);
  EXPECT_TRUE(four->qk_norm);
  EXPECT_EQ(four->window.tokens, 1023);
  EXPECT_EQ(four->window.full_every, 6);
  EXPECT_THAT(Texts(*four),
              ::testing::ElementsAre(
                  "a sliding attention window of 1024 tokens (sliding_window: each query and the "
                  "1023 before it) on 29 of 34 layers "
                  "(sliding_window_pattern 6: layers 5, 11, 17, 23, 29 attend in full): priced "
                  "" + WindowPricing(1023),
                  "a vision tower (vision_config) and its projection into the language model "
                  "(Gemma3ForConditionalGeneration): priced and exported as the language model "
                  "alone"));

  // The Gemma 3 report's Table 1: 1B 302M embedding and 698M non-embedding parameters, 4B 675M
  // and 3,209M. domino counts two norms a layer of Gemma 3's four and no q_norm or k_norm
  // (1B: 2 x 1,152 + 2 x 256 weights a layer left out, 0.01%); the 4B's 675M holds more than
  // its 262,208 x 2,560 embedding (671M), which is 0.6% below.
  const struct {
    const ModelSpec& model;
    double embedding, non_embedding;
  } reports[] = {{*one, 302e6, 698e6}, {*four, 675e6, 3'209e6}};
  for (const auto& r : reports) {
    const ParameterCounts counts = CountParameters(r.model);
    const double embedding = static_cast<double>(counts.embedding);
    const double non_embedding = static_cast<double>(counts.total - counts.embedding);
    EXPECT_LT(std::abs(embedding - r.embedding) / r.embedding, 0.01) << r.model.name;
    EXPECT_LT(std::abs(non_embedding - r.non_embedding) / r.non_embedding, 0.01) << r.model.name;
  }
}
TEST(HfConfig, ReadsTabIndentedAndOneLineJson) {
  std::string tabs = LlamaWith(0, "");
  for (size_t at = tabs.find("\n  "); at != std::string::npos; at = tabs.find("\n  ", at))
    tabs.replace(at, 3, "\n\t");
  Result<ModelSpec> model = ParseHfConfig(tabs, "tabs.json");
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_EQ(model->hidden, 64);
  std::string one_line = LlamaWith(0, "");
  std::erase(one_line, '\n');
  EXPECT_TRUE(ParseHfConfig(one_line, "one.json").ok());
}

TEST(HfConfig, LoadModelReadsJsonAndDirectoriesOnly) {
  EXPECT_TRUE(IsHfConfigPath(HfDir("gpt2")));
  EXPECT_TRUE(IsHfConfigPath("x/config.json"));
  EXPECT_FALSE(IsHfConfigPath("x/model.yaml"));
  Result<ModelSpec> empty_dir = LoadModel(std::string(DOMINO_SOURCE_DIR) + "/tests/models/data");
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_THAT(empty_dir.message(), HasSubstr("must hold a Hugging Face config.json"));
}

}  // namespace
}  // namespace domino
