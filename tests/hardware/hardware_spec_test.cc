#include "hardware/hardware_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/hardware/test_util.h"

namespace domino {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_util::FreshDir;
using testing_util::Replace;
using testing_util::WriteFile;

TEST(DtypeTest, NamesAndBytes) {
  EXPECT_EQ(DtypeName(Dtype::kFp32), "fp32");
  EXPECT_EQ(DtypeName(Dtype::kTf32), "tf32");
  EXPECT_EQ(DtypeName(Dtype::kBf16), "bf16");
  EXPECT_EQ(DtypeName(Dtype::kFp16), "fp16");
  EXPECT_EQ(DtypeName(Dtype::kFp8), "fp8");
  EXPECT_EQ(DtypeBytes(Dtype::kFp32), 4);
  EXPECT_EQ(DtypeBytes(Dtype::kTf32), 4);
  EXPECT_EQ(DtypeBytes(Dtype::kBf16), 2);
  EXPECT_EQ(DtypeBytes(Dtype::kFp16), 2);
  EXPECT_EQ(DtypeBytes(Dtype::kFp8), 1);
  ASSERT_EQ(DtypeNames().size(), static_cast<size_t>(kDtypeCount));
  for (const auto& [name, dtype] : DtypeNames()) EXPECT_EQ(DtypeName(dtype), name);
}

TEST(CatalogTest, EveryEntryLoadsUnderItsOwnName) {
  EXPECT_EQ(GpuCatalog().size(), 6u);
  EXPECT_EQ(NodeCatalog().size(), 5u);
  for (const EmbeddedFile& file : GpuCatalog()) {
    Result<GpuSpec> gpu = LoadGpu(file.name);
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    EXPECT_EQ(gpu->name, file.name);
    EXPECT_GT(gpu->peak(Dtype::kBf16), gpu->peak(Dtype::kFp32));
  }
  for (const EmbeddedFile& file : NodeCatalog()) {
    Result<NodeSpec> node = LoadNode(file.name);
    ASSERT_TRUE(node.ok()) << node.message();
    EXPECT_EQ(node->name, file.name);
    // A NIC a GPU: 8-GPU DGX/HGX boards and GB200 NVL72's 72-GPU racks.
    EXPECT_EQ(node->gpus_per_node, file.name == "gb200-nvl72" ? 72 : 8);
    EXPECT_EQ(node->nics, node->gpus_per_node);
    EXPECT_EQ(node->comm_ctas, 16);
    EXPECT_DOUBLE_EQ(node->comm_hbm_factor, 2.5);
    EXPECT_DOUBLE_EQ(node->nvlink.base_latency_us, 8.4);
    EXPECT_DOUBLE_EQ(node->nvlink.step_latency_us, 3.4);
    EXPECT_DOUBLE_EQ(node->network.step_latency_us, 14);
  }
}

TEST(CatalogTest, GpuFiguresMatchDatasheets) {
  Result<GpuSpec> a100 = LoadGpu("a100-sxm-80gb");
  ASSERT_TRUE(a100.ok()) << a100.message();
  EXPECT_EQ(a100->sms, 108);
  // Memory as CUDA reports it (the datasheet's 80 GB is binary, and the driver keeps some).
  EXPECT_NEAR(a100->memory_gib(), 79.21, 0.01);
  EXPECT_DOUBLE_EQ(a100->hbm_GBps, 2039);
  EXPECT_DOUBLE_EQ(a100->peak(Dtype::kBf16), 312);
  EXPECT_DOUBLE_EQ(a100->peak(Dtype::kTf32), 156);
  EXPECT_DOUBLE_EQ(a100->peak(Dtype::kFp8), 0);

  Result<GpuSpec> h100 = LoadGpu("h100-sxm");
  ASSERT_TRUE(h100.ok()) << h100.message();
  EXPECT_EQ(h100->sms, 132);
  EXPECT_NEAR(h100->memory_gib(), 79.21, 0.01);
  EXPECT_DOUBLE_EQ(h100->hbm_GBps, 3350);
  EXPECT_DOUBLE_EQ(h100->peak(Dtype::kBf16), 989);
  EXPECT_DOUBLE_EQ(h100->peak(Dtype::kFp16), 989);
  EXPECT_DOUBLE_EQ(h100->peak(Dtype::kFp8), 1979);
  EXPECT_DOUBLE_EQ(h100->peak(Dtype::kFp32), 67);
  // The 16-bit GEMM main loop at 700 W: fast enough for the 769-798 TFLOP/s one H200 (the same
  // die and power) measured on 8192^3, and below peak (the shapes are checked in GemmModelTest).
  EXPECT_GE(h100->max_gemm_efficiency, 0.78);
  EXPECT_LT(h100->max_gemm_efficiency, 0.9);

  Result<GpuSpec> h200 = LoadGpu("h200-sxm");
  ASSERT_TRUE(h200.ok()) << h200.message();
  EXPECT_EQ(h200->sms, 132);
  EXPECT_NEAR(h200->memory_gib(), 139.80, 0.01);
  EXPECT_DOUBLE_EQ(h200->hbm_GBps, 4800);
  EXPECT_DOUBLE_EQ(h200->peak(Dtype::kBf16), 989);
  // Measured: ~4.3 TB/s copy (its 769-798 TFLOP/s bf16 GEMM is checked in GemmModelTest).
  EXPECT_NEAR(h200->hbm_efficiency * 4800, 4300, 150);

  // GH200's GPU: the H100 die with 144 GB of HBM3e at up to 4.9 TB/s.
  Result<GpuSpec> gh200 = LoadGpu("gh200");
  ASSERT_TRUE(gh200.ok()) << gh200.message();
  EXPECT_EQ(gh200->sms, 132);
  EXPECT_NEAR(gh200->memory_gib(), 142.50, 0.01);
  EXPECT_DOUBLE_EQ(gh200->hbm_GBps, 4900);
  EXPECT_DOUBLE_EQ(gh200->peak(Dtype::kBf16), 989);
  EXPECT_DOUBLE_EQ(gh200->peak(Dtype::kFp8), 1979);
  // The same die: the same main loops at full clock. A training step's power limit is priced on
  // the 700 W parts, from an H200's measured loops; no GH200 step was measured.
  EXPECT_DOUBLE_EQ(gh200->max_gemm_efficiency, h100->max_gemm_efficiency);
  EXPECT_DOUBLE_EQ(gh200->fp8_gemm_efficiency, h100->fp8_gemm_efficiency);
  EXPECT_DOUBLE_EQ(h200->max_gemm_efficiency, h100->max_gemm_efficiency);
  EXPECT_DOUBLE_EQ(h200->power_duty_knee, h100->power_duty_knee);
  EXPECT_DOUBLE_EQ(h200->power_duty_slope, h100->power_duty_slope);
  EXPECT_GT(h100->power_duty_slope, 0);
  EXPECT_EQ(gh200->power_duty_slope, 0);

  Result<GpuSpec> b200 = LoadGpu("b200");
  ASSERT_TRUE(b200.ok()) << b200.message();
  EXPECT_EQ(b200->sms, 148);
  EXPECT_NEAR(b200->memory_gib(), 178.35, 0.01);
  EXPECT_DOUBLE_EQ(b200->hbm_GBps, 8000);
  EXPECT_DOUBLE_EQ(b200->peak(Dtype::kBf16), 2250);
  EXPECT_DOUBLE_EQ(b200->peak(Dtype::kFp8), 4500);
  // Blackwell's fp8 main loop at the 16-bit one's share of its peak (the MAMF rows), and the gap
  // its end-to-end rows show named beside every prediction; Hopper has none to name.
  EXPECT_DOUBLE_EQ(b200->fp8_gemm_efficiency, b200->max_gemm_efficiency);
  EXPECT_LT(h100->fp8_gemm_efficiency, h100->max_gemm_efficiency);
  EXPECT_NE(b200->caveat.find("25-33% longer"), std::string::npos);
  Result<GpuSpec> gb200 = LoadGpu("gb200");
  ASSERT_TRUE(gb200.ok()) << gb200.message();
  EXPECT_EQ(gb200->caveat, b200->caveat);
  EXPECT_TRUE(h100->caveat.empty());
}

TEST(CatalogTest, NodeFiguresMatchFacts) {
  Result<NodeSpec> h100 = LoadNode("dgx-h100");
  ASSERT_TRUE(h100.ok()) << h100.message();
  EXPECT_EQ(h100->gpu.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(h100->nvlink.GBps_per_direction, 450);
  EXPECT_TRUE(h100->nvls);
  EXPECT_DOUBLE_EQ(h100->nvls_busbw_GBps, 480);
  EXPECT_DOUBLE_EQ(h100->network.GBps_per_direction, 50);
  // Ring busbw ~365-370 GB/s; ~46-49 GB/s achieved per NIC.
  double ring_GBps = h100->nvlink.GBps_per_direction * h100->nvlink.efficiency;
  EXPECT_GE(ring_GBps, 360);
  EXPECT_LE(ring_GBps, 372);
  double nic_GBps = h100->network.GBps_per_direction * h100->network.efficiency;
  EXPECT_GE(nic_GBps, 46);
  EXPECT_LE(nic_GBps, 49);

  Result<NodeSpec> a100 = LoadNode("dgx-a100");
  ASSERT_TRUE(a100.ok()) << a100.message();
  EXPECT_EQ(a100->gpu.name, "a100-sxm-80gb");
  EXPECT_DOUBLE_EQ(a100->nvlink.GBps_per_direction, 300);
  EXPECT_FALSE(a100->nvls);
  EXPECT_DOUBLE_EQ(a100->nvls_busbw_GBps, 0);
  EXPECT_DOUBLE_EQ(a100->network.GBps_per_direction, 25);

  Result<NodeSpec> h200 = LoadNode("hgx-h200");
  ASSERT_TRUE(h200.ok()) << h200.message();
  EXPECT_EQ(h200->gpu.name, "h200-sxm");
  EXPECT_NEAR(h200->gpu.memory_gib(), 139.80, 0.01);
  EXPECT_DOUBLE_EQ(h200->nvlink.GBps_per_direction, 450);
  EXPECT_TRUE(h200->nvls);

  Result<NodeSpec> b200 = LoadNode("dgx-b200");
  ASSERT_TRUE(b200.ok()) << b200.message();
  EXPECT_EQ(b200->gpu.name, "b200");
  EXPECT_DOUBLE_EQ(b200->nvlink.GBps_per_direction, 900);
  EXPECT_TRUE(b200->nvls);
  EXPECT_GT(b200->nvls_busbw_GBps, h100->nvls_busbw_GBps);

  // GB200 NVL72: a rack of 72 GB200 GPUs (the B200 die at 1,200 W) on one NVLink domain, a NIC
  // each.
  Result<NodeSpec> nvl72 = LoadNode("gb200-nvl72");
  ASSERT_TRUE(nvl72.ok()) << nvl72.message();
  EXPECT_EQ(nvl72->gpu.name, "gb200");
  EXPECT_EQ(nvl72->gpus_per_node, 72);
  EXPECT_EQ(nvl72->nics, 72);
  EXPECT_DOUBLE_EQ(nvl72->nvlink.GBps_per_direction, 900);
  EXPECT_DOUBLE_EQ(nvl72->gpu.peak(Dtype::kBf16), 2500);
  EXPECT_DOUBLE_EQ(nvl72->gpu.peak(Dtype::kFp8), 5000);
  EXPECT_EQ(nvl72->gpu.sms, b200->gpu.sms);
  // Its hosts are the rack's 18 trays of 4 GPUs: what launchers count.
  EXPECT_EQ(nvl72->gpus_per_host, 4);
  Result<ClusterSpec> racks = LoadCluster("gb200-nvl72:2");
  ASSERT_TRUE(racks.ok()) << racks.message();
  EXPECT_EQ(racks->launch_gpus_per_host(), 4);
  EXPECT_EQ(racks->hosts(), 36);
  Result<ClusterSpec> part = LoadCluster("gb200-nvl72:1:30");  // 2 GPUs of each of 15 trays
  ASSERT_TRUE(part.ok()) << part.message();
  EXPECT_EQ(part->launch_gpus_per_host(), 2);
  EXPECT_EQ(part->hosts(), 15);
  Result<ClusterSpec> dgx = LoadCluster("dgx-h100:4:2");  // without gpus_per_host: the node
  ASSERT_TRUE(dgx.ok()) << dgx.message();
  EXPECT_EQ(dgx->launch_gpus_per_host(), 2);
  EXPECT_EQ(dgx->hosts(), 4);
}

TEST(CatalogTest, UnknownNamesListTheCatalog) {
  Result<GpuSpec> gpu = LoadGpu("h900");
  ASSERT_FALSE(gpu.ok());
  EXPECT_THAT(gpu.message(), AllOf(HasSubstr("unknown GPU 'h900'"), HasSubstr("h100-sxm"),
                                   HasSubstr("a100-sxm-80gb")));
  Result<NodeSpec> node = LoadNode("dgx-h900");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.message(), AllOf(HasSubstr("unknown node 'dgx-h900'"), HasSubstr("dgx-h100")));
  Result<NodeSpec> missing = LoadNode("no/such/node.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("no/such/node.yaml"));
}

constexpr std::string_view kGpu = R"(name: test-gpu
sms: 100
memory_GB: 80
hbm_GBps: 3000
peak_tflops: {fp32: 60, tf32: 400, bf16: 900, fp16: 900, fp8: 1800}
max_gemm_efficiency: 0.8
hbm_efficiency: 0.9
kernel_launch_us: 4
graph_launch_us: 1
)";

struct BadCase {
  std::string_view from, to;
  std::string_view where;  // "bad.yaml:LINE:"
  std::string_view key;
  std::string_view rule;
};

TEST(ParseGpuTest, ValidAndOptionalKeys) {
  Result<GpuSpec> gpu = ParseGpu(kGpu, "gpu.yaml");
  ASSERT_TRUE(gpu.ok()) << gpu.message();
  EXPECT_EQ(gpu->sms, 100);
  EXPECT_DOUBLE_EQ(gpu->peak(Dtype::kFp8), 1800);
  Result<GpuSpec> defaults =
      ParseGpu(Replace(std::string(kGpu), "hbm_efficiency: 0.9\n", ""), "gpu.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.message();
  EXPECT_DOUBLE_EQ(defaults->hbm_efficiency, GpuSpec{}.hbm_efficiency);
  // Attention's per-tile overhead: none unless the file says, and never negative.
  EXPECT_EQ(defaults->attention_overhead_keys, 0);
  Result<GpuSpec> keys = ParseGpu(std::string(kGpu) + "attention_overhead_keys: 184\n" +
                                      "attention_backward_overhead_keys: 500\n",
                                  "gpu.yaml");
  ASSERT_TRUE(keys.ok()) << keys.message();
  EXPECT_EQ(keys->attention_overhead_keys, 184);
  EXPECT_EQ(keys->attention_backward_overhead_keys, 500);
  // FlashAttention-2's four: the flash kernel's unless the file gives its own.
  EXPECT_EQ(keys->flash2_efficiency, keys->attention_efficiency);
  EXPECT_EQ(keys->flash2_backward_efficiency, keys->attention_backward_efficiency);
  EXPECT_EQ(keys->flash2_overhead_keys, 184);
  EXPECT_EQ(keys->flash2_backward_overhead_keys, 500);
  Result<GpuSpec> flash2 =
      ParseGpu(std::string(kGpu) + "attention_overhead_keys: 184\nflash2_efficiency: 0.3\n" +
                   "flash2_backward_efficiency: 0.31\nflash2_overhead_keys: 56\n" +
                   "flash2_backward_overhead_keys: 526\n",
               "gpu.yaml");
  ASSERT_TRUE(flash2.ok()) << flash2.message();
  EXPECT_EQ(flash2->flash2_efficiency, 0.3);
  EXPECT_EQ(flash2->flash2_backward_efficiency, 0.31);
  EXPECT_EQ(flash2->flash2_overhead_keys, 56);
  EXPECT_EQ(flash2->flash2_backward_overhead_keys, 526);
  EXPECT_EQ(flash2->attention_overhead_keys, 184);
  Result<GpuSpec> too_high = ParseGpu(std::string(kGpu) + "flash2_efficiency: 1.5\n", "gpu.yaml");
  ASSERT_FALSE(too_high.ok());
  EXPECT_THAT(too_high.message(), HasSubstr("flash2_efficiency"));
  Result<GpuSpec> negative =
      ParseGpu(std::string(kGpu) + "attention_overhead_keys: -1\n", "gpu.yaml");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.message(), HasSubstr("attention_overhead_keys"));
  // The power limit: none unless the file says; both figures are shares in [0, 1].
  EXPECT_EQ(defaults->power_duty_slope, 0);
  Result<GpuSpec> power =
      ParseGpu(std::string(kGpu) + "power_duty_knee: 0.6\npower_duty_slope: 0.375\n", "gpu.yaml");
  ASSERT_TRUE(power.ok()) << power.message();
  EXPECT_DOUBLE_EQ(power->power_duty_knee, 0.6);
  EXPECT_DOUBLE_EQ(power->power_duty_slope, 0.375);
  Result<GpuSpec> steep = ParseGpu(std::string(kGpu) + "power_duty_slope: 1.5\n", "gpu.yaml");
  ASSERT_FALSE(steep.ok());
  EXPECT_THAT(steep.message(), HasSubstr("power_duty_slope"));
}

TEST(ParseGpuTest, BadInputNamesFileLineAndKey) {
  const BadCase cases[] = {
      {"sms: 100", "sms: 0", "bad.yaml:2:", "sms", "positive integer"},
      {"sms: 100", "sms: many", "bad.yaml:2:", "sms", "expected an integer"},
      {"memory_GB: 80", "memory_GB: -1", "bad.yaml:3:", "memory_GB", "greater than 0"},
      {"fp32: 60", "fp32: 0", "bad.yaml:5:", "peak_tflops.fp32", "greater than 0"},
      {"bf16: 900", "bf16: -5", "bad.yaml:5:", "peak_tflops.bf16", "at least 0"},
      {", fp8: 1800", "", "bad.yaml:5:", "peak_tflops.fp8", "missing required key"},
      {"fp8: 1800", "fp8: 1800, fp4: 1", "bad.yaml:5:", "peak_tflops.fp4", "unknown key"},
      {"max_gemm_efficiency: 0.8", "max_gemm_efficiency: 1.2", "bad.yaml:6:", "max_gemm_efficiency",
       "at most 1"},
      {"hbm_efficiency: 0.9", "hbm_efficiency: 0", "bad.yaml:7:", "hbm_efficiency",
       "at least 0.001"},
      {"graph_launch_us: 1", "graph_launch_us: 10", "bad.yaml:9:", "graph_launch_us",
       "at most kernel_launch_us"},
      {"hbm_GBps: 3000", "hbm_GBps: 3000\nsmss: 3", "bad.yaml:5:", "smss", "did you mean 'sms'?"},
      {"name: test-gpu\n", "", "bad.yaml:1:", "name", "missing required key"},
      {"sms: 100", "sms: [100", "bad.yaml:", "", "invalid YAML"},
  };
  for (const BadCase& c : cases) {
    Result<GpuSpec> gpu = ParseGpu(Replace(std::string(kGpu), c.from, c.to), "bad.yaml");
    ASSERT_FALSE(gpu.ok()) << c.to;
    EXPECT_THAT(gpu.message(), AllOf(StartsWith(c.where), HasSubstr(c.key), HasSubstr(c.rule)));
  }
}

constexpr std::string_view kNode = R"(name: test-node
gpu: h100-sxm
gpus_per_node: 8
nvlink:
  GBps_per_direction: 450
  efficiency: 0.81
  base_latency_us: 8.4
  step_latency_us: 3.4
nvls: true
nvls_busbw_GBps: 480
nics: 8
network:
  GBps_per_direction: 50
  efficiency: 0.93
contention:
  comm_ctas: 16
  comm_hbm_factor: 2.5
)";

