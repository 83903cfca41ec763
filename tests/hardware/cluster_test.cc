#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hardware/hardware_spec.h"
#include "tests/hardware/test_util.h"

namespace domino {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_util::FreshDir;
using testing_util::Replace;
using testing_util::WriteFile;

TEST(LoadClusterTest, NodeAndCount) {
  Result<ClusterSpec> cluster = LoadCluster("dgx-h100:4");
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  EXPECT_EQ(cluster->name, "dgx-h100:4");
  EXPECT_EQ(cluster->node.name, "dgx-h100");
  EXPECT_EQ(cluster->nodes, 4);
  EXPECT_EQ(cluster->gpus_per_node, 8);
  EXPECT_EQ(cluster->total_gpus(), 32);
}

TEST(LoadClusterTest, FewerGpusPerNode) {
  Result<ClusterSpec> cluster = LoadCluster("dgx-h100:1:2");
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  EXPECT_EQ(cluster->name, "dgx-h100:1:2");
  EXPECT_EQ(cluster->nodes, 1);
  EXPECT_EQ(cluster->gpus_per_node, 2);
  EXPECT_EQ(cluster->total_gpus(), 2);
  Result<ClusterSpec> full = LoadCluster("dgx-a100:2:8");
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_EQ(full->total_gpus(), 16);
}

TEST(LoadClusterTest, BadStrings) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"dgx-h100:0", "cluster 'dgx-h100:0': node count must be a positive integer"},
      {"dgx-h100:", "cluster 'dgx-h100:': node count must be a positive integer"},
      {"dgx-h100:x", "cluster 'dgx-h100:x': node count must be a positive integer"},
      {"dgx-h100:-1", "node count must be a positive integer"},
      {"dgx-h100:1.5", "node count must be a positive integer"},
      {"dgx-h100: 4", "node count must be a positive integer"},
      {"dgx-h100:99999999999999999999", "node count must be a positive integer"},
      {"dgx-h100:1:9", "cluster 'dgx-h100:1:9': GPUS per node (9) exceeds the node's 8"},
      {"dgx-h100:1:0", "GPUS per node must be a positive integer"},
      {"dgx-h100:1:", "GPUS per node must be a positive integer"},
      {"dgx-h100:1:2:3", "expected NODE:COUNT or NODE:COUNT:GPUS"},
      {":4", "node name is empty"},
      {"dgx-h100", "cluster 'dgx-h100': expected NODE:COUNT"},
      {"", "expected NODE:COUNT"},
  };
  for (const auto& [spec, message] : cases) {
    Result<ClusterSpec> cluster = LoadCluster(spec);
    ASSERT_FALSE(cluster.ok()) << spec;
    EXPECT_THAT(cluster.message(), HasSubstr(message)) << spec;
  }
}

TEST(LoadClusterTest, UnknownNodeListsTheCatalog) {
  Result<ClusterSpec> cluster = LoadCluster("dgx-h900:4");
  ASSERT_FALSE(cluster.ok());
  EXPECT_THAT(cluster.message(),
              AllOf(StartsWith("cluster 'dgx-h900:4': unknown node 'dgx-h900'"),
                    HasSubstr("dgx-a100, dgx-b200, dgx-h100, gb200-nvl72, hgx-h200")));
}

TEST(LoadClusterTest, ExampleFile) {
  Result<ClusterSpec> cluster =
      LoadCluster(DOMINO_SOURCE_DIR "/hardware/examples/dgx-h100-x4.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  EXPECT_EQ(cluster->name, "dgx-h100-x4");
  EXPECT_EQ(cluster->node.name, "dgx-h100");
  EXPECT_EQ(cluster->total_gpus(), 32);
}

TEST(LoadClusterTest, MissingFileNamesThePath) {
  Result<ClusterSpec> cluster = LoadCluster("no-such-cluster.yaml");
  ASSERT_FALSE(cluster.ok());
  EXPECT_THAT(cluster.message(), HasSubstr("no-such-cluster.yaml"));
}

constexpr std::string_view kCluster = R"(name: my-cluster
node: dgx-h100
nodes: 4
gpus_per_node: 4
)";

