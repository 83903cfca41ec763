#ifndef DOMINO_MODELS_MODEL_SPEC_H_
#define DOMINO_MODELS_MODEL_SPEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/base/embedded_file.h"
#include "models/base/result.h"

namespace domino {

class YamlMap;

// The MLP's activation: GeLU (two matrices), SwiGLU (three, gated by SiLU), squared ReLU (two, as
// Nemotron-4: relu(x)^2), or GeGLU (three, gated by GeLU in its tanh form: Gemma's
// gelu_pytorch_tanh).
enum class Activation { kGelu, kSwiglu, kSquaredRelu, kGeglu };
// Whether the MLP is gated: three matrices, the first writing [gate | up].
inline bool Gated(Activation activation) {
  return activation == Activation::kSwiglu || activation == Activation::kGeglu;
}
enum class Norm { kLayerNorm, kRmsNorm };
// Where the attention learns token positions: learned absolute embeddings of `seq_len` rows added
// to the token embedding (GPT), or rotary embeddings applied to Q and K in every layer (Llama,
// Nemotron-4), which have no parameters; kByNorm (a model that says neither): learned with
// LayerNorm, rotary with RMSNorm.
enum class Positions { kByNorm, kLearned, kRotary };

std::string_view ActivationName(Activation activation);
std::string_view NormName(Norm norm);
std::string_view PositionsName(Positions positions);  // "learned", "rotary"

// What a model's attention runs that a framework can be told to build: each a field of ModelSpec
// below, so that an export launches the model its file describes. domino prices kQkNorm; the
// others it prices otherwise (an Approximation). kNone: what no field states (Gemma's GeLU gate,
// Gemma 2's soft-capped attention scores).
enum class ModelFeature { kNone, kQkvBias, kQkNorm, kPartialRotary, kWindow };

// Something a model's file describes that domino prices otherwise (ModelSpec::approximations),
// in words: `what` it is ("biases on Q, K and V only (Qwen2)") and `as` what domino prices it
// ("without them"). ParseHfConfig writes them.
struct Approximation {
  ModelFeature feature = ModelFeature::kNone;
  std::string what;
  std::string as;

  // "WHAT: priced AS" for a feature (an export says whether it launches it), else "WHAT: priced
  // and exported AS": as `domino models` prints it.
  std::string Text() const;
};

// A feature beyond the model's shape that domino prices (ModelSpec::qk_norm, post_norms,
// logit_softcap, attention_softcap), in words: `what` it is ("an RMSNorm on each head of Q and of K
// (qk_norm)") and `exported` what an export that cannot launch it says ("priced with them, exported
// without them"). `domino models` prints `what`; kQkNorm for the QK-norm, which some frameworks
// launch.
struct PricedFeature {
  ModelFeature feature = ModelFeature::kNone;
  std::string what;
  std::string exported;
};

// A sliding attention window: on the layers it covers, each query attends to itself and the
// `tokens` before it (Megatron-Core's window_size (tokens, 0)) instead of to every earlier token.
// transformers' sliding_window counts the query too (masking_utils.py, sliding_window_overlay: key
// k is seen by query q when k > q - sliding_window): its W is `tokens` W - 1, as Megatron-Bridge's
// Hugging Face bridges map it (mistral_bridge.py, gemma2_bridge.py: window_size
// (sliding_window - 1, 0); conversion/utils.py's mcore_to_hf_window_size adds the 1 back). Layers
// are counted from 0.
struct AttentionWindow {
  int tokens = 0;       // 0: no window
  int first_layer = 0;  // the layers before attend in full (Qwen's max_window_layers)
  int every = 1;        // from first_layer on, every `every`-th layer has it (Gemma 2: 2)
  // Besides, layer i attends in full when (i + 1) % full_every == 0 (0: none): Gemma 3's
  // sliding_window_pattern 6, five sliding layers then a full one, as Megatron-Core's integer
  // window_attn_skip_freq counts them (layer numbers from 1 that it divides).
  int full_every = 0;

