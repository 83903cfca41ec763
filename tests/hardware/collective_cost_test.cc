#include "hardware/collective_cost.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/hardware/test_node.h"

namespace domino {
namespace {

using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr Collective kAllKinds[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                    Collective::kAllGather, Collective::kSendRecv,
                                    Collective::kAllToAll};

// A DGX-H100-like node with NVLS off, so every figure below is checkable by hand: no bandwidth
// ramp and no LL protocol (LlWinsSmallMessages and BandwidthRampsWithSize cover them).
NodeSpec TestNode() { return testing_util::HandCheckedNode(); }

NodeSpec WithNvls(NodeSpec node) {
  node.nvls = true;
  node.nvls_busbw_GBps = 480;
  node.nvls_latency_us = 25;
  return node;
}

void ExpectRelNear(double actual, double expected) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * 1e-6);
}

TEST(CollectiveCostTest, LlWinsSmallMessages) {
  NodeSpec node = TestNode();
  node.ll = LlSpec{};  // 6.6 us + 0.6 per NVLink step, half bandwidth
  // 8 bytes on 8 GPUs: 6.6 + 14 * 0.6 + 8 * 1.75 / (364.5e3 * 0.5) beats LL128 and Simple.
  CollectiveEstimate e = EstimateCollective(node, Collective::kAllReduce, 8, {8, 1, 8});
  ExpectRelNear(e.time_us, 6.6 + 14 * 0.6 + 8 * 1.75 / (364.5e3 * 0.5));
  // 1 GiB: half the bandwidth loses to Simple.
  CollectiveEstimate big = EstimateCollective(node, Collective::kAllReduce, kGiB, {8, 1, 8});
  ExpectRelNear(big.time_us, 8.4 + 14 * 3.4 + kGiB * 1.75 / 364.5e3);
}

TEST(CollectiveCostTest, BandwidthRampsWithSize) {
  NodeSpec node = TestNode();
  node.ramp = BandwidthRamp{.half_bytes = 8 * kMiB, .exponent = 0.65};
  EXPECT_DOUBLE_EQ(node.ramp.Fraction(8 * kMiB), 0.5);
  const double at64 = std::pow(8.0, 0.65) / (1 + std::pow(8.0, 0.65));
  EXPECT_NEAR(node.ramp.Fraction(64 * kMiB), at64, 1e-12);
  // At 8 MiB the ring moves its bytes at half of 364.5 GB/s (Simple; LL128 is slower here).
  CollectiveEstimate e = EstimateCollective(node, Collective::kAllGather, 8 * kMiB, {8, 1, 8});
  ExpectRelNear(e.time_us, std::min(8.4 + 7 * 3.4 + 8 * kMiB * 0.875 / (364.5e3 * 0.5),
                                    14 + 7 * 1.9 + 8 * kMiB * 0.875 / (364.5e3 * 0.5 * 0.9375)));
  // Busbw rises with size toward the plateau and never passes it.
  double previous = 0;
  for (double bytes = 1024; bytes <= 64 * kGiB; bytes *= 4) {
    double busbw = EstimateCollective(node, Collective::kAllGather, bytes, {8, 1, 8}).busbw_GBps;
    EXPECT_GT(busbw, previous);
    EXPECT_LT(busbw, 364.5);
    previous = busbw;
  }
}

TEST(CollectiveCostTest, BusbwFactors) {
  EXPECT_DOUBLE_EQ(BusbwFactor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusbwFactor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusbwFactor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusbwFactor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusbwFactor(Collective::kAllToAll, 8), 0.875);
  EXPECT_EQ(CollectiveName(Collective::kReduceScatter), "reduce-scatter");
  EXPECT_EQ(CollectiveName(Collective::kAllToAll), "all-to-all");
}

