#ifndef DOMINO_TOOLS_SWEEP_STUDY_H_
#define DOMINO_TOOLS_SWEEP_STUDY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/base/result.h"

namespace domino::cli {

// What `domino sweep` varies: one key (network_GBps, nvlink_GBps, nodes, node, seq_len,
// micro_batch, model, stack, precision) and its values, as given (each checked when applied to a
// point).
struct Axis {
  std::string key;
  std::vector<std::string> values;
};

// A study file: `name`, `grid` (key: [values], varied in the order given, the last fastest) and
// `fixed` (key: value). Keys as for --vary. The format is documented in docs/formats.md.
struct Study {
  std::string name;
  std::vector<Axis> axes;
  std::vector<std::pair<std::string, std::string>> fixed;
};

// The most points one sweep may take (the product of its axes' lengths).
inline constexpr size_t kMaxSweepPoints = 1'000'000;

// Whether `key` may be varied.
bool KnownSweepKey(std::string_view key);

// A positive decimal integer as the integer keys (nodes, seq_len, micro_batch) take them: digits
// only, no leading zero, at most 9 of them ("12"; not "12.0", "1e3", "0x10" or "012").
bool PositiveDecimalInt(std::string_view text, int* out);

// A link bandwidth as network_GBps and nvlink_GBps take it: a positive decimal number ("12.5",
// "1e3"; not "0x10", "inf" or "nan") within a node file's bounds of GBps_per_direction
// (hardware/hardware_spec.cc), 0.001 to 1000000; nullopt otherwise.
std::optional<double> SweepBandwidth(const std::string& text);

// Parses "--vary KEY=V1,V2,...". Errors quote the flag: "--vary nodes=1,,2: an empty value".
Result<Axis> ParseAxis(const std::string& text);

// Parses a study from `text`; errors are "FILE:LINE:COL: KEY: RULE" with `file` as given.
Result<Study> ParseStudy(std::string_view text, std::string_view file);
// Reads and parses the study file at `path`.
Result<Study> LoadStudy(const std::string& path);

// The number of points of a grid over `axes`; an error above kMaxSweepPoints.
Result<size_t> CountSweepPoints(const std::vector<Axis>& axes);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_SWEEP_STUDY_H_
