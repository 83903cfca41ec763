#include "exec/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cuda_device.h"
#include "exec/interpreter.h"
#include "planner/lower.h"

namespace domino::exec {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
Result<double> TimeMedian(int repeats, Fn fn) {
  DOMINO_RETURN_IF_ERROR(fn());  // warm-up
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point start = Clock::now();
    DOMINO_RETURN_IF_ERROR(fn());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return Median(std::move(us));
}

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

// Counts a calibration's measurements for CalibrateOptions::measured.
class Measured {
 public:
  explicit Measured(const CalibrateOptions& options) : callback_(options.measured) {}
  void operator()() {
    if (callback_) callback_(++count_);
  }

 private:
  const std::function<void(size_t)>& callback_;
  size_t count_ = 0;
};

// The schedules a calibration times: the plan's layer stack (Lower, the ops of every layer) and
// one layer with the model's ends (the embedding in front; the final norm, LM head and
// cross-entropy loss behind), whose ops the layer stack lacks. A prediction of the whole model
// prices its ends from the second; lowering only the second would lose ops that layer-stack runs
// have and it has not (the gradient a stage receives from the one after it).
Result<std::vector<Schedule>> LowerFor(const Plan& plan, const Communicator& comm) {
  if (comm.size() != 1 && comm.size() != plan.tp)
    return Error(fmt::format("calibrating collectives of a TP group of {} needs {} ranks, not {}",
                             plan.tp, plan.tp, comm.size()));
  std::vector<Schedule> schedules;
  for (const bool ends : {false, true}) {
    Result<Schedule> s =
        ends ? LowerStage(plan, LowerOptions{.layers = 1, .embedding = true, .head = true})
             : Lower(plan);
    if (!s.ok()) return s.error();
    schedules.push_back(std::move(s).value());
  }
  return schedules;
}

// Whether a calibration has yet to time `op`: the first op of its signature, or the first
// collective of its kind and size, across every schedule it times.
struct Distinct {
  std::map<std::string, bool> ops;
  std::map<std::pair<int, double>, bool> collectives;
  bool New(const Op& op) {
    if (op.kind == OpKind::kCollective)
      return collectives.emplace(std::pair{static_cast<int>(op.collective), op.bytes}, true).second;
    return ops.emplace(OpSignature(op), true).second;
  }
};

// Whether a calibration times `op`: not the ops the executor runs nothing for (RunsNothing), nor
// context parallelism's ring transfers, which the collective model prices, nor collectives
// without the plan's TP ranks to run them.
bool Timed(const Op& op, const Communicator& comm) {
  if (RunsNothing(op) || op.kind == OpKind::kSendRecv) return false;
  return op.kind != OpKind::kCollective || comm.size() > 1;
}

// The largest GEMM and memory-bound op a TimeNewOps timed (-1: none), by op id of its schedule.
struct LargestOps {
  int32_t gemm = -1, memory = -1;
};

// Times, on `gpu` (a runner of `s`), the ops of `s` that `distinct` has not seen, in schedule
// order (the same on every rank, so collectives pair up): each compute op alone, each collective
// nccl-tests style when the communicator has the plan's tp ranks.
Result<LargestOps> TimeNewOps(const Schedule& s, CudaRunner& gpu, Communicator& comm, int repeats,
                              Distinct& distinct, Measured& measured, HardwareProfile& profile) {
  LargestOps largest;
  for (size_t i = 0; i < s.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const Op& op = s.op(id);
    if (!Timed(op, comm) || !distinct.New(op)) continue;
    if (op.kind == OpKind::kCollective) {
      Result<double> us = gpu.TimeCollective(id, repeats, comm);
      if (!us.ok()) return us.error();
      profile.collectives.push_back(
          {std::string(CollectiveKindName(op.collective)), comm.size(), op.bytes, *us});
      measured();
      continue;
    }
    Result<double> us = gpu.TimeOp(id, repeats);
    if (!us.ok()) return us.error();
    profile.compute_us[OpSignature(op)] = *us;
    measured();
    if (op.kind == OpKind::kGemm && (largest.gemm < 0 || op.flops > s.op(largest.gemm).flops))
      largest.gemm = id;
    if (op.kind == OpKind::kElementwise &&
        (largest.memory < 0 || op.bytes > s.op(largest.memory).bytes))
      largest.memory = id;
  }
  return largest;
}

}  // namespace

