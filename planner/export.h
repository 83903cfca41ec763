#ifndef DOMINO_PLANNER_EXPORT_H_
#define DOMINO_PLANNER_EXPORT_H_

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "models/base/result.h"
#include "planner/plan.h"

namespace domino {

// The training frameworks a plan can be exported to.
enum class ExportTarget { kMegatron, kNemo, kDeepSpeed, kTorchtitan };

// "megatron", "nemo", "deepspeed", "torchtitan", in ExportTarget order; fits YamlMap::Enum and
// CLI11's CheckedTransformer.
std::span<const std::pair<std::string_view, ExportTarget>> ExportTargetNames();

// The launch settings that run `plan` (resolved, as LoadPlan returns it) in `target`, in the
// framework's own syntax, so a user pastes them into a training script:
//   kMegatron   Megatron-LM / Megatron-Core arguments of pretrain_gpt.py, one per line
//   kNemo       a YAML fragment of NeMo's megatron_gpt_config.yaml (trainer: and model: keys)
//   kDeepSpeed  a DeepSpeed config (JSON) and the arguments of DeepSpeed-Domino's pretrain scripts
//   kTorchtitan a torchtitan job config (TOML)
// The text opens with `#` comment lines: what the settings are for (with a "# partial: ..." line
// for a plan whose search stopped early, Plan::search_stopped), then one "# differs: ..." line
// for each way the framework's run would differ from the plan (a setting it has no option for,
// such as Domino's row and column splits in Megatron-LM). docs/export.md tables every mapping.
// Deterministic: the same plan gives the same bytes.
//
// Error: a plan the framework cannot run at all. Only DeepSpeed-Domino refuses: its public code
// always cuts a micro-batch into exactly 2 row slices, on one data-parallel rank with one
// micro-batch per iteration, without pipeline, sequence parallelism, column split, recompute,
// distributed optimizer or fp8. The one-line message lists every setting of the plan outside that.
Result<std::string> ExportPlan(const Plan& plan, ExportTarget target);

}  // namespace domino

#endif  // DOMINO_PLANNER_EXPORT_H_
