#ifndef DOMINO_TESTS_HARDWARE_TEST_NODE_H_
#define DOMINO_TESTS_HARDWARE_TEST_NODE_H_

#include "hardware/hardware_spec.h"

namespace domino::testing_util {

// A DGX-H100-like node with NVLS off, no bandwidth ramp and no LL protocol, so that collective
// figures (Simple and LL128, ring and tree) can be checked by hand. Its GPU is left unset.
inline NodeSpec HandCheckedNode() {
  NodeSpec node;
  node.name = "test-node";
  node.gpus_per_node = 8;
  node.nvlink = {.GBps_per_direction = 450,
                 .efficiency = 0.81,
                 .base_latency_us = 8.4,
                 .step_latency_us = 3.4};
  node.nvls = false;
  node.nics = 8;
  node.network = {
      .GBps_per_direction = 50, .efficiency = 0.93, .base_latency_us = 8.4, .step_latency_us = 14};
  node.comm_ctas = 16;
  node.comm_hbm_factor = 2.5;
  node.ramp.half_bytes = 0;
  node.ll.base_latency_us = 1e9;
  return node;
}

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_HARDWARE_TEST_NODE_H_
