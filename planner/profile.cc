#include "planner/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "models/base/file_io.h"
#include "models/base/yaml_reader.h"

namespace domino {

std::string OpSignature(const Op& op) {
  return fmt::format("{}|m={}|n={}|k={}|seqs={}|seq={}|heads={}|kv={}|dim={}|bytes={:.0f}",
                     OpFuncName(op.func), op.m, op.n, op.k, op.sequences, op.seq_len, op.heads,
                     op.kv_heads, op.head_dim, op.bytes);
}

std::string_view CollectiveKindName(CollectiveOp kind) {
  switch (kind) {
    case CollectiveOp::kAllReduce:
      return "allreduce";
    case CollectiveOp::kReduceScatter:
      return "reducescatter";
    case CollectiveOp::kAllGather:
      return "allgather";
    case CollectiveOp::kAllToAll:
      return "alltoall";
    case CollectiveOp::kNone:
      break;
  }
  return "none";
}

double HardwareProfile::Lookup(const Op& op, int ranks) const {
  if (op.kind != OpKind::kCollective) {
    auto it = compute_us.find(OpSignature(op));
    return it == compute_us.end() ? -1.0 : it->second;
  }
  const std::string_view kind = CollectiveKindName(op.collective);
  std::vector<const CollectiveSample*> samples;
  for (const CollectiveSample& s : collectives)
    if (s.kind == kind && s.ranks == ranks) samples.push_back(&s);
  if (samples.empty()) return -1.0;
  std::sort(
      samples.begin(), samples.end(),
      [](const CollectiveSample* a, const CollectiveSample* b) { return a->bytes < b->bytes; });
  const double bytes = op.bytes;
  if (bytes <= samples.front()->bytes) return samples.front()->us;
  for (size_t i = 1; i < samples.size(); ++i) {
    if (bytes <= samples[i]->bytes) {
      const CollectiveSample& a = *samples[i - 1];
      const CollectiveSample& b = *samples[i];
      return a.us + (b.us - a.us) * (bytes - a.bytes) / (b.bytes - a.bytes);
    }
  }
  const CollectiveSample& last = *samples.back();
  return last.us * bytes / last.bytes;
}

namespace {

// Why `signature` is not one OpSignature writes ("" when it is): a known function, then m, n, k,
// seqs, seq, heads, kv, dim and bytes as integers >= 0, in that order.
std::string SignatureRule(std::string_view signature) {
  static constexpr std::array<std::string_view, 9> kFields = {"m",     "n",  "k",   "seqs", "seq",
                                                              "heads", "kv", "dim", "bytes"};
  const std::string rule =
      "an op signature is FUNCTION|m=M|n=N|k=K|seqs=S|seq=L|heads=H|kv=KV|dim=D|bytes=B, as "
      "`domino calibrate` writes it";
  size_t bar = signature.find('|');
  const std::string_view func = signature.substr(0, bar);
  bool known = false;
  for (int f = 0; f < static_cast<int>(OpFunc::kCount); ++f)
    known = known || OpFuncName(static_cast<OpFunc>(f)) == func;
  if (!known) return fmt::format("unknown op function '{}': {}", func, rule);
  for (const std::string_view field : kFields) {
    if (bar == std::string_view::npos) return rule;
    const size_t next = signature.find('|', bar + 1);
    const std::string_view entry = signature.substr(bar + 1, next - bar - 1);
    const std::string_view digits = entry.substr(std::min(entry.size(), field.size() + 1));
    if (!entry.starts_with(field) || entry.size() <= field.size() || entry[field.size()] != '=' ||
        digits.empty() || digits.size() > 20 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return rule;
    bar = next;
  }
  return bar == std::string_view::npos ? "" : rule;
}

}  // namespace

Result<HardwareProfile> ParseProfile(std::string_view text, std::string_view file) {
  Result<YAML::Node> root = ParseYaml(text, file);
  if (!root.ok()) return root.error();
  YamlMap map(*root, std::string(file));
  HardwareProfile profile;
  map.String("device", &profile.device, Need::kRequired);
  // The backend that measured it, kept as its name ("cpu" or "cuda").
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kBackends = {
      {{"cpu", "cpu"}, {"cuda", "cuda"}}};
  std::string_view backend;
  map.Enum("backend", &backend, Need::kRequired, kBackends);
  profile.backend = std::string(backend);
  map.Bool("contention", &profile.contention, Need::kOptional);
  map.Real("gemm_tflops", &profile.gemm_tflops, Need::kOptional, RealRange{0, 1e6, false});
  map.Real("hbm_GBps", &profile.hbm_GBps, Need::kOptional, RealRange{0, 1e9, false});
  map.Real("kernel_launch_us", &profile.kernel_launch_us, Need::kOptional,
           RealRange{0, 1e6, false});
  map.Real("graph_launch_us", &profile.graph_launch_us, Need::kOptional, RealRange{0, 1e6, false});
  YAML::Node compute = map.Raw("compute");
  YAML::Node collectives = map.Raw("collectives");
  YAML::Node samples = map.Raw("contention_samples");
  YAML::Node soak = map.Raw("gemm_soak_tflops");
  YAML::Node soak_fp8 = map.Raw("gemm_soak_fp8_tflops");
  YAML::Node gemms = map.Raw("gemm_samples");
  map.String("gemm_fp8_error", &profile.gemm_fp8_error, Need::kOptional);
  DOMINO_RETURN_IF_ERROR(map.Finish());
  auto fail = [&](const YAML::Node& n, std::string_view key, std::string_view rule) {
    return Error(
        fmt::format("{}:{}:{}: {}: {}", file, n.Mark().line + 1, n.Mark().column + 1, key, rule));
  };
  // Times, sizes and rates up to bounds no machine reaches (1e11 us is a day), as a plan's are.
  auto number = [&](const YAML::Node& n, std::string_view key, double max, double* out) -> Status {
    try {
      *out = n.as<double>();
    } catch (const YAML::Exception&) {
      return fail(n, key, "expected a number");
    }
    if (!(*out >= 0) || !std::isfinite(*out) || *out > max)
      return fail(n, key, fmt::format("must be a number from 0 to {:g}", max));
    return Status::Ok();
  };
  auto time = [&](const YAML::Node& n, std::string_view key, double* out) {
    return number(n, key, 1e11, out);
  };
  if (profile.graph_launch_us > 0 && profile.graph_launch_us > profile.kernel_launch_us &&
      profile.kernel_launch_us > 0)
    return fail((*root)["graph_launch_us"], "graph_launch_us",
                fmt::format("must be at most kernel_launch_us ({:g}), got {:g}",
                            profile.kernel_launch_us, profile.graph_launch_us));
  if (compute) {
    if (!compute.IsSequence()) return fail(compute, "compute", "expected a list of [op, us]");
    for (const YAML::Node& e : compute) {
      if (!e.IsSequence() || e.size() != 2 || !e[0].IsScalar())
        return fail(e, "compute", "each entry is [op signature, microseconds]");
      if (std::string rule = SignatureRule(e[0].Scalar()); !rule.empty())
        return fail(e[0], "compute", rule);
      double us = 0;
      DOMINO_RETURN_IF_ERROR(time(e[1], "compute", &us));
      if (!profile.compute_us.emplace(e[0].Scalar(), us).second)
        return fail(e[0], "compute", fmt::format("'{}' is given twice", e[0].Scalar()));
    }
  }
  if (collectives) {
    if (!collectives.IsSequence())
      return fail(collectives, "collectives", "expected a list of [kind, ranks, bytes, us]");
    for (const YAML::Node& e : collectives) {
      if (!e.IsSequence() || e.size() != 4 || !e[0].IsScalar())
        return fail(e, "collectives", "each entry is [kind, ranks, bytes, microseconds]");
      HardwareProfile::CollectiveSample s;
      s.kind = e[0].Scalar();
      if (s.kind != "allreduce" && s.kind != "reducescatter" && s.kind != "allgather")
        return fail(e[0], "collectives", "kind must be allreduce, reducescatter or allgather");
      double ranks = 0;
      DOMINO_RETURN_IF_ERROR(time(e[1], "collectives", &ranks));
      if (ranks < 1 || ranks != std::floor(ranks) || ranks > 1e6)
        return fail(e[1], "collectives", "ranks must be a positive integer");
      s.ranks = static_cast<int>(ranks);
      DOMINO_RETURN_IF_ERROR(number(e[2], "collectives", 1e15, &s.bytes));
      DOMINO_RETURN_IF_ERROR(time(e[3], "collectives", &s.us));
      for (const HardwareProfile::CollectiveSample& other : profile.collectives)
        if (other.kind == s.kind && other.ranks == s.ranks && other.bytes == s.bytes)
          return fail(e, "collectives",
                      fmt::format("{} over {} ranks of {:g} bytes is given twice", s.kind, s.ranks,
                                  s.bytes));
      profile.collectives.push_back(std::move(s));
    }
  }
  if (samples) {
    const char* shape = "each entry is [op signature, ctas, hbm GB/s, alone us, beside us]";
    if (!samples.IsSequence()) return fail(samples, "contention_samples", shape);
    for (const YAML::Node& e : samples) {
      if (!e.IsSequence() || e.size() != 5 || !e[0].IsScalar())
        return fail(e, "contention_samples", shape);
      HardwareProfile::ContentionSample c;
      c.op = e[0].Scalar();
      if (std::string rule = SignatureRule(c.op); !rule.empty())
        return fail(e[0], "contention_samples", rule);
      double ctas = 0;
      DOMINO_RETURN_IF_ERROR(time(e[1], "contention_samples", &ctas));
      if (ctas != std::floor(ctas) || ctas > 1e6)
        return fail(e[1], "contention_samples", "ctas must be an integer >= 0");
      c.ctas = static_cast<int>(ctas);
      DOMINO_RETURN_IF_ERROR(number(e[2], "contention_samples", 1e9, &c.hbm_GBps));
      DOMINO_RETURN_IF_ERROR(time(e[3], "contention_samples", &c.alone_us));
      DOMINO_RETURN_IF_ERROR(time(e[4], "contention_samples", &c.beside_us));
      profile.contention_samples.push_back(std::move(c));
    }
  }
  for (const auto& [node, key, into] :
       {std::tuple{soak, "gemm_soak_tflops", &profile.gemm_soak_tflops},
        std::tuple{soak_fp8, "gemm_soak_fp8_tflops", &profile.gemm_soak_fp8_tflops}}) {
    if (!node) continue;
    if (!node.IsSequence()) return fail(node, key, "expected a list of TFLOP/s");
    for (const YAML::Node& e : node) {
      double tflops = 0;
      DOMINO_RETURN_IF_ERROR(number(e, key, 1e6, &tflops));
      into->push_back(tflops);
    }
  }
  if (gemms) {
    const char* shape = "each entry is [m, n, k, TFLOP/s] or [m, n, k, TFLOP/s, fp8]";
    if (!gemms.IsSequence()) return fail(gemms, "gemm_samples", shape);
    for (const YAML::Node& e : gemms) {
      if (!e.IsSequence() || (e.size() != 4 && e.size() != 5))
        return fail(e, "gemm_samples", shape);
      if (e.size() == 5 && (!e[4].IsScalar() || e[4].Scalar() != "fp8"))
        return fail(e[4], "gemm_samples", shape);
      HardwareProfile::GemmSample g;
      int64_t* dims[3] = {&g.m, &g.n, &g.k};
      for (int i = 0; i < 3; ++i) {
        double v = 0;
        DOMINO_RETURN_IF_ERROR(time(e[i], "gemm_samples", &v));
        if (v < 1 || v != std::floor(v) || v > 2147483647.0)
          return fail(e[i], "gemm_samples", "m, n and k must be positive integers below 2^31");
        *dims[i] = static_cast<int64_t>(v);
      }
      DOMINO_RETURN_IF_ERROR(number(e[3], "gemm_samples", 1e6, &g.tflops));
      g.fp8 = e.size() == 5;
      profile.gemm_samples.push_back(g);
    }
  }
  return profile;
}

Result<HardwareProfile> LoadProfile(const std::string& path) {
  Result<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.error();
  return ParseProfile(*text, path);
}

std::string ProfileToYaml(const HardwareProfile& p) {
  std::string out = fmt::format(
      "# domino calibrate profile: measured medians, microseconds\n"
      "device: {}\nbackend: {}\ncontention: {}\n",
      YamlQuoted(p.device), YamlQuoted(p.backend), p.contention);
  if (p.gemm_tflops > 0) out += fmt::format("gemm_tflops: {:.2f}\n", p.gemm_tflops);
  if (p.hbm_GBps > 0) out += fmt::format("hbm_GBps: {:.1f}\n", p.hbm_GBps);
  if (p.kernel_launch_us > 0) out += fmt::format("kernel_launch_us: {:.3f}\n", p.kernel_launch_us);
  if (p.graph_launch_us > 0) out += fmt::format("graph_launch_us: {:.3f}\n", p.graph_launch_us);
  for (const auto& [key, soak, type] :
       {std::tuple{"gemm_soak_tflops", &p.gemm_soak_tflops, ""},
        std::tuple{"gemm_soak_fp8_tflops", &p.gemm_soak_fp8_tflops, " in fp8"}}) {
    if (soak->empty()) continue;
    out += fmt::format("{}:  # 8192^3 GEMMs{} back to back, one figure per second\n", key, type);
    for (double t : *soak) out += fmt::format("  - {:.2f}\n", t);
  }
  if (!p.gemm_fp8_error.empty())
    out += fmt::format("gemm_fp8_error: {}\n", YamlQuoted(p.gemm_fp8_error));
  if (!p.gemm_samples.empty()) out += "gemm_samples:  # [m, n, k, TFLOP/s] (+ fp8)\n";
  for (const auto& g : p.gemm_samples)
    out +=
        fmt::format("  - [{}, {}, {}, {:.2f}{}]\n", g.m, g.n, g.k, g.tflops, g.fp8 ? ", fp8" : "");
  out += p.compute_us.empty() ? "compute: []\n" : "compute:  # [op signature, us]\n";
  for (const auto& [signature, us] : p.compute_us)
    out += fmt::format("  - [{}, {:.3f}]\n", YamlQuoted(signature), us);
  out += p.collectives.empty() ? "collectives: []\n" : "collectives:  # [kind, ranks, bytes, us]\n";
  for (const auto& s : p.collectives)
    out += fmt::format("  - [{}, {}, {:.0f}, {:.3f}]\n", s.kind, s.ranks, s.bytes, s.us);
  if (!p.contention_samples.empty())
    out += "contention_samples:  # [op signature, ctas, hbm GB/s, alone us, beside us]\n";
  for (const auto& c : p.contention_samples)
    out += fmt::format("  - [{}, {}, {:.1f}, {:.3f}, {:.3f}]\n", YamlQuoted(c.op), c.ctas,
                       c.hbm_GBps, c.alone_us, c.beside_us);
  return out;
}

}  // namespace domino
