#include "exec/cpu_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <vector>

namespace domino::exec::cpu {
namespace {

using Vec = std::vector<double>;

// A dense row-major matrix owning its data.
struct Dense {
  int64_t rows, cols;
  std::vector<float> v;
  Dense(int64_t r, int64_t c, float fill = 0) : rows(r), cols(c), v(r * c, fill) {}
  float& at(int64_t r, int64_t c) { return v[r * cols + c]; }
  float at(int64_t r, int64_t c) const { return v[r * cols + c]; }
  Mat mat() { return Mat{v.data(), rows, cols, cols}; }
  ConstMat cmat() const { return ConstMat(v.data(), rows, cols, cols); }
  Vec ToDouble() const { return Vec(v.begin(), v.end()); }
};

Dense Random(int64_t rows, int64_t cols, uint32_t seed, float scale = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Dense d(rows, cols);
  for (float& x : d.v) x = u(gen);
  return d;
}

// A rows x cols view placed at column `left` of a wider buffer (rows + 2 x cols + left + 3), one
// row down, with every other element set to a sentinel, so a kernel writing outside its view is
// caught.
class Padded {
 public:
  static constexpr float kSentinel = -12345.0f;
  Padded(int64_t rows, int64_t cols, int64_t left = 2)
      : rows_(rows),
        cols_(cols),
        left_(left),
        stride_(cols + left + 3),
        buffer_((rows + 2) * stride_, kSentinel) {}
  explicit Padded(const Dense& d, int64_t left = 2) : Padded(d.rows, d.cols, left) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) buffer_[Index(r, c)] = d.at(r, c);
  }
  Mat mat() { return Mat{buffer_.data() + Index(0, 0), rows_, cols_, stride_}; }
  ConstMat cmat() const { return ConstMat(buffer_.data() + Index(0, 0), rows_, cols_, stride_); }
  Dense Contents() const {
    Dense d(rows_, cols_);
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) d.at(r, c) = buffer_[Index(r, c)];
    return d;
  }
  // Number of elements outside the view that no longer hold the sentinel.
  int64_t Clobbered() const {
    int64_t n = 0;
    for (int64_t r = 0; r < rows_ + 2; ++r) {
      for (int64_t c = 0; c < stride_; ++c) {
        const bool inside = r >= 1 && r <= rows_ && c >= left_ && c < left_ + cols_;
        if (!inside && buffer_[r * stride_ + c] != kSentinel) ++n;
      }
    }
    return n;
  }

 private:
  int64_t Index(int64_t r, int64_t c) const { return (r + 1) * stride_ + left_ + c; }
  int64_t rows_, cols_, left_, stride_;
  std::vector<float> buffer_;
};

void ExpectNear(const Dense& got, const Vec& want, double tolerance, const char* what) {
  ASSERT_EQ(got.v.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.v[i], want[i], tolerance * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

void ExpectNear(const Dense& got, const Dense& want, double tolerance, const char* what) {
  ExpectNear(got, want.ToDouble(), tolerance, what);
}

// Central differences of a double-precision loss, element by element.
Vec NumericGradient(Vec x, const std::function<double(const Vec&)>& loss) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i], h = 1e-5 * std::max(1.0, std::fabs(saved));
    x[i] = saved + h;
    const double up = loss(x);
    x[i] = saved - h;
    const double down = loss(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

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

Vec SwigluReference(const Vec& x, int64_t rows, int64_t f) {
  Vec y(rows * f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < f; ++j) {
      const double gate = x[r * 2 * f + j], up = x[r * 2 * f + f + j];
      y[r * f + j] = gate / (1 + std::exp(-gate)) * up;
    }
  }
  return y;
}

Vec AttentionReference(const AttentionShape& s, const Vec& qkv) {
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const int64_t in_cols = (s.heads + 2 * s.kv_heads) * d, out_cols = s.heads * d;
  auto at = [&](int64_t row, int64_t col) { return qkv[row * in_cols + col]; };
  Vec out(s.sequences * s.seq_len * out_cols);
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    const int64_t row0 = seq * s.seq_len;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t k0 = (s.heads + h / group) * d, v0 = (s.heads + s.kv_heads + h / group) * d;
      for (int64_t t = 0; t < s.seq_len; ++t) {
        Vec p(t + 1);
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += at(row0 + t, h * d + i) * at(row0 + u, k0 + i);
          p[u] = std::exp(dot / std::sqrt(static_cast<double>(d)));
          sum += p[u];
        }
        for (int64_t i = 0; i < d; ++i) {
          double o = 0;
          for (int64_t u = 0; u <= t; ++u) o += p[u] / sum * at(row0 + u, v0 + i);
          out[(row0 + t) * out_cols + h * d + i] = o;
        }
      }
    }
  }
  return out;
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
  SwigluForward(glu.cmat(), out.mat());
  EXPECT_NEAR(out.v[0], 1.462117, 1e-6);  // silu(1) * 2 = 2 / (1 + e^-1)
  EXPECT_EQ(out.v[1], 0.0f);              // silu(0) = 0
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

