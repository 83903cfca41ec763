#ifndef DOMINO_HARDWARE_HARDWARE_SPEC_H_
#define DOMINO_HARDWARE_HARDWARE_SPEC_H_

#include <array>
#include <cmath>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "models/base/embedded_file.h"
#include "models/base/result.h"

namespace domino {

enum class Dtype { kFp32, kTf32, kBf16, kFp16, kFp8 };
inline constexpr int kDtypeCount = 5;
std::string_view DtypeName(Dtype dtype);  // "fp32", "tf32", "bf16", "fp16", "fp8"
int DtypeBytes(Dtype dtype);              // 4, 4, 2, 2, 1
// Every dtype with its name, in Dtype order; fits YamlMap::Enum.
std::span<const std::pair<std::string_view, Dtype>> DtypeNames();

// GpuSpec is one GPU model from hardware/catalog/gpus/NAME.yaml: datasheet figures plus the
// efficiencies the compute cost model uses. Peak 0 means the GPU lacks that dtype (A100: fp8).
struct GpuSpec {
  std::string name;
  // The YAML file it was read from; empty for a catalog entry. (A command's outputs must not
  // replace the files it reads.)
  std::string file;
  int sms = 0;
  // Device memory as CUDA reports it to a process (cudaMemGetInfo's total, PyTorch's "total
  // capacity"), in 10^9 bytes: what a plan's weights, gradients, optimizer state and activations
  // must fit in. Less than a datasheet's "80 GB", which counts binary gigabytes of HBM, some of
  // which the driver keeps.
  double memory_GB = 0;
  double hbm_GBps = 0;                            // datasheet HBM bandwidth
  std::array<double, kDtypeCount> peak_tflops{};  // dense, indexed by Dtype
  // GEMM model (sim/gemm_model.h): the fraction of the dense peak one SM's main loop sustains
  // (16-bit, and fp8, which cuBLAS runs further below its peak), the k-steps' worth of time each
  // output tile spends outside its main loop (prologue, epilogue), the fixed time of a kernel
  // (ramp up and down), and the inner dimension from which cuBLAS balances the last wave over
  // every SM (stream-K) instead of leaving SMs idle, or splits k where the tiles fill at most half
  // the SMs (split-K, sim/gemm_model.h).
  double max_gemm_efficiency = 0.84;
  double fp8_gemm_efficiency = 0.68;
  double gemm_tile_overhead_k = 192;
  double gemm_fixed_us = 4;
  double gemm_stream_k_min_k = 2048;
  // The kernels the library picks from (sim/gemm_model.h): besides tiles of gemm_tile_m x
  // gemm_tile_n, tiles half as wide, their main loop at this fraction of the full tile's rate per
  // SM (0: no such kernel); and what a split-K kernel takes beyond the others' fixed time (the
  // reduction of its partial tiles).
  double gemm_half_tile_rate = 0.7;
  double gemm_split_k_fixed_us = 1.5;
  // GEMMs beside a collective that holds SMs (sim/engine.h): the output tiles one CTA of cuBLAS's
  // kernels computes, and the CTA waves below which a GEMM (k >= gemm_stream_k_min_k) runs one
  // persistent CTA per SM for its whole time. A GEMM launched while a collective holds SMs
  // ends as late as a CTA that starts late must: a whole body for a persistent kernel, one CTA's
  // share otherwise; a collective launched during such a GEMM waits for its end. 0: neither (a
  // GEMM beside a collective only runs on the SMs left to it).
  double gemm_cta_tiles = 0;
  double gemm_persistent_cta_waves = 0;
  double hbm_efficiency = 0.85;       // achieved fraction of hbm_GBps for streaming kernels
  double kernel_launch_us = 4.0;      // per kernel, eager launches
  double graph_launch_us = 1.0;       // per kernel inside a CUDA graph
  int gemm_tile_m = 128;              // GEMM output tile rows per SM (wave quantization)
  int gemm_tile_n = 128;              // GEMM output tile columns per SM
  double attention_efficiency = 0.5;  // fused (flash) attention: achieved fraction of peak
  // The backward kernel's (dQ, dK, dV: 2.5 times the forward's FLOPs); a GPU file that omits it
  // takes attention_efficiency.
  double attention_backward_efficiency = 0.5;
  // Per 128-query tile, a fixed cost worth this many more keys of the main loop (the kernel's
  // prologue, epilogue and softmax bookkeeping), forward and backward: a tile of a causal sequence
  // of s attends to s/2 keys on average and takes the time of s/2 + overhead keys at the
  // efficiency above. 0: none (the efficiencies are then the whole kernel's).
  double attention_overhead_keys = 0;
  double attention_backward_overhead_keys = 0;
  // The same four for FlashAttention-2's kernels (AttentionKernel::kFlash2), where the GPU's
  // flash kernel is another (cuDNN's on Hopper), and for FlexAttention's (kFlex), which no
  // measurement sets apart yet. A GPU file that omits them takes the flash ones.
  double flash2_efficiency = 0.5;
  double flash2_backward_efficiency = 0.5;
  double flash2_overhead_keys = 0;
  double flash2_backward_overhead_keys = 0;
  // The power limit in a training step: where GEMMs fill more than power_duty_knee of an
  // iteration, the GPU lowers its clock to hold its power limit and every tensor-core main loop
  // (GEMM and attention) runs power_duty_slope slower per unit of GEMM share above the knee
  // (sim/predict.h PowerClock). 0: no such limit.
  double power_duty_knee = 0;
  double power_duty_slope = 0;
  // What the validation table shows this GPU's predictions miss and why, in a sentence that
  // `simulate` and `plan` print beside them (the catalog's Blackwell GPUs: the end-to-end rows run
  // about 30% slower than predicted). Empty: none known.
  std::string caveat;

