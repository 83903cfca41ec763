// `domino calibrate`: measure a plan's compute ops and collectives into a hardware profile that
// `domino simulate --hardware-profile` reads.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <iostream>
#include <memory>
#include <vector>

#include "exec/calibrate.h"
#include "exec/communicator.h"
#include "exec/cuda_device.h"
#include "exec/launch_env.h"
#include "exec/mpi_communicator.h"
#include "models/base/file_io.h"
#include "planner/lower.h"
#include "planner/profile.h"
#include "tools/calibration_tables.h"
#include "tools/command.h"
#include "tools/emulation.h"
#include "tools/peer_watch.h"
#include "tools/plan_flags.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct CalibrateFlags {
  PlanFlags plan;
  std::string positional_plan;
  std::string backend = "cpu";
  std::string dtype;  // cuda: default the plan's precision (bf16 for fp8)
  int device = -1;
  std::string out_path;
  int repeats = 7;
  double soak_seconds = 0;
  std::string gemm_shapes;  // "table" or MxNxK,...
  bool fp8_gemms = false;
  double timeout_s = 300;
  bool force = false;
};

// What a GPU profile says about the device: throughput, bandwidth, collectives as nccl-tests
// reports them (bus bandwidth), and how much a collective slows the compute beside it.
void PrintDevice(const Plan& plan, const Schedule& schedule, const HardwareProfile& p,
                 std::ostream& out) {
  if (p.gemm_tflops > 0)
    out << fmt::format("dense GEMM {:.1f} TFLOP/s, HBM {:.0f} GB/s (device-to-device copy)\n",
                       p.gemm_tflops, p.hbm_GBps);
  if (p.kernel_launch_us > 0) {
    const GpuSpec& gpu = plan.cluster.node.gpu;
    out << fmt::format(
        "kernel launch {:.2f} us one by one, {:.2f} us from a CUDA graph (the model's {:g} and "
        "{:g} for {})\n",
        p.kernel_launch_us, p.graph_launch_us, gpu.kernel_launch_us, gpu.graph_launch_us, gpu.name);
  }
  if (!p.collectives.empty()) {
    Table table({"collective", "ranks", "bytes", "us", "algbw GB/s", "busbw GB/s"});
    for (const auto& c : p.collectives) {
      // nccl-tests' sizes and bus bandwidth: the bytes are nccl-tests' size (the whole buffer of
      // a reduce-scatter or all-gather); all-reduce moves 2 (n - 1) / n of it per rank,
      // reduce-scatter and all-gather (n - 1) / n.
      const double n = c.ranks;
      const double factor = c.kind == "allreduce" ? 2 * (n - 1) / n : (n - 1) / n;
      const double algbw = c.us > 0 ? c.bytes / (c.us * 1e3) : 0;
      table.AddRow({c.kind, std::to_string(c.ranks), fmt::format("{:.0f}", c.bytes),
                    fmt::format("{:.1f}", c.us), fmt::format("{:.1f}", algbw),
                    fmt::format("{:.1f}", algbw * factor)});
    }
    table.Print(out);
  }
  if (!p.contention_samples.empty()) {
    // Beside the measured slowdown, the one the simulator's contention rule predicts for the
    // same op and collective: the check of that rule on this device.
    Table table({"op beside an emulated collective", "CTAs", "HBM GB/s", "alone us", "beside us",
                 "slowdown", "predicted slowdown"});
    for (const auto& c : p.contention_samples) {
      std::string predicted = "-";
      for (const Op& op : schedule.ops()) {
        if (op.kind == OpKind::kCollective || OpSignature(op) != c.op) continue;
        const double alone = PredictedBesideUs(plan, p, op, 0, 0);
        if (alone > 0)
          predicted =
              fmt::format("{:.3f}x", PredictedBesideUs(plan, p, op, c.ctas, c.hbm_GBps) / alone);
        break;
      }
      table.AddRow({c.op, std::to_string(c.ctas), fmt::format("{:.0f}", c.hbm_GBps),
                    fmt::format("{:.1f}", c.alone_us), fmt::format("{:.1f}", c.beside_us),
                    fmt::format("{:.3f}x", c.alone_us > 0 ? c.beside_us / c.alone_us : 0),
                    predicted});
    }
    table.Print(out);
  }
}