TEST(CollectiveCostTest, OneRankIsANoOp) {
  for (Collective kind : kAllKinds) {
    CollectiveEstimate e = EstimateCollective(TestNode(), kind, kGiB, {1, 1, 1});
    EXPECT_EQ(e.time_us, 0);
    EXPECT_EQ(e.busbw_GBps, 0);
    EXPECT_EQ(e.algorithm, "none");
    EXPECT_EQ(e.ctas, 0);
    EXPECT_EQ(e.hbm_bytes, 0);
  }
}

TEST(CollectiveCostTest, RingAllReduceInsideANode) {
  CollectiveEstimate e = EstimateCollective(TestNode(), Collective::kAllReduce, kGiB, {8, 1, 8});
  double expected_us = 8.4 + 14 * 3.4 + 2.0 * 7 / 8 * kGiB / (450e9 * 0.81) * 1e6;
  ExpectRelNear(e.time_us, expected_us);
  EXPECT_EQ(e.algorithm, "ring");
  ExpectRelNear(e.algbw_GBps, kGiB / (expected_us * 1e-6) / 1e9);
  ExpectRelNear(e.busbw_GBps, e.algbw_GBps * 1.75);
  EXPECT_EQ(e.ctas, 16);
  ExpectRelNear(e.hbm_bytes, kGiB * 1.75 * 2.5);
  // Large rings approach the line rate times the efficiency (~365 GB/s busbw on DGX-H100).
  EXPECT_GT(e.busbw_GBps, 360);
  EXPECT_LT(e.busbw_GBps, 364.5);
}

// Inside a node an all-to-all moves (n-1)/n of its buffer at the ring's NVLink rate, one step per
// peer: the all-gather's time. Across N nodes each rank's (n-k)/n for other nodes goes through one
// NIC, so busbw approaches N/(N-1) times a NIC's (nccl-tests #130), while its node's (k-1)/n
// crosses NVLink at the same time.
TEST(CollectiveCostTest, AllToAll) {
  const double bytes = 256 * kMiB;
  CollectiveEstimate inside =
      EstimateCollective(TestNode(), Collective::kAllToAll, bytes, {8, 1, 8});
  ExpectRelNear(inside.time_us, 8.4 + 7 * 3.4 + 0.875 * bytes / 364.5e3);
  EXPECT_EQ(inside.algorithm, "p2p");
  EXPECT_EQ(inside.time_us,
            EstimateCollective(TestNode(), Collective::kAllGather, bytes, {8, 1, 8}).time_us);
  // 2 nodes of 8: half the buffer through one 46.5 GB/s NIC; 7/16 over NVLink meanwhile.
  CollectiveEstimate two = EstimateCollective(TestNode(), Collective::kAllToAll, bytes, {16, 2, 8});
  ExpectRelNear(two.time_us, 8.4 + 14 + 14 * 3.4 + 0.5 * bytes / 46.5e3);
  EXPECT_EQ(two.algorithm, "p2p");
  const double plateau = 2 * 46.5 * 15 / 16;
  EXPECT_LT(two.busbw_GBps, plateau);
  EXPECT_GT(EstimateCollective(TestNode(), Collective::kAllToAll, 16 * kGiB, {16, 2, 8}).busbw_GBps,
            plateau * 0.999);
  // One rank per node: all of (n-1)/n through its NIC; 8 nodes, 7/8 of the buffer.
  CollectiveEstimate strided =
      EstimateCollective(TestNode(), Collective::kAllToAll, bytes, {8, 8, 1});
  ExpectRelNear(strided.time_us, 8.4 + 7 * 14 + 0.875 * bytes / 46.5e3);
  // Two ranks per node share no NIC: each has its own, whatever the ring's min(k, nics) / k.
  NodeSpec two_nics = TestNode();
  two_nics.nics = 2;
  CollectiveEstimate shared =
      EstimateCollective(two_nics, Collective::kAllToAll, bytes, {16, 2, 8});
  ExpectRelNear(shared.time_us, 8.4 + 14 + 14 * 3.4 + 0.5 * bytes / (46.5e3 * 2 / 8));
  // NCCL has no NVLS or tree all-to-all.
  EXPECT_FALSE(EstimateCollectiveWith(WithNvls(TestNode()), Collective::kAllToAll, bytes, {8, 1, 8},
                                      CollectiveAlgorithm::kNvls)
                   .ok());
}

