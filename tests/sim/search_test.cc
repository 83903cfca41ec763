#include "planner/search.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/sim/search_test_util.h"

// The search: pruning by its bounds finds the brute-force optimum, with any number of threads
// and every method, deterministically; a stop or a timeout keeps what it found (the space it
// searches: search_space_test.cc).
namespace domino {
namespace {

using search_test::Base;
using search_test::BoundedSimulator;
using search_test::Simulator;

TEST(SearchTest, PruningFindsTheBruteForceOptimum) {
  struct Case {
    const char* model;
    const char* cluster;
    int global_batch;
  };
  int pruned_somewhere = 0;
  for (Case c : {Case{"gpt3-2.7b", "dgx-h100:1", 8}, Case{"llama2-7b", "dgx-h100:1:4", 8},
                 Case{"gpt3-6.7b", "dgx-a100:2", 16}}) {
    SCOPED_TRACE(c.model);
    Plan base = Base(c.model, c.cluster, c.global_batch, 1024);
    SearchSpace space;
    space.max_micro_batch = 4;
    Simulator pruned_eval, brute_eval;
    Result<SearchResult> pruned = SearchPlans(base, space, pruned_eval);
    space.prune = false;
    Result<SearchResult> brute = SearchPlans(base, space, brute_eval);
    ASSERT_TRUE(pruned.ok()) << pruned.message();
    ASSERT_TRUE(brute.ok()) << brute.message();
    EXPECT_EQ(brute->pruned, 0);
    EXPECT_EQ(PlanToYaml(pruned->ranked.front().plan), PlanToYaml(brute->ranked.front().plan));
    EXPECT_EQ(pruned->ranked.front().figures.tokens_per_s,
              brute->ranked.front().figures.tokens_per_s);
    // Brute force ranks every feasible plan; the pruned search simulates fewer.
    EXPECT_EQ(brute->evaluated, brute_eval.calls);
    EXPECT_LE(pruned_eval.calls, brute_eval.calls);
    EXPECT_EQ(pruned_eval.calls + pruned->pruned, brute_eval.calls);
    pruned_somewhere += pruned->pruned;
    // Best first.
    for (size_t i = 1; i < brute->ranked.size(); ++i)
      EXPECT_GE(brute->ranked[i - 1].figures.tokens_per_s, brute->ranked[i].figures.tokens_per_s);
  }
  EXPECT_GT(pruned_somewhere, 0) << "the bound never pruned: the test proves nothing";
}

// The bounds computed on several threads at once (the configurations', then their slicings'):
// the same search, plan for plan, figure for figure, with the same counts.
TEST(SearchTest, BoundThreadsChangeNothing) {
  Plan base = Base("gpt3-6.7b", "dgx-a100:2", 32);
  SearchSpace space;
  BoundedSimulator one_eval;
  Result<SearchResult> one = SearchPlans(base, space, one_eval);
  ASSERT_TRUE(one.ok()) << one.message();
  ASSERT_GT(one->pruned, 0) << "nothing pruned: the bounds decide nothing here";
  // Notes whether each kind of bound ran off the calling thread.
  class ThreadedSimulator : public BoundedSimulator {
   public:
    double LowerBoundMs(const Plan& plan) override {
      if (std::this_thread::get_id() != caller) ideal_elsewhere = true;
      return BoundedSimulator::LowerBoundMs(plan);
    }
    double PlanLowerBoundMs(const Plan& plan) override {
      if (std::this_thread::get_id() != caller) own_elsewhere = true;
      return BoundedSimulator::PlanLowerBoundMs(plan);
    }
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> ideal_elsewhere{false}, own_elsewhere{false};
  };
  for (int threads : {2, 3, 16}) {
    SCOPED_TRACE(threads);
    space.threads = threads;
    ThreadedSimulator eval;
    Result<SearchResult> r = SearchPlans(base, space, eval);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(eval.ideal_elsewhere) << "no configuration was bounded on another thread";
    EXPECT_TRUE(eval.own_elsewhere) << "no slicing was bounded on another thread";
    EXPECT_EQ(r->evaluated, one->evaluated);
    EXPECT_EQ(r->pruned, one->pruned);
    EXPECT_EQ(r->rejected, one->rejected);
    EXPECT_EQ(r->rejections, one->rejections);
    ASSERT_EQ(r->ranked.size(), one->ranked.size());
    for (size_t i = 0; i < r->ranked.size(); ++i) {
      EXPECT_EQ(PlanToYaml(r->ranked[i].plan), PlanToYaml(one->ranked[i].plan)) << i;
      EXPECT_EQ(r->ranked[i].figures.iteration_ms, one->ranked[i].figures.iteration_ms) << i;
    }
  }
}

// Stopped before the bounds begin: no thread bounds anything, and the search says it stopped.
TEST(SearchTest, AStopBeforeTheBoundsStopsEveryThread) {
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 8);
  SearchSpace space;
  space.threads = 4;
  std::atomic<int> polls{0};
  space.stop = [&] {
    ++polls;
    return true;
  };
  BoundedSimulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->evaluated, 0);
  EXPECT_TRUE(r->ranked.empty());
  EXPECT_GE(polls.load(), 1);
  EXPECT_LE(polls.load(), 4);  // once a thread at most: each stops at the first true
}

