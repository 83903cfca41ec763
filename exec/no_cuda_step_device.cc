#include "exec/step_device.h"

namespace domino::exec {

Result<std::unique_ptr<StepDevice>> MakeStepDevice(const CudaOptions&,
                                                   std::span<const std::pair<int, int>>,
                                                   Communicator&, Communicator&, Communicator&) {
  return Error("this build of domino has no CUDA support (reconfigure with nvcc and NCCL present)");
}

}  // namespace domino::exec
