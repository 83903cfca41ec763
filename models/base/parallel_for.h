#ifndef DOMINO_MODELS_BASE_PARALLEL_FOR_H_
#define DOMINO_MODELS_BASE_PARALLEL_FOR_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace domino {

// Runs `work(i)` once for each i in [0, n) on `threads` threads (the calling one among them),
// taking the indices in turn, until `halt()` (asked before each index, from any thread) returns
// true. `work` must be safe to run on several indices at once; what it computes for an index
// should not depend on the others', so that the result is the same with any thread count.
template <typename Work, typename Halt>
void ParallelFor(size_t n, int threads, const Halt& halt, const Work& work) {
  std::atomic<size_t> next{0};
  std::atomic<bool> halted{false};
  auto run = [&] {
    for (size_t i = next++; i < n && !halted; i = next++) {
      if (halt()) {
        halted = true;
        return;
      }
      work(i);
    }
  };
  const size_t workers = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), n);
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(run);
  run();
  for (std::thread& thread : pool) thread.join();
}

template <typename Work>
void ParallelFor(size_t n, int threads, const Work& work) {
  ParallelFor(
      n, threads, [] { return false; }, work);
}

}  // namespace domino

#endif  // DOMINO_MODELS_BASE_PARALLEL_FOR_H_