TEST(CollectiveCostTest, RingReduceScatterAllGatherAndSendRecv) {
  double bytes = 64 * kMiB;
  CollectiveEstimate rs =
      EstimateCollective(TestNode(), Collective::kReduceScatter, bytes, {4, 1, 4});
  ExpectRelNear(rs.time_us, 8.4 + 3 * 3.4 + 0.75 * bytes / (364.5e9) * 1e6);
  CollectiveEstimate ag = EstimateCollective(TestNode(), Collective::kAllGather, bytes, {4, 1, 4});
  ExpectRelNear(ag.time_us, rs.time_us);
  CollectiveEstimate p2p = EstimateCollective(TestNode(), Collective::kSendRecv, bytes, {2, 1, 2});
  ExpectRelNear(p2p.time_us, 8.4 + 3.4 + bytes / 364.5e9 * 1e6);
  ExpectRelNear(p2p.busbw_GBps, p2p.algbw_GBps);
  ExpectRelNear(p2p.hbm_bytes, bytes * 2.5);
}

TEST(CollectiveCostTest, NvlsAllReduceWhenFaster) {
  NodeSpec node = WithNvls(TestNode());
  CollectiveEstimate big = EstimateCollective(node, Collective::kAllReduce, kGiB, {8, 1, 8});
  EXPECT_EQ(big.algorithm, "nvls");
  ExpectRelNear(big.time_us, 25 + 1.75 * kGiB / 480e9 * 1e6);
  // At 4 GPUs NVLS gives ~370 GB/s busbw: still ahead of the ring for large buffers.
  CollectiveEstimate four = EstimateCollective(node, Collective::kAllReduce, kGiB, {4, 1, 4});
  EXPECT_EQ(four.algorithm, "nvls");
  ExpectRelNear(four.time_us, 25 + 1.5 * kGiB / 370e9 * 1e6);
  CollectiveEstimate seven = EstimateCollective(node, Collective::kAllReduce, kGiB, {7, 1, 7});
  ExpectRelNear(seven.time_us, 25 + 2.0 * 6 / 7 * kGiB / 460e9 * 1e6);
  // Small buffers on two GPUs: the ring's lower latency (8.4 + 2 * 3.4 us) beats NVLS's 25 us.
  CollectiveEstimate small = EstimateCollective(node, Collective::kAllReduce, 1024, {2, 1, 2});
  EXPECT_EQ(small.algorithm, "ring");
  ExpectRelNear(small.time_us, 8.4 + 2 * 3.4 + 1.0 * 1024 / 364.5e9 * 1e6);
  // On eight GPUs the Simple ring's 14 steps cost more than NVLS even for tiny buffers.
  EXPECT_EQ(EstimateCollective(node, Collective::kAllReduce, 1024, {8, 1, 8}).algorithm, "nvls");
  // NVLS helps all-reduce only.
  CollectiveEstimate rs = EstimateCollective(node, Collective::kReduceScatter, kGiB, {8, 1, 8});
  EXPECT_EQ(rs.algorithm, "ring");
}

TEST(CollectiveCostTest, NvlsBusbwFollowsTheGroupNotTheNodesShare) {
  // A 72-GPU NVLink domain (GB200 NVL72): from 8 GPUs up NVLS gives the node's figure; below, the
  // DGX H100 curve in GPUs (370 of 480 at 4).
  NodeSpec node = WithNvls(TestNode());
  node.gpus_per_node = 72;
  node.nics = 72;
  for (int n : {8, 32, 72}) {
    CollectiveEstimate e = EstimateCollective(node, Collective::kAllReduce, kGiB, {n, 1, n});
    EXPECT_EQ(e.algorithm, "nvls") << n;
    ExpectRelNear(e.time_us, 25 + 2.0 * (n - 1) / n * kGiB / 480e9 * 1e6);
  }
  CollectiveEstimate four = EstimateCollective(node, Collective::kAllReduce, kGiB, {4, 1, 4});
  ExpectRelNear(four.time_us, 25 + 1.5 * kGiB / 370e9 * 1e6);
}

