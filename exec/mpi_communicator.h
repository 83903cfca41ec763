#ifndef DOMINO_EXEC_MPI_COMMUNICATOR_H_
#define DOMINO_EXEC_MPI_COMMUNICATOR_H_

#include <memory>

#include "exec/communicator.h"
#include "exec/launch_env.h"
#include "models/base/result.h"

namespace domino::exec {

// Initializes MPI (once per process) and returns a communicator over MPI_COMM_WORLD, with errors
// returned rather than aborting. Fails with a clear message in a build without MPI. MPI is
// finalized at process exit.
Result<std::unique_ptr<Communicator>> MakeMpiCommunicator();

// Whether this build has the MPI communicator.
bool HaveMpi();

// The communicator of a launch: the group of one without a launcher, MPI otherwise (checked to
// agree with the launcher's rank and size).
Result<std::unique_ptr<Communicator>> MakeLaunchCommunicator(const LaunchEnv& env);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_MPI_COMMUNICATOR_H_
