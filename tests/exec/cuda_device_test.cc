#include "exec/cuda_device.h"

#include <gtest/gtest.h>

namespace domino::exec {
namespace {

// Without a GPU (or without CUDA in the build) the probe fails with a message, never a crash.
TEST(CudaDevice, ReportsMissingGpuClearly) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (devices.ok()) GTEST_SKIP() << "a GPU is visible; covered by CudaDeviceGpu";
  const std::string& message = devices.message();
  EXPECT_TRUE(message.find("no CUDA GPU is visible") != std::string::npos ||
              message.find("no CUDA support") != std::string::npos)
      << message;
}

TEST(CudaDevice, VersionsNameTheLibraries) {
  std::string versions = CudaVersions();
  if (CudaBuilt()) {
    EXPECT_NE(versions.find("NCCL"), std::string::npos) << versions;
  } else {
    EXPECT_EQ(versions, "built without CUDA");
  }
}

}  // namespace
}  // namespace domino::exec
