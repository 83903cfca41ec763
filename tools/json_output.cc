#include "tools/json_output.h"

#include <filesystem>
#include <string>
#include <vector>

#include "models/model_counts.h"
#include "planner/stack.h"

namespace domino::cli {
namespace {

constexpr std::pair<OutputFormat, std::string_view> kFormatNames[] = {
    {OutputFormat::kTable, "table"},
    {OutputFormat::kMarkdown, "markdown"},
    {OutputFormat::kJson, "json"},
};

// A reference as a plan file writes it (planner/plan.cc PlanToYaml): a catalog name bare, a file
// as an absolute path, so that the document names the same thing from any directory.
std::string AbsolutePath(std::string_view path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(std::filesystem::path(path), ec);
  return ec ? std::string(path) : absolute.lexically_normal().string();
}

std::string Ref(std::string_view ref, std::span<const EmbeddedFile> catalog) {
  return FindEmbedded(catalog, ref) != nullptr ? std::string(ref) : AbsolutePath(ref);
}

// NODE:COUNT[:GPUS] keeps its form, with a node file made absolute; a cluster file is a path.
std::string ClusterRef(std::string_view ref) {
  const size_t colon = ref.find(':');
  if (ref.ends_with(".yaml") || ref.ends_with(".yml") || colon == std::string_view::npos)
    return AbsolutePath(ref);
  const std::string_view node = ref.substr(0, colon);
  if (FindEmbedded(NodeCatalog(), node) != nullptr) return std::string(ref);
  return AbsolutePath(node) + std::string(ref.substr(colon));
}

// The keys of a model file, as ModelToFlowYaml writes them: head_dim where it is not hidden /
// heads, positions where the model says them, the attention's features where they are set.
Json ModelKeysJson(const ModelSpec& m) {
  Json keys{{"name", m.name},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"ffn", m.ffn},
            {"vocab", m.vocab},
            {"seq_len", m.seq_len},
            {"activation", ActivationName(m.activation)},
            {"norm", NormName(m.norm)},
            {"bias", m.bias},
            {"tied_embeddings", m.tied_embeddings}};
  if (m.head_dim > 0) keys["head_dim"] = m.head_dim;
  if (m.positions != Positions::kByNorm) keys["positions"] = PositionsName(m.positions);
  if (m.qkv_bias) keys["qkv_bias"] = true;
  if (m.qk_norm) keys["qk_norm"] = true;
  if (m.post_norms) keys["post_norms"] = true;
  if (m.logit_softcap > 0) keys["logit_softcap"] = m.logit_softcap;
  if (m.attention_softcap > 0) keys["attention_softcap"] = m.attention_softcap;
  if (m.rotary_fraction < 1) keys["rotary_fraction"] = m.rotary_fraction;
  if (m.window.tokens > 0) {
    Json window{{"tokens", m.window.tokens}};
    if (m.window.first_layer > 0) window["first_layer"] = m.window.first_layer;
    if (m.window.every > 1) window["every"] = m.window.every;
    if (m.window.full_every > 0) window["full_every"] = m.window.full_every;
    keys["window"] = std::move(window);
  }
  return keys;
}

Json LinkJson(const LinkSpec& link) {
  return Json{{"GBps_per_direction", link.GBps_per_direction},
              {"efficiency", link.efficiency},
              {"base_latency_us", link.base_latency_us},
              {"step_latency_us", link.step_latency_us}};
}

}  // namespace

std::string_view FormatName(OutputFormat format) {
  for (const auto& [each, name] : kFormatNames)
    if (each == format) return name;
  return "table";
}

void AddFormatOption(CLI::App* sub, OutputFormat* format,
                     std::initializer_list<OutputFormat> formats) {
  std::vector<std::string> names;
  std::string help;
  for (OutputFormat each : formats) {
    names.emplace_back(FormatName(each));
    help += (help.empty() ? "" : " | ") + names.back() + (help.empty() ? " (default)" : "");
  }
  help += "; json prints one JSON document on stdout (docs/json.md)";
  *format = *formats.begin();
  sub->add_option_function<std::string>(
         "--format",
         [format](const std::string& name) {
           for (const auto& [each, each_name] : kFormatNames)
             if (each_name == name) *format = each;
         },
         help)
      ->check(CLI::IsMember(names));
}

Json JsonDocument(std::string_view command) {
  return Json{{"schema", "domino." + std::string(command) + "/1"},
              {"domino_version", DOMINO_VERSION}};
}

