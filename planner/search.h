#ifndef DOMINO_PLANNER_SEARCH_H_
#define DOMINO_PLANNER_SEARCH_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/base/result.h"
#include "planner/plan.h"

namespace domino {

// Evaluator scores a candidate plan. The planner never links the simulator: tools/ wires this
// interface to it, and tests can pass a fake. `ideal_ms` of the figures must be a lower bound of
// `iteration_ms` that slicing (row or column splits, any scope) can only raise; the search prunes
// with it.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual Result<PlanFigures> Evaluate(const Plan& plan) = 0;
  // A lower bound of `ideal_ms` for the plan and every slicing of it, cheaper than Evaluate (0:
  // none). The search skips a whole configuration whose bound already exceeds a plan found. With
  // SearchSpace::threads above 1 it is called from several threads at once.
  virtual double LowerBoundMs(const Plan& plan) { return 0; }
  // A lower bound of `iteration_ms` for this plan alone (0: none): the search skips a plan whose
  // bound already exceeds a plan found, before evaluating it. Like LowerBoundMs, it is called
  // from several threads at once with SearchSpace::threads above 1.
  virtual double PlanLowerBoundMs(const Plan& plan) { return 0; }
};

// What the search varies. A pinned value (> 0, or set) is fixed; the rest are enumerated:
// tp * cp * pp * dp = the cluster's GPUs (cp as SearchCpDegrees says), the virtual stages whose
// model chunks cut the layers evenly (up to max_virtual_stages where set, and a pinned count above
// it), micro-batches that divide the global batch per DP rank (up to max_micro_batch), sequence
// parallelism, the distributed optimizer (dp > 1), recompute (the lightest that fits in memory:
// heavier recompute only adds work), and the Domino dimensions. FSDP, pinned on (`fsdp`), is tried
// for every candidate (with the distributed optimizer, over dp x cp > 1); pinned off, never;
// unpinned, for a configuration with the distributed optimizer that needs recompute to fit, or does
// not fit at all, when sharding spares recompute (sharding parameters and gradients only adds DP
// traffic to the same layout).
struct SearchSpace {
  int tp = 0, cp = 0, pp = 0, dp = 0, virtual_stages = 0, micro_batch = 0;
  std::optional<bool> sequence_parallel, distributed_optimizer, fsdp;
  std::optional<Recompute> recompute;
  // Context parallelism's comm type (Plan::cp_comm): pinned, or each one the stack runs and the
  // plan allows (p2p, all_gather, a2a) for every candidate with cp > 1.
  std::optional<CpComm> cp_comm;
  int cp_a2a = 0;  // a2a+p2p's a2a groups (Plan::cp_a2a), pinned; 0: each plan's default
  std::vector<int> row_splits = {1, 2, 4, 8};
  std::vector<int> col_splits = {1, 2, 4};
  std::vector<OverlapScope> scopes = {OverlapScope::kNone, OverlapScope::kIntraLayer,
                                      OverlapScope::kInterLayer};
  // Overlap methods, and the chunk counts tried for decomposed overlap (method decomposed or
  // both; those need sequence parallelism). Domino's slicing alone unless a strategy adds them.
  std::vector<OverlapMethod> methods = {OverlapMethod::kDomino};
  std::vector<int> chunk_counts = {2, 4, 8, 16};
  // The most virtual stages enumerated (0: as many as cut the layers into model chunks).
  int max_virtual_stages = 0;
  int max_micro_batch = 32;
  bool prune = true;  // false: evaluate every feasible candidate (brute force)
  // Stop after this many seconds (0: no limit), once a plan has been evaluated, and rank what was
  // evaluated by then. The configurations' ordering bounds count against it; those it cuts off
  // are visited last, unbounded.
  double timeout_s = 0;
  // Polled before each simulation (a configuration's bound or a plan's iteration; the bounds'
  // threads poll it too): once it returns true the search stops as at the timeout
  // (SearchResult::stopped) and polls it no more.
  // The command line stops on SIGINT and SIGTERM this way.
  std::function<bool()> stop;
  // Threads that compute lower bounds: every configuration's before the search, and the
  // bounds of a configuration's slicings once its first plan is simulated (the Evaluator's
  // LowerBoundMs and PlanLowerBoundMs, called on them at once when above 1). The search is the
  // same with any count.
  int threads = 1;
  // Keep at most this many ranked candidates (the best), so huge spaces stay in bounded memory.
  size_t max_ranked = 10000;
  // Bytes per GPU a plan must leave free beyond what the memory model counts (NCCL's buffers,
  // the allocator's fragmentation: planner/memory_model.h lists what it leaves out).
  double memory_headroom_bytes = 0;
};

