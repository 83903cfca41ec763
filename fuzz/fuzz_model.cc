// libFuzzer target: the model loaders on arbitrary text, as a model YAML file and as a Hugging
// Face config.json.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "models/hf_config.h"
#include "models/model_counts.h"
#include "models/model_spec.h"

namespace {

void CheckLoaded(const domino::Result<domino::ModelSpec>& model) {
  if (model.ok()) {
    // A model that loads must also count without overflow traps (UBSan) or crashes.
    domino::ParameterCounts counts = domino::CountParameters(*model);
    (void)counts;
    (void)domino::TrainingFlopsPerToken(*model, model->seq_len);
    (void)domino::TrainingFlopsPerToken(*model, model->seq_len,
                                        domino::AttentionCount::kCausalWindow);
    // What a plan writes of its inline model reads back to itself.
    const std::string flow = domino::ModelToFlowYaml(*model);
    domino::Result<domino::ModelSpec> back = domino::ParseModel(flow, "flow.yaml");
    if (!back.ok() || domino::ModelToFlowYaml(*back) != flow) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckLoaded(domino::ParseModel(text, "fuzz.yaml"));
  CheckLoaded(domino::ParseHfConfig(text, "fuzz/config.json"));
  return 0;
}
