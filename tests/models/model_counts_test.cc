#include "models/model_counts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/models/tiny_models.h"

namespace domino {
namespace {

using testing_models::TinyGpt;
using testing_models::TinyLlama;

TEST(CountParameters, TinyGptByHand) {
  // Per layer: QKV 8*(8+2*8) = 192 + bias 24; proj 64 + 8; fc1 8*32 = 256 + 32; fc2 256 + 8;
  // two LayerNorms 2 * (8 + 8) = 32. Sum 872.
  ParameterCounts counts = CountParameters(TinyGpt());
  EXPECT_EQ(counts.per_layer, 872);
  EXPECT_EQ(counts.layers, 1744);
  EXPECT_EQ(counts.embedding, 80);
  EXPECT_EQ(counts.position_embedding, 128);  // 16 * 8
  EXPECT_EQ(counts.final_norm, 16);
  EXPECT_EQ(counts.lm_head, 0);
  EXPECT_EQ(counts.total, 1744 + 80 + 128 + 16);
  EXPECT_EQ(counts.matmul, 2 * (192 + 64 + 256 + 256) + 80);  // 1616
}

TEST(CountParameters, TinyLlamaByHand) {
  // head_dim 2, kv_hidden 4. Per layer: QKV 8*(8+2*4) = 128; proj 64; gate, up, down 3*8*32 =
  // 768; two RMSNorms 2 * 8 = 16. Sum 976.
  ParameterCounts counts = CountParameters(TinyLlama());
  EXPECT_EQ(counts.per_layer, 976);
  EXPECT_EQ(counts.layers, 1952);
  EXPECT_EQ(counts.embedding, 80);
  EXPECT_EQ(counts.position_embedding, 0);
  EXPECT_EQ(counts.final_norm, 8);
  EXPECT_EQ(counts.lm_head, 80);
  EXPECT_EQ(counts.total, 1952 + 80 + 8 + 80);
  EXPECT_EQ(counts.matmul, 2 * (128 + 64 + 768) + 80);  // 2000
}

TEST(CountParameters, SwigluBiasesByHand) {
  // Biases: QKV 8 + 2*4 = 16, proj 8, gate and up 2*32 = 64, down 8. Sum 96; matmul unchanged.
  ModelSpec model = TinyLlama();
  model.bias = true;
  EXPECT_EQ(CountParameters(model).per_layer, 976 + 96);
  EXPECT_EQ(CountParameters(model).matmul, 2000);
}

TEST(CountParameters, AGeluGateHasSwiglusThreeMatrices) {
  // GeGLU (Gemma's): gate, up and down as SwiGLU's, 3 * 8 * 32 = 768 of the 976.
  ModelSpec model = TinyLlama();
  model.activation = Activation::kGeglu;
  EXPECT_TRUE(Gated(model.activation));
  EXPECT_FALSE(Gated(Activation::kGelu) || Gated(Activation::kSquaredRelu));
  EXPECT_EQ(CountParameters(model).per_layer, 976);
  EXPECT_EQ(CountParameters(model).matmul, 2000);
}

TEST(TrainingFlopsPerToken, TinyGptByHand) {
  // 6 * matmul = 6 * 1616 = 9696; attention 12 * layers * seq_len * hidden = 12*2*16*8 = 3072.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(TinyGpt(), 16), 9696.0 + 3072.0);
  // Longer sequences only grow the attention term: 12*2*64*8 = 12288.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(TinyGpt(), 64), 9696.0 + 12288.0);
}

TEST(TrainingFlopsPerToken, Gpt3_175bMatchesTheUsualFormula) {
  Result<ModelSpec> model = LoadModel("gpt3-175b");
  ASSERT_TRUE(model.ok()) << model.message();
  const double n = static_cast<double>(CountParameters(*model).matmul);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(*model, 2048), 6 * n + 12.0 * 96 * 2048 * 12288);
  // matmul = 96 * 12 * 12288^2 + 50257 * 12288 = 174,563,733,504: about 1.076 TFLOP per token.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(*model, 2048), 1'076'373'430'272.0);
}

// Published sizes. Our counts include embeddings (and positions, final norm), as the sources do.
struct PublishedSize {
  const char* name;
  double parameters;
  const char* source;
};

constexpr PublishedSize kPublishedSizes[] = {
    {"gpt3-2.7b", 2.7e9, "Brown et al. 2020 (GPT-3), Table 2.1"},
    {"gpt3-6.7b", 6.7e9, "Brown et al. 2020 (GPT-3), Table 2.1"},
    {"gpt3-13b", 13.0e9, "Brown et al. 2020 (GPT-3), Table 2.1"},
    {"gpt3-30b", 30e9, "nominal size of the GPT-3-style 30B shape"},
    {"gpt3-175b", 175.0e9, "Brown et al. 2020 (GPT-3), Table 2.1"},
    {"gpt-22b", 22e9, "Korthikanti et al. 2022 (arXiv 2205.05198), Table 3"},
    {"gpt-530b", 530e9, "Narayanan et al. 2021 (arXiv 2104.04473) / Smith et al. 2022 (MT-NLG)"},
    {"gpt-1t", 1008e9, "Narayanan et al. 2021 (arXiv 2104.04473), Table 1: 1008B"},
    {"llama2-7b", 6'738'415'616, "Llama 2 release (meta-llama/Llama-2-7b-hf), exact"},
    {"llama2-13b", 13'015'864'320, "Llama 2 release (meta-llama/Llama-2-13b-hf), exact"},
    {"llama2-70b", 68'976'648'192, "Llama 2 release (meta-llama/Llama-2-70b-hf), exact"},
    {"llama3-8b", 8.03e9, "Llama 3 release (meta-llama/Meta-Llama-3-8B): 8.03B"},
    {"llama3-70b", 70.55e9, "Llama 3 release (meta-llama/Meta-Llama-3-70B): 70.55B"},
    {"llama3-405b", 405.85e9, "Llama 3.1 release (meta-llama/Llama-3.1-405B): 405.85B"},
};

TEST(CountParameters, CatalogMatchesPublishedSizes) {
  for (const PublishedSize& published : kPublishedSizes) {
    Result<ModelSpec> model = LoadModel(published.name);
    ASSERT_TRUE(model.ok()) << model.message();
    const double ours = static_cast<double>(CountParameters(*model).total);
    EXPECT_NEAR(ours / published.parameters, 1.0, 0.02)
        << published.name << ": ours " << ours << " vs " << published.parameters << " ("
        << published.source << ")";
  }
}

TEST(CountParameters, LlamaCountsAreExact) {
  for (const PublishedSize& published : kPublishedSizes) {
    if (std::string(published.name).rfind("llama2-", 0) != 0) continue;
    Result<ModelSpec> model = LoadModel(published.name);
    ASSERT_TRUE(model.ok()) << model.message();
    EXPECT_EQ(CountParameters(*model).total, static_cast<int64_t>(published.parameters))
        << published.name;
  }
  Result<ModelSpec> llama3 = LoadModel("llama3-8b");
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(CountParameters(*llama3).total, 8'030'261'248);  // the released checkpoint's count
}

TEST(CountParameters, PartsAddUpForEveryCatalogModel) {
  for (const EmbeddedFile& file : ModelCatalog()) {
    Result<ModelSpec> model = ParseModel(file.text, file.path);
    ASSERT_TRUE(model.ok()) << model.message();
    ParameterCounts c = CountParameters(*model);
    EXPECT_EQ(c.layers, c.per_layer * model->layers) << file.path;
    EXPECT_EQ(c.total, c.layers + c.embedding + c.position_embedding + c.final_norm + c.lm_head)
        << file.path;
    EXPECT_LT(c.matmul, c.total + c.embedding) << file.path;
    EXPECT_GT(c.matmul, 0) << file.path;
  }
}

TEST(CountParameters, LargestAllowedModelDoesNotOverflow) {
  ModelSpec model = TinyGpt();
  model.layers = 100'000;
  model.hidden = 1'000'000;
  model.heads = 1;
  model.kv_heads = 1;
  model.ffn = 10'000'000;
  model.vocab = 100'000'000;
  model.seq_len = 100'000'000;
  model.activation = Activation::kSwiglu;
  ParameterCounts c = CountParameters(model);
  EXPECT_GT(c.total, 0);
  EXPECT_GT(c.matmul, 0);
  EXPECT_GT(static_cast<double>(c.total), 3.3e18);
}

}  // namespace
}  // namespace domino
