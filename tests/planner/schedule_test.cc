#include "planner/schedule.h"

#include <gtest/gtest.h>

#include <vector>

namespace domino {
namespace {

Op OnStream(Stream stream, OpFunc func = OpFunc::kQkv) {
  Op op;
  op.kind = stream == Stream::kCompute ? OpKind::kGemm : OpKind::kCollective;
  op.stream = stream;
  op.func = func;
  return op;
}

std::vector<int32_t> Deps(const Schedule& s, int32_t id) {
  auto deps = s.deps(s.op(id));
  return {deps.begin(), deps.end()};
}

TEST(ScheduleTest, AddKeepsCrossStreamDepsAndDropsSameStreamOnes) {
  Schedule s;
  int32_t a = s.Add(OnStream(Stream::kCompute), {});
  int32_t b = s.Add(OnStream(Stream::kTpComm), std::vector<int32_t>{a});
  int32_t c = s.Add(OnStream(Stream::kCompute), std::vector<int32_t>{a, b});
  int32_t d = s.Add(OnStream(Stream::kDpComm), std::vector<int32_t>{b, c});
  int32_t e = s.Add(OnStream(Stream::kTpComm), std::vector<int32_t>{b});
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 2);
  EXPECT_EQ(d, 3);
  EXPECT_EQ(e, 4);
  EXPECT_EQ(s.size(), 5u);
  EXPECT_TRUE(Deps(s, a).empty());
  EXPECT_EQ(Deps(s, b), std::vector<int32_t>{a});
  EXPECT_EQ(Deps(s, c), std::vector<int32_t>{b});  // a is implied by stream order
  EXPECT_EQ(Deps(s, d), (std::vector<int32_t>{b, c}));
  EXPECT_TRUE(Deps(s, e).empty());
  EXPECT_EQ(s.op(c).dep_count, 1u);
}

TEST(ScheduleTest, ReadsAndWritesAreKeptPerOp) {
  Schedule s;
  auto role = [](TensorKind kind, TensorSlot slot) {
    return TensorRole{kind, slot, false, TensorForm::kPrimary, 0};
  };
  int32_t x =
      s.AddTensor(Tensor{64, 32, Shard::kReplicated, 0, role(TensorKind::kInput, TensorSlot::kX)});
  int32_t w = s.AddTensor(
      Tensor{32, 96, Shard::kReplicated, 0, role(TensorKind::kWeight, TensorSlot::kQkv)});
  int32_t y = s.AddTensor(
      Tensor{64, 96, Shard::kReplicated, 0, role(TensorKind::kActivation, TensorSlot::kQkv)});
  EXPECT_EQ(x, 0);
  EXPECT_EQ(w, 1);
  EXPECT_EQ(y, 2);
  ASSERT_EQ(s.tensors().size(), 3u);
  EXPECT_EQ(RoleName(s.tensors()[w].role), "l0.qkv.w");
  EXPECT_EQ(RoleName(s.tensors()[y].role), "l0.qkv");
  EXPECT_EQ(s.tensors()[w].rows, 32);
  EXPECT_EQ(s.tensors()[w].cols, 96);

  TensorUse reads[] = {{x, View{0, 32, 0, 32}}, {w, View{0, 32, 0, 96}}};
  TensorUse writes[] = {{y, View{0, 32, 48, 96}}};
  int32_t gemm = s.Add(OnStream(Stream::kCompute), {}, reads, writes);
  int32_t comm = s.Add(OnStream(Stream::kTpComm), std::vector<int32_t>{gemm}, writes, writes);
  int32_t bare = s.Add(OnStream(Stream::kCompute), {});

  auto r = s.reads(s.op(gemm));
  auto wr = s.writes(s.op(gemm));
  ASSERT_EQ(r.size(), 2u);
  ASSERT_EQ(wr.size(), 1u);
  EXPECT_EQ(r[0].tensor, x);
  EXPECT_EQ(r[0].view.row_end, 32);
  EXPECT_EQ(r[1].tensor, w);
  EXPECT_EQ(r[1].view.col_end, 96);
  EXPECT_EQ(wr[0].tensor, y);
  EXPECT_EQ(wr[0].view.col_begin, 48);
  ASSERT_EQ(s.reads(s.op(comm)).size(), 1u);
  ASSERT_EQ(s.writes(s.op(comm)).size(), 1u);
  EXPECT_EQ(s.reads(s.op(comm))[0].tensor, y);
  EXPECT_EQ(s.writes(s.op(comm))[0].view.col_begin, 48);
  EXPECT_TRUE(s.reads(s.op(bare)).empty());
  EXPECT_TRUE(s.writes(s.op(bare)).empty());
}

TEST(ScheduleTest, LabelNamesFuncAndTags) {
  Schedule s;
  Op op = OnStream(Stream::kCompute, OpFunc::kFc2GradInput);
  op.tags = OpTags{
      .layer = 3, .micro_batch = 0, .row_slice = 1, .col_chunk = 0, .phase = Phase::kBackward};
  int32_t full = s.Add(op, {});
  Op comm = OnStream(Stream::kTpComm, OpFunc::kTpAllReduce);
  comm.tags.layer = 12;
  int32_t partial = s.Add(comm, {});
  Op untagged = OnStream(Stream::kCompute, OpFunc::kCount);
  untagged.tags.phase = Phase::kOptimizer;
  int32_t bare = s.Add(untagged, {});
  EXPECT_EQ(s.Label(full), "fc2.dgrad L3 mb0 s1 c0 bwd");
  EXPECT_EQ(s.Label(partial), "tp.allreduce L12 fwd");
  EXPECT_EQ(s.Label(bare), "op optim");
}

TEST(ScheduleTest, NamesOfStreamsAndFuncs) {
  EXPECT_EQ(StreamName(Stream::kCompute), "compute");
  EXPECT_EQ(StreamName(Stream::kTpComm), "tp-comm");
  EXPECT_EQ(StreamName(Stream::kDpComm), "dp-comm");
  EXPECT_EQ(StreamName(Stream::kPpComm), "pp-comm");
  EXPECT_EQ(OpFuncName(OpFunc::kLn1), "ln1");
  EXPECT_EQ(OpFuncName(OpFunc::kQkvGradWeight), "qkv.wgrad");
  EXPECT_EQ(OpFuncName(OpFunc::kResidualGrad), "residual.grad");
  EXPECT_EQ(OpFuncName(OpFunc::kTpAllGather), "tp.allgather");
  // Every func has its own name.
  for (int i = 0; i < static_cast<int>(OpFunc::kCount); ++i)
    for (int j = 0; j < i; ++j)
      EXPECT_NE(OpFuncName(static_cast<OpFunc>(i)), OpFuncName(static_cast<OpFunc>(j)))
          << i << " " << j;
}

TEST(TimelineTest, EndIsTheLatestEnd) {
  Timeline empty;
  EXPECT_EQ(empty.end_us(), 0.0);
  Timeline t;
  t.ops = {{0, 5.5}, {1, 12.25}, {3, 7}};
  EXPECT_EQ(t.end_us(), 12.25);
}

}  // namespace
}  // namespace domino
