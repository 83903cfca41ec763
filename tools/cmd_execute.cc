// `domino execute PLAN`: run a plan's whole model or layer stack for real, measure its timeline,
// and (--check) compare it numerically with the unsharded reference.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <iostream>
#include <memory>

#include "exec/communicator.h"
#include "exec/cp_attention.h"
#include "exec/cpu_backend.h"
#include "exec/cuda_device.h"
#include "exec/execute.h"
#include "exec/launch_env.h"
#include "exec/mpi_communicator.h"
#include "exec/nccl_ctas.h"
#include "exec/step.h"
#include "models/base/file_io.h"
#include "planner/lower.h"
#include "sim/predict.h"
#include "sim/report.h"
#include "sim/trace.h"
#include "tools/command.h"
#include "tools/emulation.h"
#include "tools/execute_tables.h"
#include "tools/peer_watch.h"
#include "tools/plan_flags.h"
#include "tools/table.h"

namespace domino::cli {
namespace {

struct ExecuteFlags {
  PlanFlags plan;
  std::string positional_plan;
  std::string backend = "cpu";
  std::string extent;  // default: exec::DefaultExtent
  std::string comm = "mpi";
  std::string dtype;  // default: fp32 on the CPU or with --check, else the plan's precision
  bool cuda_graph = false;
  int emulate_rank = 0;
  int min_ctas = -1, max_ctas = -1;  // -1: the CTAs the cost model gives the plan's collectives
  int device = -1;
  bool check = false;
  double tolerance = 0;  // default: 1e-4 in fp32, 3e-2 in 16 bits
  uint64_t seed = 1;
  double max_memory_gib = 8;
  double timeout_s = 300;
  int iterations = 1;
  int steps = 2;
  bool steps_given = false;  // --steps on the command line
  std::string report_path, trace_path;
  bool force = false;
};

void Run(ExecuteFlags& flags) {
  Result<exec::LaunchEnv> env = exec::ReadLaunchEnv();
  if (!env.ok()) Fail("execute", env.message());
  const int rank = env->rank;
  if (!flags.positional_plan.empty()) {
    if (!flags.plan.plan_path.empty() && flags.plan.plan_path != flags.positional_plan)
      FailOnRank("execute", rank, "give the plan once: as PLAN or as --plan, not both");
    flags.plan.plan_path = flags.positional_plan;
  }
  if (flags.plan.plan_path.empty() && flags.plan.model.empty())
    FailOnRank("execute", rank,
               "no plan: give PLAN.yaml (from `domino plan --out`), or --model and --cluster "
               "with plan flags");
  Result<Plan> plan = BuildPlan(flags.plan);
  if (!plan.ok()) FailOnRank("execute", rank, plan.message());
  const std::string what = flags.plan.plan_path.empty() ? "the plan" : flags.plan.plan_path;
  const bool emulate = flags.comm == "emulate";
  if (flags.backend == "cpu" && flags.comm != "mpi")
    FailOnRank("execute", rank,
               fmt::format("--comm {} needs --backend cuda (the CPU backend's collectives "
                           "go through the launch communicator)",
                           flags.comm));
  if (flags.backend == "cpu" && !flags.dtype.empty() && flags.dtype != "fp32")
    FailOnRank("execute", rank,
               fmt::format("--dtype {}: the CPU backend computes in fp32", flags.dtype));
  if (flags.cuda_graph && (flags.backend != "cuda" || flags.comm == "mpi"))
    FailOnRank("execute", rank, "--cuda-graph needs --backend cuda with --comm nccl or emulate");
  if (emulate && flags.check)
    FailOnRank("execute", rank,
               "--check needs real collectives: use --comm mpi or nccl, not emulate");
  if (emulate && env->size != 1)
    FailOnRank("execute", rank,
               fmt::format("--comm emulate runs one rank of the TP group on one GPU, but {} "
                           "ranks were launched ({}); run it without mpirun",
                           env->size, env->source));
  if (emulate && flags.emulate_rank >= plan->tp)
    FailOnRank("execute", rank,
               fmt::format("--emulate-rank {} is not a rank of the plan's TP group of {}",
                           flags.emulate_rank, plan->tp));
  Result<exec::BackendKind> backend_kind = exec::ParseBackendKind(flags.backend);
  if (!backend_kind.ok()) FailOnRank("execute", rank, "--backend: " + backend_kind.message());
  exec::Extent extent = exec::DefaultExtent(*plan, *backend_kind);
  if (!flags.extent.empty()) {
    Result<exec::Extent> parsed = exec::ParseExtent(flags.extent);
    if (!parsed.ok()) FailOnRank("execute", rank, "--extent: " + parsed.message());
    extent = *parsed;
  }
  const bool whole_step = extent == exec::Extent::kStep;
  if (whole_step && flags.backend == "cuda" && emulate)
    FailOnRank("execute", rank,
               "--extent step on the CUDA backend moves its data through MPI (--comm mpi) or NCCL "
               "(--comm nccl), not emulated collectives");
  if (whole_step && flags.iterations != 1)
    FailOnRank("execute", rank, "--extent step: give --steps, not --iterations");
  if (!whole_step && flags.steps_given)
    FailOnRank("execute", rank,
               fmt::format("--steps counts the training steps of --extent step; this run's extent "
                           "is {}: give --iterations",
                           exec::ExtentName(extent)));
  // What this extent cannot run is said before how to launch it.
  Result<Schedule> schedule =
      whole_step ? Result<Schedule>(Schedule{}) : exec::LowerForExecution(*plan, extent);
  if (!schedule.ok()) FailOnRank("execute", rank, schedule.message());
  // Context parallelism's attention core runs on the host on every backend: a plan whose core
  // would take minutes there is refused before it starts (its peers would wait for it until
  // --timeout).
  if (whole_step && plan->cp > 1) {
    const double flops = exec::CpAttention::HostFlopsPerCore(*plan);
    if (flops > exec::CpAttention::kMaxHostFlopsPerCore)
      FailOnRank("execute", rank,
                 fmt::format("{}: context parallelism's attention core runs on the host "
                             "(exec/cp_attention.h), and this plan's takes {:.0f} GFLOP a layer "
                             "and micro-batch there, over {:.0f}; check context parallelism at a "
                             "smaller --seq-len or --micro-batch (or a small model)",
                             what, flops * 1e-9, exec::CpAttention::kMaxHostFlopsPerCore * 1e-9));
  }
  const int ranks = whole_step ? plan->tp * plan->cp * plan->pp * plan->dp : plan->tp;
  if (!emulate && env->size != ranks) {
    FailOnRank("execute", rank,
               whole_step
                   ? fmt::format("{}: parallel.{} = {} ranks run a whole step, but {} rank(s) were "
                                 "launched ({}); launch with `mpirun -np {} domino execute ...`",
                                 what, exec::RanksText(*plan), ranks, env->size, env->source, ranks)
                   : fmt::format("{}: parallel.tp is {}, so it runs on {} ranks (one per TP rank, "
                                 "--extent {}), but "
                                 "{} rank(s) were launched ({}); launch with `mpirun -np {} domino "
                                 "execute ...`",
                                 what, plan->tp, plan->tp, exec::ExtentName(extent), env->size,
                                 env->source, plan->tp));
  }
  // Host memory: the CPU backend's tensors, and with --check the reference and the gathers.
  double gib = 0;
  if (whole_step) {
    gib = flags.backend == "cpu" ? exec::StepBytesPerRank(*plan) / (1 << 30) : 0;
    if (flags.check) gib += 2 * exec::StepBytesPerRank(exec::StepReferencePlan(*plan)) / (1 << 30);
  } else {
    gib = flags.backend == "cpu" ? exec::CpuBackend::BytesFor(*schedule) / (1 << 30) : 0;
    if (flags.check) gib += exec::CpuBackend::BytesFor(*schedule) * plan->tp / (1 << 30);
  }
  if (gib > flags.max_memory_gib) {
    FailOnRank(
        "execute", rank,
        fmt::format(
            "{}: the CPU backend would hold {:.1f} GiB per rank for {} ({} layers, hidden {}), "
            "over "
            "--max-memory-gib {}; use a small model (e.g. models/examples/tiny-gpt.yaml) or raise "
            "the limit",
            what, gib, plan->model.name, plan->model.layers / plan->pp, plan->model.hidden,
            flags.max_memory_gib));
  }
  // Every output checked before the run, so that a bad path costs no run and leaves nothing.
  std::vector<std::string> output_paths;
  for (const std::string& path : {flags.report_path, flags.trace_path})
    if (!path.empty()) output_paths.push_back(path);
  if (rank == 0) {
    CheckUsage("execute", CheckDistinctOutputs(output_paths));
    CheckOk("execute", CheckOutputPaths(output_paths, flags.force));
    // A report is a plan file with its measurement, so it may replace the plan it ran (--force),
    // not its model or stack file; a trace replaces none of them.
    CheckUsage("execute",
               CheckNotAnInput(flags.report_path, PlanInputFiles(flags.plan, *plan, false)));
    CheckUsage("execute", CheckNotAnInput(flags.trace_path, PlanInputFiles(flags.plan, *plan)));
  }

  // 16-bit runs are for timing; the check's default element type is fp32.
  std::string dtype = flags.dtype;
  if (dtype.empty())
    dtype = flags.backend == "cpu" || flags.check ? "fp32"
            : plan->precision == Dtype::kFp16     ? "fp16"
                                                  : "bf16";
  double tolerance = flags.tolerance > 0 ? flags.tolerance : dtype == "fp32" ? 1e-4 : 3e-2;
  if (flags.backend == "cuda") {
    // Device memory: the tensors in the element type, and attention's scores.
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) FailOnRank("execute", rank, devices.message());
    const int device =
        flags.device >= 0 ? flags.device : env->local_rank % static_cast<int>(devices->size());
    if (device >= static_cast<int>(devices->size()))
      FailOnRank("execute", rank,
                 fmt::format("--device {}: {} CUDA device(s) visible", device, devices->size()));
    const double need =
        (whole_step ? exec::StepBytesPerRank(*plan) : exec::CpuBackend::BytesFor(*schedule)) *
        (dtype == "fp32" ? 1.0 : 0.5);
    const double have = static_cast<double>((*devices)[device].memory_bytes);
    if (need > 0.9 * have)
      FailOnRank(
          "execute", rank,
          fmt::format("{}: the tensors of {} layers of {} take {:.1f} GiB in {}, over "
                      "90% of the {:.1f} GiB of {} (device {}); run fewer layers per "
                      "rank (a larger --pp) or a smaller micro-batch",
                      what, plan->model.layers / plan->pp, plan->model.name, need / (1 << 30),
                      dtype, have / (1 << 30), (*devices)[device].name, device));
    flags.device = device;
  }

