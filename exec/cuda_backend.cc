#include "exec/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cuda_backend_impl.h"
#include "exec/cuda_device.h"
#include "exec/nccl_ops.h"

namespace domino::exec {
namespace internal {
namespace {

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

// The context's CUDA stream that runs a Schedule stream's ops (PlanStreams admits only these two).
cuda::StreamKind StreamOf(Stream stream) {
  return stream == Stream::kCompute ? cuda::StreamKind::kCompute : cuda::StreamKind::kComm;
}

}  // namespace

CudaBackend::~CudaBackend() {
  // First the graph: NCCL's finalize (and abort) waits until no graph holds work of its
  // communicator, so a graph destroyed after it is a hang.
  cuda::DestroyGraph(context_);
  if (nccl_ != nullptr) {
    if (failed_)
      cuda::NcclAbort(nccl_);
    else
      cuda::NcclDestroy(nccl_);
  }
  // From borrowed_, not the schedule: it may be gone by now (ExecuteSchedule moves it away).
  for (size_t i = 0; i < device_.size(); ++i)
    if (!borrowed_[i]) cuda::Free(device_[i]);
  for (auto& [id, view] : residual_grads_) cuda::Free(view.data);
  cuda::Free(stage_in_);
  cuda::Free(stage_out_);
  cuda::Destroy(context_);
}

Status CudaBackend::Init(int rank, int tp, uint64_t seed, Communicator& host) {
  rank_ = rank, tp_ = tp, seed_ = seed;
  Result<cuda::DType> type = CudaElementType(options_.dtype);
  if (!type.ok()) return type.error();
  type_ = *type;
  const bool streams = options_.comm != CommMode::kMpi;
  if (options_.graph && !streams)
    return Error(
        "a CUDA graph needs collectives on the GPU (NCCL or emulated), not through the host");
  if (options_.comm == CommMode::kEmulate && options_.emulated.size() != schedule_.size())
    return Error(
        fmt::format("emulated collectives need the predicted cost of every op ({} ops, {} "
                    "given)",
                    schedule_.size(), options_.emulated.size()));
  if (options_.lent_nccl && (options_.comm != CommMode::kNccl || options_.graph))
    return Error("a lent NCCL communicator runs collectives one at a time, without a graph");
  // A lent communicator runs op by op (RunCollective): no whole-schedule stream plan.
  if (streams && !options_.lent_nccl) {
    Result<std::vector<StreamStep>> steps = PlanStreams(schedule_);
    if (!steps.ok()) return steps.error();
    steps_ = std::move(steps).value();
  }
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Create(options_.device, type_, &context_)));
  DOMINO_RETURN_IF_ERROR(AllocateTensors());
  FindAccumulators();
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Reserve(context_, WorkspaceBytes())));
  if (options_.comm == CommMode::kNccl && !options_.lent_nccl)
    DOMINO_RETURN_IF_ERROR(InitNccl(host));
  DOMINO_RETURN_IF_ERROR(Ok(cuda::CreateEvents(context_, kEventsPerOp * size() + 2)));
  return Ok(cuda::Synchronize(context_));
}

Result<Timeline> CudaBackend::Run(Communicator& host,
                                  const std::function<void(size_t, size_t)>& progress) {
  if (options_.lent_nccl)
    return Error("a backend with a lent NCCL communicator runs op by op, not whole schedules");
  if (options_.comm == CommMode::kMpi) {
    cuda::UseStream(context_, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(ZeroAccumulators());
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
    return Interpret(schedule_, *this, host, progress);
  }
  if (options_.graph) {
    if (!captured_) {
      // One eager run first, so cuBLAS and the kernels' modules load outside the capture.
      DOMINO_RETURN_IF_ERROR(EnqueueAll({}));
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
      DOMINO_RETURN_IF_ERROR(Ok(cuda::BeginCapture(context_)));
      Status enqueued = EnqueueAll({});
      Status ended = Ok(cuda::EndCapture(context_));
      DOMINO_RETURN_IF_ERROR(enqueued);
      DOMINO_RETURN_IF_ERROR(ended);
      captured_ = true;
    }
    DOMINO_RETURN_IF_ERROR(Ok(cuda::LaunchGraph(context_)));
    if (progress) progress(size(), size());
  } else {
    DOMINO_RETURN_IF_ERROR(EnqueueAll(progress));
  }
  cuda::UseStream(context_, cuda::StreamKind::kCompute);
  DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, BeginEvent(), false)));
  DOMINO_RETURN_IF_ERROR(WaitFor(BeginEvent()));
  return ReadTimeline();
}

