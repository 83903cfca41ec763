#include "sim/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace domino::sim {

std::string TraceJson(const Schedule& schedule, const Timeline& timeline, int rank_class,
                      const std::string& process_name) {
  using nlohmann::json;
  json events = json::array();
  int stages = 1;
  for (const Op& op : schedule.ops()) stages = std::max(stages, op.stage + 1);
  for (int stage = 0; stage < stages; ++stage) {
    events.push_back(
        {{"name", "process_name"},
         {"ph", "M"},
         {"pid", rank_class + stage},
         {"tid", 0},
         {"args", {{"name", stages > 1 ? fmt::format("stage {}", stage) : process_name}}}});
    for (int s = 0; s < kStreamCount; ++s)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank_class + stage},
                        {"tid", s},
                        {"args", {{"name", std::string(StreamName(static_cast<Stream>(s)))}}}});
  }
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op& op = schedule.ops()[i];
    const OpTime& t = timeline.ops[i];
    json args = {{"layer", op.tags.layer}, {"micro_batch", op.tags.micro_batch}};
    if (op.tags.row_slice >= 0) args["row_slice"] = op.tags.row_slice;
    if (op.tags.col_chunk >= 0) args["col_chunk"] = op.tags.col_chunk;
    if (op.tags.chunk >= 0) args["chunk"] = op.tags.chunk;
    if (op.tags.virtual_stage >= 0) args["virtual_stage"] = op.tags.virtual_stage;
    if (op.kind == OpKind::kPass) args["pass"] = op.pass;
    if (op.kind == OpKind::kGemm) {
      args["m"] = op.m, args["n"] = op.n, args["k"] = op.k;
    } else {
      args["bytes"] = op.bytes;
    }
    events.push_back({{"name", schedule.Label(static_cast<int32_t>(i))},
                      {"cat", std::string(OpFuncName(op.func))},
                      {"ph", "X"},
                      {"ts", t.start_us},
                      {"dur", t.end_us - t.start_us},
                      {"pid", rank_class + op.stage},
                      {"tid", static_cast<int>(op.stream)},
                      {"args", std::move(args)}});
  }
  json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump() + "\n";
}

}  // namespace domino::sim
