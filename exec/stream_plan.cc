#include "exec/stream_plan.h"

#include <fmt/format.h>

#include <array>

namespace domino::exec {

Result<std::vector<StreamStep>> PlanStreams(const Schedule& schedule) {
  std::vector<StreamStep> steps(schedule.size());
  // waited[a][b]: the latest op of stream b that stream a has waited for (-1: none).
  std::array<std::array<int32_t, kStreamCount>, kStreamCount> waited;
  for (auto& row : waited) row.fill(-1);
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op& op = schedule.ops()[i];
    if (op.stream != Stream::kCompute && op.stream != Stream::kTpComm)
      return Error(
          fmt::format("op {} ({}) runs on the {} stream; the executor runs the TP layer "
                      "stack only (compute and TP comm)",
                      i, schedule.Label(static_cast<int32_t>(i)), StreamName(op.stream)));
    StreamStep& step = steps[i];
    step.stream = op.stream;
    const int mine = static_cast<int>(step.stream);
    std::array<int32_t, kStreamCount> latest;
    latest.fill(-1);
    for (int32_t d : schedule.deps(op)) {
      const int s = static_cast<int>(steps[d].stream);
      if (s != mine && d > latest[s]) latest[s] = d;
    }
    for (int s = 0; s < kStreamCount; ++s) {
      if (latest[s] <= waited[mine][s]) continue;
      step.wait_for.push_back(latest[s]);
      steps[latest[s]].record_done = true;
      waited[mine][s] = latest[s];
    }
  }
  return steps;
}

}  // namespace domino::exec
