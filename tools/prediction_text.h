#ifndef DOMINO_TOOLS_PREDICTION_TEXT_H_
#define DOMINO_TOOLS_PREDICTION_TEXT_H_

// A prediction as `domino simulate` prints it, for the commands that show one (simulate,
// validate --explain).
#include <ostream>
#include <string>

#include "planner/plan.h"
#include "sim/predict.h"

namespace domino::cli {

// Two comment lines: the model, cluster, precision, stack and batch, then the parallel layout
// and the overlap.
std::string Describe(const Plan& p);
// Describe's lines, then the prediction's figures, its busy time per op class and stage 0's
// iteration breakdown as tables.
void PrintPrediction(const Plan& plan, const sim::Prediction& p, std::ostream& out);

// "# note: GPU: CAVEAT\n" where the GPU's catalog entry names what its predictions miss
// (GpuSpec::caveat); "" otherwise.
std::string CaveatLine(const GpuSpec& gpu);

// "# note: MODEL: ...\n" where the model's sliding window covers a layer, is shorter than the
// plan's sequence and the plan prices it as full causal attention (Plan::WindowedLayer), saying
// why; "" otherwise.
std::string WindowLine(const Plan& plan);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_PREDICTION_TEXT_H_
