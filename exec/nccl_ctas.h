#ifndef DOMINO_EXEC_NCCL_CTAS_H_
#define DOMINO_EXEC_NCCL_CTAS_H_

#include "models/base/result.h"

namespace domino::exec {

// The CTAs (channels) NCCL may give each collective: its config's minCTAs and maxCTAs. NCCL
// (2.17 to 2.28 at least) checks minCTAs <= maxCTAs before it fills an unset one with its
// default (minCTAs 1, maxCTAs 64), so a minimum set alone, with the maximum unset, fails the init
// with ncclInvalidArgument. This is the pair as the CUDA backend passes it, both set.
struct NcclCtas {
  int min = 0;
  int max = 0;
};

// NCCL's defaults for a value left unset, and its largest number of channels.
inline constexpr int kNcclDefaultMinCtas = 1;
inline constexpr int kNcclMaxCtas = 64;

// Resolves a requested pair, 0 meaning NCCL's default: an unset value becomes NCCL's default, so
// a minimum alone runs as it would if NCCL filled the maximum first. Fails with one line when a
// value is negative or above kNcclMaxCtas, or the minimum exceeds the maximum.
Result<NcclCtas> ResolveNcclCtas(int min_ctas, int max_ctas);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_NCCL_CTAS_H_