// Applies "--fix" pins, "tp=8,pp=1,sp=true,recompute=none,p=2,q=1,scope=inter-layer,mb=4,v=2,
// dp=4,distopt=false,cp=2" (keys tp, cp, pp, dp, v, mb, sp, distopt, recompute, p, q, scope).
// Errors name the key and the rule.
Status ApplyFix(std::string_view fix, SearchSpace* space);

// Limits the Domino dimensions: "baseline" (p = q = 1), "row" (p > 1, q = 1), "col" (q > 1,
// p = 1), "2d" (p, q > 1), "any"; or searches decomposed overlap: "decomposed" (p = q = 1,
// sequence parallelism, each chunk count), "both" (decomposed row slices, p > 1, q = 1), "all"
// (any Domino slicing, decomposed and both).
Status ApplyStrategy(std::string_view strategy, SearchSpace* space);

// The context-parallel degrees a search tries when cp is not pinned. Context parallelism only
// pays where attention dominates or memory runs out, so the search keeps to cp = 1 (and costs
// what it did without CP) unless the sequence is long, seq_len >= kCpSearchMinSeqLen, or no
// configuration without CP fits in memory even with full recompute (`cp1_fits` false). Then it
// also tries every power of two cp >= 2 that divides the GPUs, with 2 * cp dividing seq_len and
// each rank keeping at least kCpSearchMinLocalSeqLen tokens of a sequence (shorter local
// sequences give ring attention too little compute per step to hide its KV transfer).
inline constexpr int kCpSearchMinSeqLen = 16384;
inline constexpr int kCpSearchMinLocalSeqLen = 4096;
std::vector<int> SearchCpDegrees(const Plan& base, const SearchSpace& space, bool cp1_fits);

enum class Objective { kThroughput, kIterationTime };

struct Candidate {
  Plan plan;
  PlanFigures figures;
};

// What a search found. `ranked` is empty when no candidate is feasible (every one broke a rule,
// did not fit in memory or failed to evaluate): NoPlanFits() then holds, and NoPlanFitsMessage()
// says why. That is an answer about the input, not an error of the search.
struct SearchResult {
  std::vector<Candidate> ranked;        // every feasible candidate evaluated, best first
  int evaluated = 0;                    // simulated
  int rejected = 0;                     // broke a plan rule or did not fit in memory
  int pruned = 0;                       // skipped: bounded out by a faster plan found earlier
  bool timed_out = false;               // stopped by SearchSpace::timeout_s: the best found so far
  bool stopped = false;                 // stopped by SearchSpace::stop: the best found so far
  std::vector<std::string> rejections;  // "tp 3 pp 1 dp 1 ...: tp (3) must divide ..."

  // The whole space was searched and nothing in it is feasible.
  bool NoPlanFits() const { return ranked.empty() && !timed_out && !stopped; }
};

// "no plan fits: N candidates rejected; first: RULE" for a result where NoPlanFits() holds (or
// why no candidate was made at all).
std::string NoPlanFitsMessage(const SearchResult& result);

// Enumerates plans around `base` (its model, cluster, precision, sequence length and global
// batch) and ranks them by `objective` (the global batch is fixed, so tokens/s and iteration
// time rank alike; ties are broken by the plan's YAML). Exact: pruning only skips a candidate
// whose lower bound (its unsliced twin's ideal time) exceeds a plan already found, so the best
// plan equals brute force's. Deterministic. `progress` is called with (outer configurations
// done, in total). Errors: pins that contradict the cluster; a space with no feasible plan is a
// result (SearchResult::NoPlanFits), and so is a search stopped before any was found (`stopped`,
// `ranked` empty).
Result<SearchResult> SearchPlans(const Plan& base, const SearchSpace& space, Evaluator& evaluator,
                                 Objective objective = Objective::kThroughput,
                                 const std::function<void(int, int)>& progress = {});

// "tp 8 pp 2 dp 4 v 1 mb 2 sp p 2 q 1 inter-layer" (context parallelism, "cp 16" after tp,
// recompute and the distributed optimizer when on).
std::string DescribeCandidate(const Plan& plan);

// DescribeCandidate without the slicing ("tp 8 pp 2 dp 4 v 1 mb 2 sp"): a configuration
// rejected before any slicing of it was made.
std::string DescribeConfiguration(const Plan& plan);

}  // namespace domino

#endif  // DOMINO_PLANNER_SEARCH_H_
