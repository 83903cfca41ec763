#ifndef DOMINO_MODELS_HF_CONFIG_H_
#define DOMINO_MODELS_HF_CONFIG_H_

#include <string>
#include <string_view>

#include "models/base/result.h"
#include "models/model_spec.h"

namespace domino {

// Reads a Hugging Face transformers `config.json` into a ModelSpec, so that a user can hand domino
// the config of the model they train. Families read (by `model_type`, else by `architectures`):
//
//   - llama, mistral, phi3, qwen2, qwen3, gemma, gemma2, gemma3_text: num_hidden_layers,
//     hidden_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
//     vocab_size, max_position_embeddings; MLP swiglu, norm rmsnorm; Gemma 3's missing ones take
//     transformers' Gemma3TextConfig defaults;
//   - gemma3 (Gemma3ForConditionalGeneration): the same keys of gemma3_text in text_config, its
//     vision tower (vision_config) left out;
//   - gpt_neox: the same keys (no kv heads); MLP gelu, norm layernorm;
//   - gpt2: n_layer, n_embd, n_head, n_inner (null: 4 * n_embd), vocab_size, n_positions; MLP
//     gelu, norm layernorm.
//
// The gated MLPs of the Llama family (SiLU in Llama, Mistral, Phi-3 and Qwen; GeLU in Gemma) have
// SwiGLU's three matrices, and domino's `swiglu` stands for all of them. ModelSpec.seq_len is the
// length the model was pretrained at: original_max_position_embeddings (in rope_scaling, or at
// the top level as Phi-3 writes it) where the config extends its context (Llama 3.1: 8,192 of
// 131,072), else the maximum position count. tie_word_embeddings takes the family's transformers
// default when absent (tied for GPT-2 and Gemma 1 to 3, untied otherwise). ModelSpec.name is the
// folder holding config.json, or the file's stem for another name. GPT-NeoX rotates Q and K
// (positions: rotary). head_dim, where absent, is transformers' default: 256 for Gemma (1 to 3),
// 128 for Qwen3, hidden / heads for the others; heads need not be hidden / heads wide
// (ModelSpec::head_dim). What domino prices otherwise is listed in ModelSpec::approximations, each
// changing the parameters by under 1%; those marked * are also ModelSpec fields (qkv_bias,
// qk_norm, rotary_fraction, window), which an export passes to a framework that can build them:
// - Qwen2's biases on Q, K and V only (priced as none; ~0.002% of the parameters) *;
// - Qwen3's and Gemma 3's RMSNorm on each head of Q and K (q_norm, k_norm: 2 x head_dim weights
//   a layer) *;
// - Gemma's GeLU gate (counted as SwiGLU's, the same matrices);
// - Gemma 2's and Gemma 3's norms after the attention and the MLP (2 x hidden weights a layer)
//   and their soft-capped attention scores and logits where set (null in Gemma 3's releases);
// - Gemma 3's vision tower (Gemma3ForConditionalGeneration's vision_config): left out, as the
//   language model alone (the 4B's 417M parameters);
// - Phi-3's partial rotary (partial_rotary_factor) *;
// - GPT-NeoX's partial rotary (rotary_pct) *, parallel residual, and attention_bias false (its
//   MLP keeps its biases: read as biases on every linear);
// - a sliding attention window * (Mistral's and Phi-3's sliding_window, Gemma 2's on layers 0,
//   2, 4, ...; Gemma 3's on five layers of six, layer i full when (i + 1) %
//   sliding_window_pattern == 0, or as layer_types lists them; Qwen's with use_sliding_window, on
//   the layers from max_window_layers on, as transformers' Qwen2Config and Qwen3Config place it;
//   Gemma 2's and Qwen's too as a layer_types list gives them), priced as full causal attention.
//   A layer_types list that AttentionWindow cannot state is an approximation without the field.
// - biases on one side only: transformers' attention_bias (Q, K, V and the output projection) or
//   Llama's mlp_bias without the other, read as ModelSpec.bias, biases on every linear.
// A key left out takes its transformers class's default (MistralConfig's 8 key/value heads, a
// 4096 sliding window, Gemma 2's soft caps of 50 and 30); a JSON null is what the class makes of
// None where it says (num_key_value_heads: the heads; sliding_window, the soft caps: none) and an
// error elsewhere, as transformers 5 refuses it (hf_config_reader.h, ConfigReader).
//
// Errors read "FILE:LINE:COLUMN: KEY: RULE": a config without `model_type` or `architectures`, an
// architecture outside the families above (saying why where the config shows it: a mixture of
// experts, or a language model nested in text_config other than Gemma 3's), a missing size, a
// non-integer or out-of-range value, a null the key's class gives no meaning, an activation other
// than the family's (ReLU), and attention both ways (Gemma 3's use_bidirectional_attention).
Result<ModelSpec> ParseHfConfig(std::string_view text, std::string_view file);

// True when `path` names a Hugging Face config: a directory (holding config.json) or a file whose
// name ends in ".json". Model YAML files (.yaml) are read by ParseModel instead.
bool IsHfConfigPath(const std::string& path);

// Reads `path` (a config.json, or a directory holding one) with ParseHfConfig.
Result<ModelSpec> LoadHfConfig(const std::string& path);

}  // namespace domino

#endif  // DOMINO_MODELS_HF_CONFIG_H_