  // The keys a query past the window's start attends to, itself included (transformers'
  // sliding_window): a sequence up to this long attends as it would in full.
  int keys() const { return tokens + 1; }
  bool Covers(int layer) const {
    return tokens > 0 && layer >= first_layer && (layer - first_layer) % every == 0 &&
           (full_every == 0 || (layer + 1) % full_every != 0);
  }
  // The window of layer `layer`: its tokens where it covers the layer, else 0 (none).
  int TokensAt(int layer) const { return Covers(layer) ? tokens : 0; }
  // How many of a model's `layers` it covers.
  int CoveredLayers(int layers) const {
    int covered = 0;
    for (int l = 0; l < layers; ++l) covered += Covers(l) ? 1 : 0;
    return covered;
  }
};

// How a plan prices a sliding window of `tokens` tokens (the `as` of its Approximation): as the
// window where the plan's stack runs it and context parallelism, if any, is not the p2p ring
// (Plan::WindowedLayer), else as full causal attention (FullAttentionPricing).
std::string WindowPricing(int tokens);
// "as full causal attention, the same up to N tokens", N = tokens + 1 (AttentionWindow::keys): a
// window of `tokens` before each query priced as no window.
std::string FullAttentionPricing(int tokens);

// The smallest n >= 2 for which layer i (from 0) is windowed exactly when (i + 1) % n != 0: the
// pattern AttentionWindow::full_every and Megatron-Core's integer window_attn_skip_freq state
// (Gemma 3's 6, Gemma 2's 2 from the first layer); 0 when none does or every layer is windowed.
int FullEvery(const std::vector<bool>& windowed);

// ModelSpec is the shape of a decoder-only transformer, as written in a model YAML file
// (models/catalog/NAME.yaml; keys named after its fields). It holds no parallelism or batch: those
// belong to a Plan. `positions` defaults by the norm: learned with `norm: layernorm` (the GPT
// family), rotary with `norm: rmsnorm` (Llama); Nemotron-4 has LayerNorm and rotary positions.
struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // = heads without grouped-query attention
  // Width of one attention head; 0 (the default) is hidden / heads. Models whose heads are wider
  // or narrower than that (Gemma-7B: 16 x 256 over a hidden of 3072; Qwen3-32B: 64 x 128 over
  // 5120) project Q to heads * head_dim and back. ReadModel keeps 0 where heads * head_dim equals
  // hidden, so one model has one spec.
  int head_dim = 0;
  int ffn = 0;  // MLP inner size
  int64_t vocab = 0;
  int seq_len = 0;  // default sequence length, used when a plan gives none
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  Positions positions = Positions::kByNorm;
  bool bias = true;  // biases on every linear layer
  bool tied_embeddings = true;
  // What the attention runs besides, as a model YAML's keys of these names or a Hugging Face
  // config says (ReadModel and ParseHfConfig set each, but qk_norm, with its approximation below):
  // domino prices the model without them, but with qk_norm, and an export passes them to a
  // framework that has a setting for them (planner/export.h).
  bool qkv_bias = false;  // with `bias` false: biases on Q, K and V only (Qwen2)
  bool qk_norm = false;   // a `norm` on each head of Q and of K (Qwen3's q_norm and k_norm)
  // A `norm` on the attention's and on the MLP's output before each residual add, besides the
  // norms before them (Gemma 2's and Gemma 3's post_attention_layernorm and
  // post_feedforward_layernorm). Priced and run by the executor (docs/formats.md).
  bool post_norms = false;
  // The logits soft-capped at this value, cap * tanh(logits / cap) before the loss (Gemma 2's
  // final_logit_softcapping, as Megatron-Bridge's Gemma2OutputLayer runs it in three PyTorch
  // kernels); 0: none. Priced and run by the executor's loss kernels.
  double logit_softcap = 0;
  // The attention's scaled scores soft-capped at this value, cap * tanh(scores / cap) before the
  // softmax (Gemma 2's attn_logit_softcapping); 0: none. Priced as the stack runs it
  // (StackSpec::capped_attention, fused_attention_softcap) and run by the executor.
  double attention_softcap = 0;
  double rotary_fraction = 1;  // of each head's width that rotary positions turn (GPT-NeoX 0.25)
  AttentionWindow window;      // a sliding window (Mistral; Gemma 2's every other layer)
  // What the file it was read from describes and domino prices otherwise (a feature above, or what
  // no field states: a Hugging Face config's GeLU gate or attention soft cap): `models` prints them
  // and `export` names each as a difference. They are no model YAML key: ReadModel writes one for
  // each feature key, and a model read from a config.json travels in a plan as its path
  // (Plan::model_ref), read again with all of them.
  std::vector<Approximation> approximations;

  int head_width() const { return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0; }
  int q_hidden() const { return heads * head_width(); }  // width of Q and of the attention's output
  int kv_hidden() const { return kv_heads * head_width(); }  // width of K (and of V)
  bool learned_positions() const {
    return positions == Positions::kLearned ||
           (positions == Positions::kByNorm && norm == Norm::kLayerNorm);
  }
};

// The features of `model` that domino prices beyond its shape, in this order: the QK-norm, the
// attention's soft cap, the logits' soft cap, the post-norms.
std::vector<PricedFeature> PricedFeatures(const ModelSpec& model);

// Parses and validates model YAML. `file` names the source in messages
// ("FILE:LINE:COLUMN: KEY: RULE"). Rules: every key known and present (kv_heads defaults to
// heads, head_dim to hidden / heads, bias to true, tied_embeddings to true, positions by the
// norm); sizes positive; hidden divisible by heads unless head_dim is given; heads divisible by
// kv_heads; heads * head_dim at most 10,000,000 and, with rotary positions, an even head width;
// activation gelu|swiglu|squared-relu|geglu; norm layernorm|rmsnorm; positions learned|rotary. The
// attention's features are optional: qkv_bias (with bias false), qk_norm, post_norms, the soft
// caps logit_softcap and attention_softcap (at most 1e6), rotary_fraction (above 0,
// at most 1; below 1 with rotary positions only) and window (tokens, or a mapping of
// AttentionWindow's fields that covers at least one layer).
Result<ModelSpec> ParseModel(std::string_view text, std::string_view file);

// Reads a model from an open YAML mapping (a model file's root, or a plan's inline `model:`
// mapping) with the rules of ParseModel; errors go to `map` (see YamlMap::Finish).
ModelSpec ReadModel(YamlMap& map);

// The model as one YAML flow mapping that ParseModel reads back to the same spec.
std::string ModelToFlowYaml(const ModelSpec& model);

// Loads a catalog model by name ("gpt3-13b"), a YAML file by path, or a Hugging Face config.json
// (a .json file or a directory holding config.json; models/hf_config.h). A string that names no
// catalog model and no file gets an error listing the catalog.
Result<ModelSpec> LoadModel(std::string_view name_or_path);

// The embedded catalog, one entry per models/catalog/*.yaml, in name order.
std::span<const EmbeddedFile> ModelCatalog();

}  // namespace domino

#endif  // DOMINO_MODELS_MODEL_SPEC_H_
