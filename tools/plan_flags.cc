#include "tools/plan_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "tools/command.h"

namespace domino::cli {
namespace {

template <typename T, typename Names>
Status ApplyNamed(const std::string& flag, const std::string& text, const Names& names, T* out) {
  if (text.empty()) return Status::Ok();
  std::string allowed;
  for (const auto& [name, value] : names) {
    if (text == name) {
      *out = value;
      return Status::Ok();
    }
    allowed += (allowed.empty() ? "" : " | ") + std::string(name);
  }
  return Error(fmt::format("--{}: unknown value '{}' (expected {})", flag, text, allowed));
}

// A flag that overrides what the plan's stack says: set only when given.
template <typename T>
Status ApplyOverride(const std::string& flag, const std::string& text,
                     std::span<const std::pair<std::string_view, T>> names, std::optional<T>* out) {
  if (text.empty()) return Status::Ok();
  T value{};
  DOMINO_RETURN_IF_ERROR(ApplyNamed(flag, text, names, &value));
  *out = value;
  return Status::Ok();
}

// Applies a flag whose value names one of a few choices (--precision bf16, --scope none, ...) to
// `plan`: an unknown name is an error, an empty one leaves the plan as it is.
Status ApplyNamedFlag(std::string_view flag, const std::string& text, Plan* plan) {
  if (flag == "precision") return ApplyNamed("precision", text, PrecisionNames(), &plan->precision);
  if (flag == "scope") return ApplyNamed("scope", text, ScopeNames(), &plan->scope);
  if (flag == "method") return ApplyNamed("method", text, MethodNames(), &plan->method);
  if (flag == "optimizer-dtype")
    return ApplyNamed("optimizer-dtype", text, OptimizerDtypeNames(), &plan->optimizer_dtype);
  if (flag == "recompute") return ApplyNamed("recompute", text, RecomputeNames(), &plan->recompute);
  if (flag == "placement") return ApplyNamed("placement", text, PlacementNames(), &plan->placement);
  if (flag == "pipeline-split")
    return ApplyNamed("pipeline-split", text, PipelineSplitNames(), &plan->pipeline_split);
  if (flag == "cross-entropy")
    return ApplyOverride("cross-entropy", text, CrossEntropyNames(), &plan->cross_entropy);
  if (flag == "attention")
    return ApplyOverride("attention", text, AttentionKernelNames(), &plan->attention);
  if (flag == "fp8-recipe")
    return ApplyOverride("fp8-recipe", text, Fp8RecipeNames(), &plan->fp8_recipe);
  if (flag == "fp8-cast") return ApplyOverride("fp8-cast", text, Fp8CastNames(), &plan->fp8_cast);
  if (flag == "softmax")
    return ApplyOverride("softmax", text, SoftmaxKernelsNames(), &plan->softmax);
  if (flag == "grad-reduce")
    return ApplyOverride("grad-reduce", text, GradReduceNames(), &plan->grad_reduce);
  if (flag == "grad-sync")
    return ApplyOverride("grad-sync", text, GradSyncNames(), &plan->grad_sync);
  if (flag == "cp-comm") return ApplyOverride("cp-comm", text, CpCommNames(), &plan->cp_comm);
  return Status::Ok();
}

// The flags ApplyNamedFlag reads, and where PlanFlags keeps their text.
constexpr std::pair<std::string_view, std::string PlanFlags::*> kNamedFlags[] = {
    {"precision", &PlanFlags::precision},
    {"scope", &PlanFlags::scope},
    {"method", &PlanFlags::method},
    {"optimizer-dtype", &PlanFlags::optimizer_dtype},
    {"recompute", &PlanFlags::recompute},
    {"placement", &PlanFlags::placement},
    {"pipeline-split", &PlanFlags::pipeline_split},
    {"cross-entropy", &PlanFlags::cross_entropy},
    {"attention", &PlanFlags::attention},
    {"fp8-recipe", &PlanFlags::fp8_recipe},
    {"fp8-cast", &PlanFlags::fp8_cast},
    {"softmax", &PlanFlags::softmax},
    {"grad-reduce", &PlanFlags::grad_reduce},
    {"grad-sync", &PlanFlags::grad_sync},
    {"cp-comm", &PlanFlags::cp_comm},
};

// A flag of ApplyNamedFlag's checked as it is parsed, so that an unknown name is a usage error
// like any flag value out of its range: "--precision: unknown value 'fp4' (expected ...)".
CLI::Validator NamedValue(std::string_view flag) {
  return CLI::Validator(
      [flag](std::string& text) -> std::string {
        if (text.empty()) return "must not be empty";
        Plan scratch;
        const Status status = ApplyNamedFlag(flag, text, &scratch);
        if (status.ok()) return "";
        const std::string prefix = fmt::format("--{}: ", flag);
        const std::string& message = status.message();
        return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
      },
      "");
}

}  // namespace

std::string NodeFileOf(const std::string& cluster) {
  // NODE:COUNT names its node before the colon; a cluster file has no count.
  return cluster.ends_with(".yaml") || cluster.ends_with(".yml")
             ? cluster
             : cluster.substr(0, cluster.find(':'));
}

std::vector<std::string> PlanInputFiles(const PlanFlags& flags, const Plan& plan,
                                        bool with_plan_file) {
  std::vector<std::string> files;
  for (const std::string& path : {with_plan_file ? flags.plan_path : std::string(), plan.model_ref,
                                  NodeFileOf(plan.cluster_ref), plan.cluster.node.file,
                                  plan.cluster.node.gpu.file, plan.stack_ref}) {
    std::error_code ec;
    if (!path.empty() && std::filesystem::is_regular_file(path, ec)) files.push_back(path);
  }
  return files;
}

int DefaultGlobalBatch(int micro_batch, int dp) {
  return static_cast<int>(
      std::min<int64_t>(static_cast<int64_t>(micro_batch) * dp, kGlobalBatchBound.max + 1));
}

namespace {

CLI::Validator Bounded(const PlanIntBound& bound) { return DecimalInt(bound.min, bound.max); }

// A plain switch: --NAME turns it on, --no-NAME (or --NAME=false) off; given once at most. The
// text stays empty when neither is given, so that a plan file's value is kept.
void AddSwitch(CLI::App* app, const std::string& name, std::string* text, const std::string& help) {
  app->add_flag(fmt::format("--{}{{true}},--no-{}{{false}}", name, name), *text,
                help + "; --no-" + name + " or --" + name + "=false turns it off")
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw)
      ->check(SwitchValue());
}

}  // namespace

