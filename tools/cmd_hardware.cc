// `domino hardware [NAME]`: GPUs and node types as tables, or one GPU, node or cluster in detail.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "hardware/hardware_spec.h"
#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

std::string Peak(const GpuSpec& gpu, Dtype dtype) {
  return gpu.peak(dtype) > 0 ? fmt::format("{:g}", gpu.peak(dtype)) : "-";
}

void AddGpuRow(Table& table, const GpuSpec& gpu) {
  table.AddRow({gpu.name, std::to_string(gpu.sms), fmt::format("{:.1f}", gpu.memory_gib()),
                fmt::format("{:g}", gpu.hbm_GBps), Peak(gpu, Dtype::kFp32), Peak(gpu, Dtype::kTf32),
                Peak(gpu, Dtype::kBf16), Peak(gpu, Dtype::kFp8)});
}

Table GpuTable() {
  return Table({"gpu", "SMs", "memory GiB", "HBM GB/s", "fp32 TF/s", "tf32", "bf16", "fp8"});
}

Table NodeTable() {
  return Table({"node", "gpu", "gpus", "NVLink GB/s/dir", "NVLS", "NVLS busbw", "NICs",
                "NIC GB/s/dir", "node net GB/s"});
}

void AddNodeRow(Table& table, const NodeSpec& node) {
  table.AddRow({node.name, node.gpu.name, std::to_string(node.gpus_per_node),
                fmt::format("{:g}", node.nvlink.GBps_per_direction), node.nvls ? "yes" : "no",
                node.nvls ? fmt::format("{:g}", node.nvls_busbw_GBps) : "-",
                std::to_string(node.nics), fmt::format("{:g}", node.network.GBps_per_direction),
                fmt::format("{:g}", node.nics * node.network.GBps_per_direction)});
}

void ListHardware(OutputFormat format) {
  Table gpus = GpuTable();
  Json gpus_json = Json::array();
  for (const EmbeddedFile& file : GpuCatalog()) {
    Result<GpuSpec> gpu = LoadGpu(file.name);
    if (!gpu.ok()) Fail("hardware", gpu.message());
    AddGpuRow(gpus, *gpu);
    gpus_json.push_back(GpuJson(*gpu));
  }
  Table nodes = NodeTable();
  Json nodes_json = Json::array();
  for (const EmbeddedFile& file : NodeCatalog()) {
    Result<NodeSpec> node = LoadNode(file.name);
    if (!node.ok()) Fail("hardware", node.message());
    AddNodeRow(nodes, *node);
    nodes_json.push_back(NodeJson(*node));
  }
  if (format == OutputFormat::kJson) {
    Json document = JsonDocument("hardware");
    document["gpus"] = std::move(gpus_json);
    document["nodes"] = std::move(nodes_json);
    PrintJson(document, std::cout);
    return;
  }
  gpus.Print(std::cout);
  std::cout << "\n";
  nodes.Print(std::cout);
  std::cout << "\nTF/s are dense peaks. A cluster is NODE:COUNT (dgx-h100:4), NODE:COUNT:GPUS "
               "(dgx-h100:1:2) or a YAML file.\n";
}

void PrintLink(std::string_view what, const LinkSpec& link) {
  std::cout << fmt::format(
      "{}: {:g} GB/s per direction, efficiency {:g}, latency {:g} us + {:g} us per step\n", what,
      link.GBps_per_direction, link.efficiency, link.base_latency_us, link.step_latency_us);
}

void ShowNode(const NodeSpec& node) {
  Table nodes = NodeTable();
  AddNodeRow(nodes, node);
  nodes.Print(std::cout);
  PrintLink("NVLink", node.nvlink);
  PrintLink("network (per NIC)", node.network);
  std::cout << fmt::format(
      "contention: a collective holds {} SMs and moves {:g}x its bytes in HBM\n\n", node.comm_ctas,
      node.comm_hbm_factor);
  Table gpus = GpuTable();
  AddGpuRow(gpus, node.gpu);
  gpus.Print(std::cout);
}

// A GPU file has its own keys (`sms:`, `peak_tflops:`); a node file names its GPU (`gpu:`); a
// cluster file names its node (`node:`). Only a readable YAML mapping is sniffed: anything else is
// left to the cluster loader, which says what is wrong.
enum class FileKind { kOther, kGpu, kNode };

FileKind SniffFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return FileKind::kOther;
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return FileKind::kOther;
  Result<YAML::Node> root = ParseYaml(*text, path);
  if (!root.ok() || !root->IsMap() || (*root)["node"].IsDefined()) return FileKind::kOther;
  if ((*root)["gpu"].IsDefined()) return FileKind::kNode;
  if ((*root)["sms"].IsDefined() || (*root)["peak_tflops"].IsDefined()) return FileKind::kGpu;
  return FileKind::kOther;
}

// One GPU, node or cluster as {"gpu": ...}, {"node": ...} or {"cluster": ...}.
void PrintOneJson(std::string_view kind, Json entry) {
  Json document = JsonDocument("hardware");
  document[std::string(kind)] = std::move(entry);
  PrintJson(document, std::cout);
}

void ShowHardware(const std::string& name, OutputFormat format) {
  const bool json = format == OutputFormat::kJson;
  const FileKind kind = SniffFile(name);
  if (Result<GpuSpec> gpu = LoadGpu(name); gpu.ok() || kind == FileKind::kGpu) {
    if (!gpu.ok()) Fail("hardware", gpu.message());
    if (json) return PrintOneJson("gpu", GpuJson(*gpu));
    Table gpus = GpuTable();
    AddGpuRow(gpus, *gpu);
    gpus.Print(std::cout);
    std::cout << fmt::format(
        "GEMM efficiency at best {:g}, HBM efficiency {:g}, launch {:g} us "
        "({:g} us in a CUDA graph)\n",
        gpu->max_gemm_efficiency, gpu->hbm_efficiency, gpu->kernel_launch_us, gpu->graph_launch_us);
    return;
  }
  if (FindEmbedded(NodeCatalog(), name) != nullptr || kind == FileKind::kNode) {
    Result<NodeSpec> node = LoadNode(name);
    if (!node.ok()) Fail("hardware", node.message());
    if (json) return PrintOneJson("node", NodeJson(*node));
    ShowNode(*node);
    return;
  }
  Result<ClusterSpec> cluster = LoadCluster(name);
  if (!cluster.ok()) Fail("hardware", cluster.message());
  if (json) return PrintOneJson("cluster", ClusterJson(*cluster));
  std::cout << fmt::format("# cluster {}: {} node(s) x {} GPU(s) = {} GPUs\n\n", cluster->name,
                           cluster->nodes, cluster->gpus_per_node, cluster->total_gpus());
  ShowNode(cluster->node);
}

}  // namespace

void SetupHardware(CLI::App* sub) {
  auto name = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>();
  sub->add_option("name", *name,
                  "GPU or node name (h100-sxm, dgx-h100), a cluster (dgx-h100:4) or a YAML file");
  AddFormatOption(sub, format.get());
  sub->callback([name, format] {
    if (name->empty()) {
      ListHardware(*format);
    } else {
      ShowHardware(*name, *format);
    }
  });
}

}  // namespace domino::cli
