#include "exec/mpi_communicator.h"

namespace domino::exec {

bool HaveMpi() { return false; }

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator() {
  return Error(
      "this build has no MPI communicator (no MPI was found at configure time); install OpenMPI "
      "(apt-get install libopenmpi-dev) and rebuild");
}

}  // namespace domino::exec