void Run(CalibrateFlags& flags) {
  Result<exec::LaunchEnv> env = exec::ReadLaunchEnv();
  if (!env.ok()) Fail("calibrate", env.message());
  const int rank = env->rank;
  if (!flags.positional_plan.empty()) {
    if (!flags.plan.plan_path.empty() && flags.plan.plan_path != flags.positional_plan)
      FailOnRank("calibrate", rank, "give the plan once: as PLAN or as --plan, not both");
    flags.plan.plan_path = flags.positional_plan;
  }
  if (flags.backend == "cpu" && !flags.dtype.empty() && flags.dtype != "fp32")
    FailOnRank("calibrate", rank,
               fmt::format("--dtype {}: the CPU backend computes in fp32", flags.dtype));
  if (flags.plan.plan_path.empty() && flags.plan.model.empty())
    FailOnRank("calibrate", rank,
               "no plan: give PLAN.yaml or --model and --cluster with plan flags (the "
               "profile measures that plan's op shapes)");
  Result<Plan> plan = BuildPlan(flags.plan);
  if (!plan.ok()) FailOnRank("calibrate", rank, plan.message());
  if (env->size != 1 && env->size != plan->tp)
    FailOnRank("calibrate", rank,
               fmt::format("launched {} ranks ({}); calibrate runs on 1 rank (compute only) "
                           "or on the plan's tp = {} ranks (compute and collectives)",
                           env->size, env->source, plan->tp));
  // The output checked before the measurements, so that a bad path costs none.
  if (rank == 0) {
    CheckOk("calibrate", CheckOutputPath(flags.out_path, flags.force));
    // A profile replaces none of the files that describe what it measures.
    CheckUsage("calibrate", CheckNotAnInput(flags.out_path, PlanInputFiles(flags.plan, *plan)));
  }
  Result<std::unique_ptr<exec::Communicator>> comm = exec::MakeLaunchCommunicator(*env);
  if (!comm.ok()) FailOnRank("calibrate", rank, comm.message());
  Result<Schedule> schedule = Lower(*plan);
  if (!schedule.ok()) FailOnRank("calibrate", rank, schedule.message());
  exec::CalibrateOptions options;
  options.repeats = flags.repeats;
  const bool cuda = flags.backend == "cuda";
  options.soak_seconds = flags.soak_seconds;
  if (!flags.gemm_shapes.empty()) options.gemm_shapes = *ParseGemmShapes(flags.gemm_shapes);
  options.fp8_gemms = flags.fp8_gemms;
  // Each soak and GEMM shape as it is measured: a run cut short still shows them.
  if (rank == 0) options.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  if (cuda) {
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) FailOnRank("calibrate", rank, devices.message());
    options.cuda.device =
        flags.device >= 0 ? flags.device : env->local_rank % static_cast<int>(devices->size());
    if (options.cuda.device >= static_cast<int>(devices->size()))
      FailOnRank("calibrate", rank,
                 fmt::format("--device {}: {} CUDA device(s) visible", options.cuda.device,
                             devices->size()));
    options.cuda.dtype = flags.dtype == "fp32"                                    ? Dtype::kFp32
                         : flags.dtype == "fp16"                                  ? Dtype::kFp16
                         : flags.dtype.empty() && plan->precision == Dtype::kFp16 ? Dtype::kFp16
                                                                                  : Dtype::kBf16;
    options.beside = LargestCollective(*plan, *schedule);
  }
  options.cuda.timeout_s = flags.timeout_s;
  // A peer that dies or hangs leaves this rank blocked in a collective: the watch says so and
  // ends every rank instead of waiting forever (a soak is one measurement of --soak seconds).
  PeerWatch watch("calibrate", "measurements", rank, flags.timeout_s, comm->get(),
                  flags.soak_seconds);
  options.measured = [&watch](size_t done) { watch.Step(done); };
  // Every rank measures the same plan with the same options (as execute checks).
  const std::string settings =
      PlanToYaml(*plan) +
      fmt::format(
          "calibrate: {{backend: {}, dtype: {}, repeats: {}, soak: {}, gemm_shapes: '{}', "
          "fp8_gemms: {}}}\n",
          flags.backend, flags.dtype, flags.repeats, flags.soak_seconds, flags.gemm_shapes,
          flags.fp8_gemms);
  if (Status same = exec::CheckSameOnEveryRank(**comm, settings); !same.ok())
    FailOnRank("calibrate", rank, same.message());
  if (rank == 0 && isatty(STDERR_FILENO))
    std::cerr << fmt::format(
        "calibrating on the {} backend ({} rank(s), {} timed runs per op)...\n", flags.backend,
        env->size, flags.repeats);
  Result<HardwareProfile> profile = cuda ? exec::CalibrateCuda(*plan, **comm, options)
                                         : exec::CalibrateCpu(*plan, **comm, options);
  if (!profile.ok()) watch.FailRun(profile.message());
  if (rank != 0) return;
  CheckOk("calibrate", WriteFileAtomically(flags.out_path, ProfileToYaml(*profile), true));
  // With the profile on stdout ("-"), what it says goes to stderr.
  std::ostream& out = flags.out_path == "-" ? std::cerr : std::cout;
  out << fmt::format(
      "wrote {}: {} compute ops and {} collectives measured on the {} "
      "backend ({}, {} rank(s), median of {} runs each)\n",
      flags.out_path, profile->compute_us.size(), profile->collectives.size(),
      cuda ? "CUDA" : "CPU", profile->device, env->size, flags.repeats);
  PrintDevice(*plan, *schedule, *profile, out);
  PrintSoak(*profile, options.cuda.dtype, out);
  if (!profile->gemm_fp8_error.empty())
    out << "fp8 GEMMs not measured: " << profile->gemm_fp8_error << "\n";
  PrintGemmSamples(*plan, options.cuda.dtype, *profile, out);
}

}  // namespace

