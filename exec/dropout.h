#ifndef DOMINO_EXEC_DROPOUT_H_
#define DOMINO_EXEC_DROPOUT_H_

// The dropouts as the executor runs them, the attention's and the hidden dropout on each residual
// branch, one rule for the host (the CPU kernels, context parallelism's core) and the CUDA
// kernels. C++17, so that nvcc can include it.
//
// Each element's mask is a hash of where it sits in the whole step (the run's seed, the layer, and
// a score's sequence, head and query and key positions, or a branch output's token and column),
// not a draw from a generator that advances: a forward and its backward regenerate the same mask,
// as FlashAttention's kernels regenerate theirs from a Philox offset, and a run cut over any
// tensor, context or pipeline parallelism, row slices or micro-batches drops exactly the elements a
// single rank drops, which `execute --check` compares. Kept elements are scaled by 1 / (1 - rate),
// as PyTorch's dropout.
#include <cstdint>

#include "exec/host_device.h"
#include "exec/positions.h"

namespace domino::exec {

// The rate of the executor's dropouts where a plan runs them (Plan::applies_dropout,
// Plan::branch_dropout): Megatron-LM's --attention-dropout and --hidden-dropout defaults and
// Transformer Engine's modules' 0.1. A plan's cost does not depend on it.
constexpr double kDropoutRate = 0.1;

// The stream of one layer's attention dropout, from the run's seed and the global layer.
DOMINO_HOST_DEVICE inline uint64_t AttentionDropoutStream(uint64_t seed, int64_t layer) {
  return SplitMix64(seed ^ SplitMix64(0x6174746e00000000ull + static_cast<uint64_t>(layer)));
}

// The factor an element whose hash is `h` is multiplied by under a dropout of `rate`: 1 / (1 -
// rate) where it is kept, 0 where it is dropped. Its uniform draw is 53 bits of the hash, exact in
// double on the host and the device alike.
DOMINO_HOST_DEVICE inline float KeptScale(uint64_t h, double rate) {
  const double uniform = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
  return uniform < rate ? 0.0f : static_cast<float>(1.0 / (1.0 - rate));
}

// The factor element (a, b, c, d) of `stream` is multiplied by under a dropout of `rate` (1 for a
// rate of 0): KeptScale of its hash.
DOMINO_HOST_DEVICE inline float DropoutScale(uint64_t stream, int64_t a, int64_t b, int64_t c,
                                             int64_t d, double rate) {
  if (rate <= 0) return 1.0f;
  uint64_t h = SplitMix64(stream ^ static_cast<uint64_t>(a));
  h = SplitMix64(h ^ static_cast<uint64_t>(b));
  h = SplitMix64(h ^ static_cast<uint64_t>(c));
  h = SplitMix64(h ^ static_cast<uint64_t>(d));
  return KeptScale(h, rate);
}

// Where one attention call's sequences and heads sit in the whole step, for its dropout masks
// (query sequence s, head h, query position t, key position u: DropoutScale(stream,
// first_sequence + s, first_head + h, t, u, rate)); rate 0: no dropout.
struct AttentionDropout {
  double rate = 0;
  uint64_t stream = 0;
  int64_t first_sequence = 0, first_head = 0;

  DOMINO_HOST_DEVICE float Scale(int64_t s, int64_t h, int64_t t, int64_t u) const {
    return DropoutScale(stream, first_sequence + s, first_head + h, t, u, rate);
  }
};

// The stream of one layer's hidden dropout on its attention's (`branch` 1) or its MLP's (2)
// residual branch, from the run's seed and the global layer.
DOMINO_HOST_DEVICE inline uint64_t BranchDropoutStream(uint64_t seed, int64_t layer, int branch) {
  return SplitMix64(seed ^ SplitMix64(0x6869646e00000000ull + 4 * static_cast<uint64_t>(layer) +
                                      static_cast<uint64_t>(branch)));
}

// Where one residual-stream view's elements sit in the whole step, for the hidden dropout on a
// branch (Plan::branch_dropout): the mask of the view's element (r, c) is KeptScale of the hash of
// (stream, token, first_col + c), `token` its row's place in the run's token stream. The
// view's rows are the whole tensor's rows whole_row on (sequence parallelism's shard of a row
// slice is a run of them); with context parallelism (cp > 1) each sequence's seq_len / cp rows
// are the rank's two chunks of it (CpPosition). A forward and its backward draw the same masks,
// and so does any cut of the run: the reference's single rank drops what the ranks drop. rate 0:
// no dropout.
struct BranchDropout {
  double rate = 0;
  uint64_t stream = 0;
  int64_t first_token = 0;  // the micro-batch's first token (FillOffsets::token)
  int64_t whole_row = 0;    // the whole tensor's row of the view's first row
  int64_t first_col = 0;    // and its column of the view's first column
  int64_t seq_len = 1;      // the whole sequence (with cp > 1)
  int cp = 1, cp_rank = 0;

  DOMINO_HOST_DEVICE int64_t Token(int64_t row) const {
    const int64_t whole = whole_row + row;
    if (cp <= 1) return first_token + whole;
    const int64_t local_len = seq_len / cp;
    return first_token + whole / local_len * seq_len +
           CpPosition(whole % local_len, seq_len, cp, cp_rank);
  }
  DOMINO_HOST_DEVICE float Scale(int64_t row, int64_t col) const {
    if (rate <= 0) return 1.0f;
    const uint64_t h = SplitMix64(stream ^ static_cast<uint64_t>(Token(row)));
    return KeptScale(SplitMix64(h ^ static_cast<uint64_t>(first_col + col)), rate);
  }
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_DROPOUT_H_
