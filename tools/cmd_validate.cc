// `domino validate`: predicts every published measurement of the validation table and reports
// the error of each prediction and of each category.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "models/base/file_io.h"
#include "models/base/parallel_for.h"
#include "sim/gemm_fit.h"
#include "sim/predict.h"
#include "sim/validate.h"
#include "tools/command.h"
#include "tools/json_output.h"
#include "tools/prediction_text.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct ValidateFlags {
  std::string table;
  std::string category;
  OutputFormat format = OutputFormat::kTable;
  std::string csv_path;
  bool check = false;
  bool force = false;
  std::vector<std::string> rows;  // ids or id prefixes; empty: every row
  bool explain = false;
  bool fit = false;
  int jobs = 0;  // 0: JobsThreads' default
};

std::string Figure(double value) {
  return value >= 100 ? fmt::format("{:.1f}", value) : fmt::format("{:.3g}", value);
}

// What a row predicts, in a few words.
std::string Configuration(const sim::ValidationRow& row) {
  if (row.plan) {
    const Plan& p = *row.plan;
    return fmt::format(
        "{} {} {} {}x{}{} tp{}{} pp{}{}{} dp{} mb{} gb{} seq{}{}{}{}{}{}{}{}{}{}", p.model.name,
        p.stack_ref, DtypeName(p.precision), p.cluster.nodes, p.cluster.node.name,
        // Part of a node (8 GPUs of a 72-GPU rack) says how many.
        p.cluster.gpus_per_node != p.cluster.node.gpus_per_node
            ? fmt::format(" ({} GPU{})", p.cluster.gpus_per_node,
                          p.cluster.gpus_per_node == 1 ? "" : "s")
            : "",
        p.tp, p.cp > 1 ? fmt::format(" cp{}", p.cp) : "", p.pp,
        p.virtual_stages > 1 ? fmt::format(" v{}", p.virtual_stages) : "",
        p.pipeline_split == PipelineSplit::kLayers
            ? ""
            : " split-" + std::string(PipelineSplitName(p.pipeline_split)),
        p.dp, p.micro_batch, p.global_batch, p.seq_len, p.sequence_parallel ? " sp" : "",
        p.method == OverlapMethod::kDomino ? "" : " " + std::string(MethodName(p.method)),
        p.recompute == Recompute::kNone ? "" : " rc-" + std::string(RecomputeName(p.recompute)),
        // An attention kernel, softmax, dropout, bias-dropout-add or fp8 cast the run chose over
        // its stack's.
        p.attention ? " " + std::string(AttentionKernelName(*p.attention)) : "",
        p.softmax ? " " + std::string(SoftmaxKernelsName(*p.softmax)) : "",
        p.dropout ? (*p.dropout ? " dropout" : " no-dropout") : "",
        p.mlp_dropout && !*p.mlp_dropout ? " no-mlp-dropout" : "",
        p.fused_bias_dropout_add ? (*p.fused_bias_dropout_add ? " fused-bda" : " unfused-bda") : "",
        p.fp8_cast ? " fp8-cast-" + std::string(Fp8CastName(*p.fp8_cast)) : "");
  }
  if (row.gemm) {
    const sim::GemmCase& g = *row.gemm;
    return fmt::format("{} {} {}{}x{}x{}", g.gpu.name, DtypeName(g.dtype),
                       g.batch > 1 ? fmt::format("{}x ", g.batch) : "", g.m, g.n, g.k);
  }
  if (row.contention) {
    const sim::ContentionCase& c = *row.contention;
    return fmt::format("{} bf16 {}x{}x{} beside {} SMs held {:g} us, {}", c.gpu.name, c.m, c.n, c.k,
                       c.sms_held, c.hold_us, c.gemm_first ? "GEMM first" : "holder first");
  }
  const sim::CollectiveCase& c = *row.collective;
  std::string size = c.bytes >= (1 << 30)   ? fmt::format("{:g}GiB", c.bytes / (1 << 30))
                     : c.bytes >= (1 << 20) ? fmt::format("{:g}MiB", c.bytes / (1 << 20))
                     : c.bytes >= (1 << 10) ? fmt::format("{:g}KiB", c.bytes / (1 << 10))
                                            : fmt::format("{:g}B", c.bytes);
  return fmt::format("{} {} {}{}", c.cluster.name, CollectiveName(c.op), size,
                     c.algorithm == CollectiveAlgorithm::kAuto
                         ? ""
                         : " " + std::string(CollectiveAlgorithmName(c.algorithm)));
}