TEST(CollectiveCostTest, TensorParallelAcrossNodes) {
  // TP 32 on four nodes: NVLink (364.5 GB/s) is narrower than a node's 8 NICs (372 GB/s).
  CollectiveEstimate e = EstimateCollective(TestNode(), Collective::kAllReduce, kGiB, {32, 4, 8});
  EXPECT_EQ(e.algorithm, "hierarchical");
  double f = 2.0 * 31 / 32;
  ExpectRelNear(e.time_us, 8.4 + 2 * 3 * 14 + 2 * 28 * 3.4 + f * kGiB / 364.5e9 * 1e6);
  // Two GPUs per node: two NICs (93 GB/s) are the ring's bottleneck.
  CollectiveEstimate two = EstimateCollectiveWith(TestNode(), Collective::kAllReduce, kGiB,
                                                  {4, 2, 2}, CollectiveAlgorithm::kRing)
                               .value();
  ExpectRelNear(two.time_us, 8.4 + 2 * 1 * 14 + 2 * 2 * 3.4 + 1.5 * kGiB / 93e9 * 1e6);
  // NCCL takes the tree there: two nodes swap their sums once each way, 1 GiB over the two NICs
  // (the chain inside carries 2 GiB over NVLink, faster) at 0.9 of the bandwidth, Simple, up and
  // down one NVLink and one network hop.
  CollectiveEstimate tree = EstimateCollective(TestNode(), Collective::kAllReduce, kGiB, {4, 2, 2});
  EXPECT_EQ(tree.algorithm, "tree");
  ExpectRelNear(tree.time_us, 8.4 + 2 * (4 + 14) + kGiB / (93e9 * 0.9) * 1e6);
  EXPECT_LT(tree.time_us, two.time_us);
  CollectiveEstimate ag = EstimateCollective(TestNode(), Collective::kAllGather, kGiB, {16, 2, 8});
  ExpectRelNear(ag.time_us, 8.4 + 1 * 14 + 14 * 3.4 + 15.0 / 16 * kGiB / 364.5e9 * 1e6);
}

TEST(CollectiveCostTest, TreeAllReduceAcrossNodesForSmallerBuffers) {
  // TP 32 on four nodes, 64 MiB. Ring latency: Simple 8.4 + 6 * 14 + 56 * 3.4 = 282.8 us, LL128
  // 14 + 6 * 4 + 56 * 1.9 = 144.4 us; tree: Simple 8.4 + 2 * (7 * 4 + 2 * 14) = 120.4 us, LL128
  // 14 + 2 * (7 * 1.25 + 2 * 8.5) = 65.5 us, at 0.9 of the bandwidth for 2 bytes per byte.
  // Fastest: the tree with LL128 (502 us; ring LL128 525, tree Simple 530, ring Simple 639).
  const double bytes = 64 * kMiB;
  const double bw = 364.5e9 / 1e6;  // bytes per us
  CollectiveEstimate e = EstimateCollective(TestNode(), Collective::kAllReduce, bytes, {32, 4, 8});
  EXPECT_EQ(e.algorithm, "tree");
  ExpectRelNear(e.time_us, 65.5 + 2 * bytes / (bw * 0.9 * 0.9375));
  EXPECT_LT(e.time_us, 144.4 + 2.0 * 31 / 32 * bytes / (bw * 0.9375));
  EXPECT_LT(e.time_us, 120.4 + 2 * bytes / (bw * 0.9));
  // A gigabyte goes back to the ring (Simple: TensorParallelAcrossNodes).
  CollectiveEstimate big = EstimateCollective(TestNode(), Collective::kAllReduce, kGiB, {32, 4, 8});
  EXPECT_EQ(big.algorithm, "hierarchical");
  // The tree is for all-reduce only.
  EXPECT_EQ(EstimateCollective(TestNode(), Collective::kAllGather, bytes, {32, 4, 8}).algorithm,
            "hierarchical");
  // The tree's latency is in the node's YAML: make its network hops dear and the ring wins.
  NodeSpec slow_tree = TestNode();
  slow_tree.tree.network_step_latency_us = 1000;
  slow_tree.tree.ll128_network_step_latency_us = 1000;
  EXPECT_EQ(EstimateCollective(slow_tree, Collective::kAllReduce, bytes, {32, 4, 8}).algorithm,
            "hierarchical");
}

