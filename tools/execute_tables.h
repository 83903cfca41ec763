#ifndef DOMINO_TOOLS_EXECUTE_TABLES_H_
#define DOMINO_TOOLS_EXECUTE_TABLES_H_

#include <ostream>
#include <string>

#include "exec/execute.h"
#include "exec/launch_env.h"
#include "planner/plan.h"

namespace domino::cli {

// What `domino execute` prints and reports of a measured run (tools/cmd_execute.cc runs it).

// A schedule's figures as measured (one micro-batch's pass, scaled to the plan's micro-batches):
// the iteration, the ideal (its compute ops' sum: they ran one after another), the exposed TP
// communication, tokens/s, TFLOP/s and MFU; `comm_ms` gets the TP collectives' time (0 at tp 1,
// where they move nothing).
PlanFigures MeasuredFigures(const Plan& plan, const exec::ExecuteResult& r, double* comm_ms);
// A whole step's figures: the iteration as measured on rank 0 (its stage's ops one at a time).
PlanFigures StepFigures(const Plan& plan, const exec::ExecuteResult& r);
// Keeps the ops rank 0 ran (its stage's, and the tied embedding's sync) of a whole step's
// iteration, with their times, so that reports and traces hold what was measured.
void RankZeroOps(exec::ExecuteResult& r);

// The run's header, figures, time by op and the numeric check's table, if any: of a schedule
// (PrintRun, `backend` as the header names it) or of whole steps (PrintStep).
void PrintRun(const Plan& plan, exec::Extent extent, const std::string& backend,
              const exec::LaunchEnv& env, const exec::ExecuteResult& r, const PlanFigures& f,
              double comm_ms, std::ostream& out);
void PrintStep(const Plan& plan, const std::string& backend, const exec::LaunchEnv& env,
               const exec::ExecuteResult& r, const PlanFigures& f, std::ostream& out);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_EXECUTE_TABLES_H_
