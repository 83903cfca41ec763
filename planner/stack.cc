#include "planner/stack.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <utility>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"
#include "planner/plan.h"

namespace domino {
namespace {

constexpr std::array<std::pair<std::string_view, AttentionKernel>, 4> kAttentionKernels{{
    {"flash", AttentionKernel::kFlash},
    {"flash2", AttentionKernel::kFlash2},
    {"unfused", AttentionKernel::kUnfused},
    {"flex", AttentionKernel::kFlex},
}};

constexpr std::array<std::pair<std::string_view, SoftmaxKernels>, 3> kSoftmaxKernels{{
    {"fused", SoftmaxKernels::kFused},
    {"scale-mask-softmax", SoftmaxKernels::kScaleMaskSoftmax},
    {"scale-softmax", SoftmaxKernels::kScaleSoftmax},
}};

constexpr std::array<std::pair<std::string_view, Fp8Cast>, 3> kFp8Casts{{
    {"norm-and-activation", Fp8Cast::kNormAndActivation},
    {"norm", Fp8Cast::kNorm},
    {"linear", Fp8Cast::kLinear},
}};

constexpr std::array<std::pair<std::string_view, GradReduce>, 3> kGradReduces{{
    {"fp32", GradReduce::kFp32},
    {"param", GradReduce::kParam},
    {"fp16-param", GradReduce::kFp16Param},
}};

constexpr std::array<std::pair<std::string_view, GradSync>, 3> kGradSyncs{{
    {"layer", GradSync::kLayer},
    {"megatron", GradSync::kMegatron},
    {"megatron-aligned", GradSync::kMegatronAligned},
}};

constexpr std::array<std::pair<std::string_view, CrossEntropy>, 4> kCrossEntropies{{
    {"vocab-parallel", CrossEntropy::kVocabParallel},
    {"megatron-fused", CrossEntropy::kMegatronFused},
    {"te", CrossEntropy::kTe},
    {"fused", CrossEntropy::kFused},
}};

constexpr std::array<std::pair<std::string_view, Fp8Recipe>, 2> kFp8Recipes{{
    {"delayed", Fp8Recipe::kDelayed},
    {"current", Fp8Recipe::kCurrent},
}};

constexpr std::array<std::pair<std::string_view, RopeKernel>, 3> kRopeKernels{{
    {"fused", RopeKernel::kFused},
    {"unfused", RopeKernel::kUnfused},
    {"none", RopeKernel::kNone},
}};

constexpr std::array<std::pair<std::string_view, AttentionCopies>, 3> kAttentionCopies{{
    {"none", AttentionCopies::kNone},
    {"megatron", AttentionCopies::kMegatron},
    {"permute", AttentionCopies::kPermute},
}};

template <typename T, size_t N>
std::string_view NameOf(const std::array<std::pair<std::string_view, T>, N>& names, T value) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  return "?";
}

}  // namespace

std::string_view GradReduceName(GradReduce reduce) { return NameOf(kGradReduces, reduce); }
std::span<const std::pair<std::string_view, GradReduce>> GradReduceNames() { return kGradReduces; }
std::string_view GradSyncName(GradSync sync) { return NameOf(kGradSyncs, sync); }
std::span<const std::pair<std::string_view, GradSync>> GradSyncNames() { return kGradSyncs; }
std::string_view CrossEntropyName(CrossEntropy loss) { return NameOf(kCrossEntropies, loss); }
std::string_view RopeKernelName(RopeKernel rope) { return NameOf(kRopeKernels, rope); }
std::string_view AttentionCopiesName(AttentionCopies copies) {
  return NameOf(kAttentionCopies, copies);
}
std::string_view Fp8RecipeName(Fp8Recipe recipe) { return NameOf(kFp8Recipes, recipe); }
std::span<const std::pair<std::string_view, Fp8Recipe>> Fp8RecipeNames() { return kFp8Recipes; }
std::span<const std::pair<std::string_view, CrossEntropy>> CrossEntropyNames() {
  return kCrossEntropies;
}

std::string_view SoftmaxKernelsName(SoftmaxKernels kernels) {
  return NameOf(kSoftmaxKernels, kernels);
}
std::span<const std::pair<std::string_view, SoftmaxKernels>> SoftmaxKernelsNames() {
  return kSoftmaxKernels;
}

std::string_view Fp8CastName(Fp8Cast cast) { return NameOf(kFp8Casts, cast); }
std::span<const std::pair<std::string_view, Fp8Cast>> Fp8CastNames() { return kFp8Casts; }

