#include "hardware/collective_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <optional>

namespace domino {
namespace {

// bytes / (GB/s) in microseconds.
double TransferUs(double bytes, double GBps) { return bytes / (GBps * 1e3); }

// Ring steps of a collective over `n` ranks (send/recv: one).
int RingSteps(Collective kind, int n) {
  switch (kind) {
    case Collective::kAllReduce:
      return 2 * (n - 1);
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:  // one exchange with each peer
      return n - 1;
    case Collective::kSendRecv:
      return 1;
  }
  return 0;
}

// NVLS all-reduce busbw at n of 8 GPUs as a fraction of the 8-GPU figure (DGX-H100, from NCCL
// issue threads): ~370 at 2-4 GPUs, 420/440/460 at 5/6/7, 480 at 8.
constexpr std::array<double, 9> kNvlsBusbwAt8{0, 370, 370, 370, 370, 420, 440, 460, 480};

// The curve is in GPUs, not in the node's share: an all-reduce's busbw rises with the group as
// 2 (n - 1) / n of what each GPU moves, flat from 8 GPUs (GB200 NVL72's 32-GPU NVLS bar of the GTC
// 2025 slide, 850 GB/s, is DGX B200's 8-GPU one). A node's nvls_busbw_GBps is its figure at all
// its GPUs, or at 8 of a larger node.
double NvlsFraction(int n, int gpus_per_node) {
  if (n >= gpus_per_node) return 1.0;
  const int at = std::clamp(n, 2, 8), full = std::clamp(gpus_per_node, 2, 8);
  return kNvlsBusbwAt8[at] / kNvlsBusbwAt8[full];
}

// NVLS-tree's pipeline fill: each of a GPU's NVLS channels streams its share of the `bytes`
// through the GPU's NIC in chunks, and the first chunk goes `levels` network hops up the tree
// and as many down before the last can finish, each hop at the stream's 1/channels of the NIC.
// The chunk is NCCL's (src/enqueue.cc, NVLS_TREE): the node's chunk, its deep chunk from 4 nodes
// up, cut to 256, 128, 64 and then 32 KiB when the message is small next to channels x k chunks
// in flight, and never more than one stream's share.
double NvlsTreeFillUs(const NodeSpec& node, double bytes, int nodes, int k, int levels) {
  constexpr double kKiB = 1024;
  const double streams = static_cast<double>(node.tree.nvls_channels) * k;
  // NCCL's cuts: below `chunks_in_flight` chunks per stream, a chunk above `KiB` becomes `KiB`.
  constexpr struct {
    double chunks_in_flight, KiB;
  } kCuts[] = {{32, 256}, {16, 128}, {4, 64}, {1, 32}};
  double chunk = kKiB * (nodes >= 4 ? node.tree.nvls_deep_chunk_KiB : node.tree.nvls_chunk_KiB);
  for (const auto& cut : kCuts)
    if (bytes < cut.chunks_in_flight * streams * chunk && chunk > cut.KiB * kKiB)
      chunk = cut.KiB * kKiB;
  chunk = std::min(chunk, bytes / streams);
  const double stream_GBps =
      node.network.GBps_per_direction * node.network.efficiency / node.tree.nvls_channels;
  return 2 * levels * TransferUs(chunk, stream_GBps);
}

CollectiveEstimate MakeEstimate(const NodeSpec& node, Collective kind, double bytes, int n,
                                double time_us, std::string_view algorithm) {
  CollectiveEstimate estimate;
  double factor = BusbwFactor(kind, n);
  estimate.time_us = time_us;
  estimate.algbw_GBps = time_us > 0 ? bytes / (time_us * 1e3) : 0;
  estimate.busbw_GBps = estimate.algbw_GBps * factor;
  estimate.algorithm = algorithm;
  estimate.ctas = node.comm_ctas;
  estimate.hbm_bytes = bytes * factor * node.comm_hbm_factor;
  return estimate;
}

}  // namespace

std::string_view CollectiveName(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kReduceScatter:
      return "reduce-scatter";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kSendRecv:
      return "send-recv";
    case Collective::kAllToAll:
      return "all-to-all";
  }
  return "?";
}

double BusbwFactor(Collective kind, int n) {
  if (n <= 1) return kind == Collective::kSendRecv ? 1.0 : 0.0;
  switch (kind) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
      return static_cast<double>(n - 1) / n;
    case Collective::kSendRecv:
      return 1.0;
  }
  return 0.0;
}

