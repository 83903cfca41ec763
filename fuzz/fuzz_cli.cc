// libFuzzer target: the whole command line, every subcommand, through the same code as `domino`
// (tools/app.h). The first byte picks the subcommand (or none, for the top level), the rest are
// NUL-separated arguments. Each command line runs in a scratch folder that holds small, valid
// input files (m.yaml, g.yaml, n.yaml, c.yaml, p.yaml, r.yaml, h.yaml, s.yaml): arguments may
// name them, or write outputs there. An argument with a '/' is refused, so nothing outside that
// folder is read or written. Work is bounded so that every run takes well under a second:
// `plan` and `sweep` run with `--timeout 0.02` (parsed only when the input gives its own
// --timeout); `simulate` runs when no number in the arguments exceeds 64 (larger values still
// meet every flag's bound while parsing); `execute`, `calibrate` and `validate`, which run
// kernels or predict a whole table, are parsed only.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/app.h"
#include "tools/command.h"

namespace {

// The scratch folder's files, rewritten before every run (a run may overwrite one with --force).
const std::pair<const char*, const char*> kFiles[] = {
    {"m.yaml",
     "name: m\nlayers: 2\nhidden: 256\nheads: 8\nffn: 1024\nvocab: 1000\nseq_len: 128\n"
     "activation: gelu\nnorm: layernorm\n"},
    {"g.yaml",
     "name: g\nsms: 132\nmemory_GB: 80\nhbm_GBps: 3350\n"
     "peak_tflops: {fp32: 67, tf32: 494, bf16: 989, fp16: 989, fp8: 1979}\n"},
    {"n.yaml",
     "name: n\ngpu: g.yaml\ngpus_per_node: 4\nnvlink: {GBps_per_direction: 450, efficiency: 0.81}\n"
     "nvls: false\nnics: 4\nnetwork: {GBps_per_direction: 50, efficiency: 0.93}\n"},
    {"c.yaml", "node: n.yaml\nnodes: 2\n"},
    {"p.yaml",
     "model: m.yaml\ncluster: dgx-h100:1:4\ntraining: {seq_len: 128, micro_batch: 4, "
     "global_batch: 8}\nparallel: {tp: 2, pp: 1, dp: 2}\n"
     "overlap: {row_split: 2, col_split: 1, scope: inter-layer}\n"},
    {"r.yaml",
     "model: m.yaml\ncluster: dgx-h100:1:4\nparallel: {tp: 4}\npredicted: {iteration_ms: 10}\n"
     "timeline:\n  ops:\n    - [qkv, gemm, 0, 10]\n"},
    {"h.yaml", "device: cpu\nbackend: cpu\ncompute:\n  - [qkv, 1]\n"},
    {"s.yaml", "name: s\ngrid:\n  nodes: [1, 2]\nfixed:\n  model: m.yaml\n"},
};

std::filesystem::path scratch;

void RemoveScratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

void ResetScratch() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(scratch, ec))
    std::filesystem::remove_all(entry.path(), ec);
  for (const auto& [name, text] : kFiles) std::ofstream(scratch / name) << text;
}

// The largest decimal number written in `arg` (digits in a row), saturating.
uint64_t LargestNumber(std::string_view arg) {
  uint64_t largest = 0, current = 0;
  for (char c : arg) {
    if (c >= '0' && c <= '9') {
      current = current > 1'000'000'000 ? current : current * 10 + (c - '0');
      largest = std::max(largest, current);
    } else {
      current = 0;
    }
  }
  return largest;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char pattern[] = "/tmp/domino-fuzz-cli.XXXXXX";
  if (mkdtemp(pattern) == nullptr) std::abort();
  scratch = pattern;
  std::atexit(RemoveScratch);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return -1;
  const auto commands = domino::cli::Commands();
  std::vector<std::string> args = {"domino"};
  const size_t pick = data[0] % (commands.size() + 1);
  std::string_view command;
  if (pick < commands.size()) {
    command = commands[pick].name;
    args.emplace_back(command);
  }
  std::string current;
  for (size_t i = 1; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  // The subcommand may also come from the arguments (the top level given "plan"): the first
  // argument that names one is the one CLI11 runs.
  if (command.empty()) {
    for (size_t i = 1; i < args.size() && command.empty(); ++i)
      for (const auto& c : commands)
        if (args[i] == c.name) command = c.name;
  }
  uint64_t largest = 0;
  bool has_timeout = false;
  for (const std::string& a : args) {
    if (a.find('/') != std::string::npos) return -1;  // stays inside the scratch folder
    largest = std::max(largest, LargestNumber(a));
    has_timeout = has_timeout || a.rfind("--timeout", 0) == 0;
  }
  const bool bounded = command == "plan" || command == "sweep";
  if (bounded && !has_timeout) {
    args.emplace_back("--timeout");
    args.emplace_back("0.02");
  }
  auto runs = [&](std::string_view name) {
    if (name == "models" || name == "hardware" || name == "compare" || name == "export")
      return true;
    if (name == "plan" || name == "sweep") return !has_timeout;
    if (name == "simulate") return largest <= 64;
    return false;  // execute, calibrate, validate: parsed only
  };
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());

  ResetScratch();
  const int cwd = open(".", O_RDONLY | O_DIRECTORY);
  if (cwd < 0 || chdir(scratch.c_str()) != 0) std::abort();
  const int code = domino::cli::RunDomino(static_cast<int>(argv.size()), argv.data(), runs);
  if (fchdir(cwd) != 0) std::abort();
  close(cwd);
  std::fflush(stdout);
  // Only the documented exit codes (tools/command.h); no signal is sent here.
  if (code != 0 && code != domino::cli::kExitBadInput && code != domino::cli::kExitUsage &&
      code != domino::cli::kExitNoPlanFits)
    std::abort();
  return 0;
}
