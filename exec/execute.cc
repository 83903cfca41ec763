#include "exec/execute.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu_backend.h"
#include "exec/cpu_kernels.h"
#include "exec/cuda_backend.h"
#include "exec/dropout.h"
#include "exec/interpreter.h"
#include "exec/step.h"
#include "planner/lower.h"

namespace domino::exec {
namespace {

using Whole = WholeTensor;

Result<Whole> GatherWhole(const Schedule& schedule, const Backend& backend, Communicator& comm,
                          const TensorRole& role) {
  const int32_t id = FindTensor(schedule.tensors(), role);
  if (id < 0) return Error(fmt::format("the schedule has no tensor {}", RoleName(role)));
  Result<std::vector<float>> mine = backend.Read(id);
  if (!mine.ok()) return mine.error();
  return GatherWholeTensor(schedule.tensors()[id], *mine, comm);
}

TensorRole LayerRole(TensorKind kind, TensorSlot slot, int layer, bool gradient = false,
                     TensorForm form = TensorForm::kPrimary) {
  TensorRole role;
  role.kind = kind, role.slot = slot, role.gradient = gradient, role.form = form;
  role.layer = static_cast<int16_t>(layer);
  return role;
}

// The stack's output: the top layer's mid plus its MLP output after the collective (with
// sequence parallelism, the reduce-scattered shard; with post-norms, normalized) through the MLP
// branch's dropout of `plan` (the whole tensor's row r is token r of the run: exec/dropout.h).
Result<Whole> GatherOutput(const Schedule& schedule, const Backend& backend, Communicator& comm,
                           int top, bool sp, bool post_norms, const Plan& plan, uint64_t seed) {
  Result<Whole> mid = GatherWhole(schedule, backend, comm,
                                  LayerRole(TensorKind::kActivation, TensorSlot::kMid, top));
  if (!mid.ok()) return mid;
  Result<Whole> mlp = GatherWhole(schedule, backend, comm, StackMlpOutputRole(top, sp, post_norms));
  if (!mlp.ok()) return mlp;
  FillOffsets fill;
  SetDropout(plan, &fill);
  BranchDropout dropout;
  dropout.rate = fill.branch_dropout[1];
  dropout.stream = BranchDropoutStream(seed, top, 2);
  if (mid->values.size() != mlp->values.size())
    return Error("the stack's output: its parts differ in size");
  for (int64_t r = 0; r < mid->rows; ++r)
    for (int64_t j = 0; j < mid->cols; ++j)
      mid->values[r * mid->cols + j] += mlp->values[r * mid->cols + j] * dropout.Scale(r, j);
  return mid;
}

// The first `rows` rows of a whole tensor: a vocabulary-major table without its padding, whose
// size depends on the TP size.
void CropRows(Whole& whole, int64_t rows) {
  if (whole.rows <= rows) return;
  whole.rows = rows;
  whole.values.resize(static_cast<size_t>(rows * whole.cols));
}

// The mean loss of a gathered loss tensor, as a 1 x 1 tensor.
Whole LossOf(const Whole& stats) {
  const cpu::ConstMat view(stats.values.data(), stats.rows, stats.cols, stats.cols);
  return Whole{1, 1, {static_cast<float>(cpu::MeanCrossEntropy(view))}};
}

// What a schedule covers, read from its tensors' roles.
struct Covers {
  bool embedding = false;  // the token embedding in front of the first layer
  bool head = false;       // the final norm, LM head and loss behind the last
};

Covers CoversOf(const Schedule& s) {
  Covers covers;
  covers.embedding =
      FindTensor(s.tensors(), LayerRole(TensorKind::kInput, TensorSlot::kEmbedding, -1)) >= 0;
  covers.head = FindTensor(s.tensors(), LayerRole(TensorKind::kLoss, TensorSlot::kLmHead, -1)) >= 0;
  return covers;
}

// A gradient the check compares, and whether it is vocabulary-major (cropped to the vocabulary).
struct Compared {
  TensorRole role;
  bool vocab_rows = false;
};

// The stack's input gradient or the embedding's, then every layer's weight gradients, then the
// final norm's and the LM head's. The tied LM head's gradient is the embedding's.
std::vector<Compared> ComparedTensors(const Schedule& s, int layers) {
  const Covers covers = CoversOf(s);
  std::vector<Compared> roles;
  if (covers.embedding)
    roles.push_back({LayerRole(TensorKind::kWeight, TensorSlot::kEmbedding, -1, true), true});
  else
    roles.push_back({LayerRole(TensorKind::kInput, TensorSlot::kX, 0, true)});
  for (int l = 0; l < layers; ++l) {
    roles.push_back({LayerRole(TensorKind::kNormWeight, TensorSlot::kLn1, l, true)});
    // The gains of a norm that the model may lack (a QK-norm, post-norms), where it has it.
    auto gain = [&](TensorSlot slot) {
      const TensorRole role = LayerRole(TensorKind::kNormWeight, slot, l, true);
      if (FindTensor(s.tensors(), role) >= 0) roles.push_back({role});
    };
    for (TensorSlot w : {TensorSlot::kQkv, TensorSlot::kProj})
      roles.push_back({LayerRole(TensorKind::kWeight, w, l, true)});
    gain(TensorSlot::kQkNorm);
    gain(TensorSlot::kPostNorm1);
    roles.push_back({LayerRole(TensorKind::kNormWeight, TensorSlot::kLn2, l, true)});
    for (TensorSlot w : {TensorSlot::kFc1, TensorSlot::kFc2})
      roles.push_back({LayerRole(TensorKind::kWeight, w, l, true)});
    gain(TensorSlot::kPostNorm2);
  }
  if (covers.head) {
    roles.push_back({LayerRole(TensorKind::kNormWeight, TensorSlot::kFinalNorm, -1, true)});
    const TensorRole head = LayerRole(TensorKind::kWeight, TensorSlot::kLmHead, -1, true);
    if (FindTensor(s.tensors(), head) >= 0) roles.push_back({head, true});
    const TensorRole table = LayerRole(TensorKind::kWeight, TensorSlot::kEmbedding, -1, true);
    if (!covers.embedding && FindTensor(s.tensors(), table) >= 0) roles.push_back({table, true});
  }
  return roles;
}

// The per-token loss statistics (exec/cpu_kernels.h, CrossEntropyStats).
TensorRole LossRole() { return LayerRole(TensorKind::kLoss, TensorSlot::kLmHead, -1); }

// With --check: gathers the output, loss and gradients over the ranks, runs the unsharded
// reference of what the schedule covers on rank 0, compares, and tells every rank the verdict.
Status Check(const Plan& plan, const Schedule& s, const Backend& backend, Communicator& comm,
             const ExecuteOptions& options, ExecuteResult* result) {
  // Every rank takes part in the gathers; rank 0 then runs the reference and compares.
  const int layers = plan.model.layers / plan.pp;
  const Covers covers = CoversOf(s);
  std::vector<Whole> got;
  Result<Whole> output = GatherOutput(s, backend, comm, layers - 1, plan.sequence_parallel,
                                      plan.model.post_norms, plan, options.seed);
  if (!output.ok()) return output.error();
  got.push_back(std::move(output).value());
  if (covers.head) {
    Result<Whole> stats = GatherWhole(s, backend, comm, LossRole());
    if (!stats.ok()) return stats.error();
    got.push_back(comm.rank() == 0 ? LossOf(*stats) : Whole{});
  }
  const std::vector<Compared> roles = ComparedTensors(s, layers);
  for (const Compared& c : roles) {
    Result<Whole> whole = GatherWhole(s, backend, comm, c.role);
    if (!whole.ok()) return whole.error();
    if (c.vocab_rows) CropRows(*whole, plan.model.vocab);
    got.push_back(std::move(whole).value());
  }

  float failed = 0;
  if (comm.rank() == 0) {
    Plan ref_plan = ReferencePlan(plan);
    Result<Schedule> ref_schedule =
        LowerStage(ref_plan, LowerOptions{layers, covers.embedding, covers.head, true, true});
    if (!ref_schedule.ok()) return ref_schedule.error();
    SelfCommunicator self;
    FillOffsets fill;
    SetDropout(ref_plan, &fill);  // the run's masks
    CpuBackend ref(*ref_schedule, ref_plan.model, 0, 1, options.seed, fill);
    Result<Timeline> ref_timeline = Interpret(*ref_schedule, ref, self);
    if (!ref_timeline.ok()) return ref_timeline.error();
    size_t next = 0;
    Result<Whole> want = GatherOutput(*ref_schedule, ref, self, layers - 1, false,
                                      plan.model.post_norms, plan, options.seed);
    if (!want.ok()) return want.error();
    result->checks.push_back(CompareTensors("output", got[next++], *want, options.tolerance));
    if (covers.head) {
      Result<Whole> stats = GatherWhole(*ref_schedule, ref, self, LossRole());
      if (!stats.ok()) return stats.error();
      result->checks.push_back(
          CompareTensors("loss", got[next++], LossOf(*stats), options.tolerance));
    }
    for (const Compared& c : roles) {
      Result<Whole> w = GatherWhole(*ref_schedule, ref, self, c.role);
      if (!w.ok()) return w.error();
      if (c.vocab_rows) CropRows(*w, plan.model.vocab);
      // Labels name the tensors by role (the input's gradient: its own).
      std::string label = c.role.kind == TensorKind::kInput ? "input.grad" : RoleName(c.role);
      result->checks.push_back(CompareTensors(label, got[next++], *w, options.tolerance));
    }
    for (const TensorCheck& c : result->checks) failed += c.ok ? 0.0f : 1.0f;
  }
  DOMINO_RETURN_IF_ERROR(comm.AllReduce(&failed, 1));
  result->passed = failed == 0;
  return Status::Ok();
}

// Each op's median duration, laid end to end in issue order (runs of one op at a time).
Timeline MedianOps(const std::vector<Timeline>& runs) {
  Timeline timeline;
  timeline.ops.resize(runs[0].ops.size());
  double now = 0;
  std::vector<double> v;
  for (size_t op = 0; op < timeline.ops.size(); ++op) {
    v.clear();
    for (const Timeline& t : runs) v.push_back(t.ops[op].end_us - t.ops[op].start_us);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double d = v[v.size() / 2];
    timeline.ops[op] = OpTime{now, now + d};
    now += d;
  }
  return timeline;
}

// The run of median length, whole (runs whose ops overlap: durations alone would lose that).
Timeline MedianRun(std::vector<Timeline> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Timeline& a, const Timeline& b) { return a.end_us() < b.end_us(); });
  return std::move(runs[runs.size() / 2]);
}

}  // namespace

