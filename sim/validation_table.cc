// Reading the validation table (docs/validation/measurements.yaml): its rows and what it leaves
// out.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "hardware/collective_cost.h"
#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "sim/validate.h"

namespace domino::sim {

// docs/validation/measurements.yaml, compiled in (sim/CMakeLists.txt).
std::span<const EmbeddedFile> ValidationTableFile();

namespace {

constexpr std::array<std::pair<std::string_view, ValidationCategory>, kValidationCategoryCount>
    kCategories{{
        {"end-to-end", ValidationCategory::kEndToEnd},
        {"gemm", ValidationCategory::kGemm},
        {"collective", ValidationCategory::kCollective},
        {"contention", ValidationCategory::kContention},
        {"layer", ValidationCategory::kLayer},
    }};
constexpr std::array<std::pair<std::string_view, bool>, 2> kOrders{{
    {"holder-first", false},
    {"gemm-first", true},
}};
constexpr std::array<std::pair<std::string_view, Collective>, 3> kCollectiveOps{{
    {"all-reduce", Collective::kAllReduce},
    {"all-gather", Collective::kAllGather},
    {"reduce-scatter", Collective::kReduceScatter},
}};
constexpr std::array<std::pair<std::string_view, CollectiveAlgorithm>, 4> kAlgorithms{{
    {"ring", CollectiveAlgorithm::kRing},
    {"nvls", CollectiveAlgorithm::kNvls},
    {"tree", CollectiveAlgorithm::kTree},
    {"sharp", CollectiveAlgorithm::kSharp},
}};
constexpr std::array<std::pair<std::string_view, Dtype>, 3> kGemmDtypes{{
    {"bf16", Dtype::kBf16},
    {"fp16", Dtype::kFp16},
    {"fp8", Dtype::kFp8},
}};

// Reads a row's GPU and shape (`gpu`, `m`, `n`, `k`) into `gpu` and `m`, `n`, `k`; the GPU is
// loaded by catalog name once the keys parse. False when anything failed.
bool ReadGpuShape(YamlMap& map, GpuSpec* gpu, double* m, double* n, double* k, std::string* name) {
  map.String("gpu", name, Need::kRequired);
  RealRange size{.min = 1, .max = 1e12, .min_exclusive = false};
  map.Real("m", m, Need::kRequired, size);
  map.Real("n", n, Need::kRequired, size);
  map.Real("k", k, Need::kRequired, size);
  for (const auto& [key, value] : {std::pair{"m", *m}, {"n", *n}, {"k", *k}})
    if (!map.failed() && value != std::floor(value)) map.Fail(key, "must be a whole number");
  if (map.failed()) return false;
  Result<GpuSpec> spec = LoadGpu(*name);
  if (!spec.ok()) {
    map.Fail("gpu", spec.message());
    return false;
  }
  *gpu = std::move(spec).value();
  return true;
}

// Reads the `measured:` mapping: exactly one figure, in a unit the category predicts.
void ReadMeasured(YamlMap& row, ValidationRow* out) {
  std::optional<YamlMap> measured = row.Map("measured", Need::kRequired);
  if (!measured) return;
  struct Unit {
    std::string_view key;
    MeasuredUnit unit;
    ValidationCategory category;
  };
  constexpr std::array<Unit, 6> kUnits{{
      {"iteration_s", MeasuredUnit::kIterationS, ValidationCategory::kEndToEnd},
      {"tflops", MeasuredUnit::kTflops, ValidationCategory::kGemm},
      {"busbw_GBps", MeasuredUnit::kBusbwGBps, ValidationCategory::kCollective},
      {"time_us", MeasuredUnit::kTimeUs, ValidationCategory::kCollective},
      {"slowdown", MeasuredUnit::kSlowdown, ValidationCategory::kContention},
      {"ms", MeasuredUnit::kLayerMs, ValidationCategory::kLayer},
  }};
  int found = 0;
  for (const Unit& u : kUnits) {
    if (!measured->Has(u.key)) continue;
    ++found;
    if (u.category != out->category) {
      measured->Fail(u.key, fmt::format("a {} row cannot measure {}",
                                        ValidationCategoryName(out->category), u.key));
      continue;
    }
    measured->Real(u.key, &out->measured, Need::kRequired,
                   {.min = 1e-6, .max = 1e12, .min_exclusive = false});
    out->unit = u.unit;
  }
  if (found != 1 && !measured->failed())
    measured->Fail(
        "", "needs exactly one figure (iteration_s, tflops, busbw_GBps, time_us, slowdown or ms)");
  (void)measured->Finish();
}

Status ReadRow(YamlMap& row, const std::string& file, ValidationRow* out) {
  row.String("id", &out->id, Need::kRequired);
  row.Enum("category", &out->category, Need::kRequired, kCategories);
  row.String("source", &out->source, Need::kRequired);
  row.String("quote", &out->quote, Need::kOptional);
  row.String("assumed", &out->assumed, Need::kOptional);
  row.String("derived", &out->derived, Need::kOptional);
  row.String("unresolved", &out->unresolved, Need::kOptional);
  if (row.failed()) return row.Finish();
  switch (out->category) {
    case ValidationCategory::kEndToEnd:
    case ValidationCategory::kLayer: {
      const std::string_view kind = ValidationCategoryName(out->category);
      YAML::Node plan_node = row.Raw("plan");
      if (!plan_node.IsMap()) {
        row.Fail("plan", fmt::format("{} {} row needs a plan mapping",
                                     kind.starts_with('e') ? "an" : "a", kind));
        break;
      }
      // The plan as `simulate --plan` reads it; its messages name the line in the table.
      Result<Plan> plan = ParsePlanNode(plan_node, file, row.key_path() + ".plan");
      if (!plan.ok()) return plan.error();
      out->plan = std::move(plan).value();
      const Plan& p = *out->plan;
      if (out->category == ValidationCategory::kLayer && p.tp * p.cp * p.pp * p.dp != 1)
        row.Fail("plan", fmt::format("a layer row's plan runs on one GPU (tp, cp, pp and dp 1), "
                                     "not tp {} cp {} pp {} dp {}",
                                     p.tp, p.cp, p.pp, p.dp));
      break;
    }
    case ValidationCategory::kGemm: {
      std::optional<YamlMap> gemm = row.Map("gemm", Need::kRequired);
      if (!gemm) break;
      GemmCase g;
      std::string gpu;
      gemm->Enum("dtype", &g.dtype, Need::kRequired, kGemmDtypes);
      if (ReadGpuShape(*gemm, &g.gpu, &g.m, &g.n, &g.k, &gpu) && g.gpu.peak(g.dtype) <= 0)
        gemm->Fail("dtype", fmt::format("{} has no {} tensor cores", gpu, DtypeName(g.dtype)));
      int64_t batch = 1;
      gemm->Int("batch", &batch, Need::kOptional, {.min = 1, .max = 1 << 20});
      g.batch = static_cast<double>(batch);
      (void)gemm->Finish();
      out->gemm = std::move(g);
      break;
    }
    case ValidationCategory::kCollective: {
      std::optional<YamlMap> coll = row.Map("collective", Need::kRequired);
      if (!coll) break;
      CollectiveCase c;
      std::string cluster;
      coll->String("cluster", &cluster, Need::kRequired);
      coll->Enum("op", &c.op, Need::kRequired, kCollectiveOps);
      coll->Real("bytes", &c.bytes, Need::kRequired,
                 {.min = 1, .max = 1e15, .min_exclusive = false});
      coll->Enum("algorithm", &c.algorithm, Need::kOptional, kAlgorithms);
      if (!coll->failed()) {
        Result<ClusterSpec> spec = LoadCluster(cluster);
        if (!spec.ok())
          coll->Fail("cluster", spec.message());
        else if (spec->total_gpus() < 2)
          coll->Fail("cluster", fmt::format("a collective runs over two GPUs at least; {} has {}",
                                            cluster, spec->total_gpus()));
        else
          c.cluster = std::move(spec).value();
      }
      (void)coll->Finish();
      out->collective = std::move(c);
      break;
    }
    case ValidationCategory::kContention: {
      std::optional<YamlMap> map = row.Map("contention", Need::kRequired);
      if (!map) break;
      ContentionCase c;
      std::string gpu;
      RealRange time{.min = 0, .max = 1e12, .min_exclusive = true};
      map->Int("sms_held", &c.sms_held, Need::kRequired, {.min = 1, .max = 1 << 20});
      map->Real("hold_us", &c.hold_us, Need::kRequired, time);
      map->Enum("order", &c.gemm_first, Need::kRequired, kOrders);
      map->Real("alone_us", &c.alone_us, Need::kRequired, time);
      if (ReadGpuShape(*map, &c.gpu, &c.m, &c.n, &c.k, &gpu) && c.sms_held >= c.gpu.sms)
        map->Fail("sms_held", fmt::format("must be below the {} SMs of {}", c.gpu.sms, gpu));
      (void)map->Finish();
      out->contention = std::move(c);
      break;
    }
  }
  ReadMeasured(row, out);
  return row.Finish();
}

}  // namespace

std::string_view ValidationCategoryName(ValidationCategory category) {
  for (const auto& [name, value] : kCategories)
    if (value == category) return name;
  return "?";
}

std::string_view MeasuredUnitName(MeasuredUnit unit) {
  switch (unit) {
    case MeasuredUnit::kIterationS:
      return "iteration_s";
    case MeasuredUnit::kTflops:
      return "tflops";
    case MeasuredUnit::kBusbwGBps:
      return "busbw_GBps";
    case MeasuredUnit::kTimeUs:
      return "time_us";
    case MeasuredUnit::kSlowdown:
      return "slowdown";
    case MeasuredUnit::kLayerMs:
      return "ms";
  }
  return "?";
}

Result<ValidationTable> ParseValidationTable(std::string_view text, std::string_view file) {
  Result<YAML::Node> doc = ParseYaml(text, file);
  if (!doc.ok()) return doc.error();
  ValidationTable table;
  table.file = std::string(file);
  YamlMap root(*doc, table.file);
  YAML::Node rows = root.Raw("rows");
  YAML::Node excluded = root.Raw("excluded");
  DOMINO_RETURN_IF_ERROR(root.Finish());
  if (!rows.IsSequence() || rows.size() == 0)
    return Error(fmt::format("{}: rows: must be a non-empty list of measurements", file));
  std::vector<std::string> ids;
  for (const YAML::Node& node : rows) {
    ValidationRow row;
    row.line = node.Mark().line + 1;
    YamlMap map(node, table.file, "rows[" + std::to_string(table.rows.size()) + "]");
    DOMINO_RETURN_IF_ERROR(ReadRow(map, table.file, &row));
    if (std::find(ids.begin(), ids.end(), row.id) != ids.end())
      return Error(fmt::format("{}:{}: rows: id '{}' appears twice", file, row.line, row.id));
    ids.push_back(row.id);
    table.rows.push_back(std::move(row));
  }
  if (excluded.IsDefined() && !excluded.IsNull()) {
    if (!excluded.IsSequence()) return Error(fmt::format("{}: excluded: must be a list", file));
    for (const YAML::Node& node : excluded) {
      ExcludedMeasurement e;
      YamlMap map(node, table.file, "excluded[" + std::to_string(table.excluded.size()) + "]");
      map.String("what", &e.what, Need::kRequired);
      map.String("source", &e.source, Need::kRequired);
      map.String("reason", &e.reason, Need::kRequired);
      DOMINO_RETURN_IF_ERROR(map.Finish());
      table.excluded.push_back(std::move(e));
    }
  }
  return table;
}

Result<ValidationTable> LoadValidationTable(const std::string& path) {
  if (path.empty()) {
    const EmbeddedFile& built_in = ValidationTableFile().front();
    return ParseValidationTable(built_in.text, built_in.path);
  }
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  return ParseValidationTable(*text, path);
}

}  // namespace domino::sim
