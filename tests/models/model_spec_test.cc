#include "models/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "models/base/file_io.h"

namespace domino {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A valid model, one key per line, so a test can replace line N and expect "bad.yaml:N:".
const std::vector<std::string> kGoodLines = {
    "name: tiny",        // 1
    "layers: 2",         // 2
    "hidden: 8",         // 3
    "heads: 2",          // 4
    "ffn: 32",           // 5
    "vocab: 10",         // 6
    "seq_len: 16",       // 7
    "activation: gelu",  // 8
    "norm: layernorm",   // 9
};

std::string Join(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// The good model with line `line` (1-based) replaced by `replacement`.
std::string WithLine(int line, const std::string& replacement) {
  std::vector<std::string> lines = kGoodLines;
  lines[line - 1] = replacement;
  return Join(lines);
}

// Parses `text` as "bad.yaml" and expects an error at `line` that names `key`.
void ExpectError(const std::string& text, int line, const std::string& key,
                 const std::string& rule) {
  Result<ModelSpec> model = ParseModel(text, "bad.yaml");
  ASSERT_FALSE(model.ok()) << text;
  EXPECT_THAT(model.message(), HasSubstr("bad.yaml:" + std::to_string(line) + ":")) << text;
  EXPECT_THAT(model.message(), HasSubstr(key)) << text;
  EXPECT_THAT(model.message(), HasSubstr(rule)) << text;
}

TEST(ParseModel, ReadsEveryKeyAndDefaults) {
  Result<ModelSpec> model = ParseModel(Join(kGoodLines), "good.yaml");
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_EQ(model->name, "tiny");
  EXPECT_EQ(model->layers, 2);
  EXPECT_EQ(model->hidden, 8);
  EXPECT_EQ(model->heads, 2);
  EXPECT_EQ(model->kv_heads, 2);  // defaults to heads
  EXPECT_EQ(model->ffn, 32);
  EXPECT_EQ(model->vocab, 10);
  EXPECT_EQ(model->seq_len, 16);
  EXPECT_EQ(model->activation, Activation::kGelu);
  EXPECT_EQ(model->norm, Norm::kLayerNorm);
  EXPECT_TRUE(model->bias);
  EXPECT_TRUE(model->tied_embeddings);
  EXPECT_EQ(model->head_dim, 0);  // hidden / heads
  EXPECT_EQ(model->head_width(), 4);
  EXPECT_EQ(model->q_hidden(), 8);
  EXPECT_EQ(model->positions, Positions::kByNorm);
  EXPECT_TRUE(model->learned_positions());  // LayerNorm
}

// Nemotron-4: LayerNorm with rotary positions; and learned positions on an RMSNorm model. The
// flow YAML names them only when the model does, and reads back the same.
TEST(ParseModel, PositionsOverrideTheNormsDefault) {
  Result<ModelSpec> rotary = ParseModel(Join(kGoodLines) + "positions: rotary\n", "good.yaml");
  ASSERT_TRUE(rotary.ok()) << rotary.message();
  EXPECT_EQ(rotary->norm, Norm::kLayerNorm);
  EXPECT_FALSE(rotary->learned_positions());
  std::vector<std::string> lines = kGoodLines;
  lines[8] = "norm: rmsnorm";
  lines.push_back("positions: learned");
  Result<ModelSpec> learned = ParseModel(Join(lines), "good.yaml");
  ASSERT_TRUE(learned.ok()) << learned.message();
  EXPECT_TRUE(learned->learned_positions());
  for (const ModelSpec& m : {*rotary, *learned}) {
    Result<ModelSpec> back = ParseModel(ModelToFlowYaml(m), "flow.yaml");
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->positions, m.positions);
  }
  Result<ModelSpec> by_norm = ParseModel(Join(kGoodLines), "good.yaml");
  ASSERT_TRUE(by_norm.ok());
  EXPECT_EQ(ModelToFlowYaml(*by_norm).find("positions"), std::string::npos);
}

TEST(ParseModel, ReadsOptionalKeys) {
  std::vector<std::string> lines = kGoodLines;
  lines[7] = "activation: swiglu";
  lines[8] = "norm: rmsnorm";
  lines.push_back("kv_heads: 1");
  lines.push_back("bias: false");
  lines.push_back("tied_embeddings: false");
  Result<ModelSpec> model = ParseModel(Join(lines), "good.yaml");
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_EQ(model->kv_heads, 1);
  EXPECT_EQ(model->kv_hidden(), 4);
  EXPECT_EQ(model->activation, Activation::kSwiglu);
  EXPECT_EQ(model->norm, Norm::kRmsNorm);
  EXPECT_FALSE(model->bias);
  EXPECT_FALSE(model->tied_embeddings);
  EXPECT_FALSE(model->learned_positions());
}

// The attention's features a model YAML states, as a Hugging Face config does: each one an
// approximation (domino prices the model without it), written back by ModelToFlowYaml.
TEST(ParseModel, ReadsTheAttentionsFeatures) {
  std::vector<std::string> lines = kGoodLines;
  lines[1] = "layers: 12";
  lines[8] = "norm: rmsnorm";
  lines.push_back("bias: false");                                                   // 10
  lines.push_back("qkv_bias: true");                                                // 11
  lines.push_back("qk_norm: true");                                                 // 12
  lines.push_back("rotary_fraction: 0.25");                                         // 13
  lines.push_back("window: {tokens: 8, first_layer: 2, every: 2, full_every: 6}");  // 14
  lines.push_back("post_norms: true");                                              // 15
  lines.push_back("logit_softcap: 30");                                             // 16
  lines.push_back("attention_softcap: 50");                                         // 17
  Result<ModelSpec> model = ParseModel(Join(lines), "good.yaml");
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_TRUE(model->qkv_bias);
  EXPECT_TRUE(model->qk_norm);
  EXPECT_TRUE(model->post_norms);
  EXPECT_EQ(model->logit_softcap, 30);
  EXPECT_EQ(model->attention_softcap, 50);
  EXPECT_EQ(model->rotary_fraction, 0.25);
  EXPECT_EQ(model->window.tokens, 8);
  EXPECT_EQ(model->window.first_layer, 2);
  EXPECT_EQ(model->window.every, 2);
  EXPECT_EQ(model->window.full_every, 6);
  // Layers 2, 4, 6, 8 and 10, less 5 and 11 (which are not even among them): five of twelve.
  // The QK-norm and the post-norms are priced: no approximation.
  std::vector<std::string> texts;
  for (const Approximation& a : model->approximations) texts.push_back(a.Text());
  EXPECT_THAT(texts,
              ::testing::ElementsAre(
                  "biases on Q, K and V only (qkv_bias): priced without them",
                  "rotary positions on 25% of each head (rotary_fraction 0.25): priced as "
                  "rotating all of it",
                  "a sliding attention window of 8 tokens before each query (window) on 5 of 12 "
                  "layers: "
                  "priced " +
                      WindowPricing(8)));
  const std::string flow = ModelToFlowYaml(*model);
  EXPECT_THAT(flow, HasSubstr("tied_embeddings: true, qkv_bias: true, qk_norm: true, "
                              "post_norms: true, logit_softcap: 30, attention_softcap: 50, "
                              "rotary_fraction: 0.25, window: "
                              "{tokens: 8, first_layer: 2, every: "
                              "2, full_every: 6}}"));
  Result<ModelSpec> back = ParseModel(flow, "flow.yaml");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(ModelToFlowYaml(*back), flow);
  EXPECT_EQ(back->approximations.size(), 3u);

  // A window of tokens alone covers every layer; a model without features writes none.
  Result<ModelSpec> every = ParseModel(Join(kGoodLines) + "window: 4\n", "good.yaml");
  ASSERT_TRUE(every.ok()) << every.message();
  EXPECT_EQ(every->window.tokens, 4);
  ASSERT_EQ(every->approximations.size(), 1u);
  EXPECT_THAT(every->approximations[0].what, HasSubstr("on every layer"));
  EXPECT_THAT(ModelToFlowYaml(*every), HasSubstr("tied_embeddings: true, window: {tokens: 4}}"));
  Result<ModelSpec> plain = ParseModel(Join(kGoodLines), "good.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->approximations.empty());
  EXPECT_THAT(ModelToFlowYaml(*plain), HasSubstr("tied_embeddings: true}"));
}

TEST(ParseModel, RefusesFeaturesItCannotState) {
  const std::string good = Join(kGoodLines);
  ExpectError(good + "qkv_bias: true\n", 10, "qkv_bias", "need bias: false");
  ExpectError(good + "rotary_fraction: 0.5\n", 10, "rotary_fraction",
              "needs rotary positions; this model's are learned");
  ExpectError(good + "positions: rotary\nrotary_fraction: 0\n", 11, "rotary_fraction", "");
  ExpectError(good + "positions: rotary\nrotary_fraction: 1.5\n", 11, "rotary_fraction", "");
  ExpectError(good + "window: 0\n", 10, "window", "");
  ExpectError(good + "window: {every: 2}\n", 10, "window.tokens", "missing required key");
  ExpectError(good + "window: {tokens: 4, full_every: 1}\n", 10, "window.full_every",
              "1 would make every layer attend in full");
  ExpectError(good + "window: {tokens: 4, first_layer: 2}\n", 10, "window.first_layer",
              "must be below layers (2)");
  ExpectError(good + "window: {tokens: 4, first_layer: 1, full_every: 2}\n", 10, "window",
              "covers no layer");
  ExpectError(good + "window: {tokens: 4, evry: 2}\n", 10, "window.evry", "every");
  ExpectError(good + "window: [4]\n", 10, "window", "expected a number of tokens or a mapping");
  ExpectError(good + "window: 4k\n", 10, "window", "expected an integer");
}

// head_dim: heads wider or narrower than hidden / heads (Gemma-7B, Qwen3-32B); then hidden
// need not divide by heads. The flow YAML writes it only where it differs from hidden / heads.
TEST(ParseModel, HeadDimSetsTheAttentionsWidth) {
  Result<ModelSpec> wide = ParseModel(WithLine(3, "hidden: 9") + "head_dim: 6\n", "good.yaml");
  ASSERT_TRUE(wide.ok()) << wide.message();
  EXPECT_EQ(wide->head_dim, 6);
  EXPECT_EQ(wide->q_hidden(), 12);
  EXPECT_EQ(wide->kv_hidden(), 12);
  const std::string flow = ModelToFlowYaml(*wide);
  EXPECT_THAT(flow, HasSubstr("kv_heads: 2, head_dim: 6, ffn: 32"));
  Result<ModelSpec> again = ParseModel(flow, "flow.yaml");
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->head_dim, 6);
  EXPECT_EQ(again->hidden, 9);

  Result<ModelSpec> same = ParseModel(Join(kGoodLines) + "head_dim: 4\n", "good.yaml");
  ASSERT_TRUE(same.ok()) << same.message();
  EXPECT_EQ(same->head_dim, 0);
  EXPECT_THAT(ModelToFlowYaml(*same), Not(HasSubstr("head_dim")));
  ExpectError(Join(kGoodLines) + "head_dim: 0\n", 10, "head_dim", "positive");
  // heads x head_dim is bounded (it is an int in every count), and rotary positions turn pairs.
  ExpectError(WithLine(4, "heads: 4096") + "kv_heads: 4096\nhead_dim: 1000000\n", 11, "head_dim",
              "heads x head_dim = 4096 x 1000000 = 4096000000 must be at most 10000000");
  ExpectError(Join(kGoodLines) + "positions: rotary\nhead_dim: 7\n", 11, "head_dim",
              "rotary positions need an even head width; 7 is odd");
  ExpectError(WithLine(3, "hidden: 14") + "positions: rotary\n", 4, "heads",
              "rotary positions need an even head width; 7 is odd (hidden 14 / heads 2)");
  EXPECT_TRUE(ParseModel(Join(kGoodLines) + "head_dim: 7\n", "learned.yaml").ok());
}

TEST(ParseModel, EnumNames) {
  EXPECT_EQ(ActivationName(Activation::kGelu), "gelu");
  EXPECT_EQ(ActivationName(Activation::kSwiglu), "swiglu");
  EXPECT_EQ(ActivationName(Activation::kSquaredRelu), "squared-relu");
  Result<ModelSpec> squared = ParseModel(WithLine(8, "activation: squared-relu"), "good.yaml");
  ASSERT_TRUE(squared.ok()) << squared.message();
  EXPECT_EQ(squared->activation, Activation::kSquaredRelu);
  EXPECT_EQ(ActivationName(Activation::kGeglu), "geglu");
  Result<ModelSpec> geglu = ParseModel(WithLine(8, "activation: geglu"), "good.yaml");
  ASSERT_TRUE(geglu.ok()) << geglu.message();
  EXPECT_EQ(geglu->activation, Activation::kGeglu);
  EXPECT_EQ(NormName(Norm::kLayerNorm), "layernorm");
  EXPECT_EQ(NormName(Norm::kRmsNorm), "rmsnorm");
}

TEST(ParseModelErrors, MalformedYaml) {
  ExpectError(WithLine(3, "hidden: 8: 9"), 3, "bad.yaml", "invalid YAML");
}

TEST(ParseModelErrors, UnknownKeySuggestsNearest) {
  ExpectError(WithLine(3, "hiden: 8"), 3, "hiden", "did you mean 'hidden'");
  ExpectError(Join(kGoodLines) + "biass: true\n", 10, "biass", "did you mean 'bias'");
  ExpectError(Join(kGoodLines) + "colour: red\n", 10, "colour", "unknown key");
}

TEST(ParseModelErrors, MissingRequiredKey) {
  std::vector<std::string> lines = kGoodLines;
  lines.erase(lines.begin() + 4);  // ffn
  ExpectError(Join(lines), 1, "ffn", "missing required key");
}

TEST(ParseModelErrors, ZeroAndNegativeSizes) {
  ExpectError(WithLine(2, "layers: 0"), 2, "layers", "must be a positive integer, got 0");
  ExpectError(WithLine(3, "hidden: -8"), 3, "hidden", "must be a positive integer, got -8");
  ExpectError(WithLine(6, "vocab: 0"), 6, "vocab", "positive");
  ExpectError(WithLine(7, "seq_len: -1"), 7, "seq_len", "positive");
  ExpectError(Join(kGoodLines) + "kv_heads: 0\n", 10, "kv_heads", "positive");
}

TEST(ParseModelErrors, HiddenNotDivisibleByHeads) {
  ExpectError(WithLine(3, "hidden: 9"), 3, "hidden",
              "hidden (9) must be divisible by heads (2), or head_dim given");
}

TEST(ParseModelErrors, HeadsNotDivisibleByKvHeads) {
  std::vector<std::string> lines = kGoodLines;
  lines[3] = "heads: 4";
  lines.push_back("kv_heads: 3");
  ExpectError(Join(lines), 10, "kv_heads", "heads (4) must be divisible by kv_heads (3)");
}

TEST(ParseModelErrors, UnknownEnumValues) {
  ExpectError(WithLine(8, "activation: relu"), 8, "activation",
              "unknown value 'relu' (expected gelu | swiglu | squared-relu | geglu)");
  ExpectError(WithLine(9, "norm: batchnorm"), 9, "norm",
              "unknown value 'batchnorm' (expected layernorm | rmsnorm)");
  ExpectError(Join(kGoodLines) + "positions: alibi\n", 10, "positions",
              "unknown value 'alibi' (expected learned | rotary)");
}

TEST(ParseModelErrors, WrongTypes) {
  ExpectError(WithLine(2, "layers: abc"), 2, "layers", "expected an integer, got 'abc'");
  ExpectError(WithLine(2, "layers: 1.5"), 2, "layers", "expected an integer, got '1.5'");
  ExpectError(WithLine(2, "layers: [1, 2]"), 2, "layers", "expected an integer");
  ExpectError(WithLine(2, "layers: nan"), 2, "layers", "expected an integer");
  ExpectError(Join(kGoodLines) + "bias: yes please\n", 10, "bias", "expected true or false");
  ExpectError(WithLine(1, "name: {a: 1}"), 1, "name", "expected a non-empty string");
  ExpectError(WithLine(1, "name: ''"), 1, "name", "expected a non-empty string");
  ExpectError(WithLine(1, "name:"), 1, "name", "has no value");
}

TEST(ParseModelErrors, DuplicateKey) {
  ExpectError(Join(kGoodLines) + "layers: 3\n", 10, "layers", "duplicate key");
}

TEST(ParseModelErrors, NonMappingDocument) {
  Result<ModelSpec> model = ParseModel("- a\n- b\n", "bad.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.message(), HasSubstr("bad.yaml:1:1:"));
  EXPECT_THAT(model.message(), HasSubstr("expected a mapping"));
  EXPECT_FALSE(ParseModel("", "empty.yaml").ok());
}

TEST(ParseModelErrors, OutOfRangeIntegers) {
  ExpectError(WithLine(2, "layers: 99999999999999999999"), 2, "layers", "out of range");
  ExpectError(WithLine(2, "layers: 32768"), 2, "layers", "must be between 1 and 32767");
  ExpectError(WithLine(3, "hidden: 4294967296"), 3, "hidden", "must be between 1 and 1000000");
  ExpectError(WithLine(6, "vocab: 100000001"), 6, "vocab", "must be between 1 and 100000000");
}

TEST(LoadModel, EveryCatalogModelLoadsUnderItsOwnName) {
  ASSERT_EQ(ModelCatalog().size(), 14u);
  for (const EmbeddedFile& file : ModelCatalog()) {
    std::string stem = std::filesystem::path(std::string(file.path)).stem().string();
    EXPECT_EQ(file.name, stem) << "embedded catalog name differs from the file stem of "
                               << file.path;
    Result<ModelSpec> model = LoadModel(stem);
    ASSERT_TRUE(model.ok()) << model.message();
    EXPECT_EQ(model->name, stem);
    EXPECT_EQ(model->hidden % model->heads, 0);
  }
}

TEST(LoadModel, CatalogShapes) {
  Result<ModelSpec> gpt = LoadModel("gpt3-13b");
  ASSERT_TRUE(gpt.ok()) << gpt.message();
  EXPECT_EQ(gpt->layers, 40);
  EXPECT_EQ(gpt->hidden, 5120);
  EXPECT_EQ(gpt->heads, 64);
  EXPECT_EQ(gpt->ffn, 4 * 5120);
  EXPECT_EQ(gpt->vocab, 50257);
  Result<ModelSpec> llama = LoadModel("llama3-70b");
  ASSERT_TRUE(llama.ok()) << llama.message();
  EXPECT_EQ(llama->kv_heads, 8);
  EXPECT_EQ(llama->activation, Activation::kSwiglu);
  EXPECT_EQ(llama->norm, Norm::kRmsNorm);
  EXPECT_FALSE(llama->bias);
  EXPECT_FALSE(llama->tied_embeddings);
  ASSERT_TRUE(LoadModel("gpt3-2.7b").ok());
}

TEST(LoadModel, UnknownNameListsCatalog) {
  Result<ModelSpec> model = LoadModel("gpt4-1t");
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.message(), HasSubstr("unknown model 'gpt4-1t'"));
  EXPECT_THAT(model.message(), HasSubstr("gpt3-13b"));
  EXPECT_THAT(model.message(), HasSubstr("gpt3-2.7b"));
  EXPECT_THAT(model.message(), HasSubstr("llama3-405b"));
}

TEST(LoadModel, ReadsAFileByPath) {
  std::string dir = testing::TempDir();
  std::string path =
      (std::filesystem::path(dir) / ("domino_model_" + std::to_string(getpid()) + ".yaml"))
          .string();
  ASSERT_TRUE(WriteFileAtomically(path, Join(kGoodLines), /*overwrite=*/true).ok());
  Result<ModelSpec> model = LoadModel(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(model.ok()) << model.message();
  EXPECT_EQ(model->name, "tiny");
  EXPECT_EQ(model->layers, 2);
}

TEST(LoadModel, ErrorsInAFileNameThePath) {
  std::string path = (std::filesystem::path(testing::TempDir()) /
                      ("domino_bad_" + std::to_string(getpid()) + ".yaml"))
                         .string();
  ASSERT_TRUE(WriteFileAtomically(path, WithLine(3, "hidden: 9"), true).ok());
  Result<ModelSpec> model = LoadModel(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.message(), HasSubstr(path + ":3:"));
}

}  // namespace
}  // namespace domino
