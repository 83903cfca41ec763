#include "exec/cpu_kernels.h"

#include <Eigen/Dense>

#include <cassert>
#include <cmath>
#include <vector>

namespace domino::exec::cpu {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using MapM = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

MapC View(ConstMat m) { return MapC(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.stride)); }
MapM View(Mat m) { return MapM(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.stride)); }

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void Gemm(ConstMat a, bool transpose_a, ConstMat b, bool transpose_b, Mat c, bool accumulate) {
  MapC A = View(a), B = View(b);
  MapM C = View(c);
  RowMajor product;
  if (!transpose_a && !transpose_b) product.noalias() = A * B;
  if (!transpose_a && transpose_b) product.noalias() = A * B.transpose();
  if (transpose_a && !transpose_b) product.noalias() = A.transpose() * B;
  if (transpose_a && transpose_b) product.noalias() = A.transpose() * B.transpose();
  assert(product.rows() == c.rows && product.cols() == c.cols);
  if (accumulate)
    C += product;
  else
    C = product;
}

void Add(ConstMat a, ConstMat b, Mat c) {
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.cols; ++j)
      c.data[r * c.stride + j] = a.data[r * a.stride + j] + b.data[r * b.stride + j];
}

void NormForward(NormKind kind, ConstMat x, const float* gamma, float eps, Mat y) {
  const int64_t n = x.cols;
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    float* yr = y.data + r * y.stride;
    double mean = 0, var = 0;
    if (kind == NormKind::kLayerNorm) {
      for (int64_t j = 0; j < n; ++j) mean += xr[j];
      mean /= n;
    }
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= n;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<float>(xr[j] - mean) * inv * gamma[j];
  }
}

// With xhat = (x - mean) * inv (mean = 0 for RMSNorm) and g = dy * gamma:
//   LayerNorm: dx = inv * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = inv * (g - xhat * mean(g * xhat))
void NormBackward(NormKind kind, ConstMat x, const float* gamma, float eps, ConstMat dy, Mat dx,
                  bool accumulate_dx, float* dgamma) {
  const int64_t n = x.cols;
  std::vector<double> xhat(n), g(n);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    double mean = 0, var = 0;
    if (kind == NormKind::kLayerNorm) {
      for (int64_t j = 0; j < n; ++j) mean += xr[j];
      mean /= n;
    }
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= n;
    const double inv = 1.0 / std::sqrt(var + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mean) * inv;
      g[j] = double{dyr[j]} * gamma[j];
      mean_g += g[j];
      mean_gx += g[j] * xhat[j];
      dgamma[j] += static_cast<float>(dyr[j] * xhat[j]);
    }
    mean_g /= n;
    mean_gx /= n;
    if (kind == NormKind::kRmsNorm) mean_g = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float d = static_cast<float>(inv * (g[j] - mean_g - xhat[j] * mean_gx));
      dxr[j] = accumulate_dx ? dxr[j] + d : d;
    }
  }
}

void GeluForward(ConstMat x, Mat y) {
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t j = 0; j < x.cols; ++j) {
      const float v = x.data[r * x.stride + j];
      y.data[r * y.stride + j] = 0.5f * v * (1.0f + std::tanh(kGeluC * (v + 0.044715f * v * v * v)));
    }
  }
}

void GeluBackward(ConstMat x, ConstMat dy, Mat dx) {
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t j = 0; j < x.cols; ++j) {
      const float v = x.data[r * x.stride + j];
      const float t = std::tanh(kGeluC * (v + 0.044715f * v * v * v));
      const float grad =
          0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3 * 0.044715f * v * v);
      dx.data[r * dx.stride + j] = dy.data[r * dy.stride + j] * grad;
    }
  }
}

void SwigluForward(ConstMat x, Mat y) {
  const int64_t f = y.cols;
  assert(x.cols == 2 * f);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    for (int64_t j = 0; j < f; ++j) y.data[r * y.stride + j] = xr[j] * Sigmoid(xr[j]) * xr[f + j];
  }
}

void SwigluBackward(ConstMat x, ConstMat dy, Mat dx) {
  const int64_t f = dy.cols;
  assert(x.cols == 2 * f && dx.cols == 2 * f);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    for (int64_t j = 0; j < f; ++j) {
      const float g = xr[j], u = xr[f + j], s = Sigmoid(g);
      dxr[j] = dyr[j] * u * s * (1.0f + g * (1.0f - s));  // d silu(g) / dg = s (1 + g (1 - s))
      dxr[f + j] = dyr[j] * g * s;
    }
  }
}