// A Markdown table cell: a '|' in the text would end the cell.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string Csv(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// "a-b" (or "a" when they round alike) in `format`, then `unit`.
std::string Range(double low, double high, std::string_view format, std::string_view unit) {
  const std::string a = fmt::format(fmt::runtime(format), low);
  const std::string b = fmt::format(fmt::runtime(format), high);
  return (a == b ? a : a + "-" + b) + std::string(unit);
}

Json BoundJson(const sim::ErrorBound& bound) {
  return Json{{"mean_abs_error", bound.mean}, {"max_abs_error", bound.max}};
}

// `--row` matches a row by its id or by a prefix of it that ends where the id continues with a
// dash: "mcore08" and "dgxc-llama31-8b" name series, "mcore08-gpt-1.7b-48gpu" one row.
bool RowMatches(std::string_view id, std::string_view wanted) {
  return id == wanted ||
         (id.size() > wanted.size() && id.starts_with(wanted) && id[wanted.size()] == '-');
}

// Whether the end-to-end rows' plans fit in their GPUs' memory, in a sentence.
std::string MemoryFitText(const sim::MemoryFit& fit) {
  const std::string fullest = fmt::format("{} at {:.1f} of {:.1f} GiB", fit.fullest_id,
                                          fit.fullest_gib, fit.fullest_capacity_gib);
  if (fit.over.empty())
    return fmt::format("all {} published runs fit in the memory model; the fullest is {}", fit.rows,
                       fullest);
  return fmt::format(
      "{} of {} published runs do not fit in the memory model, though they ran ({}); the "
      "fullest is {}",
      fit.over.size(), fit.rows, fmt::join(fit.over, ", "), fullest);
}

// What lies behind one row's prediction: where the figure comes from and what was assumed, then,
// for an end-to-end row, the prediction as `domino simulate` prints it and the plan's YAML.
void Explain(const sim::RowResult& r, std::ostream& out) {
  const sim::ValidationRow& row = *r.row;
  out << fmt::format("\n## {} ({}): measured {} {}, predicted {}, error {:+.1f}%\n\n", row.id,
                     sim::ValidationCategoryName(row.category), Figure(row.measured),
                     sim::MeasuredUnitName(row.unit), Figure(r.predicted), 100 * r.error);
  out << fmt::format("source:  {}\nquote:   {}\n", row.source, row.quote);
  if (!row.derived.empty()) out << fmt::format("derived: {}\n", row.derived);
  if (!row.assumed.empty()) out << fmt::format("assumed: {}\n", row.assumed);
  if (!row.unresolved.empty()) out << fmt::format("unresolved: {}\n", row.unresolved);
  if (!row.plan) {
    out << fmt::format("{}{}\n", row.gemm ? "kernel:  " : "model:   ", r.detail);
    return;
  }
  if (row.category == sim::ValidationCategory::kLayer)
    out << fmt::format("layers:  {}\n", r.detail);
  Result<sim::Prediction> p = sim::Predict(*row.plan);
  if (!p.ok()) Fail("validate", fmt::format("row {}: {}", row.id, p.message()));
  out << "\n";
  PrintPrediction(*row.plan, *p, out);
  out << "\nThe row's plan (save it and run `domino simulate --plan FILE` to try a change):\n\n"
      << PlanToYaml(*row.plan, row.id);
}

