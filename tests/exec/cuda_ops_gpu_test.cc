// Needs a GPU: labelled `gpu`, skips cleanly without one. Checks the ops of exec/cuda_ops.h against
// the fp32 CPU kernels (exec/cpu_kernels.h) in every element type, on views that are column blocks
// of wider matrices, and graph capture; the measurements and the emulated collective are in
// cuda_measure_gpu_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "exec/cpu_kernels.h"
#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "exec/positions.h"
#include "tests/exec/cuda_ops_gpu_fixture.h"

namespace domino::exec {
namespace {

#if DOMINO_HAVE_CUDA

using cuda::DType;
using cuda::DView;
using cuda::StreamKind;
using gpu_test::CudaOpsTest;
using gpu_test::CudaOpsTypedTest;
using gpu_test::HostView;
using gpu_test::kEps;
using gpu_test::Matrix;
using gpu_test::Msg;

INSTANTIATE_TEST_SUITE_P(Types, CudaOpsTypedTest,
                         ::testing::Values(DType::kF32, DType::kBf16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(cuda::DTypeName(info.param));
                         });

TEST_P(CudaOpsTypedTest, GemmMatchesCpuInTheLayoutsTheBackendUses) {
  const int64_t m = 24, n = 40, k = 56;
  struct Layout {
    bool transpose_a, transpose_b, accumulate;
  };
  for (const Layout& l :
       {Layout{false, false, false}, Layout{false, true, false}, Layout{true, false, true}}) {
    SCOPED_TRACE(testing::Message() << "ta " << l.transpose_a << " tb " << l.transpose_b);
    const Matrix a = l.transpose_a ? Make(k, m) : Make(m, k);
    const Matrix b = l.transpose_b ? Make(n, k) : Make(k, n);
    const Matrix c = Make(m, n);
    std::vector<float> want = c.host;
    cpu::Gemm(HostView(a), l.transpose_a, HostView(b), l.transpose_b, HostView(&want, m, n),
              l.accumulate);
    ASSERT_EQ(Msg(cuda::Gemm(context_, a.view, l.transpose_a, b.view, l.transpose_b, c.view,
                             l.accumulate)),
              "");
    ExpectNear(Read(c.view), want, "gemm");
    ExpectOutsideKept(c, "gemm");
  }
}

TEST_P(CudaOpsTypedTest, AddCopyAndZero) {
  const int64_t rows = 33, cols = 70;
  const Matrix a = Make(rows, cols), b = Make(rows, cols), c = Make(rows, cols);
  std::vector<float> want(static_cast<size_t>(rows * cols));
  cpu::Add(HostView(a), HostView(b), HostView(&want, rows, cols));
  ASSERT_EQ(Msg(cuda::Add(context_, a.view, b.view, c.view)), "");
  ExpectNear(Read(c.view), want, "add");
  ExpectOutsideKept(c, "add");

  const Matrix d = Make(rows, cols);
  ASSERT_EQ(Msg(cuda::Copy(context_, a.view, d.view)), "");
  EXPECT_EQ(Read(d.view), a.host);
  ExpectOutsideKept(d, "copy");
  ASSERT_EQ(Msg(cuda::Zero(context_, d.view)), "");
  EXPECT_EQ(Read(d.view), std::vector<float>(want.size(), 0.0f));
  ExpectOutsideKept(d, "zero");
  EXPECT_NE(
      Msg(cuda::Add(context_, a.view, b.view, DView{c.view.data, rows, cols - 1, c.view.stride})),
      "");
}

// The residual branch's dropout (exec/dropout.h) draws on the device the masks the host draws:
// a view placed in the middle of the step's tokens and columns, and one rank's chunks of context
// parallelism, whose rows are two runs of the sequence.
TEST_P(CudaOpsTypedTest, TheBranchsDropoutMatchesCpu) {
  const int64_t rows = 33, cols = 70;
  const Matrix a = Make(rows, cols), b = Make(rows, cols), c = Make(rows, cols);
  const Matrix d = Make(rows, cols);
  for (const BranchDropout& dropout : {BranchDropout{.rate = 0.1,
                                      .stream = BranchDropoutStream(7, 3, 1),
                                      .first_token = 4096,
                                      .whole_row = 5,
                                      .first_col = 140},
                                       BranchDropout{.rate = 0.5,
                                       .stream = BranchDropoutStream(7, 0, 2),
                                       .first_token = 128,
                                       .whole_row = 30,
                                       .seq_len = 64,
                                       .cp = 2,
                                       .cp_rank = 1}}) {
    SCOPED_TRACE(testing::Message() << "rate " << dropout.rate << " cp " << dropout.cp);
    std::vector<float> want(static_cast<size_t>(rows * cols));
    cpu::Add(HostView(a), HostView(b), HostView(&want, rows, cols), dropout);
    ASSERT_EQ(Msg(cuda::Add(context_, a.view, b.view, c.view, dropout)), "");
    ExpectNear(Read(c.view), want, "add with the branch's dropout");
    ExpectOutsideKept(c, "add with the branch's dropout");
    cpu::Dropout(HostView(a), dropout, HostView(&want, rows, cols));
    ASSERT_EQ(Msg(cuda::Dropout(context_, dropout, a.view, d.view)), "");
    ExpectNear(Read(d.view), want, "dropout");
    ExpectOutsideKept(d, "dropout");
    EXPECT_GT(std::count(want.begin(), want.end(), 0.0f), 0) << "no element dropped";
  }
}

TEST_P(CudaOpsTypedTest, NormsMatchCpu) {
  // Rows offset in a wider matrix (element by element) and packed ones (16 bytes at a time); rows
  // so wide that staging them takes more than 48 KiB of shared memory; more rows than the
  // backward's reduction buffer holds the statistics of, so that it goes in slices.
  struct Shape {
    int64_t rows, cols;
    bool packed;
  };
  for (const Shape& shape : {Shape{600, 96, false}, Shape{600, 96, true}, Shape{40, 16384, true},
                             Shape{600000, 8, true}})
    for (bool rms : {false, true}) {
      SCOPED_TRACE(testing::Message() << (rms ? "rmsnorm " : "layernorm ") << shape.rows << " x "
                                      << shape.cols << (shape.packed ? " packed" : " offset"));
      const int64_t rows = shape.rows, cols = shape.cols;
      const cpu::NormKind kind = rms ? cpu::NormKind::kRmsNorm : cpu::NormKind::kLayerNorm;
      const auto make = [&](int64_t r, float lo = -1.0f, float hi = 1.0f) {
        return Make(r, cols, lo, hi, shape.packed);
      };
      const Matrix x = make(rows, -2.0f, 2.5f), gamma = make(1, 0.5f, 1.5f);
      const Matrix y = make(rows), dy = make(rows), dx = make(rows);
      const Matrix dgamma = make(1);
      std::vector<float> want_y(static_cast<size_t>(rows * cols));
      cpu::NormForward(kind, HostView(x), gamma.host.data(), kEps, HostView(&want_y, rows, cols));
      ASSERT_EQ(Msg(cuda::NormForward(context_, rms, x.view, gamma.view.data, kEps, y.view)), "");
      ExpectNear(Read(y.view), want_y, "norm forward");
      ExpectOutsideKept(y, "norm forward");

      const bool accumulate_dx = rms;  // one norm of each way
      std::vector<float> want_dx = dx.host, want_dgamma = dgamma.host;
      cpu::NormBackward(kind, HostView(x), gamma.host.data(), kEps, HostView(dy),
                        HostView(&want_dx, rows, cols), accumulate_dx, want_dgamma.data());
      ASSERT_EQ(Msg(cuda::NormBackward(context_, rms, x.view, gamma.view.data, kEps, dy.view,
                                       dx.view, accumulate_dx, dgamma.view.data)),
                "");
      ExpectNear(Read(dx.view), want_dx, "norm dx");
      if (rows < 100000) {
        ExpectNear(Read(dgamma.view), want_dgamma, "norm dgamma");
      } else {  // the reference adds 600,000 rows one by one in fp32: its own error nears 1e-4
        const std::vector<float> got = Read(dgamma.view);
        float peak = 0;
        for (float w : want_dgamma) peak = std::max(peak, std::abs(w));
        for (int64_t j = 0; j < cols; ++j)
          EXPECT_NEAR(got[j], want_dgamma[j], std::max(1e-3, 2 * Tolerance()) * peak)
              << "norm dgamma column " << j;
      }
      ExpectOutsideKept(dx, "norm dx");
      ExpectOutsideKept(dgamma, "norm dgamma");
    }
}

TEST_P(CudaOpsTypedTest, HeadNormsMatchTheCpuNormOfEachHead) {
  // A QK-norm's [Q | K] rows: offset in a wider matrix, and packed with so many tokens that the
  // backward's statistics go in slices.
  struct Shape {
    int64_t tokens, heads, q_heads, d;
    bool packed;
  };
  for (const Shape& shape : {Shape{300, 6, 4, 16, false}, Shape{70000, 9, 8, 128, true}})
    for (bool rms : {false, true}) {
      SCOPED_TRACE(testing::Message() << (rms ? "rmsnorm " : "layernorm ") << shape.tokens
                                      << " tokens x " << shape.heads << " heads of " << shape.d);
      const int64_t rows = shape.tokens, d = shape.d, cols = shape.heads * d;
      const cpu::NormKind kind = rms ? cpu::NormKind::kRmsNorm : cpu::NormKind::kLayerNorm;
      const auto make = [&](int64_t r, int64_t c, float lo = -1.0f, float hi = 1.0f) {
        return Make(r, c, lo, hi, shape.packed);
      };
      const Matrix x = make(rows, cols, -2.0f, 2.5f), gamma = make(1, 2 * d, 0.5f, 1.5f);
      const Matrix kept = make(rows, cols), dy = make(rows, cols), dx = make(rows, cols);
      const Matrix dgamma = make(1, 2 * d);
      std::vector<float> want_y(static_cast<size_t>(rows * cols));
      std::vector<float> want_dx(want_y.size()), want_dgamma = dgamma.host;
      for (int64_t j = 0; j < shape.heads; ++j) {
        const int64_t gain = j < shape.q_heads ? 0 : d;
        const cpu::ConstMat head(x.host.data() + j * d, rows, d, cols);
        cpu::NormForward(kind, head, gamma.host.data() + gain, kEps,
                         cpu::Mat{want_y.data() + j * d, rows, d, cols});
        cpu::NormBackward(kind, head, gamma.host.data() + gain, kEps,
                          cpu::ConstMat(dy.host.data() + j * d, rows, d, cols),
                          cpu::Mat{want_dx.data() + j * d, rows, d, cols},
                          /*accumulate_dx=*/false, want_dgamma.data() + gain);
      }
      ASSERT_EQ(Msg(cuda::HeadNormForward(context_, rms, shape.heads, shape.q_heads, x.view,
                                          gamma.view.data, kEps, kept.view)),
                "");
      ExpectNear(Read(kept.view), x.host, "QK-norm kept input");
      ExpectNear(Read(x.view), want_y, "QK-norm forward, in place");
      ExpectOutsideKept(x, "QK-norm forward");
      ASSERT_EQ(
          Msg(cuda::HeadNormBackward(context_, rms, shape.heads, shape.q_heads, kept.view,
                                     gamma.view.data, kEps, dy.view, dx.view, dgamma.view.data)),
          "");
      ExpectNear(Read(dx.view), want_dx, "QK-norm dx");
      ExpectOutsideKept(dx, "QK-norm dx");
      // The reference adds its rows one by one in fp32: within 1e-3 of the largest sum at most.
      const std::vector<float> got = Read(dgamma.view);
      float peak = 1e-3f;
      for (float w : want_dgamma) peak = std::max(peak, std::abs(w));
      for (int64_t j = 0; j < 2 * d; ++j)
        EXPECT_NEAR(got[j], want_dgamma[j], std::max(1e-3, 2 * Tolerance()) * peak)
            << "QK-norm dgamma column " << j;
    }
}

TEST_P(CudaOpsTypedTest, ActivationsMatchCpu) {
  const int64_t rows = 40, f = 72;
  {
    const Matrix x = Make(rows, f, -3.0f, 3.0f), y = Make(rows, f), dy = Make(rows, f);
    const Matrix dx = Make(rows, f);
    std::vector<float> want_y(static_cast<size_t>(rows * f)), want_dx = want_y;
    cpu::GeluForward(HostView(x), HostView(&want_y, rows, f));
    cpu::GeluBackward(HostView(x), HostView(dy), HostView(&want_dx, rows, f));
    ASSERT_EQ(Msg(cuda::Gelu(context_, x.view, y.view)), "");
    ASSERT_EQ(Msg(cuda::GeluBackward(context_, x.view, dy.view, dx.view)), "");
    ExpectNear(Read(y.view), want_y, "gelu");
    ExpectNear(Read(dx.view), want_dx, "gelu backward");
    ExpectOutsideKept(y, "gelu");
    ExpectOutsideKept(dx, "gelu backward");
  }
  for (const cpu::Gate gate : {cpu::Gate::kSilu, cpu::Gate::kGelu}) {
    const bool gelu = gate == cpu::Gate::kGelu;
    const std::string what = gelu ? "geglu" : "swiglu";
    const Matrix x = Make(rows, 2 * f, -3.0f, 3.0f), y = Make(rows, f), dy = Make(rows, f);
    const Matrix dx = Make(rows, 2 * f);
    std::vector<float> want_y(static_cast<size_t>(rows * f));
    std::vector<float> want_dx(static_cast<size_t>(rows * 2 * f));
    cpu::GluForward(gate, HostView(x), HostView(&want_y, rows, f));
    cpu::GluBackward(gate, HostView(x), HostView(dy), HostView(&want_dx, rows, 2 * f));
    ASSERT_EQ(Msg(cuda::Glu(context_, gelu, x.view, y.view)), "");
    ASSERT_EQ(Msg(cuda::GluBackward(context_, gelu, x.view, dy.view, dx.view)), "");
    ExpectNear(Read(y.view), want_y, what);
    ExpectNear(Read(dx.view), want_dx, what + " backward");
    ExpectOutsideKept(y, what);
    ExpectOutsideKept(dx, what + " backward");
  }
  {
    const Matrix x = Make(rows, f, -3.0f, 3.0f), y = Make(rows, f), dy = Make(rows, f);
    const Matrix dx = Make(rows, f);
    std::vector<float> want_y(static_cast<size_t>(rows * f)), want_dx = want_y;
    cpu::SquaredReluForward(HostView(x), HostView(&want_y, rows, f));
    cpu::SquaredReluBackward(HostView(x), HostView(dy), HostView(&want_dx, rows, f));
    ASSERT_EQ(Msg(cuda::SquaredRelu(context_, x.view, y.view)), "");
    ASSERT_EQ(Msg(cuda::SquaredReluBackward(context_, x.view, dy.view, dx.view)), "");
    ExpectNear(Read(y.view), want_y, "squared relu");
    ExpectNear(Read(dx.view), want_dx, "squared relu backward");
    ExpectOutsideKept(y, "squared relu");
    ExpectOutsideKept(dx, "squared relu backward");
  }
}

TEST_P(CudaOpsTypedTest, RopeMatchesCpu) {
  // 2 sequences of 64 local tokens on CP rank 1 of 2 (positions 32-95 of 128, exec/positions.h),
  // 4 query and 2 key/value heads of 16 columns; forward, then the inverse on new values; a view
  // of 3 rows is no whole number of 2-token sequences.
  const int64_t local = 64, rows = 2 * local, heads = 4, kv_heads = 2, d = 16;
  const int64_t cols = (heads + 2 * kv_heads) * d;
  std::vector<int64_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[r] = RowPosition(r, local, 2, 1);
  for (const bool inverse : {false, true}) {
    const Matrix qkv = Make(rows, cols);
    std::vector<float> want = qkv.host;
    cpu::Rope(cpu::RopeShape{heads, kv_heads, d}, positions.data(), inverse,
              HostView(&want, rows, cols));
    ASSERT_EQ(Msg(cuda::Rope(context_, heads, kv_heads, d, local, 2, 1, inverse, qkv.view)), "");
    ExpectNear(Read(qkv.view), want, inverse ? "rope backward" : "rope");
    ExpectOutsideKept(qkv, "rope");
  }
  const Matrix odd = Make(3, cols);
  EXPECT_NE(Msg(cuda::Rope(context_, heads, kv_heads, d, 2, 1, 0, false, odd.view)), "");
}

TEST_P(CudaOpsTypedTest, GroupedQueryAttentionMatchesCpu) {
  // Full causal attention, and within a sliding window of 5 tokens of the 16, each with and
  // without a soft cap of 1 on the scores (which bends scores of this size), and with dropout
  // (its masks placed at sequence 3 and head 2 on): the CPU kernels' masks, regenerated.
  const cpu::AttentionShape full{2, 16, 4, 2, 8};
  const int64_t rows = full.sequences * full.seq_len;
  const int64_t qkv_cols = (full.heads + 2 * full.kv_heads) * full.head_dim;
  const int64_t out_cols = full.heads * full.head_dim;
  const Matrix qkv = Make(rows, qkv_cols, -1.5f, 1.5f), out = Make(rows, out_cols);
  const Matrix dout = Make(rows, out_cols), dqkv = Make(rows, qkv_cols);
  EXPECT_NE(Msg(cuda::Attention(context_, full.sequences, full.seq_len, full.heads, full.kv_heads,
                                full.head_dim, 0, 0.0, {}, qkv.view, out.view)),
            "")
      << "runs without its workspace";
  ASSERT_EQ(Msg(cuda::Reserve(
                context_, cuda::AttentionWorkspaceBytes(full.sequences, full.seq_len, full.heads))),
            "");
  EXPECT_NE(Msg(cuda::Attention(context_, full.sequences, full.seq_len, full.heads, full.kv_heads,
                                full.head_dim, 0, -1.0, {}, qkv.view, out.view)),
            "")
      << "a negative soft cap";
  EXPECT_NE(Msg(cuda::Attention(context_, full.sequences, full.seq_len, full.heads, full.kv_heads,
                                full.head_dim, 0, 0.0, {.rate = 1.0}, qkv.view, out.view)),
            "")
      << "a dropout rate of 1";
  for (const auto& [window, softcap, rate] : {std::tuple<int64_t, double, double>{0, 0.0, 0.0},
                                              {5, 0.0, 0.0},
                                              {0, 1.0, 0.0},
                                              {5, 1.0, 0.0},
                                              {0, 0.0, 0.25},
                                              {5, 1.0, 0.25}}) {
    cpu::AttentionShape s = full;
    s.window = window;
    s.softcap = softcap;
    s.dropout = {rate, AttentionDropoutStream(7, 1), 3, 2};
    std::vector<float> want_out(static_cast<size_t>(rows * out_cols));
    std::vector<float> want_dqkv(static_cast<size_t>(rows * qkv_cols));
    cpu::AttentionForward(s, HostView(qkv), HostView(&want_out, rows, out_cols));
    cpu::AttentionBackward(s, HostView(qkv), HostView(dout), HostView(&want_dqkv, rows, qkv_cols));
    ASSERT_EQ(Msg(cuda::Attention(context_, s.sequences, s.seq_len, s.heads, s.kv_heads, s.head_dim,
                                  s.window, s.softcap, s.dropout, qkv.view, out.view)),
              "");
    ASSERT_EQ(Msg(cuda::AttentionBackward(context_, s.sequences, s.seq_len, s.heads, s.kv_heads,
                                          s.head_dim, s.window, s.softcap, s.dropout, qkv.view,
                                          dout.view, dqkv.view)),
              "");
    const std::string what = "attention, window " + std::to_string(window) + ", soft cap " +
                             std::to_string(softcap) + ", dropout " + std::to_string(rate);
    ExpectNear(Read(out.view), want_out, what);
    ExpectNear(Read(dqkv.view), want_dqkv, what + ", backward");
    ExpectOutsideKept(out, "attention");
    ExpectOutsideKept(dqkv, "attention backward");
  }
}

// Compute: c = a b, then the comm stream (after c): d = c + c and an emulated transfer, then
// compute (after d): e = gelu(d); timing events 2 and 3 around it all. Eager, then captured and
// replayed twice: the replays give the eager result and record the timing events.
TEST_P(CudaOpsTypedTest, CapturedGraphReplaysTheEagerRun) {
  const double transfer_bytes = 8 << 20;
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(transfer_bytes))), "");
  ASSERT_EQ(Msg(cuda::CreateEvents(context_, 4)), "");
  const Matrix a = Make(64, 48), b = Make(48, 80), c = Make(64, 80), d = Make(64, 80);
  const Matrix e = Make(64, 80);
  auto run = [&] {
    std::string error;
    auto step = [&](const Status& result) {
      if (error.empty() && !result.ok()) error = result.message();
    };
    cuda::UseStream(context_, StreamKind::kCompute);
    step(cuda::RecordEvent(context_, 2, true));
    step(cuda::Gemm(context_, a.view, false, b.view, false, c.view, false));
    step(cuda::RecordEvent(context_, 0, false));
    cuda::UseStream(context_, StreamKind::kComm);
    step(cuda::WaitEvent(context_, 0));
    step(cuda::Add(context_, c.view, c.view, d.view));
    step(cuda::EmulateCollective(context_, 4, transfer_bytes, 20.0));
    step(cuda::RecordEvent(context_, 1, false));
    cuda::UseStream(context_, StreamKind::kCompute);
    step(cuda::WaitEvent(context_, 1));
    step(cuda::Gelu(context_, d.view, e.view));
    step(cuda::RecordEvent(context_, 3, true));
    return error;
  };
  auto clear = [&] {
    for (const Matrix* m : {&c, &d, &e}) EXPECT_EQ(Msg(cuda::Zero(context_, m->view)), "");
  };

  ASSERT_EQ(run(), "");
  ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");
  const std::vector<float> want = Read(e.view);
  EXPECT_NE(want, std::vector<float>(want.size(), 0.0f));
  clear();
  ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");

  ASSERT_EQ(Msg(cuda::BeginCapture(context_)), "");
  ASSERT_EQ(run(), "");
  EXPECT_NE(Msg(cuda::Synchronize(context_)), "") << "synchronizes while capturing";
  ASSERT_EQ(Msg(cuda::EndCapture(context_)), "");
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    clear();
    ASSERT_EQ(Msg(cuda::LaunchGraph(context_)), "");
    ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");
    EXPECT_EQ(Read(e.view), want);
    float ms = -1.0f;
    ASSERT_EQ(Msg(cuda::ElapsedMs(context_, 2, 3, &ms)), "");
    EXPECT_GE(ms, 0.0f);
  }
}

