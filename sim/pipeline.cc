#include "sim/pipeline.h"

#include <algorithm>

#include <fmt/format.h>

namespace domino::sim {

std::vector<PipelineOp> PipelineOrder(int s, int stages, int chunks, int m) {
  std::vector<PipelineOp> order;
  if (chunks == 1) {
    const int warmup = std::min(m, stages - s - 1);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({f, 0, false});
    for (; f < m; ++f, ++b) {
      order.push_back({f, 0, false});
      order.push_back({b, 0, true});
    }
    for (; b < m; ++b) order.push_back({b, 0, true});
    return order;
  }
  // Interleaved: virtual micro-batch k runs chunk (k mod (stages * chunks)) / stages of
  // micro-batch (k / (stages * chunks)) * stages + k mod stages; backward walks chunks in reverse.
  const int total = m * chunks;
  auto forward = [&](int k) {
    const int group = stages * chunks;
    return PipelineOp{(k / group) * stages + k % stages, (k % group) / stages, false};
  };
  auto backward = [&](int k) {
    PipelineOp op = forward(k);
    op.chunk = chunks - 1 - op.chunk;
    op.backward = true;
    return op;
  };
  const int warmup = std::min(total, (stages - s - 1) * 2 + (chunks - 1) * stages);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(forward(f));
  for (; f < total; ++f, ++b) {
    order.push_back(forward(f));
    order.push_back(backward(b));
  }
  for (; b < total; ++b) order.push_back(backward(b));
  return order;
}

Result<PipelineResult> SimulatePipeline(const PipelineSpec& spec) {
  const int p = spec.stages, v = spec.chunks, m = spec.micro_batches;
  if (p < 1 || v < 1 || m < 1)
    return Error(fmt::format("pipeline of {} stages, {} chunks, {} micro-batches", p, v, m));
  if (static_cast<int>(spec.times.size()) != p * v)
    return Error(fmt::format("pipeline needs {} chunk times, has {}", p * v, spec.times.size()));
  if (v > 1 && m % p != 0)
    return Error(fmt::format("the interleaved schedule needs micro-batches ({}) to be a multiple "
                             "of the pipeline stages ({})", m, p));
  const int virtual_stages = p * v;
  // done[(phase * V + vs) * m + mb]: end time of that op, or -1.
  std::vector<double> done(2 * static_cast<size_t>(virtual_stages) * m, -1.0);
  auto slot = [&](bool backward, int vs, int mb) -> double& {
    return done[(static_cast<size_t>(backward) * virtual_stages + vs) * m + mb];
  };
  PipelineResult result;
  result.stages.resize(p);
  for (int s = 0; s < p; ++s) result.stages[s] = PipelineOrder(s, p, v, m);
  result.last_backward_start_us.assign(p * v, 0);
  result.last_backward_end_us.assign(p * v, 0);
  result.stage_end_us.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  size_t left = 0;
  for (const auto& ops : result.stages) left += ops.size();
  while (left > 0) {
    bool progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < result.stages[s].size()) {
        PipelineOp& op = result.stages[s][next[s]];
        const int vs = op.chunk * p + s;
        double ready = 0;
        if (!op.backward) {
          if (vs > 0) {
            double input = slot(false, vs - 1, op.micro_batch);
            if (input < 0) break;
            ready = input + spec.p2p_us;
          }
        } else if (vs + 1 < virtual_stages) {
          double input = slot(true, vs + 1, op.micro_batch);
          if (input < 0) break;
          ready = input + spec.p2p_us;
        } else {
          double own = slot(false, vs, op.micro_batch);
          if (own < 0) break;
          ready = own;
        }
        const ChunkTimes& t = spec.times[s * v + op.chunk];
        op.start_us = std::max(ready, free_at[s]);
        op.end_us = op.start_us + (op.backward ? t.bwd_us : t.fwd_us);
        free_at[s] = op.end_us;
        slot(op.backward, vs, op.micro_batch) = op.end_us;
        if (op.backward) {
          result.last_backward_start_us[s * v + op.chunk] = op.start_us;
          result.last_backward_end_us[s * v + op.chunk] = op.end_us;
        }
        ++next[s];
        --left;
        progress = true;
      }
    }
    if (!progress) return Error("pipeline schedule deadlocked (an op waits for one never run)");
  }
  for (int s = 0; s < p; ++s) {
    result.stage_end_us[s] = free_at[s];
    result.end_us = std::max(result.end_us, free_at[s]);
  }
  return result;
}

}  // namespace domino::sim
