#ifndef DOMINO_EXEC_CUDA_DEVICE_H_
#define DOMINO_EXEC_CUDA_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "models/base/result.h"

namespace domino::exec {

// One CUDA device as the runtime reports it.
struct CudaDevice {
  int index = 0;
  std::string name;
  int sms = 0;
  int64_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// True when this binary was built with the CUDA backend.
bool CudaBuilt();

// Lists the visible CUDA devices. Fails with "no CUDA GPU is visible (REASON)" when there is
// none, and with "this build of domino has no CUDA support" when built without it.
Result<std::vector<CudaDevice>> ListCudaDevices();

// "CUDA runtime X.Y, NCCL A.B.C", or why it is unavailable.
std::string CudaVersions();

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CUDA_DEVICE_H_