// Random operands: uniform in [-1, 1), not constant, reproducible from the seed.
TEST_P(CudaOpsTypedTest, FillsRandomValues) {
  const Matrix m = Make(256, 384);
  ASSERT_EQ(Msg(cuda::FillRandom(context_, m.view, 7)), "");
  ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");
  const std::vector<float> v = Read(m.view);
  double sum = 0, squares = 0;
  for (float x : v) {
    EXPECT_GE(x, -1.0f);
    EXPECT_LE(x, 1.0f);
    sum += x;
    squares += double{x} * x;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(squares / n, 1.0 / 3.0, 0.02);  // the variance of U(-1, 1)
  ASSERT_EQ(Msg(cuda::FillRandom(context_, m.view, 7)), "");
  EXPECT_EQ(Read(m.view), v);
}

// fp32 device memory holding `values` whatever the context's type (freed with `owned`).
float* Floats(cuda::Context* c, DType type, std::vector<void*>& owned,
              const std::vector<float>& values) {
  void* data = nullptr;
  const size_t per = sizeof(float) / cuda::DTypeBytes(type);
  EXPECT_EQ(Msg(cuda::Alloc(c, values.size() * per, &data)), "");
  owned.push_back(data);
  const int64_t n = static_cast<int64_t>(values.size());
  EXPECT_EQ(Msg(cuda::Upload(c, DView{data, 1, n, n}, values.data(), true)), "");
  return static_cast<float*>(data);
}

std::vector<float> ReadFloats(cuda::Context* c, const float* data, int64_t n) {
  std::vector<float> host(static_cast<size_t>(n));
  EXPECT_EQ(Msg(cuda::Download(c, DView{const_cast<float*>(data), 1, n, n}, host.data(), true)),
            "");
  return host;
}

// A whole step's bucket arithmetic (exec/step_device.h): fp32 sums of a view of the element type,
// the fp32 values written back in it, and Adam against the host step's double-precision update.
TEST_P(CudaOpsTypedTest, StepBucketArithmetic) {
  const int64_t rows = 9, cols = 37, n = rows * cols;
  const Matrix grad = Make(rows, cols);
  std::vector<float> start(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) start[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  float* flat = Floats(context_, Type(), allocations_, start);
  ASSERT_EQ(Msg(cuda::AccumulateF32(context_, grad.view, flat, 0.5f)), "");
  std::vector<float> want = start;
  for (int64_t i = 0; i < n; ++i) want[i] += 0.5f * grad.host[i];
  const std::vector<float> summed = ReadFloats(context_, flat, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(summed[i], want[i], 1e-6) << "sum " << i;

  const Matrix weights = Make(rows, cols);
  ASSERT_EQ(Msg(cuda::StoreF32(context_, flat, weights.view)), "");
  ExpectNear(Read(weights.view), summed, "store");
  ExpectOutsideKept(weights, "store");

  // Two Adam steps from zero moments, as exec/step_buckets.cc's host optimizer runs them.
  std::vector<float> master = summed, m(static_cast<size_t>(n), 0.0f), v = m;
  float* d_master = Floats(context_, Type(), allocations_, master);
  float* d_m = Floats(context_, Type(), allocations_, m);
  float* d_v = Floats(context_, Type(), allocations_, v);
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-4;
  for (int step = 1; step <= 2; ++step) {
    const double c1 = 1 - std::pow(beta1, step), c2 = 1 - std::pow(beta2, step);
    cuda::AdamStep a;
    a.lr = static_cast<float>(lr), a.beta1 = static_cast<float>(beta1);
    a.beta2 = static_cast<float>(beta2), a.eps = static_cast<float>(eps);
    a.c1 = static_cast<float>(c1), a.c2 = static_cast<float>(c2);
    ASSERT_EQ(Msg(cuda::AdamF32(context_, d_master, d_m, d_v, flat, n, a)), "");
    for (int64_t i = 0; i < n; ++i) {
      const double g = summed[i];
      const double mi = beta1 * m[i] + (1 - beta1) * g, vi = beta2 * v[i] + (1 - beta2) * g * g;
      m[i] = static_cast<float>(mi), v[i] = static_cast<float>(vi);
      master[i] = static_cast<float>(master[i] - lr * (mi / c1) / (std::sqrt(vi / c2) + eps));
    }
  }
  const std::vector<float> updated = ReadFloats(context_, d_master, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(updated[i], master[i], 1e-6) << "adam " << i;
}

// Token ids are fp32 whatever the element type: ids above 256, which bf16 and fp16 do not hold
// exactly, look up their own rows.
TEST_P(CudaOpsTypedTest, EmbeddingLooksUpIdsTheElementTypeCannotHold) {
  const int64_t vocab = 1100, hidden = 16;
  const Matrix table = Make(vocab, hidden);
  const std::vector<float> ids = {1000, 1001, 3, 777, 1099};
  const int64_t tokens = static_cast<int64_t>(ids.size());
  float* d_ids = Floats(context_, Type(), allocations_, ids);
  const Matrix out = Make(tokens, hidden);
  ASSERT_EQ(Msg(cuda::Embedding(context_, DView{d_ids, tokens, 1, 1}, 0, table.view, out.view)),
            "");
  const std::vector<float> got = Read(out.view);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < hidden; ++c)
      ASSERT_EQ(got[t * hidden + c], table.host[static_cast<int64_t>(ids[t]) * hidden + c])
          << "token " << t << " column " << c;
}

// The loss's two kernels against the CPU's, without and with a soft cap on the logits (Gemma 2's
// 30, taken as the kernels read them): part 1 of two of a vocabulary of 40 padded to 48, so 16 of
// its 24 columns are valid; labels in and out of the part, one on its padding.
TEST_P(CudaOpsTypedTest, CrossEntropyMatchesCpuWithAndWithoutASoftCap) {
  const int64_t tokens = 6, cols = 24, vocab = 40, begin = 24;
  const Matrix logits = Make(tokens, cols, -60.0f, 60.0f), dlogits = Make(tokens, cols);
  const std::vector<float> labels = {24, 30, 3, 39, 45, 25};
  const DView labels_view{Floats(context_, Type(), allocations_, labels), tokens, 1, 1};
  float* d_stats = Floats(context_, Type(), allocations_, std::vector<float>(tokens * 3, 0.0f));
  const DView stats_view{d_stats, tokens, 3, 3};
  for (const double cap : {0.0, 30.0}) {
    const std::string what = "cross-entropy, cap " + std::to_string(cap);
    std::vector<float> want_stats(static_cast<size_t>(tokens * 3));
    std::vector<float> want_grad(static_cast<size_t>(tokens * cols));
    cpu::CrossEntropyStats(HostView(logits), HostView(labels, tokens, 1), begin, vocab, 1,
                           HostView(&want_stats, tokens, 3), cap);
    ASSERT_EQ(Msg(cuda::CrossEntropyStats(context_, logits.view, labels_view, begin, vocab, 1, cap,
                                          stats_view)),
              "");
    ExpectNear(ReadFloats(context_, d_stats, tokens * 3), want_stats, what);
    // The backward takes these stats as if summed over the parts (part 0's column is 0).
    cpu::CrossEntropyBackward(HostView(logits), HostView(labels, tokens, 1),
                              HostView(want_stats, tokens, 3), begin, vocab, tokens,
                              HostView(&want_grad, tokens, cols), cap);
    ASSERT_EQ(Msg(cuda::CrossEntropyBackward(context_, logits.view, labels_view, stats_view, begin,
                                             vocab, tokens, cap, dlogits.view)),
              "");
    ExpectNear(Read(dlogits.view), want_grad, what + ", backward");
    ExpectOutsideKept(dlogits, what + ", backward");
  }
  EXPECT_NE(Msg(cuda::CrossEntropyStats(context_, logits.view, labels_view, begin, vocab, 1, -1,
                                        stats_view)),
            "")
      << "a negative cap";
}

#else  // DOMINO_HAVE_CUDA

TEST(CudaOpsGpu, NeedsCuda) { GTEST_SKIP() << "this build of domino has no CUDA support"; }

#endif  // DOMINO_HAVE_CUDA

}  // namespace
}  // namespace domino::exec
