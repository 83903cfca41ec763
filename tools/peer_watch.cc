#include "tools/peer_watch.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "tools/command.h"

namespace domino::cli {

PeerWatch::PeerWatch(std::string command, std::string steps, int rank, double timeout_s,
                     exec::Communicator* group, double allowance_s)
    : command_(std::move(command)),
      steps_(std::move(steps)),
      rank_(rank),
      timeout_s_(timeout_s),
      group_(group),
      fault_(ParseFault(std::getenv("DOMINO_FAULT_INJECT"))),
      watchdog_(timeout_s + allowance_s, [this](double idle_s) {
        const std::string line = fmt::format(
            "domino {}: rank {}: no progress for {:.0f} s after {} {}; a peer has died or "
            "hangs (--timeout {:g}); aborting every rank\n",
            command_, rank_, idle_s, done_.load(), steps_, timeout_s_);
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fflush(stderr);
        group_->Abort(kExitBadInput);  // a failed run
      }) {}

void PeerWatch::Step(size_t done) {
  watchdog_.Beat();
  done_ = done;
  if (fault_.rank != rank_ || static_cast<size_t>(fault_.step) != done) return;
  if (fault_.kind == "die") std::_Exit(9);
  if (fault_.kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  if (fault_.kind == "fail") FailRun(fmt::format("injected failure after {} {}", done, steps_));
}

void PeerWatch::FailRun(const std::string& message) {
  if (group_ == nullptr || group_->size() <= 1) FailOnRank(command_, rank_, message);
  if (rank_ != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::string line = fmt::format("domino {}: {}{}\n", command_,
                                       rank_ == 0 ? "" : fmt::format("rank {}: ", rank_), message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  group_->Abort(kExitBadInput);
  std::_Exit(kExitBadInput);  // not reached: Abort never returns
}

PeerWatch::Fault PeerWatch::ParseFault(const char* text) {
  Fault fault;
  if (text == nullptr) return fault;
  const std::string s(text);
  const size_t at = s.find('@'), colon = s.find(':');
  if (at == std::string::npos || colon == std::string::npos || colon < at) return fault;
  fault.kind = s.substr(0, at);
  fault.rank = std::atoi(s.substr(at + 1, colon - at - 1).c_str());
  fault.step = std::atol(s.substr(colon + 1).c_str());
  return fault;
}

}  // namespace domino::cli