// "all" puts Domino's slicing, decomposed overlap and both in one ranking; the bound still
// finds brute force's optimum.
TEST(SearchTest, AllMethodsPruneToTheBruteForceOptimum) {
  Plan base = Base("llama2-7b", "dgx-h100:1", 8, 2048);
  SearchSpace space;
  space.max_micro_batch = 4;
  ASSERT_TRUE(ApplyFix("tp=8", &space).ok());
  ASSERT_TRUE(ApplyStrategy("all", &space).ok());
  Simulator pruned_eval, brute_eval;
  Result<SearchResult> pruned = SearchPlans(base, space, pruned_eval);
  space.prune = false;
  Result<SearchResult> brute = SearchPlans(base, space, brute_eval);
  ASSERT_TRUE(pruned.ok()) << pruned.message();
  ASSERT_TRUE(brute.ok()) << brute.message();
  EXPECT_EQ(PlanToYaml(pruned->ranked.front().plan), PlanToYaml(brute->ranked.front().plan));
  int methods[3] = {0, 0, 0};
  for (const Candidate& c : brute->ranked) ++methods[static_cast<int>(c.plan.method)];
  EXPECT_GT(methods[0], 0);
  EXPECT_GT(methods[1], 0);
  EXPECT_GT(methods[2], 0);
}

TEST(SearchTest, Deterministic) {
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 8);
  SearchSpace space;
  Simulator a, b;
  Result<SearchResult> x = SearchPlans(base, space, a), y = SearchPlans(base, space, b);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_EQ(x->ranked.size(), y->ranked.size());
  for (size_t i = 0; i < x->ranked.size(); ++i)
    EXPECT_EQ(PlanToYaml(x->ranked[i].plan), PlanToYaml(y->ranked[i].plan));
}

TEST(SearchTest, StopHookEndsTheSearchWithWhatItFound) {
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 8);
  SearchSpace space;
  Simulator eval;
  // The whole search first: every simulation is polled for.
  int polls = 0;
  space.stop = [&polls] { return ++polls < 0; };
  Result<SearchResult> whole = SearchPlans(base, space, eval);
  ASSERT_TRUE(whole.ok());
  ASSERT_GT(whole->evaluated, 3);
  EXPECT_GT(polls, whole->evaluated);
  // A request after the third plan stops the search there, and is not polled again.
  int evaluated_at_stop = -1;
  polls = 0;
  eval.calls = 0;
  space.stop = [&] {
    if (eval.calls < 3) return false;
    if (evaluated_at_stop < 0) evaluated_at_stop = eval.calls;
    ++polls;
    return true;
  };
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(r->NoPlanFits());
  EXPECT_EQ(polls, 1) << "polled again after it said stop";
  EXPECT_EQ(evaluated_at_stop, 3);
  EXPECT_EQ(r->evaluated, 3) << "a plan was simulated after the stop request";
  EXPECT_LT(r->evaluated + r->rejected, whole->evaluated + whole->rejected);

  space.stop = [] { return true; };  // before anything: stopped, nothing found, not "no plan"
  Result<SearchResult> none = SearchPlans(base, space, eval);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->stopped);
  EXPECT_TRUE(none->ranked.empty());
  EXPECT_FALSE(none->NoPlanFits());
}

TEST(SearchTest, PipelineLowerBoundPrunesToTheBruteForceOptimum) {
  // Pipelines over 8 GPUs: the bound from the passes alone skips whole configurations, and the
  // best plan is still brute force's.
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 32, 1024);
  SearchSpace space;
  space.max_micro_batch = 2;
  space.tp = 2;
  BoundedSimulator bounded;
  Simulator brute_eval;
  Result<SearchResult> pruned = SearchPlans(base, space, bounded);
  space.prune = false;
  Result<SearchResult> brute = SearchPlans(base, space, brute_eval);
  ASSERT_TRUE(pruned.ok() && brute.ok());
  EXPECT_EQ(PlanToYaml(pruned->ranked.front().plan), PlanToYaml(brute->ranked.front().plan));
  EXPECT_EQ(pruned->evaluated + pruned->pruned, brute->evaluated);
  EXPECT_GT(pruned->pruned, 0);
}

// Counts the configuration bounds it is asked for.
class CountingBounds : public BoundedSimulator {
 public:
  double LowerBoundMs(const Plan& plan) override {
    ++bounds;
    return BoundedSimulator::LowerBoundMs(plan);
  }
  int bounds = 0;
};

TEST(SearchTimeoutTest, AnExpiredTimeoutStillKeepsOnePlan) {
  // The timeout has passed before the first configuration is bounded: every configuration is
  // visited unbounded, the first that fits is evaluated, and the search stops with it.
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 8, 1024);
  SearchSpace space;
  space.timeout_s = 1e-12;
  CountingBounds eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->timed_out);
  ASSERT_FALSE(r->ranked.empty());
  EXPECT_EQ(r->evaluated, eval.calls);
  EXPECT_EQ(eval.bounds, 0);  // no configuration was bounded
  EXPECT_LE(eval.calls, 12);  // one configuration's slicings at most
}

}  // namespace
}  // namespace domino
