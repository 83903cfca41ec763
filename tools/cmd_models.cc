// `domino models [NAME|FILE]`: the model catalog as a table, or one model in detail.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "models/layer_ops.h"
#include "models/model_counts.h"
#include "models/model_spec.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

std::string Billions(int64_t count) { return fmt::format("{:.2f}B", count / 1e9); }

const char* LayerOpKindName(LayerOpKind kind) {
  return kind == LayerOpKind::kGemm        ? "gemm"
         : kind == LayerOpKind::kAttention ? "attention"
                                           : "elementwise";
}

void ListModelsJson() {
  Json document = JsonDocument("models");
  Json models = Json::array();
  for (const EmbeddedFile& file : ModelCatalog()) {
    Result<ModelSpec> model = LoadModel(file.name);
    if (!model.ok()) Fail("models", model.message());
    models.push_back(ModelJson(*model));
  }
  document["models"] = std::move(models);
  PrintJson(document, std::cout);
}

// One model with its layer ops as `domino models NAME` tabulates them.
void ShowModelJson(const std::string& name) {
  Result<ModelSpec> model = LoadModel(name);
  if (!model.ok()) Fail("models", model.message());
  const ModelSpec& m = *model;
  Json entry = ModelJson(m);
  Json approximations = Json::array();
  for (const Approximation& a : m.approximations) approximations.push_back(a.Text());
  entry["approximations"] = std::move(approximations);
  LayerShape shape{.sequences = 1, .seq_len = m.seq_len, .tp = 1, .bytes_per_element = 2};
  Json ops = Json::array();
  auto dim = [](int64_t v) { return v ? Json(v) : Json(nullptr); };  // GEMMs only
  for (const LayerOp& op : LayerOps(m, shape))
    ops.push_back({{"name", op.name},
                   {"kind", LayerOpKindName(op.kind)},
                   {"m", dim(op.m)},
                   {"n", dim(op.n)},
                   {"k", dim(op.k)},
                   {"fwd_flops", op.fwd_flops},
                   {"bwd_flops", op.bwd_flops},
                   {"fwd_bytes", op.fwd_bytes},
                   {"bwd_bytes", op.bwd_bytes},
                   {"row_parallel", op.row_parallel}});
  entry["layer_ops"] = {{"sequences", shape.sequences},
                        {"seq_len", shape.seq_len},
                        {"tp", shape.tp},
                        {"bytes_per_element", shape.bytes_per_element},
                        {"ops", std::move(ops)}};
  Json document = JsonDocument("models");
  document["model"] = std::move(entry);
  PrintJson(document, std::cout);
}

void ListModels() {
  Table table({"model", "layers", "hidden", "heads", "kv", "ffn", "vocab", "seq", "mlp", "norm",
               "params", "GFLOP/token"});
  for (const EmbeddedFile& file : ModelCatalog()) {
    Result<ModelSpec> model = LoadModel(file.name);
    if (!model.ok()) Fail("models", model.message());
    ParameterCounts counts = CountParameters(*model);
    table.AddRow({model->name, std::to_string(model->layers), std::to_string(model->hidden),
                  std::to_string(model->heads), std::to_string(model->kv_heads),
                  std::to_string(model->ffn), std::to_string(model->vocab),
                  std::to_string(model->seq_len), std::string(ActivationName(model->activation)),
                  std::string(NormName(model->norm)), Billions(counts.total),
                  fmt::format("{:.1f}", TrainingFlopsPerToken(*model, model->seq_len) / 1e9)});
  }
  table.Print(std::cout);
  std::cout << "\nGFLOP/token: training (forward + backward) at the model's seq_len; "
               "`domino models NAME` for details.\n";
}

