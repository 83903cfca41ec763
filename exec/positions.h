#ifndef DOMINO_EXEC_POSITIONS_H_
#define DOMINO_EXEC_POSITIONS_H_

// Where a rank's tokens sit in their sequence, and the rotary embedding's frequencies: one rule
// for the host (the CPU kernels, the reference fill, ring attention) and the CUDA kernels. C++17,
// so that nvcc can include it.
#include <cstdint>

#include "exec/host_device.h"

namespace domino::exec {

// Context parallelism's causal load balance: a sequence of `seq_len` tokens is cut into 2 cp
// chunks and CP rank r holds chunks r and 2 cp - 1 - r. The position in the sequence of the
// rank's local token `local` (0 <= local < seq_len / cp).
DOMINO_HOST_DEVICE inline int64_t CpPosition(int64_t local, int64_t seq_len, int cp, int cp_rank) {
  const int64_t chunk = seq_len / (2 * cp);
  return local < chunk ? cp_rank * chunk + local : (2 * cp - 1 - cp_rank) * chunk + local - chunk;
}

// The position in its sequence of row `row` of a block of whole local sequences (`local_len`
// rows each, sequence-major, as the schedule's tensors and row slices hold them) on CP rank
// `cp_rank` of `cp`.
DOMINO_HOST_DEVICE inline int64_t RowPosition(int64_t row, int64_t local_len, int cp, int cp_rank) {
  const int64_t local = row % local_len;
  return cp > 1 ? CpPosition(local, local_len * cp, cp, cp_rank) : local;
}

// Rotary embeddings' base: pair i of a head of d columns turns by position x kRopeBase^(-2i/d),
// Megatron-Core's default (--rotary-base 10000) and RoFormer's. The executor prices and checks
// the kernel's work, which the base does not change.
constexpr double kRopeBase = 10000.0;

}  // namespace domino::exec

#endif  // DOMINO_EXEC_POSITIONS_H_