Json ValidationJson(const sim::ValidationTable& table, const ValidateFlags& flags,
                    const std::vector<sim::RowResult>& results,
                    const std::vector<sim::CategorySummary>& summary, const sim::MemoryFit& fit) {
  Json document = JsonDocument("validate");
  document["table"] = table.file;
  document["category"] = flags.category.empty() ? Json(nullptr) : Json(flags.category);
  document["row_filter"] = flags.rows.empty() ? Json(nullptr) : Json(flags.rows);
  Json rows = Json::array();
  for (const sim::RowResult& r : results)
    rows.push_back(
        {{"id", r.row->id},
         {"category", sim::ValidationCategoryName(r.row->category)},
         {"source", r.row->source},
         {"configuration", Configuration(*r.row)},
         {"unit", sim::MeasuredUnitName(r.row->unit)},
         {"measured", r.row->measured},
         {"predicted", r.predicted},
         {"error", r.error},
         {"gemm_share", r.gemm_share},
         {"gemm_factor_to_close", sim::GemmFactorToClose(r)},
         {"memory_gib", r.capacity_gib > 0 ? Json(r.memory_gib) : Json(nullptr)},
         {"capacity_gib", r.capacity_gib > 0 ? Json(r.capacity_gib) : Json(nullptr)},
         {"unresolved", r.row->unresolved.empty() ? Json(nullptr) : Json(r.row->unresolved)}});
  document["rows"] = std::move(rows);
  Json categories = Json::array();
  for (const sim::CategorySummary& s : summary)
    categories.push_back({{"category", sim::ValidationCategoryName(s.category)},
                          {"rows", s.rows},
                          {"mean_abs_error", s.mean_abs_error},
                          {"max_abs_error", s.max_abs_error},
                          {"worst_id", s.worst_id},
                          {"target", BoundJson(s.bounds.target)},
                          {"target_met", s.Within(s.bounds.target)},
                          {"guard", BoundJson(s.bounds.guard)},
                          {"guard_met", s.Within(s.bounds.guard)}});
  document["summary"] = std::move(categories);
  document["memory_fit"] = fit.rows == 0 ? Json(nullptr)
                                         : Json{{"rows", fit.rows},
                                                {"over", fit.over},
                                                {"fullest_id", fit.fullest_id},
                                                {"fullest_gib", fit.fullest_gib},
                                                {"fullest_capacity_gib", fit.fullest_capacity_gib}};
  Json gap = Json::array();
  for (const sim::GemmGapGroup& g : sim::GemmGapByGroup(results))
    gap.push_back({{"source", g.source},
                   {"precision", g.precision},
                   {"rows", g.rows},
                   {"mean_error", g.mean_error},
                   {"mean_abs_error", g.mean_abs_error},
                   {"gemm_share", {g.min_share, g.max_share}},
                   {"gemm_factor_to_close", {g.min_factor, g.max_factor}}});
  document["gemm_gap"] = std::move(gap);
  Json pairs = Json::array();
  for (const sim::Fp8PairGroup& g : sim::Fp8SpeedupByGroup(results))
    pairs.push_back({{"source", g.source},
                     {"model", g.model},
                     {"pairs", g.pairs},
                     {"measured_speedup", {g.min_measured, g.max_measured}},
                     {"predicted_speedup", {g.min_predicted, g.max_predicted}},
                     {"bf16_gemm_factor", {g.min_factor, g.max_factor}}});
  document["fp8_pairs"] = std::move(pairs);
  Json excluded = Json::array();
  for (const sim::ExcludedMeasurement& e : table.excluded)
    excluded.push_back({{"what", e.what}, {"source", e.source}, {"reason", e.reason}});
  document["excluded"] = std::move(excluded);
  return document;
}

// The constants of `c` in GemmFit's order: each efficiency group's, then the shared five.
std::vector<std::string> ConstantCells(const sim::GemmConstants& c) {
  std::vector<std::string> cells;
  for (double e : c.efficiency) cells.push_back(fmt::format("{:.2f}", e));
  cells.push_back(fmt::format("{:g}", c.tile_overhead_k));
  cells.push_back(fmt::format("{:g}", c.fixed_us));
  cells.push_back(std::isinf(c.stream_k_min_k) ? "never" : fmt::format("{:g}", c.stream_k_min_k));
  cells.push_back(fmt::format("{:g}", c.half_tile_rate));
  cells.push_back(fmt::format("{:g}", c.split_k_fixed_us));
  return cells;
}