  Result<std::unique_ptr<exec::Communicator>> launched =
      emulate ? Result<std::unique_ptr<exec::Communicator>>(
                    std::unique_ptr<exec::Communicator>(new exec::SelfCommunicator))
              : exec::MakeLaunchCommunicator(*env);
  if (!launched.ok()) FailOnRank("execute", rank, launched.message());
  std::unique_ptr<exec::Communicator> comm = std::move(launched).value();

  exec::ExecuteOptions options;
  Result<exec::CommMode> comm_mode = exec::ParseCommMode(flags.comm);
  if (!comm_mode.ok()) FailOnRank("execute", rank, "--comm: " + comm_mode.message());
  options.backend = *backend_kind;
  options.extent = extent;
  // Each rank takes the GPU of its local rank (one process per GPU, as NCCL wants).
  options.cuda.device = std::max(0, flags.device);
  options.cuda.dtype = dtype == "fp16"   ? Dtype::kFp16
                       : dtype == "bf16" ? Dtype::kBf16
                                         : Dtype::kFp32;
  options.cuda.comm = *comm_mode;
  options.cuda.graph = flags.cuda_graph;
  // NCCL gets the CTA count the simulator assumed for the plan's collectives, so the contention
  // measured is the contention predicted (unless the flags say otherwise; 0: NCCL's choice).
  // A flag given alone bounds the other's default, so that the pair stays one NCCL accepts.
  const int model_ctas =
      whole_step ? 0 : std::min(exec::kNcclMaxCtas, LargestCollective(*plan, *schedule).ctas);
  int min_ctas = flags.min_ctas, max_ctas = flags.max_ctas;
  if (min_ctas < 0 && max_ctas < 0) {
    min_ctas = max_ctas = model_ctas;
  } else if (min_ctas < 0) {
    min_ctas = max_ctas == 0 ? model_ctas : std::min(model_ctas, max_ctas);
  } else if (max_ctas < 0) {
    max_ctas = min_ctas == 0 ? model_ctas : std::max(model_ctas, min_ctas);
  }
  if (flags.comm == "nccl") {
    Result<exec::NcclCtas> ctas = exec::ResolveNcclCtas(min_ctas, max_ctas);
    if (!ctas.ok()) FailOnRank("execute", rank, ctas.message());
  }
  options.cuda.min_ctas = min_ctas;
  options.cuda.max_ctas = max_ctas;
  options.cuda.timeout_s = flags.timeout_s;
  options.emulate_rank = flags.emulate_rank;
  if (emulate) options.cuda.emulated = EmulatedCollectives(*plan, *schedule, flags.cuda_graph);
  options.seed = flags.seed;
  options.check = flags.check;
  options.iterations = flags.iterations;
  options.steps = flags.steps;
  options.tolerance = tolerance;
  const bool tty = rank == 0 && isatty(STDERR_FILENO);
  // A peer that dies or hangs leaves this rank blocked in a collective: the watch says so and
  // ends every rank instead of waiting forever.
  PeerWatch watch("execute", "ops", rank, flags.timeout_s, comm.get());
  // Every rank runs the same plan and options, or none runs: ranks given different ones would
  // call collectives of different sizes and corrupt each other's buffers.
  const std::string settings =
      PlanToYaml(*plan) +
      fmt::format(
          "execute: {{backend: {}, extent: {}, comm: {}, dtype: {}, cuda_graph: {}, "
          "check: {}, seed: {}, iterations: {}, steps: {}, min_ctas: {}, max_ctas: {}}}\n",
          flags.backend, exec::ExtentName(extent), flags.comm, dtype, flags.cuda_graph, flags.check,
          flags.seed, flags.iterations, flags.steps, min_ctas, max_ctas);
  if (Status same = exec::CheckSameOnEveryRank(*comm, settings); !same.ok())
    FailOnRank("execute", rank, same.message());
  options.progress = [&, tty](size_t done, size_t total) {
    watch.Step(done);
    if (tty && (done % 64 == 0 || done == total))
      std::cerr << fmt::format("\rexecuting: {}/{} ops", done, total) << (done == total ? "\n" : "")
                << std::flush;
  };
  Result<exec::ExecuteResult> result =
      whole_step ? exec::ExecuteStep(*plan, *comm, options)
                 : exec::ExecuteSchedule(*plan, std::move(schedule).value(), *comm, options);
  if (!result.ok()) watch.FailRun(result.message());
  if (rank != 0) {
    if (!result->passed) throw CLI::RuntimeError(1);
    return;
  }
  double comm_ms = 0;
  PlanFigures figures =
      whole_step ? StepFigures(*plan, *result) : MeasuredFigures(*plan, *result, &comm_ms);
  Plan report = *plan;
  report.measured = figures;
  // A whole step's report and trace hold rank 0's ops: its pipeline stage's.
  if (whole_step) RankZeroOps(*result);
  // Both outputs or neither; one on stdout ("-") sends the tables to stderr.
  std::vector<OutputFile> outputs;
  if (!flags.report_path.empty())
    outputs.push_back({flags.report_path, sim::ReportYaml(report, sim::ReportKind::kExecute,
                                                          "domino execute report (rank 0)",
                                                          result->schedule, result->timeline)});
  if (!flags.trace_path.empty())
    outputs.push_back(
        {flags.trace_path, sim::TraceJson(result->schedule, result->timeline, 0,
                                          "rank 0 (measured, " + flags.backend + ")")});
  CheckOk("execute", WriteFilesAtomically(outputs, /*overwrite=*/true));
  std::ostream& out = flags.report_path == "-" || flags.trace_path == "-" ? std::cerr : std::cout;
  const std::string backend = flags.backend == "cpu"
                                  ? "CPU (fp32)"
                                  : fmt::format("CUDA ({}, collectives: {}{})", dtype,
                                                emulate ? fmt::format("emulated, as rank {} of {}",
                                                                      flags.emulate_rank, plan->tp)
                                                        : flags.comm,
                                                flags.cuda_graph ? ", CUDA graph" : "");
  if (whole_step)
    PrintStep(*plan, backend, *env, *result, figures, out);
  else
    PrintRun(*plan, extent, backend, *env, *result, figures, comm_ms, out);
  if (!result->passed) {
    int bad = 0;
    for (const exec::TensorCheck& c : result->checks) bad += c.ok ? 0 : 1;
    Fail("execute", fmt::format("numeric check failed: {} of {} tensors differ from the reference "
                                "by more than {:g} of their largest value",
                                bad, result->checks.size(), tolerance));
  }
  if (flags.check)
    out << fmt::format("\ncheck passed: {} tensors within {:g} of the reference\n",
                       result->checks.size(), tolerance);
}

}  // namespace

