// libFuzzer target: the GPU, node and cluster loaders on arbitrary text, and a collective priced
// on every node that loads.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hardware/collective_cost.h"
#include "hardware/hardware_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)domino::ParseGpu(text, "fuzz.yaml");
  (void)domino::ParseCluster(text, "fuzz.yaml");
  domino::Result<domino::NodeSpec> node = domino::ParseNode(text, "fuzz.yaml");
  if (node.ok()) {
    for (int n : {2, node->gpus_per_node}) {
      domino::CommGroup group{n, 1, n};
      if (n <= node->gpus_per_node && n >= 2 && domino::CheckCommGroup(*node, group).ok())
        (void)domino::EstimateCollective(*node, domino::Collective::kAllReduce, 1 << 20, group);
    }
  }
  return 0;
}
