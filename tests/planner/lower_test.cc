#include "planner/lower.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "models/model_counts.h"
#include "tests/planner/test_plans.h"

namespace domino {
namespace {

using testing_util::LowerOk;
using testing_util::MakePlan;
using testing_util::PlanKnobs;

constexpr OverlapScope kNone = OverlapScope::kNone;
constexpr OverlapScope kIntra = OverlapScope::kIntraLayer;
constexpr OverlapScope kInter = OverlapScope::kInterLayer;

// gpt3-2.7b on one DGX-H100 node, tp 8, 4 sequences of 256 tokens: 32 layers, hidden 2560.
PlanKnobs Knobs(int p, int q, OverlapScope scope, bool sp = false) {
  PlanKnobs k;
  k.row_split = p;
  k.col_split = q;
  k.scope = scope;
  k.sequence_parallel = sp;
  return k;
}

int Count(const Schedule& s, CollectiveOp kind) {
  return static_cast<int>(std::count_if(s.ops().begin(), s.ops().end(), [&](const Op& op) {
    return op.kind == OpKind::kCollective && op.group == Group::kTp && op.collective == kind;
  }));
}

double GemmFlops(const Schedule& s) {
  double total = 0;
  for (const Op& op : s.ops())
    if (op.kind == OpKind::kGemm) total += op.flops;
  return total;
}

double AllReduceBytes(const Schedule& s) {
  double total = 0;
  for (const Op& op : s.ops())
    if (op.kind == OpKind::kCollective && op.collective == CollectiveOp::kAllReduce)
      total += op.bytes;
  return total;
}

bool DependsOn(const Schedule& s, int32_t op, int32_t dep) {
  auto deps = s.deps(s.op(op));
  return std::find(deps.begin(), deps.end(), dep) != deps.end();
}

struct Strategy {
  int p, q;
  OverlapScope scope;
};
constexpr Strategy kStrategies[] = {{1, 1, kNone},  {1, 1, kIntra}, {2, 1, kInter}, {4, 1, kIntra},
                                    {1, 2, kIntra}, {2, 2, kInter}, {2, 2, kNone},  {4, 4, kInter}};

TEST(LowerTest, FourAllReducesPerLayerSliceAndChunk) {
  const int layers = 32;
  for (const Strategy& st : kStrategies) {
    SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q);
    Schedule s = LowerOk(Knobs(st.p, st.q, st.scope));
    // 2 forward (proj, fc2) + 2 backward (qkv.dgrad, fc1.dgrad) per layer, slice and chunk.
    EXPECT_EQ(Count(s, CollectiveOp::kAllReduce), 4 * layers * st.p * st.q);
    EXPECT_EQ(Count(s, CollectiveOp::kReduceScatter), 0);
    EXPECT_EQ(Count(s, CollectiveOp::kAllGather), 0);
  }
}

TEST(LowerTest, SequenceParallelUsesAllGatherAndReduceScatter) {
  const int layers = 32;
  for (int p : {1, 2, 4}) {
    SCOPED_TRACE(p);
    Schedule s = LowerOk(Knobs(p, 1, p > 1 ? kInter : kNone, /*sp=*/true));
    EXPECT_EQ(Count(s, CollectiveOp::kAllReduce), 0);
    // Per layer and slice: forward AG+RS per block; backward per block an AG of the output
    // gradient, an AG of the norm output for the weight gradient and an RS of the input gradient.
    EXPECT_EQ(Count(s, CollectiveOp::kReduceScatter), (2 + 2) * layers * p);
    EXPECT_EQ(Count(s, CollectiveOp::kAllGather), (2 + 4) * layers * p);
    const double full_bytes = 4.0 * 256 * 2560 * 2 / p;  // a slice's tokens x hidden, bf16
    for (const Op& op : s.ops()) {
      if (op.kind == OpKind::kCollective) {
        EXPECT_EQ(op.bytes, full_bytes);
      }
    }
  }
}

PlanKnobs Decomposed(OverlapMethod method, int p, int chunks, int rs_chunks = 0) {
  PlanKnobs k = Knobs(p, 1, p > 1 ? kInter : kNone, /*sp=*/true);
  k.method = method;
  k.chunks = chunks;
  k.rs_chunks = rs_chunks;
  return k;
}

TEST(LowerTest, DecomposedWithOneChunkIsPlainSequenceParallelism) {
  for (int p : {1, 2}) {
    SCOPED_TRACE(p);
    Schedule plain = LowerOk(Knobs(p, 1, p > 1 ? kInter : kNone, /*sp=*/true));
    Schedule one = LowerOk(Decomposed(p > 1 ? OverlapMethod::kBoth : OverlapMethod::kDecomposed, p,
                                      /*chunks=*/1, /*rs_chunks=*/1));
    ASSERT_EQ(one.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      const Op &a = plain.ops()[i], &b = one.ops()[i];
      ASSERT_EQ(plain.Label(i), one.Label(i)) << i;
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.stream, b.stream);
      EXPECT_EQ(a.m, b.m);
      EXPECT_EQ(a.n, b.n);
      EXPECT_EQ(a.k, b.k);
      EXPECT_EQ(a.bytes, b.bytes);
      EXPECT_EQ(b.parts, 1);
      auto da = plain.deps(a), db = one.deps(b);
      EXPECT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end())) << plain.Label(i);
    }
  }
}

