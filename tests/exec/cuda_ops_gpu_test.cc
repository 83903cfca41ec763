// Needs a GPU: labelled `gpu`, skips cleanly without one. Checks the ops of exec/cuda_ops.h against
// the fp32 CPU kernels (exec/cpu_kernels.h) in every element type, on views that are column blocks
// of wider matrices, and the events, graph capture, emulated collective and measurements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu_kernels.h"
#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "exec/positions.h"

namespace domino::exec {
namespace {

#if DOMINO_HAVE_CUDA

using cuda::DType;
using cuda::DView;
using cuda::StreamKind;

// A Status as text: empty when ok, so that a failed call's message shows in the assertion.
std::string Msg(const Status& status) { return status.ok() ? "" : status.message(); }

constexpr float kEps = 1e-5f;
constexpr int64_t kBlockColumn = 3;  // where a test block starts in its wider matrix
constexpr int64_t kExtraColumns = 7;

// A device block and what the device holds, read back: `host` is the block (contiguous), `wide`
// the whole wider matrix, so a test can check that an op wrote nothing outside its block.
struct Matrix {
  DView view, whole;
  std::vector<float> host, wide;
};

cpu::ConstMat HostView(const std::vector<float>& data, int64_t rows, int64_t cols) {
  return cpu::ConstMat(data.data(), rows, cols, cols);
}
cpu::Mat HostView(std::vector<float>* data, int64_t rows, int64_t cols) {
  return cpu::Mat{data->data(), rows, cols, cols};
}
cpu::ConstMat HostView(const Matrix& m) { return HostView(m.host, m.view.rows, m.view.cols); }

// One context per test on device 0, fp32 unless a typed test says otherwise.
class CudaOpsTest : public ::testing::Test {
 protected:
  virtual DType Type() const { return DType::kF32; }

  void SetUp() override {
    Result<std::vector<CudaDevice>> devices = ListCudaDevices();
    if (!devices.ok()) GTEST_SKIP() << devices.message();
    ASSERT_EQ(Msg(cuda::Create(0, Type(), &context_)), "");
  }
  void TearDown() override {
    for (void* p : allocations_) cuda::Free(p);
    cuda::Destroy(context_);
  }

  std::vector<float> Read(DView v) {
    std::vector<float> host(static_cast<size_t>(v.rows * v.cols));
    EXPECT_EQ(Msg(cuda::Download(context_, v, host.data())), "");
    return host;
  }

  // A rows x cols block of uniform values in [lo, hi) at column kBlockColumn of a matrix
  // kExtraColumns wider, so that kernels see a row pitch longer than the row and an offset start.
  // The CPU reference gets the values as the element type rounded them.
  Matrix Make(int64_t rows, int64_t cols, float lo = -1.0f, float hi = 1.0f) {
    Matrix m;
    const int64_t wide = cols + kExtraColumns;
    void* data = nullptr;
    EXPECT_EQ(Msg(cuda::Alloc(context_, static_cast<size_t>(rows * wide), &data)), "");
    allocations_.push_back(data);
    m.whole = DView{data, rows, wide, wide};
    m.view =
        DView{static_cast<char*>(data) + kBlockColumn * cuda::DTypeBytes(Type()), rows, cols, wide};
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<float> values(static_cast<size_t>(rows * wide));
    for (float& v : values) v = uniform(random_);
    EXPECT_EQ(Msg(cuda::Upload(context_, m.whole, values.data())), "");
    m.wide = Read(m.whole);
    m.host = Read(m.view);
    return m;
  }

  double Tolerance() const { return Type() == DType::kF32 ? 1e-4 : 2e-2; }

