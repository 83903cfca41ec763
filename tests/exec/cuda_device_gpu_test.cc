// Needs a GPU: labelled `gpu`, skips cleanly without one.
#include <gtest/gtest.h>

#include "exec/cuda_device.h"

namespace domino::exec {
namespace {

TEST(CudaDeviceGpu, ListsDevicesWithSaneProperties) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) GTEST_SKIP() << devices.message();
  ASSERT_FALSE(devices->empty());
  for (const CudaDevice& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.sms, 0);
    EXPECT_GT(d.memory_bytes, int64_t{1} << 30);
    EXPECT_GE(d.compute_major, 7);
  }
}

}  // namespace
}  // namespace domino::exec
