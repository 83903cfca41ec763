// libFuzzer target: the plan loader on arbitrary text (model and cluster resolved through the
// catalogs), and lowering of every plan that loads and is small enough.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "planner/lower.h"
#include "planner/memory_model.h"
#include "planner/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  domino::Result<domino::Plan> plan = domino::ParsePlan(text, "fuzz.yaml");
  if (!plan.ok()) return 0;
  (void)domino::EstimateMemory(*plan);
  (void)domino::PlanToYaml(*plan);
  (void)domino::ChunkWindowedLayers(*plan);
  if (plan->model.layers / plan->pp <= 8) (void)domino::Lower(*plan);
  return 0;
}