Status CheckCommGroup(const NodeSpec& node, const CommGroup& group) {
  if (group.size < 1 || group.nodes_spanned < 1 || group.gpus_per_node_in_group < 1) {
    return Error(
        fmt::format("communication group {{size {}, nodes {}, per node {}}}: every count "
                    "must be at least 1",
                    group.size, group.nodes_spanned, group.gpus_per_node_in_group));
  }
  if (group.gpus_per_node_in_group > node.gpus_per_node) {
    return Error(fmt::format("communication group with {} ranks per node on {} ({} GPUs per node)",
                             group.gpus_per_node_in_group, node.name, node.gpus_per_node));
  }
  // The emptiest node holds gpus_per_node_in_group; every other at least as many, at most all.
  const int64_t k = group.gpus_per_node_in_group;
  const int64_t fewest = group.nodes_spanned * k;
  const int64_t most = k + int64_t{group.nodes_spanned - 1} * node.gpus_per_node;
  if (group.size < fewest || group.size > most) {
    return Error(fmt::format(
        "communication group of {} ranks over {} nodes of {} GPUs, {} in its emptiest: it "
        "holds {} to {} ranks",
        group.size, group.nodes_spanned, node.gpus_per_node, k, fewest, most));
  }
  return Status::Ok();
}

std::string_view CollectiveAlgorithmName(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kAuto:
      return "auto";
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kNvls:
      return "nvls";
    case CollectiveAlgorithm::kTree:
      return "tree";
    case CollectiveAlgorithm::kSharp:
      return "sharp";
  }
  return "?";
}