TEST(ParseNodeTest, ValidAndDefaults) {
  Result<NodeSpec> node = ParseNode(kNode, "node.yaml");
  ASSERT_TRUE(node.ok()) << node.message();
  EXPECT_EQ(node->gpu.sms, 132);
  EXPECT_DOUBLE_EQ(node->nvls_latency_us, 25);
  // Network latencies were left out: NCCL's Simple-protocol defaults.
  EXPECT_DOUBLE_EQ(node->network.base_latency_us, 8.4);
  EXPECT_DOUBLE_EQ(node->network.step_latency_us, 14);
  EXPECT_FALSE(node->ib_sharp);
  // NVLS-tree's channels and chunks were left out: NCCL's on Hopper.
  EXPECT_EQ(node->tree.nvls_channels, 16);
  EXPECT_DOUBLE_EQ(node->tree.nvls_chunk_KiB, 128);
  EXPECT_DOUBLE_EQ(node->tree.nvls_deep_chunk_KiB, 64);
  Result<NodeSpec> tuned = ParseNode(
      Replace(std::string(kNode), "nics: 8",
              "tree: {nvls_channels: 24, nvls_chunk_KiB: 64, nvls_deep_chunk_KiB: 32}\nnics: 8"),
      "node.yaml");
  ASSERT_TRUE(tuned.ok()) << tuned.message();
  EXPECT_EQ(tuned->tree.nvls_channels, 24);
  EXPECT_DOUBLE_EQ(tuned->tree.nvls_chunk_KiB, 64);
  EXPECT_DOUBLE_EQ(tuned->tree.nvls_deep_chunk_KiB, 32);
  Result<NodeSpec> sharp =
      ParseNode(Replace(std::string(kNode), "nics: 8", "ib_sharp: true\nnics: 8"), "node.yaml");
  ASSERT_TRUE(sharp.ok()) << sharp.message();
  EXPECT_TRUE(sharp->ib_sharp);
  EXPECT_DOUBLE_EQ(sharp->ib_sharp_latency_us, 18);
  Result<NodeSpec> no_nvls =
      ParseNode(Replace(Replace(std::string(kNode), "nvls: true", "nvls: false"),
                        "nvls_busbw_GBps: 480", "nvls_busbw_GBps: 0"),
                "node.yaml");
  ASSERT_TRUE(no_nvls.ok()) << no_nvls.message();
  EXPECT_FALSE(no_nvls->nvls);
}

