// libFuzzer target: the hardware-profile loader on arbitrary text, and its YAML round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "planner/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  domino::Result<domino::HardwareProfile> profile = domino::ParseProfile(text, "fuzz.yaml");
  if (!profile.ok()) return 0;
  domino::Result<domino::HardwareProfile> again =
      domino::ParseProfile(domino::ProfileToYaml(*profile), "again.yaml");
  if (!again.ok() || again->compute_us.size() != profile->compute_us.size()) std::abort();
  return 0;
}
