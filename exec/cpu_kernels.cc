#include "exec/cpu_kernels.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/positions.h"

namespace domino::exec::cpu {
namespace {

// Eigen views of Mat / ConstMat: row-major with the row pitch as the outer stride, so Eigen reads
// and writes exactly the rows x cols window and never the padding between rows.
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
using MapM = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

MapC View(ConstMat m) { return MapC(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.stride)); }
MapM View(Mat m) { return MapM(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.stride)); }

// A rows x cols block of a view starting at (row, col), keeping the view's stride.
MapC Block(ConstMat m, int64_t row, int64_t col, int64_t rows, int64_t cols) {
  return MapC(m.data + row * m.stride + col, rows, cols, Eigen::OuterStride<>(m.stride));
}
MapM Block(Mat m, int64_t row, int64_t col, int64_t rows, int64_t cols) {
  return MapM(m.data + row * m.stride + col, rows, cols, Eigen::OuterStride<>(m.stride));
}

// For the asserts (unused when NDEBUG drops them).
[[maybe_unused]] bool SameShape(ConstMat a, ConstMat b) {
  return a.rows == b.rows && a.cols == b.cols;
}

template <typename Lhs, typename Rhs>
void Multiply(const Lhs& a, const Rhs& b, MapM c, bool accumulate) {
  assert(a.cols() == b.rows() && c.rows() == a.rows() && c.cols() == b.cols());
  if (accumulate)
    c.noalias() += a * b;
  else
    c.noalias() = a * b;
}

// Per-row statistics of a norm: y = (x - mean) * inv * gamma, with mean = 0 for RMSNorm, so that
// inv = 1 / sqrt(mean((x - mean)^2) + eps) covers both kinds. Sums run in double.
struct RowStats {
  double mean = 0, inv = 0;
};

RowStats Stats(NormKind kind, const float* x, int64_t n, float eps) {
  RowStats s;
  if (kind == NormKind::kLayerNorm) {
    for (int64_t j = 0; j < n; ++j) s.mean += x[j];
    s.mean /= static_cast<double>(n);
  }
  double var = 0;
  for (int64_t j = 0; j < n; ++j) var += (x[j] - s.mean) * (x[j] - s.mean);
  var /= static_cast<double>(n);
  s.inv = 1.0 / std::sqrt(var + eps);
  return s;
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Column offsets of the blocks of one query head h in a qkv row.
struct HeadColumns {
  int64_t q, k, v;
};

HeadColumns Columns(const AttentionShape& s, int64_t h) {
  const int64_t kv_head = h / (s.heads / s.kv_heads);
  return {h * s.head_dim, (s.heads + kv_head) * s.head_dim,
          (s.heads + s.kv_heads + kv_head) * s.head_dim};
}

void CheckAttentionShape(const AttentionShape& s, ConstMat qkv) {
  assert(s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  assert(qkv.rows == s.sequences * s.seq_len);
  assert(qkv.cols == (s.heads + 2 * s.kv_heads) * s.head_dim);
}

// P = softmax(scale Q K^T) of query head h of sequence `seq`, causal: P(t, u) for FirstKey(t) <=
// u <= t, and 0 elsewhere. seq_len x seq_len, in fp32; each row is shifted by its maximum before
// exp. With a soft cap the scaled scores are capped first, and `cap_grad`, when given, receives
// the cap's derivative 1 - tanh^2 of each one.
RowMajor Probabilities(const AttentionShape& s, ConstMat qkv, int64_t seq, int64_t h,
                       RowMajor* cap_grad = nullptr) {
  const HeadColumns col = Columns(s, h);
  const int64_t row0 = seq * s.seq_len, n = s.seq_len;
  float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  RowMajor p(n, n);
  p.noalias() =
      Block(qkv, row0, col.q, n, s.head_dim) * Block(qkv, row0, col.k, n, s.head_dim).transpose();
  if (s.softcap > 0) {
    // Scale, then cap: the exponentials below take the capped scores as they are.
    p *= scale;
    scale = 1.0f;
    const float cap = static_cast<float>(s.softcap);
    if (cap_grad != nullptr) cap_grad->resize(n, n);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t u = 0; u < n; ++u) {
        const float th = std::tanh(p(t, u) / cap);
        p(t, u) = cap * th;
        if (cap_grad != nullptr) (*cap_grad)(t, u) = 1.0f - th * th;
      }
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    const int64_t lo = FirstKey(t, s.window), keys = t + 1 - lo;
    const float peak = p.row(t).segment(lo, keys).maxCoeff();
    float sum = 0;
    for (int64_t u = lo; u <= t; ++u) {
      p(t, u) = std::exp((p(t, u) - peak) * scale);
      sum += p(t, u);
    }
    p.row(t).segment(lo, keys) /= sum;
    p.row(t).head(lo).setZero();
    p.row(t).tail(n - t - 1).setZero();
  }
  return p;
}

}  // namespace

