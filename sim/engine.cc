#include "sim/engine.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

namespace domino::sim {
namespace {

struct Running {
  int32_t op = -1;
  double remaining = 0;  // fraction of the op's standalone work left, in (0, 1]
  double rate = 0;       // fraction per microsecond
};

}  // namespace

Timeline Simulate(const Schedule& schedule, const std::vector<OpCost>& costs,
                  const DeviceResources& device) {
  const std::vector<Op>& ops = schedule.ops();
  assert(costs.size() == ops.size());
  const size_t n = ops.size();

  std::array<std::vector<int32_t>, kStreamCount> queues;
  for (size_t i = 0; i < n; ++i) queues[static_cast<int>(ops[i].stream)].push_back(static_cast<int32_t>(i));
  std::array<size_t, kStreamCount> head{};
  std::array<Running, kStreamCount> running;
  std::vector<char> done(n, 0);
  Timeline timeline;
  timeline.ops.assign(n, OpTime{});

  double now = 0;
  size_t finished = 0;
  auto ready = [&](int32_t id) {
    for (int32_t dep : schedule.deps(ops[id]))
      if (!done[dep]) return false;
    return true;
  };

  while (finished < n) {
    // Start every stream head that can start; zero-length ops finish at once, which may enable
    // more heads, so repeat until nothing changes.
    bool changed = true;
    while (changed) {
      changed = false;
      for (int s = 0; s < kStreamCount; ++s) {
        if (running[s].op >= 0 || head[s] >= queues[s].size()) continue;
        int32_t id = queues[s][head[s]];
        if (!ready(id)) continue;
        timeline.ops[id].start_us = now;
        if (costs[id].alone_us <= 0) {
          timeline.ops[id].end_us = now;
          done[id] = 1;
          ++finished;
          ++head[s];
        } else {
          running[s] = Running{id, 1.0, 0.0};
        }
        changed = true;
      }
    }
    if (finished == n) break;

    // Rates for the current set of running ops.
    int ctas = 0;
    double comm_demand = 0;  // GB/s
    for (const Running& r : running) {
      if (r.op < 0 || !costs[r.op].is_comm) continue;
      ctas += costs[r.op].ctas;
      comm_demand += costs[r.op].hbm_bytes / costs[r.op].alone_us / 1e3;
    }
    Running& compute = running[static_cast<int>(Stream::kCompute)];
    double compute_body_us = 0, compute_demand = 0;
    if (compute.op >= 0) {
      const OpCost& c = costs[compute.op];
      int sms = std::max(1, device.sms - ctas);
      compute_body_us = c.BodyUs(sms, device.hbm_GBps);
      if (compute_body_us > 0) compute_demand = c.hbm_bytes / compute_body_us / 1e3;
    }
    double share = 1.0;
    if (compute_demand + comm_demand > device.hbm_GBps)
      share = device.hbm_GBps / (compute_demand + comm_demand);
    for (Running& r : running) {
      if (r.op < 0) continue;
      const OpCost& c = costs[r.op];
      if (c.is_comm) {
        r.rate = share / c.alone_us;
      } else {
        r.rate = 1.0 / (c.launch_us + compute_body_us / share);
      }
    }

    // Advance to the next completion.
    double step = std::numeric_limits<double>::infinity();
    for (const Running& r : running)
      if (r.op >= 0) step = std::min(step, r.remaining / r.rate);
    assert(std::isfinite(step) && "a schedule with pending ops must have a running op");
    now += step;
    for (int s = 0; s < kStreamCount; ++s) {
      Running& r = running[s];
      if (r.op < 0) continue;
      r.remaining -= step * r.rate;
      if (r.remaining <= 1e-12) {
        timeline.ops[r.op].end_us = now;
        done[r.op] = 1;
        ++finished;
        ++head[s];
        r = Running{};
      }
    }
  }
  return timeline;
}

}  // namespace domino::sim
