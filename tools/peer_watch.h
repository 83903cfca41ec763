#ifndef DOMINO_TOOLS_PEER_WATCH_H_
#define DOMINO_TOOLS_PEER_WATCH_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "exec/communicator.h"
#include "exec/watchdog.h"

namespace domino::cli {

// A launched rank's guard against its peers, for the commands that run collectives (execute,
// calibrate): when this rank makes no progress for `timeout_s` seconds (a peer has died or hangs
// and this rank waits on it in a collective), one line says so and every rank is aborted (exit
// 3) instead of waiting forever.
//
// A run that fails on this rank alone (a device error, say) would leave its peers waiting for it
// the same way: FailRun says why on this rank and aborts every rank at once.
//
// For tests, DOMINO_FAULT_INJECT plays such a peer: "die@RANK:STEP" ends rank RANK abruptly at
// its step STEP, "hang@RANK:STEP" stops it there forever, "fail@RANK:STEP" fails its run there.
class PeerWatch {
 public:
  // `command` and `steps` (what a step is: "ops", "measurements") are named in the message;
  // `timeout_s` is the --timeout flag's value, and `allowance_s` more seconds that one step may
  // take (calibrate's --soak).
  PeerWatch(std::string command, std::string steps, int rank, double timeout_s,
            exec::Communicator* group, double allowance_s = 0);

  // Step `done` (counted from 1) is done: beats the watchdog.
  void Step(size_t done);
  // Ends the run, failed on this rank: prints "domino COMMAND: [rank R: ]MESSAGE" (a rank other
  // than 0 waits a second first, so that where every rank fails alike rank 0 says it, once) and
  // aborts every rank (exit 1), which may wait for this one in a collective. Alone, as Fail.
  [[noreturn]] void FailRun(const std::string& message);

 private:
  struct Fault {
    std::string kind;  // "die", "hang", "fail" or "": none
    int rank = -1;
    long step = -1;
  };
  static Fault ParseFault(const char* text);

  const std::string command_;
  const std::string steps_;
  const int rank_;
  const double timeout_s_;
  exec::Communicator* const group_;
  const Fault fault_;
  std::atomic<size_t> done_{0};
  exec::Watchdog watchdog_;  // last: its thread reads the members above
};

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_PEER_WATCH_H_
