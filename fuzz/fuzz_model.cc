// libFuzzer target: the model loader on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/model_counts.h"
#include "models/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  domino::Result<domino::ModelSpec> model = domino::ParseModel(text, "fuzz.yaml");
  if (model.ok()) {
    // A model that loads must also count without overflow traps (UBSan) or crashes.
    domino::ParameterCounts counts = domino::CountParameters(*model);
    (void)counts;
    (void)domino::TrainingFlopsPerToken(*model, model->seq_len);
  }
  return 0;
}