void Gemm(ConstMat a, bool transpose_a, ConstMat b, bool transpose_b, Mat c, bool accumulate) {
  const MapC ma = View(a), mb = View(b);
  const MapM mc = View(c);
  if (!transpose_a && !transpose_b) Multiply(ma, mb, mc, accumulate);
  if (!transpose_a && transpose_b) Multiply(ma, mb.transpose(), mc, accumulate);
  if (transpose_a && !transpose_b) Multiply(ma.transpose(), mb, mc, accumulate);
  if (transpose_a && transpose_b) Multiply(ma.transpose(), mb.transpose(), mc, accumulate);
}

void Add(ConstMat a, ConstMat b, Mat c, const BranchDropout& dropout) {
  assert(SameShape(a, b) && SameShape(a, c));
  // Element by element, so an output aliasing an input reads each element before writing it.
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* ar = a.data + r * a.stride;
    const float* br = b.data + r * b.stride;
    float* cr = c.data + r * c.stride;
    for (int64_t j = 0; j < c.cols; ++j) cr[j] = ar[j] + br[j] * dropout.Scale(r, j);
  }
}

void Dropout(ConstMat a, const BranchDropout& dropout, Mat c) {
  assert(SameShape(a, c));
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* ar = a.data + r * a.stride;
    float* cr = c.data + r * c.stride;
    for (int64_t j = 0; j < c.cols; ++j) cr[j] = ar[j] * dropout.Scale(r, j);
  }
}

void NormForward(NormKind kind, ConstMat x, const float* gamma, float eps, Mat y) {
  assert(SameShape(x, y));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    float* yr = y.data + r * y.stride;
    const RowStats s = Stats(kind, xr, x.cols, eps);
    for (int64_t j = 0; j < x.cols; ++j)
      yr[j] = static_cast<float>((xr[j] - s.mean) * s.inv) * gamma[j];
  }
}

// Per row, with xhat = (x - mean) * inv, g = dy * gamma and n = x.cols:
//   LayerNorm: dx = inv * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = inv * (g - xhat * mean(g * xhat))
//   dgamma += dy * xhat
// (The mean(g) term is the gradient through the mean, which RMSNorm does not subtract.)
void NormBackward(NormKind kind, ConstMat x, const float* gamma, float eps, ConstMat dy, Mat dx,
                  bool accumulate_dx, float* dgamma) {
  assert(SameShape(x, dy) && SameShape(x, dx));
  const int64_t n = x.cols;
  std::vector<double> xhat(n), g(n);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    const RowStats s = Stats(kind, xr, n, eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - s.mean) * s.inv;
      g[j] = static_cast<double>(dyr[j]) * gamma[j];
      mean_g += g[j];
      mean_gx += g[j] * xhat[j];
      dgamma[j] += static_cast<float>(dyr[j] * xhat[j]);
    }
    mean_g = kind == NormKind::kLayerNorm ? mean_g / static_cast<double>(n) : 0.0;
    mean_gx /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const float d = static_cast<float>(s.inv * (g[j] - mean_g - xhat[j] * mean_gx));
      dxr[j] = accumulate_dx ? dxr[j] + d : d;
    }
  }
}

