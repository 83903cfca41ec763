// What the tests of models/hf_config.cc and models/hf_approximations.cc share: the configs under
// tests/models/data/hf, a model's approximations as text, and a small Llama config to break.
#ifndef DOMINO_TESTS_MODELS_HF_TEST_UTIL_H_
#define DOMINO_TESTS_MODELS_HF_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/hf_config.h"
#include "models/model_spec.h"

namespace domino::hf_test {

inline std::string HfDir(const std::string& model) {
  return std::string(DOMINO_SOURCE_DIR) + "/tests/models/data/hf/" + model;
}

// A model's approximations as `domino models` prints them.
inline std::vector<std::string> Texts(const ModelSpec& model) {
  std::vector<std::string> texts;
  for (const Approximation& a : model.approximations) texts.push_back(a.Text());
  return texts;
}

// A Llama config, one key per line, with `replace` substituted for line `line` (1-based; line 1
// is "{").
inline std::string LlamaWith(int line, const std::string& replace) {
  std::vector<std::string> lines = {
      "{",
      R"(  "model_type": "llama",)",
      R"(  "hidden_size": 64,)",
      R"(  "intermediate_size": 128,)",
      R"(  "max_position_embeddings": 256,)",
      R"(  "num_attention_heads": 4,)",
      R"(  "num_key_value_heads": 2,)",
      R"(  "num_hidden_layers": 2,)",
      R"(  "vocab_size": 100)",
      "}",
  };
  if (line > 0) lines[line - 1] = replace;
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

// Parsing `text` fails with `expected`.
inline void ExpectError(const std::string& text, const std::string& expected) {
  Result<ModelSpec> model = ParseHfConfig(text, "bad/config.json");
  ASSERT_FALSE(model.ok()) << text;
  EXPECT_EQ(model.message(), expected) << text;
}

}  // namespace domino::hf_test

#endif  // DOMINO_TESTS_MODELS_HF_TEST_UTIL_H_
