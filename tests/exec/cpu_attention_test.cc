#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/cpu_kernels.h"
#include "tests/exec/cpu_kernels_test_util.h"

// The attention and rotary kernels against a double-precision reference, by hand and against
// finite differences, with and without a sliding window and a soft cap on the scores.
namespace domino::exec::cpu {
namespace {

using test_util::Dense;
using test_util::Dot;
using test_util::ExpectNear;
using test_util::NumericGradient;
using test_util::Padded;
using test_util::Random;
using test_util::Vec;

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
        // Keys t - window .. t under a sliding window, else 0 .. t.
        const int64_t first = s.window > 0 ? std::max<int64_t>(0, t - s.window) : 0;
        Vec p(t + 1);
        double sum = 0;
        for (int64_t u = first; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += at(row0 + t, h * d + i) * at(row0 + u, k0 + i);
          double score = dot / std::sqrt(static_cast<double>(d));
          if (s.softcap > 0) score = s.softcap * std::tanh(score / s.softcap);
          p[u] = std::exp(score);
          sum += p[u];
        }
        for (int64_t i = 0; i < d; ++i) {
          double o = 0;
          for (int64_t u = first; u <= t; ++u)
            o += p[u] / sum * s.dropout.Scale(seq, h, t, u) * at(row0 + u, v0 + i);
          out[(row0 + t) * out_cols + h * d + i] = o;
        }
      }
    }
  }
  return out;
}

// The output of `s` at `qkv`.
Dense Forward(const AttentionShape& s, const Dense& qkv) {
  Dense out(qkv.rows, s.heads * s.head_dim);
  AttentionForward(s, qkv.cmat(), out.mat());
  return out;
}

// The backward of `s` at `qkv` against finite differences of the reference forward, for the
// output gradient `w`.
void ExpectBackwardMatchesFiniteDifferences(const AttentionShape& s, const Dense& qkv,
                                            const Dense& w) {
  const Vec wd = w.ToDouble();
  Dense dqkv(qkv.rows, qkv.cols, 9.0f);  // overwritten, not accumulated
  AttentionBackward(s, qkv.cmat(), w.cmat(), dqkv.mat());
  ExpectNear(dqkv,
             NumericGradient(qkv.ToDouble(),
                             [&](const Vec& v) { return Dot(AttentionReference(s, v), wd); }),
             1e-5, "dqkv");
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
  ExpectBackwardMatchesFiniteDifferences(s, qkv, w);
}

// A sliding window of 3 tokens: each query attends to itself and the 3 before it (Megatron-Core's
// window_size (3, 0)), against the reference forward and finite differences backward; K and V of
// token 1 reach queries 1 to 4 only.
TEST(CpuKernelsTest, AttentionWithinASlidingWindow) {
  const AttentionShape s{2, 9, 4, 2, 3, 3};
  const Dense qkv = Random(18, (4 + 2 * 2) * 3, 24, 2);
  Dense out(18, 12);
  AttentionForward(s, qkv.cmat(), out.mat());
  ExpectNear(out, AttentionReference(s, qkv.ToDouble()), 1e-5, "out");
  Dense changed = qkv, out2(18, 12);
  for (int64_t c = 4 * 3; c < 8 * 3; ++c) changed.at(1, c) += 1.0f;
  AttentionForward(s, changed.cmat(), out2.mat());
  for (int64_t r = 0; r < 18; ++r) {
    for (int64_t c = 0; c < 12; ++c) {
      if (r >= 1 && r <= 4)
        EXPECT_NE(out2.at(r, c), out.at(r, c)) << "row " << r;
      else
        EXPECT_EQ(out2.at(r, c), out.at(r, c)) << "row " << r;
    }
  }
  // The window is no window from seq_len - 1 tokens up.
  AttentionShape wide = s, full = s;
  wide.window = 8;
  full.window = 0;
  const Dense out_full = Forward(full, qkv);
  EXPECT_EQ(Forward(wide, qkv).v, out_full.v);
  EXPECT_NE(out.v, out_full.v);

  const AttentionShape small{1, 5, 2, 1, 2, 2};
  const Dense x = Random(5, (2 + 2) * 2, 25, 2), w = Random(5, 4, 26);
  ExpectBackwardMatchesFiniteDifferences(small, x, w);
}

