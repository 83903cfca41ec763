#include "hardware/hardware_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <vector>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"

namespace domino {
namespace {

constexpr std::array<std::pair<std::string_view, Dtype>, kDtypeCount> kDtypeNames{{
    {"fp32", Dtype::kFp32},
    {"tf32", Dtype::kTf32},
    {"bf16", Dtype::kBf16},
    {"fp16", Dtype::kFp16},
    {"fp8", Dtype::kFp8},
}};

constexpr int64_t kMaxGpusPerNode = 1024;
constexpr int64_t kMaxNodes = 100000;
constexpr double kMaxLatencyUs = 1e6;
constexpr RealRange kPositive{};
// A share of a rate (an efficiency, a bandwidth factor): from 0.001, below which times run to
// hundreds of digits, to 1.
constexpr RealRange kFraction{.min = 1e-3, .max = 1.0, .min_exclusive = false};
constexpr RealRange kShare{.min = 0.0, .max = 1.0, .min_exclusive = false};  // 0 allowed
constexpr RealRange kLatency{.min = 0.0, .max = kMaxLatencyUs, .min_exclusive = false};
// 1 MB/s to 1 PB/s: outside it a link is a typo, and its times would not print.
constexpr RealRange kLinkGBps{.min = 1e-3, .max = 1e6, .min_exclusive = false};
constexpr RealRange kChunkKiB{.max = 1 << 20};                              // (0 KiB, 1 GiB]
constexpr RealRange kKeys{.min = 0.0, .max = 1e6, .min_exclusive = false};  // [0, 1M] keys

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool LooksLikePath(std::string_view s) {
  return s.find('/') != std::string_view::npos || EndsWith(s, ".yaml") || EndsWith(s, ".yml");
}

bool FileExists(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string CatalogNames(std::span<const EmbeddedFile> catalog) {
  std::string names;
  for (const EmbeddedFile& file : catalog)
    names += (names.empty() ? "" : ", ") + std::string(file.name);
  return names;
}

// Finds `name_or_path` in `catalog`, else reads it as a file (near `from_file` when relative), and
// parses it with `parse`.
template <typename T>
Result<T> LoadFrom(std::span<const EmbeddedFile> catalog, std::string_view what,
                   std::string_view name_or_path, std::string_view from_file,
                   Result<T> (*parse)(std::string_view, std::string_view)) {
  if (const EmbeddedFile* entry = FindEmbedded(catalog, name_or_path))
    return parse(entry->text, entry->path);
  // A user's node file names "my-gpu.yaml" beside it, whatever the working directory.
  std::string path = PathNear(name_or_path, from_file);
  if (!LooksLikePath(name_or_path) && !FileExists(path)) {
    return Error(fmt::format("unknown {} '{}' (catalog: {}; or give a path to a YAML file)", what,
                             name_or_path, CatalogNames(catalog)));
  }
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  Result<T> spec = parse(*text, path);
  if (spec.ok()) spec->file = path;
  return spec;
}

void ReadLink(YamlMap& map, LinkSpec* link) {
  map.Real("GBps_per_direction", &link->GBps_per_direction, Need::kRequired, kLinkGBps);
  map.Real("efficiency", &link->efficiency, Need::kRequired, kFraction);
  map.Real("base_latency_us", &link->base_latency_us, Need::kOptional, kLatency);
  map.Real("step_latency_us", &link->step_latency_us, Need::kOptional, kLatency);
}

// Parses "123" as a positive integer up to `max`; nullopt for anything else.
std::optional<int> PositiveInt(std::string_view s, int64_t max) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 1 || value > max)
    return std::nullopt;
  return static_cast<int>(value);
}

std::vector<std::string_view> Split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == separator) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

