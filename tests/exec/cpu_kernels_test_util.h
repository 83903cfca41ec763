// Helpers the CPU kernels' tests share (cpu_kernels_test.cc, cpu_attention_test.cc,
// cpu_ends_test.cc): dense and padded matrices, comparisons and central differences.
#ifndef DOMINO_TESTS_EXEC_CPU_KERNELS_TEST_UTIL_H_
#define DOMINO_TESTS_EXEC_CPU_KERNELS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "exec/cpu_kernels.h"

namespace domino::exec::cpu::test_util {

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

inline Dense Random(int64_t rows, int64_t cols, uint32_t seed, float scale = 1) {
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

inline void ExpectNear(const Dense& got, const Vec& want, double tolerance, const char* what) {
  ASSERT_EQ(got.v.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.v[i], want[i], tolerance * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

inline void ExpectNear(const Dense& got, const Dense& want, double tolerance, const char* what) {
  ExpectNear(got, want.ToDouble(), tolerance, what);
}

// Central differences of a double-precision loss, element by element.
inline Vec NumericGradient(Vec x, const std::function<double(const Vec&)>& loss) {
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

inline double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace domino::exec::cpu::test_util

#endif  // DOMINO_TESTS_EXEC_CPU_KERNELS_TEST_UTIL_H_