TEST(CpuKernelsTest, SwigluBackwardMatchesFiniteDifferences) {
  const Dense x = Random(2, 8, 11, 3), w = Random(2, 4, 12);
  const Vec wd = w.ToDouble();
  Dense y(2, 4), dx(2, 8);
  SwigluForward(x.cmat(), y.mat());
  ExpectNear(y, SwigluReference(x.ToDouble(), 2, 4), 1e-6, "y");
  SwigluBackward(x.cmat(), w.cmat(), dx.mat());
  ExpectNear(dx,
             NumericGradient(x.ToDouble(),
                             [&](const Vec& v) { return Dot(SwigluReference(v, 2, 4), wd); }),
             1e-5, "[dgate | dup]");
}

// --- Attention ----------------------------------------------------------------------------------

TEST(CpuKernelsTest, AttentionOverOneTokenReturnsTheMappedValueHead) {
  // One key per query: the softmax is 1, so query head h returns V of kv head h / 2.
  const AttentionShape s{3, 1, 4, 2, 3};
  const Dense qkv = Random(3, (4 + 2 * 2) * 3, 13, 4);
  Dense out(3, 12);
  AttentionForward(s, qkv.cmat(), out.mat());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 3; ++i)
        EXPECT_FLOAT_EQ(out.at(r, h * 3 + i), qkv.at(r, (4 + 2) * 3 + (h / 2) * 3 + i));
}

TEST(CpuKernelsTest, AttentionIsCausal) {
  const AttentionShape s{2, 5, 2, 2, 4};
  const Dense qkv = Random(10, 6 * 4, 14);
  Dense out(10, 8);
  AttentionForward(s, qkv.cmat(), out.mat());
  // Change K and V of token 3 of sequence 0: tokens 0..2 of it and all of sequence 1 keep their
  // outputs exactly; tokens 3 and 4 of sequence 0 change.
  Dense changed = qkv;
  for (int64_t c = 2 * 4; c < 6 * 4; ++c) changed.at(3, c) += 1.0f;
  Dense out2(10, 8);
  AttentionForward(s, changed.cmat(), out2.mat());
  for (int64_t r = 0; r < 10; ++r) {
    for (int64_t c = 0; c < 8; ++c) {
      if (r == 3 || r == 4)
        EXPECT_NE(out2.at(r, c), out.at(r, c)) << "row " << r;
      else
        EXPECT_EQ(out2.at(r, c), out.at(r, c)) << "row " << r;
    }
  }
}

TEST(CpuKernelsTest, AttentionWithGroupedQueriesMatchesTheReference) {
  const AttentionShape s{2, 7, 4, 2, 5};
  const Dense qkv = Random(14, (4 + 2 * 2) * 5, 15, 2);
  Dense out(14, 20);
  AttentionForward(s, qkv.cmat(), out.mat());
  ExpectNear(out, AttentionReference(s, qkv.ToDouble()), 1e-5, "out");
}

TEST(CpuKernelsTest, AttentionBackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 3, 2, 1, 4};
  const Dense qkv = Random(6, (2 + 2) * 4, 16, 2), w = Random(6, 8, 17);
  const Vec wd = w.ToDouble();
  Dense dqkv(6, 16, 9.0f);  // overwritten, not accumulated
  AttentionBackward(s, qkv.cmat(), w.cmat(), dqkv.mat());
  ExpectNear(dqkv,
             NumericGradient(qkv.ToDouble(),
                             [&](const Vec& v) { return Dot(AttentionReference(s, v), wd); }),
             1e-5, "dqkv");
}