Result<ClusterSpec> ParseClusterString(std::string_view spec) {
  auto fail = [&](std::string_view rule) {
    return Error(fmt::format("cluster '{}': {}", spec, rule));
  };
  std::vector<std::string_view> parts = Split(spec, ':');
  if (parts.size() > 3) return fail("expected NODE:COUNT or NODE:COUNT:GPUS (e.g. dgx-h100:4)");
  if (parts[0].empty()) return fail("node name is empty (expected NODE:COUNT, e.g. dgx-h100:4)");
  std::optional<int> count = PositiveInt(parts[1], kMaxNodes);
  if (!count) {
    return fail(fmt::format("node count must be a positive integer (at most {}), got '{}'",
                            kMaxNodes, parts[1]));
  }
  Result<NodeSpec> node = LoadNode(parts[0]);
  if (!node.ok()) return fail(node.message());
  ClusterSpec cluster{.name = std::string(spec),
                      .node = *node,
                      .nodes = *count,
                      .gpus_per_node = node->gpus_per_node};
  if (parts.size() == 3) {
    std::optional<int> gpus = PositiveInt(parts[2], kMaxGpusPerNode);
    if (!gpus)
      return fail(fmt::format("GPUS per node must be a positive integer, got '{}'", parts[2]));
    if (*gpus > node->gpus_per_node) {
      return fail(
          fmt::format("GPUS per node ({}) exceeds the node's {}", *gpus, node->gpus_per_node));
    }
    cluster.gpus_per_node = *gpus;
  }
  return cluster;
}

}  // namespace

std::string_view DtypeName(Dtype dtype) { return kDtypeNames[static_cast<int>(dtype)].first; }

int DtypeBytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp32:
    case Dtype::kTf32:
      return 4;
    case Dtype::kBf16:
    case Dtype::kFp16:
      return 2;
    case Dtype::kFp8:
      return 1;
  }
  return 0;
}

std::span<const std::pair<std::string_view, Dtype>> DtypeNames() { return kDtypeNames; }