// Per layer and slice with c chunks: forward, the all-gathers before QKV and fc1 in c parts
// each and those GEMMs in c pieces, the proj and fc2 GEMMs and their reduce-scatters in rc
// pieces (the megatron-core stack's 4, as Transformer Engine pipelines them); backward, the
// output gradient's all-gathers in c parts and the proj and fc2 input-gradient GEMMs in c
// pieces, the norm output's all-gathers and the input gradients' reduce-scatters whole (bulk
// overlap under the other GEMM).
TEST(LowerTest, DecomposedCutsCollectivesAndGemmsIntoChunks) {
  const int layers = 32, rc = 4;
  for (auto [method, p, c] :
       {std::tuple{OverlapMethod::kDecomposed, 1, 2}, std::tuple{OverlapMethod::kDecomposed, 1, 8},
        std::tuple{OverlapMethod::kBoth, 2, 4}}) {
    SCOPED_TRACE(testing::Message() << "p=" << p << " c=" << c);
    Schedule s = LowerOk(Decomposed(method, p, c));
    Schedule plain = LowerOk(Knobs(p, 1, p > 1 ? kInter : kNone, /*sp=*/true));
    EXPECT_EQ(Count(s, CollectiveOp::kAllGather), (2 * c + 2 * c + 2) * layers * p);
    EXPECT_EQ(Count(s, CollectiveOp::kReduceScatter), (2 * rc + 2) * layers * p);
    EXPECT_EQ(Count(s, CollectiveOp::kAllReduce), 0);
    auto gemms = [](const Schedule& x, OpFunc func) {
      return std::count_if(x.ops().begin(), x.ops().end(),
                           [&](const Op& op) { return op.func == func; });
    };
    for (OpFunc func : {OpFunc::kQkv, OpFunc::kFc1, OpFunc::kProjGradInput, OpFunc::kFc2GradInput})
      EXPECT_EQ(gemms(s, func), c * layers * p) << OpFuncName(func);
    for (OpFunc func : {OpFunc::kProj, OpFunc::kFc2})
      EXPECT_EQ(gemms(s, func), rc * layers * p) << OpFuncName(func);
    for (OpFunc func : {OpFunc::kQkvGradInput, OpFunc::kFc1GradWeight, OpFunc::kProjGradWeight})
      EXPECT_EQ(gemms(s, func), layers * p) << OpFuncName(func);
    // The same work and the same bytes as plain sequence parallelism, only cut.
    EXPECT_DOUBLE_EQ(GemmFlops(s), GemmFlops(plain));
    double bytes = 0, plain_bytes = 0;
    for (const Op& op : s.ops()) bytes += op.kind == OpKind::kCollective ? op.bytes : 0;
    for (const Op& op : plain.ops()) plain_bytes += op.kind == OpKind::kCollective ? op.bytes : 0;
    EXPECT_DOUBLE_EQ(bytes, plain_bytes);
    // Each part moves 1/c of its slice (a reduce-scatter part 1/rc), and every part index
    // appears.
    const double slice_bytes = 4.0 * 256 * 2560 * 2 / p;
    for (const Op& op : s.ops()) {
      if (op.kind == OpKind::kCollective && op.parts > 1) {
        const int parts = op.collective == CollectiveOp::kReduceScatter ? rc : c;
        EXPECT_EQ(op.parts, parts);
        EXPECT_EQ(op.bytes, slice_bytes / parts);
        EXPECT_EQ(op.tags.chunk, op.part);
      }
    }
  }
}