void AddPlanFlags(CLI::App* app, PlanFlags* f, bool with_plan_file) {
  if (with_plan_file)
    app->add_option("--plan", f->plan_path, "plan or report YAML to start from")->check(NonEmpty());
  app->add_option(
         "--model", f->model,
         "catalog model (domino models), model YAML, or a Hugging Face config.json or its folder "
         "(default: gpt3-13b)")
      ->check(NonEmpty());
  app->add_option("--cluster", f->cluster,
                  "NODE:COUNT, NODE:COUNT:GPUS or cluster YAML (default: dgx-h100:4)")
      ->check(NonEmpty());
  app->add_option("--stack", f->stack,
                  fmt::format(
                      "software that runs the plan: {} or a stack YAML (default: {})",
                      [] {
                        std::string names;
                        for (const EmbeddedFile& file : StackCatalog())
                          names += (names.empty() ? "" : " | ") + std::string(file.name);
                        return names;
                      }(),
                      kDefaultStack))
      ->check(NonEmpty());
  app->add_option("--precision", f->precision, "bf16 | fp16 | fp8 (default: bf16)")
      ->check(NamedValue("precision"));
  // The same bounds as the plan file's keys (planner/plan.h), checked before any size is derived.
  app->add_option("--seq-len", f->seq_len, "sequence length (default: 1024)")
      ->check(Bounded(kSeqLenBound));
  app->add_option("--micro-batch", f->micro_batch, "sequences per micro-batch (default: 16)")
      ->check(Bounded(kMicroBatchBound));
  app->add_option(
         "--global-batch", f->global_batch,
         "sequences per iteration (default: micro-batch x dp, one micro-batch per DP rank)")
      ->check(Bounded(kGlobalBatchBound));
  app->add_option("--tp", f->tp, "tensor-parallel degree (default: the GPUs left by cp, pp and dp)")
      ->check(Bounded(kTpBound));
  app->add_option("--cp", f->cp,
                  "context-parallel degree: attention over seq-len/cp tokens per GPU "
                  "(default: 1)")
      ->check(Bounded(kCpBound));
  app->add_option("--cp-comm", f->cp_comm,
                  "with --cp: p2p (the KV ring) | all_gather (KV gathered, Llama 3's) | a2a "
                  "(Ulysses' head scatter) | a2a+p2p (a2a in groups, the ring across them), "
                  "Transformer Engine's cp_comm_type (default: p2p, or over a sliding window a2a "
                  "where cp divides each TP rank's heads, else all_gather)")
      ->check(NamedValue("cp-comm"));
  app->add_option("--cp-a2a", f->cp_a2a,
                  "with --cp-comm a2a+p2p: the ranks of each a2a group, the ring over cp/N groups "
                  "(Megatron-LM's --hierarchical-context-parallel-sizes N cp/N; default: the most "
                  "that fit in a node beside their TP ranks)")
      ->check(Bounded(kCpA2aBound));
  app->add_option("--pp", f->pp, "pipeline-parallel degree (default: 1)")->check(Bounded(kPpBound));
  app->add_option("--dp", f->dp, "data-parallel degree (default: 1)")->check(Bounded(kDpBound));
  app->add_option("--virtual-stages", f->virtual_stages,
                  "interleaved pipeline stages per GPU (default: 1)")
      ->check(Bounded(kVirtualStagesBound));
  app->add_option("--pipeline-split", f->pipeline_split,
                  "what the pipeline split counts: layers | embedding | loss | ends (the "
                  "embedding and the loss as one layer each, Megatron-Core's "
                  "account_for_*_in_pipeline_split; default: layers)")
      ->check(NamedValue("pipeline-split"));
  AddSwitch(app, "sp", &f->sequence_parallel, "sequence parallelism (default: off)");
  app->add_option("--row-split", f->row_split,
                  "row split p (Domino's micro-batch slices), 1-16 (default: 1)")
      ->check(Bounded(kRowSplitBound));
  app->add_option("--col-split", f->col_split,
                  "column split q of the row-parallel weights, 1-16 (default: 1)")
      ->check(Bounded(kColSplitBound));
  app->add_option(
         "--scope", f->scope,
         "overlap scope: none | intra-layer | inter-layer (default: none, or the widest the "
         "splits allow when --row-split or --col-split is above 1)")
      ->check(NamedValue("scope"));
  app->add_option("--method", f->method,
                  "overlap method: domino (slicing) | decomposed (TE/async-TP collective matmul, "
                  "needs --sp) | both")
      ->check(NamedValue("method"));
  app->add_option("--chunks", f->chunks,
                  "pieces of each decomposed all-gather, 1-16 (default: tp, as TE's ring exchange)")
      ->check(Bounded(kChunksBound));
  app->add_option("--rs-chunks", f->rs_chunks,
                  "pieces of each decomposed reduce-scatter, 1-16 (default: the stack's, 4 on "
                  "megatron-core as TE's pipeline, else --chunks)")
      ->check(Bounded(kRsChunksBound));
  AddSwitch(app, "copy-engine", &f->copy_engine,
            "decomposed all-gather parts on copy engines (peer copies, no SMs: TE's ring exchange; "
            "default: the stack's, on for megatron-core)");
  app->add_option("--recompute", f->recompute,
                  "activation recompute: none | selective | full (default: none)")
      ->check(NamedValue("recompute"));
  app->add_option("--recompute-layers", f->recompute_layers,
                  "with --recompute full: the layers of each model chunk it redoes, its first "
                  "ones (Megatron's --recompute-method block; default 0: every layer)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--placement", f->placement,
                  "rank layout, innermost first: tp-dp-pp (Megatron's, default) | tp-pp-dp")
      ->check(NamedValue("placement"));
  AddSwitch(app, "distributed-optimizer", &f->distributed_optimizer,
            "shard the optimizer state over the DP ranks (default: off)");
  AddSwitch(app, "fsdp", &f->fsdp,
            "shard parameters and gradients too (ZeRO-3 / FSDP; needs --distributed-optimizer; "
            "default: off)");
  app->add_option("--cross-entropy", f->cross_entropy,
                  "the loss's kernels: vocab-parallel | megatron-fused | te | fused (default: the "
                  "stack's)")
      ->check(NamedValue("cross-entropy"));
  app->add_option("--attention", f->attention,
                  "the attention kernel: flash (the GPU's fused one, cuDNN's on Hopper) | flash2 "
                  "(FlashAttention-2's, as NVTE_FUSED_ATTN=0 runs) | unfused | flex (PyTorch's "
                  "FlexAttention; default: the stack's, or for a model's attention_softcap its "
                  "capped_attention)")
      ->check(NamedValue("attention"));
  app->add_option("--fp8-recipe", f->fp8_recipe,
                  "with --precision fp8, how tensors are scaled: delayed (from earlier steps' "
                  "amax; default) | current (each tensor's own, Megatron-LM's tensorwise)")
      ->check(NamedValue("fp8-recipe"));
  app->add_option("--fp8-cast", f->fp8_cast,
                  "with --precision fp8, which kernels write the QKV, fc1 and fc2 inputs in fp8: "
                  "norm-and-activation (TE's LayerNormLinear and LayerNormMLP) | norm "
                  "(Megatron-Core's layers) | linear (each te.Linear casts its own; default: the "
                  "stack's)")
      ->check(NamedValue("fp8-cast"));
  app->add_option("--softmax", f->softmax,
                  "with unfused attention, its kernels over the scores: fused (scale, mask and "
                  "softmax in one) | scale-mask-softmax (three) | scale-softmax (no mask; default: "
                  "the stack's)")
      ->check(NamedValue("softmax"));
  app->add_option("--grad-reduce", f->grad_reduce,
                  "type DP gradients are reduced in: fp32 | param (the 16-bit parameters') | "
                  "fp16-param (the parameters' when fp16, else fp32; default: the stack's)")
      ->check(NamedValue("grad-reduce"));
  app->add_option("--grad-sync", f->grad_sync,
                  "when the last micro-batch's DP gradient buckets are reduced: layer (each as "
                  "its layer's backward ends) | megatron (Megatron-Core DDP's hooks, NeMo 2.0) | "
                  "megatron-aligned (launched with grad_sync_func, Megatron-LM; default: the "
                  "stack's)")
      ->check(NamedValue("grad-sync"));
  app->add_option("--optimizer-dtype", f->optimizer_dtype,
                  "type of the Adam state (master weights, m and v): fp32 | bf16 (Apex's "
                  "DistributedFusedAdam with dtype bf16, NeMo's optim.dtype; default: fp32)")
      ->check(NamedValue("optimizer-dtype"));
}