Result<GpuSpec> ParseGpu(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, std::string(file));
  GpuSpec gpu;
  map.Name("name", &gpu.name, Need::kRequired);
  map.Int("sms", &gpu.sms, Need::kRequired, {.min = 1, .max = 100000});
  map.Real("memory_GB", &gpu.memory_GB, Need::kRequired, kPositive);
  // Rates from 0.001 (GB/s, TFLOP/s) up: below, times of hundreds of digits.
  map.Real("hbm_GBps", &gpu.hbm_GBps, Need::kRequired, kLinkGBps);
  if (std::optional<YamlMap> peaks = map.Map("peak_tflops", Need::kRequired)) {
    for (const auto& [name, dtype] : kDtypeNames) {
      RealRange range{.min_exclusive = dtype == Dtype::kFp32};
      double& peak = gpu.peak_tflops[static_cast<int>(dtype)];
      peaks->Real(name, &peak, Need::kRequired, range);
      if (peak > 0 && peak < kLinkGBps.min)
        peaks->Fail(name, fmt::format("must be 0 (no such tensor cores) or at least {:g}, got {:g}",
                                      kLinkGBps.min, peak));
    }
    (void)peaks->Finish();
  }
  map.Real("max_gemm_efficiency", &gpu.max_gemm_efficiency, Need::kOptional, kFraction);
  map.Real("fp8_gemm_efficiency", &gpu.fp8_gemm_efficiency, Need::kOptional, kFraction);
  map.Real("gemm_tile_overhead_k", &gpu.gemm_tile_overhead_k, Need::kOptional,
           {.min = 0, .max = 1e6, .min_exclusive = false});
  map.Real("gemm_fixed_us", &gpu.gemm_fixed_us, Need::kOptional, kLatency);
  map.Real("gemm_stream_k_min_k", &gpu.gemm_stream_k_min_k, Need::kOptional,
           {.min = 1, .max = 1e12, .min_exclusive = false});
  map.Real("gemm_half_tile_rate", &gpu.gemm_half_tile_rate, Need::kOptional,
           {.min = 0, .max = 1, .min_exclusive = false});
  map.Real("gemm_split_k_fixed_us", &gpu.gemm_split_k_fixed_us, Need::kOptional, kLatency);
  map.Real("gemm_cta_tiles", &gpu.gemm_cta_tiles, Need::kOptional,
           {.min = 0, .max = 1024, .min_exclusive = false});
  map.Real("gemm_persistent_cta_waves", &gpu.gemm_persistent_cta_waves, Need::kOptional,
           {.min = 0, .max = 1024, .min_exclusive = false});
  map.Real("hbm_efficiency", &gpu.hbm_efficiency, Need::kOptional, kFraction);
  map.Real("kernel_launch_us", &gpu.kernel_launch_us, Need::kOptional, kLatency);
  map.Real("graph_launch_us", &gpu.graph_launch_us, Need::kOptional, kLatency);
  map.Int("gemm_tile_m", &gpu.gemm_tile_m, Need::kOptional, {.min = 8, .max = 1024});
  map.Int("gemm_tile_n", &gpu.gemm_tile_n, Need::kOptional, {.min = 8, .max = 1024});
  map.Real("attention_efficiency", &gpu.attention_efficiency, Need::kOptional, kFraction);
  gpu.attention_backward_efficiency = gpu.attention_efficiency;
  map.Real("attention_backward_efficiency", &gpu.attention_backward_efficiency, Need::kOptional,
           kFraction);
  map.Real("attention_overhead_keys", &gpu.attention_overhead_keys, Need::kOptional, kKeys);
  map.Real("attention_backward_overhead_keys", &gpu.attention_backward_overhead_keys,
           Need::kOptional, kKeys);
  gpu.flash2_efficiency = gpu.attention_efficiency;
  gpu.flash2_backward_efficiency = gpu.attention_backward_efficiency;
  gpu.flash2_overhead_keys = gpu.attention_overhead_keys;
  gpu.flash2_backward_overhead_keys = gpu.attention_backward_overhead_keys;
  map.Real("flash2_efficiency", &gpu.flash2_efficiency, Need::kOptional, kFraction);
  map.Real("flash2_backward_efficiency", &gpu.flash2_backward_efficiency, Need::kOptional,
           kFraction);
  map.Real("flash2_overhead_keys", &gpu.flash2_overhead_keys, Need::kOptional, kKeys);
  map.Real("flash2_backward_overhead_keys", &gpu.flash2_backward_overhead_keys, Need::kOptional,
           kKeys);
  map.Real("power_duty_knee", &gpu.power_duty_knee, Need::kOptional, kShare);
  map.Real("power_duty_slope", &gpu.power_duty_slope, Need::kOptional, kShare);
  map.String("caveat", &gpu.caveat, Need::kOptional);
  if (!map.failed() && gpu.graph_launch_us > gpu.kernel_launch_us) {
    map.Fail("graph_launch_us", fmt::format("must be at most kernel_launch_us ({:g}), got {:g}",
                                            gpu.kernel_launch_us, gpu.graph_launch_us));
  }
  DOMINO_RETURN_IF_ERROR(map.Finish());
  return gpu;
}

