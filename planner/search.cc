#include "planner/search.h"

#include <algorithm>

#include <fmt/format.h>

namespace domino {
namespace {

std::string Describe(const Plan& p) {
  return fmt::format("tp={} dp={} sp={} p={} q={} scope={}", p.tp, p.dp, p.sequence_parallel,
                     p.row_split, p.col_split, ScopeName(p.scope));
}

}  // namespace

Result<SearchResult> SearchPlans(const Plan& base, const SearchSpace& space, Evaluator& evaluator,
                                 const std::function<void(int, int)>& progress) {
  const int gpus = base.cluster.total_gpus() / space.pp;
  std::vector<Plan> candidates;
  SearchResult result;
  for (int tp = 1; tp <= gpus; ++tp) {
    if (gpus % tp != 0 || (space.tp > 0 && tp != space.tp)) continue;
    int dp = gpus / tp;
    if (space.dp > 0 && dp != space.dp) continue;
    for (int sp = 0; sp <= (space.try_sequence_parallel ? 1 : 0); ++sp) {
      for (int p : space.row_splits) {
        for (int q : space.col_splits) {
          std::vector<OverlapScope> scopes;
          if (p == 1 && q == 1) scopes = {OverlapScope::kNone};
          else if (p == 1) scopes = {OverlapScope::kIntraLayer};
          else scopes = {OverlapScope::kIntraLayer, OverlapScope::kInterLayer};
          for (OverlapScope scope : scopes) {
            Plan plan = base;
            plan.tp = tp, plan.pp = space.pp, plan.dp = dp;
            plan.sequence_parallel = sp == 1;
            plan.row_split = p, plan.col_split = q, plan.scope = scope;
            // The global batch is the user's; each DP rank takes its share in micro-batches of
            // at most the base plan's size.
            if (base.global_batch % dp == 0) {
              int per_rank = base.global_batch / dp;
              plan.micro_batch = std::min(base.micro_batch, per_rank);
              while (per_rank % plan.micro_batch != 0) --plan.micro_batch;
            }
            if (auto failure = CheckPlanRules(plan)) {
              ++result.rejected;
              result.rejections.push_back(fmt::format("{}: {}", Describe(plan), failure->rule));
              continue;
            }
            candidates.push_back(std::move(plan));
          }
        }
      }
    }
  }
  if (candidates.empty())
    return Error("no candidate plan satisfies the rules; first rejection: " +
                 (result.rejections.empty() ? std::string("none") : result.rejections.front()));
  int total = static_cast<int>(candidates.size());
  for (Plan& plan : candidates) {
    Result<PlanFigures> figures = evaluator.Evaluate(plan);
    ++result.evaluated;
    if (progress) progress(result.evaluated, total);
    if (!figures.ok()) {
      result.rejections.push_back(fmt::format("{}: {}", Describe(plan), figures.message()));
      continue;
    }
    double capacity_gib = plan.cluster.node.gpu.memory_GB * 1e9 / (1 << 30);
    if (figures->memory_gib_per_gpu > capacity_gib) {
      ++result.rejected;
      result.rejections.push_back(fmt::format("{}: needs {:.1f} GiB per GPU, the GPU has {:.1f}",
                                              Describe(plan), figures->memory_gib_per_gpu,
                                              capacity_gib));
      continue;
    }
    result.ranked.push_back(Candidate{std::move(plan), *figures});
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.figures.tokens_per_s > b.figures.tokens_per_s;
                   });
  return result;
}

}  // namespace domino