TEST(ParseNodeTest, BadInputNamesFileLineAndKey) {
  const BadCase cases[] = {
      {"gpu: h100-sxm", "gpu: x100", "bad.yaml:2:", "gpu: unknown GPU 'x100'", "h100-sxm"},
      {"gpus_per_node: 8", "gpus_per_node: 0", "bad.yaml:3:", "gpus_per_node", "positive"},
      {"  GBps_per_direction: 450", "  GBps_per_direction: 0",
       "bad.yaml:5:", "nvlink.GBps_per_direction", "at least 0.001"},
      // A link so slow that its times would print with 300 digits.
      {"  GBps_per_direction: 50", "  GBps_per_direction: 1e-300",
       "bad.yaml:13:", "network.GBps_per_direction", "at least 0.001"},
      {"efficiency: 0.81", "efficiency: 1.5", "bad.yaml:6:", "nvlink.efficiency", "at most 1"},
      {"  step_latency_us: 3.4", "  step_latency_us: -1", "bad.yaml:8:", "nvlink.step_latency_us",
       "at least 0"},
      {"nvls: true", "nvls: maybe", "bad.yaml:9:", "nvls", "true or false"},
      {"nvls_busbw_GBps: 480\n", "", "bad.yaml:1:", "nvls_busbw_GBps", "missing required key"},
      {"nvls: true", "nvls: false", "bad.yaml:10:", "nvls_busbw_GBps",
       "must be 0 or absent when nvls is false"},
      {"nvls: true\nnvls_busbw_GBps: 480", "nvls: false\nib_sharp: true",
       "bad.yaml:10:", "ib_sharp", "needs nvls: true"},
      {"nics: 8", "nics: 0", "bad.yaml:11:", "nics", "positive"},
      {"gpus_per_node: 8", "gpus_per_node: 8\ngpus_per_host: 3", "bad.yaml:4:", "gpus_per_host",
       "3 must divide gpus_per_node (8)"},
      {"efficiency: 0.93", "efficiency: 0", "bad.yaml:14:", "network.efficiency", "at least 0.001"},
      {"comm_ctas: 16", "comm_ctas: 200", "bad.yaml:16:", "contention.comm_ctas",
       "between 1 and 132"},
      {"comm_hbm_factor: 2.5", "comm_hbm_factor: -1", "bad.yaml:17:", "contention.comm_hbm_factor",
       "greater than 0"},
      {"nics: 8", "nics: 8\nnicks: 8", "bad.yaml:12:", "nicks", "did you mean 'nics'?"},
      {"nics: 8", "tree: {nvls_channels: 0}\nnics: 8", "bad.yaml:11:", "tree.nvls_channels",
       "positive integer"},
      {"nics: 8", "tree: {nvls_deep_chunk_KiB: 0}\nnics: 8",
       "bad.yaml:11:", "tree.nvls_deep_chunk_KiB", "greater than 0"},
      {"network:\n  GBps_per_direction: 50\n  efficiency: 0.93\n", "", "bad.yaml:1:", "network",
       "missing required key"},
  };
  for (const BadCase& c : cases) {
    Result<NodeSpec> node = ParseNode(Replace(std::string(kNode), c.from, c.to), "bad.yaml");
    ASSERT_FALSE(node.ok()) << c.to;
    EXPECT_THAT(node.message(), AllOf(StartsWith(c.where), HasSubstr(c.key), HasSubstr(c.rule)));
  }
}