Result<WholeTensor> GatherWholeTensor(const Tensor& t, std::span<const float> mine,
                                      Communicator& comm, bool reduced) {
  const int tp = comm.size();
  const int64_t count = t.rows * t.cols;
  if (static_cast<int64_t>(mine.size()) != count)
    return Error(fmt::format("tensor {} holds {} values, not {} x {}", RoleName(t.role),
                             mine.size(), t.rows, t.cols));
  std::vector<float> all(comm.rank() == 0 ? static_cast<size_t>(count * tp) : 0);
  DOMINO_RETURN_IF_ERROR(comm.Gather(mine.data(), all.data(), count));
  WholeTensor whole;
  if (comm.rank() != 0) return whole;
  Shape2 shape = WholeShape(t, tp);
  whole.rows = shape.rows, whole.cols = shape.cols;
  whole.values.assign(static_cast<size_t>(shape.rows * shape.cols), 0.0f);
  const bool one = t.shard == Shard::kReplicated || (reduced && t.shard == Shard::kPartialSum);
  const int ranks = one ? 1 : tp;
  for (int r = 0; r < ranks; ++r) {
    const float* local = all.data() + r * count;
    for (int64_t i = 0; i < t.rows; ++i) {
      for (int64_t j = 0; j < t.cols; ++j) {
        Shape2 at = WholeIndex(t, r, tp, i, j);
        whole.values[at.rows * shape.cols + at.cols] += local[i * t.cols + j];
      }
    }
  }
  return whole;
}