TEST(CpuKernelsTest, RopeByHand) {
  // One query and one key/value head of 4 columns: pair c = 0 turns by the position in radians,
  // pair c = 1 by position x 10000^(-1/2) = position / 100. Row 0 sits at position 0 (no turn),
  // row 1 at position 1; V's columns are left alone; the inverse turns back. Strided: the view's
  // padding stays untouched.
  const RopeShape s{1, 1, 4};
  Dense qkv(2, 12);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 12; ++c) qkv.at(r, c) = static_cast<float>(1 + c % 4 + 10 * (c / 4));
  Padded padded(qkv);
  const int64_t positions[] = {0, 1};
  Rope(s, positions, /*inverse=*/false, padded.mat());
  Dense out = padded.Contents();
  EXPECT_EQ(padded.Clobbered(), 0);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  for (int64_t c = 0; c < 12; ++c) EXPECT_FLOAT_EQ(out.at(0, c), qkv.at(0, c)) << c;
  for (int64_t head = 0; head < 2; ++head) {  // Q = [1 2 3 4], K = [11 12 13 14]
    const double b = 10.0 * head;
    const int64_t o = 4 * head;
    EXPECT_FLOAT_EQ(out.at(1, o + 0), (b + 1) * c1 - (b + 3) * s1);
    EXPECT_FLOAT_EQ(out.at(1, o + 2), (b + 3) * c1 + (b + 1) * s1);
    EXPECT_FLOAT_EQ(out.at(1, o + 1), (b + 2) * c2 - (b + 4) * s2);
    EXPECT_FLOAT_EQ(out.at(1, o + 3), (b + 4) * c2 + (b + 2) * s2);
  }
  for (int64_t c = 8; c < 12; ++c) EXPECT_FLOAT_EQ(out.at(1, c), qkv.at(1, c)) << c;
  Rope(s, positions, /*inverse=*/true, padded.mat());
  ExpectNear(padded.Contents(), qkv.ToDouble(), 1e-5, "inverse");
}

TEST(CpuKernelsTest, RopeKeepsScoresRelative) {
  // With grouped queries (4 query heads over 2 key heads of 6 columns), a query at position p and
  // a key at position u score the same as the pair shifted to p + 5 and u + 5: RoPE's point.
  const RopeShape s{4, 2, 6};
  const Dense base = Random(2, (4 + 2 * 2) * 6, 18);
  auto score = [&](int64_t p, int64_t u, int64_t head) {
    Dense x = base;
    const int64_t positions[] = {p, u};
    Rope(s, positions, false, x.mat());
    double dot = 0;
    for (int64_t c = 0; c < 6; ++c)
      dot += double{x.at(0, head * 6 + c)} * x.at(1, (4 + head / 2) * 6 + c);
    return dot;
  };
  for (int64_t head = 0; head < 4; ++head) EXPECT_NEAR(score(7, 3, head), score(12, 8, head), 1e-4);
  EXPECT_GT(std::fabs(score(7, 3, 0) - score(7, 4, 0)), 1e-3);  // but not to the distance
}

// --- Embedding and cross-entropy ----------------------------------------------------------------