void SetupExecute(CLI::App* sub) {
  auto flags = std::make_shared<ExecuteFlags>();
  sub->add_option("plan_file", flags->positional_plan, "plan YAML (from `domino plan --out`)")
      ->check(NonEmpty());
  AddPlanFlags(sub, &flags->plan, /*with_plan_file=*/true);
  sub->add_option("--backend", flags->backend, "cpu (Eigen, fp32) | cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--extent", flags->extent,
                  "model (embedding, layers, LM head and loss of one micro-batch; pp 1 and dp 1) "
                  "| layers (one stage's layer stack) | step (whole training steps of a 3D plan "
                  "on tp x cp x pp x dp ranks: every micro-batch through the pipeline, DP "
                  "gradient buckets, the tied embedding's sync and Adam; on the CUDA backend with "
                  "--comm mpi); default: model on the CPU backend when the plan has pp, dp and cp "
                  "1, step when it has more, layers on the CUDA backend")
      ->check(CLI::IsMember({"model", "layers", "step"}));
  sub->add_option("--steps", flags->steps,
                  "--extent step: training steps to run; --check compares every step's loss and, "
                  "after the last, every gradient and updated weight")
      ->capture_default_str()
      ->check(DecimalInt(1, 100));
  sub->add_option("--comm", flags->comm,
                  "TP collectives (cuda): mpi (MPI on host copies, one op at a time) | nccl "
                  "(NCCL on a comm stream, overlapping; --extent step: pipeline transfers and DP "
                  "buckets on the GPUs over NCCL) | emulate (one GPU plays one rank; collectives "
                  "become kernels with the predicted CTAs, HBM traffic and time)")
      ->check(CLI::IsMember({"mpi", "nccl", "emulate"}));
  sub->add_option("--dtype", flags->dtype,
                  "element type on the GPU: fp32 | bf16 | fp16 (default: fp32 with --check, else "
                  "the plan's precision; fp8 runs as bf16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  AddBoolFlag(sub, "--cuda-graph", &flags->cuda_graph,
              "capture the schedule in a CUDA graph once and replay it (--comm nccl or emulate)");
  sub->add_option("--emulate-rank", flags->emulate_rank,
                  "with --comm emulate: the TP rank this process plays")
      ->check(DecimalInt(0, kMaxRank));
  sub->add_option("--min-ctas", flags->min_ctas,
                  "NCCL minCTAs (--comm nccl; default: the CTAs the cost model gives the plan's "
                  "collectives; 0: NCCL's choice)")
      ->check(DecimalInt(0, 64));
  sub->add_option("--max-ctas", flags->max_ctas,
                  "NCCL maxCTAs (--comm nccl; default: the cost model's CTAs, at least --min-ctas; "
                  "0: NCCL's choice)")
      ->check(DecimalInt(0, 64));
  sub->add_option("--device", flags->device,
                  "CUDA device (default: the launcher's local rank, modulo the visible devices)")
      ->check(DecimalInt(0, kMaxDevice));
  AddBoolFlag(sub, "--check", &flags->check,
              "compare the output, the loss and every gradient (the input's or the "
              "embedding's, every weight's) with the unsharded single-rank reference");
  sub->add_option("--tolerance", flags->tolerance,
                  "largest error allowed by --check, relative to the reference's largest value "
                  "(default: 1e-4 in fp32, 3e-2 in bf16/fp16)")
      ->check(PositiveFinite());
  sub->add_option("--seed", flags->seed, "seed of the weights, inputs and output gradient")
      ->check(DecimalInt(0, kMaxSeed));
  sub->add_option("--iterations", flags->iterations,
                  "runs of the schedule; the measured timeline takes each op's median")
      ->check(DecimalInt(1, 1000));
  sub->add_option("--timeout", flags->timeout_s,
                  "seconds without progress (a dead or stuck peer) before every rank is aborted "
                  "(default: 300)")
      ->check(PositiveFinite());
  sub->add_option("--max-memory-gib", flags->max_memory_gib,
                  "refuse plans whose CPU tensors exceed this per rank")
      ->check(PositiveFinite());
  sub->add_option("--report", flags->report_path,
                  "write the plan with its measured: block and rank 0's timeline (YAML; for "
                  "`domino compare` with `simulate --report`, or with `simulate "
                  "--report-iteration` for --extent step; - for stdout, the tables then go to "
                  "stderr)")
      ->check(NonEmpty());
  sub->add_option("--trace", flags->trace_path,
                  "write rank 0's measured timeline (Perfetto JSON; --extent step: its pipeline "
                  "stage's passes, sends, receives, DP buckets and optimizer step; - for stdout)")
      ->check(NonEmpty());
  AddBoolFlag(sub, "--force", &flags->force, "overwrite existing output files");
  // A CUDA run needs a GPU whatever else is missing: say so first, as the executor will; before
  // that, a CTA pair NCCL would refuse (its init fails only after every rank has started).
  sub->parse_complete_callback([flags, sub] {
    flags->steps_given = sub->count("--steps") > 0;
    // Flags of a run they do not apply to are mistakes, not silently ignored.
    for (const char* name : {"--device", "--min-ctas", "--max-ctas", "--emulate-rank"})
      if (sub->count(name) > 0 && flags->backend != "cuda")
        Fail("execute", fmt::format("{} sets up a CUDA run: it needs --backend cuda", name),
             kExitUsage);
    for (const char* name : {"--min-ctas", "--max-ctas"})
      if (sub->count(name) > 0 && flags->backend == "cuda" && flags->comm != "nccl")
        Fail("execute", fmt::format("{} sets NCCL's CTAs: it needs --comm nccl", name), kExitUsage);
    if (sub->count("--emulate-rank") > 0 && flags->comm != "emulate")
      Fail("execute", "--emulate-rank is the rank --comm emulate plays: it needs --comm emulate",
           kExitUsage);
    if (flags->min_ctas >= 0 && flags->max_ctas >= 0) {
      Result<exec::NcclCtas> ctas = exec::ResolveNcclCtas(flags->min_ctas, flags->max_ctas);
      if (!ctas.ok())
        Fail("execute", fmt::format("--min-ctas {} --max-ctas {}: {}", flags->min_ctas,
                                    flags->max_ctas, ctas.message()));
    }
    if (flags->backend != "cuda") return;
    Result<std::vector<exec::CudaDevice>> devices = exec::ListCudaDevices();
    if (!devices.ok()) Fail("execute", devices.message());
  });
  sub->callback([flags] { Run(*flags); });
}

}  // namespace domino::cli
