#ifndef DOMINO_HARDWARE_COLLECTIVE_COST_H_
#define DOMINO_HARDWARE_COLLECTIVE_COST_H_

#include <string_view>

#include "hardware/hardware_spec.h"
#include "models/base/result.h"

namespace domino {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kSendRecv, kAllToAll };

std::string_view CollectiveName(Collective kind);  // "all-reduce", "reduce-scatter", ...

// Which algorithm a collective may use: NCCL's own choice (the fastest that applies), or one
// forced as NCCL_ALGO does. Ring covers the hierarchical ring across nodes; NVLS covers NVLS-tree
// across nodes.
enum class CollectiveAlgorithm { kAuto, kRing, kNvls, kTree, kSharp };
std::string_view CollectiveAlgorithmName(CollectiveAlgorithm algorithm);  // "auto", "ring", ...

// nccl-tests' bus-bandwidth factor for `n` ranks: 2(n-1)/n for all-reduce, (n-1)/n for
// reduce-scatter, all-gather and all-to-all, 1 for send/recv; busbw = algbw * factor.
double BusbwFactor(Collective kind, int n);

// CommGroup is where the ranks of one collective sit: `size` ranks over `nodes_spanned` nodes,
// `gpus_per_node_in_group` in each (size = nodes_spanned * gpus_per_node_in_group). TP 32 on
// dgx-h100 is {32, 4, 8}; a DP group strided across nodes is {n, n, 1}; a pipeline send to the
// next node is {2, 2, 1}. A group that does not tile its nodes evenly gives the count of its
// emptiest node, whose NICs bound it: 9 ranks as 5 + 4 are {9, 2, 4}, so size may exceed
// nodes_spanned * gpus_per_node_in_group (never nodes_spanned * the node's GPUs).
struct CommGroup {
  int size = 1;
  int nodes_spanned = 1;
  int gpus_per_node_in_group = 1;
};

// Checks that `group` is consistent and fits on `node`; says which rule failed.
Status CheckCommGroup(const NodeSpec& node, const CommGroup& group);

// CollectiveEstimate is the predicted cost of one collective, in nccl-tests' terms: algbw is
// bytes / time, busbw is algbw * BusbwFactor. While it runs the collective holds `ctas` SMs of
// each GPU and moves `hbm_bytes` through each GPU's HBM (the contention model's inputs).
struct CollectiveEstimate {
  double time_us = 0;
  double busbw_GBps = 0;  // 1 GB = 1e9 bytes, as NCCL counts
  double algbw_GBps = 0;
  // "ring", "nvls", "hierarchical" (a ring across nodes), "tree", "nvls-tree", "nvls-sharp",
  // "p2p" (an all-to-all) or "none"
  std::string_view algorithm = "none";
  int ctas = 0;
  double hbm_bytes = 0;
};

