#ifndef DOMINO_EXEC_STREAM_PLAN_H_
#define DOMINO_EXEC_STREAM_PLAN_H_

#include <cstdint>
#include <vector>

#include "models/base/result.h"
#include "planner/schedule.h"

namespace domino::exec {

// How an executor with one CUDA stream per Schedule stream enqueues the schedule: in issue
// order, op i goes to `stream` after that stream waits for the completion events of `wait_for`.
// A dependency on the same stream needs no event (a stream runs its ops in order), and a wait on
// op j of another stream also covers every earlier op of that stream, so each op waits only for
// the latest dependency per other stream that its stream has not already waited past.
struct StreamStep {
  Stream stream = Stream::kCompute;  // the op's
  std::vector<int32_t> wait_for;     // ops of other streams, one per stream at most
  bool record_done = false;          // another stream waits for this op
};

// Fails for ops on streams the executor does not run (pipeline and data-parallel comm): it runs
// the compute and TP comm streams.
Result<std::vector<StreamStep>> PlanStreams(const Schedule& schedule);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_STREAM_PLAN_H_
