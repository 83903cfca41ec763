#ifndef DOMINO_TESTS_SIM_CATALOG_GPU_H_
#define DOMINO_TESTS_SIM_CATALOG_GPU_H_

#include <gtest/gtest.h>

#include "hardware/hardware_spec.h"

namespace domino::testing_util {

// A catalog GPU by name; fails the test (and returns the defaults) when it does not load.
inline GpuSpec CatalogGpu(const char* name) {
  Result<GpuSpec> gpu = LoadGpu(name);
  EXPECT_TRUE(gpu.ok()) << gpu.message();
  return gpu.ok() ? *gpu : GpuSpec{};
}

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_SIM_CATALOG_GPU_H_