TensorCheck CompareTensors(std::string name, const WholeTensor& got, const WholeTensor& want,
                           double tolerance) {
  TensorCheck check;
  check.name = std::move(name);
  check.rows = want.rows, check.cols = want.cols;
  if (got.rows != want.rows || got.cols != want.cols) {
    check.max_abs_error = check.rel_error = INFINITY;
    return check;
  }
  for (size_t i = 0; i < want.values.size(); ++i) {
    check.reference_max = std::max(check.reference_max, std::fabs(double{want.values[i]}));
    double error = std::fabs(double{got.values[i]} - want.values[i]);
    if (!(error <= check.max_abs_error)) check.max_abs_error = error;  // NaN sticks
  }
  check.rel_error = check.max_abs_error / std::max(check.reference_max, 1e-30);
  check.ok = check.rel_error <= tolerance;
  return check;
}

std::string_view BackendName(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

Result<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return Error(fmt::format("unknown backend {} (cpu or cuda)", name));
}

// CudaOptions' modes are named here, where every build has them (cuda_backend.cc is built only
// with CUDA).
std::string_view CommModeName(CommMode mode) {
  switch (mode) {
    case CommMode::kMpi:
      return "mpi";
    case CommMode::kNccl:
      return "nccl";
    case CommMode::kEmulate:
      return "emulate";
  }
  return "?";
}

