#include "exec/cpu_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "tests/exec/cpu_kernels_test_util.h"

// The GEMM, norm and activation kernels by hand, against references and finite differences, and
// every kernel on strided views (the attention's: cpu_attention_test.cc; the model's ends':
// cpu_ends_test.cc).
namespace domino::exec::cpu {
namespace {

using test_util::Dense;
using test_util::Dot;
using test_util::ExpectNear;
using test_util::NumericGradient;
using test_util::Padded;
using test_util::Random;
using test_util::Vec;

// Double-precision references: the definitions the kernels must meet.

Vec NormReference(NormKind kind, const Vec& x, int64_t cols, const Vec& gamma, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const double* xr = &x[r * cols];
    double mean = 0, var = 0;
    if (kind == NormKind::kLayerNorm) {
      for (int64_t j = 0; j < cols; ++j) mean += xr[j];
      mean /= cols;
    }
    for (int64_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= cols;
    for (int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = (xr[j] - mean) / std::sqrt(var + eps) * gamma[j];
  }
  return y;
}

double GeluReference(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// A gated linear unit: act(gate) * up, act SiLU or GeLU.
Vec GluReference(Gate act, const Vec& x, int64_t rows, int64_t f) {
  Vec y(rows * f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < f; ++j) {
      const double gate = x[r * 2 * f + j], up = x[r * 2 * f + f + j];
      const double a = act == Gate::kSilu ? gate / (1 + std::exp(-gate)) : GeluReference(gate);
      y[r * f + j] = a * up;
    }
  }
  return y;
}

// --- GEMM and Add -------------------------------------------------------------------------------

TEST(CpuKernelsTest, GemmByHand) {
  Dense a(2, 3), b(3, 2), c(2, 2);
  a.v = {1, 2, 3, 4, 5, 6};
  b.v = {7, 8, 9, 10, 11, 12};
  Gemm(a.cmat(), false, b.cmat(), false, c.mat(), false);
  // [1 2 3; 4 5 6] [7 8; 9 10; 11 12] = [58 64; 139 154]
  EXPECT_EQ(c.v, (std::vector<float>{58, 64, 139, 154}));
  Gemm(a.cmat(), false, b.cmat(), false, c.mat(), true);
  EXPECT_EQ(c.v, (std::vector<float>{116, 128, 278, 308}));
}

TEST(CpuKernelsTest, GemmTransposesAndAccumulatesOnStridedViews) {
  // op(a) is 4x3 and op(b) 3x5; a, b and c are all windows of wider, sentinel-filled buffers.
  constexpr int64_t m = 4, k = 3, n = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Dense a = ta ? Random(k, m, 1) : Random(m, k, 1);
      const Dense b = tb ? Random(n, k, 2) : Random(k, n, 2);
      const Dense start = Random(m, n, 3);
      Vec want(m * n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t p = 0; p < k; ++p)
            want[i * n + j] +=
                double{ta ? a.at(p, i) : a.at(i, p)} * (tb ? b.at(j, p) : b.at(p, j));
        }
      }
      const Padded pa(a, 1), pb(b, 3);
      Padded pc(m, n);
      Gemm(pa.cmat(), ta, pb.cmat(), tb, pc.mat(), false);
      SCOPED_TRACE(testing::Message() << "transpose_a " << ta << " transpose_b " << tb);
      ExpectNear(pc.Contents(), want, 1e-6, "c = op(a) op(b)");
      EXPECT_EQ(pc.Clobbered(), 0);

      Padded acc(start);
      Gemm(pa.cmat(), ta, pb.cmat(), tb, acc.mat(), true);
      for (int64_t i = 0; i < m * n; ++i) want[i] += start.v[i];
      ExpectNear(acc.Contents(), want, 1e-6, "c += op(a) op(b)");
      EXPECT_EQ(acc.Clobbered(), 0);
      EXPECT_EQ(pa.Clobbered() + pb.Clobbered(), 0);
    }
  }
}

TEST(CpuKernelsTest, AddOnStridedViewsAndInPlace) {
  const Dense a = Random(3, 4, 4), b = Random(3, 4, 5);
  Padded pa(a), pb(b, 0), pc(3, 4, 5);
  Add(pa.cmat(), pb.cmat(), pc.mat());
  Vec want(12);
  for (int i = 0; i < 12; ++i) want[i] = double{a.v[i]} + b.v[i];
  ExpectNear(pc.Contents(), want, 0, "a + b");
  EXPECT_EQ(pc.Clobbered(), 0);
  Add(pa.cmat(), pb.cmat(), pa.mat());  // in place: a += b
  ExpectNear(pa.Contents(), want, 0, "a += b");
  EXPECT_EQ(pa.Clobbered(), 0);
}

