#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/cpu_kernels.h"
#include "tests/exec/cpu_kernels_test_util.h"

// The model's ends: the vocab-parallel embedding and cross-entropy, by hand, over vocabulary parts
// and against finite differences, with and without a soft cap on the logits.
namespace domino::exec::cpu {
namespace {

using test_util::Dense;
using test_util::Random;

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

// A soft cap on the logits (Gemma 2's final_logit_softcapping): the loss of cap tanh(z / cap),
// by hand, summed over vocabulary parts, and its gradient against central differences.
TEST(CpuKernelsTest, CrossEntropyOfSoftCappedLogits) {
  // Logits 0 and 2 with a cap of 1 are 0 and tanh(2) capped: with label 1 the loss is
  // log(1 + e^tanh(2)) - tanh(2).
  Dense logits(1, 2), labels(1, 1), stats(1, 2), grad(1, 2);
  logits.v = {0, 2};
  labels.v = {1};
  CrossEntropyStats(logits.cmat(), labels.cmat(), 0, 2, 0, stats.mat(), 1.0);
  const double t2 = std::tanh(2.0);
  EXPECT_NEAR(MeanCrossEntropy(stats.cmat()), std::log(1 + std::exp(t2)) - t2, 1e-6);
  EXPECT_NEAR(stats.at(0, 1), t2, 1e-6);
  // d/dz1 = (softmax_1 - 1) (1 - tanh(2)^2); d/dz0 = softmax_0 (1 - tanh(0)^2) = softmax_0.
  CrossEntropyBackward(logits.cmat(), labels.cmat(), stats.cmat(), 0, 2, 1, grad.mat(), 1.0);
  const double p1 = std::exp(t2) / (1 + std::exp(t2));
  EXPECT_NEAR(grad.at(0, 0), 1 - p1, 1e-6);
  EXPECT_NEAR(grad.at(0, 1), (p1 - 1) * (1 - t2 * t2), 1e-6);

  // Logits of up to 40 against a cap of 30 (7 columns, the eighth padding), in two parts.
  const double cap = 30;
  const Dense z = Random(3, 8, 27, 40);
  Dense lab(3, 1);
  lab.v = {6, 0, 4};
  Dense whole_stats(3, 2), whole_grad(3, 8), plain_stats(3, 2);
  CrossEntropyStats(z.cmat(), lab.cmat(), 0, 7, 0, whole_stats.mat(), cap);
  CrossEntropyStats(z.cmat(), lab.cmat(), 0, 7, 0, plain_stats.mat());
  EXPECT_GT(std::fabs(MeanCrossEntropy(whole_stats.cmat()) - MeanCrossEntropy(plain_stats.cmat())),
            1e-2);
  CrossEntropyBackward(z.cmat(), lab.cmat(), whole_stats.cmat(), 0, 7, 3, whole_grad.mat(), cap);
  Dense sum(3, 3), part(3, 3);
  for (int p = 0; p < 2; ++p) {
    const int64_t begin = p == 0 ? 0 : 5, cols = p == 0 ? 5 : 3;
    CrossEntropyStats(ConstMat(z.v.data() + begin, 3, cols, 8), lab.cmat(), begin, 7, p, part.mat(),
                      cap);
    for (size_t i = 0; i < sum.v.size(); ++i) sum.v[i] += part.v[i];
  }
  EXPECT_NEAR(MeanCrossEntropy(sum.cmat()), MeanCrossEntropy(whole_stats.cmat()), 1e-5);
  for (int64_t e = 0; e < 24; ++e) {
    auto loss = [&](float delta) {
      Dense moved = z, s(3, 2);
      moved.v[e] += delta;
      CrossEntropyStats(moved.cmat(), lab.cmat(), 0, 7, 0, s.mat(), cap);
      return MeanCrossEntropy(s.cmat());
    };
    const double h = 1e-2, numeric = (loss(h) - loss(-h)) / (2 * h);
    EXPECT_NEAR(whole_grad.v[e], numeric, 1e-4) << "logit " << e;
  }
}

}  // namespace
}  // namespace domino::exec::cpu
