#include "exec/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exec/mpi_communicator.h"

namespace domino::exec {

void Communicator::Abort(int exit_code) { std::_Exit(exit_code); }

Result<std::unique_ptr<Communicator>> MakeLaunchCommunicator(const LaunchEnv& env) {
  if (env.size == 1) return std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>());
  Result<std::unique_ptr<Communicator>> mpi = MakeMpiCommunicator();
  if (!mpi.ok()) return mpi.error();
  const Communicator& c = **mpi;
  if (c.size() != env.size || c.rank() != env.rank)
    return Error(fmt::format("MPI reports rank {} of {}, the launcher rank {} of {} ({})", c.rank(),
                             c.size(), env.rank, env.size, env.source));
  return mpi;
}

namespace {

// Line `index` of `text` (without its newline); empty past the end.
std::string_view LineOf(std::string_view text, size_t index) {
  for (size_t i = 0; i < index; ++i) {
    const size_t end = text.find('\n');
    if (end == std::string_view::npos) return {};
    text.remove_prefix(end + 1);
  }
  return text.substr(0, text.find('\n'));
}

}  // namespace

Status CheckSameOnEveryRank(Communicator& comm, std::string_view text) {
  const int n = comm.size();
  if (n == 1) return Status::Ok();
  if (text.size() > kMaxAgreedChars)
    return Error(fmt::format("the settings to agree on take {} characters, over {}", text.size(),
                             kMaxAgreedChars));
  // Lengths first, then every rank's text padded to the longest, a character per float (exact:
  // floats hold integers up to 2^24).
  const float length = static_cast<float>(text.size());
  std::vector<float> lengths(n);
  DOMINO_RETURN_IF_ERROR(comm.AllGather(&length, lengths.data(), 1));
  const auto longest = static_cast<int64_t>(*std::max_element(lengths.begin(), lengths.end()));
  if (longest == 0) return Status::Ok();
  std::vector<float> mine(longest, -1.0f), all(static_cast<size_t>(longest) * n);
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  DOMINO_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), longest));
  auto text_of = [&](int r) {
    std::string out(static_cast<size_t>(lengths[r]), '\0');
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<char>(static_cast<int>(all[r * longest + i]));
    return out;
  };
  const std::string first = text_of(0);
  for (int r = 1; r < n; ++r) {
    const std::string other = text_of(r);
    if (other == first) continue;
    // (Texts that differ only in their newlines end the search at the longer one's last line.)
    const auto lines = static_cast<size_t>(std::max(std::count(first.begin(), first.end(), '\n'),
                                                    std::count(other.begin(), other.end(), '\n')));
    size_t line = 0;
    while (line < lines && LineOf(first, line) == LineOf(other, line)) ++line;
    return Error(fmt::format(
        "rank {} was given another plan or other options than rank 0 (rank 0: '{}', rank {}: "
        "'{}'); every rank must run the same: launch them with one command line",
        r, LineOf(first, line), r, LineOf(other, line)));
  }
  return Status::Ok();
}

Status Communicator::AllToAll(const float* in, float* out, int64_t count) {
  const int n = size(), me = rank();
  std::copy_n(in + me * count, count, out + me * count);
  // Round k: send to the rank k ahead, receive from the rank k behind.
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me + n - k) % n;
    DOMINO_RETURN_IF_ERROR(SendRecv(in + to * count, to, out + from * count, from, count));
  }
  return Status::Ok();
}

Status Communicator::Send(const float*, int64_t, int) {
  return Error("this communicator has no point-to-point sends");
}

Status Communicator::Recv(float*, int64_t, int) {
  return Error("this communicator has no point-to-point receives");
}

Result<std::unique_ptr<Communicator>> Communicator::Split(int, int) {
  return Error("this communicator cannot be split into groups");
}

Status SelfCommunicator::AllReduce(float*, int64_t) { return Status::Ok(); }

Status SelfCommunicator::ReduceScatter(const float* in, float* out, int64_t count) {
  std::copy(in, in + count, out);
  return Status::Ok();
}

Status SelfCommunicator::AllGather(const float* in, float* out, int64_t count) {
  std::copy(in, in + count, out);
  return Status::Ok();
}

Status SelfCommunicator::Gather(const float* in, float* out, int64_t count) {
  std::copy(in, in + count, out);
  return Status::Ok();
}