std::vector<std::string> ConstantNames(const sim::GemmFit& fit) {
  std::vector<std::string> names;
  for (const sim::EfficiencyGroup& g : fit.groups)
    names.push_back(fmt::format("{} main loop ({}): {}", g.fp8 ? "fp8" : "16-bit",
                                g.fp8 ? "fp8_gemm_efficiency" : "max_gemm_efficiency",
                                fmt::join(g.gpus, ", ")));
  for (const char* key : {"gemm_tile_overhead_k", "gemm_fixed_us", "gemm_stream_k_min_k",
                          "gemm_half_tile_rate", "gemm_split_k_fixed_us"})
    names.emplace_back(key);
  return names;
}

// `validate --fit`: the GEMM model's constants fitted on the gemm rows, and left out by source.
void RunFit(const ValidateFlags& flags) {
  if (!flags.category.empty() && flags.category != "gemm")
    Fail("validate", "--fit fits the GEMM model on the gemm rows: use --category gemm or none",
         kExitUsage);
  if (!flags.rows.empty() || flags.check || flags.explain || !flags.csv_path.empty())
    Fail("validate",
         "--fit takes every gemm row and prints its own tables: use it without --row, "
         "--check, --explain and --csv",
         kExitUsage);
  Result<sim::ValidationTable> table = sim::LoadValidationTable(flags.table);
  if (!table.ok()) Fail("validate", table.message());
  Result<sim::GemmFit> fit =
      sim::FitGemmModel(table->rows, sim::DefaultGemmFitGrid(), JobsThreads(flags.jobs));
  if (!fit.ok()) Fail("validate", fmt::format("{}: {}", table->file, fit.message()));
  const std::vector<std::string> names = ConstantNames(*fit);
  const std::vector<std::string> catalog = ConstantCells(fit->catalog),
                                 fitted = ConstantCells(fit->fitted);
  if (flags.format == OutputFormat::kJson) {
    auto constants = [&](const sim::GemmConstants& c) {
      Json efficiency = Json::array();
      for (size_t i = 0; i < fit->groups.size(); ++i) {
        const sim::EfficiencyGroup& g = fit->groups[i];
        efficiency.push_back({{"precision", g.fp8 ? "fp8" : "16-bit"},
                              {"key", g.fp8 ? "fp8_gemm_efficiency" : "max_gemm_efficiency"},
                              {"gpus", g.gpus},
                              {"value", c.efficiency[i]}});
      }
      Json stream_k = nullptr;
      if (!std::isinf(c.stream_k_min_k)) stream_k = c.stream_k_min_k;
      return Json{{"efficiency", std::move(efficiency)},
                  {"gemm_tile_overhead_k", c.tile_overhead_k},
                  {"gemm_fixed_us", c.fixed_us},
                  {"gemm_stream_k_min_k", std::move(stream_k)},
                  {"gemm_half_tile_rate", c.half_tile_rate},
                  {"gemm_split_k_fixed_us", c.split_k_fixed_us}};
    };
    Json document = JsonDocument("validate-fit");
    document["table"] = table->file;
    document["rows"] = fit->rows;
    document["catalog"] = constants(fit->catalog);
    document["fitted"] = constants(fit->fitted);
    document["catalog_mean_abs_error"] = fit->catalog_error;
    document["fitted_mean_abs_error"] = fit->fitted_error;
    document["held_out_mean_abs_error"] = fit->held_out_error;
    Json sources = Json::array();
    for (const sim::GemmFitSource& s : fit->sources)
      sources.push_back({{"label", s.label},
                         {"source", s.source},
                         {"rows", s.rows},
                         {"catalog_mean_abs_error", s.catalog_error},
                         {"fitted_mean_abs_error", s.fitted_error},
                         {"held_out_mean_abs_error", s.held_out_error},
                         {"held_out", constants(s.held_out)}});
    document["leave_one_source_out"] = std::move(sources);
    PrintJson(document, std::cout);
    return;
  }
  const bool md = flags.format == OutputFormat::kMarkdown;
  auto percent = [](double e) { return fmt::format("{:.1f}%", 100 * e); };
  std::cout << fmt::format(
      "GEMM model fitted on the {} gemm rows of {} (grid search, least mean |error|):\nthe main "
      "loops with the tile overhead, fixed time and stream-K threshold, then with the kernel "
      "choice's two\n\n",
      fit->rows, table->file);
  if (md) {
    std::cout << "| constant | catalog | fitted |\n| --- | ---: | ---: |\n";
    for (size_t i = 0; i < names.size(); ++i)
      std::cout << fmt::format("| {} | {} | {} |\n", names[i], catalog[i], fitted[i]);
    std::cout << fmt::format("| mean abs error | {} | {} |\n", percent(fit->catalog_error),
                             percent(fit->fitted_error));
    std::cout << fmt::format("| mean abs error, each source left out of the fit | | {} |\n",
                             percent(fit->held_out_error));
    std::cout << "\n| left out | rows | catalog | fitted on all | fitted without it | its "
                 "constants | source |\n| --- | ---: | ---: | ---: | ---: | --- | --- |\n";
    for (const sim::GemmFitSource& s : fit->sources)
      std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", s.label, s.rows,
                               percent(s.catalog_error), percent(s.fitted_error),
                               percent(s.held_out_error), fmt::join(ConstantCells(s.held_out), " "),
                               Cell(s.source));
    return;
  }
  Table constants({"constant", "catalog", "fitted"});
  for (size_t i = 0; i < names.size(); ++i) constants.AddRow({names[i], catalog[i], fitted[i]});
  constants.AddRow({"mean |error|", percent(fit->catalog_error), percent(fit->fitted_error)});
  constants.AddRow(
      {"mean |error|, each source left out of the fit", "", percent(fit->held_out_error)});
  constants.Print(std::cout);
  std::cout << "\nEach source left out: its rows with the catalog's constants, with those fitted "
               "on every row, and with those fitted on the other sources' rows (listed in the "
               "order above).\n\n";
  Table sources({"left out", "rows", "catalog", "fitted on all", "fitted without it",
                 "constants fitted without it"});
  for (const sim::GemmFitSource& s : fit->sources)
    sources.AddRow({s.label, std::to_string(s.rows), percent(s.catalog_error),
                    percent(s.fitted_error), percent(s.held_out_error),
                    fmt::format("{}", fmt::join(ConstantCells(s.held_out), " "))});
  sources.Print(std::cout);
  std::cout << "\n";
  for (const sim::GemmFitSource& s : fit->sources)
    std::cout << fmt::format("{}: {}\n", s.label, s.source);
}

