// libFuzzer target: the sweep's study loader on arbitrary text, then the grid's size and each
// `--vary` text the study's axes would make.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tools/sweep_study.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)domino::cli::ParseAxis(std::string(text));
  domino::Result<domino::cli::Study> study = domino::cli::ParseStudy(text, "fuzz.yaml");
  if (!study.ok()) return 0;
  (void)domino::cli::CountSweepPoints(study->axes);
  for (const domino::cli::Axis& axis : study->axes) {
    std::string vary = axis.key + "=";
    for (const std::string& value : axis.values) vary += value + ",";
    vary.pop_back();
    (void)domino::cli::ParseAxis(vary);
  }
  return 0;
}