  double peak(Dtype dtype) const { return peak_tflops[static_cast<int>(dtype)]; }
  double memory_bytes() const { return memory_GB * 1e9; }
  double memory_gib() const { return memory_bytes() / (1 << 30); }
};

// LinkSpec says how NCCL-like collectives perform on one fabric (NVLink inside a node, or the
// network between nodes): line rate, the fraction of it a large ring collective achieves as
// busbw, and latencies from NCCL's tuning model for the Simple protocol (src/graph/tuning.cc).
struct LinkSpec {
  double GBps_per_direction = 0;  // line rate per GPU (NVLink) or per NIC (network)
  double efficiency = 0.8;        // achieved busbw / line rate for large ring collectives
  double base_latency_us = 8.4;   // per collective (Simple protocol)
  double step_latency_us = 3.4;   // per ring step (NVLink 3.4; network 14)
};

// The LL128 protocol's figures from NCCL's tuning model: lower latency per ring step than Simple
// (LinkSpec's latencies) at a fraction of its bandwidth (120 of every 128 bytes carry data). A
// collective takes whichever protocol is faster for its size, as NCCL's tuner does.
struct Ll128Spec {
  double base_latency_us = 14;
  double nvlink_step_latency_us = 1.9;
  double network_step_latency_us = 4;
  double bandwidth_factor = 0.9375;
};

// The LL protocol's figures from NCCL's tuning model: the lowest latencies, at half the bandwidth
// (every 8 bytes carry a 4-byte flag). NCCL takes it for small messages.
struct LlSpec {
  double base_latency_us = 6.6;
  double nvlink_step_latency_us = 0.6;
  double network_step_latency_us = 2.7;
  double bandwidth_factor = 0.5;
};

// How a collective's bandwidth ramps up with its size: NCCL reaches its large-message bus
// bandwidth only for messages far above its pipeline's chunks, so the bandwidth of a collective
// of S bytes is the plateau times S^exponent / (S^exponent + half_bytes^exponent) (half the
// plateau at half_bytes).
struct BandwidthRamp {
  double half_bytes = 8.0 * (1 << 20);
  double exponent = 0.65;
  double Fraction(double bytes) const {
    if (half_bytes <= 0 || bytes <= 0) return 1.0;
    const double x = std::pow(bytes / half_bytes, exponent);
    return x / (1 + x);
  }
};

// NCCL's tree all-reduce across nodes (a double binary tree between nodes, a chain inside each):
// latency grows with log2 of the node count instead of the ring's 2(N-1) network steps, at
// `bandwidth_factor` of the ring's bandwidth (NCCL's tuning model: tree busbw x 0.9, and every
// byte goes up and down the tree). Step latencies per protocol from the same model. NVLS-tree
// (NVLink SHARP inside each node, the tree between nodes) has its own network step latency
// there (hwLatencies NET NVLSTree Simple: 20.9 us), paid up and down the tree. NVLS-tree also
// pipelines each GPU's share in chunks, one stream per NVLS channel through the GPU's NIC
// (src/transport/nvls.cc: 16 channels on Hopper, 128 KiB chunks, 64 KiB from 4 nodes up;
// src/enqueue.cc halves them for small messages), and the first chunk climbs the tree and comes
// back down before the last can finish.
struct TreeSpec {
  double nvlink_step_latency_us = 4;    // Simple
  double network_step_latency_us = 14;  // Simple
  double nvls_network_step_latency_us = 20.9;
  int nvls_channels = 16;
  double nvls_chunk_KiB = 128;
  double nvls_deep_chunk_KiB = 64;  // from 4 nodes up
  double ll128_nvlink_step_latency_us = 1.25;
  double ll128_network_step_latency_us = 8.5;
  double bandwidth_factor = 0.9;
};

// NodeSpec is a node type from hardware/catalog/nodes/NAME.yaml: GPUs joined by NVLink/NVSwitch
// inside the node and NICs to the network between nodes, plus the contention parameters of a
// collective running beside compute on those GPUs.
struct NodeSpec {
  std::string name;
  std::string file;  // as GpuSpec::file
  GpuSpec gpu;
  int gpus_per_node = 8;
  // GPUs of one host (one OS, one launcher process group): the node's, except where a node is a
  // rack of hosts on one NVLink domain (GB200 NVL72: 18 trays of 4). 0: gpus_per_node.
  int gpus_per_host = 0;
  LinkSpec nvlink;              // per GPU, per direction
  bool nvls = false;            // NVLink SHARP (NVSwitch in-network all-reduce)
  double nvls_busbw_GBps = 0;   // achieved NVLS all-reduce busbw at gpus_per_node GPUs (or 8)
  double nvls_latency_us = 25;  // per NVLS all-reduce
  // InfiniBand SHARP: the network switches reduce (NCCL's CollNet, with the SHARP plugin), so an
  // all-reduce across nodes takes NVLS inside each node and one trip through the switches.
  bool ib_sharp = false;
  double ib_sharp_latency_us = 18;          // NCCL's tuning model: hwLatencies NET NVLS Simple
  int nics = 8;                             // per node; one per GPU on DGX
  LinkSpec network{.step_latency_us = 14};  // per NIC, per direction
  Ll128Spec ll128;
  LlSpec ll;
  TreeSpec tree;
  BandwidthRamp ramp;
  // Contention: while a collective runs beside compute it holds `comm_ctas` SMs and moves
  // `comm_hbm_factor` bytes of HBM traffic per byte it sends.
  int comm_ctas = 16;
  double comm_hbm_factor = 2.5;
};

// ClusterSpec is the machine a plan runs on: `nodes` nodes of one type, using `gpus_per_node` GPUs
// of each (at most the node's).
struct ClusterSpec {
  std::string name;  // as given: "dgx-h100:4", or the YAML file's name
  NodeSpec node;
  int nodes = 1;
  int gpus_per_node = 8;
  int total_gpus() const { return nodes * gpus_per_node; }
  // What a launcher counts: GPUs of each host the plan uses (the node's gpus_per_host, or fewer
  // where fewer of a node's GPUs are used: as many of each host as divide both) and those hosts.
  int launch_gpus_per_host() const {
    return std::gcd(node.gpus_per_host > 0 ? node.gpus_per_host : gpus_per_node, gpus_per_node);
  }
  int hosts() const { return total_gpus() / launch_gpus_per_host(); }
};

// Parsers of the YAML formats in docs/formats.md. `file` names the source in messages
// ("FILE:LINE:COLUMN: KEY: RULE") and is the folder that relative paths inside the text (a node's
// `gpu`, a cluster's `node`) are tried against before the working directory. A node's GPU and a
// cluster's node are loaded as LoadGpu / LoadNode do; their errors are reported at that key.
Result<GpuSpec> ParseGpu(std::string_view text, std::string_view file);
Result<NodeSpec> ParseNode(std::string_view text, std::string_view file);
Result<ClusterSpec> ParseCluster(std::string_view text, std::string_view file);

// Loaders by catalog name (tried first) or YAML path. An unknown name lists the catalog.
Result<GpuSpec> LoadGpu(std::string_view name_or_path);
Result<NodeSpec> LoadNode(std::string_view name_or_path);
// "NODE:COUNT", "NODE:COUNT:GPUS" (GPUS per node, at most the node's; NODE a name or a path), or
// a cluster YAML path (a spec ending in .yaml/.yml, or without ':'). ClusterSpec.name is `spec` for
// the string forms and the file's `name` key (default: the path) for a YAML file.
Result<ClusterSpec> LoadCluster(std::string_view spec);

// The embedded catalogs (hardware/catalog/{gpus,nodes}/*.yaml), generated by cmake.
std::span<const EmbeddedFile> GpuCatalog();
std::span<const EmbeddedFile> NodeCatalog();

}  // namespace domino

#endif  // DOMINO_HARDWARE_HARDWARE_SPEC_H_