Result<CommMode> ParseCommMode(std::string_view name) {
  for (CommMode mode : {CommMode::kMpi, CommMode::kNccl, CommMode::kEmulate})
    if (name == CommModeName(mode)) return mode;
  return Error(fmt::format("unknown collective mode {} (mpi, nccl or emulate)", name));
}

Plan ReferencePlan(const Plan& plan) {
  Plan ref = plan;
  ref.tp = ref.pp = ref.dp = ref.cp = 1;
  ref.cp_comm.reset();
  ref.cp_a2a = 0;
  ref.cluster.nodes = 1;
  ref.cluster.gpus_per_node = 1;
  ref.model.layers = plan.model.layers / plan.pp;  // one stage's layers
  ref.global_batch = ref.micro_batch;
  ref.row_split = ref.col_split = 1;
  ref.scope = OverlapScope::kNone;
  ref.sequence_parallel = false;
  ref.method = OverlapMethod::kDomino;
  ref.chunks = 0;
  ref.copy_engine.reset();
  ref.virtual_stages = 1;
  ref.predicted.reset();
  ref.measured.reset();
  return ref;
}

std::string_view ExtentName(Extent extent) {
  switch (extent) {
    case Extent::kModel:
      return "model";
    case Extent::kLayerStack:
      return "layers";
    case Extent::kStep:
      return "step";
  }
  return "?";
}

Result<Extent> ParseExtent(std::string_view name) {
  for (Extent extent : {Extent::kModel, Extent::kLayerStack, Extent::kStep})
    if (name == ExtentName(extent)) return extent;
  return Error(fmt::format("unknown extent {} (model, layers or step)", name));
}

Extent DefaultExtent(const Plan& plan, BackendKind backend) {
  if (backend != BackendKind::kCpu) return Extent::kLayerStack;
  return plan.pp == 1 && plan.dp == 1 && plan.cp == 1 ? Extent::kModel : Extent::kStep;
}

Result<Schedule> LowerForExecution(const Plan& plan, Extent extent) {
  if (plan.cp > 1 && extent != Extent::kStep)
    return Error(
        fmt::format("context parallelism (cp {}) is executed in whole training steps "
                    "(--extent step), not as {}",
                    plan.cp, ExtentName(extent)));
  if (extent == Extent::kLayerStack) return Lower(plan);
  if (extent == Extent::kStep)
    return Error("whole training steps run the plan's iteration (exec/step.h), not one schedule");
  if (plan.pp != 1 || plan.dp != 1)
    return Error(fmt::format(
        "the whole model is executed in one pipeline stage and one data-parallel replica; this "
        "plan has pp {} and dp {} (its layer stack per stage can be executed)",
        plan.pp, plan.dp));
  return LowerStage(plan, LowerOptions{plan.model.layers, true, true, true, true});
}