Result<NodeSpec> ParseNode(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, std::string(file));
  NodeSpec node;
  map.Name("name", &node.name, Need::kRequired);
  std::string gpu_ref;
  map.String("gpu", &gpu_ref, Need::kRequired);
  if (!map.failed()) {
    Result<GpuSpec> gpu = LoadFrom<GpuSpec>(GpuCatalog(), "GPU", gpu_ref, file, &ParseGpu);
    if (gpu.ok()) {
      node.gpu = *gpu;
    } else {
      map.Fail("gpu", gpu.message());
    }
  }
  map.Int("gpus_per_node", &node.gpus_per_node, Need::kRequired,
          {.min = 1, .max = kMaxGpusPerNode});
  map.Int("gpus_per_host", &node.gpus_per_host, Need::kOptional,
          {.min = 1, .max = kMaxGpusPerNode});
  if (!map.failed() && node.gpus_per_host > 0 && node.gpus_per_node % node.gpus_per_host != 0)
    map.Fail("gpus_per_host", fmt::format("{} must divide gpus_per_node ({})", node.gpus_per_host,
                                          node.gpus_per_node));
  if (std::optional<YamlMap> nvlink = map.Map("nvlink", Need::kRequired)) {
    ReadLink(*nvlink, &node.nvlink);
    (void)nvlink->Finish();
  }
  map.Bool("nvls", &node.nvls, Need::kRequired);
  if (node.nvls) {
    map.Real("nvls_busbw_GBps", &node.nvls_busbw_GBps, Need::kRequired, kPositive);
    map.Real("nvls_latency_us", &node.nvls_latency_us, Need::kOptional, kLatency);
  } else if (!map.failed()) {
    map.Real("nvls_busbw_GBps", &node.nvls_busbw_GBps, Need::kOptional,
             {.min = 0.0, .min_exclusive = false});
    if (node.nvls_busbw_GBps != 0)
      map.Fail("nvls_busbw_GBps", "must be 0 or absent when nvls is false");
    if (map.Has("nvls_latency_us"))
      map.Fail("nvls_latency_us", "must be absent when nvls is false");
    map.Real("nvls_latency_us", &node.nvls_latency_us, Need::kOptional, kLatency);
  }
  map.Bool("ib_sharp", &node.ib_sharp, Need::kOptional);
  if (node.ib_sharp && !node.nvls && !map.failed())
    map.Fail("ib_sharp", "needs nvls: true (domino models SHARP across nodes with NVLS inside)");
  map.Real("ib_sharp_latency_us", &node.ib_sharp_latency_us, Need::kOptional, kLatency);
  map.Int("nics", &node.nics, Need::kRequired, {.min = 1, .max = kMaxGpusPerNode});
  if (std::optional<YamlMap> network = map.Map("network", Need::kRequired)) {
    ReadLink(*network, &node.network);
    (void)network->Finish();
  }
  if (std::optional<YamlMap> ll128 = map.Map("ll128", Need::kOptional)) {
    ll128->Real("base_latency_us", &node.ll128.base_latency_us, Need::kOptional, kLatency);
    ll128->Real("nvlink_step_latency_us", &node.ll128.nvlink_step_latency_us, Need::kOptional,
                kLatency);
    ll128->Real("network_step_latency_us", &node.ll128.network_step_latency_us, Need::kOptional,
                kLatency);
    ll128->Real("bandwidth_factor", &node.ll128.bandwidth_factor, Need::kOptional, kFraction);
    (void)ll128->Finish();
  }
  if (std::optional<YamlMap> ll = map.Map("ll", Need::kOptional)) {
    ll->Real("base_latency_us", &node.ll.base_latency_us, Need::kOptional, kLatency);
    ll->Real("nvlink_step_latency_us", &node.ll.nvlink_step_latency_us, Need::kOptional, kLatency);
    ll->Real("network_step_latency_us", &node.ll.network_step_latency_us, Need::kOptional,
             kLatency);
    ll->Real("bandwidth_factor", &node.ll.bandwidth_factor, Need::kOptional, kFraction);
    (void)ll->Finish();
  }
  if (std::optional<YamlMap> ramp = map.Map("bandwidth_ramp", Need::kOptional)) {
    double half_MiB = node.ramp.half_bytes / (1 << 20);
    ramp->Real("half_MiB", &half_MiB, Need::kOptional,
               {.min = 0, .max = 1e9, .min_exclusive = false});
    ramp->Real("exponent", &node.ramp.exponent, Need::kOptional,
               {.min = 0.05, .max = 20, .min_exclusive = false});
    node.ramp.half_bytes = half_MiB * (1 << 20);
    (void)ramp->Finish();
  }
  if (std::optional<YamlMap> tree = map.Map("tree", Need::kOptional)) {
    tree->Real("nvlink_step_latency_us", &node.tree.nvlink_step_latency_us, Need::kOptional,
               kLatency);
    tree->Real("network_step_latency_us", &node.tree.network_step_latency_us, Need::kOptional,
               kLatency);
    tree->Real("nvls_network_step_latency_us", &node.tree.nvls_network_step_latency_us,
               Need::kOptional, kLatency);
    tree->Real("ll128_nvlink_step_latency_us", &node.tree.ll128_nvlink_step_latency_us,
               Need::kOptional, kLatency);
    tree->Real("ll128_network_step_latency_us", &node.tree.ll128_network_step_latency_us,
               Need::kOptional, kLatency);
    tree->Real("bandwidth_factor", &node.tree.bandwidth_factor, Need::kOptional, kFraction);
    tree->Int("nvls_channels", &node.tree.nvls_channels, Need::kOptional, {.min = 1, .max = 1024});
    tree->Real("nvls_chunk_KiB", &node.tree.nvls_chunk_KiB, Need::kOptional, kChunkKiB);
    tree->Real("nvls_deep_chunk_KiB", &node.tree.nvls_deep_chunk_KiB, Need::kOptional, kChunkKiB);
    (void)tree->Finish();
  }
  if (std::optional<YamlMap> contention = map.Map("contention", Need::kOptional)) {
    contention->Int("comm_ctas", &node.comm_ctas, Need::kOptional,
                    {.min = 1, .max = std::max(1, node.gpu.sms)});
    contention->Real("comm_hbm_factor", &node.comm_hbm_factor, Need::kOptional,
                     {.min = 0.0, .max = 100.0});
    (void)contention->Finish();
  }
  // The default comm_ctas holds too: a GPU with fewer SMs than a collective's CTAs is refused
  // whether the count was written or not.
  if (!map.failed() && node.gpu.sms > 0 && node.comm_ctas > node.gpu.sms) {
    map.Fail(map.Has("contention") ? "contention" : "gpu",
             fmt::format("the GPU's {} SMs cannot hold a collective's {} CTAs (contention.comm_ctas"
                         "{}); set contention.comm_ctas to at most {}",
                         node.gpu.sms, node.comm_ctas, map.Has("contention") ? "" : ", the default",
                         node.gpu.sms));
  }
  DOMINO_RETURN_IF_ERROR(map.Finish());
  return node;
}

