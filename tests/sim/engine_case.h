#ifndef DOMINO_TESTS_SIM_ENGINE_CASE_H_
#define DOMINO_TESTS_SIM_ENGINE_CASE_H_

#include <vector>

#include "sim/engine.h"

namespace domino::testing_util {

// 100 SMs and 1000 GB/s (1e6 bytes per microsecond): round numbers for hand-computed times.
inline constexpr sim::DeviceResources kEngineDevice{.sms = 100, .hbm_GBps = 1000};

// A hand-built schedule with its costs, run on kEngineDevice: each op a GEMM or a collective (by
// its cost), on a stream and a pipeline stage.
struct EngineCase {
  Schedule schedule;
  std::vector<sim::OpCost> costs;

  int32_t Add(Stream stream, const sim::OpCost& cost, std::vector<int32_t> deps = {},
              int stage = 0) {
    Op op;
    op.stream = stream;
    op.stage = stage;
    op.kind = cost.is_comm ? OpKind::kCollective : OpKind::kGemm;
    costs.push_back(cost);
    return schedule.Add(op, deps);
  }
  Timeline Run() const { return sim::Simulate(schedule, costs, kEngineDevice); }
};

}  // namespace domino::testing_util

#endif  // DOMINO_TESTS_SIM_ENGINE_CASE_H_