Result<HardwareProfile> CalibrateCpu(const Plan& plan, Communicator& comm,
                                     const CalibrateOptions& options) {
  Result<std::vector<Schedule>> schedules = LowerFor(plan, comm);
  if (!schedules.ok()) return schedules.error();
  HardwareProfile profile;
  profile.device = "cpu";
  profile.backend = "cpu";
  profile.contention = false;
  const int repeats = std::max(1, options.repeats);
  Distinct distinct;
  Measured measured(options);
  for (const Schedule& s : *schedules) {
    // This schedule's ops that no earlier one had, compute and collective, in schedule order
    // (the same on every rank, so collectives pair up).
    std::vector<int32_t> ops, collectives;
    for (size_t i = 0; i < s.size(); ++i) {
      const Op& op = s.ops()[i];
      if (Timed(op, comm) && distinct.New(op))
        (op.kind == OpKind::kCollective ? collectives : ops).push_back(static_cast<int32_t>(i));
    }
    CpuBackend backend(s, plan.model, comm.rank(), plan.tp, /*seed=*/1);
    // Passes over the ops, each timing every one once, so that a burst of machine noise lands in
    // one pass rather than in every run of one op; the median per op.
    std::map<std::string, std::vector<double>> samples;
    for (int pass = -1; pass < repeats; ++pass) {  // pass -1 warms up
      for (const int32_t id : ops) {
        const Clock::time_point start = Clock::now();
        DOMINO_RETURN_IF_ERROR(backend.Run(s, id));
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (pass >= 0) samples[OpSignature(s.op(id))].push_back(us);
        measured();
      }
    }
    for (auto& [key, us] : samples) profile.compute_us[key] = Median(std::move(us));
    for (const int32_t id : collectives) {
      const Op& op = s.op(id);
      const int64_t n_in = Elements(s.reads(op)[0].view);
      const int64_t n_out = Elements(s.writes(op)[0].view);
      std::vector<float> in(static_cast<size_t>(n_in), 1.0f), out(static_cast<size_t>(n_out));
      Result<double> us = TimeMedian(repeats, [&]() -> Status {
        switch (op.collective) {
          case CollectiveOp::kAllReduce:
            return comm.AllReduce(in.data(), n_in);
          case CollectiveOp::kReduceScatter:
            return comm.ReduceScatter(in.data(), out.data(), n_out);
          case CollectiveOp::kAllGather:
            return comm.AllGather(in.data(), out.data(), n_in);
          case CollectiveOp::kAllToAll:  // context parallelism's a2a: not in a calibrated pass
          case CollectiveOp::kNone:
            break;
        }
        return Error("not a collective");
      });
      if (!us.ok()) return us.error();
      profile.collectives.push_back(
          {std::string(CollectiveKindName(op.collective)), comm.size(), op.bytes, *us});
      measured();
    }
  }
  return profile;
}