Result<ExecuteResult> Execute(const Plan& plan, Communicator& comm, const ExecuteOptions& options) {
  const Extent extent = options.extent.value_or(DefaultExtent(plan, options.backend));
  if (extent == Extent::kStep) return ExecuteStep(plan, comm, options);
  Result<Schedule> schedule = LowerForExecution(plan, extent);
  if (!schedule.ok()) return schedule.error();
  return ExecuteSchedule(plan, std::move(schedule).value(), comm, options);
}

Result<ExecuteResult> ExecuteSchedule(const Plan& plan, Schedule schedule, Communicator& comm,
                                      const ExecuteOptions& options) {
  const bool emulate =
      options.backend == BackendKind::kCuda && options.cuda.comm == CommMode::kEmulate;
  if (emulate) {
    if (comm.size() != 1)
      return Error(
          fmt::format("emulated collectives run one rank of the TP group on one GPU; {} ranks "
                      "were launched",
                      comm.size()));
    if (options.check)
      return Error("the check needs real collectives (through MPI or NCCL), not emulated ones");
    if (options.emulate_rank < 0 || options.emulate_rank >= plan.tp)
      return Error(fmt::format("rank {} to emulate is not a rank of a TP group of {}",
                               options.emulate_rank, plan.tp));
  } else if (comm.size() != plan.tp) {
    return Error(fmt::format("the plan's TP group has {} ranks; the communicator has {}", plan.tp,
                             comm.size()));
  }
  ExecuteResult result;
  result.schedule = std::move(schedule);
  const Schedule& s = result.schedule;
  std::unique_ptr<CudaRunner> cuda;
  std::unique_ptr<CpuBackend> cpu;
  FillOffsets fill;
  SetDropout(plan, &fill);
  if (options.backend == BackendKind::kCuda) {
    CudaOptions cuda_options = options.cuda;
    SetDropout(plan, &cuda_options.fill);
    Result<std::unique_ptr<CudaRunner>> made =
        MakeCudaRunner(s, plan.model, emulate ? options.emulate_rank : comm.rank(), plan.tp,
                       options.seed, cuda_options, comm);
    if (!made.ok()) return made.error();
    cuda = std::move(made).value();
  } else {
    cpu = std::make_unique<CpuBackend>(s, plan.model, comm.rank(), comm.size(), options.seed, fill);
  }
  Backend& backend = cuda ? cuda->backend() : *cpu;
  // Streams overlap on the GPU unless collectives go through the host one op at a time.
  const bool overlapping = cuda && options.cuda.comm != CommMode::kMpi;
  auto run = [&]() -> Result<Timeline> {
    return cuda ? cuda->Run(comm, options.progress) : Interpret(s, backend, comm, options.progress);
  };
  Result<Timeline> timeline = run();
  if (!timeline.ok()) return timeline.error();
  result.timeline = std::move(timeline).value();
  if (cpu && CoversOf(s).head) {
    const int32_t stats = FindTensor(s.tensors(), LossRole());
    const Tensor& t = s.tensors()[stats];
    result.loss =
        cpu::MeanCrossEntropy(cpu::ConstMat(cpu->data(stats).data(), t.rows, t.cols, t.cols));
  }
  if (options.check) DOMINO_RETURN_IF_ERROR(Check(plan, s, backend, comm, options, &result));
  // Further runs for steadier timings.
  if (options.iterations > 1) {
    std::vector<Timeline> runs = {result.timeline};
    for (int i = 1; i < options.iterations; ++i) {
      Result<Timeline> again = run();
      if (!again.ok()) return again.error();
      runs.push_back(std::move(again).value());
    }
    result.timeline = overlapping ? MedianRun(std::move(runs)) : MedianOps(runs);
  }
  return result;
}

}  // namespace domino::exec