void SetupCalibrate(CLI::App* sub) {
  auto flags = std::make_shared<CalibrateFlags>();
  sub->add_option("plan_file", flags->positional_plan, "plan YAML whose op shapes to measure")
      ->check(NonEmpty());
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--backend", flags->backend,
                  "cpu | cuda (CUDA events; collectives on NCCL under mpirun with the plan's tp "
                  "ranks)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--dtype", flags->dtype,
                  "element type on the GPU: fp32 | bf16 | fp16 (default: the plan's precision)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_option("--device", flags->device,
                  "CUDA device (default: the launcher's local rank, modulo the visible devices)")
      ->check(DecimalInt(0, kMaxDevice));
  sub->add_option("--out", flags->out_path,
                  "profile YAML to write (required); - writes it to stdout and the tables to "
                  "stderr")
      ->required()
      ->check(NonEmpty());
  sub->add_option("--repeats", flags->repeats, "timed runs per op (the median is kept)")
      ->check(DecimalInt(1, 1000));
  sub->add_option("--soak", flags->soak_seconds,
                  "cuda: seconds of back-to-back 8192^3 GEMMs before anything is timed, so that "
                  "the ops are timed at the clocks the GPU's power limit sustains; prints and "
                  "keeps each second's TFLOP/s (default 0: none)")
      ->check(FiniteIn(0, 3600));
  sub->add_option("--gemm-shapes", flags->gemm_shapes,
                  "cuda: GEMM shapes to time as GEMM benchmarks do (mamf-finder: warm-up runs, "
                  "the mean of up to 100), beside the GEMM model: 'table' (the shapes of "
                  "`domino validate`'s GEMM rows) or MxNxK[,MxNxK...]");
  AddBoolFlag(sub, "--fp8-gemms", &flags->fp8_gemms,
              "cuda: the soak and the GEMM shapes again in fp8 (E4M3 operands, bf16 output, "
              "cuBLASLt; shapes whose m or k is not a multiple of 16 stay 16-bit only), to see "
              "how the two types hold up under the power limit");
  sub->add_option("--timeout", flags->timeout_s,
                  "seconds without progress (a dead or stuck peer) before every rank is aborted, "
                  "beside --soak's (default: 300)")
      ->check(PositiveFinite());
  AddBoolFlag(sub, "--force", &flags->force, "overwrite an existing --out file");
  sub->parse_complete_callback([flags] {
    // The GPU-only flags first, so that their mistakes show on any machine.
    if (flags->backend != "cuda" &&
        (flags->soak_seconds > 0 || !flags->gemm_shapes.empty() || flags->fp8_gemms))
      Fail("calibrate",
           "--soak, --gemm-shapes and --fp8-gemms measure a GPU: they need --backend cuda");
    if (flags->fp8_gemms && !(flags->soak_seconds > 0) && flags->gemm_shapes.empty())
      Fail("calibrate",
           "--fp8-gemms repeats the soak and the GEMM shapes in fp8: give --soak or "
           "--gemm-shapes");
    if (flags->soak_seconds > 0 && flags->soak_seconds < 1)
      Fail("calibrate", fmt::format("--soak {}: at least 1 second (it reports the TFLOP/s of "
                                    "each second), or 0 for none",
                                    flags->soak_seconds));
    if (!flags->gemm_shapes.empty()) {
      Result<std::vector<std::array<int64_t, 3>>> shapes = ParseGemmShapes(flags->gemm_shapes);
      if (!shapes.ok()) Fail("calibrate", shapes.message());
    }
    if (flags->backend != "cuda") return;
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) Fail("calibrate", devices.message());
  });
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