void PrintJson(const Json& document, std::ostream& out) {
  out << document.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

Json PlanJson(const Plan& p) {
  Json plan;
  plan["model"] =
      p.model_ref.empty() ? ModelKeysJson(p.model) : Json(Ref(p.model_ref, ModelCatalog()));
  plan["cluster"] = ClusterRef(p.cluster_ref);
  plan["stack"] = Ref(p.stack_ref, StackCatalog());
  plan["precision"] = DtypeName(p.precision);
  plan["training"] = {{"seq_len", p.seq_len},
                      {"micro_batch", p.micro_batch},
                      {"global_batch", p.global_batch},
                      {"cross_entropy", CrossEntropyName(p.loss_kernels())},
                      {"attention", AttentionKernelName(p.attention_kernel())},
                      {"dropout", p.applies_dropout()},
                      {"fused_bias_dropout_add", p.fuses_bias_dropout_add()},
                      {"cuda_graphs", p.launches_from_graphs()}};
  if (p.applies_dropout()) plan["training"]["mlp_dropout"] = p.branch_dropout(false);
  if (p.precision == Dtype::kFp8) {
    plan["training"]["fp8_recipe"] = Fp8RecipeName(p.fp8_scaling());
    plan["training"]["fp8_cast"] = Fp8CastName(p.fp8_casts());
  }
  if (p.attention_kernel() == AttentionKernel::kUnfused && !p.stack.fp32_scores)
    plan["training"]["softmax"] = SoftmaxKernelsName(p.softmax_kernels());
  plan["parallel"] = {{"tp", p.tp},
                      {"cp", p.cp},
                      {"pp", p.pp},
                      {"dp", p.dp},
                      {"sequence_parallel", p.sequence_parallel},
                      {"virtual_stages", p.virtual_stages},
                      {"pipeline_split", PipelineSplitName(p.pipeline_split)},
                      {"overlap_p2p", p.p2p_overlapped()},
                      {"placement", PlacementName(p.placement)}};
  if (p.cp > 1) plan["parallel"]["cp_comm"] = CpCommName(p.cp_communication());
  if (p.cp > 1 && p.cp_communication() == CpComm::kA2aP2p)
    plan["parallel"]["cp_a2a"] = p.cp_a2a_ranks();
  plan["overlap"] = {{"row_split", p.row_split},
                     {"col_split", p.col_split},
                     {"scope", ScopeName(p.scope)},
                     {"method", MethodName(p.method)},
                     {"chunks", p.decomposed_chunks()},
                     {"rs_chunks", p.decomposed_rs_chunks()},
                     {"copy_engine", p.copy_engine_parts()}};
  plan["memory"] = {{"recompute", RecomputeName(p.recompute)},
                    {"recompute_layers", p.recompute_layers},
                    {"distributed_optimizer", p.distributed_optimizer},
                    {"fsdp", p.fsdp},
                    {"grad_reduce", GradReduceName(p.gradient_reduce())},
                    {"grad_sync", GradSyncName(p.gradient_sync())},
                    {"optimizer_dtype", DtypeName(p.optimizer_dtype)}};
  return plan;
}

Json FiguresJson(const PlanFigures& f) {
  return Json{{"iteration_ms", f.iteration_ms},
              {"ideal_ms", f.ideal_ms},
              {"exposed_comm_ms", f.exposed_comm_ms},
              {"hidden_comm_fraction", f.hidden_comm_fraction},
              {"tokens_per_s", f.tokens_per_s},
              {"tflops_per_gpu", f.tflops_per_gpu},
              {"mfu", f.mfu},
              {"memory_gib_per_gpu", f.memory_gib_per_gpu}};
}

Json ModelJson(const ModelSpec& m) {
  Json model = ModelKeysJson(m);
  const ParameterCounts counts = CountParameters(m);
  model["head_dim"] = m.head_width();
  model["positions"] = m.learned_positions() ? "learned" : "rotary";
  model["parameters"] = {
      {"per_layer", counts.per_layer},   {"layers", counts.layers},
      {"embedding", counts.embedding},   {"position_embedding", counts.position_embedding},
      {"final_norm", counts.final_norm}, {"lm_head", counts.lm_head},
      {"total", counts.total},           {"matmul", counts.matmul}};
  model["training_flops_per_token"] = TrainingFlopsPerToken(m, m.seq_len);
  return model;
}

Json GpuJson(const GpuSpec& gpu) {
  Json peaks;
  for (const auto& [name, dtype] : DtypeNames())
    peaks[std::string(name)] = gpu.peak(dtype) > 0 ? Json(gpu.peak(dtype)) : Json(nullptr);
  return Json{{"name", gpu.name},
              {"sms", gpu.sms},
              {"memory_GB", gpu.memory_GB},
              {"hbm_GBps", gpu.hbm_GBps},
              {"peak_tflops", peaks},
              {"max_gemm_efficiency", gpu.max_gemm_efficiency},
              {"fp8_gemm_efficiency", gpu.fp8_gemm_efficiency},
              {"gemm_tile_overhead_k", gpu.gemm_tile_overhead_k},
              {"gemm_fixed_us", gpu.gemm_fixed_us},
              {"gemm_stream_k_min_k", gpu.gemm_stream_k_min_k},
              {"gemm_half_tile_rate", gpu.gemm_half_tile_rate},
              {"gemm_split_k_fixed_us", gpu.gemm_split_k_fixed_us},
              {"gemm_cta_tiles", gpu.gemm_cta_tiles},
              {"gemm_persistent_cta_waves", gpu.gemm_persistent_cta_waves},
              {"hbm_efficiency", gpu.hbm_efficiency},
              {"kernel_launch_us", gpu.kernel_launch_us},
              {"graph_launch_us", gpu.graph_launch_us},
              {"gemm_tile_m", gpu.gemm_tile_m},
              {"gemm_tile_n", gpu.gemm_tile_n},
              {"attention_efficiency", gpu.attention_efficiency},
              {"attention_backward_efficiency", gpu.attention_backward_efficiency},
              {"attention_overhead_keys", gpu.attention_overhead_keys},
              {"attention_backward_overhead_keys", gpu.attention_backward_overhead_keys},
              {"flash2_efficiency", gpu.flash2_efficiency},
              {"flash2_backward_efficiency", gpu.flash2_backward_efficiency},
              {"flash2_overhead_keys", gpu.flash2_overhead_keys},
              {"flash2_backward_overhead_keys", gpu.flash2_backward_overhead_keys},
              {"power_duty_knee", gpu.power_duty_knee},
              {"power_duty_slope", gpu.power_duty_slope},
              {"caveat", gpu.caveat}};
}

Json NodeJson(const NodeSpec& node) {
  return Json{
      {"name", node.name},
      {"gpu", GpuJson(node.gpu)},
      {"gpus_per_node", node.gpus_per_node},
      {"gpus_per_host", node.gpus_per_host > 0 ? node.gpus_per_host : node.gpus_per_node},
      {"nvlink", LinkJson(node.nvlink)},
      {"nvls", node.nvls},
      {"nvls_busbw_GBps", node.nvls_busbw_GBps},
      {"nvls_latency_us", node.nvls_latency_us},
      {"ib_sharp", node.ib_sharp},
      {"ib_sharp_latency_us", node.ib_sharp_latency_us},
      {"nics", node.nics},
      {"network", LinkJson(node.network)},
      {"node_network_GBps", node.nics * node.network.GBps_per_direction},
      {"ll128",
       {{"base_latency_us", node.ll128.base_latency_us},
        {"nvlink_step_latency_us", node.ll128.nvlink_step_latency_us},
        {"network_step_latency_us", node.ll128.network_step_latency_us},
        {"bandwidth_factor", node.ll128.bandwidth_factor}}},
      {"ll",
       {{"base_latency_us", node.ll.base_latency_us},
        {"nvlink_step_latency_us", node.ll.nvlink_step_latency_us},
        {"network_step_latency_us", node.ll.network_step_latency_us},
        {"bandwidth_factor", node.ll.bandwidth_factor}}},
      {"bandwidth_ramp",
       {{"half_MiB", node.ramp.half_bytes / (1 << 20)}, {"exponent", node.ramp.exponent}}},
      {"tree",
       {{"nvlink_step_latency_us", node.tree.nvlink_step_latency_us},
        {"network_step_latency_us", node.tree.network_step_latency_us},
        {"nvls_network_step_latency_us", node.tree.nvls_network_step_latency_us},
        {"ll128_nvlink_step_latency_us", node.tree.ll128_nvlink_step_latency_us},
        {"ll128_network_step_latency_us", node.tree.ll128_network_step_latency_us},
        {"bandwidth_factor", node.tree.bandwidth_factor},
        {"nvls_channels", node.tree.nvls_channels},
        {"nvls_chunk_KiB", node.tree.nvls_chunk_KiB},
        {"nvls_deep_chunk_KiB", node.tree.nvls_deep_chunk_KiB}}},
      {"contention", {{"comm_ctas", node.comm_ctas}, {"comm_hbm_factor", node.comm_hbm_factor}}}};
}

Json ClusterJson(const ClusterSpec& cluster) {
  return Json{{"name", cluster.name},
              {"nodes", cluster.nodes},
              {"gpus_per_node", cluster.gpus_per_node},
              {"total_gpus", cluster.total_gpus()},
              {"node", NodeJson(cluster.node)}};
}

}  // namespace domino::cli
