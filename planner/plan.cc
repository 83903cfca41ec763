#include "planner/plan.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"

namespace domino {
namespace {

constexpr std::array<std::pair<std::string_view, OverlapScope>, 3> kScopes = {{
    {"none", OverlapScope::kNone},
    {"intra-layer", OverlapScope::kIntraLayer},
    {"inter-layer", OverlapScope::kInterLayer},
}};
constexpr std::array<std::pair<std::string_view, Recompute>, 3> kRecomputes = {{
    {"none", Recompute::kNone},
    {"selective", Recompute::kSelective},
    {"full", Recompute::kFull},
}};
constexpr std::array<std::pair<std::string_view, Dtype>, 2> kOptimizerDtypes = {{
    {"fp32", Dtype::kFp32},
    {"bf16", Dtype::kBf16},
}};
constexpr std::array<std::pair<std::string_view, OverlapMethod>, 3> kMethods = {{
    {"domino", OverlapMethod::kDomino},
    {"decomposed", OverlapMethod::kDecomposed},
    {"both", OverlapMethod::kBoth},
}};
constexpr std::array<std::pair<std::string_view, Placement>, 2> kPlacements = {{
    {"tp-dp-pp", Placement::kTpDpPp},
    {"tp-pp-dp", Placement::kTpPpDp},
}};
constexpr std::array<std::pair<std::string_view, PipelineSplit>, 4> kPipelineSplits = {{
    {"layers", PipelineSplit::kLayers},
    {"embedding", PipelineSplit::kEmbedding},
    {"loss", PipelineSplit::kLoss},
    {"ends", PipelineSplit::kEnds},
}};
constexpr std::array<std::pair<std::string_view, CpComm>, 4> kCpComms = {{
    {"p2p", CpComm::kP2p},
    {"all_gather", CpComm::kAllGather},
    {"a2a", CpComm::kA2a},
    {"a2a+p2p", CpComm::kA2aP2p},
}};
constexpr std::array<std::pair<std::string_view, Dtype>, 3> kPrecisions = {{
    {"bf16", Dtype::kBf16},
    {"fp16", Dtype::kFp16},
    {"fp8", Dtype::kFp8},
}};

// A key that overrides what the plan's stack says: set only when the file has it.
template <typename T>
void ReadOverride(YamlMap& map, std::string_view key,
                  std::span<const std::pair<std::string_view, T>> names, std::optional<T>* out) {
  if (!map.Has(key)) return;
  T value{};
  map.Enum(key, &value, Need::kOptional, names);
  *out = value;
}
void ReadOverride(YamlMap& map, std::string_view key, std::optional<bool>* out) {
  if (!map.Has(key)) return;
  bool value = false;
  map.Bool(key, &value, Need::kOptional);
  *out = value;
}

IntRange Range(const PlanIntBound& bound) { return IntRange{.min = bound.min, .max = bound.max}; }

void ReadFigures(YamlMap& parent, std::string_view key, std::optional<PlanFigures>* out) {
  std::optional<YamlMap> map = parent.Map(key, Need::kOptional);
  if (!map) return;
  PlanFigures f;
  // Times, rates and shares are never negative; the exposed time, the iteration less its ideal,
  // may be (by rounding, or where overlap beats the ideal's serial order).
  RealRange any{.min = -1e300, .max = 1e300, .min_exclusive = false};
  RealRange non_negative{.min = 0, .max = 1e18, .min_exclusive = false};
  RealRange fraction{.min = 0, .max = 1, .min_exclusive = false};
  map->Real("iteration_ms", &f.iteration_ms, Need::kOptional, non_negative);
  map->Real("ideal_ms", &f.ideal_ms, Need::kOptional, non_negative);
  map->Real("exposed_comm_ms", &f.exposed_comm_ms, Need::kOptional, any);
  map->Real("hidden_comm_fraction", &f.hidden_comm_fraction, Need::kOptional, fraction);
  map->Real("tokens_per_s", &f.tokens_per_s, Need::kOptional, non_negative);
  map->Real("tflops_per_gpu", &f.tflops_per_gpu, Need::kOptional, non_negative);
  map->Real("mfu", &f.mfu, Need::kOptional, non_negative);
  map->Real("memory_gib_per_gpu", &f.memory_gib_per_gpu, Need::kOptional, non_negative);
  (void)map->Finish();
  *out = f;
}

std::string AbsolutePath(std::string_view path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(std::filesystem::path(path), ec);
  return ec ? std::string(path) : absolute.lexically_normal().string();
}

// A reference as a plan file writes it: a catalog name bare; a file as an absolute path, quoted,
// so that the plan loads from any directory whatever characters the name holds.
std::string RefToYaml(std::string_view ref, std::span<const EmbeddedFile> catalog) {
  if (FindEmbedded(catalog, ref) != nullptr) return std::string(ref);
  return YamlQuoted(AbsolutePath(ref));
}

bool IsYamlName(std::string_view s) { return s.ends_with(".yaml") || s.ends_with(".yml"); }

// NODE:COUNT[:GPUS] keeps its form, with a node file made absolute; a cluster file is a path.
std::string ClusterRefToYaml(std::string_view ref) {
  const size_t colon = ref.find(':');
  if (IsYamlName(ref) || colon == std::string_view::npos) return RefToYaml(ref, {});
  std::string_view node = ref.substr(0, colon);
  if (FindEmbedded(NodeCatalog(), node) != nullptr) return std::string(ref);
  return YamlQuoted(AbsolutePath(node) + std::string(ref.substr(colon)));
}

std::string FiguresToYaml(std::string_view key, const PlanFigures& f) {
  return fmt::format(
      "{}:\n"
      "  iteration_ms: {:.4f}\n"
      "  ideal_ms: {:.4f}\n"
      "  exposed_comm_ms: {:.4f}\n"
      "  hidden_comm_fraction: {:.4f}\n"
      "  tokens_per_s: {:.1f}\n"
      "  tflops_per_gpu: {:.2f}\n"
      "  mfu: {:.4f}\n"
      "  memory_gib_per_gpu: {:.2f}\n",
      key, f.iteration_ms, f.ideal_ms, f.exposed_comm_ms, f.hidden_comm_fraction, f.tokens_per_s,
      f.tflops_per_gpu, f.mfu, f.memory_gib_per_gpu);
}

// A YAML flow map, `{key: value, ...}`, in the order its pairs are added.
class FlowMap {
 public:
  template <typename T>
  FlowMap& Add(std::string_view key, const T& value) {
    body_ += fmt::format("{}{}: {}", body_.empty() ? "" : ", ", key, value);
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace

std::string_view ScopeName(OverlapScope scope) {
  for (const auto& [name, value] : kScopes)
    if (value == scope) return name;
  return "none";
}

std::string_view MethodName(OverlapMethod method) {
  for (const auto& [name, value] : kMethods)
    if (value == method) return name;
  return "domino";
}

std::string_view PlacementName(Placement placement) {
  for (const auto& [name, value] : kPlacements)
    if (value == placement) return name;
  return "?";
}

std::string_view PipelineSplitName(PipelineSplit split) {
  for (const auto& [name, value] : kPipelineSplits)
    if (value == split) return name;
  return "layers";
}

std::string Plan::CpCommText() const {
  const CpComm comm = cp_communication();
  return comm == CpComm::kA2aP2p
             ? fmt::format("{}, a2a groups of {}", CpCommName(comm), cp_a2a_ranks())
             : std::string(CpCommName(comm));
}

int Plan::DefaultCpA2a() const {
  const int beside_tp = std::max(1, cluster.gpus_per_node / std::max(1, tp));
  int anywhere = 0;
  for (int a = cp / 2; a >= 2; --a) {
    if (cp % a != 0 || !divides_heads(a)) continue;
    if (a <= beside_tp) return a;
    if (anywhere == 0) anywhere = a;
  }
  return anywhere;
}

std::string_view CpCommName(CpComm comm) {
  for (const auto& [name, value] : kCpComms)
    if (value == comm) return name;
  return "p2p";
}

std::string_view RecomputeName(Recompute recompute) {
  for (const auto& [name, value] : kRecomputes)
    if (value == recompute) return name;
  return "none";
}

std::span<const std::pair<std::string_view, Dtype>> PrecisionNames() { return kPrecisions; }
std::span<const std::pair<std::string_view, Dtype>> OptimizerDtypeNames() {
  return kOptimizerDtypes;
}
std::span<const std::pair<std::string_view, OverlapScope>> ScopeNames() { return kScopes; }
std::span<const std::pair<std::string_view, OverlapMethod>> MethodNames() { return kMethods; }
std::span<const std::pair<std::string_view, Recompute>> RecomputeNames() { return kRecomputes; }
std::span<const std::pair<std::string_view, Placement>> PlacementNames() { return kPlacements; }
std::span<const std::pair<std::string_view, PipelineSplit>> PipelineSplitNames() {
  return kPipelineSplits;
}
std::span<const std::pair<std::string_view, CpComm>> CpCommNames() { return kCpComms; }

Status ResolvePlan(Plan& plan, bool check_rules) {
  if (!plan.model_ref.empty()) {
    Result<ModelSpec> model = LoadModel(plan.model_ref);
    if (!model.ok()) return model.error();
    plan.model = std::move(model).value();
  }
  Result<ClusterSpec> cluster = LoadCluster(plan.cluster_ref);
  if (!cluster.ok()) return cluster.error();
  Result<StackSpec> stack = LoadStack(plan.stack_ref);
  if (!stack.ok()) return stack.error();
  plan.cluster = std::move(cluster).value();
  plan.stack = std::move(stack).value();
  if (plan.seq_len <= 0) plan.seq_len = plan.model.seq_len;
  if (!check_rules) {
    // A search's starting point may break the rules the search varies, never the bounds.
    const std::pair<const PlanIntBound*, int> bounded[] = {{&kSeqLenBound, plan.seq_len},
                                                           {&kMicroBatchBound, plan.micro_batch},
                                                           {&kGlobalBatchBound, plan.global_batch}};
    for (const auto& [bound, value] : bounded)
      if (std::optional<std::string> rule = CheckBound(*bound, value))
        return Error(fmt::format("{}: {}", bound->key, *rule));
    return Status::Ok();
  }
  if (auto failure = CheckPlanRules(plan))
    return Error(fmt::format("{}: {}", failure->key, failure->rule));
  return Status::Ok();
}

namespace {

// A model, stack or cluster file a plan file names by a relative path is looked for beside the
// plan first (PathNear): the plan works from any folder. Catalog names are left alone.
std::string NearPlan(const std::string& ref, std::string_view file) {
  auto path_like = [](std::string_view s) {
    return s.find('/') != std::string_view::npos || s.ends_with(".yaml") || s.ends_with(".yml") ||
           s.ends_with(".json");
  };
  // A cluster's NODE:COUNT[:GPUS], the node a file.
  const size_t colon = ref.find(':');
  if (colon != std::string::npos && path_like(std::string_view(ref).substr(0, colon)))
    return PathNear(ref.substr(0, colon), file) + ref.substr(colon);
  return path_like(ref) ? PathNear(ref, file) : ref;
}

// Plan::search_stopped from a `search:` block as `domino plan` writes it (tools/cmd_plan.cc
// PlanYaml). The block is for people and read leniently: a value it never writes says only that
// the search stopped, as nothing of it reaches a message raw.
std::string SearchStopped(const YAML::Node& search) {
  if (!search.IsMap()) return "";
  if (const YAML::Node by = search["stopped_by"]; by.IsDefined() && !by.IsNull()) {
    const std::string signal = by.IsScalar() ? by.Scalar() : "";
    return signal == "SIGINT" || signal == "SIGTERM" ? "by " + signal : "by a signal";
  }
  if (const YAML::Node timeout = search["stopped_at_timeout_s"]; timeout.IsDefined()) {
    double seconds = 0;
    if (timeout.IsScalar() && YAML::convert<double>::decode(timeout, seconds) &&
        std::isfinite(seconds) && seconds > 0)
      return fmt::format("at its {:g} s timeout", seconds);
    return "at its timeout";
  }
  return "";
}

}  // namespace

Result<Plan> ParsePlan(std::string_view text, std::string_view file) {
  Result<YAML::Node> doc = ParseYaml(text, file);
  if (!doc.ok()) return doc.error();
  return ParsePlanNode(*doc, file);
}

Result<Plan> ParsePlanNode(const YAML::Node& doc, std::string_view file,
                           std::string_view key_path) {
  YamlMap root(doc, std::string(file), std::string(key_path));
  Plan plan;
  // `model:` names a catalog model or a file, or is the model itself as a mapping.
  std::optional<ModelSpec> inline_model;
  if (root.Has("model") && doc["model"].IsMap()) {
    if (std::optional<YamlMap> model = root.Map("model", Need::kRequired)) {
      inline_model = ReadModel(*model);
      (void)model->Finish();  // unknown and duplicate keys; root.Finish() returns the error
      plan.model_ref.clear();
    }
  } else {
    root.String("model", &plan.model_ref, Need::kRequired);
  }
  root.String("cluster", &plan.cluster_ref, Need::kRequired);
  root.String("stack", &plan.stack_ref, Need::kOptional);
  root.Enum("precision", &plan.precision, Need::kOptional, kPrecisions);
  plan.seq_len = 0;
  // Unset, these follow the rest of the plan as the command-line flags do (below).
  plan.tp = 0;
  plan.global_batch = 0;
  if (auto training = root.Map("training", Need::kOptional)) {
    training->Int("seq_len", &plan.seq_len, Need::kOptional, Range(kSeqLenBound));
    training->Int("micro_batch", &plan.micro_batch, Need::kOptional, Range(kMicroBatchBound));
    training->Int("global_batch", &plan.global_batch, Need::kOptional, Range(kGlobalBatchBound));
    ReadOverride(*training, "cross_entropy", CrossEntropyNames(), &plan.cross_entropy);
    ReadOverride(*training, "attention", AttentionKernelNames(), &plan.attention);
    ReadOverride(*training, "fp8_recipe", Fp8RecipeNames(), &plan.fp8_recipe);
    ReadOverride(*training, "dropout", &plan.dropout);
    ReadOverride(*training, "mlp_dropout", &plan.mlp_dropout);
    ReadOverride(*training, "fused_bias_dropout_add", &plan.fused_bias_dropout_add);
    ReadOverride(*training, "cuda_graphs", &plan.cuda_graphs);
    ReadOverride(*training, "softmax", SoftmaxKernelsNames(), &plan.softmax);
    ReadOverride(*training, "fp8_cast", Fp8CastNames(), &plan.fp8_cast);
    (void)training->Finish();
  }
  if (auto parallel = root.Map("parallel", Need::kOptional)) {
    parallel->Int("tp", &plan.tp, Need::kOptional, Range(kTpBound));
    parallel->Int("cp", &plan.cp, Need::kOptional, Range(kCpBound));
    ReadOverride(*parallel, "cp_comm", CpCommNames(), &plan.cp_comm);
    parallel->Int("cp_a2a", &plan.cp_a2a, Need::kOptional, Range(kCpA2aBound));
    parallel->Int("pp", &plan.pp, Need::kOptional, Range(kPpBound));
    parallel->Int("dp", &plan.dp, Need::kOptional, Range(kDpBound));
    parallel->Bool("sequence_parallel", &plan.sequence_parallel, Need::kOptional);
    parallel->Enum("placement", &plan.placement, Need::kOptional, kPlacements);
    parallel->Int("virtual_stages", &plan.virtual_stages, Need::kOptional,
                  Range(kVirtualStagesBound));
    parallel->Enum("pipeline_split", &plan.pipeline_split, Need::kOptional, kPipelineSplits);
    ReadOverride(*parallel, "overlap_p2p", &plan.overlap_p2p);
    (void)parallel->Finish();
  }
  if (auto overlap = root.Map("overlap", Need::kOptional)) {
    overlap->Int("row_split", &plan.row_split, Need::kOptional, Range(kRowSplitBound));
    overlap->Int("col_split", &plan.col_split, Need::kOptional, Range(kColSplitBound));
    overlap->Enum("scope", &plan.scope, Need::kOptional, kScopes);
    overlap->Enum("method", &plan.method, Need::kOptional, kMethods);
    overlap->Int("chunks", &plan.chunks, Need::kOptional, Range(kChunksBound));
    overlap->Int("rs_chunks", &plan.rs_chunks, Need::kOptional, Range(kRsChunksBound));
    ReadOverride(*overlap, "copy_engine", &plan.copy_engine);
    (void)overlap->Finish();
  }
  if (auto memory = root.Map("memory", Need::kOptional)) {
    memory->Enum("recompute", &plan.recompute, Need::kOptional, kRecomputes);
    memory->Int("recompute_layers", &plan.recompute_layers, Need::kOptional,
                Range(kRecomputeLayersBound));
    memory->Bool("distributed_optimizer", &plan.distributed_optimizer, Need::kOptional);
    memory->Bool("fsdp", &plan.fsdp, Need::kOptional);
    ReadOverride(*memory, "grad_reduce", GradReduceNames(), &plan.grad_reduce);
    ReadOverride(*memory, "grad_sync", GradSyncNames(), &plan.grad_sync);
    memory->Enum("optimizer_dtype", &plan.optimizer_dtype, Need::kOptional, kOptimizerDtypes);
    (void)memory->Finish();
  }
  ReadFigures(root, "predicted", &plan.predicted);
  ReadFigures(root, "measured", &plan.measured);
  // A report's writer and per-op timeline: read by `domino compare` only (sim/report.h).
  (void)root.Raw("report");
  (void)root.Raw("timeline");
  // How `domino plan` chose the plan: for people, but for a search stopped early.
  plan.search_stopped = SearchStopped(root.Raw("search"));
  DOMINO_RETURN_IF_ERROR(root.Finish());

  // Named from here on as the working directory reaches them, as flags name them.
  plan.model_ref = NearPlan(plan.model_ref, file);
  plan.cluster_ref = NearPlan(plan.cluster_ref, file);
  plan.stack_ref = NearPlan(plan.stack_ref, file);
  if (inline_model) {
    plan.model = std::move(*inline_model);
  } else {
    Result<ModelSpec> model = LoadModel(plan.model_ref);
    if (!model.ok()) {
      root.Fail("model", model.message());
      return root.Finish().error();
    }
    plan.model = std::move(model).value();
  }
  Result<ClusterSpec> cluster = LoadCluster(plan.cluster_ref);
  if (!cluster.ok()) {
    root.Fail("cluster", cluster.message());
    return root.Finish().error();
  }
  plan.cluster = std::move(cluster).value();
  // As the flags have it: tp takes the GPUs cp, pp and dp leave; the global batch is one
  // micro-batch per DP rank.
  if (plan.tp == 0) {
    const int64_t gpus = plan.cluster.total_gpus();
    const int64_t others = static_cast<int64_t>(plan.cp) * plan.pp * plan.dp;
    if (gpus % others != 0) {
      root.Fail("parallel", fmt::format("tp is not given, and cp*pp*dp = {}*{}*{} = {} does not "
                                        "divide the cluster's {} GPUs",
                                        plan.cp, plan.pp, plan.dp, others, gpus));
      return root.Finish().error();
    }
    plan.tp = static_cast<int>(gpus / others);
  }
  if (plan.global_batch == 0) plan.global_batch = plan.micro_batch * plan.dp;
  Result<StackSpec> stack = LoadStack(plan.stack_ref);
  if (!stack.ok()) {
    root.Fail("stack", stack.message());
    return root.Finish().error();
  }
  plan.stack = std::move(stack).value();
  if (plan.seq_len == 0) plan.seq_len = plan.model.seq_len;
  if (auto failure = CheckPlanRules(plan)) {
    // Point at the innermost key that exists in the file, else at its section, else the root.
    if (failure->key.find('.') == std::string::npos) {
      root.Fail(root.Has(failure->key) ? failure->key : "",
                root.Has(failure->key) ? failure->rule : failure->key + ": " + failure->rule);
      return root.Finish().error();
    }
    std::string section = failure->key.substr(0, failure->key.find('.'));
    std::string leaf = failure->key.substr(failure->key.find('.') + 1);
    std::optional<YamlMap> map =
        root.Has(section) ? root.Map(section, Need::kOptional) : std::nullopt;
    if (map && map->Has(leaf)) {
      map->Fail(leaf, failure->rule);
    } else if (map) {
      map->Fail("", fmt::format("{}: {}", leaf, failure->rule));
    } else {
      root.Fail("", fmt::format("{}: {}", failure->key, failure->rule));
    }
    return root.Finish().error();
  }
  return plan;
}

Result<Plan> LoadPlan(const std::string& path) {
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  return ParsePlan(*text, path);
}

std::string PlanToYaml(const Plan& p, std::string_view comment) {
  std::string out;
  if (!comment.empty()) {
    size_t start = 0;
    while (start <= comment.size()) {
      size_t end = comment.find('\n', start);
      if (end == std::string_view::npos) end = comment.size();
      out += fmt::format("# {}\n", comment.substr(start, end - start));
      start = end + 1;
    }
  }
  // A key the plan may leave out is written only when set (its stack's value, or the default,
  // applies otherwise), so plans that do not use it keep their YAML.
  FlowMap training;
  training.Add("seq_len", p.seq_len).Add("micro_batch", p.micro_batch);
  training.Add("global_batch", p.global_batch);
  if (p.cross_entropy) training.Add("cross_entropy", CrossEntropyName(*p.cross_entropy));
  if (p.attention) training.Add("attention", AttentionKernelName(*p.attention));
  if (p.fp8_recipe) training.Add("fp8_recipe", Fp8RecipeName(*p.fp8_recipe));
  if (p.dropout) training.Add("dropout", *p.dropout);
  if (p.mlp_dropout) training.Add("mlp_dropout", *p.mlp_dropout);
  if (p.fused_bias_dropout_add) training.Add("fused_bias_dropout_add", *p.fused_bias_dropout_add);
  if (p.cuda_graphs) training.Add("cuda_graphs", *p.cuda_graphs);
  if (p.softmax) training.Add("softmax", SoftmaxKernelsName(*p.softmax));
  if (p.fp8_cast) training.Add("fp8_cast", Fp8CastName(*p.fp8_cast));
  FlowMap parallel;
  parallel.Add("tp", p.tp);
  if (p.cp != 1) parallel.Add("cp", p.cp);
  // The comm type when the plan names it or its default is not the ring.
  if (p.cp_comm || (p.cp != 1 && p.cp_communication() != CpComm::kP2p))
    parallel.Add("cp_comm", CpCommName(p.cp_communication()));
  if (p.cp_a2a > 0 || (p.cp != 1 && p.cp_communication() == CpComm::kA2aP2p))
    parallel.Add("cp_a2a", p.cp_a2a > 0 ? p.cp_a2a : p.cp_a2a_ranks());
  parallel.Add("pp", p.pp).Add("dp", p.dp).Add("sequence_parallel", p.sequence_parallel);
  parallel.Add("virtual_stages", p.virtual_stages);
  if (p.pipeline_split != PipelineSplit::kLayers) {
    parallel.Add("pipeline_split", PipelineSplitName(p.pipeline_split));
  }
  if (p.placement != Placement::kTpDpPp) parallel.Add("placement", PlacementName(p.placement));
  if (p.overlap_p2p) parallel.Add("overlap_p2p", *p.overlap_p2p);
  FlowMap overlap;
  overlap.Add("row_split", p.row_split).Add("col_split", p.col_split);
  overlap.Add("scope", ScopeName(p.scope));
  // A Domino plan's YAML stays what it was before decomposed overlap existed.
  if (p.method != OverlapMethod::kDomino) {
    overlap.Add("method", MethodName(p.method)).Add("chunks", p.decomposed_chunks());
    if (p.rs_chunks > 0) overlap.Add("rs_chunks", p.rs_chunks);
    if (p.copy_engine) overlap.Add("copy_engine", *p.copy_engine);
  }
  FlowMap memory;
  memory.Add("recompute", RecomputeName(p.recompute));
  if (p.recompute_layers > 0) memory.Add("recompute_layers", p.recompute_layers);
  memory.Add("distributed_optimizer", p.distributed_optimizer);
  if (p.fsdp) memory.Add("fsdp", true);
  if (p.grad_reduce) memory.Add("grad_reduce", GradReduceName(*p.grad_reduce));
  if (p.grad_sync) memory.Add("grad_sync", GradSyncName(*p.grad_sync));
  if (p.optimizer_dtype != Dtype::kFp32) {
    memory.Add("optimizer_dtype", DtypeName(p.optimizer_dtype));
  }
  out += fmt::format(
      "model: {}\ncluster: {}\nstack: {}\nprecision: {}\ntraining: {}\nparallel: {}\n"
      "overlap: {}\nmemory: {}\n",
      p.model_ref.empty() ? ModelToFlowYaml(p.model) : RefToYaml(p.model_ref, ModelCatalog()),
      ClusterRefToYaml(p.cluster_ref), RefToYaml(p.stack_ref, StackCatalog()),
      DtypeName(p.precision), training.str(), parallel.str(), overlap.str(), memory.str());
  if (p.predicted) out += FiguresToYaml("predicted", *p.predicted);
  if (p.measured) out += FiguresToYaml("measured", *p.measured);
  return out;
}

}  // namespace domino