// The pipeline: GEMM piece k of QKV waits for all-gather part k (and no later part); reduce-
// scatter part k of proj waits for proj's piece k; parts run in order on the TP stream.
TEST(LowerTest, DecomposedPiecesWaitOnlyForTheirOwnPart) {
  const int c = 4;
  Schedule s = LowerOk(Decomposed(OverlapMethod::kDecomposed, 1, c));
  std::vector<int32_t> qkv, gather, proj, scatter;
  for (size_t i = 0; i < s.size(); ++i) {
    const Op& op = s.ops()[i];
    if (op.tags.layer != 0 || op.tags.phase != Phase::kForward) continue;
    if (op.func == OpFunc::kQkv) qkv.push_back(i);
    if (op.func == OpFunc::kProj) proj.push_back(i);
    if (op.func == OpFunc::kTpAllGather && qkv.empty()) gather.push_back(i);
    if (op.func == OpFunc::kTpReduceScatter && scatter.size() < c) scatter.push_back(i);
  }
  ASSERT_EQ(qkv.size(), static_cast<size_t>(c));
  ASSERT_EQ(gather.size(), static_cast<size_t>(c));
  ASSERT_EQ(proj.size(), static_cast<size_t>(c));
  ASSERT_EQ(scatter.size(), static_cast<size_t>(c));
  for (int k = 0; k < c; ++k) {
    EXPECT_EQ(s.op(gather[k]).part, k);
    EXPECT_EQ(s.op(gather[k]).stream, Stream::kTpComm);
    for (int j = 0; j < c; ++j) EXPECT_EQ(DependsOn(s, qkv[k], gather[j]), j == k) << k << j;
    EXPECT_TRUE(DependsOn(s, scatter[k], proj[k]));
    EXPECT_EQ(s.op(scatter[k]).part, k);
    // Piece k reads and writes rows [k, k + 1) * 256 of the 1024 tokens.
    const View& rows = s.writes(s.op(qkv[k]))[0].view;
    EXPECT_EQ(rows.row_begin, 256 * k);
    EXPECT_EQ(rows.row_end, 256 * (k + 1));
    EXPECT_EQ(s.op(qkv[k]).m, 256);
  }
  // Scope none: the next compute op after proj's pieces waits for every part, not the first.
  int32_t next = proj.back() + 1;
  while (s.op(next).stream != Stream::kCompute) ++next;
  for (int32_t part : scatter) EXPECT_TRUE(DependsOn(s, next, part));
}

TEST(LowerTest, DepsPrecedeAndCrossStreams) {
  for (const Strategy& st : kStrategies) {
    for (bool sp : {false, true}) {
      if (sp && st.q > 1) continue;
      SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q << " sp=" << sp);
      Schedule s = LowerOk(Knobs(st.p, st.q, st.scope, sp));
      ASSERT_GT(s.size(), 0u);
      for (size_t i = 0; i < s.size(); ++i) {
        const Op& op = s.op(static_cast<int32_t>(i));
        for (int32_t dep : s.deps(op)) {
          ASSERT_GE(dep, 0);
          ASSERT_LT(dep, static_cast<int32_t>(i)) << s.Label(static_cast<int32_t>(i));
          EXPECT_NE(s.op(dep).stream, op.stream);
        }
        // Collectives wait for their producer; compute ops live on the compute stream.
        if (op.kind == OpKind::kCollective) {
          EXPECT_EQ(op.stream, Stream::kTpComm);
          EXPECT_EQ(op.dep_count, 1u) << s.Label(static_cast<int32_t>(i));
        } else {
          EXPECT_EQ(op.stream, Stream::kCompute);
        }
        for (const TensorUse& use : s.reads(op))
          ASSERT_LT(use.tensor, static_cast<int32_t>(s.tensors().size()));
        for (const TensorUse& use : s.writes(op))
          ASSERT_LT(use.tensor, static_cast<int32_t>(s.tensors().size()));
      }
    }
  }
}

