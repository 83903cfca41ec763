#include "tools/command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace domino::cli {

void SetupModels(CLI::App* sub);
void SetupHardware(CLI::App* sub);
void SetupSimulate(CLI::App* sub);
void SetupPlan(CLI::App* sub);
void SetupSweep(CLI::App* sub);
void SetupExecute(CLI::App* sub);
void SetupCalibrate(CLI::App* sub);
void SetupCompare(CLI::App* sub);
void SetupValidate(CLI::App* sub);
void SetupExport(CLI::App* sub);

std::span<const Command> Commands() {
  static const std::array kCommands = {
      Command{"plan",
              "Search tp/cp/pp/dp, micro-batch, recompute, optimizer sharding and the overlap "
              "(Domino slicing, decomposed collectives) for the fastest plan",
              SetupPlan},
      Command{"models",
              "List the model catalog, or show one model (name, YAML file or Hugging Face "
              "config.json)",
              SetupModels},
      Command{"hardware", "List GPUs and node types, or show one (name, NODE:COUNT or YAML file)",
              SetupHardware},
      Command{"simulate", "Predict a plan's iteration time and exposed TP communication",
              SetupSimulate},
      Command{"sweep", "What-if studies: vary bandwidth, nodes, sequence length, batch or model",
              SetupSweep},
      Command{"execute", "Run a plan on CPU or CUDA ranks and measure its timeline", SetupExecute},
      Command{"calibrate", "Measure this machine into a hardware profile", SetupCalibrate},
      Command{"compare", "Compare a predicted and a measured report op by op", SetupCompare},
      Command{"validate", "Predict published measurements and report the errors", SetupValidate},
      Command{"export",
              "Print a plan's launch settings for Megatron-LM, NeMo, DeepSpeed or torchtitan",
              SetupExport},
  };
  return kCommands;
}

CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) { return text.empty() ? std::string("must not be empty") : ""; },
      "");  // no word of its own in --help: the option's type already reads TEXT
}

namespace {

// The number `text` spells, finite; or why it is none.
std::string ParseFinite(const std::string& text, double* value) {
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size())
    return fmt::format("expected a number, got '{}'", text);
  if (!std::isfinite(*value)) return fmt::format("expected a finite number, got '{}'", text);
  return "";
}

}  // namespace

CLI::Validator PositiveFinite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = ParseFinite(text, &value); !error.empty()) return error;
        if (value <= 0) return fmt::format("must be greater than 0, got {}", text);
        return "";
      },
      "NUMBER > 0");
}

CLI::Option* AddJobsOption(CLI::App* sub, int* jobs, const std::string& what) {
  return sub
      ->add_option("--jobs,-j", *jobs,
                   what +
                       " (the results are the same with any count; default: the machine's "
                       "hardware threads, at most 16)")
      ->check(DecimalInt(1, 1024));
}

int JobsThreads(int jobs) {
  if (jobs > 0) return jobs;
  // Each thread holds what it lowers (a deep model's pass: tens of MB), so a many-core machine
  // takes no more than this many unless asked.
  constexpr int kMostByDefault = 16;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMostByDefault);
}

CLI::Validator DecimalInt(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
        if (text.size() == first ||
            text.find_first_not_of("0123456789", first) != std::string::npos)
          return fmt::format("expected an integer, got '{}'", text);
        if (text.size() > first + 18)
          return fmt::format("must be between {} and {}, got {}", min, max, text);
        if (text.size() > first + 1 && text[first] == '0')
          return fmt::format("expected a decimal integer without leading zeros, got '{}'", text);
        const int64_t value = std::stoll(text);
        if (value >= min && value <= max) return "";
        if (min == 1 && value <= 0) return fmt::format("must be a positive integer, got {}", value);
        return fmt::format("must be between {} and {}, got {}", min, max, value);
      },
      fmt::format("INT {}..{}", min, max));
}

CLI::Validator FiniteIn(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = ParseFinite(text, &value); !error.empty()) return error;
        if (value < min || value > max)
          return fmt::format("must be between {} and {}, got {}", min, max, text);
        return "";
      },
      fmt::format("NUMBER {}..{}", min, max));
}

bool ParseBoolFlag(const std::string& text, bool* out) {
  if (text == "true" || text == "1" || text == "yes") return *out = true, true;
  if (text == "false" || text == "0" || text == "no") return *out = false, true;
  return text.empty();
}

CLI::Validator SwitchValue() {
  return CLI::Validator(
      [](std::string& value) {
        bool unused = false;
        return value.empty() || !ParseBoolFlag(value, &unused)
                   ? fmt::format("expected true or false (or 1/0, yes/no), got '{}'", value)
                   : std::string();
      },
      "");  // no word of its own in --help: a switch takes no value there
}

CLI::Option* AddBoolFlag(CLI::App* sub, const std::string& name, bool* on,
                         const std::string& help) {
  return sub->add_flag(name, *on, help)->check(SwitchValue());
}

namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void OnStopSignal(int signal) { stop_signal = signal; }

}  // namespace

Progress::Progress(std::string_view command, std::string_view unit, int64_t total)
    : command_(command),
      unit_(unit),
      total_(total),
      tty_(isatty(fileno(stderr)) != 0),
      start_s_(NowSeconds()) {}

Progress::~Progress() {
  if (tty_ && last_draw_s_ >= 0) std::fputs("\r\033[K", stderr);
}

void Progress::Update(int64_t done) {
  if (!tty_) return;
  const double now = NowSeconds();
  if (done < total_ && last_draw_s_ >= 0 && now - last_draw_s_ < 0.2) return;
  last_draw_s_ = now;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  const double elapsed_s = now - start_s_;
  const double rate = elapsed_s > 0 ? done / elapsed_s : 0;
  std::string eta = rate > 0 ? fmt::format("ETA {:.0f} s", (total_ - done) / rate) : "ETA -";
  const std::string line = fmt::format("\rdomino {}: [{}{}] {}/{} {} {:.1f}/s {}\033[K", command_,
                                       std::string(filled, '#'), std::string(kWidth - filled, ' '),
                                       done, total_, unit_, rate, eta);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void CatchStopSignals() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
}

int StopSignal() { return stop_signal; }

void Fail(std::string_view command, const std::string& message, int exit_code) {
  // One line, whatever a quoted value holds: a newline or another control character in a name
  // read from a file is written as an escape (\n, \t, \xNN).
  std::string text;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      text += "\\n";
    } else if (c == '\t') {
      text += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      text += fmt::format("\\x{:02x}", byte);
    } else {
      text += c;
    }
  }
  // One write, so that a launcher forwarding stderr (mpirun) cannot split the line.
  const std::string line = "domino " + std::string(command) + ": " + text + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  throw CLI::RuntimeError(exit_code);
}

void FailOnRank(std::string_view command, int rank, const std::string& message, int exit_code) {
  if (rank == 0) Fail(command, message, exit_code);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  throw CLI::RuntimeError(exit_code);
}

}  // namespace domino::cli
