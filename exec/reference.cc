#include "exec/reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "exec/host_device.h"

namespace domino::exec {
namespace {

// What a value is, independent of how it is stored: kind, slot, gradient and layer (not the
// sequence-parallel form, not the row slice), so every sharding of it draws the same numbers.
uint64_t HashRole(const TensorRole& role) {
  uint64_t key = static_cast<uint64_t>(role.kind);
  key = key << 8 | static_cast<uint64_t>(role.slot);
  key = key << 8 | (role.gradient ? 1u : 0u);
  key = key << 16 | static_cast<uint16_t>(role.layer);
  return SplitMix64(key);
}

// The token stream index (before the token offset) of row `row` of a tokens tensor.
int64_t TokenIndex(const Tensor& t, int rank, int tp, const FillOffsets& offsets, int64_t row,
                   int64_t col) {
  const int64_t whole = WholeIndex(t, rank, tp, row, col).rows;
  if (offsets.cp <= 1) return whole;
  const int64_t local_len = offsets.seq_len / offsets.cp;
  return whole / local_len * offsets.seq_len +
         CpPosition(whole % local_len, offsets.seq_len, offsets.cp, offsets.cp_rank);
}

}  // namespace

float ReferenceValue(uint64_t seed, const TensorRole& role, int64_t fan_in, int64_t row,
                     int64_t col) {
  uint64_t bits =
      SplitMix64(seed ^ SplitMix64(HashRole(role) ^ SplitMix64(row * 0x100000001b3ull + col)));
  float u =
      static_cast<float>(bits >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;  // [-1, 1)
  if (role.gradient) return u;
  if (role.kind == TensorKind::kNormWeight) return 1.0f + 0.1f * u;
  if (role.kind == TensorKind::kWeight) return u / std::sqrt(static_cast<float>(fan_in));
  return u;
}

void FillReference(const Tensor& t, int rank, int tp, uint64_t seed, const View& view,
                   std::vector<float>& values) {
  const Shape2 whole = WholeShape(t, tp);
  const bool vocab_major =
      t.role.slot == TensorSlot::kEmbedding || t.role.slot == TensorSlot::kLmHead;
  const int64_t fan_in = vocab_major ? whole.cols : whole.rows;
  auto fill = [&](int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      for (int64_t c = view.col_begin; c < view.col_end; ++c) {
        Shape2 at = WholeIndex(t, rank, tp, r, c);
        values[r * t.cols + c] = ReferenceValue(seed, t.role, fan_in, at.rows, at.cols);
      }
    }
  };
  // A large view (a 13B layer's weights at TP 8 hold millions of values each, tens of seconds of
  // one core for a few layers) is filled by several threads, a band of rows each: every value
  // depends on its index alone, so the result does not depend on how the rows are shared out.
  const int64_t rows = view.row_end - view.row_begin;
  const int64_t elements = rows * (view.col_end - view.col_begin);
  const int64_t threads = elements < kParallelFillElements
                              ? 1
                              : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                                    std::min<int64_t>(rows, 16));
  if (threads <= 1) {
    fill(view.row_begin, view.row_end);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i)
    pool.emplace_back(fill, view.row_begin + rows * i / threads,
                      view.row_begin + rows * (i + 1) / threads);
  for (std::thread& thread : pool) thread.join();
}

bool IsTokens(const TensorRole& role) {
  return role.kind == TensorKind::kInput &&
         (role.slot == TensorSlot::kEmbedding || role.slot == TensorSlot::kLmHead);
}

int64_t ReferenceToken(uint64_t seed, int64_t vocab, int64_t index) {
  constexpr uint64_t kTokenStream = 0x746f6b656e73ull;  // "tokens"
  return static_cast<int64_t>(SplitMix64(seed ^ SplitMix64(kTokenStream ^ SplitMix64(index))) %
                              static_cast<uint64_t>(vocab));
}

void FillGiven(const Tensor& t, const ModelSpec& model, int rank, int tp, uint64_t seed,
               const FillOffsets& offsets, const View& view, std::vector<float>& values) {
  if (!IsTokens(t.role)) {
    if (offsets.layer == 0 || t.role.layer < 0) {
      FillReference(t, rank, tp, seed, view, values);
    } else {
      Tensor shifted = t;
      shifted.role.layer = static_cast<int16_t>(t.role.layer + offsets.layer);
      FillReference(shifted, rank, tp, seed, view, values);
    }
    return;
  }
  const int64_t next = t.role.slot == TensorSlot::kLmHead ? 1 : 0;  // labels: the next token
  for (int64_t r = view.row_begin; r < view.row_end; ++r)
    for (int64_t c = view.col_begin; c < view.col_end; ++c)
      values[r * t.cols + c] = static_cast<float>(ReferenceToken(
          seed, model.vocab, offsets.token + TokenIndex(t, rank, tp, offsets, r, c) + next));
}

AttentionDropout AttentionDropoutAt(const FillOffsets& offsets, uint64_t seed, int rank, int layer,
                                    const Op& op, const View& qkv) {
  // The micro-batch's first sequence sits at its first token; the view's rows are whole sequences
  // from its own first. Tensor parallelism cuts the heads evenly: rank r holds r * op.heads on.
  const int64_t n = std::max<int64_t>(op.seq_len, 1);
  return {offsets.dropout, AttentionDropoutStream(seed, layer),
          offsets.token / n + qkv.row_begin / n, static_cast<int64_t>(rank) * op.heads};
}

void SetDropout(const Plan& plan, FillOffsets* fill) {
  fill->dropout = plan.applies_dropout() ? kDropoutRate : 0;
  fill->branch_dropout[0] = plan.branch_dropout(true) ? kDropoutRate : 0;
  fill->branch_dropout[1] = plan.branch_dropout(false) ? kDropoutRate : 0;
}

BranchDropout BranchDropoutAt(const FillOffsets& offsets, uint64_t seed, int rank, int tp,
                              int layer, int branch, const Tensor& tensor, const View& view) {
  BranchDropout d;
  d.rate = offsets.branch_dropout[branch == 1 ? 0 : 1];
  d.stream = BranchDropoutStream(seed, layer, branch);
  d.first_token = offsets.token;
  const Shape2 first = WholeIndex(tensor, rank, tp, view.row_begin, view.col_begin);
  d.whole_row = first.rows;
  d.first_col = first.cols;
  d.seq_len = std::max<int64_t>(offsets.seq_len, 1);
  d.cp = offsets.cp;
  d.cp_rank = offsets.cp_rank;
  return d;
}

}  // namespace domino::exec
