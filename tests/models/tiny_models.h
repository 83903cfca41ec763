#ifndef DOMINO_TESTS_MODELS_TINY_MODELS_H_
#define DOMINO_TESTS_MODELS_TINY_MODELS_H_

#include "models/model_spec.h"

namespace domino::testing_models {

// A GPT small enough to count by hand: 2 layers, hidden 8, 2 heads, FFN 32, vocabulary 10,
// sequence 16; GeLU, LayerNorm, biases, tied embeddings.
inline ModelSpec TinyGpt() {
  ModelSpec model;
  model.name = "tiny-gpt";
  model.layers = 2;
  model.hidden = 8;
  model.heads = 2;
  model.kv_heads = 2;
  model.ffn = 32;
  model.vocab = 10;
  model.seq_len = 16;
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  model.bias = true;
  model.tied_embeddings = true;
  return model;
}

// SwiGLU, RMSNorm, no biases, untied, grouped-query attention: 4 heads of 2, 2 kv heads.
inline ModelSpec TinyLlama() {
  ModelSpec model = TinyGpt();
  model.name = "tiny-llama";
  model.heads = 4;
  model.kv_heads = 2;
  model.activation = Activation::kSwiglu;
  model.norm = Norm::kRmsNorm;
  model.bias = false;
  model.tied_embeddings = false;
  return model;
}

}  // namespace domino::testing_models

#endif  // DOMINO_TESTS_MODELS_TINY_MODELS_H_
