// Stands in for cuda_device.cu in builds without CUDA, so callers get a clear error.
#include "exec/cuda_device.h"

namespace domino::exec {

bool CudaBuilt() { return false; }

Result<std::vector<CudaDevice>> ListCudaDevices() {
  return Error("this build of domino has no CUDA support (reconfigure with nvcc and NCCL present)");
}

std::string CudaVersions() { return "built without CUDA"; }

}  // namespace domino::exec
