#include "exec/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace domino::exec::cpu {
namespace {

// A dense row-major matrix owning its data.
struct Dense {
  int64_t rows, cols;
  std::vector<float> v;
  Dense(int64_t r, int64_t c, float fill = 0) : rows(r), cols(c), v(r * c, fill) {}
  float& at(int64_t r, int64_t c) { return v[r * cols + c]; }
  float at(int64_t r, int64_t c) const { return v[r * cols + c]; }
  Mat mat() { return Mat{v.data(), rows, cols, cols}; }
  ConstMat cmat() const { return ConstMat(v.data(), rows, cols, cols); }
};

Dense Random(int64_t rows, int64_t cols, uint32_t seed, float scale = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Dense d(rows, cols);
  for (float& x : d.v) x = u(gen);
  return d;
}

// Checks an analytic gradient against central differences of loss(x) = sum(f(x) * w).
void ExpectGradient(Dense& x, const std::function<double()>& loss, const Dense& grad,
                    double tolerance) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) {
    const float saved = x.v[i];
    const float h = 1e-2f * std::max(1.0f, std::fabs(saved));
    x.v[i] = saved + h;
    double up = loss();
    x.v[i] = saved - h;
    double down = loss();
    x.v[i] = saved;
    double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad.v[i], numeric, tolerance * std::max(1.0, std::fabs(numeric))) << "element " << i;
  }
}

double Dot(const Dense& a, const Dense& b) {
  double s = 0;
  for (size_t i = 0; i < a.v.size(); ++i) s += double{a.v[i]} * b.v[i];
  return s;
}

TEST(CpuKernelsTest, GemmByHand) {
  Dense a(2, 3), b(3, 2);
  a.v = {1, 2, 3, 4, 5, 6};
  b.v = {7, 8, 9, 10, 11, 12};
  Dense c(2, 2);
  Gemm(a.cmat(), false, b.cmat(), false, c.mat(), false);
  EXPECT_EQ(c.v, (std::vector<float>{58, 64, 139, 154}));
  Gemm(a.cmat(), false, b.cmat(), false, c.mat(), true);  // accumulate
  EXPECT_EQ(c.v, (std::vector<float>{116, 128, 278, 308}));
}

TEST(CpuKernelsTest, GemmTransposesOnStridedViews) {
  // a (4x3) and b (3x5) as stored, transposed as asked; c is a 4x5 window of a 6x9 buffer.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Dense a = ta ? Random(3, 4, 1) : Random(4, 3, 1);
      Dense b = tb ? Random(5, 3, 2) : Random(3, 5, 2);
      Dense buffer(6, 9, -7.0f);
      Mat c{buffer.v.data() + 1 * 9 + 2, 4, 5, 9};
      Gemm(a.cmat(), ta, b.cmat(), tb, c, false);
      for (int64_t i = 0; i < 6; ++i) {
        for (int64_t j = 0; j < 9; ++j) {
          bool inside = i >= 1 && i < 5 && j >= 2 && j < 7;
          if (!inside) {
            EXPECT_EQ(buffer.at(i, j), -7.0f) << "wrote outside the view";
            continue;
          }
          double want = 0;
          for (int64_t k = 0; k < 3; ++k)
            want += double{ta ? a.at(k, i - 1) : a.at(i - 1, k)} * (tb ? b.at(j - 2, k) : b.at(k, j - 2));
          EXPECT_NEAR(buffer.at(i, j), want, 1e-5) << ta << tb;
        }
      }
    }
  }
}

TEST(CpuKernelsTest, NormsByHand) {
  Dense x(1, 4), y(1, 4);
  x.v = {1, 2, 3, 4};
  std::vector<float> gamma(4, 1.0f);
  NormForward(NormKind::kLayerNorm, x.cmat(), gamma.data(), 0, y.mat());
  // mean 2.5, variance 1.25
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.v[j], (x.v[j] - 2.5) / std::sqrt(1.25), 1e-6);
  NormForward(NormKind::kRmsNorm, x.cmat(), gamma.data(), 0, y.mat());
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y.v[j], x.v[j] / std::sqrt(7.5), 1e-6);
}

TEST(CpuKernelsTest, NormBackwardMatchesFiniteDifferences) {
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    Dense x = Random(3, 8, 3), w = Random(3, 8, 4);
    Dense gamma = Random(1, 8, 5, 0.5f);
    for (float& g : gamma.v) g += 1.0f;
    auto loss = [&] {
      Dense y(3, 8);
      NormForward(kind, x.cmat(), gamma.v.data(), 1e-5f, y.mat());
      return Dot(y, w);
    };
    Dense dx(3, 8, 0.5f), dgamma(1, 8, 0.25f);
    NormBackward(kind, x.cmat(), gamma.v.data(), 1e-5f, w.cmat(), dx.mat(), false, dgamma.v.data());
    ExpectGradient(x, loss, dx, 2e-3);
    Dense dgamma_only(1, 8);
    for (int j = 0; j < 8; ++j) dgamma_only.v[j] = dgamma.v[j] - 0.25f;  // accumulated onto 0.25
    ExpectGradient(gamma, loss, dgamma_only, 2e-3);
    // accumulate_dx adds to what is there.
    Dense dx2(3, 8, 1.0f), unused(1, 8);
    NormBackward(kind, x.cmat(), gamma.v.data(), 1e-5f, w.cmat(), dx2.mat(), true, unused.v.data());
    for (size_t i = 0; i < dx.v.size(); ++i) EXPECT_NEAR(dx2.v[i], dx.v[i] + 1.0f, 1e-5);
  }
}

