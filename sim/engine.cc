#include "sim/engine.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

namespace domino::sim {
namespace {

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

// A binary min-heap of slots keyed by their running op's projected end, with each slot's position,
// so a slot's key changes in place: the heap never holds more than one entry per stream.
class SlotHeap {
 public:
  explicit SlotHeap(int slots) : key_(slots, 0), pos_(slots, -1) {}
  bool empty() const { return heap_.empty(); }
  int top() const { return heap_.front(); }
  double key(int slot) const { return key_[slot]; }
  void Set(int slot, double key) {
    key_[slot] = key;
    if (pos_[slot] < 0) {
      pos_[slot] = static_cast<int>(heap_.size());
      heap_.push_back(slot);
    }
    Up(pos_[slot]);
    Down(pos_[slot]);
  }
  void Remove(int slot) {
    const int i = pos_[slot];
    const int last = heap_.back();
    heap_.pop_back();
    pos_[slot] = -1;
    if (last == slot) return;
    heap_[i] = last;
    pos_[last] = i;
    Up(i);
    Down(pos_[last]);
  }

 private:
  bool Less(int a, int b) const { return key_[a] < key_[b] || (key_[a] == key_[b] && a < b); }
  void Swap(int i, int j) {
    std::swap(heap_[i], heap_[j]);
    pos_[heap_[i]] = i;
    pos_[heap_[j]] = j;
  }
  void Up(int i) {
    while (i > 0 && Less(heap_[i], heap_[(i - 1) / 2])) {
      Swap(i, (i - 1) / 2);
      i = (i - 1) / 2;
    }
  }
  void Down(int i) {
    const int n = static_cast<int>(heap_.size());
    for (;;) {
      int best = i;
      for (int c : {2 * i + 1, 2 * i + 2})
        if (c < n && Less(heap_[c], heap_[best])) best = c;
      if (best == i) return;
      Swap(i, best);
      i = best;
    }
  }
  std::vector<double> key_;
  std::vector<int> pos_;
  std::vector<int> heap_;
};

}  // namespace

Engine::Engine(const Schedule& schedule) : schedule_(schedule) {
  const std::vector<Op>& ops = schedule.ops();
  const size_t n = ops.size();
  // One slot per stream of each stage's rank; each stage has its own device.
  for (const Op& op : ops) stages_ = std::max(stages_, op.stage + 1);
  slots_ = stages_ * kStreamCount;
  slot_.resize(n);
  queues_.resize(slots_);
  for (size_t i = 0; i < n; ++i) {
    slot_[i] = ops[i].stage * kStreamCount + static_cast<int>(ops[i].stream);
    queues_[slot_[i]].push_back(static_cast<int32_t>(i));
  }
  // Who waits on whom: each op's count of dependencies, and its dependents.
  dep_count_.resize(n);
  first_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    dep_count_[i] = ops[i].dep_count;
    for (int32_t dep : schedule.deps(ops[i])) ++first_[dep + 1];
  }
  for (size_t i = 0; i < n; ++i) first_[i + 1] += first_[i];
  dependents_.resize(first_[n]);
  std::vector<uint32_t> fill(first_.begin(), first_.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (int32_t dep : schedule.deps(ops[i])) dependents_[fill[dep]++] = static_cast<int32_t>(i);
}

Timeline Simulate(const Schedule& schedule, const std::vector<OpCost>& costs,
                  const DeviceResources& device) {
  return Engine(schedule).Run(costs, device);
}

Timeline Engine::Run(const std::vector<OpCost>& costs, const DeviceResources& device) const {
  assert(costs.size() == schedule_.size());
  const size_t n = schedule_.size();
  const int slots = slots_, stages = stages_;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<uint32_t> pending = dep_count_;
  const std::vector<std::vector<int32_t>>& queues = queues_;

  struct Slot {
    int32_t op = -1;
    double remaining = 0;  // fraction of the op's standalone work left at `since`
    double rate = 0;       // fraction per microsecond
    double since = 0;
    // Compute op: microseconds it still stalls from `since` (> 0: no progress, and its next
    // event is the stall's end).
    double stall = 0;
    // Persistent GEMM (OpCost::persistent_ctas) launched beside held SMs: the share of its work its
    // late CTAs still owe once the SMs come free or its early CTAs finish (0: none pending).
    double tail = 0;
    bool late = false;   // only its late CTAs run, on SMs its early ones freed
    bool fresh = false;  // started since its stage's rates were last computed
    double event = 0;    // EventAt, as of its stage's rates' last computation
  };
  // An op is done at `now` when its end has come or what is left rounds away (the old engine's
  // 1e-12 of its work, so ops ending together within rounding end together). A stalled op's next
  // event is its stall's end.
  auto Done = [](const Slot& r, double at) {
    return r.since + r.remaining / r.rate <= at || r.remaining - (at - r.since) * r.rate <= 1e-12;
  };
  auto EventAt = [](const Slot& r) {
    return r.stall > 0 ? r.since + r.stall : r.since + r.remaining / r.rate;
  };
  auto Due = [&](const Slot& r, double at) {
    return r.stall > 0 ? r.since + r.stall <= at : r.event <= at || Done(r, at);
  };
  const bool use_heap = slots > kStreamCount;
  std::vector<Slot> running(slots);
  std::vector<size_t> head(slots, 0);
  SlotHeap events(use_heap ? slots : 0);  // running ops by projected end
  std::vector<int> work(slots);           // slots whose head may start
  for (int s = 0; s < slots; ++s) work[s] = s;
  std::vector<int> dirty;  // stages whose running set changed: new rates
  std::vector<char> is_dirty(stages, 0);
  auto mark = [&](int slot) {
    const int stage = slot / kStreamCount;
    if (!is_dirty[stage]) is_dirty[stage] = 1, dirty.push_back(stage);
  };
  Timeline timeline;
  timeline.ops.assign(n, OpTime{kInf, kInf});

  double now = 0;
  size_t finished = 0;
  auto finish = [&](int32_t id, int slot) {
    timeline.ops[id].end_us = now;
    ++finished;
    ++head[slot];
    work.push_back(slot);
    for (uint32_t k = first_[id]; k < first_[id + 1]; ++k)
      if (--pending[dependents_[k]] == 0) work.push_back(slot_[dependents_[k]]);
    // Collectives that waited for this GEMM's SMs may start.
    if (costs[id].blocks_comm) {
      const int first = slot - slot % kStreamCount;
      for (int s = first; s < first + kStreamCount; ++s)
        if (s != slot) work.push_back(s);
    }
  };
  // A collective that needs SMs waits while a GEMM that started before now keeps every SM of its
  // device (OpCost::blocks_comm); one that started now was launched after it.
  auto waits_for_sms = [&](int32_t id, int slot) {
    if (!costs[id].is_comm || costs[id].ctas <= 0) return false;
    const Slot& compute = running[slot - slot % kStreamCount];
    return compute.op >= 0 && costs[compute.op].blocks_comm &&
           timeline.ops[compute.op].start_us < now;
  };
  // A running op's event has come: its stall is over (it runs from now), or it is done.
  auto reach = [&](int slot) {
    Slot& r = running[slot];
    mark(slot);
    if (r.stall > 0) {
      r.stall = 0;
      return;
    }
    if (r.tail > 0) {  // the early CTAs are done; the late ones start now, on their SMs
      r.remaining = r.tail;
      r.tail = 0;
      r.late = true;
      r.since = now;
      return;
    }
    const int32_t id = r.op;
    r.op = -1;
    finish(id, slot);
  };

  while (finished < n) {
    // Start every stream head that can start; zero-length ops finish at once, which may enable
    // more heads.
    while (!work.empty()) {
      const int s = work.back();
      work.pop_back();
      if (running[s].op >= 0 || head[s] >= queues[s].size()) continue;
      const int32_t id = queues[s][head[s]];
      if (pending[id] > 0 || waits_for_sms(id, s)) continue;
      timeline.ops[id].start_us = now;
      if (costs[id].alone_us <= 0) {
        finish(id, s);
      } else {
        running[s] = Slot{id, 1.0, 0.0, now};
        running[s].fresh = true;
        mark(s);
      }
    }
    if (finished == n) break;

    // Rates for the running ops of each stage whose set changed. Collectives take their CTAs from
    // the compute op, which first stalls if it was launched beside them (OpCost::tail_share); then
    // HBM bandwidth is shared (see ShareHbm).
    for (int stage : dirty) {
      is_dirty[stage] = 0;
      Slot* lane = &running[stage * kStreamCount];
      int ctas = 0;
      for (int s = 0; s < kStreamCount; ++s)
        if (lane[s].op >= 0 && costs[lane[s].op].is_comm) ctas += costs[lane[s].op].ctas;
      const int compute_sms = std::max(1, device.sms - ctas);
      double compute_body_us = 0;
      int parties = 0;
      std::array<HbmParty, kStreamCount> hbm{};
      for (int s = 0; s < kStreamCount; ++s) {
        Slot& r = lane[s];
        if (r.op < 0) continue;
        // Work done at the old rate up to now, and stall spent.
        r.remaining -= (now - r.since) * r.rate;
        if (r.stall > 0) r.stall -= now - r.since;
        r.since = now;
        const OpCost& c = costs[r.op];
        HbmParty& party = hbm[s];
        if (c.is_comm) {
          party.weight = std::max(1, c.ctas);
          party.demand = c.hbm_bytes / c.alone_us / 1e3;
        } else {
          // Launched beside collectives that hold SMs: its late CTAs' share, for as long as
          // they hold them.
          if (r.fresh && ctas > 0) {
            if (c.persistent_ctas <= 0)
              r.stall = c.tail_share * c.BodyUs(device.sms, device.hbm_GBps);
            else if (c.persistent_ctas > device.sms - ctas)
              r.tail = c.tail_share;
          }
          if (ctas == 0 || r.stall <= 1e-9) r.stall = 0;
          if (r.stall > 0) continue;
          if (r.tail > 0 && ctas == 0) {  // the SMs came free: the late CTAs start
            r.remaining = std::max(r.remaining, r.tail);
            r.tail = 0;
          }
          // While late CTAs wait, the early ones run their tiles as if alone; then the late ones
          // do, on the SMs the early ones freed.
          compute_body_us =
              c.BodyUs(r.tail > 0 || r.late ? device.sms : compute_sms, device.hbm_GBps);
          if (ctas > 0) compute_body_us += c.stall_share * c.BodyUs(device.sms, device.hbm_GBps);
          party.weight = compute_sms;
          if (compute_body_us > 0) party.demand = c.hbm_bytes / compute_body_us / 1e3;
        }
        ++parties;
      }
      if (parties > 1) ShareHbm(device.hbm_GBps, hbm);
      for (int s = 0; s < kStreamCount; ++s) {
        Slot& r = lane[s];
        if (r.op < 0) continue;
        r.fresh = false;
        if (r.stall > 0) {
          r.rate = 0;
          r.event = EventAt(r);
          if (use_heap) events.Set(stage * kStreamCount + s, r.event);
          continue;
        }
        const OpCost& c = costs[r.op];
        // The fraction of its demand an op gets; 1 when it runs alone or fits.
        const double share =
            parties > 1 && hbm[s].demand > 0 ? std::min(1.0, hbm[s].granted / hbm[s].demand) : 1.0;
        // (x / 1 is x: the division only where the share is below 1.)
        r.rate =
            c.is_comm
                ? share / c.alone_us
                : 1.0 / (c.launch_us + (share == 1.0 ? compute_body_us : compute_body_us / share));
        r.event = EventAt(r);
        if (use_heap) events.Set(stage * kStreamCount + s, r.event);
      }
    }
    dirty.clear();

    // Advance to the next completion; every op done by then (within rounding) completes with it.
    bool advanced = false;
    if (!use_heap) {
      // One stage: a scan of its four streams beats a heap.
      double next = kInf;
      for (const Slot& r : running)
        if (r.op >= 0) next = std::min(next, r.event);
      if (std::isfinite(next)) {
        now = std::max(now, next);
        advanced = true;
        for (int s = 0; s < slots; ++s) {
          Slot& r = running[s];
          if (r.op >= 0 && Due(r, now)) reach(s);
        }
      }
    }
    while (use_heap && !events.empty()) {
      const int slot = events.top();
      Slot& r = running[slot];
      if (!advanced) {
        const double end = events.key(slot);
        if (!std::isfinite(end)) break;
        now = std::max(now, end);
        advanced = true;
      } else if (!Due(r, now)) {
        break;
      }
      events.Remove(slot);
      reach(slot);
    }
    // Nothing runs yet ops are left: they wait on each other (a lowering bug). They never run:
    // they start and end at infinity.
    if (!advanced) break;
  }
  return timeline;
}

}  // namespace domino::sim
