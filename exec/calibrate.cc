#include "exec/calibrate.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "exec/cpu_backend.h"
#include "planner/lower.h"

namespace domino::exec {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
Result<double> TimeMedian(int repeats, Fn fn) {
  DOMINO_RETURN_IF_ERROR(fn());  // warm-up
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point start = Clock::now();
    DOMINO_RETURN_IF_ERROR(fn());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return Median(std::move(us));
}

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

}  // namespace

Result<HardwareProfile> CalibrateCpu(const Plan& plan, Communicator& comm,
                                     const CalibrateOptions& options) {
  if (comm.size() != 1 && comm.size() != plan.tp)
    return Error(fmt::format("calibrating collectives of a TP group of {} needs {} ranks, not {}",
                             plan.tp, plan.tp, comm.size()));
  Result<Schedule> schedule = Lower(plan);
  if (!schedule.ok()) return schedule.error();
  const Schedule& s = *schedule;
  HardwareProfile profile;
  profile.device = "cpu";
  profile.backend = "cpu";
  profile.contention = false;
  CpuBackend backend(s, plan.model, comm.rank(), plan.tp, /*seed=*/1);
  const int repeats = std::max(1, options.repeats);
  // Passes over the whole schedule, each timing every distinct op once, so that a burst of
  // machine noise lands in one pass rather than in every run of one op; the median per op.
  std::map<std::string, std::vector<double>> samples;
  for (int pass = -1; pass < repeats; ++pass) {  // pass -1 warms up
    std::map<std::string, bool> timed;
    for (size_t i = 0; i < s.size(); ++i) {
      const Op& op = s.ops()[i];
      if (op.kind == OpKind::kCollective) continue;
      const std::string key = OpSignature(op);
      if (!timed.emplace(key, true).second) continue;
      const Clock::time_point start = Clock::now();
      DOMINO_RETURN_IF_ERROR(backend.Run(s, static_cast<int32_t>(i)));
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (pass >= 0) samples[key].push_back(us);
    }
  }
  for (auto& [key, us] : samples) profile.compute_us[key] = Median(std::move(us));
  if (comm.size() > 1) {
    // Distinct collectives in schedule order: the same on every rank.
    std::map<std::pair<int, double>, bool> seen;
    for (const Op& op : s.ops()) {
      if (op.kind != OpKind::kCollective) continue;
      if (!seen.emplace(std::pair{static_cast<int>(op.collective), op.bytes}, true).second) continue;
      const int64_t n_in = Elements(s.reads(op)[0].view);
      const int64_t n_out = Elements(s.writes(op)[0].view);
      std::vector<float> in(static_cast<size_t>(n_in), 1.0f), out(static_cast<size_t>(n_out));
      Result<double> us = TimeMedian(repeats, [&]() -> Status {
        switch (op.collective) {
          case CollectiveOp::kAllReduce: return comm.AllReduce(in.data(), n_in);
          case CollectiveOp::kReduceScatter: return comm.ReduceScatter(in.data(), out.data(), n_out);
          case CollectiveOp::kAllGather: return comm.AllGather(in.data(), out.data(), n_in);
          case CollectiveOp::kNone: break;
        }
        return Error("not a collective");
      });
      if (!us.ok()) return us.error();
      profile.collectives.push_back(
          {std::string(CollectiveKindName(op.collective)), comm.size(), op.bytes, *us});
    }
  }
  return profile;
}

}  // namespace domino::exec