  // Every element within Tolerance() times the largest expected magnitude.
  void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    float peak = 1e-3f;
    for (float w : want) peak = std::max(peak, std::abs(w));
    const double bound = Tolerance() * peak;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::abs(static_cast<double>(got[i]) - want[i]) <= bound) continue;
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
                      << " within " << bound;
    }
    EXPECT_EQ(bad, 0) << what << " (" << DTypeName(Type()) << ")";
  }

  // The columns of m's wider matrix outside its block hold what they held when it was made.
  void ExpectOutsideKept(const Matrix& m, const std::string& what) {
    const std::vector<float> now = Read(m.whole);
    int changed = 0;
    for (int64_t r = 0; r < m.whole.rows; ++r) {
      for (int64_t j = 0; j < m.whole.cols; ++j) {
        if (j >= kBlockColumn && j < kBlockColumn + m.view.cols) continue;
        const size_t i = static_cast<size_t>(r * m.whole.cols + j);
        if (now[i] != m.wide[i]) ++changed;
      }
    }
    EXPECT_EQ(changed, 0) << what << " wrote outside its view";
  }

  cuda::Context* context_ = nullptr;
  std::vector<void*> allocations_;
  std::mt19937 random_{7};
};

class CudaOpsTypedTest : public CudaOpsTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType Type() const override { return GetParam(); }
};

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

TEST_P(CudaOpsTypedTest, NormsMatchCpu) {
  // More rows than the backward kernel has blocks, so blocks sum several rows into dgamma.
  const int64_t rows = 600, cols = 96;
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rmsnorm" : "layernorm");
    const cpu::NormKind kind = rms ? cpu::NormKind::kRmsNorm : cpu::NormKind::kLayerNorm;
    const Matrix x = Make(rows, cols, -2.0f, 2.5f), gamma = Make(1, cols, 0.5f, 1.5f);
    const Matrix y = Make(rows, cols), dy = Make(rows, cols), dx = Make(rows, cols);
    const Matrix dgamma = Make(1, cols);
    std::vector<float> want_y(static_cast<size_t>(rows * cols));
    cpu::NormForward(kind, HostView(x), gamma.host.data(), kEps, HostView(&want_y, rows, cols));
    ASSERT_EQ(Msg(cuda::NormForward(context_, rms, x.view, gamma.view.data, kEps, y.view)), "");
    ExpectNear(Read(y.view), want_y, "norm forward");
    ExpectOutsideKept(y, "norm forward");

    const bool accumulate_dx = rms;  // one norm of each way
    std::vector<float> want_dx = dx.host, want_dgamma = dgamma.host;
    cpu::NormBackward(kind, HostView(x), gamma.host.data(), kEps, HostView(dy),
                      HostView(&want_dx, rows, cols), accumulate_dx, want_dgamma.data());
    ASSERT_EQ(Msg(cuda::NormBackward(context_, rms, x.view, gamma.view.data, kEps, dy.view, dx.view,
                                     accumulate_dx, dgamma.view.data)),
              "");
    ExpectNear(Read(dx.view), want_dx, "norm dx");
    ExpectNear(Read(dgamma.view), want_dgamma, "norm dgamma");
    ExpectOutsideKept(dx, "norm dx");
    ExpectOutsideKept(dgamma, "norm dgamma");
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
  {
    const Matrix x = Make(rows, 2 * f, -3.0f, 3.0f), y = Make(rows, f), dy = Make(rows, f);
    const Matrix dx = Make(rows, 2 * f);
    std::vector<float> want_y(static_cast<size_t>(rows * f));
    std::vector<float> want_dx(static_cast<size_t>(rows * 2 * f));
    cpu::SwigluForward(HostView(x), HostView(&want_y, rows, f));
    cpu::SwigluBackward(HostView(x), HostView(dy), HostView(&want_dx, rows, 2 * f));
    ASSERT_EQ(Msg(cuda::Swiglu(context_, x.view, y.view)), "");
    ASSERT_EQ(Msg(cuda::SwigluBackward(context_, x.view, dy.view, dx.view)), "");
    ExpectNear(Read(y.view), want_y, "swiglu");
    ExpectNear(Read(dx.view), want_dx, "swiglu backward");
    ExpectOutsideKept(y, "swiglu");
    ExpectOutsideKept(dx, "swiglu backward");
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
  const cpu::AttentionShape s{2, 16, 4, 2, 8};
  const int64_t rows = s.sequences * s.seq_len;
  const int64_t qkv_cols = (s.heads + 2 * s.kv_heads) * s.head_dim, out_cols = s.heads * s.head_dim;
  const Matrix qkv = Make(rows, qkv_cols, -1.5f, 1.5f), out = Make(rows, out_cols);
  const Matrix dout = Make(rows, out_cols), dqkv = Make(rows, qkv_cols);
  EXPECT_NE(Msg(cuda::Attention(context_, s.sequences, s.seq_len, s.heads, s.kv_heads, s.head_dim,
                                qkv.view, out.view)),
            "")
      << "runs without its workspace";
  ASSERT_EQ(
      Msg(cuda::Reserve(context_, cuda::AttentionWorkspaceBytes(s.sequences, s.seq_len, s.heads))),
      "");

  std::vector<float> want_out(static_cast<size_t>(rows * out_cols));
  std::vector<float> want_dqkv(static_cast<size_t>(rows * qkv_cols));
  cpu::AttentionForward(s, HostView(qkv), HostView(&want_out, rows, out_cols));
  cpu::AttentionBackward(s, HostView(qkv), HostView(dout), HostView(&want_dqkv, rows, qkv_cols));
  ASSERT_EQ(Msg(cuda::Attention(context_, s.sequences, s.seq_len, s.heads, s.kv_heads, s.head_dim,
                                qkv.view, out.view)),
            "");
  ASSERT_EQ(Msg(cuda::AttentionBackward(context_, s.sequences, s.seq_len, s.heads, s.kv_heads,
                                        s.head_dim, qkv.view, dout.view, dqkv.view)),
            "");
  ExpectNear(Read(out.view), want_out, "attention");
  ExpectNear(Read(dqkv.view), want_dqkv, "attention backward");
  ExpectOutsideKept(out, "attention");
  ExpectOutsideKept(dqkv, "attention backward");
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

TEST_P(CudaOpsTypedTest, MeasuresGemmThroughput) {
  double tflops = 0;
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(context_, 1024, 1024, 1024, 2, 3, false, &tflops)), "");
  EXPECT_GT(tflops, 0.0);
  double skinny = 0;  // not square: the operands' shapes follow m, n and k
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(context_, 4096, 64, 256, 1, 3, false, &skinny)), "");
  EXPECT_GT(skinny, 0.0);
  EXPECT_NE(Msg(cuda::MeasureGemmTflops(context_, 0, 8, 8, 1, 1, false, &tflops)), "");
}