Result<Plan> BuildPlan(const PlanFlags& f, bool check_rules) {
  Plan plan;
  bool from_file = !f.plan_path.empty();
  if (from_file) {
    Result<Plan> loaded = LoadPlan(f.plan_path);
    if (!loaded.ok()) return loaded.error();
    plan = std::move(loaded).value();
    plan.predicted.reset();
    plan.measured.reset();
  }
  if (!f.model.empty()) plan.model_ref = f.model;
  if (!f.cluster.empty()) plan.cluster_ref = f.cluster;
  if (!f.stack.empty()) plan.stack_ref = f.stack;
  for (const auto& [flag, field] : kNamedFlags)
    DOMINO_RETURN_IF_ERROR(ApplyNamedFlag(flag, f.*field, &plan));
  if (f.recompute_layers >= 0) plan.recompute_layers = f.recompute_layers;
  if (!ParseBoolFlag(f.fsdp, &plan.fsdp))
    return Error(fmt::format("--fsdp: expected true or false, got '{}'", f.fsdp));
  if (!ParseBoolFlag(f.sequence_parallel, &plan.sequence_parallel))
    return Error(fmt::format("--sp: expected true or false, got '{}'", f.sequence_parallel));
  bool copy_engine = false;
  if (!ParseBoolFlag(f.copy_engine, &copy_engine))
    return Error(fmt::format("--copy-engine: expected true or false, got '{}'", f.copy_engine));
  if (!f.copy_engine.empty()) plan.copy_engine = copy_engine;
  if (!ParseBoolFlag(f.distributed_optimizer, &plan.distributed_optimizer))
    return Error(fmt::format("--distributed-optimizer: expected true or false, got '{}'",
                             f.distributed_optimizer));
  // The cluster first: the default tp depends on it.
  Result<ClusterSpec> cluster = LoadCluster(plan.cluster_ref);
  if (!cluster.ok()) return cluster.error();
  // Without a plan file, every default is the built-in plan's (planner/plan.h), whatever subset of
  // flags is given; only tp and the global batch are derived, from the degrees and micro-batch.
  if (!from_file) plan.tp = plan.global_batch = 0;
  auto set = [](int value, int* out) {
    if (value > 0) *out = value;
  };
  set(f.seq_len, &plan.seq_len);
  set(f.micro_batch, &plan.micro_batch);
  set(f.cp, &plan.cp);
  set(f.cp_a2a, &plan.cp_a2a);
  set(f.pp, &plan.pp);
  set(f.dp, &plan.dp);
  set(f.virtual_stages, &plan.virtual_stages);
  set(f.row_split, &plan.row_split);
  set(f.col_split, &plan.col_split);
  set(f.chunks, &plan.chunks);
  set(f.rs_chunks, &plan.rs_chunks);
  set(f.tp, &plan.tp);
  if (plan.tp == 0) {
    const int64_t per_tp = static_cast<int64_t>(plan.cp) * plan.pp * plan.dp;
    if (cluster->total_gpus() % per_tp != 0)
      return Error(fmt::format(
          "--tp is not given, and cp*pp*dp = {}*{}*{} = {} (--cp, --pp, --dp) does not divide "
          "the cluster's {} GPUs: give --tp, or degrees whose product divides them",
          plan.cp, plan.pp, plan.dp, per_tp, cluster->total_gpus()));
    plan.tp = static_cast<int>(cluster->total_gpus() / per_tp);
  }
  if (plan.global_batch == 0) plan.global_batch = DefaultGlobalBatch(plan.micro_batch, plan.dp);
  set(f.global_batch, &plan.global_batch);
  // Slicing without a scope means the user wants overlap: pick the widest the split allows.
  if (f.scope.empty() && (f.row_split > 1 || f.col_split > 1) && plan.scope == OverlapScope::kNone)
    plan.scope = plan.row_split > 1 ? OverlapScope::kInterLayer : OverlapScope::kIntraLayer;
  DOMINO_RETURN_IF_ERROR(ResolvePlan(plan, check_rules));
  return plan;
}

}  // namespace domino::cli