TEST(ParseClusterTest, ValidAndDefaults) {
  Result<ClusterSpec> cluster = ParseCluster(kCluster, "c.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  EXPECT_EQ(cluster->name, "my-cluster");
  EXPECT_EQ(cluster->total_gpus(), 16);
  Result<ClusterSpec> unnamed = ParseCluster(
      Replace(Replace(std::string(kCluster), "name: my-cluster\n", ""), "gpus_per_node: 4\n", ""),
      "c.yaml");
  ASSERT_TRUE(unnamed.ok()) << unnamed.message();
  EXPECT_EQ(unnamed->name, "c.yaml");
  EXPECT_EQ(unnamed->gpus_per_node, 8);
  EXPECT_EQ(unnamed->total_gpus(), 32);
}

TEST(ParseClusterTest, BadInputNamesFileLineAndKey) {
  struct Case {
    std::string_view from, to, where, key, rule;
  };
  const Case cases[] = {
      {"node: dgx-h100", "node: dgx-h900", "c.yaml:2:", "node: unknown node 'dgx-h900'",
       "dgx-h100"},
      {"nodes: 4", "nodes: 0", "c.yaml:3:", "nodes", "positive integer"},
      {"gpus_per_node: 4", "gpus_per_node: 9", "c.yaml:4:", "gpus_per_node",
       "9 exceeds the node's 8"},
      {"gpus_per_node: 4", "gpus_per_node: 0", "c.yaml:4:", "gpus_per_node", "positive integer"},
      {"nodes: 4", "nodes: 4\nnode_count: 4", "c.yaml:4:", "node_count", "unknown key"},
      {"node: dgx-h100\n", "", "c.yaml:1:", "node", "missing required key"},
  };
  for (const Case& c : cases) {
    Result<ClusterSpec> cluster =
        ParseCluster(Replace(std::string(kCluster), c.from, c.to), "c.yaml");
    ASSERT_FALSE(cluster.ok()) << c.to;
    EXPECT_THAT(cluster.message(), AllOf(StartsWith(c.where), HasSubstr(c.key), HasSubstr(c.rule)));
  }
}

TEST(ParseClusterTest, NodeFileNextToTheClusterFile) {
  std::filesystem::path dir = FreshDir();
  std::string node_text = R"(name: small-node
gpu: a100-sxm-80gb
gpus_per_node: 4
nvlink: {GBps_per_direction: 300, efficiency: 0.78}
nvls: false
nics: 2
network: {GBps_per_direction: 25, efficiency: 0.9}
)";
  WriteFile(dir / "small-node.yaml", node_text);
  std::string path = WriteFile(dir / "cluster.yaml", "node: small-node.yaml\nnodes: 3\n");
  Result<ClusterSpec> cluster = LoadCluster(path);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  EXPECT_EQ(cluster->name, path);
  EXPECT_EQ(cluster->node.name, "small-node");
  EXPECT_EQ(cluster->total_gpus(), 12);

  // NODE:COUNT also takes a node file.
  Result<ClusterSpec> by_string = LoadCluster((dir / "small-node.yaml").string() + ":2:3");
  ASSERT_TRUE(by_string.ok()) << by_string.message();
  EXPECT_EQ(by_string->total_gpus(), 6);

  // A broken node file is reported inside the cluster file's message.
  WriteFile(dir / "small-node.yaml", Replace(node_text, "nics: 2", "nics: two"));
  Result<ClusterSpec> broken = LoadCluster(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.message(),
              AllOf(StartsWith(path + ":1:"), HasSubstr("node: "),
                    HasSubstr((dir / "small-node.yaml").string() + ":6:"), HasSubstr("nics")));
}

}  // namespace
}  // namespace domino
