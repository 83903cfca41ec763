// Megatron-LM's arguments (pretrain_gpt.py) and NeMo's YAML (megatron_gpt_config.yaml) for a plan:
// ExportPlan's kMegatron and kNemo.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/export_parts.h"
#include "planner/iteration.h"

namespace domino::export_parts {
namespace {

// Transformer Engine's pipelined reduce-scatter pieces (num_splits of its "pipeline" method; see
// the megatron-core stack).
constexpr int kTeRsChunks = 4;
// Megatron-Core's GPT layer spec (core_r0.9.0 to core_v0.19.0 gpt_layer_specs.py and mlp.py,
// without the opt-in use_te_op_fuser or use_te_activation_func).
constexpr FrameworkFp8Cast kMegatronCoreFp8Cast{
    Fp8Cast::kNorm,
    "Megatron-Core's layers: TELayerNormColumnParallelLinear for QKV and fc1, its own "
    "bias-activation kernel before TERowParallelLinear for fc2"};

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

std::string YamlBool(bool value) { return value ? "true" : "false"; }

// Interleaving with the pipeline's transfers not overlapped, over 2 stages: Megatron-LM refuses it
// (arguments.py: more than 2 stages, or batched sends and receives between the same two ranks).
std::string P2pOverTwoStagesDifference() {
  return "overlap_p2p false over 2 stages: Megatron-LM runs the interleaved schedule without "
         "overlapping its transfers only over more than 2 stages; these arguments overlap them "
         "(its default)";
}

// The stack overlaps the parameter gather but not the gradient reduction, which the framework
// allows only together.
std::string ParamGatherAloneDifference(std::string_view framework, std::string_view gather,
                                       std::string_view reduce) {
  return fmt::format(
      "the parameter gather overlapped without the gradient reduction: {} takes {} only with {}; "
      "these settings gather after the optimizer step",
      framework, gather, reduce);
}

// NeMo's keys for a model's features. build_transformer_config
// (nemo/collections/nlp/models/language_modeling/megatron_base_model.py) reads qkv_bias as
// Megatron-Core's add_qkv_bias and passes on the TransformerConfig fields the model config names
// (qk_layernorm, window_size, window_attn_skip_freq); megatron_gpt_model.py reads
// rotary_percentage. The layer spec megatron_gpt_config.yaml builds (te_gpt: get_specs in
// megatron_gpt_model.py) has no norm on Q and K whatever qk_layernorm says; the spec named
// decoder_block_gpt (Megatron-Core's get_gpt_decoder_block_spec) takes it from the config.
std::vector<LaunchedFeature> NemoFeatures(const ModelSpec& m) {
  std::vector<LaunchedFeature> out;
  if (m.qkv_bias && !m.bias) out.push_back({ModelFeature::kQkvBias, {"qkv_bias: true"}});
  if (m.qk_norm)
    out.push_back({ModelFeature::kQkNorm, {"qk_layernorm: true", "name: decoder_block_gpt"}});
  if (!m.learned_positions() && m.rotary_fraction < 1)
    out.push_back({ModelFeature::kPartialRotary,
                   {fmt::format("rotary_percentage: {:g}", m.rotary_fraction)}});
  if (m.window.tokens > 0) {
    LaunchedFeature window{ModelFeature::kWindow,
                           {fmt::format("window_size: [{}, 0]", m.window.tokens)}};
    if (std::optional<WindowLayers> layers = MegatronWindowLayers(m)) {
      std::string freq = std::to_string(layers->every);
      if (layers->every == 0) {
        freq.clear();
        for (int covered : layers->pattern)
          freq += fmt::format("{}{}", freq.empty() ? "" : ", ", covered);
        freq = "[" + freq + "]";
      }
      window.settings.push_back("window_attn_skip_freq: " + freq);
    }
    out.push_back(std::move(window));
  }
  return out;
}

// The cp_comm_type a Megatron-Core launch of the plan runs (nothing without cp): the plan's
// (Plan::cp_communication), in Transformer Engine's spelling, which Megatron-Core hands to TE as
// it is (core_r0.10.0 to core_v0.19.0 megatron/core/extensions/transformer_engine.py,
// TEDotProductAttention), for every layer. One exception: a plan on a stack that runs only the
// p2p ring, with a windowed layer, which TE refuses (attn_forward_func_with_cp asserts a2a or
// all_gather for a windowed layer, TransformerEngine v2.0 pytorch/attention.py to v2.18
// pytorch/attention/dot_product_attention/context_parallel.py): it launches a2a where cp divides
// each tensor-parallel rank's query and key/value heads (AttnFuncWithCPAndQKVOA2A asserts it),
// else all_gather, as NeMo's Hugging Face importer picks a2a for any config with a window (NeMo
// 8cfedd72 nemo/collections/llm/gpt/model/mistral.py); LaunchedCpDifference says so. A
// framework without `hierarchical` context-parallel groups (NeMo: no
// hierarchical_context_parallel_sizes, which Megatron-LM's --hierarchical-context-parallel-sizes
// and Megatron-Bridge's model config set) launches a2a+p2p as the ring.
std::optional<std::string_view> LaunchedCpCommType(const Plan& plan, bool hierarchical = true) {
  if (plan.cp == 1) return std::nullopt;
  CpComm comm = plan.cp_communication();
  if (comm == CpComm::kA2aP2p && !hierarchical) comm = CpComm::kP2p;
  const ModelSpec& m = plan.model;
  if (comm != CpComm::kP2p || m.window.CoveredLayers(m.layers) == 0) return CpCommName(comm);
  return CpCommName(plan.WindowCpComm());
}

// What launching LaunchedCpCommType's `comm_type` (as `key` and it) differs by, when it is not
// the plan's: domino priced the p2p ring.
std::optional<std::string> LaunchedCpDifference(const Plan& plan, std::string_view key,
                                                std::string_view comm_type) {
  if (comm_type == CpCommName(plan.cp_communication())) return std::nullopt;
  if (plan.cp_communication() == CpComm::kA2aP2p)
    return fmt::format(
        "cp_comm a2a+p2p (a2a groups of {}): NeMo builds no hierarchical context-parallel groups "
        "(it has no hierarchical_context_parallel_sizes, which Megatron-Bridge's model config "
        "and Megatron-LM's --hierarchical-context-parallel-sizes set): launched ({}{})",
        plan.cp_a2a_ranks(), key, comm_type);
  std::string text = fmt::format(
      "context parallelism over a sliding window: launched ({}{}), priced as the p2p ring the "
      "plan's stack {} runs, which Transformer Engine refuses with a window",
      key, comm_type, plan.stack.name);
  if (comm_type != "a2a")
    text += fmt::format(
        " (a2a needs cp {} to divide the {} heads and {} key/value heads per tensor-parallel rank)",
        plan.cp, plan.model.heads / plan.tp, plan.model.kv_heads / plan.tp);
  return text;
}

}  // namespace

std::string ExportMegatron(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out = Opening(plan, "Megatron-LM / Megatron-Core arguments (pretrain_gpt.py)");
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
  for (const std::string& d : ModelApproximations(plan, MegatronFeatures(m, true)))
    out.differs.push_back(d);
  if (std::optional<std::string> d = GegluDifference(
          m, "Megatron-LM", "SwiGLU (--swiglu), the same three matrices with a SiLU gate"))
    out.differs.push_back(std::move(*d));
  const std::optional<std::string_view> cp_comm_type = LaunchedCpCommType(plan);
  if (cp_comm_type)
    if (auto d = LaunchedCpDifference(plan, "--cp-comm-type ", *cp_comm_type))
      out.differs.push_back(std::move(*d));
  if (std::optional<std::string> slicing = DominoSlicing(plan)) {
    out.differs.push_back(
        *slicing +
        ": Megatron-LM has no such option; it runs each micro-batch whole and overlaps only the "
        "backward input-gradient all-reduce with the weight-gradient GEMM (--tp-comm-overlap is "
        "another method: Transformer Engine's collective-matmul decomposition)");
  }
  for (const std::string& d : DecomposedDifferences(plan, "Transformer Engine", kTeRsChunks))
    out.differs.push_back(d);
  for (const std::string& d : KernelDifferences(plan, "Megatron-LM", true, kMegatronCoreFp8Cast))
    out.differs.push_back(d);
  if (std::optional<std::string> d = OptimizerDtypeDifference(
          plan,
          "Megatron-LM keeps fp32 master weights (--use-precision-aware-optimizer with "
          "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 puts m and v in bf16: 8 bytes of state a "
          "parameter, not 6)"))
    out.differs.push_back(*d);
  std::vector<std::string> args;
  AddModelArguments(m, plan, /*layer_options=*/true, args);
  if (!m.bias) args.push_back("--disable-bias-linear");
  // Megatron-Core fuses the bias only into GeLU and SwiGLU (transformer_config.py refuses the
  // fusion for other activations); without biases Megatron-LM turns it off itself.
  if (m.bias && m.activation == Activation::kSquaredRelu) args.push_back("--no-bias-gelu-fusion");
  if (!m.tied_embeddings) args.push_back("--untie-embeddings-and-output-weights");
  args.push_back(fmt::format("--tensor-model-parallel-size {}", plan.tp));
  args.push_back(fmt::format("--pipeline-model-parallel-size {}", plan.pp));
  if (plan.cp > 1) {
    args.push_back(fmt::format("--context-parallel-size {}", plan.cp));
    args.push_back(fmt::format("--cp-comm-type {}", cp_comm_type.value_or("p2p")));
    if (plan.cp_communication() == CpComm::kA2aP2p)
      args.push_back(fmt::format("--hierarchical-context-parallel-sizes {} {}", plan.cp_a2a_ranks(),
                                 plan.cp / plan.cp_a2a_ranks()));
  }
  if (plan.virtual_stages > 1) {
    args.push_back(
        fmt::format("--num-layers-per-virtual-pipeline-stage {}", LayersPerVirtualStage(plan)));
    // Megatron-LM overlaps the interleaved schedule's transfers unless told not to, and runs them
    // unoverlapped only over more than 2 stages (arguments.py).
    if (!plan.p2p_overlapped() && plan.pp > 2) args.push_back("--no-overlap-p2p-communication");
    if (!plan.p2p_overlapped() && plan.pp <= 2) out.differs.push_back(P2pOverTwoStagesDifference());
  }
  if (plan.split_counts_embedding()) args.push_back("--account-for-embedding-in-pipeline-split");
  if (plan.split_counts_loss()) args.push_back("--account-for-loss-in-pipeline-split");
  if (std::optional<UnevenStages> uneven = MegatronUnevenStages(plan)) {
    if (uneven->layout.empty()) {
      args.push_back(fmt::format("--decoder-first-pipeline-num-layers {}", uneven->first));
      args.push_back(fmt::format("--decoder-last-pipeline-num-layers {}", uneven->last));
    } else {
      args.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", uneven->layout));
    }
  }
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
  // DP gradient reduction and the parameter gather overlapped as the stack runs them (off in
  // Megatron-LM unless asked for), the last gradients launched as its grad_sync says.
  const bool dp = plan.dp_cp() > 1 && !plan.fsdp;
  if (dp && plan.stack.overlap_grad_reduce) {
    args.push_back("--overlap-grad-reduce");
    if (plan.gradient_sync() == GradSync::kMegatron) args.push_back("--no-align-grad-reduce");
    if (plan.gradient_sync() == GradSync::kLayer) out.differs.push_back(GradSyncLayerDifference());
  }
  if (dp && plan.stack.overlap_param_gather && plan.distributed_optimizer) {
    if (plan.stack.overlap_grad_reduce)
      args.push_back("--overlap-param-gather");
    else
      out.differs.push_back(ParamGatherAloneDifference("Megatron-LM", "--overlap-param-gather",
                                                       "--overlap-grad-reduce"));
  }
  if (plan.fsdp) {
    // Megatron-FSDP saves only in its own checkpoint format (arguments.py asserts it).
    args.push_back("--use-megatron-fsdp");
    args.push_back("--data-parallel-sharding-strategy optim_grads_params");
    args.push_back("--ckpt-format fsdp_dtensor");
  }
  // An attention kernel the plan chooses: Megatron-Core's --attention-backend (flash: Transformer
  // Engine's FlashAttention; fused: cuDNN's; auto, the default, lets TE choose: cuDNN's on Hopper).
  if (plan.attention)
    args.push_back(fmt::format("--attention-backend {}", AttentionBackendName(*plan.attention)));
  // Megatron-LM fuses bias, dropout and residual add, and unfused attention's scale, mask and
  // softmax, unless told otherwise.
  if (!plan.fuses_bias_dropout_add()) args.push_back("--no-bias-dropout-fusion");
  if (plan.attention_kernel() == AttentionKernel::kUnfused &&
      plan.softmax_kernels() == SoftmaxKernels::kScaleMaskSoftmax)
    args.push_back("--no-masked-softmax-fusion");
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
  if (plan.precision == Dtype::kFp8 && plan.fp8_scaling() == Fp8Recipe::kCurrent)
    args.push_back("--fp8-recipe tensorwise");
  out.body = Arguments(args);
  return out.Text();
}

std::string ExportNemo(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out = Opening(plan, "NeMo overrides of megatron_gpt_config.yaml");
  const std::vector<LaunchedFeature> features = NemoFeatures(m);
  for (const std::string& d : ModelApproximations(plan, features, ", ")) out.differs.push_back(d);
  // NeMo 1 passes cp_comm_type on as it does the window's keys: build_transformer_config copies
  // every model key named after a TransformerConfig field (Megatron-Core's from core_r0.10.0).
  const std::optional<std::string_view> cp_comm_type =
      LaunchedCpCommType(plan, /*hierarchical=*/false);
  if (cp_comm_type)
    if (auto d = LaunchedCpDifference(plan, "cp_comm_type: ", *cp_comm_type))
      out.differs.push_back(std::move(*d));
  if (std::optional<std::string> slicing = DominoSlicing(plan)) {
    out.differs.push_back(*slicing +
                          ": NeMo has no such key; Megatron-Core runs each micro-batch whole "
                          "(model.ub_tp_comm_overlap is another method: collective-matmul "
                          "decomposition)");
  }
  for (const std::string& d : DecomposedDifferences(plan, "Transformer Engine", kTeRsChunks))
    out.differs.push_back(d);
  for (const std::string& d : KernelDifferences(plan, "NeMo", true, kMegatronCoreFp8Cast))
    out.differs.push_back(d);
  if (plan.fsdp)
    out.differs.push_back(
        "fsdp: not set here; NeMo 1's model.fsdp (PyTorch FSDP, fsdp_sharding_strategy: full) "
        "replaces the distributed optimizer, and NeMo 2 takes Megatron-FSDP "
        "(use_megatron_fsdp, data_parallel_sharding_strategy: optim_grads_params)");
  // NeMo passes Megatron-Core's own keys for uneven stages on (megatron_base_model.py), but
  // checks first that the layers left by the first and last stages divide evenly over the others
  // unless the split counts both ends (megatron_gpt_model.py build_transformer_config), and with
  // interleaving that pp cuts the layers in whole chunks per stage (megatron_base_model.py).
  const std::optional<UnevenStages> uneven = MegatronUnevenStages(plan);
  if (uneven && !uneven->layout.empty())
    out.differs.push_back(fmt::format(
        "uneven stages (\"{}\"): NeMo checks that the layers left by the first and last stages "
        "divide evenly over the others, so it cannot run these; Megatron-LM can "
        "(--pipeline-model-parallel-layout)",
        uneven->layout));
  const bool both_ends = plan.split_counts_embedding() && plan.split_counts_loss();
  if (plan.pipeline_split != PipelineSplit::kLayers && !both_ends && plan.pp > 1 &&
      (plan.model.layers % plan.pp != 0 ||
       (plan.virtual_stages > 1 && plan.model.layers / plan.pp % plan.virtual_stages != 0)))
    out.differs.push_back(fmt::format(
        "pipeline_split {}: NeMo counts the ends in the split only when it counts both, or when "
        "the {} layers alone cut evenly over pp {}{}; it refuses this one",
        PipelineSplitName(plan.pipeline_split), plan.model.layers, plan.pp,
        plan.virtual_stages > 1 ? fmt::format(" x {} chunks", plan.virtual_stages) : ""));
  std::string precision = "bf16-mixed";
  if (plan.precision == Dtype::kFp16) precision = "16-mixed";
  if (plan.precision == Dtype::kFp32 || plan.precision == Dtype::kTf32) precision = "32";
  if (plan.precision == Dtype::kTf32)
    out.comments.push_back("tf32: precision 32, with TF32 matmuls where PyTorch allows them");

  std::string body;
  body += "trainer:\n";
  body += fmt::format("  devices: {}\n", plan.cluster.launch_gpus_per_host());
  body += fmt::format("  num_nodes: {}\n", plan.cluster.hosts());
  body += fmt::format("  precision: {}\n", precision);
  body += "model:\n";
  // megatron_gpt_config.yaml builds Megatron-Core's own layers unless told to take Transformer
  // Engine's, which the stacks' kernels are (and comm overlap and context parallelism need).
  body += "  transformer_engine: true\n";
  body += fmt::format("  micro_batch_size: {}\n", plan.micro_batch);
  body += fmt::format("  global_batch_size: {}\n", plan.global_batch);
  body += fmt::format("  tensor_model_parallel_size: {}\n", plan.tp);
  body += fmt::format("  pipeline_model_parallel_size: {}\n", plan.pp);
  if (plan.cp > 1) body += fmt::format("  context_parallel_size: {}\n", plan.cp);
  if (cp_comm_type && *cp_comm_type != "p2p")  // NeMo's default is the ring
    body += fmt::format("  cp_comm_type: {}\n", *cp_comm_type);
  body += fmt::format("  virtual_pipeline_model_parallel_size: {}\n",
                      plan.virtual_stages > 1 ? std::to_string(plan.virtual_stages) : "null");
  if (plan.virtual_stages > 1)
    body += fmt::format("  overlap_p2p_comm: {}\n  batch_p2p_comm: {}\n",
                        YamlBool(plan.p2p_overlapped()), YamlBool(!plan.p2p_overlapped()));
  if (plan.split_counts_embedding()) body += "  account_for_embedding_in_pipeline_split: true\n";
  if (plan.split_counts_loss()) body += "  account_for_loss_in_pipeline_split: true\n";
  // (Over 2 stages the first's count alone: NeMo's check divides by the stages left.)
  if (uneven && uneven->layout.empty()) {
    body += fmt::format("  num_layers_in_first_pipeline_stage: {}\n", uneven->first);
    if (plan.pp > 2) body += fmt::format("  num_layers_in_last_pipeline_stage: {}\n", uneven->last);
  }
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
  if (m.head_dim > 0) body += fmt::format("  kv_channels: {}\n", m.head_dim);
  // GeGLU is NeMo's fast-geglu, as its Gemma configs run it (megatron_gemma2_config.yaml).
  body +=
      fmt::format("  activation: {}\n", m.activation == Activation::kSwiglu        ? "swiglu"
                                        : m.activation == Activation::kSquaredRelu ? "squared-relu"
                                        : m.activation == Activation::kGeglu       ? "fast-geglu"
                                                                                   : "gelu");
  body += fmt::format("  normalization: {}\n", m.norm == Norm::kRmsNorm ? "rmsnorm" : "layernorm");
  body += fmt::format("  bias: {}\n", YamlBool(m.bias));
  // Megatron-Core fuses the bias only into GeLU with biases and SwiGLU (transformer_config.py; its
  // MLP raises on a fused GeGLU gate); megatron_gpt_config.yaml asks for the fusion, NeMo's Gemma
  // configs turn it off.
  if (m.activation == Activation::kSquaredRelu || m.activation == Activation::kGeglu ||
      (m.activation == Activation::kGelu && !m.bias))
    body += "  bias_activation_fusion: false\n";
  body += fmt::format("  position_embedding_type: {}\n",
                      m.learned_positions() ? "learned_absolute" : "rope");
  for (const LaunchedFeature& f : features)
    for (const std::string& setting : f.settings) body += "  " + setting + "\n";
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
  // megatron_gpt_config.yaml's dropouts are 0.1 and its bias-dropout-add fused.
  if (!plan.applies_dropout()) body += "  hidden_dropout: 0.0\n  attention_dropout: 0.0\n";
  if (!plan.fuses_bias_dropout_add()) body += "  bias_dropout_add_fusion: false\n";
  if (plan.attention_kernel() == AttentionKernel::kUnfused &&
      plan.softmax_kernels() == SoftmaxKernels::kScaleMaskSoftmax)
    body += "  masked_softmax_fusion: false\n";
  // NeMo's key fuses the loss as Megatron-Core's --cross-entropy-loss-fusion does.
  const CrossEntropy loss = plan.loss_kernels();
  if (loss == CrossEntropy::kMegatronFused) body += "  cross_entropy_loss_fusion: true\n";
  if (plan.attention)
    body += fmt::format("  attention_backend: {}\n", AttentionBackendName(*plan.attention));
  if (loss == CrossEntropy::kTe || loss == CrossEntropy::kFused)
    out.differs.push_back(fmt::format(
        "cross_entropy {}: megatron_gpt_config.yaml fuses the loss only as Megatron-Core does "
        "(cross_entropy_loss_fusion: true); Megatron-Bridge takes cross_entropy_fusion_impl te",
        CrossEntropyName(loss)));
  if (plan.precision == Dtype::kFp8 && plan.fp8_scaling() == Fp8Recipe::kCurrent)
    out.differs.push_back(
        "fp8_recipe current: megatron_gpt_config.yaml's fp8 keys run delayed scaling (an amax "
        "history); NeMo 2 and Megatron-Bridge take current scaling "
        "(bf16_with_fp8_current_scaling_mixed)");
  if (plan.precision == Dtype::kFp8) {
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
  // Distributed Adam's overlaps; NeMo 1 launches the last gradients aligned (its grad_sync_func).
  if (plan.distributed_optimizer && !plan.fsdp && plan.dp_cp() > 1) {
    if (plan.stack.overlap_grad_reduce) {
      body += "    overlap_grad_sync: true\n";
      if (plan.gradient_sync() == GradSync::kMegatron)
        out.differs.push_back(
            "grad_sync megatron: NeMo 1 launches the last gradients through its schedule's "
            "grad_sync_func (megatron-aligned); NeMo 2.0's Megatron-Core DDP hooks are megatron");
      if (plan.gradient_sync() == GradSync::kLayer)
        out.differs.push_back(GradSyncLayerDifference());
    }
    if (plan.stack.overlap_param_gather && plan.stack.overlap_grad_reduce)
      body += "    overlap_param_sync: true\n";
    else if (plan.stack.overlap_param_gather)
      out.differs.push_back(
          ParamGatherAloneDifference("NeMo", "overlap_param_sync", "overlap_grad_sync"));
  }
  // fused_adam reduces into its fp32 main-gradient buffers (optimizer_with_main_params.py).
  if (!plan.distributed_optimizer && !plan.fsdp && plan.dp_cp() > 1 && GradBytes(plan) == 2)
    out.differs.push_back(
        "gradients reduced in 16 bits: NeMo's fused_adam reduces them in its fp32 main-gradient "
        "buffers (distributed_fused_adam takes grad_sync_dtype)");
  if (plan.distributed_optimizer && plan.optimizer_dtype != Dtype::kFp32)
    body += fmt::format("    dtype: {}\n", DtypeName(plan.optimizer_dtype));
  else if (std::optional<std::string> d = OptimizerDtypeDifference(
               plan, "only distributed_fused_adam takes a dtype; fused_adam keeps fp32"))
    out.differs.push_back(*d);
  out.body = body;
  return out.Text();
}

}  // namespace domino::export_parts