Status CudaBackend::RunCollective(int32_t id, cuda::Nccl* nccl) {
  if (!options_.lent_nccl || nccl == nullptr)
    return Error(fmt::format("op {} ({}): no NCCL communicator lent to the backend", id,
                             schedule_.Label(id)));
  cuda::NcclUseContext(nccl, context_);
  cuda::UseStream(context_, cuda::StreamKind::kComm);
  nccl_ = nccl;  // borrowed for the call: never finalized here
  Status e = EnqueueCollective(id);
  if (e.ok()) e = Ok(cuda::RecordEvent(context_, EndEvent(id), false), id);
  if (e.ok()) e = WaitFor(EndEvent(id));
  nccl_ = nullptr;
  return e;
}

Status CudaBackend::Run(const Schedule& s, int32_t id) {
  cuda::UseStream(context_, cuda::StreamKind::kCompute);
  DOMINO_RETURN_IF_ERROR(Enqueue(id));
  return Ok(cuda::Synchronize(context_), id);
}

Result<std::vector<float>> CudaBackend::Read(int32_t tensor) const {
  const Tensor& t = schedule_.tensors()[tensor];
  std::vector<float> host(static_cast<size_t>(t.rows * t.cols));
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Download(context_, Whole(tensor), host.data(), Fp32(tensor))));
  return host;
}

Status CudaBackend::Zero(int32_t tensor) {
  if (Fp32(tensor)) {  // fp32 whatever the element type: zeros uploaded as such
    const Tensor& t = schedule_.tensors()[tensor];
    const std::vector<float> zeros(static_cast<size_t>(t.rows * t.cols), 0.0f);
    return Ok(cuda::Upload(context_, Whole(tensor), zeros.data(), true));
  }
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(context_, Whole(tensor))));
  return Ok(cuda::Synchronize(context_));
}

void CudaBackend::FindAccumulators() {
  std::vector<bool> seen(schedule_.tensors().size(), false);
  auto add = [&](const TensorUse& u) {
    if (!seen[u.tensor]) accumulators_.push_back(u.tensor);
    seen[u.tensor] = true;
  };
  for (const Op& op : schedule_.ops()) {
    switch (op.func) {
      case OpFunc::kQkvGradWeight:
      case OpFunc::kProjGradWeight:
      case OpFunc::kFc1GradWeight:
      case OpFunc::kFc2GradWeight:
        add(schedule_.writes(op)[0]);
        break;
      case OpFunc::kLn1Grad:
      case OpFunc::kLn2Grad:
      case OpFunc::kFinalNormGrad:
      case OpFunc::kPostNorm1Grad:
      case OpFunc::kPostNorm2Grad:
        add(schedule_.writes(op)[1]);
        break;
      case OpFunc::kQkNormGrad:
        add(schedule_.writes(op)[2]);
        break;
      case OpFunc::kEmbedGrad:
      case OpFunc::kLmHeadGradWeight:
        add(schedule_.writes(op)[0]);
        break;
      default:
        break;
    }
  }
}

Status CudaBackend::ZeroAccumulators() {
  for (int32_t t : accumulators_) DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(context_, Whole(t))));
  return Status::Ok();
}