Status SelfCommunicator::SendRecv(const float* send, int to, float* recv, int from, int64_t count) {
  if (to != 0 || from != 0) return Error("send/recv: a group of one has only rank 0");
  std::copy(send, send + count, recv);
  return Status::Ok();
}

Status SelfCommunicator::Send(const float* data, int64_t count, int to) {
  if (to != 0) return Error(fmt::format("send: a group of one has no rank {}", to));
  mail_.emplace_back(data, data + count);
  return Status::Ok();
}

Status SelfCommunicator::Recv(float* data, int64_t count, int from) {
  if (from != 0) return Error(fmt::format("recv: a group of one has no rank {}", from));
  if (mail_.empty()) return Error("recv: nothing was sent (a group of one would wait forever)");
  if (static_cast<int64_t>(mail_.front().size()) != count)
    return Error(
        fmt::format("recv: {} elements were sent, {} expected", mail_.front().size(), count));
  std::copy(mail_.front().begin(), mail_.front().end(), data);
  mail_.pop_front();
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> SelfCommunicator::Split(int, int) {
  return std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>());
}

namespace {

// A communicator owned elsewhere (a split LocalGroup's member), handed out as a unique_ptr.
class Borrowed final : public Communicator {
 public:
  explicit Borrowed(Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  Status AllReduce(float* data, int64_t count) override { return c_.AllReduce(data, count); }
  Status ReduceScatter(const float* in, float* out, int64_t count) override {
    return c_.ReduceScatter(in, out, count);
  }
  Status AllGather(const float* in, float* out, int64_t count) override {
    return c_.AllGather(in, out, count);
  }
  Status Gather(const float* in, float* out, int64_t count) override {
    return c_.Gather(in, out, count);
  }
  Status AllToAll(const float* in, float* out, int64_t count) override {
    return c_.AllToAll(in, out, count);
  }
  Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) override {
    return c_.SendRecv(send, to, recv, from, count);
  }
  Status Send(const float* data, int64_t count, int to) override {
    return c_.Send(data, count, to);
  }
  Status Recv(float* data, int64_t count, int from) override { return c_.Recv(data, count, from); }
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    return c_.Split(color, key);
  }
  [[noreturn]] void Abort(int exit_code) override {
    c_.Abort(exit_code);
    std::_Exit(exit_code);  // not reached
  }

 private:
  Communicator& c_;
};

}  // namespace

// Each collective is two phases separated by barriers: every rank publishes its input pointer,
// then every rank reads what it needs from the others, then a barrier before anyone may reuse
// or free its buffer.
struct LocalGroup::Shared {
  explicit Shared(int n) : size(n), inputs(n, nullptr) {}
  // False when the group is stopped (LocalGroup::Stop) before every member arrived: the caller's
  // collective fails.
  bool Barrier() {
    std::unique_lock lock(mutex);
    if (stopped) return false;
    const uint64_t generation = barrier_generation;
    if (++arrived == size) {
      arrived = 0;
      ++barrier_generation;
      cv.notify_all();
      return true;
    }
    cv.wait(lock, [&] { return barrier_generation != generation || stopped; });
    return barrier_generation != generation;  // all arrived, even if stopped since
  }
  int size;
  std::vector<const float*> inputs;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t barrier_generation = 0;
  bool stopped = false;
  // Point-to-point messages in flight, by (from, to), in send order.
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail;
  // Split: each rank's (color, key), then its new group and rank in it; the groups made.
  std::vector<std::pair<int, int>> split_requests;
  std::vector<std::pair<LocalGroup*, int>> split_assigned;
  std::vector<std::unique_ptr<LocalGroup>> children;
};