void ShowModel(const std::string& name) {
  Result<ModelSpec> model = LoadModel(name);
  if (!model.ok()) Fail("models", model.message());
  const ModelSpec& m = *model;
  ParameterCounts counts = CountParameters(m);
  std::cout << fmt::format(
      "# {}\nlayers {}  hidden {}  heads {}  kv_heads {}  head_dim {}  ffn {}  vocab {}  seq_len "
      "{}\n"
      "mlp {}  norm {}  bias {}  tied_embeddings {}  positions {}\n",
      m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.head_width(), m.ffn, m.vocab, m.seq_len,
      ActivationName(m.activation), NormName(m.norm), m.bias, m.tied_embeddings,
      m.learned_positions() ? "learned" : "rotary");
  // The features domino prices beyond the shape, then what the file describes that domino prices
  // otherwise, and how.
  for (const PricedFeature& p : PricedFeatures(m)) std::cout << "priced: " << p.what << "\n";
  for (const Approximation& a : m.approximations) std::cout << "approximated: " << a.Text() << "\n";
  std::cout << "\n";
  Table params({"parameters", "count"});
  params.AddRow({"per layer", fmt::format("{}", counts.per_layer)});
  params.AddRow({"all layers", fmt::format("{}", counts.layers)});
  params.AddRow({"token embedding", fmt::format("{}", counts.embedding)});
  params.AddRow({"position embedding", fmt::format("{}", counts.position_embedding)});
  params.AddRow({"final norm", fmt::format("{}", counts.final_norm)});
  params.AddRow({"lm head (untied)", fmt::format("{}", counts.lm_head)});
  params.AddRow({"total", fmt::format("{} ({})", counts.total, Billions(counts.total))});
  params.Print(std::cout);
  std::cout << fmt::format(
      "\ntraining FLOPs per token at seq {}: {:.4g} (6N = {:.4g}, attention {:.4g})\n", m.seq_len,
      TrainingFlopsPerToken(m, m.seq_len), 6.0 * counts.matmul,
      TrainingFlopsPerToken(m, m.seq_len) - 6.0 * counts.matmul);
  // What MFU counts (README "MFU convention"): the causal half, within a window a plan prices.
  const double causal = TrainingFlopsPerToken(m, m.seq_len, AttentionCount::kCausal);
  const double windowed = TrainingFlopsPerToken(m, m.seq_len, AttentionCount::kCausalWindow);
  std::cout << fmt::format(
      "attention as MFU counts it: {:.4g} causal{}\n\n", causal - 6.0 * counts.matmul,
      windowed < causal
          ? fmt::format(", {:.4g} within the sliding window", windowed - 6.0 * counts.matmul)
          : "");
  LayerShape shape{.sequences = 1, .seq_len = m.seq_len, .tp = 1, .bytes_per_element = 2};
  Table ops({"layer op", "kind", "m", "n", "k", "fwd GFLOP", "bwd GFLOP", "fwd MB"});
  for (const LayerOp& op : LayerOps(m, shape)) {
    auto dim = [](int64_t v) { return v ? std::to_string(v) : std::string("-"); };
    ops.AddRow({std::string(op.name), LayerOpKindName(op.kind), dim(op.m), dim(op.n), dim(op.k),
                fmt::format("{:.2f}", op.fwd_flops / 1e9),
                fmt::format("{:.2f}", op.bwd_flops / 1e9),
                fmt::format("{:.1f}", op.fwd_bytes / 1e6)});
  }
  std::cout << "one layer, one sequence of " << m.seq_len
            << " tokens, bf16, no tensor parallelism:\n";
  ops.Print(std::cout);
}

}  // namespace

void SetupModels(CLI::App* sub) {
  auto name = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>();
  sub->add_option(
         "model", *name,
         "catalog name (e.g. gpt3-13b), a model YAML file, or a Hugging Face config.json or its "
         "folder")
      ->check(NonEmpty());
  AddFormatOption(sub, format.get());
  sub->callback([name, format] {
    const bool json = *format == OutputFormat::kJson;
    if (name->empty()) {
      json ? ListModelsJson() : ListModels();
    } else {
      json ? ShowModelJson(*name) : ShowModel(*name);
    }
  });
}

}  // namespace domino::cli