TEST(CpuKernelsTest, EmbeddingPartsAddUpToTheWholeLookup) {
  // A 6-token vocabulary of 2 features in two parts of 3 rows; tokens 0, 5, 3, 5.
  Dense table(6, 2), tokens(4, 1);
  for (int64_t r = 0; r < 6; ++r) table.at(r, 0) = static_cast<float>(r), table.at(r, 1) = -1;
  tokens.v = {0, 5, 3, 5};
  Dense part0(4, 2, 9), part1(4, 2, 9);
  EmbeddingForward(tokens.cmat(), 0, ConstMat(table.v.data(), 3, 2, 2), part0.mat());
  EmbeddingForward(tokens.cmat(), 3, ConstMat(table.v.data() + 6, 3, 2, 2), part1.mat());
  // Part 0 holds token 0 only; part 1 tokens 5, 3, 5; a token of the other part reads zeros.
  EXPECT_EQ(part0.v, (std::vector<float>{0, -1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(part1.v, (std::vector<float>{0, 0, 5, -1, 3, -1, 5, -1}));
  // Backward: a token seen twice gets both rows of the gradient; other parts' tokens nothing.
  Dense dy(4, 2), dtable(3, 2, 1);
  dy.v = {1, 2, 3, 4, 5, 6, 7, 8};
  EmbeddingBackward(tokens.cmat(), 3, dy.cmat(), dtable.mat());
  EXPECT_EQ(dtable.v, (std::vector<float>{1 + 5, 1 + 6, 1, 1, 1 + 3 + 7, 1 + 4 + 8}));
}

TEST(CpuKernelsTest, CrossEntropyByHand) {
  // Equal logits over a vocabulary of 4: the loss is ln 4 whatever the label, and the gradient
  // (1/4 - onehot) / tokens.
  Dense logits(2, 4, 0.5f), labels(2, 1), stats(2, 2), grad(2, 4);
  labels.v = {1, 3};
  CrossEntropyStats(logits.cmat(), labels.cmat(), 0, 4, 0, stats.mat());
  EXPECT_NEAR(MeanCrossEntropy(stats.cmat()), std::log(4.0), 1e-6);
  CrossEntropyBackward(logits.cmat(), labels.cmat(), stats.cmat(), 0, 4, 2, grad.mat());
  EXPECT_NEAR(grad.at(0, 0), 0.125, 1e-7);
  EXPECT_NEAR(grad.at(0, 1), -0.375, 1e-7);
  EXPECT_NEAR(grad.at(1, 3), -0.375, 1e-7);
  // Padding: with a vocabulary of 3 the fourth column takes no part (ln 3) and gets no gradient.
  CrossEntropyStats(logits.cmat(), labels.cmat(), 0, 3, 0, stats.mat());
  EXPECT_NEAR(LogSumExp(stats.cmat(), 0) - stats.at(0, 1), std::log(3.0), 1e-6);
  CrossEntropyBackward(logits.cmat(), labels.cmat(), stats.cmat(), 0, 3, 2, grad.mat());
  EXPECT_EQ(grad.at(0, 3), 0.0f);
  EXPECT_NEAR(grad.at(0, 0), 0.5 / 3, 1e-7);
}

// The vocab-parallel split: each part's stats summed over parts give the whole vocabulary's loss
// and each part's gradient is its columns of the whole gradient. The parts are uneven (5 + 3
// columns) and the whole vocabulary (7) leaves one padded column in the last part.
TEST(CpuKernelsTest, CrossEntropyOverVocabularyPartsEqualsTheWhole) {
  const Dense logits = Random(3, 8, 21, 4);
  Dense labels(3, 1);
  labels.v = {6, 0, 4};
  Dense whole_stats(3, 2), whole_grad(3, 8);
  CrossEntropyStats(logits.cmat(), labels.cmat(), 0, 7, 0, whole_stats.mat());
  CrossEntropyBackward(logits.cmat(), labels.cmat(), whole_stats.cmat(), 0, 7, 3, whole_grad.mat());
  Dense sum(3, 3), part(3, 3);
  for (int p = 0; p < 2; ++p) {
    const int64_t begin = p == 0 ? 0 : 5, cols = p == 0 ? 5 : 3;
    CrossEntropyStats(ConstMat(logits.v.data() + begin, 3, cols, 8), labels.cmat(), begin, 7, p,
                      part.mat());
    for (size_t i = 0; i < sum.v.size(); ++i) sum.v[i] += part.v[i];
  }
  EXPECT_NEAR(MeanCrossEntropy(sum.cmat()), MeanCrossEntropy(whole_stats.cmat()), 1e-5);
  for (int p = 0; p < 2; ++p) {
    const int64_t begin = p == 0 ? 0 : 5, cols = p == 0 ? 5 : 3;
    Dense grad(3, cols);
    CrossEntropyBackward(ConstMat(logits.v.data() + begin, 3, cols, 8), labels.cmat(), sum.cmat(),
                         begin, 7, 3, grad.mat());
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_NEAR(grad.at(r, c), whole_grad.at(r, begin + c), 1e-6) << r << "," << begin + c;
  }
  // The gradient of the mean loss against central differences of the loss.
  for (int64_t e : {int64_t{0}, int64_t{6}, int64_t{8 + 0}, int64_t{16 + 4}}) {
    auto loss = [&](float delta) {
      Dense moved = logits, stats(3, 2);
      moved.v[e] += delta;
      CrossEntropyStats(moved.cmat(), labels.cmat(), 0, 7, 0, stats.mat());
      return MeanCrossEntropy(stats.cmat());
    };
    const double h = 1e-2, numeric = (loss(h) - loss(-h)) / (2 * h);
    EXPECT_NEAR(whole_grad.v[e], numeric, 1e-4) << "logit " << e;
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
    SwigluForward(x.cmat(), y.mat());
    SwigluForward(px.cmat(), py.mat());
    check(y, py, "swiglu forward");
    SwigluBackward(x.cmat(), dy3.cmat(), dx.mat());
    SwigluBackward(px.cmat(), pdy3.cmat(), pdx.mat());
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