namespace {

// Everything CalibrateCuda measures on the layer stack's runner: the soaks, the GEMM shapes, the
// stack's distinct ops, the device's GEMM peak, HBM bandwidth and launch overheads, and the
// contention samples (the stack's largest GEMM and memory-bound op beside options.beside).
Status MeasureOnLayerStack(const Schedule& s, CudaRunner& gpu, Communicator& comm,
                           const CalibrateOptions& options, const CudaDevice& device, Dtype dtype,
                           Distinct& distinct, Measured& measured, HardwareProfile& profile) {
  const int repeats = std::max(1, options.repeats);
  auto tell = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const std::string type(DtypeName(dtype));
  // fp8 GEMMs need compute capability 8.9 or later (Ada, Hopper): on an older GPU none is tried.
  bool fp8_gemms = options.fp8_gemms;
  if (fp8_gemms && device.compute_major * 10 + device.compute_minor < 89) {
    profile.gemm_fp8_error =
        fmt::format("fp8 GEMMs need compute capability 8.9 or later, this GPU has {}.{}",
                    device.compute_major, device.compute_minor);
    tell("fp8 GEMMs: " + profile.gemm_fp8_error);
    fp8_gemms = false;
  }
  // The soaks: the element type's, then fp8's (an fp8 failure ends the fp8 measurements only).
  for (const bool fp8 : {false, true}) {
    if (!(options.soak_seconds > 0) || (fp8 && !fp8_gemms)) continue;
    Result<std::vector<double>> soak = gpu.SoakGemm(8192, options.soak_seconds, 1.0, fp8);
    if (!soak.ok() && fp8) {
      profile.gemm_fp8_error = soak.message();
      tell("fp8 GEMMs: " + soak.message());
      fp8_gemms = false;
      break;
    }
    if (!soak.ok()) return soak.error();
    const std::vector<double>& t = *soak;
    if (!t.empty())
      tell(
          fmt::format("soak {} 8192^3: {:.1f} TFLOP/s in the first second, {:.1f} in the last "
                      "({:+.1f}%)",
                      fp8 ? "fp8" : type, t.front(), t.back(), 100 * (t.back() / t.front() - 1)));
    (fp8 ? profile.gemm_soak_fp8_tflops : profile.gemm_soak_tflops) = std::move(*soak);
    measured();
  }
  for (const bool fp8 : {false, true}) {
    if (fp8 && !fp8_gemms) continue;
    for (const auto& [m, n, k] : options.gemm_shapes) {
      if (fp8 && (m % 16 != 0 || k % 16 != 0)) continue;
      // As mamf-finder times a shape (50 warm-up runs, the mean of 100), with fewer runs for the
      // shapes that take longer than 2.5 ms at 400 TFLOP/s, so that each lasts about a quarter
      // of a second.
      const double ms = 2.0 * static_cast<double>(m) * static_cast<double>(n) *
                        static_cast<double>(k) / 400e12 * 1e3;
      const int runs = static_cast<int>(std::clamp(250.0 / ms, 10.0, 100.0));
      Result<double> tflops = gpu.GemmTflops(m, n, k, runs / 2, runs, fp8);
      if (!tflops.ok() && fp8) {
        // A shape cuBLASLt has no fp8 kernel for: the other shapes still have theirs.
        const std::string why = fmt::format("{}x{}x{}: {}", m, n, k, tflops.message());
        profile.gemm_fp8_error += (profile.gemm_fp8_error.empty() ? "" : "; ") + why;
        tell(fmt::format("gemm {}x{}x{} fp8: not measured ({})", m, n, k, tflops.message()));
        continue;
      }
      if (!tflops.ok()) return tflops.error();
      tell(fmt::format("gemm {}x{}x{} {}: {:.1f} TFLOP/s", m, n, k, fp8 ? "fp8" : type, *tflops));
      profile.gemm_samples.push_back({m, n, k, *tflops, fp8});
      measured();
    }
  }
  // The layer stack's distinct ops.
  Result<LargestOps> largest = TimeNewOps(s, gpu, comm, repeats, distinct, measured, profile);
  if (!largest.ok()) return largest.error();
  Result<double> tflops =
      gpu.GemmTflops(8192, 8192, 8192, /*warmup=*/10, /*repeats=*/20, /*fp8=*/false);
  if (!tflops.ok()) return tflops.error();
  profile.gemm_tflops = *tflops;
  measured();
  Result<double> GBps = gpu.HbmGBps(size_t{1} << 30);
  if (!GBps.ok()) return GBps.error();
  profile.hbm_GBps = *GBps;
  measured();
  // What a kernel adds to a chain of them: 2,000 empty kernels launched one by one, then replayed
  // from a CUDA graph, the median of `repeats` chains each way.
  Result<cuda::LaunchOverhead> launch = gpu.LaunchOverhead(2000, repeats);
  if (!launch.ok()) return launch.error();
  profile.kernel_launch_us = launch->eager_us;
  profile.graph_launch_us = launch->graph_us;
  measured();
  tell(fmt::format(
      "kernel launch: {:.2f} us per kernel launched one by one, {:.2f} from a CUDA graph",
      launch->eager_us, launch->graph_us));
  // Contention: the op beside a collective that outlasts it, with the collective's traffic rate.
  const EmulatedCollective& b = options.beside;
  if (b.ctas > 0 && b.us > 0) {
    for (int32_t id : {largest->gemm, largest->memory}) {
      if (id < 0) continue;
      const double alone = profile.compute_us[OpSignature(s.op(id))];
      EmulatedCollective longer = b;
      longer.us = 3 * alone + 100;
      longer.hbm_bytes = b.hbm_bytes / b.us * longer.us;
      Result<double> beside = gpu.TimeOpBeside(id, longer, repeats);
      if (!beside.ok()) return beside.error();
      profile.contention_samples.push_back(
          {OpSignature(s.op(id)), b.ctas, b.hbm_bytes / b.us * 1e-3, alone, *beside});
      measured();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<HardwareProfile> CalibrateCuda(const Plan& plan, Communicator& comm,
                                      const CalibrateOptions& options) {
  Result<std::vector<Schedule>> schedules = LowerFor(plan, comm);
  if (!schedules.ok()) return schedules.error();
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.error();
  CudaOptions cuda = options.cuda;
  cuda.comm = comm.size() > 1 ? CommMode::kNccl : CommMode::kMpi;
  cuda.random_values = true;  // FillRandom below
  const CudaDevice& device = (*devices)[static_cast<size_t>(cuda.device)];
  HardwareProfile profile;
  profile.device = device.name;
  profile.backend = "cuda";
  profile.contention = true;
  Distinct distinct;
  Measured measured(options);
  // One runner per schedule, the layer stack's released before the ends' is made: only one
  // schedule's tensors are on the device at a time.
  for (size_t i = 0; i < schedules->size(); ++i) {
    const Schedule& s = (*schedules)[i];
    Result<std::unique_ptr<CudaRunner>> runner =
        MakeCudaRunner(s, plan.model, comm.rank(), plan.tp, /*seed=*/1, cuda, comm);
    if (!runner.ok()) return runner.error();
    // Random operands, as training's are: zeros and constants keep the clocks high and read fast.
    DOMINO_RETURN_IF_ERROR((*runner)->FillRandom(/*seed=*/1));
    if (i == 0) {
      DOMINO_RETURN_IF_ERROR(MeasureOnLayerStack(s, **runner, comm, options, device, cuda.dtype,
                                                 distinct, measured, profile));
      continue;
    }
    // The model's ends (embedding, final norm, LM head, loss).
    const size_t before = profile.compute_us.size();
    Result<LargestOps> ends =
        TimeNewOps(s, **runner, comm, std::max(1, options.repeats), distinct, measured, profile);
    if (!ends.ok()) return ends.error();
    if (options.progress)
      options.progress(fmt::format(
          "the model's ends (embedding, final norm, LM head, loss): {} more compute ops timed",
          profile.compute_us.size() - before));
  }
  return profile;
}

}  // namespace domino::exec
