#ifndef DOMINO_EXEC_COMMUNICATOR_H_
#define DOMINO_EXEC_COMMUNICATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "models/base/result.h"

namespace domino::exec {

// Communicator runs the collectives of one TP group on contiguous fp32 host buffers, summing in
// reductions. Every rank calls the same collectives in the same order (the Schedule is the same
// on every rank). Counts are per rank; ranks are 0..size()-1 and a rank's part of a scattered or
// gathered buffer is the rank-th block of `count` elements.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, count) = sum over ranks, in place.
  virtual Status AllReduce(float* data, int64_t count) = 0;
  // out[0, count) = block `rank` of the sum over ranks of in[0, size * count).
  virtual Status ReduceScatter(const float* in, float* out, int64_t count) = 0;
  // out[r * count, (r + 1) * count) = rank r's in[0, count), on every rank.
  virtual Status AllGather(const float* in, float* out, int64_t count) = 0;
  // As AllGather, but only rank 0 receives; `out` may be null elsewhere.
  virtual Status Gather(const float* in, float* out, int64_t count) = 0;
  // out[r * count, (r + 1) * count) = rank r's in[rank * count, (rank + 1) * count), on every
  // rank (context parallelism's a2a). By default, size - 1 SendRecv rounds.
  virtual Status AllToAll(const float* in, float* out, int64_t count);
  // Sends send[0, count) to rank `to` and receives recv[0, count) from rank `from` (pipeline
  // activations and gradients); deadlock-free when every rank of a ring or chain calls it.
  virtual Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) = 0;
  // Point-to-point for pipeline schedules, where a rank's sends and receives do not pair up.
  // Send returns once data[0, count) is copied (it never waits for the receiver); Recv waits for
  // the next message from rank `from`, which must hold `count` elements. Messages between two
  // ranks arrive in send order.
  virtual Status Send(const float* data, int64_t count, int to);
  virtual Status Recv(float* data, int64_t count, int from);
  // Splits the group, called by every rank: the ranks of one `color` form a new group, ranked by
  // `key` (ties by rank). The new group lives no longer than this one.
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key);
  // Ends every rank of the group now (a peer is dead or stuck); never returns.
  [[noreturn]] virtual void Abort(int exit_code);
};

// Checks, called by every rank of `comm` before its first collective, that every rank was given
// the same `text` (its plan and options, a setting a line): ranks launched with different plans
// would call collectives of different sizes, and corrupt each other's buffers. Every rank gets the
// same error, naming the first rank whose text differs from rank 0's and the first line that
// differs. `text` is at most kMaxAgreedChars characters.
inline constexpr size_t kMaxAgreedChars = 1 << 20;
Status CheckSameOnEveryRank(Communicator& comm, std::string_view text);

// The group of one: every collective is a copy.
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllReduce(float* data, int64_t count) override;
  Status ReduceScatter(const float* in, float* out, int64_t count) override;
  Status AllGather(const float* in, float* out, int64_t count) override;
  Status Gather(const float* in, float* out, int64_t count) override;
  Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) override;
  Status Send(const float* data, int64_t count, int to) override;
  Status Recv(float* data, int64_t count, int from) override;
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 private:
  std::deque<std::vector<float>> mail_;  // sent to itself, not yet received
};

// Ranks as threads of one process, for tests: LocalGroup(n).member(r) is rank r's communicator;
// each member must be used by one thread. Reductions add in rank order, so every rank gets
// bit-identical results, like NCCL and MPI.
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;
  Communicator& member(int rank);
  // Stops the group and the groups split from it, from any thread: every collective, receive and
  // split waiting or called on a member then fails ("the group was stopped: a peer failed"), so
  // that the other ranks of a rank that failed return instead of waiting for it forever.
  void Stop();

 private:
  struct Shared;
  class Member;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_COMMUNICATOR_H_
