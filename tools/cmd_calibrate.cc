// `domino calibrate`: measure a plan's compute ops and collectives into a hardware profile that
// `domino simulate --hardware-profile` reads.
#include <unistd.h>

#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "exec/calibrate.h"
#include "exec/communicator.h"
#include "exec/cuda_device.h"
#include "exec/launch_env.h"
#include "exec/mpi_communicator.h"
#include "models/base/file_io.h"
#include "planner/profile.h"
#include "tools/command.h"
#include "tools/plan_flags.h"

namespace domino::cli {
namespace {

struct CalibrateFlags {
  PlanFlags plan;
  std::string positional_plan;
  std::string backend = "cpu";
  std::string out_path;
  int repeats = 7;
  bool force = false;
};

[[noreturn]] void FailOnRank(int rank, const std::string& message, int exit_code = 1) {
  if (rank == 0) Fail("calibrate", message, exit_code);
  throw CLI::RuntimeError(exit_code);
}

void Run(CalibrateFlags& flags) {
  Result<exec::LaunchEnv> env = exec::ReadLaunchEnv();
  if (!env.ok()) Fail("calibrate", env.message());
  const int rank = env->rank;
  if (!flags.positional_plan.empty()) flags.plan.plan_path = flags.positional_plan;
  if (flags.out_path.empty()) FailOnRank(rank, "--out profile.yaml is required");
  if (flags.backend == "cuda")
    FailOnRank(rank, "the CUDA backend is not available in this version of domino yet; use "
                     "--backend cpu", 2);
  if (flags.plan.plan_path.empty() && flags.plan.model.empty())
    FailOnRank(rank, "no plan: give PLAN.yaml or --model and --cluster with plan flags (the "
                     "profile measures that plan's op shapes)");
  Result<Plan> plan = BuildPlan(flags.plan);
  if (!plan.ok()) FailOnRank(rank, plan.message());
  if (env->size != 1 && env->size != plan->tp)
    FailOnRank(rank, fmt::format("launched {} ranks ({}); calibrate runs on 1 rank (compute only) "
                                 "or on the plan's tp = {} ranks (compute and collectives)",
                                 env->size, env->source, plan->tp));
  if (rank == 0 && !flags.force && access(flags.out_path.c_str(), F_OK) == 0)
    Fail("calibrate", fmt::format("{}: exists; pass --force to overwrite it", flags.out_path));
  Result<std::unique_ptr<exec::Communicator>> comm = exec::MakeLaunchCommunicator(*env);
  if (!comm.ok()) FailOnRank(rank, comm.message());
  exec::CalibrateOptions options;
  options.repeats = flags.repeats;
  Result<HardwareProfile> profile = exec::CalibrateCpu(*plan, **comm, options);
  if (!profile.ok()) FailOnRank(rank, profile.message());
  if (rank != 0) return;
  CheckOk("calibrate", WriteFileAtomically(flags.out_path, ProfileToYaml(*profile), true));
  std::cout << fmt::format("wrote {}: {} compute ops and {} collectives measured on the CPU "
                           "backend ({} rank(s), median of {} runs each)\n",
                           flags.out_path, profile->compute_us.size(), profile->collectives.size(),
                           env->size, flags.repeats);
}

}  // namespace

void SetupCalibrate(CLI::App* sub) {
  auto flags = std::make_shared<CalibrateFlags>();
  sub->add_option("plan_file", flags->positional_plan, "plan YAML whose op shapes to measure");
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--backend", flags->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--out", flags->out_path, "profile YAML to write");
  sub->add_option("--repeats", flags->repeats, "timed runs per op (the median is kept)")
      ->check(CLI::Range(1, 1000));
  sub->add_flag("--force", flags->force, "overwrite an existing --out file");
  sub->parse_complete_callback([flags] {
    if (flags->backend != "cuda") return;
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) Fail("calibrate", devices.message());
  });
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