// fp8 through cuBLASLt where the GPU has it (compute capability 8.9 or later): a large square
// GEMM runs faster than the 16-bit one; a shape with m off the multiples of 16 is refused.
TEST_F(CudaOpsTest, MeasuresFp8GemmThroughput) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  double fp8 = 0, bf16 = 0;
  // bf16 first, each after 20 warm-up runs: the clocks have ramped up before either is timed.
  cuda::Context* bf16_context = nullptr;
  ASSERT_EQ(Msg(cuda::Create(0, DType::kBf16, &bf16_context)), "");
  ASSERT_EQ(Msg(cuda::MeasureGemmTflops(bf16_context, 4096, 4096, 4096, 20, 10, false, &bf16)), "");
  cuda::Destroy(bf16_context);
  const Status e = cuda::MeasureGemmTflops(context_, 4096, 4096, 4096, 20, 10, true, &fp8);
  if (!e.ok() && e.message().find("compute capability") != std::string::npos)
    GTEST_SKIP() << e.message();
  ASSERT_EQ(Msg(e), "");
  EXPECT_GT(fp8, bf16) << "fp8 " << fp8 << " TFLOP/s, bf16 " << bf16;
  EXPECT_NE(Msg(cuda::MeasureGemmTflops(context_, 1000, 1024, 1024, 1, 1, true, &fp8)), "");
  std::vector<double> soak;
  ASSERT_EQ(Msg(cuda::SoakGemm(context_, 1024, 0.2, 0.1, true, &soak)), "");
  EXPECT_EQ(soak.size(), 2u);
}

