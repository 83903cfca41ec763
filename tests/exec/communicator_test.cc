#include "exec/communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/launch_env.h"

namespace domino::exec {
namespace {

// Runs fn(rank, communicator) on `n` threads of one LocalGroup.
template <typename Fn>
void OnRanks(int n, Fn fn) {
  LocalGroup group(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, group.member(r)); });
  for (std::thread& t : threads) t.join();
}

TEST(LocalGroupTest, AllReduceSumsOverRanks) {
  OnRanks(3, [](int r, Communicator& c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), 3);
    std::vector<float> v = {1.0f * r, 10.0f + r};
    ASSERT_TRUE(c.AllReduce(v.data(), 2).ok());
    EXPECT_EQ(v[0], 0 + 1 + 2);
    EXPECT_EQ(v[1], 10 + 11 + 12);
    // Twice in a row: buffers are reused safely.
    ASSERT_TRUE(c.AllReduce(v.data(), 2).ok());
    EXPECT_EQ(v[0], 9);
  });
}

TEST(LocalGroupTest, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  OnRanks(2, [](int r, Communicator& c) {
    std::vector<float> in = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r};  // two blocks of two
    std::vector<float> out(2);
    ASSERT_TRUE(c.ReduceScatter(in.data(), out.data(), 2).ok());
    EXPECT_EQ(out, r == 0 ? (std::vector<float>{3, 5}) : (std::vector<float>{7, 9}));
  });
}

TEST(LocalGroupTest, AllGatherAndGatherConcatenateInRankOrder) {
  OnRanks(3, [](int r, Communicator& c) {
    std::vector<float> in = {static_cast<float>(r), static_cast<float>(10 * r)};
    std::vector<float> all(6);
    ASSERT_TRUE(c.AllGather(in.data(), all.data(), 2).ok());
    EXPECT_EQ(all, (std::vector<float>{0, 0, 1, 10, 2, 20}));
    std::vector<float> root(r == 0 ? 6 : 0);
    ASSERT_TRUE(c.Gather(in.data(), root.data(), 2).ok());
    if (r == 0) {
      EXPECT_EQ(root, (std::vector<float>{0, 0, 1, 10, 2, 20}));
    }
  });
}

TEST(LocalGroupTest, SendRecvPassesAlongARing) {
  OnRanks(4, [](int r, Communicator& c) {
    std::vector<float> send = {static_cast<float>(r), 100.0f + r}, recv(2);
    ASSERT_TRUE(c.SendRecv(send.data(), (r + 1) % 4, recv.data(), (r + 3) % 4, 2).ok());
    EXPECT_EQ(recv, (std::vector<float>{static_cast<float>((r + 3) % 4), 100.0f + (r + 3) % 4}));
  });
}

TEST(LocalGroupTest, AllToAllGivesEachRankItsBlockOfEveryRank) {
  // Rank r sends block j (2 elements: 10 r + j, -(10 r + j)) to rank j; rank j receives block
  // r from rank r. Also within a split group (the a2a groups of context parallelism).
  OnRanks(3, [](int r, Communicator& c) {
    std::vector<float> in, out(6), want;
    for (int j = 0; j < 3; ++j) in.insert(in.end(), {10.0f * r + j, -(10.0f * r + j)});
    for (int s = 0; s < 3; ++s) want.insert(want.end(), {10.0f * s + r, -(10.0f * s + r)});
    ASSERT_TRUE(c.AllToAll(in.data(), out.data(), 2).ok());
    EXPECT_EQ(out, want);
  });
  OnRanks(4, [](int r, Communicator& c) {
    Result<std::unique_ptr<Communicator>> pair = c.Split(r / 2, r % 2);
    ASSERT_TRUE(pair.ok()) << pair.message();
    const std::vector<float> in = {100.0f * r, 100.0f * r + 1};
    std::vector<float> out(2);
    ASSERT_TRUE((*pair)->AllToAll(in.data(), out.data(), 1).ok());
    const int first = r / 2 * 2;  // the pair's ranks: first, first + 1
    EXPECT_EQ(out, (std::vector<float>{100.0f * first + r % 2, 100.0f * (first + 1) + r % 2}));
  });
}