Result<CollectiveEstimate> EstimateCollectiveWith(const NodeSpec& node, Collective kind,
                                                  double bytes, const CommGroup& group,
                                                  CollectiveAlgorithm algorithm) {
  assert(CheckCommGroup(node, group).ok() && bytes >= 0);
  const int n = group.size;
  if (n <= 1) return CollectiveEstimate{};
  const double factor = BusbwFactor(kind, n);
  // Every bandwidth below is the plateau scaled by the ramp at this size.
  const double ramp = node.ramp.Fraction(bytes);
  const double nvlink_GBps = node.nvlink.GBps_per_direction * node.nvlink.efficiency * ramp;
  const bool nvls = kind == Collective::kAllReduce && node.nvls && node.nvls_busbw_GBps > 0;
  const bool any = algorithm == CollectiveAlgorithm::kAuto;
  std::optional<CollectiveEstimate> best;
  auto consider = [&](double time_us, std::string_view name) {
    if (!best || time_us < best->time_us) best = MakeEstimate(node, kind, bytes, n, time_us, name);
  };

  if (group.nodes_spanned <= 1) {
    if (any || algorithm == CollectiveAlgorithm::kRing) {
      double simple_us = node.nvlink.base_latency_us +
                         RingSteps(kind, n) * node.nvlink.step_latency_us +
                         TransferUs(bytes * factor, nvlink_GBps);
      double ll128_us = node.ll128.base_latency_us +
                        RingSteps(kind, n) * node.ll128.nvlink_step_latency_us +
                        TransferUs(bytes * factor, nvlink_GBps * node.ll128.bandwidth_factor);
      double ll_us = node.ll.base_latency_us + RingSteps(kind, n) * node.ll.nvlink_step_latency_us +
                     TransferUs(bytes * factor, nvlink_GBps * node.ll.bandwidth_factor);
      consider(std::min({simple_us, ll128_us, ll_us}),
               kind == Collective::kAllToAll ? "p2p" : "ring");
    }
    if (nvls && (any || algorithm == CollectiveAlgorithm::kNvls)) {
      double nvls_GBps = node.nvls_busbw_GBps * NvlsFraction(n, node.gpus_per_node) * ramp;
      consider(node.nvls_latency_us + TransferUs(bytes * factor, nvls_GBps), "nvls");
    }
    if (!best)
      return Error(fmt::format("{} on {}: NCCL has no {} {} inside one node", CollectiveName(kind),
                               node.name, CollectiveAlgorithmName(algorithm),
                               CollectiveName(kind)));
    return *best;
  }

  const int nodes = group.nodes_spanned;
  const int k = group.gpus_per_node_in_group;
  const double nic_GBps = node.network.GBps_per_direction * node.network.efficiency * ramp;
  const double network_GBps = std::min(k, node.nics) * nic_GBps;
  if (any || algorithm == CollectiveAlgorithm::kRing) {
    int inter_steps = 1;
    int intra_steps = 0;
    double intra_us = 0;
    double inter_us = TransferUs(bytes * k, network_GBps);
    if (kind != Collective::kSendRecv) {
      inter_steps = RingSteps(kind, nodes);
      intra_steps = RingSteps(kind, n) - inter_steps;
      if (k > 1) intra_us = TransferUs(bytes * factor, nvlink_GBps);
      inter_us = TransferUs(bytes * factor, network_GBps);
    }
    if (kind == Collective::kAllToAll) {
      // Each rank's share for its node's peers over NVLink, the rest through one NIC of its own.
      const double rank_network_GBps = nic_GBps * std::min(1.0, static_cast<double>(node.nics) / k);
      intra_us = TransferUs(bytes * (k - 1) / n, nvlink_GBps);
      inter_us = TransferUs(bytes * (n - k) / n, rank_network_GBps);
    }
    double transfer_us = std::max(intra_us, inter_us);
    double simple_us = node.network.base_latency_us + inter_steps * node.network.step_latency_us +
                       intra_steps * node.nvlink.step_latency_us + transfer_us;
    double ll128_us =
        node.ll128.base_latency_us + inter_steps * node.ll128.network_step_latency_us +
        intra_steps * node.ll128.nvlink_step_latency_us + transfer_us / node.ll128.bandwidth_factor;
    double ll_us = node.ll.base_latency_us + inter_steps * node.ll.network_step_latency_us +
                   intra_steps * node.ll.nvlink_step_latency_us +
                   transfer_us / node.ll.bandwidth_factor;
    consider(std::min({simple_us, ll128_us, ll_us}),
             kind == Collective::kAllToAll ? "p2p" : "hierarchical");
  }
  const int depth = static_cast<int>(std::ceil(std::log2(nodes)));
  // Bytes a node's NICs carry each way, per byte of the tree's share: NCCL's double binary tree
  // makes every node inner in one tree and a leaf in the other, so each direction carries the
  // data once going up and once coming down; two nodes only swap their shares, once each way
  // (NCCL's tuning model doubles NVLS-tree's network bandwidth at two nodes, src/graph/tuning.cc;
  // its maintainers call 2 nodes "an ideal case for the TREE", nccl-tests #309).
  const double tree_passes = nodes == 2 ? 1.0 : 2.0;
  if (kind == Collective::kAllReduce && (any || algorithm == CollectiveAlgorithm::kTree)) {
    // Tree: up and down a chain of k - 1 NVLink hops and ceil(log2 N) network hops.
    const double tree_transfer_us = std::max(k > 1 ? TransferUs(2.0 * bytes, nvlink_GBps) : 0.0,
                                             TransferUs(tree_passes * bytes, network_GBps)) /
                                    node.tree.bandwidth_factor;
    const double tree_simple_us = node.network.base_latency_us +
                                  2 * ((k - 1) * node.tree.nvlink_step_latency_us +
                                       depth * node.tree.network_step_latency_us) +
                                  tree_transfer_us;
    const double tree_ll128_us = node.ll128.base_latency_us +
                                 2 * ((k - 1) * node.tree.ll128_nvlink_step_latency_us +
                                      depth * node.tree.ll128_network_step_latency_us) +
                                 tree_transfer_us / node.ll128.bandwidth_factor;
    consider(std::min(tree_simple_us, tree_ll128_us), "tree");
  }
  if (nvls && k > 1 && (any || algorithm == CollectiveAlgorithm::kNvls)) {
    // NVLS-tree: NVLS inside each node, each GPU's shard over the tree through its own NIC at
    // the NIC's rate (NCCL's tuning model takes the 0.92 tree factor for the plain tree only).
    // Latency as NCCL's model has it: the NVLS step plus floor(log2 N) network steps up the tree
    // and as many down. Against the GTC 2024 NVLS-tree plot this gives 1 MiB at 4 and 1,024
    // nodes within 3% and 11% (one network step per level would be 38% and 60% fast).
    const double nvls_GBps = node.nvls_busbw_GBps * NvlsFraction(k, node.gpus_per_node) * ramp;
    const double intra_us = TransferUs(bytes * 2.0 * (k - 1) / k, nvls_GBps);
    const double inter_us = TransferUs(tree_passes * bytes / std::min(k, node.nics), nic_GBps);
    const int levels = static_cast<int>(std::floor(std::log2(nodes)));
    consider(node.nvls_latency_us + 2 * levels * node.tree.nvls_network_step_latency_us +
                 NvlsTreeFillUs(node, bytes, nodes, k, levels) + std::max(intra_us, inter_us),
             "nvls-tree");
  }
  const bool sharp_asked = algorithm == CollectiveAlgorithm::kSharp;
  if (nvls && k > 1 && ((any && node.ib_sharp) || sharp_asked)) {
    const double nvls_GBps = node.nvls_busbw_GBps * NvlsFraction(k, node.gpus_per_node) * ramp;
    const double intra_us = TransferUs(bytes * factor, nvls_GBps);
    const double inter_us = TransferUs(bytes / std::min(k, node.nics), nic_GBps);
    consider(node.nvls_latency_us + node.ib_sharp_latency_us + std::max(intra_us, inter_us),
             "nvls-sharp");
  }
  if (!best)
    return Error(fmt::format("{} across {} nodes of {}: NCCL has no {} {} here",
                             CollectiveName(kind), nodes, node.name,
                             CollectiveAlgorithmName(algorithm), CollectiveName(kind)));
  return *best;
}

CollectiveEstimate EstimateCollective(const NodeSpec& node, Collective kind, double bytes,
                                      const CommGroup& group) {
  return EstimateCollectiveWith(node, kind, bytes, group, CollectiveAlgorithm::kAuto).value();
}

}  // namespace domino