void Run(const ValidateFlags& flags) {
  if (flags.fit) return RunFit(flags);
  if (flags.explain && flags.format != OutputFormat::kTable)
    Fail("validate", "--explain prints text after the table: use it with --format table",
         kExitUsage);
  CheckUsage("validate", CheckNotAnInput(flags.csv_path, std::array{flags.table}));
  if (flags.csv_path == "-" && flags.format == OutputFormat::kJson)
    Fail("validate", "--csv - and --format json would both write stdout: give --csv a file",
         kExitUsage);
  // The guards bound a whole category's errors: a few rows of it say nothing against them.
  if (flags.check && !flags.rows.empty())
    Fail("validate", "--check judges whole categories: use it without --row", kExitUsage);
  Result<sim::ValidationTable> table = sim::LoadValidationTable(flags.table);
  if (!table.ok()) Fail("validate", table.message());
  for (const std::string& wanted : flags.rows)
    if (std::none_of(table->rows.begin(), table->rows.end(),
                     [&](const sim::ValidationRow& row) { return RowMatches(row.id, wanted); }))
      Fail("validate",
           fmt::format("--row {}: no row of {} has this id or begins with it and a dash "
                       "(domino validate lists the ids)",
                       wanted, table->file));
  std::vector<const sim::ValidationRow*> chosen;
  for (const sim::ValidationRow& row : table->rows) {
    if (!flags.category.empty() && sim::ValidationCategoryName(row.category) != flags.category)
      continue;
    if (!flags.rows.empty() &&
        std::none_of(flags.rows.begin(), flags.rows.end(),
                     [&](const std::string& wanted) { return RowMatches(row.id, wanted); }))
      continue;
    chosen.push_back(&row);
  }
  // Each row predicted on its own, on --jobs threads; the first failure in the table's order.
  std::vector<std::optional<Result<sim::RowResult>>> predicted(chosen.size());
  ParallelFor(chosen.size(), JobsThreads(flags.jobs),
              [&](size_t i) { predicted[i].emplace(sim::PredictRow(*chosen[i])); });
  std::vector<sim::RowResult> results;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Result<sim::RowResult>& r = *predicted[i];
    if (!r.ok())
      Fail("validate", fmt::format("{}:{}: {}", table->file, chosen[i]->line, r.message()));
    results.push_back(*r);
  }
  if (results.empty())
    Fail("validate",
         flags.rows.empty()
             ? fmt::format("no row of {} is of --category {}", table->file, flags.category)
             : fmt::format("no row of {} is both of --category {} and of --row {}", table->file,
                           flags.category, fmt::join(flags.rows, ", ")));
  const std::vector<sim::CategorySummary> summary = sim::Summarize(results);
  const sim::MemoryFit fit = sim::MemoryFitOf(results);

  if (!flags.csv_path.empty()) {
    std::ostringstream csv;
    csv << "id,category,source,configuration,unit,measured,predicted,error,gemm_share,"
           "gemm_factor_to_close\n";
    for (const sim::RowResult& r : results)
      csv << fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6f},{:.4f},{:.4f}\n", Csv(r.row->id),
                         sim::ValidationCategoryName(r.row->category), Csv(r.row->source),
                         Csv(Configuration(*r.row)), sim::MeasuredUnitName(r.row->unit),
                         r.row->measured, r.predicted, r.error, r.gemm_share,
                         sim::GemmFactorToClose(r));
    CheckOk("validate", WriteFileAtomically(flags.csv_path, csv.str(), flags.force));
  }
  // The CSV on stdout ("-") sends the tables to stderr.
  std::ostream& out = flags.csv_path == "-" ? std::cerr : std::cout;

  if (flags.format == OutputFormat::kJson) {
    PrintJson(ValidationJson(*table, flags, results, summary, fit), out);
  } else if (flags.format == OutputFormat::kMarkdown) {
    out << "| id | configuration | measured | predicted | error |\n"
           "| --- | --- | ---: | ---: | ---: |\n";
    for (const sim::RowResult& r : results)
      out << fmt::format("| {} | {} | {} {} | {} | {:+.1f}% |\n", Cell(r.row->id),
                         Cell(Configuration(*r.row)), Figure(r.row->measured),
                         sim::MeasuredUnitName(r.row->unit), Figure(r.predicted), 100 * r.error);
    out << "\n| category | rows | mean abs error | max abs error (row) | target (mean / max) | "
           "guard (mean / max) |\n| --- | ---: | ---: | --- | --- | --- |\n";
    for (const sim::CategorySummary& s : summary)
      out << fmt::format(
          "| {} | {} | {:.1f}% | {:.1f}% ({}) | {:.0f}% / {:.0f}%{} | {:.1f}% / {:.0f}% |\n",
          sim::ValidationCategoryName(s.category), s.rows, 100 * s.mean_abs_error,
          100 * s.max_abs_error, Cell(s.worst_id), 100 * s.bounds.target.mean,
          100 * s.bounds.target.max, s.Within(s.bounds.target) ? " (met)" : " (not met)",
          100 * s.bounds.guard.mean, 100 * s.bounds.guard.max);
    // Always a paragraph of its own, so that tools/validation-report finds each part.
    out << "\nMemory: " << (fit.rows == 0 ? std::string("no end-to-end rows") : MemoryFitText(fit))
        << ".\n";
    const std::vector<sim::GemmGapGroup> gap = sim::GemmGapByGroup(results);
    if (!gap.empty()) {
      out << "\n| rows (id's first word) | precision | rows | mean error | mean abs error | "
             "GEMM share of the iteration | GEMM time factor that closes the gap |\n"
             "| --- | --- | ---: | ---: | ---: | --- | --- |\n";
      for (const sim::GemmGapGroup& g : gap)
        out << fmt::format("| {} | {} | {} | {:+.1f}% | {:.1f}% | {} | {} |\n", g.source,
                           g.precision, g.rows, 100 * g.mean_error, 100 * g.mean_abs_error,
                           Range(100 * g.min_share, 100 * g.max_share, "{:.0f}", "%"),
                           Range(g.min_factor, g.max_factor, "{:.2f}", "x"));
    }
    const std::vector<sim::Fp8PairGroup> pairs = sim::Fp8SpeedupByGroup(results);
    if (!pairs.empty()) {
      out << "\n| rows (id's first word) | model | pairs | fp8 speedup measured | "
             "fp8 speedup predicted | 16-bit GEMM time factor were fp8 right |\n"
             "| --- | --- | ---: | --- | --- | --- |\n";
      for (const sim::Fp8PairGroup& g : pairs)
        out << fmt::format("| {} | {} | {} | {} | {} | {} |\n", g.source, g.model, g.pairs,
                           Range(g.min_measured, g.max_measured, "{:.2f}", "x"),
                           Range(g.min_predicted, g.max_predicted, "{:.2f}", "x"),
                           Range(g.min_factor, g.max_factor, "{:.2f}", "x"));
    }
    if (!table->excluded.empty()) out << "\n| left out | source | why |\n| --- | --- | --- |\n";
    for (const sim::ExcludedMeasurement& e : table->excluded)
      out << fmt::format("| {} | {} | {} |\n", Cell(e.what), Cell(e.source), Cell(e.reason));
  } else {
    Table rows({"id", "configuration", "measured", "unit", "predicted", "error"});
    for (const sim::RowResult& r : results)
      rows.AddRow({r.row->id, Configuration(*r.row), Figure(r.row->measured),
                   std::string(sim::MeasuredUnitName(r.row->unit)), Figure(r.predicted),
                   fmt::format("{:+.1f}%", 100 * r.error)});
    rows.Print(out);
    out << "\n";
    Table totals(
        {"category", "rows", "mean |error|", "max |error|", "worst row", "target", "guard"});
    for (const sim::CategorySummary& s : summary)
      totals.AddRow(
          {std::string(sim::ValidationCategoryName(s.category)), std::to_string(s.rows),
           fmt::format("{:.1f}%", 100 * s.mean_abs_error),
           fmt::format("{:.1f}%", 100 * s.max_abs_error), s.worst_id,
           fmt::format("{:.0f}% / {:.0f}% {}", 100 * s.bounds.target.mean,
                       100 * s.bounds.target.max, s.Within(s.bounds.target) ? "met" : "not met"),
           fmt::format("{:.1f}% / {:.0f}%{}", 100 * s.bounds.guard.mean, 100 * s.bounds.guard.max,
                       s.Within(s.bounds.guard) || !flags.rows.empty() ? "" : "  EXCEEDED")});
    totals.Print(out);
    if (fit.rows > 0) out << "\nmemory: " << MemoryFitText(fit) << "\n";
    const std::vector<sim::GemmGapGroup> gap = sim::GemmGapByGroup(results);
    if (!gap.empty()) {
      // The end-to-end error as GEMM time: one factor across a source's rows points at compute
      // throughput, a scatter at something else.
      out << "\n";
      Table groups({"end-to-end rows", "precision", "rows", "mean error", "mean |error|",
                    "GEMM share", "GEMM time factor that closes the gap"});
      for (const sim::GemmGapGroup& g : gap)
        groups.AddRow({g.source, g.precision, std::to_string(g.rows),
                       fmt::format("{:+.1f}%", 100 * g.mean_error),
                       fmt::format("{:.1f}%", 100 * g.mean_abs_error),
                       Range(100 * g.min_share, 100 * g.max_share, "{:.0f}", "%"),
                       Range(g.min_factor, g.max_factor, "{:.2f}", "x")});
      groups.Print(out);
    }
    const std::vector<sim::Fp8PairGroup> pairs = sim::Fp8SpeedupByGroup(results);
    if (!pairs.empty()) {
      // The same plans measured in 16 bits and in fp8: how much faster fp8 ran, measured and
      // predicted, and what that asks of the 16-bit GEMMs if the fp8 prediction held.
      out << "\n";
      Table speedups({"16-bit and fp8 rows", "model", "pairs", "fp8 speedup measured", "predicted",
                      "16-bit GEMM factor were fp8 right"});
      for (const sim::Fp8PairGroup& g : pairs)
        speedups.AddRow({g.source, g.model, std::to_string(g.pairs),
                         Range(g.min_measured, g.max_measured, "{:.2f}", "x"),
                         Range(g.min_predicted, g.max_predicted, "{:.2f}", "x"),
                         Range(g.min_factor, g.max_factor, "{:.2f}", "x")});
      speedups.Print(out);
    }
    out << fmt::format(
        "\n{} rows from {}; {} published measurements left out (see the "
        "table's `excluded`).\n",
        results.size(), table->file, table->excluded.size());
    if (flags.explain)
      for (const sim::RowResult& r : results) Explain(r, out);
  }
  if (flags.check && !fit.over.empty()) Fail("validate", MemoryFitText(fit));
  if (flags.check)
    for (const sim::CategorySummary& s : summary)
      if (!s.Within(s.bounds.guard))
        Fail("validate", fmt::format("{}: mean |error| {:.1f}% (guard {:.1f}%), max {:.1f}% at {} "
                                     "(guard {:.0f}%)",
                                     sim::ValidationCategoryName(s.category),
                                     100 * s.mean_abs_error, 100 * s.bounds.guard.mean,
                                     100 * s.max_abs_error, s.worst_id, 100 * s.bounds.guard.max));
}

}  // namespace

