#include "planner/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "planner/iteration.h"

namespace domino {
namespace {

constexpr std::array<std::pair<std::string_view, ExportTarget>, 4> kTargets{{
    {"megatron", ExportTarget::kMegatron},
    {"nemo", ExportTarget::kNemo},
    {"deepspeed", ExportTarget::kDeepSpeed},
    {"torchtitan", ExportTarget::kTorchtitan},
}};

// The text being built: comment lines first, then the settings.
struct Output {
  std::vector<std::string> comments;  // without the leading "# "
  std::vector<std::string> differs;   // each becomes "# differs: ..."
  std::string body;

  std::string Text() const {
    std::string text;
    for (const std::string& line : comments) text += "# " + line + "\n";
    for (const std::string& line : differs) text += "# differs: " + line + "\n";
    return text + body;
  }
};

std::string Degrees(const Plan& plan) {
  if (plan.cp > 1)
    return fmt::format("{} GPUs = tp {} x cp {} x pp {} x dp {}", plan.cluster.total_gpus(),
                       plan.tp, plan.cp, plan.pp, plan.dp);
  return fmt::format("{} GPUs = tp {} x pp {} x dp {}", plan.cluster.total_gpus(), plan.tp, plan.pp,
                     plan.dp);
}

std::string Title(const Plan& plan, std::string_view what) {
  return fmt::format("{} for {} on {} ({} node{} x {} GPUs): {}", what, plan.model.name,
                     plan.cluster.name, plan.cluster.nodes, plan.cluster.nodes == 1 ? "" : "s",
                     plan.cluster.gpus_per_node, Degrees(plan));
}

// Domino's slicing in words, for the frameworks that have no option for it; nullopt for the
// baseline.
std::optional<std::string> DominoSlicing(const Plan& plan) {
  if (plan.row_split == 1 && plan.col_split == 1 && plan.scope == OverlapScope::kNone)
    return std::nullopt;
  std::vector<std::string> parts;
  if (plan.row_split > 1) parts.push_back(fmt::format("row split {} (μ-batches)", plan.row_split));
  if (plan.col_split > 1) parts.push_back(fmt::format("column split {}", plan.col_split));
  std::string slicing = parts.empty() ? std::string("no split") : parts[0];
  if (parts.size() == 2) slicing += " x " + parts[1];
  return fmt::format("Domino {} with {} overlap", slicing, ScopeName(plan.scope));
}

// How a plan's decomposed overlap differs from the framework's own (Transformer Engine's
// userbuffers, torchtitan's async TP): they cut each collective into tp chunks in ring order, each
// rank starting from its own shard; nothing for Domino's method.
std::vector<std::string> DecomposedDifferences(const Plan& plan, std::string_view framework) {
  std::vector<std::string> out;
  if (plan.method == OverlapMethod::kDomino) return out;
  if (plan.decomposed_chunks() != plan.tp)
    out.push_back(
        fmt::format("decomposed overlap in {} chunks: {} cuts each collective into tp "
                    "({}) chunks",
                    plan.decomposed_chunks(), framework, plan.tp));
  out.push_back(fmt::format(
      "decomposed overlap: {} exchanges the chunks in ring order starting from each rank's own "
      "shard, so only tp - 1 transfers run under GEMMs; domino's prediction moves fixed row "
      "ranges and leaves the first transfer exposed",
      framework));
  return out;
}

// Megatron's and torchtitan's layers per virtual stage count the ends the split counts.
int LayersPerVirtualStage(const Plan& plan) {
  return static_cast<int>(plan.split_units() / (plan.pp * plan.virtual_stages));
}

// Megatron-Core splits layers evenly over the stages unless told otherwise: domino's uneven stages
// (layers only, no interleaving; the middle stages take the remainder first) as its first- and
// last-stage layer counts when the middle stages are equal, else as an explicit layout (E the
// embedding, t a layer, L the loss, | between stages).
std::vector<std::string> MegatronUnevenStages(const Plan& plan) {
  if (plan.pp < 2 || plan.virtual_stages > 1 || plan.pipeline_split != PipelineSplit::kLayers ||
      plan.model.layers % plan.pp == 0)
    return {};
  const std::vector<int> stages = ChunkLayers(plan);
  if (std::adjacent_find(stages.begin() + 1, stages.end() - 1, std::not_equal_to<>()) ==
      stages.end() - 1)
    return {fmt::format("--decoder-first-pipeline-num-layers {}", stages.front()),
            fmt::format("--decoder-last-pipeline-num-layers {}", stages.back())};
  std::string layout;
  for (size_t s = 0; s < stages.size(); ++s)
    layout += fmt::format("{}{}t*{}{}", s == 0 ? "" : "|", s == 0 ? "E" : "", stages[s],
                          s + 1 == stages.size() ? "L" : "");
  return {fmt::format("--pipeline-model-parallel-layout \"{}\"", layout)};
}

// Megatron needs max_position_embeddings >= seq_length for learned positions.
int MaxPositions(const Plan& plan) { return std::max(plan.model.seq_len, plan.seq_len); }

std::string Arguments(const std::vector<std::string>& args) {
  std::string text;
  for (size_t i = 0; i < args.size(); ++i) text += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
  return text;
}

// The model's shape as Megatron-LM's (and DeepSpeed-Domino's, which forks it) arguments.
void AddModelArguments(const ModelSpec& m, const Plan& plan, bool gqa,
                       std::vector<std::string>& args) {
  args.push_back(fmt::format("--num-layers {}", m.layers));
  args.push_back(fmt::format("--hidden-size {}", m.hidden));
  args.push_back(fmt::format("--ffn-hidden-size {}", m.ffn));
  args.push_back(fmt::format("--num-attention-heads {}", m.heads));
  if (gqa && m.kv_heads != m.heads) {
    args.push_back("--group-query-attention");
    args.push_back(fmt::format("--num-query-groups {}", m.kv_heads));
  }
  args.push_back(fmt::format("--seq-length {}", plan.seq_len));
  args.push_back(fmt::format("--max-position-embeddings {}", MaxPositions(plan)));
  args.push_back(fmt::format("--position-embedding-type {}",
                             m.learned_positions() ? "learned_absolute" : "rope"));
  if (m.activation == Activation::kSwiglu) args.push_back("--swiglu");
  if (m.activation == Activation::kSquaredRelu) args.push_back("--squared-relu");
  if (m.norm == Norm::kRmsNorm) args.push_back("--normalization RMSNorm");
}

void AddMegatronPrecision(Dtype precision, Output& out, std::vector<std::string>& args) {
  switch (precision) {
    case Dtype::kBf16:
      args.push_back("--bf16");
      break;
    case Dtype::kFp16:
      args.push_back("--fp16");
      break;
    case Dtype::kFp8:  // Transformer Engine's E4M3 forward, E5M2 backward, over bf16 weights
      args.push_back("--bf16");
      args.push_back("--fp8-format hybrid");
      break;
    case Dtype::kTf32:
      out.comments.push_back(
          "tf32: no precision flag (fp32 training); PyTorch's "
          "torch.backends.cuda.matmul.allow_tf32 runs its matmuls in TF32");
      break;
    case Dtype::kFp32:
      break;
  }
}

std::string ExportMegatron(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out;
  out.comments.push_back(Title(plan, "Megatron-LM / Megatron-Core arguments (pretrain_gpt.py)"));
  if (plan.cp > 1)
    out.comments.push_back(fmt::format(
        "data-parallel size {} follows from the world size: {} GPUs / (tp {} x cp {} x pp {})",
        plan.dp, plan.cluster.total_gpus(), plan.tp, plan.cp, plan.pp));
  else
    out.comments.push_back(
        fmt::format("data-parallel size {} follows from the world size: {} GPUs / (tp {} x pp {})",
                    plan.dp, plan.cluster.total_gpus(), plan.tp, plan.pp));
  out.comments.push_back(fmt::format(
      "vocabulary {}: from the tokenizer (--tokenizer-type, --tokenizer-model), padded by "
      "--make-vocab-size-divisible-by",
      m.vocab));
  if (std::optional<std::string> slicing = DominoSlicing(plan)) {
    out.differs.push_back(
        *slicing +
        ": Megatron-LM has no such option; it runs each micro-batch whole and overlaps only the "
        "backward input-gradient all-reduce with the weight-gradient GEMM (--tp-comm-overlap is "
        "another method: Transformer Engine's collective-matmul decomposition)");
  }
  for (const std::string& d : DecomposedDifferences(plan, "Transformer Engine"))
    out.differs.push_back(d);
  std::vector<std::string> args;
  AddModelArguments(m, plan, /*gqa=*/true, args);
  if (!m.bias) args.push_back("--disable-bias-linear");
  if (!m.tied_embeddings) args.push_back("--untie-embeddings-and-output-weights");
  args.push_back(fmt::format("--tensor-model-parallel-size {}", plan.tp));
  args.push_back(fmt::format("--pipeline-model-parallel-size {}", plan.pp));
  if (plan.cp > 1) {
    // Ring attention (TE's "p2p"), the comm type domino models.
    args.push_back(fmt::format("--context-parallel-size {}", plan.cp));
    args.push_back("--cp-comm-type p2p");
  }
  if (plan.virtual_stages > 1)
    args.push_back(
        fmt::format("--num-layers-per-virtual-pipeline-stage {}", LayersPerVirtualStage(plan)));
  if (plan.split_counts_embedding()) args.push_back("--account-for-embedding-in-pipeline-split");
  if (plan.split_counts_loss()) args.push_back("--account-for-loss-in-pipeline-split");
  for (std::string& uneven : MegatronUnevenStages(plan)) args.push_back(std::move(uneven));
  if (plan.placement == Placement::kTpPpDp) args.push_back("--use-tp-pp-dp-mapping");
  if (plan.sequence_parallel) args.push_back("--sequence-parallel");
  if (plan.method != OverlapMethod::kDomino) args.push_back("--tp-comm-overlap");
  args.push_back(fmt::format("--micro-batch-size {}", plan.micro_batch));
  args.push_back(fmt::format("--global-batch-size {}", plan.global_batch));
  if (plan.recompute == Recompute::kSelective) {
    args.push_back("--recompute-granularity selective");
  } else if (plan.recompute == Recompute::kFull && plan.recompute_layers > 0) {
    args.push_back("--recompute-granularity full");
    args.push_back("--recompute-method block");
    args.push_back(fmt::format("--recompute-num-layers {}", plan.recompute_layers));
  } else if (plan.recompute == Recompute::kFull) {
    args.push_back("--recompute-granularity full");
    args.push_back("--recompute-method uniform");
    args.push_back("--recompute-num-layers 1");
  }
  if (plan.distributed_optimizer) args.push_back("--use-distributed-optimizer");
  if (plan.fsdp) {
    args.push_back("--use-megatron-fsdp");
    args.push_back("--data-parallel-sharding-strategy optim_grads_params");
  }
  switch (plan.loss_kernels()) {
    case CrossEntropy::kMegatronFused:
      args.push_back("--cross-entropy-loss-fusion");
      args.push_back("--cross-entropy-fusion-impl native");
      break;
    case CrossEntropy::kTe:
      args.push_back("--cross-entropy-loss-fusion");
      args.push_back("--cross-entropy-fusion-impl te");
      out.differs.push_back(
          "cross_entropy te: recent Megatron-LM refuses TE's fused loss (its stability check); "
          "megatron-fused is --cross-entropy-fusion-impl native");
      break;
    case CrossEntropy::kFused:
      out.differs.push_back(
          "cross_entropy fused: this project's one-pass kernel; Megatron's closest is "
          "--cross-entropy-loss-fusion");
      break;
    case CrossEntropy::kVocabParallel:
      break;
  }
  // Megatron reduces fp16 gradients in fp16 and bf16 ones in fp32 unless told otherwise.
  const bool half_grads = GradBytes(plan) == 2;
  if (plan.precision == Dtype::kFp16 && !half_grads)
    args.push_back("--accumulate-allreduce-grads-in-fp32");
  if (plan.precision != Dtype::kFp16 && half_grads) args.push_back("--grad-reduce-in-bf16");
  AddMegatronPrecision(plan.precision, out, args);
  out.body = Arguments(args);
  return out.Text();
}

std::string YamlBool(bool value) { return value ? "true" : "false"; }

std::string ExportNemo(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out;
  out.comments.push_back(Title(plan, "NeMo overrides of megatron_gpt_config.yaml"));
  if (std::optional<std::string> slicing = DominoSlicing(plan)) {
    out.differs.push_back(*slicing +
                          ": NeMo has no such key; Megatron-Core runs each micro-batch whole "
                          "(model.ub_tp_comm_overlap is another method: collective-matmul "
                          "decomposition)");
  }
  for (const std::string& d : DecomposedDifferences(plan, "Transformer Engine"))
    out.differs.push_back(d);
  if (plan.fsdp)
    out.differs.push_back(
        "fsdp: not set here; NeMo 1's model.fsdp (PyTorch FSDP, fsdp_sharding_strategy: full) "
        "replaces the distributed optimizer, and NeMo 2 takes Megatron-FSDP "
        "(use_megatron_fsdp, data_parallel_sharding_strategy: optim_grads_params)");
  if (!MegatronUnevenStages(plan).empty())
    out.differs.push_back(fmt::format(
        "uneven stages ({} layers on pp {}): megatron_gpt_config.yaml has no key for them "
        "(Megatron-Core takes num_layers_in_first_pipeline_stage and "
        "num_layers_in_last_pipeline_stage, or pipeline_model_parallel_layout)",
        plan.model.layers, plan.pp));
  if (plan.pipeline_split != PipelineSplit::kLayers && plan.pp > 1)
    out.differs.push_back(fmt::format(
        "pipeline_split {}: megatron_gpt_config.yaml has no key for it (NeMo 2's MegatronStrategy "
        "and Megatron-Bridge take account_for_embedding_in_pipeline_split and "
        "account_for_loss_in_pipeline_split)",
        PipelineSplitName(plan.pipeline_split)));
  std::string precision = "bf16-mixed";
  if (plan.precision == Dtype::kFp16) precision = "16-mixed";
  if (plan.precision == Dtype::kFp32 || plan.precision == Dtype::kTf32) precision = "32";
  if (plan.precision == Dtype::kTf32)
    out.comments.push_back("tf32: precision 32, with TF32 matmuls where PyTorch allows them");

  std::string body;
  body += "trainer:\n";
  body += fmt::format("  devices: {}\n", plan.cluster.gpus_per_node);
  body += fmt::format("  num_nodes: {}\n", plan.cluster.nodes);
  body += fmt::format("  precision: {}\n", precision);
  body += "model:\n";
  body += fmt::format("  micro_batch_size: {}\n", plan.micro_batch);
  body += fmt::format("  global_batch_size: {}\n", plan.global_batch);
  body += fmt::format("  tensor_model_parallel_size: {}\n", plan.tp);
  body += fmt::format("  pipeline_model_parallel_size: {}\n", plan.pp);
  if (plan.cp > 1) body += fmt::format("  context_parallel_size: {}\n", plan.cp);
  body += fmt::format("  virtual_pipeline_model_parallel_size: {}\n",
                      plan.virtual_stages > 1 ? std::to_string(plan.virtual_stages) : "null");
  if (plan.placement == Placement::kTpPpDp) body += "  use_tp_pp_dp_mapping: true\n";
  body += fmt::format("  sequence_parallel: {}\n", YamlBool(plan.sequence_parallel));
  if (plan.method != OverlapMethod::kDomino) body += "  ub_tp_comm_overlap: true\n";
  body += fmt::format("  encoder_seq_length: {}\n", plan.seq_len);
  body += fmt::format("  max_position_embeddings: {}\n", MaxPositions(plan));
  body += fmt::format("  num_layers: {}\n", m.layers);
  body += fmt::format("  hidden_size: {}\n", m.hidden);
  body += fmt::format("  ffn_hidden_size: {}\n", m.ffn);
  body += fmt::format("  num_attention_heads: {}\n", m.heads);
  body += fmt::format("  num_query_groups: {}\n",
                      m.kv_heads != m.heads ? std::to_string(m.kv_heads) : "null");
  body +=
      fmt::format("  activation: {}\n", m.activation == Activation::kSwiglu        ? "swiglu"
                                        : m.activation == Activation::kSquaredRelu ? "squared-relu"
                                                                                   : "gelu");
  body += fmt::format("  normalization: {}\n", m.norm == Norm::kRmsNorm ? "rmsnorm" : "layernorm");
  body += fmt::format("  bias: {}\n", YamlBool(m.bias));
  body += fmt::format("  position_embedding_type: {}\n",
                      m.learned_positions() ? "learned_absolute" : "rope");
  body += fmt::format("  share_embeddings_and_output_weights: {}\n", YamlBool(m.tied_embeddings));
  const char* granularity = plan.recompute == Recompute::kSelective ? "selective"
                            : plan.recompute == Recompute::kFull    ? "full"
                                                                    : "null";
  body += fmt::format("  activations_checkpoint_granularity: {}\n", granularity);
  const bool block = plan.recompute == Recompute::kFull && plan.recompute_layers > 0;
  body += fmt::format("  activations_checkpoint_method: {}\n", block ? "block"
                                                               : plan.recompute == Recompute::kFull
                                                                   ? "uniform"
                                                                   : "null");
  body += fmt::format("  activations_checkpoint_num_layers: {}\n",
                      block                                ? std::to_string(plan.recompute_layers)
                      : plan.recompute == Recompute::kFull ? "1"
                                                           : "null");
  // NeMo's key fuses the loss as Megatron-Core's --cross-entropy-loss-fusion does.
  const CrossEntropy loss = plan.loss_kernels();
  if (loss == CrossEntropy::kMegatronFused) body += "  cross_entropy_loss_fusion: true\n";
  if (loss == CrossEntropy::kTe || loss == CrossEntropy::kFused)
    out.differs.push_back(fmt::format(
        "cross_entropy {}: megatron_gpt_config.yaml fuses the loss only as Megatron-Core does "
        "(cross_entropy_loss_fusion: true); Megatron-Bridge takes cross_entropy_fusion_impl te",
        CrossEntropyName(loss)));
  if (plan.precision == Dtype::kFp8) {
    body += "  transformer_engine: true\n";
    body += "  fp8: true\n";
    body += "  fp8_hybrid: true\n";
  }
  body += "  optim:\n";
  body += fmt::format("    name: {}\n",
                      plan.distributed_optimizer ? "distributed_fused_adam" : "fused_adam");
  if (plan.distributed_optimizer)
    body += fmt::format("    grad_sync_dtype: {}\n", GradBytes(plan) == 4             ? "fp32"
                                                     : plan.precision == Dtype::kFp16 ? "fp16"
                                                                                      : "bf16");
  out.body = body;
  return out.Text();
}

// Every setting of `plan` that DeepSpeed-Domino's public code cannot run; empty when it can.
std::vector<std::string> DeepSpeedDominoRefusals(const Plan& plan) {
  std::vector<std::string> refusals;
  if (plan.row_split != 2)
    refusals.push_back(fmt::format(
        "row split {} (it always cuts a micro-batch into exactly 2 μ-batches)", plan.row_split));
  if (plan.col_split != 1)
    refusals.push_back(fmt::format("column split {} (it has none)", plan.col_split));
  if (plan.pp != 1) refusals.push_back(fmt::format("pp {} (it has no pipeline)", plan.pp));
  if (plan.cp != 1)
    refusals.push_back(fmt::format("cp {} (it has no context parallelism)", plan.cp));
  if (plan.sequence_parallel) refusals.push_back("sequence parallelism (it has none)");
  if (plan.dp != 1)
    refusals.push_back(fmt::format("dp {} (its data-parallel size is fixed at 1)", plan.dp));
  if (plan.micro_batches() != 1)
    refusals.push_back(
        fmt::format("{} micro-batches per iteration (it runs one: global batch = micro-batch)",
                    plan.micro_batches()));
  if (plan.recompute != Recompute::kNone)
    refusals.push_back(fmt::format("recompute {} (it has none)", RecomputeName(plan.recompute)));
  if (plan.distributed_optimizer) refusals.push_back("distributed optimizer (it has none)");
  if (plan.precision == Dtype::kFp8) refusals.push_back("fp8 (it runs fp16, bf16 or fp32)");
  if (plan.method != OverlapMethod::kDomino)
    refusals.push_back("decomposed collective-matmul overlap (it has none)");
  return refusals;
}

Result<std::string> ExportDeepSpeed(const Plan& plan) {
  if (std::vector<std::string> refusals = DeepSpeedDominoRefusals(plan); !refusals.empty()) {
    std::string list;
    for (const std::string& r : refusals) list += (list.empty() ? "" : "; ") + r;
    return Error(fmt::format("DeepSpeed-Domino cannot run this plan: {}", list));
  }
  const ModelSpec& m = plan.model;
  const bool llama = m.norm == Norm::kRmsNorm;
  Output out;
  out.comments.push_back(
      Title(plan,
            "DeepSpeed config and DeepSpeed-Domino arguments (DeepSpeedExamples/training/"
            "DeepSpeed-Domino)"));
  out.comments.push_back(fmt::format(
      "launch: deepspeed --num_gpus {} {} ARGUMENTS; DeepSpeed-Domino takes batch and precision "
      "from its arguments, the DeepSpeed config states them for a DeepSpeed engine",
      plan.tp, llama ? "pretrain_llama.py" : "pretrain_gpt.py"));
  if (plan.scope != OverlapScope::kInterLayer) {
    out.differs.push_back(fmt::format(
        "overlap scope {}: DeepSpeed-Domino overlaps a μ-batch's all-reduce with the next "
        "layer's work too (inter-layer)",
        ScopeName(plan.scope)));
  }
  if (m.activation == Activation::kSquaredRelu)
    out.differs.push_back(
        fmt::format("squared-ReLU MLP: DeepSpeed-Domino's models run GeLU (GPT) or SwiGLU (Llama); "
                    "this export runs {}",
                    llama ? "SwiGLU" : "GeLU"));
  if (m.kv_heads != m.heads) {
    out.differs.push_back(fmt::format(
        "{} key/value heads: DeepSpeed-Domino has no grouped-query attention and runs {} "
        "(multi-head)",
        m.kv_heads, m.heads));
  }
  if (m.activation == Activation::kSwiglu) {
    const int derived = (4 * m.hidden * 2 / 3) / 64 * 64;
    if (derived != m.ffn)
      out.differs.push_back(fmt::format(
          "ffn {}: with --swiglu DeepSpeed-Domino sets the MLP width to int(8h/3/64)*64 = {}, "
          "whatever --ffn-hidden-size says",
          m.ffn, derived));
  }
  if (!m.bias)
    out.differs.push_back("no biases: DeepSpeed-Domino puts a bias on every linear layer");
  if (!m.tied_embeddings)
    out.differs.push_back(
        "untied embeddings: DeepSpeed-Domino ties the LM head to the token embedding");

  std::string precision;
  if (plan.precision == Dtype::kBf16) precision = "  \"bf16\": {\"enabled\": true},\n";
  if (plan.precision == Dtype::kFp16) precision = "  \"fp16\": {\"enabled\": true},\n";
  std::string body;
  body += "{\n";
  body += fmt::format("  \"train_batch_size\": {},\n", plan.global_batch);
  body += fmt::format("  \"train_micro_batch_size_per_gpu\": {},\n", plan.micro_batch);
  body += fmt::format("  \"gradient_accumulation_steps\": {},\n", plan.micro_batches());
  body += precision;
  // DeepSpeed reduces gradients in the 16-bit parameters' type unless told otherwise.
  if (plan.dp_cp() > 1 && GradBytes(plan) == 4)
    body += "  \"communication_data_type\": \"fp32\",\n";
  body += "  \"zero_optimization\": {\"stage\": 0}\n";
  body += "}\n";
  std::vector<std::string> args;
  AddModelArguments(m, plan, /*gqa=*/false, args);
  args.push_back(fmt::format("--tensor-model-parallel-size {}", plan.tp));
  args.push_back(fmt::format("--micro-batch-size {}", plan.micro_batch));
  args.push_back(fmt::format("--global-batch-size {}", plan.global_batch));
  if (plan.precision == Dtype::kBf16) args.push_back("--bf16");
  if (plan.precision == Dtype::kFp16) args.push_back("--fp16");
  out.body =
      "# --- ds_config.json\n" + body + "# --- DeepSpeed-Domino arguments\n" + Arguments(args);
  return out.Text();
}

// torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py), by shape.
struct Flavor {
  std::string_view name;
  int layers, hidden, heads, kv_heads, ffn;
  int64_t vocab;
};
constexpr std::array<Flavor, 3> kLlama3Flavors{{
    {"8B", 32, 4096, 32, 8, 14336, 128256},
    {"70B", 80, 8192, 64, 8, 28672, 128256},
    {"405B", 126, 16384, 128, 8, 53248, 128256},
}};

std::string TomlString(std::string_view s) {
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string ExportTorchtitan(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out;
  out.comments.push_back(Title(plan, "torchtitan job config (TOML)"));
  out.comments.push_back(
      fmt::format("launch: torchrun --nnodes {} --nproc_per_node {} -m torchtitan.train "
                  "--job.config_file THIS.toml",
                  plan.cluster.nodes, plan.cluster.gpus_per_node));

  // torchtitan's llama3 is the Llama architecture: say what else this model is.
  std::vector<std::string> architecture;
  if (m.norm != Norm::kRmsNorm) architecture.push_back("LayerNorm");
  if (m.activation == Activation::kGelu) architecture.push_back("a GeLU MLP");
  if (m.activation == Activation::kSquaredRelu) architecture.push_back("a squared-ReLU MLP");
  if (m.learned_positions()) architecture.push_back("learned positions");
  if (m.bias) architecture.push_back("biases");
  if (m.tied_embeddings) architecture.push_back("tied embeddings");
  if (!architecture.empty()) {
    std::string list;
    for (const std::string& a : architecture) list += (list.empty() ? "" : ", ") + a;
    out.differs.push_back(fmt::format(
        "torchtitan's llama3 model has RMSNorm, SwiGLU, rotary positions, no biases and an "
        "untied LM head; {} has {}",
        m.name, list));
  }
  std::string flavor = m.name;
  for (const Flavor& f : kLlama3Flavors) {
    if (f.layers == m.layers && f.hidden == m.hidden && f.heads == m.heads &&
        f.kv_heads == m.kv_heads && f.ffn == m.ffn && f.vocab == m.vocab)
      flavor = f.name;
  }
  if (flavor == m.name) {
    out.differs.push_back(fmt::format(
        "no llama3 flavor has this shape; register flavor {} in torchtitan/models/llama3: dim "
        "{}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, FFN width {}",
        TomlString(m.name), m.hidden, m.layers, m.heads, m.kv_heads, m.vocab, m.ffn));
  }
  if (std::optional<std::string> slicing = DominoSlicing(plan)) {
    out.differs.push_back(*slicing +
                          ": torchtitan has no such option (enable_async_tensor_parallel is "
                          "another method: collective-matmul decomposition under torch.compile)");
  }
  for (const std::string& d : DecomposedDifferences(plan, "torchtitan's async TP"))
    out.differs.push_back(d);
  if (plan.tp > 1 && !plan.sequence_parallel) {
    out.differs.push_back(
        "no sequence parallelism: torchtitan's tensor parallelism always shards norms along the "
        "sequence (sequence parallel)");
  }
  if (plan.distributed_optimizer && !plan.fsdp && plan.dp > 1) {
    out.differs.push_back(
        "distributed optimizer: torchtitan shards with FSDP, which shards parameters and "
        "gradients as well as optimizer state");
  }
  if (plan.fsdp && plan.dp == 1)
    out.differs.push_back(
        "fsdp over context parallelism only: torchtitan shards over data_parallel_shard_degree, "
        "here 1");
  if (plan.placement == Placement::kTpPpDp && plan.dp > 1 && plan.pp > 1) {
    out.differs.push_back(
        "placement tp-pp-dp: torchtitan's device mesh puts pipeline stages outermost (tp-dp-pp)");
  }
  if (plan.pipeline_split == PipelineSplit::kLayers && plan.virtual_stages == 1 &&
      plan.model.layers % plan.pp != 0) {
    out.differs.push_back(fmt::format(
        "uneven stages: torchtitan gives the {} layers left over by pp {} to the first stages, "
        "domino to the middle ones",
        plan.model.layers % plan.pp, plan.pp));
  }
  std::string param_dtype = "bfloat16";
  if (plan.precision == Dtype::kFp32 || plan.precision == Dtype::kTf32) param_dtype = "float32";
  if (plan.precision == Dtype::kFp16)
    out.differs.push_back("fp16: torchtitan trains in bfloat16 or float32; bfloat16 is set");

  std::string body;
  body += "[model]\n";
  body += "name = \"llama3\"\n";
  body += fmt::format("flavor = {}\n", TomlString(flavor));
  if (plan.precision == Dtype::kFp8) body += "converters = [\"float8\"]\n";
  body += "\n[training]\n";
  // Without a pipeline, torchtitan accumulates gradients over local batches of one micro-batch;
  // with one, its local batch is the DP rank's share, cut into pipeline micro-batches.
  const int local_batch = plan.pp > 1 ? plan.global_batch / plan.dp : plan.micro_batch;
  body += fmt::format("local_batch_size = {}\n", local_batch);
  body += fmt::format("global_batch_size = {}\n", plan.global_batch);
  body += fmt::format("seq_len = {}\n", plan.seq_len);
  body += fmt::format("mixed_precision_param = {}\n", TomlString(param_dtype));
  // torchtitan reduces in float32 unless told otherwise.
  if (plan.dp_cp() > 1 && GradBytes(plan) == 2) body += "mixed_precision_reduce = \"bfloat16\"\n";
  body += "\n[parallelism]\n";
  const int shard = plan.distributed_optimizer ? plan.dp : 1;
  body += fmt::format("data_parallel_replicate_degree = {}\n", plan.dp / shard);
  body += fmt::format("data_parallel_shard_degree = {}\n", shard);
  body += fmt::format("tensor_parallel_degree = {}\n", plan.tp);
  body += fmt::format("pipeline_parallel_degree = {}\n", plan.pp);
  if (plan.method != OverlapMethod::kDomino)
    body += "enable_async_tensor_parallel = true  # needs [compile] enable = true\n";
  if (plan.pp > 1) {
    body += fmt::format("pipeline_parallel_schedule = {}\n",
                        plan.virtual_stages > 1 ? "\"Interleaved1F1B\"" : "\"1F1B\"");
    body += fmt::format("pipeline_parallel_microbatch_size = {}\n", plan.micro_batch);
    if (plan.virtual_stages > 1)
      body += fmt::format("pipeline_parallel_layers_per_stage = {}\n", LayersPerVirtualStage(plan));
    // torchtitan counts the embedding and the output as a layer each unless told otherwise.
    body += fmt::format("pipeline_parallel_first_stage_less_layers = {}\n",
                        plan.split_counts_embedding() ? 1 : 0);
    body += fmt::format("pipeline_parallel_last_stage_less_layers = {}\n",
                        plan.split_counts_loss() ? 1 : 0);
  }
  body += fmt::format("context_parallel_degree = {}\n", plan.cp);
  body += "\n[activation_checkpoint]\n";
  body += fmt::format("mode = \"{}\"\n", RecomputeName(plan.recompute));
  if (plan.recompute == Recompute::kSelective) body += "selective_ac_option = \"op\"\n";
  if (plan.recompute == Recompute::kFull && plan.recompute_layers > 0)
    out.differs.push_back(fmt::format(
        "recompute_layers {}: torchtitan's full activation checkpointing wraps every layer",
        plan.recompute_layers));
  out.body = body;
  return out.Text();
}

}  // namespace

std::span<const std::pair<std::string_view, ExportTarget>> ExportTargetNames() { return kTargets; }

Result<std::string> ExportPlan(const Plan& plan, ExportTarget target) {
  switch (target) {
    case ExportTarget::kMegatron:
      return ExportMegatron(plan);
    case ExportTarget::kNemo:
      return ExportNemo(plan);
    case ExportTarget::kDeepSpeed:
      return ExportDeepSpeed(plan);
    case ExportTarget::kTorchtitan:
      return ExportTorchtitan(plan);
  }
  return Error("unknown export target");
}

}  // namespace domino