Result<ClusterSpec> ParseCluster(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, std::string(file));
  ClusterSpec cluster;
  cluster.name = std::string(file);
  map.Name("name", &cluster.name, Need::kOptional);
  std::string node_ref;
  map.String("node", &node_ref, Need::kRequired);
  if (!map.failed()) {
    Result<NodeSpec> node = LoadFrom<NodeSpec>(NodeCatalog(), "node", node_ref, file, &ParseNode);
    if (node.ok()) {
      cluster.node = *node;
    } else {
      map.Fail("node", node.message());
    }
  }
  map.Int("nodes", &cluster.nodes, Need::kRequired, {.min = 1, .max = kMaxNodes});
  cluster.gpus_per_node = cluster.node.gpus_per_node;
  map.Int("gpus_per_node", &cluster.gpus_per_node, Need::kOptional,
          {.min = 1, .max = kMaxGpusPerNode});
  if (!map.failed() && cluster.gpus_per_node > cluster.node.gpus_per_node) {
    map.Fail("gpus_per_node", fmt::format("{} exceeds the node's {}", cluster.gpus_per_node,
                                          cluster.node.gpus_per_node));
  }
  DOMINO_RETURN_IF_ERROR(map.Finish());
  return cluster;
}

Result<GpuSpec> LoadGpu(std::string_view name_or_path) {
  return LoadFrom<GpuSpec>(GpuCatalog(), "GPU", name_or_path, "", &ParseGpu);
}

Result<NodeSpec> LoadNode(std::string_view name_or_path) {
  return LoadFrom<NodeSpec>(NodeCatalog(), "node", name_or_path, "", &ParseNode);
}

Result<ClusterSpec> LoadCluster(std::string_view spec) {
  bool yaml_name = EndsWith(spec, ".yaml") || EndsWith(spec, ".yml");
  if (!yaml_name && spec.find(':') != std::string_view::npos) return ParseClusterString(spec);
  if (!LooksLikePath(spec) && !FileExists(std::filesystem::path(spec))) {
    return Error(fmt::format(
        "cluster '{}': expected NODE:COUNT (e.g. dgx-h100:4), NODE:COUNT:GPUS or a cluster YAML "
        "file (nodes: {})",
        spec, CatalogNames(NodeCatalog())));
  }
  Result<std::string> text = ReadTextFile(std::string(spec));
  if (!text.ok()) return text.error();
  return ParseCluster(*text, spec);
}

}  // namespace domino