std::string_view AttentionKernelName(AttentionKernel kernel) {
  return NameOf(kAttentionKernels, kernel);
}
std::span<const std::pair<std::string_view, AttentionKernel>> AttentionKernelNames() {
  return kAttentionKernels;
}

Result<StackSpec> ParseStack(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  StackSpec stack;
  YamlMap map(*root, std::string(file));
  map.Name("name", &stack.name, Need::kRequired);
  map.Enum("attention", &stack.attention, Need::kRequired, kAttentionKernels);
  map.Bool("fused_softmax", &stack.fused_softmax, Need::kRequired);
  map.Bool("fp32_scores", &stack.fp32_scores, Need::kOptional);
  map.Bool("fused_bias_gelu", &stack.fused_bias_gelu, Need::kRequired);
  map.Bool("fused_bias_dropout_add", &stack.fused_bias_dropout_add, Need::kRequired);
  map.Bool("dropout", &stack.dropout, Need::kOptional);
  map.Bool("cuda_graphs", &stack.cuda_graphs, Need::kOptional);
  map.Bool("overlap_grad_reduce", &stack.overlap_grad_reduce, Need::kOptional);
  map.Bool("overlap_param_gather", &stack.overlap_param_gather, Need::kOptional);
  map.Enum("cross_entropy", &stack.cross_entropy, Need::kOptional, kCrossEntropies);
  map.Bool("decomposed_overlap", &stack.decomposed_overlap, Need::kOptional);
  map.Bool("decomposed_copy_engine", &stack.decomposed_copy_engine, Need::kOptional);
  map.Int("decomposed_rs_chunks", &stack.decomposed_rs_chunks, Need::kOptional,
          IntRange{.min = 0, .max = kMaxSplit});
  map.Enum("grad_reduce", &stack.grad_reduce, Need::kOptional, kGradReduces);
  map.Enum("grad_sync", &stack.grad_sync, Need::kOptional, kGradSyncs);
  map.Bool("cp_merge_kernels", &stack.cp_merge_kernels, Need::kOptional);
  map.Bool("sliding_window", &stack.sliding_window, Need::kOptional);
  map.Bool("te_cp_comm_types", &stack.te_cp_comm_types, Need::kOptional);
  map.Bool("fused_squared_relu", &stack.fused_squared_relu, Need::kOptional);
  map.Bool("fused_geglu", &stack.fused_geglu, Need::kOptional);
  map.Bool("fused_logit_softcap", &stack.fused_logit_softcap, Need::kOptional);
  map.Bool("fused_attention_softcap", &stack.fused_attention_softcap, Need::kOptional);
  map.Enum("capped_attention", &stack.capped_attention, Need::kOptional, kAttentionKernels);
  map.Enum("rope", &stack.rope, Need::kOptional, kRopeKernels);
  map.Enum("attention_copies", &stack.attention_copies, Need::kOptional, kAttentionCopies);
  map.Bool("dense_embedding_grad", &stack.dense_embedding_grad, Need::kOptional);
  map.Bool("wgrad_overlaps_tp_comm", &stack.wgrad_overlaps_tp_comm, Need::kOptional);
  map.Bool("sliced_fc1_wgrad_overlaps_tp_comm", &stack.sliced_fc1_wgrad_overlaps_tp_comm,
           Need::kOptional);
  map.Bool("overlap_p2p", &stack.overlap_p2p, Need::kOptional);
  map.Bool("fused_wgrad_accumulation", &stack.fused_wgrad_accumulation, Need::kOptional);
  map.Bool("sliced_mlp_fused_wgrad_accumulation", &stack.sliced_mlp_fused_wgrad_accumulation,
           Need::kOptional);
  map.Bool("fp8_amax_reduction", &stack.fp8_amax_reduction, Need::kOptional);
  map.Enum("fp8_cast", &stack.fp8_cast, Need::kOptional, kFp8Casts);
  DOMINO_RETURN_IF_ERROR(map.Finish());
  return stack;
}

Result<StackSpec> LoadStack(std::string_view name_or_path) {
  if (const EmbeddedFile* entry = FindEmbedded(StackCatalog(), name_or_path))
    return ParseStack(entry->text, entry->path);
  std::string path(name_or_path);
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_regular_file(path, ec)) {
    Result<std::string> text = ReadTextFile(path);
    if (!text.ok()) return text.error();
    return ParseStack(*text, path);
  }
  std::string names;
  for (const EmbeddedFile& f : StackCatalog())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", f.name);
  return Error(fmt::format("unknown stack '{}': not a catalog name ({}) nor a readable file",
                           name_or_path, names));
}

}  // namespace domino
