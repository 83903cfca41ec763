// A DeepSpeed config and DeepSpeed-Domino's pretrain arguments for a plan, or the settings its
// public code cannot run: ExportPlan's kDeepSpeed. DeepSpeed-Domino is DeepSpeedExamples'
// training/DeepSpeed-Domino (45b4b715: pretrain_gpt.py over its Megatron-LM submodule, 375395c1)
// with DeepSpeed's DominoTransformer (deepspeed/runtime/domino/transformer.py).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/export_parts.h"
#include "planner/iteration.h"

namespace domino::export_parts {
namespace {

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

}  // namespace

Result<std::string> ExportDeepSpeed(const Plan& plan) {
  if (std::vector<std::string> refusals = DeepSpeedDominoRefusals(plan); !refusals.empty()) {
    std::string list;
    for (const std::string& r : refusals) list += (list.empty() ? "" : "; ") + r;
    return Error(fmt::format("DeepSpeed-Domino cannot run this plan: {}", list));
  }
  const ModelSpec& m = plan.model;
  Output out =
      Opening(plan,
              "DeepSpeed config and DeepSpeed-Domino arguments (DeepSpeedExamples/training/"
              "DeepSpeed-Domino)");
  // Its ranks are its tp ranks (no dp, pp or cp); DeepSpeed's launcher counts GPUs per host and
  // reaches more than one host through a hostfile.
  const int per_node = plan.cluster.launch_gpus_per_host();
  const std::string launcher =
      plan.tp <= per_node
          ? fmt::format("deepspeed --num_gpus {}", plan.tp)
          : fmt::format("deepspeed --hostfile HOSTFILE --num_nodes {} --num_gpus {}",
                        (plan.tp + per_node - 1) / per_node, per_node);
  out.comments.push_back(fmt::format(
      "launch: {} pretrain_gpt.py ARGUMENTS{}; DeepSpeed-Domino takes batch and precision from "
      "its arguments, the DeepSpeed config states them for a DeepSpeed engine",
      launcher,
      plan.tp <= per_node ? ""
                          : fmt::format(" (HOSTFILE: a line `HOST slots={}` per host)", per_node)));
  for (const std::string& d : ModelApproximations(plan, MegatronFeatures(m, false)))
    out.differs.push_back(d);
  if (plan.scope != OverlapScope::kInterLayer) {
    out.differs.push_back(fmt::format(
        "overlap scope {}: DeepSpeed-Domino overlaps a μ-batch's all-reduce with the next "
        "layer's work too (inter-layer)",
        ScopeName(plan.scope)));
  }
  // Its layers (DeepSpeed's deepspeed/runtime/domino/transformer.py, DominoTransformerLayer) run
  // torch.nn.LayerNorm, F.gelu and as many key/value heads as query heads; the biases, rotary
  // positions and untied embeddings follow the arguments.
  if (m.norm == Norm::kRmsNorm)
    out.differs.push_back("RMSNorm: DeepSpeed-Domino's layers run LayerNorm");
  if (m.activation != Activation::kGelu)
    out.differs.push_back(fmt::format("{} MLP: DeepSpeed-Domino's layers run GeLU (over ffn {})",
                                      m.activation == Activation::kSwiglu  ? "SwiGLU"
                                      : m.activation == Activation::kGeglu ? "GeGLU"
                                                                           : "squared-ReLU",
                                      m.ffn));
  if (m.kv_heads != m.heads) {
    out.differs.push_back(fmt::format(
        "{} key/value heads: DeepSpeed-Domino has no grouped-query attention and runs {} "
        "(multi-head)",
        m.kv_heads, m.heads));
  }
  if (std::optional<std::string> d = OptimizerDtypeDifference(
          plan, "DeepSpeed's mixed-precision optimizers keep fp32 master weights, m and v"))
    out.differs.push_back(*d);
  if (std::optional<std::string> d = AttentionDifference(
          plan, "DeepSpeed-Domino's models run their own attention whatever this says"))
    out.differs.push_back(*d);
  for (const std::string& d : KernelDifferences(
           plan, "DeepSpeed-Domino", false,
           FrameworkFp8Cast{Fp8Cast::kLinear, "it runs no fp8, and the export refuses fp8"}))
    out.differs.push_back(d);

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
  AddModelArguments(m, plan, /*layer_options=*/false, args);
  if (!m.bias) args.push_back("--disable-bias-linear");
  if (!m.tied_embeddings) args.push_back("--untie-embeddings-and-output-weights");
  args.push_back(fmt::format("--tensor-model-parallel-size {}", plan.tp));
  args.push_back(fmt::format("--micro-batch-size {}", plan.micro_batch));
  args.push_back(fmt::format("--global-batch-size {}", plan.global_batch));
  if (plan.precision == Dtype::kBf16) args.push_back("--bf16");
  if (plan.precision == Dtype::kFp16) args.push_back("--fp16");
  out.body =
      "# --- ds_config.json\n" + body + "# --- DeepSpeed-Domino arguments\n" + Arguments(args);
  return out.Text();
}

}  // namespace domino::export_parts
