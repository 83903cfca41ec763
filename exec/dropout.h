#ifndef DOMINO_EXEC_DROPOUT_H_
#define DOMINO_EXEC_DROPOUT_H_

// The attention's dropout as the executor runs it, one rule for the host (the CPU kernels,
// context parallelism's core) and the CUDA kernels. C++17, so that nvcc can include it. (The
// hidden dropout on the residual branches is priced, not run: `execute` says so in a note.)
//
// Each score's mask is a hash of where it sits in the whole step (the run's seed, the layer, and
// the score's sequence, head and query and key positions), not a draw from a generator that
// advances: a forward and its backward regenerate the same mask, as FlashAttention's kernels
// regenerate theirs from a Philox offset, and a run cut over any tensor, context or pipeline
// parallelism, row slices or micro-batches drops exactly the elements a single rank drops, which
// `execute --check` compares. Kept elements are scaled by 1 / (1 - rate), as PyTorch's dropout.
#include <cstdint>

#include "exec/host_device.h"

namespace domino::exec {

// The rate of the executor's attention dropout where a plan runs dropout (Plan::applies_dropout):
// Megatron-LM's --attention-dropout default and Transformer Engine's modules' 0.1. A plan's cost
// does not depend on it.
constexpr double kDropoutRate = 0.1;

// The stream of one layer's attention dropout, from the run's seed and the global layer.
DOMINO_HOST_DEVICE inline uint64_t AttentionDropoutStream(uint64_t seed, int64_t layer) {
  return SplitMix64(seed ^ SplitMix64(0x6174746e00000000ull + static_cast<uint64_t>(layer)));
}

// The factor element (a, b, c, d) of `stream` is multiplied by under a dropout of `rate`:
// 1 / (1 - rate) where it is kept, 0 where it is dropped (1 for a rate of 0). The element's
// uniform draw is 53 bits of its hash, exact in double on the host and the device alike.
DOMINO_HOST_DEVICE inline float DropoutScale(uint64_t stream, int64_t a, int64_t b, int64_t c,
                                             int64_t d, double rate) {
  if (rate <= 0) return 1.0f;
  uint64_t h = SplitMix64(stream ^ static_cast<uint64_t>(a));
  h = SplitMix64(h ^ static_cast<uint64_t>(b));
  h = SplitMix64(h ^ static_cast<uint64_t>(c));
  h = SplitMix64(h ^ static_cast<uint64_t>(d));
  const double uniform = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
  return uniform < rate ? 0.0f : static_cast<float>(1.0 / (1.0 - rate));
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

}  // namespace domino::exec

#endif  // DOMINO_EXEC_DROPOUT_H_