namespace {

float Gelu(float v) { return 0.5f * v * (1.0f + std::tanh(kGeluC * (v + kGeluA * v * v * v))); }

// With u = c (x + a x^3) and t = tanh(u):
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
float GeluSlope(float v) {
  const float t = std::tanh(kGeluC * (v + kGeluA * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * v * v);
}

}  // namespace

void GeluForward(ConstMat x, Mat y) {
  assert(SameShape(x, y));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    float* yr = y.data + r * y.stride;
    for (int64_t j = 0; j < x.cols; ++j) yr[j] = Gelu(xr[j]);
  }
}

void GeluBackward(ConstMat x, ConstMat dy, Mat dx) {
  assert(SameShape(x, dy) && SameShape(x, dx));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    for (int64_t j = 0; j < x.cols; ++j) dxr[j] = dyr[j] * GeluSlope(xr[j]);
  }
}

void SquaredReluForward(ConstMat x, Mat y) {
  assert(SameShape(x, y));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    float* yr = y.data + r * y.stride;
    for (int64_t j = 0; j < x.cols; ++j) {
      const float v = std::max(xr[j], 0.0f);
      yr[j] = v * v;
    }
  }
}

void SquaredReluBackward(ConstMat x, ConstMat dy, Mat dx) {
  assert(SameShape(x, dy) && SameShape(x, dx));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    for (int64_t j = 0; j < x.cols; ++j) dxr[j] = dyr[j] * 2.0f * std::max(xr[j], 0.0f);
  }
}

namespace {

// The gate's activation and its slope. SiLU, with s = sigmoid(g): g s, and s (1 + g (1 - s)).
float GateValue(Gate gate, float g) { return gate == Gate::kSilu ? g * Sigmoid(g) : Gelu(g); }
float GateSlope(Gate gate, float g) {
  if (gate == Gate::kGelu) return GeluSlope(g);
  const float s = Sigmoid(g);
  return s * (1.0f + g * (1.0f - s));
}

}  // namespace

void GluForward(Gate gate, ConstMat x, Mat y) {
  const int64_t f = y.cols;
  assert(x.rows == y.rows && x.cols == 2 * f);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    float* yr = y.data + r * y.stride;
    for (int64_t j = 0; j < f; ++j) yr[j] = GateValue(gate, xr[j]) * xr[f + j];
  }
}

// dgate = dy * up * act'(gate),  dup = dy * act(gate).
void GluBackward(Gate gate, ConstMat x, ConstMat dy, Mat dx) {
  const int64_t f = dy.cols;
  assert(x.rows == dy.rows && SameShape(x, dx) && x.cols == 2 * f);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* dyr = dy.data + r * dy.stride;
    float* dxr = dx.data + r * dx.stride;
    for (int64_t j = 0; j < f; ++j) {
      const float g = xr[j], up = xr[f + j];
      dxr[j] = dyr[j] * up * GateSlope(gate, g);
      dxr[f + j] = dyr[j] * GateValue(gate, g);
    }
  }
}

namespace {

// Scales each entry of `m` (a query x key block of sequence `seq` and head h) by its dropout mask.
void Drop(const AttentionShape& s, int64_t seq, int64_t h, RowMajor& m) {
  if (s.dropout.rate <= 0) return;
  for (int64_t t = 0; t < m.rows(); ++t)
    for (int64_t u = 0; u < m.cols(); ++u) m(t, u) *= s.dropout.Scale(seq, h, t, u);
}

}  // namespace

// Per (sequence, query head): O = drop(P) V, with P from Probabilities and V of the mapped kv
// head.
void AttentionForward(const AttentionShape& s, ConstMat qkv, Mat out) {
  CheckAttentionShape(s, qkv);
  assert(out.rows == qkv.rows && out.cols == s.heads * s.head_dim);
  const int64_t n = s.seq_len, d = s.head_dim;
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    for (int64_t h = 0; h < s.heads; ++h) {
      RowMajor p = Probabilities(s, qkv, seq, h);
      Drop(s, seq, h, p);
      Block(out, seq * n, h * d, n, d).noalias() = p * Block(qkv, seq * n, Columns(s, h).v, n, d);
    }
  }
}

