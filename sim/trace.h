#ifndef DOMINO_SIM_TRACE_H_
#define DOMINO_SIM_TRACE_H_

#include <string>

#include "planner/schedule.h"

namespace domino::sim {

// Writes a Timeline of a Schedule as Chrome/Perfetto trace JSON (the "JSON Array/Object Format"):
// one complete event ("ph": "X") per op with ts and dur in microseconds, pid = `rank_class`
// (pipeline stage or rank; an iteration's ops add their Op::stage, each stage named "stage N"),
// tid = stream, args carrying the op's kind, shape or bytes and tags;
// metadata events name the process and the threads. Ops of zero duration are kept (dur 0).
std::string TraceJson(const Schedule& schedule, const Timeline& timeline, int rank_class = 0,
                      const std::string& process_name = "rank 0");

}  // namespace domino::sim

#endif  // DOMINO_SIM_TRACE_H_