TEST(LowerTest, SlicingDoesNotChangeGemmWork) {
  for (const char* model : {"gpt3-2.7b", "llama2-7b"}) {
    SCOPED_TRACE(model);
    PlanKnobs base = Knobs(1, 1, kNone);
    base.model = model;
    Plan plan = MakePlan(base);
    // Forward GEMM FLOPs of one rank: 2 * tokens * (layer matmul parameters / tp) per layer.
    ParameterCounts counts = CountParameters(plan.model);
    const double layer_matmul =
        static_cast<double>(counts.matmul - plan.model.vocab * plan.model.hidden) /
        plan.model.layers;
    const double tokens = 4.0 * 256;
    const double forward = 2.0 * tokens * layer_matmul / 8 * plan.model.layers;
    for (const Strategy& st : kStrategies) {
      for (bool sp : {false, true}) {
        if (sp && st.q > 1) continue;
        SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q << " sp=" << sp);
        PlanKnobs k = Knobs(st.p, st.q, st.scope, sp);
        k.model = model;
        Schedule s = LowerOk(k);
        double fwd = 0;
        for (const Op& op : s.ops())
          if (op.kind == OpKind::kGemm && op.tags.phase == Phase::kForward) fwd += op.flops;
        EXPECT_DOUBLE_EQ(fwd, forward);
        EXPECT_DOUBLE_EQ(GemmFlops(s), 3 * forward);  // backward: input and weight gradients
      }
    }
  }
}

TEST(LowerTest, AllReduceBytesDoNotDependOnSlicing) {
  // Per layer: four all-reduces of the micro-batch's tokens x hidden activations in bf16.
  const double expected = 4.0 * 32 * (4 * 256) * 2560 * 2;
  for (const Strategy& st : kStrategies) {
    SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q);
    EXPECT_EQ(AllReduceBytes(LowerOk(Knobs(st.p, st.q, st.scope))), expected);
  }
}

TEST(LowerTest, SlicesAndChunksShapeTheGemms) {
  const int64_t tokens = 4 * 256, hidden = 2560;
  for (const Strategy& st : kStrategies) {
    SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q);
    Schedule s = LowerOk(Knobs(st.p, st.q, st.scope));
    int chunked = 0;
    for (const Op& op : s.ops()) {
      if (op.kind != OpKind::kGemm) continue;
      bool wgrad = op.func == OpFunc::kQkvGradWeight || op.func == OpFunc::kProjGradWeight ||
                   op.func == OpFunc::kFc1GradWeight || op.func == OpFunc::kFc2GradWeight;
      // Weight gradients reduce over the slice's tokens; every other GEMM has them as rows.
      EXPECT_EQ(wgrad ? op.k : op.m, tokens / st.p) << OpFuncName(op.func);
      if (op.func == OpFunc::kProj || op.func == OpFunc::kFc2 || op.func == OpFunc::kQkvGradInput ||
          op.func == OpFunc::kFc1GradInput) {
        EXPECT_EQ(op.n, hidden / st.q) << OpFuncName(op.func);
        EXPECT_EQ(op.tags.col_chunk, st.q > 1 ? op.tags.col_chunk : -1);
        ++chunked;
      }
      EXPECT_EQ(op.tags.row_slice >= 0, st.p > 1);
    }
    EXPECT_EQ(chunked, 4 * 32 * st.p * st.q);
  }
}