TEST(LocalGroupTest, StopFailsWhatWaitsForAFailedRank) {
  // Rank 2 fails before the all-reduce and stops the group: ranks 0 and 1, waiting in it (or in a
  // receive from rank 2, or in a split group's collective), fail instead of waiting forever.
  LocalGroup group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = group.member(r);
      if (r == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        group.Stop();
        return;
      }
      std::vector<float> v = {1.0f};
      Status status = r == 0 ? c.AllReduce(v.data(), 1) : c.Recv(v.data(), 1, 2);
      errors[r] = status.ok() ? "ok" : status.message();
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors[0], "the group was stopped: a peer failed");
  EXPECT_EQ(errors[1], "the group was stopped: a peer failed");
  // A split group stops with its parent.
  LocalGroup parent(2);
  std::vector<std::string> split_errors(2);
  threads.clear();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Result<std::unique_ptr<Communicator>> alone = parent.member(r).Split(r, 0);
      ASSERT_TRUE(alone.ok()) << alone.message();
      if (r == 1) {
        parent.Stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<float> v = {1.0f};
      Status status = (*alone)->AllReduce(v.data(), 1);
      split_errors[r] = status.ok() ? "ok" : status.message();
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(split_errors[0], "the group was stopped: a peer failed");
}

TEST(LocalGroupTest, SendsDoNotWaitForTheReceiverAndArriveInOrder) {
  OnRanks(2, [](int r, Communicator& c) {
    // Both ranks send twice before either receives (a pipeline's forward and backward cross).
    const int peer = 1 - r;
    for (float k : {1.0f, 2.0f}) {
      std::vector<float> send = {10.0f * r + k};
      ASSERT_TRUE(c.Send(send.data(), 1, peer).ok());
    }
    std::vector<float> got(1);
    for (float k : {1.0f, 2.0f}) {
      ASSERT_TRUE(c.Recv(got.data(), 1, peer).ok());
      EXPECT_EQ(got[0], 10.0f * peer + k);
    }
    EXPECT_FALSE(c.Send(got.data(), 1, 2).ok());
  });
}

TEST(LocalGroupTest, SplitMakesGroupsOrderedByKey) {
  OnRanks(4, [](int r, Communicator& c) {
    // Even and odd ranks, ranked in reverse.
    Result<std::unique_ptr<Communicator>> sub = c.Split(r % 2, -r);
    ASSERT_TRUE(sub.ok()) << sub.message();
    Communicator& g = **sub;
    EXPECT_EQ(g.size(), 2);
    EXPECT_EQ(g.rank(), r < 2 ? 1 : 0);
    std::vector<float> v = {static_cast<float>(r)};
    ASSERT_TRUE(g.AllReduce(v.data(), 1).ok());
    EXPECT_EQ(v[0], r % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f);
    // A second split of the same group.
    Result<std::unique_ptr<Communicator>> all = c.Split(0, r);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ((*all)->size(), 4);
    EXPECT_EQ((*all)->rank(), r);
  });
}

TEST(CheckSameOnEveryRankTest, NamesTheFirstRankAndLineThatDiffer) {
  // The same settings on every rank: fine, and again (the collectives leave nothing behind).
  OnRanks(3, [](int, Communicator& c) {
    EXPECT_TRUE(CheckSameOnEveryRank(c, "model: m\ntp: 2\n").ok());
    EXPECT_TRUE(CheckSameOnEveryRank(c, "").ok());
  });
  // Rank 2 differs on its second line, rank 1 not at all: every rank gets the same error.
  std::vector<std::string> messages(3);
  OnRanks(3, [&](int r, Communicator& c) {
    const std::string text =
        r == 2 ? "model: m\nrow_split: 2\nseed: 1\n" : "model: m\nrow_split: 1\nseed: 1\n";
    Status status = CheckSameOnEveryRank(c, text);
    messages[r] = status.ok() ? "ok" : status.message();
  });
  EXPECT_EQ(messages[0],
            "rank 2 was given another plan or other options than rank 0 (rank 0: 'row_split: 1', "
            "rank 2: 'row_split: 2'); every rank must run the same: launch them with one command "
            "line");
  EXPECT_EQ(messages[1], messages[0]);
  EXPECT_EQ(messages[2], messages[0]);
  // Texts of other lengths, or differing only by a last newline, end the search.
  OnRanks(2, [](int r, Communicator& c) {
    EXPECT_FALSE(CheckSameOnEveryRank(c, r == 0 ? "a\n" : "a").ok());
    Status longer = CheckSameOnEveryRank(c, r == 0 ? "a\nb\n" : "a\n");
    EXPECT_NE(longer.message().find("(rank 0: 'b', rank 1: '')"), std::string::npos)
        << longer.message();
  });
}

