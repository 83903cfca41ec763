// A torchtitan job config (TOML) for a plan: ExportPlan's kTorchtitan. The keys are those of
// torchtitan's releases that read TOML job configs, v0.2.0 to v0.2.2 (73a0e697):
// torchtitan/config/job_config.py.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "planner/export_parts.h"
#include "planner/iteration.h"

namespace domino::export_parts {
namespace {

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

}  // namespace

std::string ExportTorchtitan(const Plan& plan) {
  const ModelSpec& m = plan.model;
  Output out = Opening(plan, "torchtitan job config (TOML)");
  out.comments.push_back(
      fmt::format("launch: torchrun --nnodes {} --nproc_per_node {} -m torchtitan.train "
                  "--job.config_file THIS.toml",
                  plan.cluster.hosts(), plan.cluster.launch_gpus_per_host()));

  // torchtitan's llama3 is the Llama architecture: say what else this model is.
  std::vector<std::string> architecture;
  if (m.norm != Norm::kRmsNorm) architecture.push_back("LayerNorm");
  if (m.activation == Activation::kGelu) architecture.push_back("a GeLU MLP");
  if (m.activation == Activation::kSquaredRelu) architecture.push_back("a squared-ReLU MLP");
  if (m.activation == Activation::kGeglu) architecture.push_back("a GeLU-gated MLP (GeGLU)");
  if (m.learned_positions()) architecture.push_back("learned positions");
  if (m.bias) architecture.push_back("biases");
  if (m.tied_embeddings) architecture.push_back("tied embeddings");
  if (plan.applies_dropout()) architecture.push_back("dropout");
  if (!architecture.empty()) {
    std::string list;
    for (const std::string& a : architecture) list += (list.empty() ? "" : ", ") + a;
    out.differs.push_back(fmt::format(
        "torchtitan's llama3 model has RMSNorm, SwiGLU, rotary positions, no biases and an "
        "untied LM head; {} has {}",
        m.name, list));
  }
  if (m.head_dim > 0) {
    out.differs.push_back(fmt::format(
        "torchtitan's llama3 model makes each head dim / n_heads = {} wide; {}'s are {} (Q {} "
        "wide over a hidden of {}): torchtitan's qwen3 model (torchtitan/models/qwen3) takes a "
        "head_dim",
        m.hidden / m.heads, m.name, m.head_dim, m.q_hidden(), m.hidden));
  }
  for (const std::string& d : ModelApproximations(plan)) out.differs.push_back(d);
  std::string flavor = m.name;
  for (const Flavor& f : kLlama3Flavors) {
    if (m.head_dim == 0 && f.layers == m.layers && f.hidden == m.hidden && f.heads == m.heads &&
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
  for (const std::string& d : DecomposedDifferences(plan, "torchtitan's async TP", plan.tp))
    out.differs.push_back(d);
  if (std::optional<std::string> d = OptimizerDtypeDifference(
          plan, "torchtitan's AdamW keeps its state in the parameters' type, fp32 under FSDP2"))
    out.differs.push_back(*d);
  if (std::optional<std::string> d = AttentionDifference(
          plan,
          "torchtitan's attention is PyTorch's scaled_dot_product_attention, whose backend "
          "PyTorch chooses; this config names none"))
    out.differs.push_back(*d);
  if (plan.tp > 1 && !plan.sequence_parallel) {
    out.differs.push_back(
        "no sequence parallelism: torchtitan's tensor parallelism always shards norms along the "
        "sequence (sequence parallel)");
  }
  // Data parallelism: DDP (data_parallel_replicate_degree) only where it is the one parallelism
  // (torchtitan's parallelize.py refuses "DDP has not supported > 1D parallelism"), else FSDP
  // (data_parallel_shard_degree), which context parallelism always turns on over dp_shard x cp
  // (parallel_dims.py fsdp_enabled).
  const bool other_parallelism = plan.tp > 1 || plan.pp > 1 || plan.cp > 1;
  const bool sharded =
      plan.fsdp || plan.distributed_optimizer || plan.cp > 1 || (plan.dp > 1 && other_parallelism);
  if (sharded && !plan.fsdp && plan.dp_cp() > 1) {
    const char* why = plan.distributed_optimizer ? "the distributed optimizer"
                      : plan.cp > 1
                          ? "context parallelism (torchtitan shards over dp x cp whenever cp > 1)"
                          : "data parallelism beside tensor or pipeline parallelism (its DDP "
                            "runs only alone)";
    out.differs.push_back(fmt::format(
        "{}: torchtitan runs FSDP, which shards parameters and gradients as well as optimizer "
        "state, over the dp x cp ranks",
        why));
  }
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
  // torchtitan reduces gradients in float32: its mixed_precision_reduce takes nothing else.
  if (plan.dp_cp() > 1 && GradBytes(plan) == 2)
    out.differs.push_back(
        "gradients reduced in 16 bits: torchtitan reduces them in float32 "
        "(mixed_precision_reduce takes only \"float32\")");
  std::string param_dtype = "bfloat16";
  if (plan.precision == Dtype::kFp32 || plan.precision == Dtype::kTf32) param_dtype = "float32";
  if (plan.precision == Dtype::kFp16)
    out.differs.push_back("fp16: torchtitan trains in bfloat16 or float32; bfloat16 is set");
  // torchao's float8 training (torchtitan's converter) scales each tensor from its own amax.
  if (plan.precision == Dtype::kFp8 && plan.fp8_scaling() == Fp8Recipe::kDelayed)
    out.differs.push_back(
        "fp8_recipe delayed: torchtitan's float8 converter (torchao, recipe tensorwise) scales "
        "each tensor from its own amax, as fp8_recipe current prices it");
  for (const std::string& d : KernelDifferences(
           plan, "torchtitan", false,
           FrameworkFp8Cast{Fp8Cast::kLinear,
                            "torchao's float8 linears cast their 16-bit inputs themselves"}))
    out.differs.push_back(d);

  std::string body;
  body += "[model]\n";
  body += "name = \"llama3\"\n";
  body += fmt::format("flavor = {}\n", TomlString(flavor));
  if (plan.precision == Dtype::kFp8) body += "converters = [\"quantize.linear.float8\"]\n";
  body += "\n[training]\n";
  // Without a pipeline, torchtitan accumulates gradients over local batches of one micro-batch;
  // with one, its local batch is the DP rank's share, cut into pipeline micro-batches.
  const int local_batch = plan.pp > 1 ? plan.global_batch / plan.dp : plan.micro_batch;
  body += fmt::format("local_batch_size = {}\n", local_batch);
  body += fmt::format("global_batch_size = {}\n", plan.global_batch);
  body += fmt::format("seq_len = {}\n", plan.seq_len);
  body += fmt::format("mixed_precision_param = {}\n", TomlString(param_dtype));
  body += "\n[parallelism]\n";
  const int shard = sharded ? plan.dp : 1;
  body += fmt::format("data_parallel_replicate_degree = {}\n", plan.dp / shard);
  body += fmt::format("data_parallel_shard_degree = {}\n", shard);
  body += fmt::format("tensor_parallel_degree = {}\n", plan.tp);
  body += fmt::format("pipeline_parallel_degree = {}\n", plan.pp);
  if (plan.method != OverlapMethod::kDomino) body += "enable_async_tensor_parallel = true\n";
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
  if (plan.cp > 1 && plan.cp_communication() != CpComm::kP2p)
    out.differs.push_back(fmt::format(
        "cp_comm {}: torchtitan runs context parallelism as PyTorch's ring attention "
        "(torch.distributed.tensor.experimental.context_parallel), priced as Transformer Engine's "
        "{}",
        CpCommName(plan.cp_communication()), CpCommName(plan.cp_communication())));
  body += "\n[activation_checkpoint]\n";
  body += fmt::format("mode = \"{}\"\n", RecomputeName(plan.recompute));
  if (plan.recompute == Recompute::kSelective) body += "selective_ac_option = \"op\"\n";
  if (plan.recompute == Recompute::kFull && plan.recompute_layers > 0)
    out.differs.push_back(fmt::format(
        "recompute_layers {}: torchtitan's full activation checkpointing wraps every layer",
        plan.recompute_layers));
  // Async TP is torch.compile's pass: torchtitan refuses it without the model compiled.
  if (plan.method != OverlapMethod::kDomino)
    body += "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  out.body = body;
  return out.Text();
}

}  // namespace domino::export_parts