TEST(LowerTest, ScopeNoneWaitsForEveryCollective) {
  for (const Strategy& st : {Strategy{1, 1, kNone}, Strategy{2, 1, kNone}, Strategy{1, 2, kNone},
                             Strategy{2, 2, kNone}}) {
    for (bool sp : {false, true}) {
      if (sp && st.q > 1) continue;
      SCOPED_TRACE(testing::Message() << "p=" << st.p << " q=" << st.q << " sp=" << sp);
      Schedule s = LowerOk(Knobs(st.p, st.q, st.scope, sp));
      const auto n = static_cast<int32_t>(s.size());
      int checked = 0;
      for (int32_t c = 0; c < n; ++c) {
        const Op& comm = s.op(c);
        if (comm.kind != OpKind::kCollective) continue;
        // Forward: the next compute op waits. Backward (input-gradient collectives): the weight
        // gradient GEMM and later chunks' GEMMs run beside it; the next other compute op waits.
        bool backward_dgrad =
            comm.tags.phase == Phase::kBackward && comm.collective != CollectiveOp::kAllGather;
        if (comm.tags.phase == Phase::kBackward && !backward_dgrad) continue;
        if (sp && comm.collective == CollectiveOp::kAllGather && st.p > 1) continue;  // prefetched
        int32_t next = c + 1;
        while (next < n) {
          const Op& op = s.op(next);
          bool skip = op.stream != Stream::kCompute ||
                      (backward_dgrad &&
                       (op.func == OpFunc::kQkvGradWeight || op.func == OpFunc::kFc1GradWeight ||
                        op.func == OpFunc::kQkvGradInput || op.func == OpFunc::kFc1GradInput));
          if (!skip) break;
          ++next;
        }
        if (next == n) continue;  // the stack's last collective
        EXPECT_TRUE(DependsOn(s, next, c)) << s.Label(c) << " -> " << s.Label(next);
        ++checked;
      }
      EXPECT_GT(checked, 4 * 32 * st.p * st.q - 2);
    }
  }
}

TEST(LowerTest, InterLayerHasOnlyDataDependencies) {
  // With inter-layer scope a collective is waited on only by the entry of its own slice, so the
  // compute op right after slice 0's forward all-reduce (slice 1's work) does not wait for it.
  Schedule s = LowerOk(Knobs(2, 1, kInter));
  int independent = 0;
  for (int32_t c = 0; c + 1 < static_cast<int32_t>(s.size()); ++c) {
    const Op& comm = s.op(c);
    if (comm.kind != OpKind::kCollective || comm.tags.phase != Phase::kForward ||
        comm.tags.row_slice != 0)
      continue;
    EXPECT_FALSE(DependsOn(s, c + 1, c)) << s.Label(c + 1);
    ++independent;
  }
  EXPECT_EQ(independent, 2 * 32);
}

TEST(LowerTest, IntraLayerBarrierHoldsTheNextLayer) {
  // Scope intra-layer: the first compute op issued after layer 1's last forward collective (the
  // residual that feeds layer 2) waits for every collective of layer 1, of both slices.
  for (OverlapScope scope : {kIntra, kInter}) {
    Schedule s = LowerOk(Knobs(2, 1, scope));
    std::vector<int32_t> layer1_comms;
    for (int32_t i = 0; i < static_cast<int32_t>(s.size()); ++i) {
      const Op& op = s.op(i);
      if (op.kind == OpKind::kCollective && op.tags.phase == Phase::kForward && op.tags.layer == 1)
        layer1_comms.push_back(i);
    }
    ASSERT_EQ(layer1_comms.size(), 4u);  // proj and fc2 of two slices
    int32_t waiter = layer1_comms.back() + 1;
    while (s.op(waiter).stream != Stream::kCompute) ++waiter;
    int waited = 0;
    for (int32_t c : layer1_comms) waited += DependsOn(s, waiter, c);
    // Inter-layer: only its own slice's fc2 all-reduce (slice 0's residual enters layer 2).
    EXPECT_EQ(waited, scope == kIntra ? 4 : 1) << s.Label(waiter);
  }
}