// Predicts one NCCL-like collective of `bytes` per rank (nccl-tests "size": the full buffer of an
// all-reduce, the larger of reduce-scatter's and all-gather's two buffers, the message of a
// send/recv). Precondition: CheckCommGroup(node, group) is ok and bytes >= 0.
//
// With B_nv = nvlink.GBps_per_direction * nvlink.efficiency and f = BusbwFactor(kind, n):
// - one rank: a no-op, all zeros, algorithm "none".
// - inside one node, "ring": time = nvlink.base_latency_us + steps * nvlink.step_latency_us
//   + bytes * f / B_nv, with steps 2(n-1) for all-reduce, n-1 for reduce-scatter / all-gather,
//   1 for send/recv.
// - inside one node, all-reduce with node.nvls, "nvls": time = nvls_latency_us + bytes * f /
//   B_nvls, where B_nvls is nvls_busbw_GBps scaled for n below gpus_per_node as measured on
//   DGX-H100 (370 of 480 GB/s at 2-4 GPUs, 420/440/460 at 5/6/7); the faster of ring and NVLS
//   is taken, as NCCL's tuner would.
// - across N > 1 nodes with k ranks in each, "hierarchical": NCCL's rings cross every node
//   boundary once per channel and spread channels over the NICs, so each node sends bytes * f
//   over min(k, nics) NICs (each rank's 1/k share gets 1/k of the node's network bandwidth)
//   while each rank moves at most bytes * f over NVLink. With B_net = min(k, nics) *
//   network.GBps_per_direction * network.efficiency:
//     time = network.base_latency_us + inter_steps * network.step_latency_us
//            + intra_steps * nvlink.step_latency_us
//            + max(k > 1 ? bytes * f / B_nv : 0, bytes * f / B_net)
//   where inter_steps are 2(N-1) for all-reduce, N-1 for reduce-scatter / all-gather, and
//   intra_steps the rest of the ring's steps: 2(n-N), n-N. A send/recv across nodes has one
//   network step and each rank's message over its share of the NICs: bytes * k / B_net.
// Every ring time above (inside and across nodes) is computed twice, with the Simple protocol's
// latencies (LinkSpec) and with LL128's (node.ll128: lower latencies, bandwidths times
// ll128.bandwidth_factor), and the faster is taken, as NCCL's tuner picks a protocol per size.
//
// An all-reduce across nodes may also take NCCL's tree (node.tree), when faster for its size:
//     time = base_latency + 2 * ((k - 1) * tree nvlink step + ceil(log2 N) * tree network step)
//            + max(k > 1 ? 2 * bytes / B_nv : 0, p * bytes / B_net) / tree.bandwidth_factor
// where p = 2 (each NIC direction carries the data up and down the double binary tree), 1 on
// two nodes (they swap their sums once each way), with the Simple (network.base_latency_us) and
// LL128 (ll128.base_latency_us, bandwidth times ll128.bandwidth_factor) figures; "tree" then names
// the algorithm (its own chunk pipeline is not priced: no row measures a plain tree deeper than
// two nodes).
//
// An all-reduce across nodes on NVLS nodes may also take NCCL's NVLS-tree: NVLS reduce-scatters
// inside each node, each GPU's 1/k shard is all-reduced over the tree between nodes through its
// own NIC, and NVLS all-gathers inside the node; the two parts pipeline, so
//     time = nvls_latency_us + 2 * floor(log2 N) * (tree.nvls_network_step_latency_us + fill)
//            + max(bytes * 2(k-1)/k / B_nvls, p * bytes / (min(k, nics) * B_nic))
// with B_nic = network.GBps_per_direction * network.efficiency (one NIC per GPU) and fill the
// pipeline's: one chunk at B_nic / tree.nvls_channels, the chunk NCCL's (tree.nvls_chunk_KiB,
// tree.nvls_deep_chunk_KiB from 4 nodes, cut down to 256, 128, 64 and 32 KiB for smaller messages,
// at most bytes / (nvls_channels * k)).
//
// With IB SHARP (node.ib_sharp, or kSharp asked for), an all-reduce across NVLS nodes may take
// NVLS inside each node and one reduction in the switches, "nvls-sharp" (NCCL's NVLS algorithm
// over CollNet; its tuning model's bandwidth is the NVLS busbw and its latency one NVLS plus one
// network step):
//     time = nvls_latency_us + ib_sharp_latency_us
//            + max(bytes * f / B_nvls, bytes / (min(k, nics) * B_nic)).
// An all-to-all (NCCL's alltoall: a send and a receive of bytes / n with every peer, grouped) is
// "p2p". Its busbw factor is (n-1)/n because 1/n of the buffer stays local; inside one node the
// rest goes at the effective NVLink bandwidth of the ring's other collectives (an NCCL maintainer,
// nccl-tests #212: ~370 GB/s on DGX-H100 "as BusBw when running non-allreduce operations"), so it
// is priced as the ring's formula with n-1 steps, one per peer. Across nodes each rank sends
// bytes * (k-1)/n to its own node's peers over NVLink and bytes * (n-k)/n to the others through
// one NIC, never more ("Alltoall cannot aggregate the bandwidth of multiple NICs", nccl-tests
// #267; busbw N/(N-1) times a GPU's network bandwidth on N nodes, nccl-tests #130), at the same
// time:
//     time = network.base_latency_us + (N-1) * network.step_latency_us
//            + (n-N) * nvlink.step_latency_us
//            + max(bytes * (k-1)/n / B_nv, bytes * (n-k)/n / (min(1, nics/k) * B_nic))
// with the three protocols' figures as for the ring. No row of the validation table measures an
// all-to-all.
// ctas = node.comm_ctas; hbm_bytes = bytes * f * node.comm_hbm_factor.
// Time grows with bytes and shrinks with any bandwidth or efficiency. `algorithm` other than
// kAuto restricts the choice to that algorithm; where it does not apply (NVLS without NVLS, a
// tree inside one node, NVLS or tree for anything but an all-reduce) the error says so.
CollectiveEstimate EstimateCollective(const NodeSpec& node, Collective kind, double bytes,
                                      const CommGroup& group);
Result<CollectiveEstimate> EstimateCollectiveWith(const NodeSpec& node, Collective kind,
                                                  double bytes, const CommGroup& group,
                                                  CollectiveAlgorithm algorithm);

}  // namespace domino

#endif  // DOMINO_HARDWARE_COLLECTIVE_COST_H_