TEST(SelfCommunicatorTest, SendsToItself) {
  SelfCommunicator c;
  std::vector<float> v = {1, 2}, got(2);
  EXPECT_FALSE(c.Recv(got.data(), 2, 0).ok());  // nothing sent: an error, not a hang
  ASSERT_TRUE(c.Send(v.data(), 2, 0).ok());
  EXPECT_FALSE(c.Recv(got.data(), 3, 0).ok());  // the wrong size
  ASSERT_TRUE(c.Send(v.data(), 2, 0).ok());
  ASSERT_TRUE(c.Recv(got.data(), 2, 0).ok());
  EXPECT_EQ(got, v);
  Result<std::unique_ptr<Communicator>> sub = c.Split(3, 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)->size(), 1);
}

TEST(SelfCommunicatorTest, CollectivesOfOneAreCopies) {
  SelfCommunicator c;
  std::vector<float> v = {1, 2}, out(2);
  ASSERT_TRUE(c.AllReduce(v.data(), 2).ok());
  EXPECT_EQ(v, (std::vector<float>{1, 2}));
  ASSERT_TRUE(c.AllGather(v.data(), out.data(), 2).ok());
  EXPECT_EQ(out, v);
  ASSERT_TRUE(c.ReduceScatter(v.data(), out.data(), 2).ok());
  EXPECT_EQ(out, v);
  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_TRUE(c.AllToAll(v.data(), out.data(), 2).ok());
  EXPECT_EQ(out, v);
  std::vector<float> got(2);
  ASSERT_TRUE(c.SendRecv(v.data(), 0, got.data(), 0, 2).ok());
  EXPECT_EQ(got, v);
  EXPECT_FALSE(c.SendRecv(v.data(), 1, got.data(), 0, 2).ok());
}

using Env = std::map<std::string, std::string>;
Result<LaunchEnv> Read(const Env& env) {
  return ReadLaunchEnv([&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(LaunchEnvTest, ReadsEachLauncher) {
  Result<LaunchEnv> none = Read({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size, 1);
  EXPECT_EQ(none->rank, 0);
  Result<LaunchEnv> ompi = Read({{"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_RANK", "3"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  ASSERT_TRUE(ompi.ok());
  EXPECT_EQ(ompi->size, 4);
  EXPECT_EQ(ompi->rank, 3);
  EXPECT_EQ(ompi->local_rank, 1);
  EXPECT_NE(ompi->source.find("OpenMPI"), std::string::npos);
  Result<LaunchEnv> slurm =
      Read({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "5"}});
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->size, 8);
  EXPECT_NE(slurm->source.find("Slurm"), std::string::npos);
  Result<LaunchEnv> torch = Read({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(torch.ok());
  EXPECT_EQ(torch->rank, 1);
  EXPECT_NE(torch->source.find("torchrun"), std::string::npos);
}

TEST(LaunchEnvTest, RejectsMalformedValues) {
  Result<LaunchEnv> text = Read({{"WORLD_SIZE", "two"}, {"RANK", "0"}});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("WORLD_SIZE"), std::string::npos) << text.message();
  Result<LaunchEnv> outside = Read({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "2"}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.message().find("SLURM_PROCID"), std::string::npos) << outside.message();
  Result<LaunchEnv> half = Read({{"PMI_SIZE", "2"}});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.message().find("PMI_RANK"), std::string::npos) << half.message();
}

}  // namespace
}  // namespace domino::exec