// Every element an op reads was written by an earlier op the reader is ordered after (same
// stream, or a dependency chain), except what the run starts with: weights, the first layer's
// input, or the tokens and labels with the model's ends. That is what lets an executor run the
// schedule numerically; it is checked here on a small model for every strategy, by
// rank-independent views, for the layer stack and for the whole model.
TEST(LowerTest, EveryReadFollowsTheWriteItNeeds) {
  struct Case {
    int p, q;
    OverlapScope scope;
    bool sp;
    bool ends = false;  // the embedding and the head
  };
  for (Case c :
       {Case{1, 1, kNone, false}, Case{1, 1, kNone, true}, Case{2, 1, kInter, false},
        Case{3, 1, kIntra, false}, Case{1, 4, kIntra, false}, Case{2, 2, kInter, false},
        Case{2, 1, kInter, true}, Case{1, 1, kNone, false, true}, Case{1, 1, kNone, true, true},
        Case{2, 1, kInter, true, true}, Case{3, 2, kIntra, false, true}}) {
    SCOPED_TRACE(testing::Message()
                 << "p " << c.p << " q " << c.q << " sp " << c.sp << " ends " << c.ends);
    PlanKnobs k = Knobs(c.p, c.q, c.scope, c.sp);
    k.model = std::string(DOMINO_SOURCE_DIR) + "/models/examples/tiny-llama.yaml";
    k.cluster = "dgx-h100:1:2";
    k.tp = 2;
    k.seq_len = 16;
    k.micro_batch = 6;
    k.global_batch = 6;
    Schedule s;
    if (c.ends) {
      Result<Schedule> stage = LowerStage(MakePlan(k), LowerOptions{-1, true, true, true, true});
      ASSERT_TRUE(stage.ok()) << stage.message();
      s = std::move(stage).value();
    } else {
      s = LowerOk(k);
    }
    ASSERT_GT(s.size(), 0u);
    // ordered[i] = ops that op i is ordered after (transitively), as a bitset per op.
    const size_t n = s.size();
    std::vector<std::vector<bool>> after(n, std::vector<bool>(n, false));
    std::vector<int32_t> last_on_stream(kStreamCount, -1);
    for (size_t i = 0; i < n; ++i) {
      const Op& op = s.ops()[i];
      auto inherit = [&](int32_t j) {
        after[i][j] = true;
        for (size_t x = 0; x < n; ++x)
          if (after[j][x]) after[i][x] = true;
      };
      int32_t prev = last_on_stream[static_cast<int>(op.stream)];
      if (prev >= 0) inherit(prev);
      for (int32_t d : s.deps(op)) inherit(d);
      last_on_stream[static_cast<int>(op.stream)] = static_cast<int32_t>(i);
    }
    // writer[t][r * cols + c] = the last op that wrote the element, or -1.
    std::vector<std::vector<int32_t>> writer;
    for (const Tensor& t : s.tensors()) writer.emplace_back(t.rows * t.cols, -1);
    for (size_t i = 0; i < n; ++i) {
      const Op& op = s.ops()[i];
      for (const TensorUse& u : s.reads(op)) {
        const Tensor& t = s.tensors()[u.tensor];
        if (IsGiven(t.role)) continue;
        for (int64_t r = u.view.row_begin; r < u.view.row_end; ++r) {
          for (int64_t col = u.view.col_begin; col < u.view.col_end; ++col) {
            int32_t w = writer[u.tensor][r * t.cols + col];
            ASSERT_GE(w, 0) << s.Label(i) << " reads " << RoleName(t.role) << "[" << r << "," << col
                            << "] before anything writes it";
            ASSERT_TRUE(w == static_cast<int32_t>(i) || after[i][w])
                << s.Label(i) << " reads " << RoleName(t.role) << " written by " << s.Label(w)
                << " without waiting for it";
          }
        }
      }
      for (const TensorUse& u : s.writes(op)) {
        const Tensor& t = s.tensors()[u.tensor];
        for (int64_t r = u.view.row_begin; r < u.view.row_end; ++r)
          for (int64_t col = u.view.col_begin; col < u.view.col_end; ++col)
            writer[u.tensor][r * t.cols + col] = static_cast<int32_t>(i);
      }
    }
  }
}