namespace {

// Softmax probabilities of query head h of sequence `seq`: P[t, u] for u <= t (zero above).
RowMajor Probabilities(const AttentionShape& s, ConstMat qkv, int64_t seq, int64_t h) {
  const int64_t d = s.head_dim, kvh = h / (s.heads / s.kv_heads);
  const int64_t k_col = s.heads * d + kvh * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* base = qkv.data + seq * s.seq_len * qkv.stride;
  MapC q(base + h * d, s.seq_len, d, Eigen::OuterStride<>(qkv.stride));
  MapC k(base + k_col, s.seq_len, d, Eigen::OuterStride<>(qkv.stride));
  RowMajor p = (q * k.transpose()) * scale;
  for (int64_t t = 0; t < s.seq_len; ++t) {
    float peak = p(t, 0);
    for (int64_t u = 1; u <= t; ++u) peak = std::max(peak, p(t, u));
    float sum = 0;
    for (int64_t u = 0; u < s.seq_len; ++u) {
      p(t, u) = u <= t ? std::exp(p(t, u) - peak) : 0.0f;
      sum += p(t, u);
    }
    p.row(t) /= sum;
  }
  return p;
}

}  // namespace

void AttentionForward(const AttentionShape& s, ConstMat qkv, Mat out) {
  assert(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  const int64_t d = s.head_dim;
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    const float* base = qkv.data + seq * s.seq_len * qkv.stride;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kvh = h / (s.heads / s.kv_heads);
      RowMajor p = Probabilities(s, qkv, seq, h);
      MapC v(base + (s.heads + s.kv_heads) * d + kvh * d, s.seq_len, d,
             Eigen::OuterStride<>(qkv.stride));
      MapM o(out.data + seq * s.seq_len * out.stride + h * d, s.seq_len, d,
             Eigen::OuterStride<>(out.stride));
      o.noalias() = p * v;
    }
  }
}

// For one head: O = P V with P = softmax(S), S = scale Q K^T (causal).
//   dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dP * P)); dQ = scale dS K; dK = scale dS^T Q.
// Query heads sharing a key/value head add their dK and dV.
void AttentionBackward(const AttentionShape& s, ConstMat qkv, ConstMat dout, Mat dqkv) {
  assert(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  const int64_t d = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < dqkv.rows; ++r)
    for (int64_t j = 0; j < dqkv.cols; ++j) dqkv.data[r * dqkv.stride + j] = 0.0f;
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    const int64_t row0 = seq * s.seq_len;
    const float* base = qkv.data + row0 * qkv.stride;
    float* dbase = dqkv.data + row0 * dqkv.stride;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kvh = h / (s.heads / s.kv_heads);
      const int64_t k_col = s.heads * d + kvh * d, v_col = (s.heads + s.kv_heads) * d + kvh * d;
      RowMajor p = Probabilities(s, qkv, seq, h);
      MapC q(base + h * d, s.seq_len, d, Eigen::OuterStride<>(qkv.stride));
      MapC k(base + k_col, s.seq_len, d, Eigen::OuterStride<>(qkv.stride));
      MapC v(base + v_col, s.seq_len, d, Eigen::OuterStride<>(qkv.stride));
      MapC dO(dout.data + row0 * dout.stride + h * d, s.seq_len, d,
              Eigen::OuterStride<>(dout.stride));
      MapM dq(dbase + h * d, s.seq_len, d, Eigen::OuterStride<>(dqkv.stride));
      MapM dk(dbase + k_col, s.seq_len, d, Eigen::OuterStride<>(dqkv.stride));
      MapM dv(dbase + v_col, s.seq_len, d, Eigen::OuterStride<>(dqkv.stride));
      dv.noalias() += p.transpose() * dO;
      RowMajor dp = dO * v.transpose();
      RowMajor ds = p.cwiseProduct(dp);
      Eigen::VectorXf row_sums = ds.rowwise().sum();
      ds -= p.cwiseProduct(row_sums.replicate(1, s.seq_len));
      dq.noalias() += scale * ds * k;
      dk.noalias() += scale * ds.transpose() * q;
    }
  }
}

}  // namespace domino::exec::cpu