// A residual add after its branch's dropout (exec/dropout.h): each element of the branch is
// dropped or scaled by 1 / (1 - rate) by a mask that hangs on its token and column, so a view of
// the rows from a later row on draws the whole view's masks there, and the dropout's backward
// draws them again. About a tenth of 64 x 64 elements drop at rate 0.1.
TEST(CpuKernelsTest, AddAfterTheBranchsDropout) {
  const int64_t n = 64;
  const Dense x = Random(n, n, 11), b = Random(n, n, 12);
  BranchDropout d{.rate = 0.1, .stream = BranchDropoutStream(7, 3, 2), .first_token = 128};
  Dense sum(n, n), dropped(n, n);
  Add(x.cmat(), b.cmat(), sum.mat(), d);
  Dropout(b.cmat(), d, dropped.mat());
  int zeros = 0;
  for (int64_t i = 0; i < n * n; ++i) {
    const float kept = dropped.v[i];
    EXPECT_TRUE(kept == 0.0f || std::fabs(kept - b.v[i] / 0.9f) <= 1e-6f * std::fabs(b.v[i])) << i;
    zeros += kept == 0.0f;
    EXPECT_FLOAT_EQ(sum.v[i], x.v[i] + kept) << i;
  }
  EXPECT_GT(zeros, 0.07 * n * n);
  EXPECT_LT(zeros, 0.13 * n * n);
  // Rows 40 on as a view of their own: the same masks.
  BranchDropout later = d;
  later.whole_row = 40;
  Dense part(n - 40, n);
  Dropout(ConstMat(b.v.data() + 40 * n, n - 40, n, n), later, part.mat());
  for (int64_t i = 0; i < (n - 40) * n; ++i) EXPECT_EQ(part.v[i], dropped.v[40 * n + i]) << i;
  // Rate 0: a plain add.
  Add(x.cmat(), b.cmat(), sum.mat(), BranchDropout{});
  for (int64_t i = 0; i < n * n; ++i) EXPECT_EQ(sum.v[i], x.v[i] + b.v[i]);
}

// --- Norms --------------------------------------------------------------------------------------

TEST(CpuKernelsTest, NormsByHand) {
  Dense x(1, 4), y(1, 4);
  x.v = {1, 2, 3, 4};
  const std::vector<float> ones(4, 1.0f), gamma = {1, 2, -1, 0.5f};
  // LayerNorm: mean 2.5, biased variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25.
  NormForward(NormKind::kLayerNorm, x.cmat(), ones.data(), 0, y.mat());
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.v[j], (x.v[j] - 2.5) / std::sqrt(1.25), 1e-6);
  NormForward(NormKind::kLayerNorm, x.cmat(), gamma.data(), 0, y.mat());
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(y.v[j], (x.v[j] - 2.5) / std::sqrt(1.25) * gamma[j], 1e-6);
  // RMSNorm: mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5.
  NormForward(NormKind::kRmsNorm, x.cmat(), ones.data(), 0, y.mat());
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.v[j], x.v[j] / std::sqrt(7.5), 1e-6);
  // eps is added under the square root: 0.5 turns 7.5 into 8.
  NormForward(NormKind::kRmsNorm, x.cmat(), gamma.data(), 0.5f, y.mat());
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.v[j], x.v[j] / std::sqrt(8.0) * gamma[j], 1e-6);
}

TEST(CpuKernelsTest, NormBackwardMatchesFiniteDifferences) {
  constexpr int64_t rows = 3, cols = 8;
  constexpr float eps = 1e-5f;
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    SCOPED_TRACE(kind == NormKind::kLayerNorm ? "LayerNorm" : "RMSNorm");
    const Dense x = Random(rows, cols, 6, 2), w = Random(rows, cols, 7);
    Dense gamma = Random(1, cols, 8, 0.5f);
    for (float& g : gamma.v) g += 1.0f;
    const Vec xd = x.ToDouble(), wd = w.ToDouble(), gd = gamma.ToDouble();

    Dense y(rows, cols);
    NormForward(kind, x.cmat(), gamma.v.data(), eps, y.mat());
    ExpectNear(y, NormReference(kind, xd, cols, gd, eps), 1e-5, "y");

    // L = sum(y * w), so dy = w.
    const Vec want_dx = NumericGradient(
        xd, [&](const Vec& v) { return Dot(NormReference(kind, v, cols, gd, eps), wd); });
    const Vec want_dgamma = NumericGradient(
        gd, [&](const Vec& v) { return Dot(NormReference(kind, xd, cols, v, eps), wd); });
    Dense dx(rows, cols, 0.5f), dgamma(1, cols, 0.25f);
    NormBackward(kind, x.cmat(), gamma.v.data(), eps, w.cmat(), dx.mat(), false, dgamma.v.data());
    ExpectNear(dx, want_dx, 1e-5, "dx");
    Vec want_accumulated_dgamma = want_dgamma;
    for (double& g : want_accumulated_dgamma) g += 0.25;  // dgamma always accumulates
    ExpectNear(dgamma, want_accumulated_dgamma, 1e-5, "dgamma");

    // accumulate_dx adds to what dx holds; the same call accumulates dgamma a second time.
    Dense dx2(rows, cols, 1.0f);
    NormBackward(kind, x.cmat(), gamma.v.data(), eps, w.cmat(), dx2.mat(), true, dgamma.v.data());
    Vec want_dx2 = want_dx;
    for (double& g : want_dx2) g += 1.0;
    ExpectNear(dx2, want_dx2, 1e-5, "dx accumulated");
    for (double& g : want_accumulated_dgamma) g += g - 0.25;
    ExpectNear(dgamma, want_accumulated_dgamma, 1e-5, "dgamma accumulated twice");
  }
}