TEST(CollectiveCostTest, NvlsTreeAcrossNodes) {
  // 32 GPUs on four NVLS nodes, 1 GiB: NVLS inside (1.75 GiB at 480 GB/s) pipelined with each
  // GPU's 2 GiB / 8 through its own NIC (46.5 GB/s); latency 25 + 2 * floor(log2 4) * 20.9; the
  // pipeline's fill, a 64 KiB chunk (4 nodes and more) up two levels and down two at the NIC's
  // 46.5 / 16 GB/s per NVLS channel.
  NodeSpec node = WithNvls(TestNode());
  CollectiveEstimate e = EstimateCollectiveWith(node, Collective::kAllReduce, kGiB, {32, 4, 8},
                                                CollectiveAlgorithm::kNvls)
                             .value();
  EXPECT_EQ(e.algorithm, "nvls-tree");
  const double hop_us = 65536 * 16 / 46.5e3;  // 22.55 us
  ExpectRelNear(e.time_us, 25 + 2 * 2 * 20.9 + 4 * hop_us + 2 * kGiB / 8 / 46.5e9 * 1e6);
  // Five nodes: still two levels up and two down (floor(log2 5) = 2); 1,024 nodes: ten.
  ExpectRelNear(EstimateCollectiveWith(node, Collective::kAllReduce, kGiB, {40, 5, 8},
                                       CollectiveAlgorithm::kNvls)
                    .value()
                    .time_us,
                e.time_us);
  ExpectRelNear(EstimateCollectiveWith(node, Collective::kAllReduce, kGiB, {8192, 1024, 8},
                                       CollectiveAlgorithm::kNvls)
                    .value()
                    .time_us,
                25 + 2 * 10 * 20.9 + 20 * hop_us + 2 * kGiB / 8 / 46.5e9 * 1e6);
}