TEST(ParseNodeTest, DefaultCommCtasMustFitTheGpuToo) {
  // With sms: 1 an explicit comm_ctas: 16 is refused; the default 16 must be as well.
  std::filesystem::path dir = FreshDir();
  WriteFile(dir / "tiny.yaml", Replace(std::string(kGpu), "sms: 100", "sms: 1"));
  std::string node_text = Replace(std::string(kNode), "gpu: h100-sxm", "gpu: tiny.yaml");
  node_text = Replace(node_text, "contention:\n  comm_ctas: 16\n  comm_hbm_factor: 2.5\n", "");
  std::string node_path = WriteFile(dir / "node.yaml", node_text);
  Result<NodeSpec> node = LoadNode(node_path);
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.message(), AllOf(StartsWith(node_path + ":2:"), HasSubstr("gpu: "),
                                    HasSubstr("1 SMs cannot hold a collective's 16 CTAs"),
                                    HasSubstr("the default")));
}

TEST(ParseNodeTest, GpuFileNextToTheNodeFile) {
  std::filesystem::path dir = FreshDir();
  WriteFile(dir / "my-gpu.yaml", kGpu);
  std::string node_path = WriteFile(
      dir / "node.yaml", Replace(std::string(kNode), "gpu: h100-sxm", "gpu: my-gpu.yaml"));
  Result<NodeSpec> node = LoadNode(node_path);
  ASSERT_TRUE(node.ok()) << node.message();
  EXPECT_EQ(node->gpu.name, "test-gpu");
  EXPECT_EQ(node->gpu.sms, 100);
}

TEST(ParseNodeTest, BadGpuFileNamesBothFiles) {
  std::filesystem::path dir = FreshDir();
  WriteFile(dir / "my-gpu.yaml", Replace(std::string(kGpu), "sms: 100", "sms: -3"));
  std::string node_path = WriteFile(
      dir / "node.yaml", Replace(std::string(kNode), "gpu: h100-sxm", "gpu: my-gpu.yaml"));
  Result<NodeSpec> node = LoadNode(node_path);
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.message(),
              AllOf(StartsWith(node_path + ":2:"), HasSubstr("gpu: "),
                    HasSubstr((dir / "my-gpu.yaml").string() + ":2:"), HasSubstr("sms")));
}

}  // namespace
}  // namespace domino
