#include "exec/reference.h"

#include <gtest/gtest.h>

#include <vector>

namespace domino::exec {
namespace {

// A view large enough to be filled by several threads holds the values a one-by-one fill gives
// (ReferenceValue at each element's index), and so does a small one, filled by one thread; a
// column-sharded weight takes its values from its place in the whole tensor.
TEST(ReferenceTest, ParallelFillGivesEachElementItsOwnValue) {
  Tensor weight;
  weight.rows = 1024;
  weight.cols = 4097;  // not a multiple of the threads' bands
  weight.role = TensorRole{TensorKind::kWeight, TensorSlot::kFc1, false, TensorForm::kPrimary, 2};
  ASSERT_GE(weight.rows * weight.cols, kParallelFillElements);
  std::vector<float> values(static_cast<size_t>(weight.rows * weight.cols), -7.0f);
  FillReference(weight, 0, 1, 42, View{0, weight.rows, 0, weight.cols}, values);
  for (int64_t r = 0; r < weight.rows; ++r)
    for (int64_t c = 0; c < weight.cols; ++c)
      ASSERT_EQ(values[r * weight.cols + c], ReferenceValue(42, weight.role, weight.rows, r, c))
          << r << "," << c;
  // A part of it: only the view's elements are written.
  std::vector<float> part(values.size(), -7.0f);
  FillReference(weight, 0, 1, 42, View{10, 20, 5, 9}, part);
  for (int64_t r = 0; r < weight.rows; ++r)
    for (int64_t c = 0; c < weight.cols; ++c) {
      const bool inside = r >= 10 && r < 20 && c >= 5 && c < 9;
      ASSERT_EQ(part[r * weight.cols + c], inside ? values[r * weight.cols + c] : -7.0f)
          << r << "," << c;
    }
  // Rank 1 of 2 holds the whole tensor's right half of the columns (filled by threads too).
  Tensor shard = weight;
  shard.rows = 2048;
  shard.cols = 2048;
  shard.shard = Shard::kCols;
  ASSERT_GE(shard.rows * shard.cols, kParallelFillElements);
  std::vector<float> half(static_cast<size_t>(shard.rows * shard.cols));
  FillReference(shard, 1, 2, 42, View{0, shard.rows, 0, shard.cols}, half);
  for (int64_t r = 0; r < shard.rows; r += 97)
    for (int64_t c = 0; c < shard.cols; ++c)
      ASSERT_EQ(half[r * shard.cols + c], ReferenceValue(42, shard.role, shard.rows, r, 2048 + c))
          << r << "," << c;
}

}  // namespace
}  // namespace domino::exec