TEST(CollectiveCostTest, NvlsTreeFillFollowsNcclsChunks) {
  NodeSpec node = WithNvls(TestNode());
  auto nvls_tree_us = [&](double bytes, CommGroup group) {
    return EstimateCollectiveWith(node, Collective::kAllReduce, bytes, group,
                                  CollectiveAlgorithm::kNvls)
        .value()
        .time_us;
  };
  const double stream_GBps = 46.5 / 16;
  // Two nodes, one level: 1 GiB keeps the 128 KiB chunk; the two nodes swap their shards once
  // each way, so the NICs carry 1 GiB / 8 (2.9 ms) under NVLS's 1.75 GiB at 480 GB/s (3.9 ms).
  ExpectRelNear(nvls_tree_us(kGiB, {16, 2, 8}),
                25 + 2 * 20.9 + 2 * 131072 / (stream_GBps * 1e3) + 1.75 * kGiB / 480e3);
  // Three nodes: both ways through the tree, 2 GiB / 8 through each NIC (11.5 ms).
  ExpectRelNear(nvls_tree_us(kGiB, {24, 3, 8}),
                25 + 2 * 20.9 + 2 * 131072 / (stream_GBps * 1e3) + 2 * kGiB / 8 / 46.5e3);
  // 4 MiB on two nodes, 16 x 8 streams: under 4 x 128 chunks of 128 KiB, so 64 KiB; under 128 of
  // those, so 32 KiB, which is also one stream's share. NVLS inside (15.3 us) outlasts the NICs
  // (11.3 us).
  const double mib4 = 4.0 * (1 << 20);
  ExpectRelNear(nvls_tree_us(mib4, {16, 2, 8}),
                25 + 2 * 20.9 + 2 * 32768 / (stream_GBps * 1e3) + 1.75 * mib4 / 480e3);
  // 1 MiB on four nodes: the 32 KiB chunk is more than a stream's 8 KiB share, which fills it.
  const double mib = 1 << 20;
  ExpectRelNear(nvls_tree_us(mib, {32, 4, 8}),
                25 + 4 * 20.9 + 4 * 8192 / (stream_GBps * 1e3) + 2 * mib / 8 / 46.5e3);
  // A 512 KiB chunk, as a node's YAML may set: 1 GiB is under 32 x 128 of them, so 256 KiB,
  // and not under 16 x 128 of those.
  node.tree.nvls_chunk_KiB = 512;
  ExpectRelNear(nvls_tree_us(kGiB, {16, 2, 8}),
                25 + 2 * 20.9 + 2 * 262144 / (stream_GBps * 1e3) + 1.75 * kGiB / 480e3);
  // The node's YAML sets the channels and chunks: one channel and 1 KiB chunks all but empty it.
  node.tree.nvls_channels = 1;
  node.tree.nvls_deep_chunk_KiB = 1;
  ExpectRelNear(nvls_tree_us(kGiB, {32, 4, 8}),
                25 + 4 * 20.9 + 4 * 1024 / 46.5e3 + 2 * kGiB / 8 / 46.5e3);
}

TEST(CollectiveCostTest, IbSharpReducesInTheSwitches) {
  // NVLS inside each node, one trip through the switches: 1 GiB over 32 GPUs takes the NVLS
  // busbw for the whole group (f = 2 * 31 / 32 at 480 GB/s; the NICs carry 1 GiB / 8 each at
  // 46.5 GB/s, 2.9 ms, under the 4.3 ms of NVLS), latency 25 + 18 us.
  NodeSpec node = WithNvls(TestNode());
  const double f = 2.0 * 31 / 32;
  CollectiveEstimate asked = EstimateCollectiveWith(node, Collective::kAllReduce, kGiB, {32, 4, 8},
                                                    CollectiveAlgorithm::kSharp)
                                 .value();
  EXPECT_EQ(asked.algorithm, "nvls-sharp");
  ExpectRelNear(asked.time_us, 25 + 18 + f * kGiB / 480e9 * 1e6);
  // Bus bandwidth: the NVLS figure, less the 43 us of latency.
  ExpectRelNear(asked.busbw_GBps, f * kGiB / ((43 + f * kGiB / 480e3) * 1e3));
  // NCCL's own choice takes it only where the network has SHARP.
  EXPECT_EQ(EstimateCollective(node, Collective::kAllReduce, kGiB, {32, 4, 8}).algorithm,
            "nvls-tree");
  node.ib_sharp = true;
  EXPECT_EQ(EstimateCollective(node, Collective::kAllReduce, kGiB, {32, 4, 8}).algorithm,
            "nvls-sharp");
  // All-reduce across NVLS nodes only.
  EXPECT_FALSE(EstimateCollectiveWith(node, Collective::kAllGather, kGiB, {32, 4, 8},
                                      CollectiveAlgorithm::kSharp)
                   .ok());
  EXPECT_FALSE(EstimateCollectiveWith(node, Collective::kAllReduce, kGiB, {8, 1, 8},
                                      CollectiveAlgorithm::kSharp)
                   .ok());
  EXPECT_FALSE(EstimateCollectiveWith(TestNode(), Collective::kAllReduce, kGiB, {32, 4, 8},
                                      CollectiveAlgorithm::kSharp)
                   .ok());
}

