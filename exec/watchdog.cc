#include "exec/watchdog.h"

namespace domino::exec {

namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Watchdog::Watchdog(double timeout_s, std::function<void(double)> on_timeout)
    : timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)), last_beat_ns_(NowNs()) {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      stop_cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_) break;
      const double idle_s = (NowNs() - last_beat_ns_.load()) * 1e-9;
      if (idle_s > timeout_s_) {
        on_timeout_(idle_s);
        break;
      }
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void Watchdog::Beat() { last_beat_ns_.store(NowNs()); }

}  // namespace domino::exec