class LocalGroup::Member final : public Communicator {
 public:
  Member(Shared* shared, int rank) : shared_(shared), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }

  Status AllReduce(float* data, int64_t count) override {
    std::vector<float> sum(static_cast<size_t>(count));
    if (!Publish(data)) return Stopped();
    SumBlock(0, count, sum.data());
    if (!shared_->Barrier()) return Stopped();  // everyone has read every input
    std::copy(sum.begin(), sum.end(), data);
    return Status::Ok();
  }
  Status ReduceScatter(const float* in, float* out, int64_t count) override {
    if (!Publish(in)) return Stopped();
    SumBlock(rank_ * count, count, out);
    if (!shared_->Barrier()) return Stopped();
    return Status::Ok();
  }
  Status AllGather(const float* in, float* out, int64_t count) override {
    if (!Publish(in)) return Stopped();
    for (int r = 0; r < shared_->size; ++r)
      std::copy(shared_->inputs[r], shared_->inputs[r] + count, out + r * count);
    if (!shared_->Barrier()) return Stopped();
    return Status::Ok();
  }
  Status Gather(const float* in, float* out, int64_t count) override {
    if (!Publish(in)) return Stopped();
    if (rank_ == 0)
      for (int r = 0; r < shared_->size; ++r)
        std::copy(shared_->inputs[r], shared_->inputs[r] + count, out + r * count);
    if (!shared_->Barrier()) return Stopped();
    return Status::Ok();
  }
  // Deadlock-free in a ring: the send never waits for its receiver.
  Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(Send(send, count, to));
    return Recv(recv, count, from);
  }
  Status Send(const float* data, int64_t count, int to) override {
    if (to < 0 || to >= shared_->size)
      return Error(fmt::format("send: peer {} is not a rank of {}", to, shared_->size));
    std::unique_lock lock(shared_->mutex);
    shared_->mail[{rank_, to}].emplace_back(data, data + count);
    shared_->cv.notify_all();
    return Status::Ok();
  }
  Status Recv(float* data, int64_t count, int from) override {
    if (from < 0 || from >= shared_->size)
      return Error(fmt::format("recv: peer {} is not a rank of {}", from, shared_->size));
    std::unique_lock lock(shared_->mutex);
    auto& inbox = shared_->mail[{from, rank_}];
    shared_->cv.wait(lock, [&] { return !inbox.empty() || shared_->stopped; });
    if (inbox.empty()) return Stopped();
    std::vector<float> message = std::move(inbox.front());
    inbox.pop_front();
    if (static_cast<int64_t>(message.size()) != count)
      return Error(fmt::format("recv: rank {} sent {} elements, rank {} expected {}", from,
                               message.size(), rank_, count));
    std::copy(message.begin(), message.end(), data);
    return Status::Ok();
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    Shared& sh = *shared_;
    {
      std::unique_lock lock(sh.mutex);
      if (sh.split_requests.empty()) sh.split_requests.resize(sh.size);
      sh.split_requests[rank_] = {color, key};
    }
    if (!sh.Barrier()) return Stopped();
    if (rank_ == 0) {
      // Rank 0 makes every new group; each rank then takes its member.
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color: (key, rank)
      for (int r = 0; r < sh.size; ++r)
        by_color[sh.split_requests[r].first].push_back({sh.split_requests[r].second, r});
      sh.split_assigned.assign(sh.size, {nullptr, 0});
      for (auto& [c, members] : by_color) {
        std::sort(members.begin(), members.end());
        sh.children.push_back(std::make_unique<LocalGroup>(static_cast<int>(members.size())));
        for (size_t i = 0; i < members.size(); ++i)
          sh.split_assigned[members[i].second] = {sh.children.back().get(), static_cast<int>(i)};
      }
    }
    if (!sh.Barrier()) return Stopped();
    auto [group, index] = sh.split_assigned[rank_];
    if (!sh.Barrier()) return Stopped();  // before a later split overwrites the assignment
    return std::unique_ptr<Communicator>(std::make_unique<Borrowed>(group->member(index)));
  }

 private:
  bool Publish(const float* in) {
    shared_->inputs[rank_] = in;
    return shared_->Barrier();
  }
  static Error Stopped() { return Error("the group was stopped: a peer failed"); }
  // out[i] = sum over ranks, in rank order, of input[offset + i].
  void SumBlock(int64_t offset, int64_t count, float* out) const {
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < shared_->size; ++r) sum += shared_->inputs[r][offset + i];
      out[i] = sum;
    }
  }

  Shared* shared_;
  int rank_;
};

LocalGroup::LocalGroup(int size) : shared_(std::make_unique<Shared>(size)) {
  for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<Member>(shared_.get(), r));
}

LocalGroup::~LocalGroup() = default;

Communicator& LocalGroup::member(int rank) { return *members_[rank]; }

void LocalGroup::Stop() {
  std::vector<LocalGroup*> children;
  {
    std::unique_lock lock(shared_->mutex);
    shared_->stopped = true;
    shared_->cv.notify_all();
    for (const auto& child : shared_->children) children.push_back(child.get());
  }
  for (LocalGroup* child : children) child->Stop();
}

}  // namespace domino::exec
