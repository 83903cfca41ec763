#ifndef DOMINO_TESTS_SIM_PREDICT_OK_H_
#define DOMINO_TESTS_SIM_PREDICT_OK_H_

#include <gtest/gtest.h>

#include <utility>

#include "sim/predict.h"

namespace domino::testing_util {

// Predict's result, failing the test (and returning an empty prediction) when it is an error.
inline sim::Prediction PredictOk(const Plan& plan, const sim::CostOptions& options = {}) {
  Result<sim::Prediction> p = sim::Predict(plan, options);
  EXPECT_TRUE(p.ok()) << p.message();
  return p.ok() ? std::move(p).value() : sim::Prediction{};
}

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_SIM_PREDICT_OK_H_