// Chains of empty kernels, launched one by one and from a graph: each kernel adds some
// microseconds, far from none and from the 100 a stalled launch path would take.
TEST_F(CudaOpsTest, MeasuresLaunchOverhead) {
  cuda::LaunchOverhead launch;
  ASSERT_EQ(Msg(cuda::MeasureLaunchUs(context_, 500, 3, &launch)), "");
  EXPECT_GT(launch.eager_us, 0.0);
  EXPECT_LT(launch.eager_us, 100.0);
  EXPECT_GT(launch.graph_us, 0.0);
  EXPECT_LT(launch.graph_us, 100.0);
  EXPECT_NE(Msg(cuda::MeasureLaunchUs(context_, 0, 3, &launch)), "");
  // The context stays usable: the capture ended.
  ASSERT_EQ(Msg(cuda::MeasureLaunchUs(context_, 10, 1, &launch)), "");
}

TEST_F(CudaOpsTest, SoakGemmReportsEachWindow) {
  std::vector<double> tflops;
  ASSERT_EQ(Msg(cuda::SoakGemm(context_, 1024, 0.3, 0.1, false, &tflops)), "");
  ASSERT_EQ(tflops.size(), 3u);
  for (double t : tflops) EXPECT_GT(t, 0.0);
  EXPECT_NE(Msg(cuda::SoakGemm(context_, 1024, 0.1, 0.3, false, &tflops)), "") << "window > soak";
}

TEST_F(CudaOpsTest, EventsTimeAGemm) {
  ASSERT_EQ(Msg(cuda::CreateEvents(context_, 2)), "");
  const Matrix a = Make(256, 256), b = Make(256, 256), c = Make(256, 256);
  ASSERT_EQ(Msg(cuda::RecordEvent(context_, 0, true)), "");
  ASSERT_EQ(Msg(cuda::Gemm(context_, a.view, false, b.view, false, c.view, false)), "");
  ASSERT_EQ(Msg(cuda::RecordEvent(context_, 1, true)), "");
  ASSERT_EQ(Msg(cuda::Synchronize(context_)), "");
  float ms = -1.0f;
  ASSERT_EQ(Msg(cuda::ElapsedMs(context_, 0, 1, &ms)), "");
  EXPECT_GE(ms, 0.0f);
  EXPECT_NE(Msg(cuda::RecordEvent(context_, 2, false)), "") << "event 2 does not exist";
}

TEST_F(CudaOpsTest, EmulatedCollectiveLastsItsDurationWhenAlone) {
  const double bytes = 64.0 * (1 << 20);
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  ASSERT_EQ(Msg(cuda::CreateEvents(context_, 2)), "");
  auto time_ms = [&](double hbm_bytes, double micros) {
    float ms = -1.0f;
    EXPECT_EQ(Msg(cuda::RecordEvent(context_, 0, true)), "");
    EXPECT_EQ(Msg(cuda::EmulateCollective(context_, 8, hbm_bytes, micros)), "");
    EXPECT_EQ(Msg(cuda::RecordEvent(context_, 1, true)), "");
    EXPECT_EQ(Msg(cuda::Synchronize(context_)), "");
    EXPECT_EQ(Msg(cuda::ElapsedMs(context_, 0, 1, &ms)), "");
    return ms;
  };
  time_ms(bytes, 200.0);  // warm-up
  std::vector<float> runs;
  for (int i = 0; i < 5; ++i) runs.push_back(time_ms(bytes, 200.0));
  std::sort(runs.begin(), runs.end());
  EXPECT_GE(runs[2], 0.9f * 0.2f);
  EXPECT_LE(runs[2], 1.5f * 0.2f);
  const float spin = time_ms(0.0, 100.0);  // no traffic: waits out the duration
  EXPECT_GE(spin, 0.9f * 0.1f);
  EXPECT_LE(spin, 1.5f * 0.1f);
  EXPECT_EQ(Msg(cuda::EmulateCollective(context_, 8, 0.0, 0.0)), "");
  EXPECT_NE(Msg(cuda::EmulateCollective(context_, 8, 1e16, 10.0)), "") << "absurd traffic";
}

