#include "exec/cuda_backend.h"

namespace domino::exec {

Result<std::unique_ptr<CudaRunner>> MakeCudaRunner(const Schedule&, const ModelSpec&, int, int,
                                                   uint64_t, const CudaOptions&, Communicator&) {
  return Error("this build of domino has no CUDA support (reconfigure with nvcc and NCCL present)");
}

Status InitNcclOver(Communicator&, cuda::Context*, const CudaOptions&, cuda::Nccl**) {
  return Error("this build of domino has no CUDA support (reconfigure with nvcc and NCCL present)");
}

}  // namespace domino::exec