Status CudaBackend::AllocateTensors() {
  const std::vector<Tensor>& tensors = schedule_.tensors();
  device_.assign(tensors.size(), nullptr);
  borrowed_.assign(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const int32_t id = static_cast<int32_t>(i);
    // A weight or norm gain of the runner lending them (CudaOptions::weights_from).
    const bool lent =
        options_.weights_from != nullptr && !t.role.gradient &&
        (t.role.kind == TensorKind::kWeight || t.role.kind == TensorKind::kNormWeight);
    if (lent) {
      const cuda::DView there = options_.weights_from->Device(id);
      if (there.rows != t.rows || there.cols != t.cols)
        return Error(fmt::format(
            "CUDA backend: the runner lending weights holds {} as {} x {}, not {} x {} (another "
            "schedule)",
            RoleName(t.role), there.rows, there.cols, t.rows, t.cols));
      device_[i] = there.data;
      borrowed_[i] = true;
      continue;
    }
    // Alloc counts elements of the context's type: fp32 tensors take 4 / its bytes of them each.
    const size_t per = ElementBytes(id) / cuda::DTypeBytes(type_);
    DOMINO_RETURN_IF_ERROR(
        Ok(cuda::Alloc(context_, static_cast<size_t>(t.rows * t.cols) * per, &device_[i])));
    const cuda::DView whole = Whole(static_cast<int32_t>(i));
    if (!IsGiven(t.role) || (options_.random_values && !Ids(id))) {
      DOMINO_RETURN_IF_ERROR(Fp32(id) ? Zero(id) : Ok(cuda::Zero(context_, whole)));
      continue;
    }
    std::vector<float> host(static_cast<size_t>(t.rows * t.cols), 0.0f);
    FillGiven(t, model_, rank_, tp_, seed_, options_.fill, View{0, t.rows, 0, t.cols}, host);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Upload(context_, whole, host.data(), Fp32(id))));
  }
  // The output gradient each residual-gradient op starts the backward pass from, kept on the
  // device so the op is a device copy (no host transfer inside a timed or captured run).
  int64_t stage = 0;
  for (int32_t id = 0; id < size(); ++id) {
    const Op& op = schedule_.op(id);
    if (op.kind == OpKind::kCollective) {
      stage = std::max(
          {stage, Elements(schedule_.reads(op)[0].view), Elements(schedule_.writes(op)[0].view)});
    }
    if (op.func != OpFunc::kResidualGrad) continue;
    const TensorUse& u = schedule_.writes(op)[0];
    const Tensor& t = schedule_.tensors()[u.tensor];
    cuda::DView view{nullptr, u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin,
                     u.view.col_end - u.view.col_begin};
    DOMINO_RETURN_IF_ERROR(
        Ok(cuda::Alloc(context_, static_cast<size_t>(view.rows * view.cols), &view.data)));
    residual_grads_[id] = view;
    if (options_.random_values) {
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(context_, view)));
      continue;
    }
    std::vector<float> host(static_cast<size_t>(t.rows * t.cols), 0.0f);
    FillGiven(t, model_, rank_, tp_, seed_, options_.fill, u.view, host);
    std::vector<float> part;
    for (int64_t r = u.view.row_begin; r < u.view.row_end; ++r)
      part.insert(part.end(), host.begin() + r * t.cols + u.view.col_begin,
                  host.begin() + r * t.cols + u.view.col_end);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Upload(context_, view, part.data())));
  }
  // Contiguous staging for NCCL on strided views (a column slice of a tensor).
  if (options_.comm == CommMode::kNccl && stage > 0) {
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Alloc(context_, static_cast<size_t>(stage), &stage_in_)));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Alloc(context_, static_cast<size_t>(stage), &stage_out_)));
  }
  return Status::Ok();
}

size_t CudaBackend::WorkspaceBytes() const {
  size_t bytes = 0;
  for (int32_t id = 0; id < size(); ++id) {
    const Op& op = schedule_.op(id);
    if (op.kind == OpKind::kAttention)
      bytes = std::max(bytes, cuda::AttentionWorkspaceBytes(op.sequences, op.seq_len, op.heads));
    if (op.kind == OpKind::kCollective && options_.comm == CommMode::kEmulate)
      bytes = std::max(bytes, cuda::EmulationWorkspaceBytes(options_.emulated[id].hbm_bytes));
  }
  return bytes;
}

Status CudaBackend::InitNccl(Communicator& host) {
  if (host.size() != tp_)
    return Error(fmt::format("NCCL collectives need the plan's {} TP ranks launched, not {}", tp_,
                             host.size()));
  return Ok(InitNcclOver(host, context_, options_, &nccl_));
}

Status CudaBackend::EnqueueAll(const std::function<void(size_t, size_t)>& progress) {
  auto use = [&](Stream stream) { cuda::UseStream(context_, StreamOf(stream)); };
  // Both streams start after the origin: the comm stream waits for the compute stream's begin.
  // The accumulators' zeros come before the origin, outside the timeline (inside a graph).
  use(Stream::kCompute);
  DOMINO_RETURN_IF_ERROR(ZeroAccumulators());
  DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, OriginEvent(), true)));
  DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, BeginEvent(), false)));
  use(Stream::kTpComm);
  DOMINO_RETURN_IF_ERROR(Ok(cuda::WaitEvent(context_, BeginEvent())));
  for (int32_t id = 0; id < size(); ++id) {
    const StreamStep& step = steps_[id];
    use(step.stream);
    for (int32_t w : step.wait_for)
      DOMINO_RETURN_IF_ERROR(Ok(cuda::WaitEvent(context_, DoneEvent(w)), id));
    if (schedule_.op(id).kind == OpKind::kCollective && nccl_ != nullptr) {
      // A non-blocking NCCL call finishes enqueueing later, on NCCL's thread: the start event
      // waits behind a gate until it has, so an idle comm stream does not time the host.
      DOMINO_RETURN_IF_ERROR(Ok(cuda::CloseGate(context_), id));
      Status enqueued = Ok(cuda::RecordEvent(context_, StartEvent(id), true), id);
      if (enqueued.ok()) enqueued = EnqueueCollective(id);
      cuda::OpenGate(context_);
      DOMINO_RETURN_IF_ERROR(enqueued);
    } else {
      DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, StartEvent(id), true), id));
      if (schedule_.op(id).kind == OpKind::kCollective) {
        DOMINO_RETURN_IF_ERROR(EnqueueCollective(id));
      } else {
        DOMINO_RETURN_IF_ERROR(Enqueue(id));
      }
    }
    DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, EndEvent(id), true), id));
    if (step.record_done)
      DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, DoneEvent(id), false), id));
    if (progress) progress(static_cast<size_t>(id) + 1, schedule_.size());
  }
  // The compute stream ends after the comm stream (the last event covers both).
  use(Stream::kTpComm);
  DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, BeginEvent(), false)));
  use(Stream::kCompute);
  return Ok(cuda::WaitEvent(context_, BeginEvent()));
}

