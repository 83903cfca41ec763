#include "tools/command.h"

#include <array>
#include <chrono>
#include <cstdio>
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

std::span<const Command> Commands() {
  static const std::array kCommands = {
      Command{"plan", "Search tp/dp, sequence parallelism and Domino row/column splits for the "
              "fastest plan", SetupPlan},
      Command{"models", "List the model catalog, or show one model (name or YAML file)", SetupModels},
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
  };
  return kCommands;
}

void Fail(std::string_view command, const std::string& message, int exit_code) {
  // One write, so that a launcher forwarding stderr (mpirun) cannot split the line.
  const std::string line = "domino " + std::string(command) + ": " + message + "\n";
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