// Per (sequence, query head), with O = P V, P = softmax(S), S = scale Q K^T (causal):
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = scale dS K,
//   dK = scale dS^T Q   (* elementwise; masked entries have P = 0, hence dS = 0). With a soft
// cap, P = softmax(cap tanh(S / cap)) and dS takes the factor 1 - tanh(S / cap)^2 as well. With
// dropout (mask M, kept entries scaled), O = (P * M) V: dV = (P * M)^T dO and dP = (dO V^T) * M.
// The query heads of a group share one key/value head and add their dK and dV into it, so dqkv
// is cleared first and every block accumulates.
void AttentionBackward(const AttentionShape& s, ConstMat qkv, ConstMat dout, Mat dqkv) {
  CheckAttentionShape(s, qkv);
  assert(SameShape(qkv, dqkv));
  assert(dout.rows == qkv.rows && dout.cols == s.heads * s.head_dim);
  const int64_t n = s.seq_len, d = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  View(dqkv).setZero();
  for (int64_t seq = 0; seq < s.sequences; ++seq) {
    const int64_t row0 = seq * n;
    for (int64_t h = 0; h < s.heads; ++h) {
      const HeadColumns col = Columns(s, h);
      RowMajor cap_grad;
      const RowMajor p = Probabilities(s, qkv, seq, h, &cap_grad);
      const MapC d_out = Block(dout, row0, h * d, n, d);
      RowMajor dropped = p;
      Drop(s, seq, h, dropped);
      Block(dqkv, row0, col.v, n, d).noalias() += dropped.transpose() * d_out;
      RowMajor ds(n, n);
      ds.noalias() = d_out * Block(qkv, row0, col.v, n, d).transpose();  // dP of the dropped P
      Drop(s, seq, h, ds);                                               // dP
      const Eigen::VectorXf row_dot = p.cwiseProduct(ds).rowwise().sum();
      ds = p.cwiseProduct(ds.colwise() - row_dot);
      if (s.softcap > 0) ds = ds.cwiseProduct(cap_grad);
      Block(dqkv, row0, col.q, n, d).noalias() += scale * (ds * Block(qkv, row0, col.k, n, d));
      Block(dqkv, row0, col.k, n, d).noalias() +=
          scale * (ds.transpose() * Block(qkv, row0, col.q, n, d));
    }
  }
}

void Rope(const RopeShape& s, const int64_t* positions, bool inverse, Mat qkv) {
  const int64_t d = s.head_dim, half = d / 2;
  assert(d % 2 == 0 && qkv.cols == (s.heads + 2 * s.kv_heads) * d);
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t c = 0; c < half; ++c)
    inv_freq[c] = std::pow(kRopeBase, -2.0 * static_cast<double>(c) / static_cast<double>(d));
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t r = 0; r < qkv.rows; ++r) {
    float* row = qkv.data + r * qkv.stride;
    for (int64_t head = 0; head < s.heads + s.kv_heads; ++head) {  // Q's heads, then K's
      float* x = row + head * d;
      for (int64_t c = 0; c < half; ++c) {
        const double angle = static_cast<double>(positions[r]) * inv_freq[c];
        const double cos = std::cos(angle), sin = sign * std::sin(angle);
        const double x1 = x[c], x2 = x[c + half];
        x[c] = static_cast<float>(x1 * cos - x2 * sin);
        x[c + half] = static_cast<float>(x2 * cos + x1 * sin);
      }
    }
  }
}

namespace {

// The table row of a token, or -1 when another part of the vocabulary holds it.
int64_t LocalRow(float token, int64_t vocab_begin, int64_t rows) {
  const int64_t row = static_cast<int64_t>(token) - vocab_begin;
  return row >= 0 && row < rows ? row : -1;
}

}  // namespace

void EmbeddingForward(ConstMat tokens, int64_t vocab_begin, ConstMat table, Mat out) {
  assert(tokens.cols == 1 && tokens.rows == out.rows && table.cols == out.cols);
  for (int64_t j = 0; j < out.rows; ++j) {
    float* yr = out.data + j * out.stride;
    const int64_t row = LocalRow(tokens.data[j * tokens.stride], vocab_begin, table.rows);
    if (row < 0) {
      std::fill(yr, yr + out.cols, 0.0f);
      continue;
    }
    const float* src = table.data + row * table.stride;
    std::copy(src, src + out.cols, yr);
  }
}