TEST(CpuKernelsTest, ActivationsByHandAndBackward) {
  Dense x(1, 2), y(1, 2);
  x.v = {0, 1};
  GeluForward(x.cmat(), y.mat());
  EXPECT_EQ(y.v[0], 0);
  EXPECT_NEAR(y.v[1], 0.841192, 1e-5);
  Dense glu(1, 2), out(1, 1);
  glu.v = {1, 2};  // silu(1) * 2
  SwigluForward(glu.cmat(), out.mat());
  EXPECT_NEAR(out.v[0], 2 * 0.7310586, 1e-5);

  Dense a = Random(2, 6, 7, 2), w = Random(2, 6, 8);
  Dense da(2, 6);
  GeluBackward(a.cmat(), w.cmat(), da.mat());
  ExpectGradient(a, [&] { Dense y2(2, 6); GeluForward(a.cmat(), y2.mat()); return Dot(y2, w); }, da, 2e-3);
  Dense g = Random(2, 8, 9, 2), wg = Random(2, 4, 10);
  Dense dg(2, 8);
  SwigluBackward(g.cmat(), wg.cmat(), dg.mat());
  ExpectGradient(g, [&] { Dense y2(2, 4); SwigluForward(g.cmat(), y2.mat()); return Dot(y2, wg); }, dg, 2e-3);
}

// Naive double-precision attention, the definition the kernel must meet.
Dense NaiveAttention(const AttentionShape& s, const Dense& qkv) {
  Dense out(s.sequences * s.seq_len, s.heads * s.head_dim);
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t k0 = s.heads * d + (h / group) * d, v0 = (s.heads + s.kv_heads) * d + (h / group) * d;
      for (int64_t t = 0; t < s.seq_len; ++t) {
        std::vector<double> p(t + 1);
        double peak = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += double{qkv.at(seq * s.seq_len + t, h * d + i)} * qkv.at(seq * s.seq_len + u, k0 + i);
          p[u] = dot / std::sqrt(double(d));
          peak = std::max(peak, p[u]);
        }
        for (double& v : p) sum += (v = std::exp(v - peak));
        for (int64_t i = 0; i < d; ++i) {
          double o = 0;
          for (int64_t u = 0; u <= t; ++u) o += p[u] / sum * qkv.at(seq * s.seq_len + u, v0 + i);
          out.at(seq * s.seq_len + t, h * d + i) = static_cast<float>(o);
        }
      }
    }
  }
  return out;
}

TEST(CpuKernelsTest, AttentionMatchesTheDefinitionWithGqa) {
  AttentionShape s{2, 5, 4, 2, 3};
  Dense qkv = Random(10, (4 + 2 * 2) * 3, 11);
  Dense out(10, 12);
  AttentionForward(s, qkv.cmat(), out.mat());
  Dense want = NaiveAttention(s, qkv);
  for (size_t i = 0; i < out.v.size(); ++i) EXPECT_NEAR(out.v[i], want.v[i], 1e-5);
  // The first token of a sequence sees only itself: its output is its own V.
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_NEAR(out.at(5, h * 3 + i), qkv.at(5, (4 + 2) * 3 + (h / 2) * 3 + i), 1e-6);
  // Causality: changing the last token changes no earlier output.
  Dense changed = qkv;
  for (int64_t c = 0; c < changed.cols; ++c) changed.at(4, c) += 1.0f;
  Dense out2(10, 12);
  AttentionForward(s, changed.cmat(), out2.mat());
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < 12; ++c) EXPECT_EQ(out2.at(t, c), out.at(t, c));
}

TEST(CpuKernelsTest, AttentionBackwardMatchesFiniteDifferences) {
  AttentionShape s{2, 3, 2, 1, 4};
  Dense qkv = Random(6, (2 + 2) * 4, 12), w = Random(6, 8, 13);
  Dense dqkv(6, 16, 9.0f);  // overwritten, not accumulated
  AttentionBackward(s, qkv.cmat(), w.cmat(), dqkv.mat());
  ExpectGradient(qkv, [&] { Dense o(6, 8); AttentionForward(s, qkv.cmat(), o.mat()); return Dot(o, w); },
                 dqkv, 3e-3);
}

}  // namespace
}  // namespace domino::exec::cpu
