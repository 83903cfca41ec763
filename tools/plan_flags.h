#ifndef DOMINO_TOOLS_PLAN_FLAGS_H_
#define DOMINO_TOOLS_PLAN_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"

namespace domino::cli {

// The flags that describe or override a plan, shared by `simulate`, `plan` and `sweep`. Zero or
// empty means "not given".
struct PlanFlags {
  std::string plan_path;
  std::string model;
  std::string cluster;
  std::string stack;
  std::string precision;
  int seq_len = 0, micro_batch = 0, global_batch = 0;
  int tp = 0, cp = 0, pp = 0, dp = 0, virtual_stages = 0, cp_a2a = 0;
  int recompute_layers = -1;      // -1: not given
  std::string sequence_parallel;  // "true" / "false" (--sp / --no-sp)
  int row_split = 0, col_split = 0, chunks = 0, rs_chunks = 0;
  std::string method;       // "domino" / "decomposed" / "both"
  std::string copy_engine;  // "true" / "false"
  std::string scope, recompute, distributed_optimizer, fsdp, placement;
  std::string pipeline_split;   // "layers" / "embedding" / "loss" / "ends"
  std::string grad_reduce;      // "fp32" / "param" / "fp16-param"
  std::string grad_sync;        // "layer" / "megatron" / "megatron-aligned"
  std::string optimizer_dtype;  // "fp32" / "bf16"
  std::string cross_entropy;    // "vocab-parallel" / "megatron-fused" / "te" / "fused"
  std::string attention;        // "flash" / "flash2" / "unfused"
  std::string fp8_recipe;       // "delayed" / "current"
  std::string fp8_cast;         // "norm-and-activation" / "norm" / "linear"
  std::string softmax;          // "fused" / "scale-mask-softmax" / "scale-softmax"
  std::string cp_comm;          // "p2p" / "all_gather" / "a2a"
};

// Declares the flags on `app`. With `with_plan_file`, also --plan.
void AddPlanFlags(CLI::App* app, PlanFlags* flags, bool with_plan_file);

// Builds a resolved plan: from --plan (then flags override its values) or from the built-in
// plan's defaults (planner/plan.h: GPT-3 13B on 4 DGX-H100, seq 1024, micro-batch 16, as
// DeepSpeed-Domino runs it) and flags. The defaults are the same whatever subset of flags is
// given: --model alone changes the model and nothing else. Without a plan file, an unset tp spans
// the GPUs left by cp, pp and dp, and an unset global batch is one micro-batch per DP rank
// (DefaultGlobalBatch). Without `check_rules` the plan is only resolved (see ResolvePlan).
Result<Plan> BuildPlan(const PlanFlags& flags, bool check_rules = true);

// The files a plan was read from, those that are files (not catalog names): the plan file
// (flags.plan_path) unless `with_plan_file` is false, its model, cluster, node, GPU and stack
// files. A command's output checks it is none of them (CheckNotAnInput); a report, a plan file
// itself, may replace the plan it was made from.
std::vector<std::string> PlanInputFiles(const PlanFlags& flags, const Plan& plan,
                                        bool with_plan_file = true);

// The node file or catalog name of a cluster reference: NODE of NODE:COUNT (and NODE:COUNT:GPUS),
// or the cluster file itself.
std::string NodeFileOf(const std::string& cluster);

// The default global batch: one micro-batch per DP rank (above the bound when the product is, so
// that the bound's message says so).
int DefaultGlobalBatch(int micro_batch, int dp);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_PLAN_FLAGS_H_