// --- Activations --------------------------------------------------------------------------------

TEST(CpuKernelsTest, ActivationsByHand) {
  Dense x(1, 3), y(1, 3);
  x.v = {0, 1, -1};
  GeluForward(x.cmat(), y.mat());
  EXPECT_EQ(y.v[0], 0.0f);
  EXPECT_NEAR(y.v[1], 0.841192, 1e-6);
  EXPECT_NEAR(y.v[2], 0.841192 - 1, 1e-6);  // GeLU(-x) = GeLU(x) - x
  Dense glu(1, 4), out(1, 2);
  glu.v = {1, 0, 2, 5};  // [gate | up] = [1, 0 | 2, 5]
  GluForward(Gate::kSilu, glu.cmat(), out.mat());
  EXPECT_NEAR(out.v[0], 1.462117, 1e-6);  // silu(1) * 2 = 2 / (1 + e^-1)
  EXPECT_EQ(out.v[1], 0.0f);              // silu(0) = 0
  GluForward(Gate::kGelu, glu.cmat(), out.mat());
  EXPECT_NEAR(out.v[0], 2 * 0.841192, 1e-6);  // GeLU(1) * 2
  EXPECT_EQ(out.v[1], 0.0f);                  // GeLU(0) = 0
}

TEST(CpuKernelsTest, GeluBackwardMatchesFiniteDifferences) {
  const Dense x = Random(2, 6, 9, 3), w = Random(2, 6, 10);
  const Vec wd = w.ToDouble();
  auto reference = [](Vec v) {
    for (double& e : v) e = GeluReference(e);
    return v;
  };
  Dense y(2, 6), dx(2, 6);
  GeluForward(x.cmat(), y.mat());
  ExpectNear(y, reference(x.ToDouble()), 1e-6, "y");
  GeluBackward(x.cmat(), w.cmat(), dx.mat());
  ExpectNear(dx, NumericGradient(x.ToDouble(), [&](const Vec& v) { return Dot(reference(v), wd); }),
             1e-5, "dx");
}

TEST(CpuKernelsTest, SquaredReluByHandAndAgainstFiniteDifferences) {
  Dense x(1, 4), y(1, 4), dy(1, 4), dx(1, 4);
  x.v = {-1, 0, 0.5, 3};
  dy.v = {1, 1, 2, -1};
  SquaredReluForward(x.cmat(), y.mat());
  EXPECT_EQ(y.v, (std::vector<float>{0, 0, 0.25f, 9}));
  SquaredReluBackward(x.cmat(), dy.cmat(), dx.mat());
  EXPECT_EQ(dx.v, (std::vector<float>{0, 0, 2, -6}));  // dy 2 max(x, 0)
  // Away from the kink at 0, against central differences.
  Dense r = Random(2, 6, 13, 3), w = Random(2, 6, 14);
  for (float& e : r.v) e += e >= 0 ? 0.1f : -0.1f;
  const Vec wd = w.ToDouble();
  auto reference = [](Vec v) {
    for (double& e : v) e = e > 0 ? e * e : 0;
    return v;
  };
  Dense ry(2, 6), rdx(2, 6);
  SquaredReluForward(r.cmat(), ry.mat());
  ExpectNear(ry, reference(r.ToDouble()), 1e-6, "y");
  SquaredReluBackward(r.cmat(), w.cmat(), rdx.mat());
  ExpectNear(rdx,
             NumericGradient(r.ToDouble(), [&](const Vec& v) { return Dot(reference(v), wd); }),
             1e-5, "dx");
}