// Each block takes an SM of its own (its shared memory leaves no room for a second), so a
// collective of n CTAs holds n SMs, as NCCL's would; %smid says where each block ran.
TEST_F(CudaOpsTest, EmulatedCollectiveHoldsOneSmPerCta) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  const int sms = (*devices)[0].sms;
  const double bytes = 256.0 * (1 << 20);
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  for (int ctas : {1, 16, 32, std::min(64, sms)}) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, ctas, bytes, 0.0, &probe)), "");
    EXPECT_EQ(probe.distinct_sms, ctas) << ctas << " CTAs";
    std::cout << ctas << " CTAs: " << probe.GBps << " GB/s on " << probe.distinct_sms << " SMs\n";
  }
}

// Its traffic is HBM traffic: a transfer far smaller than L2, repeated, still runs no faster than
// a device-to-device copy (streaming loads and stores, each call elsewhere in a scratch buffer
// far larger than L2), and on every SM it streams at a good part of that.
TEST_F(CudaOpsTest, EmulatedCollectiveTrafficIsHbmTraffic) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  const int sms = (*devices)[0].sms;
  double hbm_GBps = 0;
  ASSERT_EQ(Msg(cuda::MeasureHbmGBps(context_, size_t{1} << 30, 5, &hbm_GBps)), "");
  const double bytes = 16.0 * (1 << 20);  // a third of an H100's or H200's L2
  ASSERT_EQ(Msg(cuda::Reserve(context_, cuda::EmulationWorkspaceBytes(bytes))), "");
  std::vector<double> GBps;
  for (int i = 0; i < 20; ++i) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, sms, bytes * 16, 0.0, &probe)), "");
    GBps.push_back(probe.GBps);
  }
  std::sort(GBps.begin(), GBps.end());
  std::cout << "emulated collective on " << sms << " SMs: " << GBps[GBps.size() / 2]
            << " GB/s; device-to-device copy " << hbm_GBps << " GB/s\n";
  // L2 hits would read 2-3x HBM's rate; a run's write-back absorbed in L2 can lift one a little.
  EXPECT_LE(GBps[GBps.size() / 2], 1.1 * hbm_GBps) << "faster than HBM: L2 hits";
  EXPECT_LE(GBps.back(), 1.3 * hbm_GBps) << "faster than HBM: L2 hits";
  EXPECT_GE(GBps[GBps.size() / 2], 0.5 * hbm_GBps);
  std::vector<double> small;
  for (int i = 0; i < 20; ++i) {
    cuda::EmulationProbe probe;
    ASSERT_EQ(Msg(cuda::ProbeEmulatedCollective(context_, sms, bytes, 0.0, &probe)), "");
    small.push_back(probe.GBps);
  }
  std::sort(small.begin(), small.end());
  EXPECT_LE(small[small.size() / 2], 1.1 * hbm_GBps) << "a small transfer, repeated: L2 hits";
  EXPECT_LE(small.back(), 1.3 * hbm_GBps) << "a small transfer, repeated: L2 hits";
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

TEST_F(CudaOpsTest, MeasuresHbmBandwidth) {
  double GBps = 0;
  ASSERT_EQ(Msg(cuda::MeasureHbmGBps(context_, size_t{64} << 20, 3, &GBps)), "");
  EXPECT_GT(GBps, 0.0);
}

#else  // DOMINO_HAVE_CUDA

TEST(CudaOpsGpu, NeedsCuda) { GTEST_SKIP() << "this build of domino has no CUDA support"; }

#endif  // DOMINO_HAVE_CUDA

}  // namespace
}  // namespace domino::exec