void EmbeddingBackward(ConstMat tokens, int64_t vocab_begin, ConstMat dy, Mat dtable) {
  assert(tokens.cols == 1 && tokens.rows == dy.rows && dtable.cols == dy.cols);
  for (int64_t j = 0; j < dy.rows; ++j) {
    const int64_t row = LocalRow(tokens.data[j * tokens.stride], vocab_begin, dtable.rows);
    if (row < 0) continue;
    const float* g = dy.data + j * dy.stride;
    float* d = dtable.data + row * dtable.stride;
    for (int64_t c = 0; c < dy.cols; ++c) d[c] += g[c];
  }
}

void CrossEntropyStats(ConstMat logits, ConstMat labels, int64_t vocab_begin, int64_t vocab,
                       int part, Mat stats, double softcap) {
  const int parts = static_cast<int>(stats.cols) - 1;
  assert(labels.cols == 1 && labels.rows == logits.rows && stats.rows == logits.rows);
  assert(part >= 0 && part < parts);
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  for (int64_t j = 0; j < logits.rows; ++j) {
    const float* z = logits.data + j * logits.stride;
    float* out = stats.data + j * stats.stride;
    std::fill(out, out + stats.cols, 0.0f);
    if (valid == 0) {
      out[part] = std::numeric_limits<float>::lowest();
    } else {
      double peak = SoftCapped(z[0], softcap);
      for (int64_t c = 1; c < valid; ++c) peak = std::max(peak, SoftCapped(z[c], softcap));
      double sum = 0;
      for (int64_t c = 0; c < valid; ++c) sum += std::exp(SoftCapped(z[c], softcap) - peak);
      out[part] = static_cast<float>(peak + std::log(sum));
    }
    const int64_t label = LocalRow(labels.data[j * labels.stride], vocab_begin, valid);
    if (label >= 0) out[parts] = static_cast<float>(SoftCapped(z[label], softcap));
  }
}

double LogSumExp(ConstMat stats, int64_t row) {
  const float* s = stats.data + row * stats.stride;
  const int64_t parts = stats.cols - 1;
  const double peak = *std::max_element(s, s + parts);
  double sum = 0;
  for (int64_t p = 0; p < parts; ++p) sum += std::exp(s[p] - peak);
  return peak + std::log(sum);
}

double MeanCrossEntropy(ConstMat stats) {
  double total = 0;
  for (int64_t j = 0; j < stats.rows; ++j)
    total += LogSumExp(stats, j) - stats.data[j * stats.stride + stats.cols - 1];
  return stats.rows > 0 ? total / static_cast<double>(stats.rows) : 0.0;
}

void CrossEntropyBackward(ConstMat logits, ConstMat labels, ConstMat stats, int64_t vocab_begin,
                          int64_t vocab, int64_t tokens, Mat dlogits, double softcap) {
  assert(SameShape(logits, dlogits) && labels.rows == logits.rows && stats.rows == logits.rows);
  const int64_t valid = std::clamp<int64_t>(vocab - vocab_begin, 0, logits.cols);
  const double scale = 1.0 / static_cast<double>(tokens);
  for (int64_t j = 0; j < logits.rows; ++j) {
    const float* z = logits.data + j * logits.stride;
    float* d = dlogits.data + j * dlogits.stride;
    const double lse = LogSumExp(stats, j);
    const int64_t label = LocalRow(labels.data[j * labels.stride], vocab_begin, valid);
    for (int64_t c = 0; c < valid; ++c) {
      const double capped = SoftCapped(z[c], softcap);
      double g = std::exp(capped - lse) * scale - (c == label ? scale : 0.0);
      // d(cap tanh(z / cap)) / dz = 1 - tanh^2 = 1 - (capped / cap)^2.
      if (softcap > 0) g *= 1 - (capped / softcap) * (capped / softcap);
      d[c] = static_cast<float>(g);
    }
    std::fill(d + valid, d + logits.cols, 0.0f);
  }
}

}  // namespace domino::exec::cpu
