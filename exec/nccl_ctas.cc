#include "exec/nccl_ctas.h"

#include <fmt/format.h>

namespace domino::exec {

Result<NcclCtas> ResolveNcclCtas(int min_ctas, int max_ctas) {
  for (int v : {min_ctas, max_ctas})
    if (v < 0 || v > kNcclMaxCtas)
      return Error(fmt::format("NCCL CTAs per collective must be 0 (NCCL's default) to {}, not {}",
                               kNcclMaxCtas, v));
  NcclCtas ctas{min_ctas > 0 ? min_ctas : kNcclDefaultMinCtas,
                max_ctas > 0 ? max_ctas : kNcclMaxCtas};
  if (ctas.min > ctas.max)
    return Error(fmt::format(
        "NCCL's minimum CTAs per collective ({}) exceeds its maximum ({}); NCCL would refuse "
        "the communicator",
        ctas.min, ctas.max));
  return ctas;
}

}  // namespace domino::exec
