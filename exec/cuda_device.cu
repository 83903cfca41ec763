#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "exec/cuda_device.h"

namespace domino::exec {

namespace {

// The driver branch CUDA 13.0's runtime needs (CUDA 13.0 release notes, table 3).
constexpr int kMinDriver = 580;

std::string Version(int cuda) {
  return std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);
}

}  // namespace

bool CudaBuilt() { return true; }

Result<std::vector<CudaDevice>> ListCudaDevices() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::string reason = status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0";
    int driver = 0;  // the CUDA version the driver supports; 0 without a driver
    if (status == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        driver > 0)
      reason = "the NVIDIA driver supports CUDA " + Version(driver) + "; this build needs CUDA " +
               Version(CUDART_VERSION) + " (driver " + std::to_string(kMinDriver) + " or later)";
    cudaGetLastError();  // clear the sticky error for later calls
    return Error("no CUDA GPU is visible (" + reason + ")");
  }
  std::vector<CudaDevice> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
      return Error("cannot read the properties of CUDA device " + std::to_string(i));
    devices.push_back(CudaDevice{i, prop.name, prop.multiProcessorCount,
                                 static_cast<int64_t>(prop.totalGlobalMem), prop.major,
                                 prop.minor});
  }
  return devices;
}

std::string CudaVersions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclGetVersion(&nccl);
  return "CUDA runtime " + Version(runtime) + ", NCCL " + std::to_string(nccl / 10000) + "." +
         std::to_string(nccl % 10000 / 100) + "." + std::to_string(nccl % 100);
}

}  // namespace domino::exec