// A soft cap on the scaled scores (Gemma 2's attn_logit_softcapping) low enough to bend them:
// against the reference forward (by hand for one pair of tokens) and finite differences backward,
// with and without a window; a cap far above every score changes nothing measurable.
TEST(CpuKernelsTest, AttentionOfSoftCappedScores) {
  // One head of width 1, two tokens: query 1 scores q k0 = 2 and q k1 = 4 (scale 1); capped at 1
  // they become tanh(2) and tanh(4), so the output is V's mean weighted by their exponentials.
  const AttentionShape pair{1, 2, 1, 1, 1, 0, 1.0};
  Dense qkv(2, 3);
  qkv.at(0, 0) = 0.0f, qkv.at(0, 1) = 1.0f, qkv.at(0, 2) = 10.0f;  // q0, k0, v0
  qkv.at(1, 0) = 2.0f, qkv.at(1, 1) = 2.0f, qkv.at(1, 2) = 20.0f;  // q1, k1, v1
  Dense out(2, 1);
  AttentionForward(pair, qkv.cmat(), out.mat());
  const double w0 = std::exp(std::tanh(2.0)), w1 = std::exp(std::tanh(4.0));
  EXPECT_FLOAT_EQ(out.at(0, 0), 10.0f);
  EXPECT_NEAR(out.at(1, 0), (10 * w0 + 20 * w1) / (w0 + w1), 1e-5);
  AttentionShape uncapped = pair;
  uncapped.softcap = 0;
  Dense plain(2, 1);
  AttentionForward(uncapped, qkv.cmat(), plain.mat());
  EXPECT_GT(plain.at(1, 0) - out.at(1, 0), 1.0f);  // uncapped, key 1 takes nearly all the weight

  for (const int64_t window : {0, 2}) {
    const AttentionShape s{2, 5, 4, 2, 3, window, 0.5};
    const Dense x = Random(10, (4 + 2 * 2) * 3, 27, 2), w = Random(10, 12, 28);
    Dense y(10, 12);
    AttentionForward(s, x.cmat(), y.mat());
    ExpectNear(y, AttentionReference(s, x.ToDouble()), 1e-5, "out");
    ExpectBackwardMatchesFiniteDifferences(s, x, w);
    AttentionShape high = s, none = s;
    high.softcap = 1e4;
    none.softcap = 0;
    const Dense y_none = Forward(none, x);
    ExpectNear(Forward(high, x), y_none.ToDouble(), 1e-5, "a cap far above the scores");
    EXPECT_NE(y.v, y_none.v);
  }
}

// Dropout on the probabilities (a rate of 0.3 so that a short sequence drops some): against the
// reference forward and finite differences backward (the masks are fixed by place, so the
// output is a smooth function of qkv); the masks hang on the sequences' and heads' places in the
// whole step, so a call over the second sequence and the second pair of heads alone, told where
// they sit, gives the whole call's values.
TEST(CpuKernelsTest, AttentionWithDropout) {
  const AttentionShape s{2, 6, 4, 2, 3, 0, 0.0, {0.3, AttentionDropoutStream(5, 2), 0, 0}};
  const Dense x = Random(12, (4 + 2 * 2) * 3, 29, 2), w = Random(12, 12, 30);
  Dense y(12, 12);
  AttentionForward(s, x.cmat(), y.mat());
  ExpectNear(y, AttentionReference(s, x.ToDouble()), 1e-5, "out");
  AttentionShape none = s;
  none.dropout.rate = 0;
  Dense y_none(12, 12);
  AttentionForward(none, x.cmat(), y_none.mat());
  EXPECT_NE(y.v, y_none.v);
  int64_t dropped = 0, keys = 0;
  for (int64_t seq = 0; seq < 2; ++seq)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t t = 0; t < 6; ++t)
        for (int64_t u = 0; u <= t; ++u, ++keys) dropped += s.dropout.Scale(seq, h, t, u) == 0;
  EXPECT_GT(dropped, keys / 8);  // 0.3 of 168: about 50
  EXPECT_LT(dropped, keys / 2);
  ExpectBackwardMatchesFiniteDifferences(s, x, w);
  // Sequence 1's rows and query heads 2 and 3 (key/value head 1) alone: [Q2 Q3 | K1 | V1].
  AttentionShape part = s;
  part.sequences = 1, part.heads = 2, part.kv_heads = 1;
  part.dropout.first_sequence = 1, part.dropout.first_head = 2;
  Dense x1(6, (2 + 2) * 3), y1(6, 6);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      x1.at(r, c) = x.at(6 + r, 2 * 3 + c), x1.at(r, 3 + c) = x.at(6 + r, 3 * 3 + c);
      x1.at(r, 6 + c) = x.at(6 + r, (4 + 1) * 3 + c);
      x1.at(r, 9 + c) = x.at(6 + r, (4 + 2 + 1) * 3 + c);
    }
  AttentionForward(part, x1.cmat(), y1.mat());
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(y1.at(r, c), y.at(6 + r, 2 * 3 + c)) << r << " " << c;
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

}  // namespace
}  // namespace domino::exec::cpu