TEST(CollectiveCostTest, OneRankPerNodeUsesOneNic) {
  double bytes = 256 * kMiB;
  CollectiveEstimate dp = EstimateCollective(TestNode(), Collective::kAllReduce, bytes, {4, 4, 1});
  EXPECT_EQ(dp.algorithm, "hierarchical");
  ExpectRelNear(dp.time_us, 8.4 + 6 * 14 + 1.5 * bytes / 46.5e9 * 1e6);
  CollectiveEstimate p2p = EstimateCollective(TestNode(), Collective::kSendRecv, bytes, {2, 2, 1});
  ExpectRelNear(p2p.time_us, 8.4 + 14 + bytes / 46.5e9 * 1e6);
}

TEST(CollectiveCostTest, MonotoneInBytesAndBandwidth) {
  const CommGroup groups[] = {{2, 1, 2}, {8, 1, 8}, {16, 2, 8}, {32, 4, 8}, {4, 4, 1}, {4, 2, 2}};
  for (NodeSpec node : {TestNode(), WithNvls(TestNode())}) {
    for (Collective kind : kAllKinds) {
      for (const CommGroup& group : groups) {
        if (kind == Collective::kSendRecv && group.size != 2) continue;
        double previous_us = 0;
        for (double bytes = 0; bytes <= 4 * kGiB; bytes = bytes * 4 + 1024) {
          double t = EstimateCollective(node, kind, bytes, group).time_us;
          EXPECT_GE(t, previous_us);
          previous_us = t;

          NodeSpec faster = node;
          faster.nvlink.GBps_per_direction *= 2;
          faster.network.GBps_per_direction *= 2;
          faster.nvls_busbw_GBps *= 2;
          EXPECT_LE(EstimateCollective(faster, kind, bytes, group).time_us, t);
          NodeSpec efficient = node;
          efficient.nvlink.efficiency = 1.0;
          efficient.network.efficiency = 1.0;
          EXPECT_LE(EstimateCollective(efficient, kind, bytes, group).time_us, t);
          NodeSpec slower_network = node;
          slower_network.network.GBps_per_direction /= 2;
          EXPECT_GE(EstimateCollective(slower_network, kind, bytes, group).time_us, t);
        }
      }
    }
  }
}

TEST(CollectiveCostTest, CheckCommGroup) {
  NodeSpec node = TestNode();
  EXPECT_TRUE(CheckCommGroup(node, {32, 4, 8}).ok());
  EXPECT_TRUE(CheckCommGroup(node, {1, 1, 1}).ok());
  // Uneven: 9 ranks as 5 + 4 give the emptiest node's 4; 5 + 5 + 5 + 8 cannot hold 32.
  EXPECT_TRUE(CheckCommGroup(node, {9, 2, 4}).ok());
  EXPECT_TRUE(CheckCommGroup(node, {12, 2, 4}).ok());
  EXPECT_FALSE(CheckCommGroup(node, {13, 2, 4}).ok());
  EXPECT_FALSE(CheckCommGroup(node, {7, 2, 4}).ok());
  EXPECT_FALSE(CheckCommGroup(node, {3, 1, 2}).ok());
  Status mismatch = CheckCommGroup(node, {32, 4, 5});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(mismatch.message(),
              HasSubstr("32 ranks over 4 nodes of 8 GPUs, 5 in its emptiest: it holds 20 to 29"));
  Status too_many = CheckCommGroup(node, {16, 1, 16});
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.message(), HasSubstr("16 ranks per node on test-node (8 GPUs per node)"));
  EXPECT_FALSE(CheckCommGroup(node, {0, 0, 0}).ok());
}

}  // namespace
}  // namespace domino
