#ifndef DOMINO_TOOLS_JSON_OUTPUT_H_
#define DOMINO_TOOLS_JSON_OUTPUT_H_

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string_view>

#include "hardware/hardware_spec.h"
#include "models/model_spec.h"
#include "planner/plan.h"

namespace domino::cli {

// The machine-readable output of `plan`, `simulate`, `validate`, `compare`, `models` and
// `hardware` (docs/json.md): one JSON document on stdout, keys in a fixed order, numbers as
// numbers with their unit in the key's name. The pieces that several documents share (a plan,
// its figures, a model, a GPU, a node, a cluster) are built here, once.
using Json = nlohmann::ordered_json;

// What a reading or predicting command prints: the text tables for people (the default), a
// Markdown table (`validate` only), or one JSON document.
enum class OutputFormat { kTable, kMarkdown, kJson };
std::string_view FormatName(OutputFormat format);  // "table", "markdown", "json"

// Declares `--format` on `sub`, accepting `formats` (the first is the default) and setting
// `*format` when given. Any other value is a usage error naming the accepted ones.
void AddFormatOption(CLI::App* sub, OutputFormat* format,
                     std::initializer_list<OutputFormat> formats = {OutputFormat::kTable,
                                                                    OutputFormat::kJson});

// A document's first keys: {"schema": "domino.COMMAND/1", "domino_version": "X.Y.Z"}. The schema
// version changes only when a key is removed or changes its meaning; new keys may appear.
Json JsonDocument(std::string_view command);

// Writes `document` indented by two spaces, then a newline. Infinite or NaN numbers come out as
// null.
void PrintJson(const Json& document, std::ostream& out);

// A plan's YAML keys (PlanToYaml, planner/plan.h) as JSON: model, cluster and stack as a plan file
// names them (catalog names bare, files as absolute paths; a model written inline as an object),
// then precision and the training, parallel, overlap and memory objects. Every key is present
// whatever the overlap method (chunks is 1 under method domino).
Json PlanJson(const Plan& plan);

// The `predicted:` (or `measured:`) figures of a plan: iteration_ms, ideal_ms, exposed_comm_ms,
// hidden_comm_fraction, tokens_per_s, tflops_per_gpu, mfu, memory_gib_per_gpu.
Json FiguresJson(const PlanFigures& figures);

// A model's keys (as its YAML file names them), with head_dim, positions, its parameter counts
// and its training FLOPs per token at its seq_len.
Json ModelJson(const ModelSpec& model);

// A GPU, a node (its GPU nested) and a cluster (its node nested), with the keys of their YAML
// files (docs/formats.md); a peak the GPU lacks is null.
Json GpuJson(const GpuSpec& gpu);
Json NodeJson(const NodeSpec& node);
Json ClusterJson(const ClusterSpec& cluster);

}  // namespace domino::cli

#endif  // DOMINO_TOOLS_JSON_OUTPUT_H_