Status CudaBackend::WaitFor(int event) {
  DOMINO_RETURN_IF_ERROR(
      WaitForEvent(context_, event, nccl_, options_.timeout_s, "GPU's run", &failed_));
  return Ok(cuda::Synchronize(context_));
}

Result<Timeline> CudaBackend::ReadTimeline() {
  Timeline timeline;
  timeline.ops.resize(schedule_.size());
  for (int32_t id = 0; id < size(); ++id) {
    float start = 0, end = 0;
    DOMINO_RETURN_IF_ERROR(
        Ok(cuda::ElapsedMs(context_, OriginEvent(), StartEvent(id), &start), id));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::ElapsedMs(context_, OriginEvent(), EndEvent(id), &end), id));
    timeline.ops[id] = OpTime{start * 1e3, std::max(start, end) * 1e3};
  }
  return timeline;
}

}  // namespace internal

Result<cuda::DType> CudaElementType(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp32:
      return cuda::DType::kF32;
    case Dtype::kBf16:
      return cuda::DType::kBf16;
    case Dtype::kFp16:
      return cuda::DType::kF16;
    case Dtype::kTf32:
    case Dtype::kFp8:
      break;
  }
  return Error(fmt::format("the CUDA backend holds tensors in fp32, bf16 or fp16, not {}",
                           DtypeName(dtype)));
}

Status WaitForEvent(cuda::Context* context, int event, cuda::Nccl* nccl, double timeout_s,
                    std::string_view what, bool* abort) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    bool done = false;
    if (Status queried = cuda::QueryEvent(context, event, &done); !queried.ok())
      return Error("CUDA backend: " + queried.message());
    if (done) return Status::Ok();
    if (nccl != nullptr) {
      if (Status polled = cuda::NcclPoll(nccl); !polled.ok()) {
        *abort = true;
        return Error(fmt::format("NCCL failed during the {}: {}; communicator aborted", what,
                                 polled.message()));
      }
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) {
      *abort = true;
      return Error(
          fmt::format("the {} has not finished after {:.0f} s (a peer has died or hangs, "
                      "or the timeout of {:g} s is too short); aborting",
                      what, waited, timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Rank 0's unique id carried bit for bit as 32 floats of an all-gather over `host`.
Status InitNcclOver(Communicator& host, cuda::Context* context, const CudaOptions& options,
                    cuda::Nccl** out) {
  std::string id;
  if (host.rank() == 0) DOMINO_RETURN_IF_ERROR(cuda::NcclUniqueId(&id));
  constexpr int kFloats = 32;
  std::vector<float> mine(kFloats, 0.0f), all(static_cast<size_t>(kFloats * host.size()));
  if (host.rank() == 0) std::memcpy(mine.data(), id.data(), std::min<size_t>(id.size(), 128));
  DOMINO_RETURN_IF_ERROR(host.AllGather(mine.data(), all.data(), kFloats));
  id.assign(reinterpret_cast<const char*>(all.data()), 128);
  cuda::NcclConfig config;
  config.min_ctas = options.min_ctas;
  config.max_ctas = options.max_ctas;
  config.timeout_s = options.timeout_s;
  return cuda::NcclInit(context, host.rank(), host.size(), id, config, out);
}

Result<std::unique_ptr<CudaRunner>> MakeCudaRunner(const Schedule& schedule, const ModelSpec& model,
                                                   int rank, int tp, uint64_t seed,
                                                   const CudaOptions& options, Communicator& host) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.error();
  if (options.device < 0 || options.device >= static_cast<int>(devices->size()))
    return Error(
        fmt::format("CUDA device {} does not exist ({} visible)", options.device, devices->size()));
  auto backend = std::make_unique<internal::CudaBackend>(schedule, model, options);
  DOMINO_RETURN_IF_ERROR(backend->Init(rank, tp, seed, host));
  return std::unique_ptr<CudaRunner>(std::move(backend));
}

}  // namespace domino::exec
