#ifndef DOMINO_EXEC_WATCHDOG_H_
#define DOMINO_EXEC_WATCHDOG_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace domino::exec {

// Watchdog calls `on_timeout` (from its own thread) when Beat() has not been called for
// `timeout_s` seconds: a rank blocked in a collective whose peer died or hangs gets a clear
// message and an abort instead of waiting forever. Stops when destroyed.
class Watchdog {
 public:
  Watchdog(double timeout_s, std::function<void(double idle_s)> on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Beat();

 private:
  using Clock = std::chrono::steady_clock;
  double timeout_s_;
  std::function<void(double)> on_timeout_;
  std::atomic<int64_t> last_beat_ns_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_WATCHDOG_H_