TEST(CpuKernelsTest, GatedUnitsBackwardMatchesFiniteDifferences) {
  const Dense x = Random(2, 8, 11, 3), w = Random(2, 4, 12);
  const Vec wd = w.ToDouble();
  for (const Gate gate : {Gate::kSilu, Gate::kGelu}) {
    SCOPED_TRACE(gate == Gate::kSilu ? "swiglu" : "geglu");
    Dense y(2, 4), dx(2, 8);
    GluForward(gate, x.cmat(), y.mat());
    ExpectNear(y, GluReference(gate, x.ToDouble(), 2, 4), 1e-6, "y");
    GluBackward(gate, x.cmat(), w.cmat(), dx.mat());
    ExpectNear(dx,
               NumericGradient(x.ToDouble(),
                               [&](const Vec& v) { return Dot(GluReference(gate, v, 2, 4), wd); }),
               1e-5, "[dgate | dup]");
  }
}

// --- Every kernel on strided views --------------------------------------------------------------

// Runs each kernel on contiguous matrices and on the same values as windows of wider buffers: the
// results agree and nothing outside the windows changes.
TEST(CpuKernelsTest, EveryKernelWorksOnStridedViews) {
  auto check = [](const Dense& contiguous, const Padded& padded, const char* what) {
    ExpectNear(padded.Contents(), contiguous, 1e-6, what);
    EXPECT_EQ(padded.Clobbered(), 0) << what;
  };
  const Dense x = Random(4, 6, 18), dy = Random(4, 6, 19), gamma = Random(1, 6, 20);
  const Padded px(x), pdy(dy, 4);
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    Dense y(4, 6), dx(4, 6, 1.0f), dgamma(1, 6);
    Padded py(4, 6, 1), pdx(Dense(4, 6, 1.0f), 3);
    Dense pdgamma(1, 6);
    NormForward(kind, x.cmat(), gamma.v.data(), 1e-5f, y.mat());
    NormForward(kind, px.cmat(), gamma.v.data(), 1e-5f, py.mat());
    check(y, py, "norm forward");
    NormBackward(kind, x.cmat(), gamma.v.data(), 1e-5f, dy.cmat(), dx.mat(), true, dgamma.v.data());
    NormBackward(kind, px.cmat(), gamma.v.data(), 1e-5f, pdy.cmat(), pdx.mat(), true,
                 pdgamma.v.data());
    check(dx, pdx, "norm backward");
    ExpectNear(pdgamma, dgamma, 1e-6, "dgamma");
  }
  {
    Dense y(4, 6), dx(4, 6);
    Padded py(4, 6, 0), pdx(4, 6, 1);
    GeluForward(x.cmat(), y.mat());
    GeluForward(px.cmat(), py.mat());
    check(y, py, "gelu forward");
    GeluBackward(x.cmat(), dy.cmat(), dx.mat());
    GeluBackward(px.cmat(), pdy.cmat(), pdx.mat());
    check(dx, pdx, "gelu backward");
  }
  {
    const Dense dy3 = Random(4, 3, 21);
    const Padded pdy3(dy3, 1);
    Dense y(4, 3), dx(4, 6);
    Padded py(4, 3, 2), pdx(4, 6, 5);
    GluForward(Gate::kSilu, x.cmat(), y.mat());
    GluForward(Gate::kSilu, px.cmat(), py.mat());
    check(y, py, "swiglu forward");
    GluBackward(Gate::kSilu, x.cmat(), dy3.cmat(), dx.mat());
    GluBackward(Gate::kSilu, px.cmat(), pdy3.cmat(), pdx.mat());
    check(dx, pdx, "swiglu backward");
  }
  {
    const AttentionShape s{2, 4, 4, 2, 2};
    const Dense qkv = Random(8, 16, 22), dout = Random(8, 8, 23);
    const Padded pqkv(qkv, 3), pdout(dout, 1);
    Dense out(8, 8), dqkv(8, 16);
    Padded pout(8, 8, 2), pdqkv(8, 16, 4);
    AttentionForward(s, qkv.cmat(), out.mat());
    AttentionForward(s, pqkv.cmat(), pout.mat());
    check(out, pout, "attention forward");
    AttentionBackward(s, qkv.cmat(), dout.cmat(), dqkv.mat());
    AttentionBackward(s, pqkv.cmat(), pdout.cmat(), pdqkv.mat());
    check(dqkv, pdqkv, "attention backward");
  }
  EXPECT_EQ(px.Clobbered() + pdy.Clobbered(), 0);
}

}  // namespace
}  // namespace domino::exec::cpu