void SetupValidate(CLI::App* sub) {
  auto flags = std::make_shared<ValidateFlags>();
  sub->add_option("--table", flags->table,
                  "validation table YAML (default: the built-in docs/validation/measurements.yaml)")
      ->check(NonEmpty());
  sub->add_option("--category", flags->category, "only rows of one category")
      ->check(CLI::IsMember({"end-to-end", "gemm", "collective", "contention", "layer"}));
  AddFormatOption(sub, &flags->format,
                  {OutputFormat::kTable, OutputFormat::kMarkdown, OutputFormat::kJson});
  sub->add_option("--csv", flags->csv_path,
                  "also write every row's prediction as CSV (- for stdout, the tables then go to "
                  "stderr)")
      ->check(NonEmpty());
  AddBoolFlag(sub, "--force", &flags->force, "overwrite an existing --csv file");
  AddBoolFlag(sub, "--check", &flags->check,
              "exit non-zero when a category's mean or max |error| exceeds its guard, or when "
              "a published run does not fit in the memory model");
  sub->add_option("--row", flags->rows,
                  "only this row, or the rows whose id begins with it and a dash (a series: "
                  "mcore08, dgxc-llama31-8b); repeatable");
  AddBoolFlag(
      sub, "--explain", &flags->explain,
      "after the table, each row's source, quote and assumptions; for an end-to-end row the "
      "prediction as `simulate` prints it and the row's plan YAML (table format)");
  AddBoolFlag(sub, "--fit", &flags->fit,
              "instead: fit the GEMM model's constants on the gemm rows (a grid search) and "
              "check them leave-one-source-out");
  AddJobsOption(sub, &flags->jobs,
                "threads that predict the rows, or run --fit's fits (one on every row, one "
                "without each source)");
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
