#include "exec/cuda_device.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace domino::exec {

bool CudaBuilt() { return true; }

Result<std::vector<CudaDevice>> ListCudaDevices() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::string reason = status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0";
    cudaGetLastError();  // clear the sticky error for later calls
    return Error("no CUDA GPU is visible (" + reason + ")");
  }
  std::vector<CudaDevice> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
      return Error("cannot read the properties of CUDA device " + std::to_string(i));
    devices.push_back(CudaDevice{i, prop.name, prop.multiProcessorCount,
                                 static_cast<int64_t>(prop.totalGlobalMem), prop.major, prop.minor});
  }
  return devices;
}

std::string CudaVersions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclGetVersion(&nccl);
  return "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
         ", NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl % 10000 / 100) + "." +
         std::to_string(nccl % 100);
}

}  // namespace domino::exec
