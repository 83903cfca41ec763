#ifndef DOMINO_EXEC_LAUNCH_ENV_H_
#define DOMINO_EXEC_LAUNCH_ENV_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "models/base/result.h"

namespace domino::exec {

// Where this process sits in a parallel launch, from the launcher's environment variables.
struct LaunchEnv {
  int size = 1;
  int rank = 0;
  int local_rank = 0;
  std::string source =
      "no launcher";  // "OpenMPI (OMPI_COMM_WORLD_SIZE)", "Slurm (SLURM_NTASKS)", ...
};

// Reads OpenMPI's (OMPI_COMM_WORLD_*), MPICH/Hydra's (PMI_*), Slurm's (SLURM_NTASKS, SLURM_PROCID,
// SLURM_LOCALID) and torchrun's (WORLD_SIZE, RANK, LOCAL_RANK) variables, in that order; without
// any, one process. `getenv` is injectable for tests. Fails on a malformed value (not a number,
// rank outside [0, size)), naming the variable.
Result<LaunchEnv> ReadLaunchEnv(
    const std::function<std::optional<std::string>(std::string_view)>& getenv = {});

}  // namespace domino::exec

#endif  // DOMINO_EXEC_LAUNCH_ENV_H_
