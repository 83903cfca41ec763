#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <string_view>

#include "planner/memory_model.h"
#include "planner/search.h"
#include "tests/sim/search_test_util.h"

// The space the search covers: its candidates respect the rules, the GPU count and the memory
// (with the headroom and the decomposed overlap's buffers), fixes and strategies pin dimensions,
// FSDP, interleaving and chunk counts are searched where they may help, and bad fixes or a space
// where nothing fits say why.
namespace domino {
namespace {

using search_test::Base;
using search_test::BoundedSimulator;
using search_test::Simulator;
using ::testing::HasSubstr;

TEST(SearchTest, EveryCandidateRespectsTheRulesAndTheGpuCount) {
  Plan base = Base("gpt3-13b", "dgx-h100:2", 16);
  SearchSpace space;
  space.prune = false;
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  for (const Candidate& c : r->ranked) {
    EXPECT_FALSE(CheckPlanRules(c.plan).has_value()) << DescribeCandidate(c.plan);
    EXPECT_EQ(c.plan.tp * c.plan.pp * c.plan.dp, 16);
    EXPECT_EQ(c.plan.global_batch, 16);
    EXPECT_LE(c.figures.memory_gib_per_gpu, c.plan.cluster.node.gpu.memory_gib());
  }
  // Every rejection names the candidate and the rule it broke.
  ASSERT_GT(r->rejected, 0);
  for (const std::string& line : r->rejections) {
    EXPECT_NE(line.find("tp "), std::string::npos) << line;
    EXPECT_NE(line.find(": "), std::string::npos) << line;
  }
}

TEST(SearchTest, MemoryHeadroomLeavesThatMuchFree) {
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 8);
  SearchSpace space;
  space.prune = false;
  Simulator eval;
  Result<SearchResult> all = SearchPlans(base, space, eval);
  ASSERT_TRUE(all.ok()) << all.message();
  // Leave free all but a GiB above the lightest plan's need: only plans that light remain.
  double lightest = 1e9;
  for (const Candidate& c : all->ranked)
    lightest = std::min(lightest, c.figures.memory_gib_per_gpu);
  const double capacity = base.cluster.node.gpu.memory_gib();
  space.memory_headroom_bytes = (capacity - lightest - 1) * (1 << 30);
  Result<SearchResult> tight = SearchPlans(base, space, eval);
  ASSERT_TRUE(tight.ok()) << tight.message();
  ASSERT_FALSE(tight->ranked.empty());
  EXPECT_LT(tight->ranked.size(), all->ranked.size());
  for (const Candidate& c : tight->ranked)
    EXPECT_LE(c.figures.memory_gib_per_gpu, lightest + 1 + 1e-9) << DescribeCandidate(c.plan);
  bool said = false;
  for (const std::string& line : tight->rejections) {
    if (line.find("of headroom") == std::string::npos) continue;
    said = true;
    // Memory is judged before slicing: the line names the configuration, no split counts.
    EXPECT_EQ(line.find(" p 1 q 1"), std::string::npos) << line;
  }
  EXPECT_TRUE(said) << "no rejection names the headroom";
}

TEST(SearchTest, DecomposedCandidatesFitWithTheirCommunicationBuffers) {
  // Llama 3 70B at tp 8, pp 4 x 4 chunks, micro-batch 2 of 8,192 tokens, with dropout (its masks
  // kept), fills an H100 to 78.6 of its 79.2 GiB unsliced; decomposed overlap's userbuffers (ten
  // of a micro-batch's activations, 2.5 GiB) take it past it, and only full recompute makes room
  // for them.
  Plan base = Base("llama3-70b", "dgx-h100:8", 128, 8192);
  base.dropout = true;
  SearchSpace space;
  space.prune = false;
  ASSERT_TRUE(ApplyFix("tp=8,pp=4,dp=2,v=4,mb=2,distopt=true", &space).ok());
  ASSERT_TRUE(ApplyStrategy("all", &space).ok());
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  const double capacity = base.cluster.node.gpu.memory_bytes();
  bool unsliced_fits = false, decomposed_recomputes = false;
  for (const Candidate& c : r->ranked) {
    EXPECT_LE(EstimateMemory(c.plan).total_bytes(), capacity) << DescribeCandidate(c.plan);
    if (c.plan.method == OverlapMethod::kDomino && c.plan.recompute == Recompute::kNone)
      unsliced_fits = true;
    if (c.plan.method != OverlapMethod::kDomino) {
      EXPECT_EQ(c.plan.recompute, Recompute::kFull) << DescribeCandidate(c.plan);
      decomposed_recomputes = true;
    }
  }
  EXPECT_TRUE(unsliced_fits);
  EXPECT_TRUE(decomposed_recomputes);
  // The decomposed candidates that do not fit are named with their slicing and the memory rule.
  bool said = false;
  for (const std::string& line : r->rejections)
    if (line.find(" none decomposed c 4: memory: needs 81.1 GiB per GPU") != std::string::npos)
      said = true;
  EXPECT_TRUE(said) << "no rejection names a decomposed candidate's memory";
}

TEST(SearchTest, DescribeConfigurationIsTheCandidateWithoutItsSlicing) {
  Plan plan = Base("gpt3-13b", "dgx-h100:2", 16);
  plan.tp = 8, plan.pp = 1, plan.dp = 2, plan.micro_batch = 2;
  plan.sequence_parallel = true;
  plan.row_split = 2, plan.col_split = 1, plan.scope = OverlapScope::kInterLayer;
  EXPECT_EQ(DescribeConfiguration(plan), "tp 8 pp 1 dp 2 mb 2 sp");
  EXPECT_EQ(DescribeCandidate(plan), "tp 8 pp 1 dp 2 mb 2 sp p 2 q 1 inter-layer");
}

TEST(SearchTest, FixAndStrategyPinDimensions) {
  Plan base = Base("gpt3-13b", "dgx-h100:2", 16);
  SearchSpace space;
  ASSERT_TRUE(ApplyFix("tp=8,pp=1,sp=false", &space).ok());
  ASSERT_TRUE(ApplyStrategy("row", &space).ok());
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  for (const Candidate& c : r->ranked) {
    EXPECT_EQ(c.plan.tp, 8);
    EXPECT_EQ(c.plan.pp, 1);
    EXPECT_FALSE(c.plan.sequence_parallel);
    EXPECT_GT(c.plan.row_split, 1);
    EXPECT_EQ(c.plan.col_split, 1);
  }
}

TEST(SearchTest, FsdpIsSearchedWhenPinnedOnOrToSpareRecompute) {
  // Unpinned, where every configuration fits without recompute, no candidate shards fully;
  // pinned on, every candidate does, with the distributed optimizer and more than one DP x CP
  // rank, and the search still finds plans.
  Plan base = Base("gpt3-2.7b", "dgx-h100:1", 16);
  SearchSpace space;
  ASSERT_TRUE(ApplyFix("tp=2,sp=false", &space).ok());
  ASSERT_TRUE(ApplyStrategy("baseline", &space).ok());
  Simulator plain_eval;
  Result<SearchResult> plain = SearchPlans(base, space, plain_eval);
  ASSERT_TRUE(plain.ok()) << plain.message();
  ASSERT_FALSE(plain->ranked.empty());
  for (const Candidate& c : plain->ranked) EXPECT_FALSE(c.plan.fsdp);
  ASSERT_TRUE(ApplyFix("fsdp=true", &space).ok());
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_FALSE(r->ranked.empty());
  for (const Candidate& c : r->ranked) {
    EXPECT_TRUE(c.plan.fsdp);
    EXPECT_TRUE(c.plan.distributed_optimizer);
    EXPECT_GT(c.plan.dp_cp(), 1);
    EXPECT_THAT(DescribeCandidate(c.plan), HasSubstr(" fsdp"));
  }
  EXPECT_FALSE(ApplyFix("fsdp=some", &space).ok());
  // A stray comma anywhere is a mistake, as in --vary.
  for (const char* stray : {"tp=8,", ",tp=8", "tp=8,,pp=1", ""})
    EXPECT_FALSE(ApplyFix(stray, &space).ok()) << stray;

  // Llama 3 8B, tp 1 on one DGX H100, seq 8192: the distributed optimizer needs recompute to fit
  // (90 GiB per GPU without), FSDP does not (53 GiB): unpinned, the search tries the sharded
  // configurations too, and FSDP without recompute is the best plan, as brute force finds it;
  // pinned off, no candidate shards.
  Plan llama = Base("llama3-8b", "dgx-h100:1", 128, 8192);
  SearchSpace tp1;
  ASSERT_TRUE(ApplyFix("tp=1,pp=1", &tp1).ok());
  ASSERT_TRUE(ApplyStrategy("baseline", &tp1).ok());
  tp1.max_micro_batch = 2;
  BoundedSimulator bounded;
  Result<SearchResult> found = SearchPlans(llama, tp1, bounded);
  ASSERT_TRUE(found.ok()) << found.message();
  ASSERT_FALSE(found->ranked.empty());
  const Plan& best = found->ranked.front().plan;
  EXPECT_TRUE(best.fsdp) << DescribeCandidate(best);
  EXPECT_EQ(best.recompute, Recompute::kNone);
  bool recomputed = false;  // the distributed optimizer's configurations, with their recompute
  for (const Candidate& c : found->ranked) recomputed |= !c.plan.fsdp && c.plan.dp > 1;
  tp1.prune = false;
  Simulator brute_eval;
  Result<SearchResult> brute = SearchPlans(llama, tp1, brute_eval);
  ASSERT_TRUE(brute.ok()) << brute.message();
  EXPECT_EQ(PlanToYaml(brute->ranked.front().plan), PlanToYaml(best));
  for (const Candidate& c : brute->ranked) recomputed |= !c.plan.fsdp && c.plan.dp > 1;
  EXPECT_TRUE(recomputed);
  tp1.prune = true;
  ASSERT_TRUE(ApplyFix("fsdp=false", &tp1).ok());
  Result<SearchResult> off = SearchPlans(llama, tp1, bounded);
  ASSERT_TRUE(off.ok()) << off.message();
  ASSERT_FALSE(off->ranked.empty());
  for (const Candidate& c : off->ranked) {
    EXPECT_FALSE(c.plan.fsdp);
    EXPECT_NE(c.plan.recompute, Recompute::kNone);  // nothing fits without it
  }
}

TEST(SearchTest, InterleavingThatLayersCannotCutCountsTheEnds) {
  // 38 layers over pp 2: v 19 cuts the layers (one each); v 2, 4, 5 and 10 cut 38 + 2 = 40
  // units (10, 5, 4 or 2 per chunk), not 38 layers; v 20 would leave the first chunk nothing
  // but the embedding.
  Plan base = Base("gpt3-13b", "dgx-h100:2", 16);
  base.model.layers = 38;
  SearchSpace space;
  space.prune = false;
  ASSERT_TRUE(ApplyFix("tp=8,pp=2", &space).ok());
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  std::set<int> interleaved;
  for (const Candidate& c : r->ranked) {
    EXPECT_FALSE(CheckPlanRules(c.plan).has_value()) << DescribeCandidate(c.plan);
    const std::vector<int> layers = ChunkLayers(c.plan);
    EXPECT_EQ(std::accumulate(layers.begin(), layers.end(), 0), 38);
    if (c.plan.virtual_stages == 1 || c.plan.virtual_stages == 19) {
      EXPECT_EQ(c.plan.pipeline_split, PipelineSplit::kLayers);
      EXPECT_EQ(layers.front(), 38 / (2 * c.plan.virtual_stages));
    } else {
      EXPECT_EQ(c.plan.pipeline_split, PipelineSplit::kEnds);
      EXPECT_EQ(layers.front(), 40 / (2 * c.plan.virtual_stages) - 1);
    }
    interleaved.insert(c.plan.virtual_stages);
  }
  EXPECT_EQ(interleaved, (std::set<int>{1, 2, 4, 5, 10, 19}));
  // max_virtual_stages caps the counts enumerated; a pinned count above it is searched too.
  SearchSpace capped;
  capped.prune = false;
  capped.max_virtual_stages = 4;
  ASSERT_TRUE(ApplyFix("tp=8,pp=2", &capped).ok());
  Result<SearchResult> few = SearchPlans(base, capped, eval);
  ASSERT_TRUE(few.ok()) << few.message();
  std::set<int> enumerated;
  for (const Candidate& c : few->ranked) enumerated.insert(c.plan.virtual_stages);
  EXPECT_EQ(enumerated, (std::set<int>{1, 2, 4}));
  ASSERT_TRUE(ApplyFix("v=5", &capped).ok());
  Result<SearchResult> pinned = SearchPlans(base, capped, eval);
  ASSERT_TRUE(pinned.ok()) << pinned.message();
  ASSERT_FALSE(pinned->ranked.empty());
  EXPECT_THAT(DescribeCandidate(pinned->ranked[0].plan), HasSubstr(" v 5 split-ends mb "));
  // Virtual stages without a pipeline make no candidate at all, and the message says so.
  SearchSpace none;
  ASSERT_TRUE(ApplyFix("pp=1,v=2", &none).ok());
  Result<SearchResult> empty = SearchPlans(base, none, eval);
  ASSERT_TRUE(empty.ok()) << empty.message();
  EXPECT_TRUE(empty->ranked.empty());
  EXPECT_THAT(NoPlanFitsMessage(*empty), HasSubstr("no candidate has the pinned dimensions"));
}

TEST(SearchTest, DecomposedStrategiesSearchChunkCountsWithSequenceParallelism) {
  Plan base = Base("llama2-7b", "dgx-h100:1", 8);
  for (const char* strategy : {"decomposed", "both"}) {
    SCOPED_TRACE(strategy);
    SearchSpace space;
    space.max_micro_batch = 4;
    ASSERT_TRUE(ApplyFix("tp=8", &space).ok());
    ASSERT_TRUE(ApplyStrategy(strategy, &space).ok());
    Simulator eval;
    Result<SearchResult> r = SearchPlans(base, space, eval);
    ASSERT_TRUE(r.ok()) << r.message();
    std::set<int> chunks;
    for (const Candidate& c : r->ranked) {
      EXPECT_FALSE(CheckPlanRules(c.plan).has_value()) << DescribeCandidate(c.plan);
      EXPECT_TRUE(c.plan.sequence_parallel);
      EXPECT_EQ(c.plan.method, std::string_view(strategy) == "decomposed"
                                   ? OverlapMethod::kDecomposed
                                   : OverlapMethod::kBoth);
      EXPECT_EQ(c.plan.row_split > 1, std::string_view(strategy) == "both");
      EXPECT_NE(DescribeCandidate(c.plan).find(" c "), std::string::npos);
      chunks.insert(c.plan.decomposed_chunks());
      // The reduce-scatters in the megatron-core stack's 4 pieces, said where they differ.
      EXPECT_EQ(c.plan.decomposed_rs_chunks(), 4);
      EXPECT_EQ(DescribeCandidate(c.plan).find(" rs 4") != std::string::npos,
                c.plan.decomposed_chunks() != 4)
          << DescribeCandidate(c.plan);
    }
    EXPECT_EQ(chunks, (std::set<int>{2, 4, 8, 16}));
  }
}

TEST(SearchTest, APlansReduceScatterPiecesGoToItsDecomposedCandidatesOnly) {
  Plan base = Base("llama2-7b", "dgx-h100:1", 8);
  base.rs_chunks = 2;
  SearchSpace space;
  space.max_micro_batch = 2;
  ASSERT_TRUE(ApplyFix("tp=8", &space).ok());
  ASSERT_TRUE(ApplyStrategy("all", &space).ok());
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  ASSERT_TRUE(r.ok()) << r.message();
  int decomposed = 0;
  for (const Candidate& c : r->ranked) {
    const bool domino = c.plan.method == OverlapMethod::kDomino;
    EXPECT_EQ(c.plan.rs_chunks, domino ? 0 : 2) << DescribeCandidate(c.plan);
    decomposed += domino ? 0 : 1;
  }
  EXPECT_GT(decomposed, 0);
}

TEST(SearchTest, BadFixesNameTheKey) {
  SearchSpace space;
  Status s = ApplyFix("tp=eight", &space);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tp=eight"), std::string::npos) << s.message();
  s = ApplyFix("tensor=8", &space);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown key 'tensor'"), std::string::npos) << s.message();
  s = ApplyFix("recompute=some", &space);
  ASSERT_FALSE(s.ok());
  s = ApplyFix("p=1", &space);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(ApplyStrategy("row", &space).ok());  // row needs p > 1
  EXPECT_FALSE(ApplyStrategy("diagonal", &space).ok());
  SearchSpace no_sp;
  ASSERT_TRUE(ApplyFix("sp=false", &no_sp).ok());
  EXPECT_FALSE(ApplyStrategy("decomposed", &no_sp).ok());
}

TEST(SearchTest, NoPlanFitsSaysWhy) {
  // 5,128 = 8 x 641 GPUs: every dp is a multiple of 641, which cannot divide a batch of 2,520.
  Plan base = Base("gpt-530b", "dgx-a100:5", 40);  // resolve on a small cluster first
  Result<ClusterSpec> huge = LoadCluster("dgx-a100:641");
  ASSERT_TRUE(huge.ok());
  base.cluster = *huge;
  base.cluster_ref = "dgx-a100:641";
  base.global_batch = 2520;
  SearchSpace space;
  Simulator eval;
  Result<SearchResult> r = SearchPlans(base, space, eval);
  // No feasible plan is an answer about the input, told apart from an error of the search.
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->NoPlanFits());
  EXPECT_TRUE(r->ranked.empty());
  EXPECT_GT(r->rejected, 0);
  const std::string message = NoPlanFitsMessage(*r);
  EXPECT_EQ(message.rfind("no plan fits: ", 0), 0u) << message;
  EXPECT_NE(message.find("must divide"), std::string::npos) << message;
  EXPECT_EQ(eval.calls, 0);
}

}  // namespace
}  // namespace domino
