#include "models/layer_ops.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "models/model_counts.h"
#include "tests/models/tiny_models.h"

namespace domino {
namespace {

using testing_models::TinyGpt;
using testing_models::TinyLlama;

const LayerOp& Find(const std::vector<LayerOp>& ops, std::string_view name) {
  for (const LayerOp& op : ops)
    if (op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return ops.front();
}

double GemmFwdFlops(const std::vector<LayerOp>& ops) {
  double flops = 0;
  for (const LayerOp& op : ops)
    if (op.kind == LayerOpKind::kGemm) flops += op.fwd_flops;
  return flops;
}

TEST(LayerOps, NamesKindsAndOrder) {
  std::vector<LayerOp> ops = LayerOps(TinyGpt(), LayerShape{});
  const std::vector<std::string> names = {"ln1", "qkv", "attn", "proj", "residual1",
                                          "ln2", "fc1", "act",  "fc2",  "residual2"};
  ASSERT_EQ(ops.size(), names.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i].name, names[i]);
    const bool gemm =
        names[i] == "qkv" || names[i] == "proj" || names[i] == "fc1" || names[i] == "fc2";
    const LayerOpKind kind = gemm                 ? LayerOpKind::kGemm
                             : names[i] == "attn" ? LayerOpKind::kAttention
                                                  : LayerOpKind::kElementwise;
    EXPECT_EQ(ops[i].kind, kind) << names[i];
    EXPECT_EQ(ops[i].row_parallel, names[i] == "proj" || names[i] == "fc2") << names[i];
    EXPECT_GT(ops[i].fwd_bytes, 0) << names[i];
    EXPECT_GT(ops[i].bwd_bytes, 0) << names[i];
  }
}

TEST(LayerOps, ExactShapesTinyGptTp2) {
  // tokens 2 * 16 = 32; head_dim 4; per rank 1 head, 1 kv head, ffn 16.
  LayerShape shape{.sequences = 2, .seq_len = 16, .tp = 2, .bytes_per_element = 2};
  std::vector<LayerOp> ops = LayerOps(TinyGpt(), shape);
  const LayerOp& qkv = Find(ops, "qkv");
  EXPECT_EQ(qkv.m, 32);
  EXPECT_EQ(qkv.n, 12);  // (1 + 2 * 1) * 4
  EXPECT_EQ(qkv.k, 8);
  EXPECT_DOUBLE_EQ(qkv.fwd_flops, 2.0 * 32 * 12 * 8);                  // 6144
  EXPECT_DOUBLE_EQ(qkv.fwd_bytes, (32 * 8 + 8 * 12 + 32 * 12) * 2.0);  // 1472
  EXPECT_DOUBLE_EQ(qkv.bwd_flops, 4.0 * 32 * 12 * 8);
  EXPECT_DOUBLE_EQ(qkv.bwd_bytes, 2 * 1472.0);
  const LayerOp& proj = Find(ops, "proj");
  EXPECT_EQ(proj.m, 32);
  EXPECT_EQ(proj.n, 8);
  EXPECT_EQ(proj.k, 4);
  const LayerOp& fc1 = Find(ops, "fc1");
  EXPECT_EQ(fc1.m, 32);
  EXPECT_EQ(fc1.n, 16);
  EXPECT_EQ(fc1.k, 8);
  const LayerOp& fc2 = Find(ops, "fc2");
  EXPECT_EQ(fc2.m, 32);
  EXPECT_EQ(fc2.n, 8);
  EXPECT_EQ(fc2.k, 16);

  const LayerOp& attn = Find(ops, "attn");
  EXPECT_DOUBLE_EQ(attn.fwd_flops, 4.0 * 2 * 16 * 16 * 1 * 4);  // 8192
  EXPECT_DOUBLE_EQ(attn.bwd_flops, 2 * 8192.0);
  EXPECT_DOUBLE_EQ(attn.fwd_bytes, 32.0 * (2 * 4 + 2 * 4) * 2);  // Q, K, V in; O out
  EXPECT_EQ(attn.m, 0);

  // Norms and residuals see the whole hidden width on every rank (no sequence parallelism).
  EXPECT_DOUBLE_EQ(Find(ops, "ln1").fwd_bytes, 2.0 * 32 * 8 * 2);
  EXPECT_DOUBLE_EQ(Find(ops, "residual1").fwd_bytes, 3.0 * 32 * 8 * 2);
  EXPECT_DOUBLE_EQ(Find(ops, "act").fwd_bytes, 2.0 * 32 * 16 * 2);
  EXPECT_EQ(Find(ops, "act").fwd_flops, 0);
}

TEST(LayerOps, ExactShapesTinyLlamaTp2) {
  // head_dim 2; per rank 2 heads, 1 kv head, ffn 16, SwiGLU's fc1 is gate and up together.
  LayerShape shape{.sequences = 1, .seq_len = 8, .tp = 2, .bytes_per_element = 4};
  std::vector<LayerOp> ops = LayerOps(TinyLlama(), shape);
  EXPECT_EQ(Find(ops, "qkv").n, 8);  // (2 + 2 * 1) * 2
  EXPECT_EQ(Find(ops, "proj").k, 4);
  EXPECT_EQ(Find(ops, "fc1").n, 32);
  EXPECT_EQ(Find(ops, "fc2").k, 16);
  EXPECT_DOUBLE_EQ(Find(ops, "act").fwd_bytes, 3.0 * 8 * 16 * 4);  // gate, up in; one out
  EXPECT_DOUBLE_EQ(Find(ops, "attn").fwd_bytes, 8.0 * (2 * 2 + 2 * 1) * 2 * 4);
}

TEST(LayerOps, AQkNormAndPostNormsAddTheirPasses) {
  // TinyLlama at tp 2 in fp32, 8 tokens: 2 query heads and 1 key head of 2 a rank, hidden 8 (a
  // pass over Q and K is 8 x 3 x 2 x 4 bytes, over a residual 8 x 8 x 4).
  LayerShape shape{.sequences = 1, .seq_len = 8, .tp = 2, .bytes_per_element = 4};
  ModelSpec model = TinyLlama();
  const std::vector<LayerOp> plain = LayerOps(model, shape);
  model.qk_norm = true;
  model.post_norms = true;
  const std::vector<LayerOp> ops = LayerOps(model, shape);
  ASSERT_EQ(ops.size(), plain.size() + 3);
  EXPECT_EQ(ops[2].name, "qk_norm");  // after the QKV GEMM
  const double qk = 8.0 * 3 * 2 * 4, residual = 8.0 * 8 * 4;
  EXPECT_DOUBLE_EQ(Find(ops, "qk_norm").fwd_bytes, 2 * qk);
  EXPECT_DOUBLE_EQ(Find(ops, "qk_norm").bwd_bytes, 3 * qk);
  // Each post-norm comes right before its residual add, which keeps its own bytes.
  for (const auto& [norm, add] :
       {std::pair{"post_norm1", "residual1"}, std::pair{"post_norm2", "residual2"}}) {
    EXPECT_DOUBLE_EQ(Find(ops, norm).fwd_bytes, 2 * residual);
    EXPECT_DOUBLE_EQ(Find(ops, norm).bwd_bytes, 3 * residual);
    EXPECT_DOUBLE_EQ(Find(ops, add).fwd_bytes, Find(plain, add).fwd_bytes);
    size_t at = 0;
    while (at + 1 < ops.size() && ops[at].name != norm) ++at;
    EXPECT_EQ(ops[at + 1].name, add);
  }
}

TEST(LayerOps, GemmFlopsAreTwicePerLayerMatmulParametersPerToken) {
  for (const char* name : {"gpt3-13b", "llama2-70b", "llama3-8b", "gpt-530b"}) {
    Result<ModelSpec> model = LoadModel(name);
    ASSERT_TRUE(model.ok()) << model.message();
    ParameterCounts counts = CountParameters(*model);
    const double per_layer_matmul =
        static_cast<double>(counts.matmul - model->vocab * model->hidden) / model->layers;
    LayerShape shape{.sequences = 4, .seq_len = 1024, .tp = 1};
    EXPECT_DOUBLE_EQ(GemmFwdFlops(LayerOps(*model, shape)),
                     2.0 * per_layer_matmul * static_cast<double>(shape.tokens()))
        << name;
  }
}

TEST(LayerOps, TensorParallelismSplitsGemmsAndAttention) {
  Result<ModelSpec> model = LoadModel("llama3-70b");
  ASSERT_TRUE(model.ok()) << model.message();
  LayerShape one{.sequences = 2, .seq_len = 4096, .tp = 1};
  LayerShape two = one;
  two.tp = 2;
  LayerShape eight = one;
  eight.tp = 8;
  std::vector<LayerOp> ops1 = LayerOps(*model, one);
  std::vector<LayerOp> ops2 = LayerOps(*model, two);
  std::vector<LayerOp> ops8 = LayerOps(*model, eight);
  EXPECT_DOUBLE_EQ(GemmFwdFlops(ops2), GemmFwdFlops(ops1) / 2);
  EXPECT_DOUBLE_EQ(GemmFwdFlops(ops8), GemmFwdFlops(ops1) / 8);
  EXPECT_DOUBLE_EQ(Find(ops2, "attn").fwd_flops, Find(ops1, "attn").fwd_flops / 2);
  // Elementwise ops outside the MLP are not split without sequence parallelism.
  EXPECT_DOUBLE_EQ(Find(ops8, "ln1").fwd_bytes, Find(ops1, "ln1").fwd_bytes);
  EXPECT_DOUBLE_EQ(Find(ops8, "act").fwd_bytes, Find(ops1, "act").fwd_bytes / 8);
}

TEST(LayerOps, ModelFlopsMatchTrainingFlopsPerToken) {
  // Per token, layer GEMMs and attention, forward plus backward, summed over layers, plus the
  // LM head's 6 * vocab * hidden, are exactly TrainingFlopsPerToken.
  Result<ModelSpec> model = LoadModel("gpt3-175b");
  ASSERT_TRUE(model.ok()) << model.message();
  LayerShape shape{.sequences = 1, .seq_len = 2048, .tp = 1};
  double flops = 0;
  for (const LayerOp& op : LayerOps(*model, shape)) flops += op.fwd_flops + op.bwd_flops;
  const double per_token = flops * model->layers / static_cast<double>(shape.tokens()) +
                           6.0 * static_cast<double>(model->vocab) * model->hidden;
  EXPECT_NEAR(per_token / TrainingFlopsPerToken(*model, 2048), 1.0, 1e-12);
}

}  // namespace
}  // namespace domino