// Backends and checks find tensors by role: every tensor has one, and no two share it, with and
// without sequence parallelism, for a stack and for a stage with the embedding and the head.
TEST(LowerTest, EveryTensorHasARoleOfItsOwn) {
  struct Case {
    Strategy st;
    bool sp;
    bool ends;  // embedding and head
  };
  for (const Case& c : {Case{{1, 1, kNone}, false, false}, Case{{2, 2, kInter}, false, false},
                        Case{{2, 1, kInter}, true, false}, Case{{1, 1, kNone}, false, true},
                        Case{{2, 1, kInter}, true, true}}) {
    SCOPED_TRACE(testing::Message()
                 << "p=" << c.st.p << " q=" << c.st.q << " sp=" << c.sp << " ends=" << c.ends);
    Plan plan = MakePlan(Knobs(c.st.p, c.st.q, c.st.scope, c.sp));
    LowerOptions options;
    options.layers = 2;
    options.embedding = options.head = c.ends;
    Result<Schedule> s = LowerStage(plan, options);
    ASSERT_TRUE(s.ok()) << s.message();
    const std::vector<Tensor>& tensors = s->tensors();
    int inputs = 0, weights = 0, norm_weights = 0;
    std::set<std::string> names;  // each role has a name of its own
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorRole& role = tensors[i].role;
      EXPECT_NE(role.slot, TensorSlot::kNone) << RoleName(role);
      EXPECT_EQ(FindTensor(tensors, role), static_cast<int32_t>(i))
          << RoleName(role) << " is held twice";
      EXPECT_TRUE(names.insert(RoleName(role)).second) << RoleName(role) << " names two roles";
      if (role.gradient) continue;
      inputs += role.kind == TensorKind::kInput;
      weights += role.kind == TensorKind::kWeight;
      norm_weights += role.kind == TensorKind::kNormWeight;
    }
    // With the ends the embedding computes the first layer's input from the tokens, and the loss
    // reads the labels.
    EXPECT_EQ(inputs, c.ends ? 2 : 1);
    for (const char* end : {"tokens", "labels", "logits", "logits.grad", "loss"})
      EXPECT_EQ(names.count(end), c.ends ? 1u : 0u) << end;
    // qkv, proj, fc1, fc2; the embedding, which is also the LM head (tied embeddings).
    EXPECT_EQ(weights, 4 * 2 + (c.ends ? 1 : 0));
    EXPECT_EQ(norm_weights, 2 * 2 + (c.ends ? 1 : 0));  // ln1, ln2; the final norm
    const int32_t w = FindTensor(tensors, TensorRole{TensorKind::kWeight, TensorSlot::kFc2, false,
                                                     TensorForm::kPrimary, 1, -1});
    ASSERT_GE(w, 0);
    EXPECT_EQ(RoleName(tensors[w].role), "l1.fc2.w");
  }
}

TEST(LowerTest, Fp8GathersTheLayersLinearInputsInOneByte) {
  // gpt3-2.7b (hidden 2560), 4 x 256 tokens, tp 8 with SP: each all-gather feeding a layer's
  // linear GEMM moves 1024 x 2560 elements, 1 byte each under fp8 (2 under bf16); the gathers of
  // the LM head's input ("final_norm") and of the embedding's gradient ("l0.x.grad.full") stay
  // 16-bit.
  for (Dtype precision : {Dtype::kFp8, Dtype::kBf16}) {
    Plan plan = MakePlan(Knobs(1, 1, kNone, /*sp=*/true));
    plan.precision = precision;
    Result<Schedule> s = LowerStage(plan, LowerOptions{-1, true, true, true, true});
    ASSERT_TRUE(s.ok()) << s.message();
    const double elements = 1024.0 * 2560;
    int linear = 0, other = 0;
    for (const Op& op : s->ops()) {
      if (op.func != OpFunc::kTpAllGather) continue;
      const std::string into = RoleName(s->tensors()[s->writes(op)[0].tensor].role);
      if (into == "final_norm" || into == "l0.x.grad.full") {
        EXPECT_DOUBLE_EQ(op.bytes, elements * 2) << into;
        ++other;
      } else {
        EXPECT_DOUBLE_EQ(op.bytes, elements * (precision == Dtype::kFp8 ? 1 : 2)) << into;
        ++linear;
      }
    }
    EXPECT_EQ(other, 2);
    EXPECT_EQ(linear, 32 * 6);  // per layer: 2 forward, 2 gradient gathers, 2 norm re-gathers
  }
}

TEST(LowerTest, RejectsABrokenPlan) {
  Plan plan = MakePlan(Knobs(1, 1, kNone));
  plan.row_split = 3;  // does not divide micro_batch 4
  Result<Schedule> s = Lower(plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("overlap.row_split: ", 0), 0u) << s.message();
}

}  // namespace
}  // namespace domino
