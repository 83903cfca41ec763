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

// One op's claim on HBM bandwidth: what it would move at full speed (GB/s) and its weight, the SMs
// issuing its memory traffic.
struct HbmParty {
  double weight = 0;
  double demand = 0;
  double granted = 0;
};

// Weighted max-min fair sharing (water-filling): bandwidth is offered in proportion to weight; an
// op that needs less than its offer keeps only its demand and the rest is offered again to the
// others. Memory controllers serve outstanding requests, and an op keeps requests outstanding in
// proportion to the SMs issuing them, so a collective on 16 CTAs cannot take more than its part of
// the bandwidth from a memory-bound kernel on the remaining SMs, however fast its links are.
// When total demand fits, everyone gets its demand.
template <size_t N>
void ShareHbm(double capacity, std::array<HbmParty, N>& parties) {
  std::array<bool, N> open{};
  for (size_t i = 0; i < N; ++i) {
    parties[i].granted = 0;
    open[i] = parties[i].weight > 0 && parties[i].demand > 0;
  }
  double left = capacity;
  for (size_t round = 0; round < N; ++round) {
    double weight = 0;
    for (size_t i = 0; i < N; ++i)
      if (open[i]) weight += parties[i].weight;
    if (weight <= 0 || left <= 0) return;
    // Close every op whose offer covers its demand; if none does, split what is left and stop.
    bool closed = false;
    for (size_t i = 0; i < N; ++i) {
      if (!open[i]) continue;
      double offer = left * parties[i].weight / weight;
      if (parties[i].demand <= offer) {
        closed = true;
        open[i] = false;
      }
    }
    if (!closed) {
      for (size_t i = 0; i < N; ++i)
        if (open[i]) parties[i].granted += left * parties[i].weight / weight;
      return;
    }
    left = capacity;
    for (size_t i = 0; i < N; ++i) {
      parties[i].granted = open[i] ? 0 : parties[i].demand;
      left -= parties[i].granted;
    }
  }
}

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

    // Rates for the current set of running ops. Collectives take their CTAs from the compute op;
    // then HBM bandwidth is shared (see ShareHbm).
    int ctas = 0;
    for (const Running& r : running)
      if (r.op >= 0 && costs[r.op].is_comm) ctas += costs[r.op].ctas;
    const int compute_sms = std::max(1, device.sms - ctas);
    double compute_body_us = 0;
    int parties = 0;
    std::array<HbmParty, kStreamCount> hbm{};
    for (int s = 0; s < kStreamCount; ++s) {
      const Running& r = running[s];
      if (r.op < 0) continue;
      const OpCost& c = costs[r.op];
      HbmParty& party = hbm[s];
      if (c.is_comm) {
        party.weight = std::max(1, c.ctas);
        party.demand = c.hbm_bytes / c.alone_us / 1e3;
      } else {
        compute_body_us = c.BodyUs(compute_sms, device.hbm_GBps);
        party.weight = compute_sms;
        if (compute_body_us > 0) party.demand = c.hbm_bytes / compute_body_us / 1e3;
      }
      ++parties;
    }
    if (parties > 1) ShareHbm(device.hbm_GBps, hbm);
    for (int s = 0; s < kStreamCount; ++s) {
      Running& r = running[s];
      if (r.op < 0) continue;
      const OpCost& c = costs[r.op];
      // The fraction of its demand an op gets; 1 when it runs alone or fits.
      const double share =
          parties > 1 && hbm[s].demand > 0 ? std::min(1.0, hbm[s].granted / hbm[s].demand) : 1.0;
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
