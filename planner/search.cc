#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>

#include "models/base/parallel_for.h"
#include "planner/memory_model.h"

namespace domino {
namespace {

std::vector<int> Divisors(int64_t n, int64_t cap) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n && d <= cap; ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

// The order candidates are ranked in: better first, then by YAML for determinism.
bool Better(const Candidate& a, const Candidate& b, Objective objective) {
  const double x =
      objective == Objective::kThroughput ? -a.figures.tokens_per_s : a.figures.iteration_ms;
  const double y =
      objective == Objective::kThroughput ? -b.figures.tokens_per_s : b.figures.iteration_ms;
  if (x != y) return x < y;
  return PlanToYaml(a.plan) < PlanToYaml(b.plan);
}

}  // namespace

std::string DescribeConfiguration(const Plan& p) {
  std::string out = fmt::format("tp {}", p.tp);
  if (p.cp > 1) {
    out += fmt::format(" cp {} {}", p.cp, CpCommName(p.cp_communication()));
    if (p.cp_communication() == CpComm::kA2aP2p) out += fmt::format(":{}", p.cp_a2a_ranks());
  }
  out += fmt::format(" pp {} dp {}", p.pp, p.dp);
  if (p.virtual_stages > 1) out += fmt::format(" v {}", p.virtual_stages);
  if (p.pipeline_split != PipelineSplit::kLayers)
    out += fmt::format(" split-{}", PipelineSplitName(p.pipeline_split));
  out += fmt::format(" mb {}", p.micro_batch);
  if (p.sequence_parallel) out += " sp";
  if (p.recompute != Recompute::kNone) out += fmt::format(" rc-{}", RecomputeName(p.recompute));
  if (p.distributed_optimizer) out += " distopt";
  if (p.fsdp) out += " fsdp";
  return out;
}

std::string DescribeCandidate(const Plan& p) {
  std::string out = DescribeConfiguration(p);
  out += fmt::format(" p {} q {} {}", p.row_split, p.col_split, ScopeName(p.scope));
  if (p.method != OverlapMethod::kDomino) {
    out += fmt::format(" {} c {}", MethodName(p.method), p.decomposed_chunks());
    if (p.decomposed_rs_chunks() != p.decomposed_chunks())
      out += fmt::format(" rs {}", p.decomposed_rs_chunks());
  }
  return out;
}

std::vector<int> SearchCpDegrees(const Plan& base, const SearchSpace& space, bool cp1_fits) {
  if (space.cp > 0) return {space.cp};
  std::vector<int> degrees = {1};
  if (base.seq_len < kCpSearchMinSeqLen && cp1_fits) return degrees;
  const int64_t gpus = base.cluster.total_gpus();
  for (int cp = 2; cp <= kCpBound.max; cp *= 2) {
    if (gpus % cp != 0 || base.seq_len % (2 * cp) != 0) break;
    if (base.seq_len / cp < kCpSearchMinLocalSeqLen) break;
    degrees.push_back(cp);
  }
  return degrees;
}

Result<SearchResult> SearchPlans(const Plan& base, const SearchSpace& space, Evaluator& evaluator,
                                 Objective objective,
                                 const std::function<void(int, int)>& progress) {
  SearchResult result;
  const int64_t gpus = base.cluster.total_gpus();
  const double capacity = base.cluster.node.gpu.memory_bytes() - space.memory_headroom_bytes;
  // A configuration rejected before it is sliced is named without slicing.
  auto reject = [&](const Plan& plan, const std::string& rule, bool sliced = true) {
    ++result.rejected;
    result.rejections.push_back(fmt::format(
        "{}: {}", sliced ? DescribeCandidate(plan) : DescribeConfiguration(plan), rule));
  };

  // Outer configurations: everything but the Domino dimensions.
  std::vector<Plan> outers;
  const bool fsdp = space.fsdp.value_or(false);
  // The comm types a candidate with cp > 1 is tried with (none below that): the pinned one, else
  // each one its stack runs that CheckCpComm allows (no ring, p2p or a2a+p2p's, over a window the
  // stack's kernels run; a2a where cp divides each TP rank's heads; a2a+p2p with its default a2a
  // groups, where there are some).
  auto cp_comms = [&space](const Plan& candidate) -> std::vector<std::optional<CpComm>> {
    if (candidate.cp == 1 || (!space.cp_comm && !candidate.stack.te_cp_comm_types))
      return {std::nullopt};
    if (space.cp_comm) return {space.cp_comm};
    std::vector<std::optional<CpComm>> comms;
    for (const auto& [name, comm] : CpCommNames()) {
      // Pinned a2a groups are tried and judged by the rules, like any pin.
      const bool pinned_groups = comm == CpComm::kA2aP2p && space.cp_a2a > 0;
      Plan probe = candidate;
      probe.cp_comm = comm;
      if (pinned_groups || !CheckCpComm(probe)) comms.push_back(comm);
    }
    return comms;
  };
  auto add_outers = [&](int cp) {
    if (gpus % cp != 0) return;
    for (int tp : Divisors(gpus / cp, gpus / cp)) {
      if (space.tp > 0 && tp != space.tp) continue;
      for (int pp : Divisors(gpus / cp / tp, base.model.layers)) {
        if (space.pp > 0 && pp != space.pp) continue;
        const int dp = static_cast<int>(gpus / cp / tp / pp);
        if (space.dp > 0 && dp != space.dp) continue;
        if (fsdp && dp * cp == 1) continue;  // FSDP pinned on: nothing to shard over
        // Counts up to (layers + 2) / pp, past which a chunk could not keep a layer (and up to
        // max_virtual_stages where set); CheckPipelineSplit below keeps those whose chunks cut
        // evenly. A pinned count is tried even above that.
        const int64_t most_v = (base.model.layers + 2) / pp;
        const int max_v =
            pp == 1 ? 1
                    : std::max<int>(space.max_virtual_stages > 0
                                        ? std::min<int64_t>(space.max_virtual_stages, most_v)
                                        : most_v,
                                    space.virtual_stages);
        for (int v = 1; v <= max_v; ++v) {
          if (space.virtual_stages > 0 && v != space.virtual_stages) continue;
          // Layers only when they cut evenly; otherwise, interleaved, the embedding and the
          // loss counted as a layer each, as Megatron-Core's 405B recipe does (unless the
          // starting plan names its split: then that one, where it cuts).
          Plan split = base;
          split.tp = tp, split.cp = cp, split.pp = pp, split.dp = dp, split.virtual_stages = v;
          if (base.pipeline_split == PipelineSplit::kLayers && v > 1 &&
              base.model.layers % (pp * v) != 0)
            split.pipeline_split = PipelineSplit::kEnds;
          if (auto failure = CheckPipelineSplit(split)) {
            // Said where the pipeline was pinned, not for every degree the search passes over.
            if (space.pp > 0 || space.virtual_stages > 0)
              reject(split, failure->rule, /*sliced=*/false);
            continue;
          }
          // A pinned micro-batch is searched whatever its size (the plan rules judge it); else
          // the divisors of the replica's batch up to max_micro_batch.
          std::vector<int> micro_batches =
              space.micro_batch > 0 ? std::vector<int>{space.micro_batch}
              : base.global_batch % dp == 0
                  ? Divisors(base.global_batch / dp, space.max_micro_batch)
                  : std::vector<int>{1};
          for (int mb : micro_batches) {
            if (space.micro_batch > 0 && mb != space.micro_batch) continue;
            for (int sp = 0; sp <= 1; ++sp) {
              if (space.sequence_parallel && *space.sequence_parallel != (sp == 1)) continue;
              // Sequence parallelism splits over TP: with tp 1 it is the plan without it.
              if (tp == 1 && sp == 1 && !space.sequence_parallel) continue;
              for (int dist = fsdp ? 1 : 0; dist <= (dp * cp > 1 ? 1 : 0); ++dist) {
                if (space.distributed_optimizer && *space.distributed_optimizer != (dist == 1))
                  continue;
                for (const std::optional<CpComm>& comm : cp_comms(split)) {
                  Plan plan = base;
                  plan.cp_comm = comm;
                  plan.cp_a2a = comm == CpComm::kA2aP2p ? space.cp_a2a : 0;
                  plan.tp = tp, plan.cp = cp, plan.pp = pp, plan.dp = dp, plan.virtual_stages = v;
                  plan.pipeline_split = split.pipeline_split;
                  plan.micro_batch = mb;
                  plan.sequence_parallel = sp == 1;
                  plan.distributed_optimizer = dist == 1;
                  plan.fsdp = fsdp;
                  plan.row_split = plan.col_split = 1;
                  plan.scope = OverlapScope::kNone;
                  plan.method = OverlapMethod::kDomino;
                  plan.chunks = plan.rs_chunks = 0;
                  plan.copy_engine.reset();
                  plan.predicted.reset();
                  plan.measured.reset();
                  outers.push_back(std::move(plan));
                }
              }
            }
          }
        }
      }
    }
  };
  // Without CP first; with it as SearchCpDegrees says, which needs to know whether any
  // configuration without CP fits at all (with the heaviest recompute the space allows).
  const bool cp1_pinned = space.cp == 0 || space.cp == 1;
  if (cp1_pinned) add_outers(1);
  bool cp1_fits = false;
  for (const Plan& outer : outers) {
    Plan lightest = outer;
    lightest.recompute = space.recompute.value_or(Recompute::kFull);
    if (!CheckPlanRules(lightest) && EstimateMemory(lightest).total_bytes() <= capacity) {
      cp1_fits = true;
      break;
    }
  }
  for (int cp : SearchCpDegrees(base, space, cp1_fits))
    if (cp > 1) add_outers(cp);
  if (space.cp_a2a > 0 && space.cp_comm && *space.cp_comm != CpComm::kA2aP2p)
    return Error(fmt::format("--cp-a2a {} sizes the a2a groups of a2a+p2p, and --cp-comm is {}",
                             space.cp_a2a, CpCommName(*space.cp_comm)));
  if (space.cp_comm && space.cp == 1)
    return Error(
        fmt::format("--cp-comm {} says how context parallelism communicates, and cp is "
                    "pinned to 1",
                    CpCommName(*space.cp_comm)));
  if (space.dp > 0 && space.tp > 0 && space.pp > 0 && space.cp > 1 &&
      static_cast<int64_t>(space.tp) * space.cp * space.pp * space.dp != gpus)
    return Error(fmt::format("--fix: tp*cp*pp*dp = {}*{}*{}*{} must equal the cluster's {} GPUs",
                             space.tp, space.cp, space.pp, space.dp, gpus));
  if (space.dp > 0 && space.tp > 0 && space.pp > 0 && space.cp <= 1 &&
      static_cast<int64_t>(space.tp) * space.pp * space.dp != gpus)
    return Error(fmt::format("--fix: tp*pp*dp = {}*{}*{} must equal the cluster's {} GPUs",
                             space.tp, space.pp, space.dp, gpus));

  // Configurations in the order of their lower bound, so that the plans found early are good
  // ones and the bound prunes the rest.
  const auto start = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return space.timeout_s > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
               space.timeout_s;
  };
  // A stop request is polled before each simulation, so that it waits for one plan at most.
  auto stop_requested = [&] {
    if (!result.stopped && space.stop && space.stop()) result.stopped = true;
    return result.stopped;
  };
  // Bounds computed on several threads stop at the timeout or a stop request, as a simulation
  // would; the request is kept for the search to see.
  std::atomic<bool> stop_seen{false};
  auto halt_bounds = [&] {
    if (out_of_time() || stop_seen) return true;
    if (space.stop && space.stop()) stop_seen = true;
    return stop_seen.load();
  };
  std::vector<double> bounds(outers.size(), 0);
  std::vector<char> bounded(outers.size(), 0);  // whether bounds[i] holds (0: not computed)
  if (space.prune) {
    std::vector<size_t> order(outers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    // The bounds count against the timeout too (each simulates passes): those the timeout cut off
    // go last, unbounded. Each is its own configuration's, so space.threads workers take them in
    // turn; what they compute does not depend on how many there are.
    ParallelFor(outers.size(), space.threads, halt_bounds, [&](size_t i) {
      bounded[i] = 1;
      if (!CheckPlanRules(outers[i])) bounds[i] = evaluator.LowerBoundMs(outers[i]);
    });
    if (stop_seen) result.stopped = true;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (bounded[a] != bounded[b]) return bounded[a] > bounded[b];
      return bounds[a] < bounds[b];
    });
    std::vector<Plan> sorted;
    std::vector<double> sorted_bounds;
    std::vector<char> sorted_bounded;
    for (size_t i : order) {
      sorted.push_back(std::move(outers[i]));
      sorted_bounds.push_back(bounds[i]);
      sorted_bounded.push_back(bounded[i]);
    }
    outers = std::move(sorted);
    bounds = std::move(sorted_bounds);
    bounded = std::move(sorted_bounded);
  }

  double best_ms = 1e300;  // best iteration found so far, for pruning
  int done = 0;
  auto trim = [&] {  // keep the best max_ranked candidates
    if (result.ranked.size() <= 2 * space.max_ranked) return;
    std::sort(result.ranked.begin(), result.ranked.end(),
              [&](const Candidate& a, const Candidate& b) { return Better(a, b, objective); });
    result.ranked.resize(space.max_ranked);
  };
  for (size_t index = 0; index < outers.size(); ++index) {
    Plan& outer = outers[index];
    // Past the timeout, the search stops once it has a plan to keep.
    if (out_of_time() && !result.ranked.empty()) {
      result.timed_out = true;
      break;
    }
    if (stop_requested()) break;
    trim();
    if (progress) progress(done++, static_cast<int>(outers.size()));
    // The lightest recompute that fits: heavier recompute only adds work.
    std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
    if (space.recompute) recomputes = {*space.recompute};
    // Sets `plan`'s lightest recompute, from `from` on, that passes the rules and fits in memory.
    // Returns the rule the last one tried breaks, if none does (each earlier miss is a
    // rejection, named as a configuration unless `sliced`).
    auto fit_recompute = [&](Plan& plan, size_t from,
                             bool sliced) -> std::optional<PlanRuleFailure> {
      std::optional<PlanRuleFailure> failure;
      for (size_t r = from; r < recomputes.size(); ++r) {
        if (failure) reject(plan, failure->rule, sliced);
        plan.recompute = recomputes[r];
        // A count of recomputed layers (the starting plan's) applies to full recompute only.
        plan.recompute_layers = recomputes[r] == Recompute::kFull ? base.recompute_layers : 0;
        if ((failure = CheckPlanRules(plan))) return failure;
        const double need = EstimateMemory(plan).total_bytes();
        if (need <= capacity) return std::nullopt;
        failure = PlanRuleFailure{
            "memory",
            fmt::format("memory: needs {:.1f} GiB per GPU, the {} has {:.1f}{}", need / (1 << 30),
                        plan.cluster.node.gpu.name, plan.cluster.node.gpu.memory_gib(),
                        space.memory_headroom_bytes > 0
                            ? fmt::format(" less {:.1f} of headroom",
                                          space.memory_headroom_bytes / (1 << 30))
                            : "")};
      }
      return failure;
    };
    // Sets `plan`'s lightest recompute that fits; false if none does (each miss is a rejection).
    auto lightest_fit = [&](Plan& plan) {
      if (auto failure = fit_recompute(plan, 0, /*sliced=*/false)) {
        reject(plan, failure->rule, /*sliced=*/false);
        return false;
      }
      return true;
    };
    // Every slicing of a configuration that fits; `beaten`: its bound exceeds a plan found.
    auto slicings = [&](const Plan& config, bool beaten) {
      // The unsliced plan first: its ideal bounds every sliced variant from below.
      double bound_ms = 0;
      bool first = true;
      // Decomposed overlap only raises the ideal further (narrower GEMM pieces, more launches).
      struct Decomposition {
        OverlapMethod method;
        int chunks;
      };
      std::vector<Decomposition> decompositions;
      for (OverlapMethod method : space.methods) {
        if (method == OverlapMethod::kDomino) {
          decompositions.push_back({method, 0});
          continue;
        }
        // Decomposes SP's TP collectives: nothing to decompose without them.
        if (!config.sequence_parallel || config.tp == 1) continue;
        for (int c : space.chunk_counts) decompositions.push_back({method, c});
      }
      // The slicings in the order they are tried.
      std::vector<Plan> variants;
      for (const Decomposition& decomposition : decompositions) {
        for (int p : space.row_splits) {
          for (int q : space.col_splits) {
            for (OverlapScope scope : space.scopes) {
              if ((p == 1 && q == 1) != (scope == OverlapScope::kNone)) continue;
              if (scope == OverlapScope::kInterLayer && p == 1) continue;
              if ((decomposition.method == OverlapMethod::kDecomposed) != (p == 1 && q == 1) &&
                  decomposition.method != OverlapMethod::kDomino)
                continue;
              Plan plan = config;
              plan.row_split = p, plan.col_split = q, plan.scope = scope;
              plan.method = decomposition.method, plan.chunks = decomposition.chunks;
              plan.copy_engine =
                  plan.method != OverlapMethod::kDomino ? base.copy_engine : std::nullopt;
              plan.rs_chunks = plan.method != OverlapMethod::kDomino ? base.rs_chunks : 0;
              variants.push_back(std::move(plan));
            }
          }
        }
      }
      // Each variant's broken rule, if any, and its ideal and own bounds (Evaluator::LowerBoundMs,
      // PlanLowerBoundMs), computed when first needed (-1: not yet) or beforehand on several
      // threads. What is computed beforehand is what the loop below asks next, each bound its own
      // plan's; some may go unused once a plan found lowers best_ms, and none changes what the
      // loop decides.
      const size_t n = variants.size();
      std::vector<std::optional<PlanRuleFailure>> failures(n);
      for (size_t i = 0; i < n; ++i) {
        failures[i] = CheckPlanRules(variants[i]);
        // Decomposed overlap's communication buffers (userbuffers) take memory the
        // configuration's own fit left out: a variant that needs them may need heavier recompute.
        Plan& variant = variants[i];
        if (failures[i] || variant.method == OverlapMethod::kDomino ||
            EstimateMemory(variant).total_bytes() <= capacity)
          continue;
        const auto now = std::find(recomputes.begin(), recomputes.end(), variant.recompute);
        failures[i] = fit_recompute(variant, now - recomputes.begin(), /*sliced=*/true);
      }
      std::vector<double> ideal(n, -1), own(n, -1);
      auto ideal_of = [&](size_t i) {
        if (ideal[i] < 0) ideal[i] = evaluator.LowerBoundMs(variants[i]);
        return ideal[i];
      };
      auto own_of = [&](size_t i) {
        if (own[i] < 0) own[i] = evaluator.PlanLowerBoundMs(variants[i]);
        return own[i];
      };
      // From variant `from` on: the ideal bounds too unless `own_only`, and the own bound of each
      // that its ideal does not prune.
      auto prefetch = [&](size_t from, bool own_only) {
        if (!space.prune || space.threads <= 1 || beaten || best_ms >= 1e300) return;
        ParallelFor(n - from, space.threads, halt_bounds, [&](size_t k) {
          const size_t j = from + k;
          if (failures[j]) return;
          if (!own_only && variants[j].pp > 1 && ideal_of(j) > best_ms) return;
          own_of(j);
        });
        if (stop_seen) result.stopped = true;
      };
      // Until a plan of this configuration is simulated, each one's own bound decides.
      prefetch(0, /*own_only=*/true);
      for (size_t i = 0; i < n; ++i) {
        Plan& plan = variants[i];
        if (failures[i]) {
          reject(plan, failures[i]->rule);
          continue;
        }
        // A sliced pipeline's own bound (its passes are slower than the unsliced ones) can
        // prune it before its iteration is simulated.
        if (space.prune && (beaten || (!first && bound_ms > best_ms) ||
                            (!first && plan.pp > 1 && ideal_of(i) > best_ms) ||
                            (best_ms < 1e300 && own_of(i) > best_ms))) {
          ++result.pruned;
          continue;
        }
        if (stop_requested()) return;
        Result<PlanFigures> figures = evaluator.Evaluate(plan);
        ++result.evaluated;
        if (!figures.ok()) {
          reject(plan, figures.message());
          continue;
        }
        const bool was_first = first;
        if (first) bound_ms = figures->ideal_ms;
        first = false;
        best_ms = std::min(best_ms, figures->iteration_ms);
        result.ranked.push_back(Candidate{std::move(plan), *figures});
        // The first plan simulated sets the ideal that bounds the rest, and the ideal bounds
        // count from here.
        if (was_first && bound_ms <= best_ms) prefetch(i + 1, /*own_only=*/false);
      }
    };
    // An iteration costs far more to simulate than its passes: every slicing of a configuration is
    // pruned when even its lower bound is beaten.
    auto beaten = [&] { return space.prune && bounded[index] && bounds[index] > best_ms; };
    const bool fits = lightest_fit(outer);
    if (fits) slicings(outer, beaten());
    if (result.stopped) break;
    // FSDP, unless pinned either way, where the distributed optimizer's configuration needs
    // recompute or does not fit at all: the same layout with parameters and gradients sharded too
    // moves more over DP (never less), so it is worth a try only for the memory it frees, when
    // that spares recompute. Its own bound counts the gathers and reduce-scatters.
    if (space.fsdp || !outer.distributed_optimizer || outer.dp_cp() == 1 ||
        (fits && outer.recompute == Recompute::kNone) || (!fits && CheckPlanRules(outer)))
      continue;
    Plan sharded = outer;
    sharded.fsdp = true;
    if (!lightest_fit(sharded) || (fits && sharded.recompute >= outer.recompute)) continue;
    slicings(sharded, beaten() || (space.prune && best_ms < 1e300 &&
                                   evaluator.LowerBoundMs(sharded) > best_ms));
  }
  if (progress) progress(done, static_cast<int>(outers.size()));
  std::sort(result.ranked.begin(), result.ranked.end(),
            [&](const Candidate& a, const Candidate& b) { return Better(a, b, objective); });
  if (result.ranked.size() > space.max_ranked) result.ranked.resize(space.max_ranked);
  return result;
}

std::string NoPlanFitsMessage(const SearchResult& result) {
  if (result.rejected == 0)
    return "no plan fits: no candidate has the pinned dimensions (tp x cp x pp x dp must equal "
           "the cluster's GPUs, pp at most the layers, virtual stages only with pp >= 2, the "
           "micro-batch dividing the global batch per DP rank)";
  return fmt::format("no plan fits: {} candidates rejected; first: {}", result.rejected,
                     result.rejections.empty() ? std::string("none") : result.rejections.front());
}

}  // namespace domino
