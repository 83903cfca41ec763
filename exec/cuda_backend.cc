#include "exec/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "exec/nccl_ops.h"
#include "exec/stream_plan.h"

namespace domino::exec {
namespace {

constexpr float kNormEps = 1e-5f;  // as the CPU backend

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

// The context's CUDA stream that runs a Schedule stream's ops (PlanStreams admits only these two).
cuda::StreamKind StreamOf(Stream stream) {
  return stream == Stream::kCompute ? cuda::StreamKind::kCompute : cuda::StreamKind::kComm;
}

class CudaBackend final : public Backend, public CudaRunner {
 public:
  CudaBackend(const Schedule& schedule, const ModelSpec& model, const CudaOptions& options)
      : schedule_(schedule), model_(model), options_(options) {}
  ~CudaBackend() override {
    // First the graph: NCCL's finalize (and abort) waits until no graph holds work of its
    // communicator, so a graph destroyed after it is a hang.
    cuda::DestroyGraph(context_);
    if (nccl_ != nullptr) {
      if (failed_)
        cuda::NcclAbort(nccl_);
      else
        cuda::NcclDestroy(nccl_);
    }
    for (void* p : device_) cuda::Free(p);
    for (auto& [id, view] : residual_grads_) cuda::Free(view.data);
    cuda::Free(stage_in_);
    cuda::Free(stage_out_);
    cuda::Destroy(context_);
  }

  Status Init(int rank, int tp, uint64_t seed, Communicator& host) {
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

  Backend& backend() override { return *this; }

  Result<Timeline> Run(Communicator& host,
                       const std::function<void(size_t, size_t)>& progress) override {
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

  Result<double> TimeOp(int32_t id, int repeats) override {
    const bool collective = schedule_.op(id).kind == OpKind::kCollective;
    if (collective && nccl_ == nullptr && options_.comm != CommMode::kEmulate)
      return Error(fmt::format("op {} ({}): timing a collective needs NCCL or its emulation", id,
                               schedule_.Label(id)));
    cuda::UseStream(context_, collective ? cuda::StreamKind::kComm : cuda::StreamKind::kCompute);
    auto once = [&] { return collective ? EnqueueCollective(id) : Enqueue(id); };
    return TimeMedian(id, repeats, once, {});
  }

  // nccl-tests' way: a warm-up, then per batch a barrier and kBatch back-to-back calls queued
  // behind a gate, so the events time the GPU's work and not the host's enqueueing.
  Result<double> TimeCollective(int32_t id, int repeats, Communicator& host) override {
    if (schedule_.op(id).kind != OpKind::kCollective)
      return Error(fmt::format("op {} ({}) is not a collective", id, schedule_.Label(id)));
    if (nccl_ == nullptr && options_.comm != CommMode::kEmulate)
      return Error(fmt::format("op {} ({}): timing a collective needs NCCL or its emulation", id,
                               schedule_.Label(id)));
    constexpr int kWarmup = 5, kBatch = 10;
    cuda::UseStream(context_, cuda::StreamKind::kComm);
    for (int i = 0; i < kWarmup; ++i) DOMINO_RETURN_IF_ERROR(EnqueueCollective(id));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, EndEvent(0), true), id));
    DOMINO_RETURN_IF_ERROR(WaitFor(EndEvent(0)));
    std::vector<double> us;
    for (int b = 0; b < std::max(1, repeats); ++b) {
      float token = 0;
      DOMINO_RETURN_IF_ERROR(host.AllReduce(&token, 1));  // a barrier: every rank starts together
      DOMINO_RETURN_IF_ERROR(Ok(cuda::CloseGate(context_), id));
      Status enqueued = Ok(cuda::RecordEvent(context_, StartEvent(0), true), id);
      for (int i = 0; i < kBatch && enqueued.ok(); ++i) enqueued = EnqueueCollective(id);
      cuda::OpenGate(context_);
      DOMINO_RETURN_IF_ERROR(enqueued);
      DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, EndEvent(0), true), id));
      DOMINO_RETURN_IF_ERROR(WaitFor(EndEvent(0)));
      float ms = 0;
      DOMINO_RETURN_IF_ERROR(Ok(cuda::ElapsedMs(context_, StartEvent(0), EndEvent(0), &ms), id));
      us.push_back(ms * 1e3 / kBatch);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  Status FillRandom(uint64_t seed) override {
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
    cuda::UseStream(context_, cuda::StreamKind::kCompute);
    // Token ids and labels keep their values (random ones would all look up row 0); the fp32 loss
    // statistics are computed before anything reads them.
    for (int32_t t = 0; t < static_cast<int32_t>(device_.size()); ++t)
      if (!Fp32(t)) DOMINO_RETURN_IF_ERROR(Ok(cuda::FillRandom(context_, Whole(t), seed + t)));
    uint64_t salt = device_.size();
    for (auto& [id, view] : residual_grads_)
      DOMINO_RETURN_IF_ERROR(Ok(cuda::FillRandom(context_, view, seed + salt++)));
    return Ok(cuda::Synchronize(context_));
  }

  Result<double> TimeOpBeside(int32_t id, const EmulatedCollective& beside, int repeats) override {
    if (schedule_.op(id).kind == OpKind::kCollective)
      return Error(
          fmt::format("op {} ({}) is a collective, not a compute op", id, schedule_.Label(id)));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Reserve(
        context_, std::max(WorkspaceBytes(), cuda::EmulationWorkspaceBytes(beside.hbm_bytes)))));
    auto collective = [&]() -> Status {
      cuda::UseStream(context_, cuda::StreamKind::kComm);
      Status s =
          Ok(cuda::EmulateCollective(context_, beside.ctas, beside.hbm_bytes, beside.us), id);
      cuda::UseStream(context_, cuda::StreamKind::kCompute);
      return s;
    };
    return TimeMedian(
        id, repeats, [&] { return Enqueue(id); }, collective);
  }

  Result<double> GemmTflops(int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                            bool fp8) override {
    double tflops = 0;
    DOMINO_RETURN_IF_ERROR(
        Ok(cuda::MeasureGemmTflops(context_, m, n, k, warmup, repeats, fp8, &tflops)));
    return tflops;
  }

  Result<std::vector<double>> SoakGemm(int64_t n, double seconds, double window_s,
                                       bool fp8) override {
    std::vector<double> tflops;
    DOMINO_RETURN_IF_ERROR(Ok(cuda::SoakGemm(context_, n, seconds, window_s, fp8, &tflops)));
    return tflops;
  }

  Result<double> HbmGBps(size_t bytes) override {
    double GBps = 0;
    DOMINO_RETURN_IF_ERROR(Ok(cuda::MeasureHbmGBps(context_, bytes, 10, &GBps)));
    return GBps;
  }

  Result<cuda::LaunchOverhead> LaunchOverhead(int kernels, int repeats) override {
    cuda::LaunchOverhead overhead;
    DOMINO_RETURN_IF_ERROR(Ok(cuda::MeasureLaunchUs(context_, kernels, repeats, &overhead)));
    return overhead;
  }

  cuda::Context* context() override { return context_; }
  cuda::DView Device(int32_t tensor) const override { return Whole(tensor); }

  Status RunCollective(int32_t id, cuda::Nccl* nccl) override {
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

  // Runs compute op `id` to completion (the interpreter's one-at-a-time mode).
  Status Run(const Schedule& s, int32_t id) override {
    cuda::UseStream(context_, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(Enqueue(id));
    return Ok(cuda::Synchronize(context_), id);
  }

  Status Pack(const TensorUse& use, float* out) const override {
    return Ok(cuda::Download(context_, Of(use), out, Fp32(use.tensor)));
  }
  Status Unpack(const TensorUse& use, const float* in) override {
    return Ok(cuda::Upload(context_, Of(use), in, Fp32(use.tensor)));
  }
  Result<std::vector<float>> Read(int32_t tensor) const override {
    const Tensor& t = schedule_.tensors()[tensor];
    std::vector<float> host(static_cast<size_t>(t.rows * t.cols));
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Download(context_, Whole(tensor), host.data(), Fp32(tensor))));
    return host;
  }
  Status Zero(int32_t tensor) override {
    if (Fp32(tensor)) {  // fp32 whatever the element type: zeros uploaded as such
      const Tensor& t = schedule_.tensors()[tensor];
      const std::vector<float> zeros(static_cast<size_t>(t.rows * t.cols), 0.0f);
      return Ok(cuda::Upload(context_, Whole(tensor), zeros.data(), true));
    }
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(context_, Whole(tensor))));
    return Ok(cuda::Synchronize(context_));
  }

 private:
  // Per op: start and end (timing events) and done (ordering another stream); then the run's
  // begin (ordering) and origin (timing).
  static constexpr int kEventsPerOp = 3;
  int size() const { return static_cast<int>(schedule_.size()); }
  int StartEvent(int op) const { return kEventsPerOp * op; }
  int EndEvent(int op) const { return kEventsPerOp * op + 1; }
  int DoneEvent(int op) const { return kEventsPerOp * op + 2; }
  int BeginEvent() const { return kEventsPerOp * size(); }
  int OriginEvent() const { return kEventsPerOp * size() + 1; }

  // A CUDA call's status, with what failed: the backend, or op `id`.
  static Status Ok(Status status) {
    if (status.ok()) return status;
    return Error("CUDA backend: " + status.message());
  }
  Status Ok(Status status, int32_t id) const {
    if (status.ok()) return status;
    return Error(fmt::format("op {} ({}): CUDA: {}", id, schedule_.Label(id), status.message()));
  }

  // The tensors the backend's kernels add to rather than overwrite: weight gradients (their GEMMs
  // accumulate over row slices) and norm-weight gradients (dgamma +=). Every run starts them from
  // zero, so a run computes one micro-batch's gradients whatever ran before it (the eager warm-up
  // before a graph's capture, earlier iterations).
  void FindAccumulators() {
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
          add(schedule_.writes(op)[1]);
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

  // Enqueues zeros into every accumulator on the current stream.
  Status ZeroAccumulators() {
    for (int32_t t : accumulators_) DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(context_, Whole(t))));
    return Status::Ok();
  }

  Status AllocateTensors() {
    const std::vector<Tensor>& tensors = schedule_.tensors();
    device_.assign(tensors.size(), nullptr);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      const int32_t id = static_cast<int32_t>(i);
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
      cuda::DView view{nullptr, u.view.row_end - u.view.row_begin,
                       u.view.col_end - u.view.col_begin, u.view.col_end - u.view.col_begin};
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

  size_t WorkspaceBytes() const {
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

  // NCCL over the plan's TP group, bootstrapped through the launch communicator.
  Status InitNccl(Communicator& host) {
    if (host.size() != tp_)
      return Error(fmt::format("NCCL collectives need the plan's {} TP ranks launched, not {}", tp_,
                               host.size()));
    return Ok(InitNcclOver(host, context_, options_, &nccl_));
  }

  // Enqueues compute op `id` on the current stream.
  Status Enqueue(int32_t id) {
    const Op& op = schedule_.op(id);
    std::span<const TensorUse> reads = schedule_.reads(op), writes = schedule_.writes(op);
    auto in = [&](size_t i) { return Of(reads[i]); };
    auto out = [&](size_t i) { return Of(writes[i]); };
    Status e;
    switch (op.func) {
      case OpFunc::kQkv:
      case OpFunc::kProj:
      case OpFunc::kFc1:
      case OpFunc::kFc2:
        e = cuda::Gemm(context_, in(0), false, in(1), false, out(0), false);
        break;
      case OpFunc::kQkvGradInput:
      case OpFunc::kProjGradInput:
      case OpFunc::kFc1GradInput:
      case OpFunc::kFc2GradInput:
        e = cuda::Gemm(context_, in(0), false, in(1), true, out(0), false);
        break;
      case OpFunc::kQkvGradWeight:
      case OpFunc::kProjGradWeight:
      case OpFunc::kFc1GradWeight:
      case OpFunc::kFc2GradWeight:
        e = cuda::Gemm(context_, in(0), true, in(1), false, out(0), true);
        break;
      case OpFunc::kAttn:
        e = cuda::Attention(context_, op.sequences, op.seq_len, op.heads, op.kv_heads, op.head_dim,
                            in(0), out(0));
        break;
      case OpFunc::kAttnGrad:
        e = cuda::AttentionBackward(context_, op.sequences, op.seq_len, op.heads, op.kv_heads,
                                    op.head_dim, in(0), in(1), out(0));
        break;
      case OpFunc::kRope:
      case OpFunc::kRopeGrad:  // in place: reads and writes the same view
        e = cuda::Rope(context_, op.heads, op.kv_heads, op.head_dim, op.seq_len,
                       std::max(options_.fill.cp, 1), options_.fill.cp_rank,
                       op.func == OpFunc::kRopeGrad, out(0));
        break;
      case OpFunc::kAct:
        e = Swiglu()        ? cuda::Swiglu(context_, in(0), out(0))
            : SquaredRelu() ? cuda::SquaredRelu(context_, in(0), out(0))
                            : cuda::Gelu(context_, in(0), out(0));
        break;
      case OpFunc::kActGrad:
        e = Swiglu()        ? cuda::SwigluBackward(context_, in(0), in(1), out(0))
            : SquaredRelu() ? cuda::SquaredReluBackward(context_, in(0), in(1), out(0))
                            : cuda::GeluBackward(context_, in(0), in(1), out(0));
        break;
      case OpFunc::kLn1:
      case OpFunc::kLn2:
        e = cuda::NormForward(context_, Rms(), in(0), in(1).data, kNormEps, out(0));
        break;
      case OpFunc::kLn1Grad:
      case OpFunc::kLn2Grad:
        // dx = the residual gradient + the norm's backward; dgamma accumulates.
        if (in(3).data != out(0).data) e = cuda::Copy(context_, in(3), out(0));
        if (e.ok())
          e = cuda::NormBackward(context_, Rms(), in(0), in(2).data, kNormEps, in(1), out(0), true,
                                 out(1).data);
        break;
      case OpFunc::kResidual1:
      case OpFunc::kResidual2:
        e = cuda::Add(context_, in(0), in(1), out(0));
        break;
      case OpFunc::kResidualGrad:
        e = cuda::Copy(context_, residual_grads_.at(id), out(0));
        break;
      // The model's ends, as the CPU backend runs them (exec/cpu_backend.cc).
      case OpFunc::kEmbed:
      case OpFunc::kEmbedGrad: {
        const bool backward = op.func == OpFunc::kEmbedGrad;
        const TensorUse& table = backward ? writes[0] : reads[1];
        const int64_t vocab_begin =
            WholeIndex(schedule_.tensors()[table.tensor], rank_, tp_, 0, 0).rows;
        e = backward ? cuda::EmbeddingBackward(context_, in(0), vocab_begin, in(1), out(0))
                     : cuda::Embedding(context_, in(0), vocab_begin, in(1), out(0));
        break;
      }
      case OpFunc::kFinalNorm:
        e = cuda::NormForward(context_, Rms(), in(0), in(1).data, kNormEps, out(0));
        break;
      case OpFunc::kFinalNormGrad:
        e = cuda::NormBackward(context_, Rms(), in(0), in(2).data, kNormEps, in(1), out(0), false,
                               out(1).data);
        break;
      case OpFunc::kLmHead:  // the weight is vocabulary-major: logits = x W^T
        e = cuda::Gemm(context_, in(0), false, in(1), true, out(0), false);
        break;
      case OpFunc::kLmHeadGradInput:  // dx = dlogits W
        e = cuda::Gemm(context_, in(0), false, in(1), false, out(0), false);
        break;
      case OpFunc::kLmHeadGradWeight:  // dW += dlogits^T x
        e = cuda::Gemm(context_, in(0), true, in(1), false, out(0), true);
        break;
      case OpFunc::kLoss:
      case OpFunc::kLossGrad: {
        const Tensor& logits = schedule_.tensors()[reads[0].tensor];
        const int64_t vocab_begin = WholeIndex(logits, rank_, tp_, 0, reads[0].view.col_begin).cols;
        e = op.func == OpFunc::kLoss
                ? cuda::CrossEntropyStats(context_, in(0), in(1), vocab_begin, model_.vocab, rank_,
                                          out(0))
                : cuda::CrossEntropyBackward(context_, in(0), in(1), in(2), vocab_begin,
                                             model_.vocab, WholeShape(logits, tp_).rows, out(0));
        break;
      }
      default:
        return Error(fmt::format("op {} ({}): not a compute op the CUDA backend runs", id,
                                 schedule_.Label(id)));
    }
    return Ok(e, id);
  }

  static bool Contiguous(const cuda::DView& v) { return v.stride == v.cols || v.rows == 1; }

  // A part of a decomposed all-gather or reduce-scatter (Op::part of Op::parts: rows [lo, hi) of
  // the slice's R gathered rows, as the interpreter's RunCollectivePart has it): each rank whose
  // shard holds some of those rows broadcasts them to every rank (all-gather), or has their sums
  // reduced to it (reduce-scatter), all in one NCCL group: only the part's rows move.
  Status EnqueuePart(int32_t id) {
    const Op& op = schedule_.op(id);
    const bool gather = op.collective == CollectiveOp::kAllGather;
    const cuda::DView in = Of(schedule_.reads(op)[0]), out = Of(schedule_.writes(op)[0]);
    const cuda::DView& shard = gather ? in : out;
    const cuda::DView& part = gather ? out : in;
    const int64_t cols = shard.cols, shard_rows = shard.rows, part_rows = part.rows;
    if ((!gather && op.collective != CollectiveOp::kReduceScatter) || part.cols != cols ||
        part_rows * op.parts != shard_rows * tp_ || op.part < 0 || op.part >= op.parts)
      return Error(fmt::format(
          "op {} ({}): part {} of {} does not fit a {} of {} rows over {} ranks", id,
          schedule_.Label(id), op.part, op.parts, OpFuncName(op.func), shard_rows * tp_, tp_));
    const int64_t lo = op.part * part_rows, hi = lo + part_rows;
    const size_t bytes = cuda::DTypeBytes(cuda::TypeOf(context_));
    Status e;
    const char* src = static_cast<const char*>(in.data);
    if (!Contiguous(in)) {
      e = cuda::Copy(context_, in, cuda::DView{stage_in_, in.rows, in.cols, in.cols});
      src = static_cast<const char*>(stage_in_);
    }
    char* dst = static_cast<char*>(out.data);
    if (!Contiguous(out)) {
      // A reduce-scatter part writes some rows of the shard: the others must come back as they
      // were.
      if (e.ok() && !gather)
        e = cuda::Copy(context_, out, cuda::DView{stage_out_, out.rows, out.cols, out.cols});
      dst = static_cast<char*>(stage_out_);
    }
    std::vector<cuda::NcclPiece> pieces;
    for (int q = 0; q < tp_; ++q) {
      const int64_t a = std::max(lo, q * shard_rows), b = std::min(hi, (q + 1) * shard_rows);
      if (a >= b) continue;
      const size_t in_row = static_cast<size_t>(gather ? a - q * shard_rows : a - lo);
      const size_t out_row = static_cast<size_t>(gather ? a - lo : a - q * shard_rows);
      pieces.push_back(cuda::NcclPiece{src + in_row * cols * bytes, dst + out_row * cols * bytes,
                                       (b - a) * cols, q});
    }
    if (e.ok())
      e = gather ? cuda::NcclBroadcasts(nccl_, pieces.data(), static_cast<int>(pieces.size()))
                 : cuda::NcclReduces(nccl_, pieces.data(), static_cast<int>(pieces.size()));
    if (e.ok() && dst == stage_out_)
      e = cuda::Copy(context_, cuda::DView{stage_out_, out.rows, out.cols, out.cols}, out);
    if (!e.ok()) failed_ = true;
    return Ok(e, id);
  }

  // Enqueues collective `id` on the comm stream: NCCL, or its emulation.
  Status EnqueueCollective(int32_t id) {
    const Op& op = schedule_.op(id);
    if (options_.comm == CommMode::kEmulate) {
      const EmulatedCollective& e = options_.emulated[id];
      return Ok(cuda::EmulateCollective(context_, e.ctas, e.hbm_bytes, e.us), id);
    }
    if (op.parts > 1) return EnqueuePart(id);
    const cuda::DView in = Of(schedule_.reads(op)[0]), out = Of(schedule_.writes(op)[0]);
    const int64_t n_in = in.rows * in.cols, n_out = out.rows * out.cols;
    const bool fits = (op.collective == CollectiveOp::kAllReduce && n_in == n_out) ||
                      (op.collective == CollectiveOp::kReduceScatter && n_in == n_out * tp_) ||
                      (op.collective == CollectiveOp::kAllGather && n_out == n_in * tp_);
    if (!fits)
      return Error(fmt::format("op {} ({}): buffer sizes {} and {} do not fit a {} over {} ranks",
                               id, schedule_.Label(id), n_in, n_out, OpFuncName(op.func), tp_));
    // fp32 tensors (the loss statistics) are all-reduced whole rows at a time, never staged in
    // the element type.
    const bool f32 = Fp32(schedule_.reads(op)[0].tensor);
    if (f32 && (op.collective != CollectiveOp::kAllReduce || !Contiguous(in) || !Contiguous(out)))
      return Error(fmt::format("op {} ({}): an fp32 tensor takes only a contiguous all-reduce", id,
                               schedule_.Label(id)));
    Status e;
    const void* src = in.data;
    if (!Contiguous(in)) {
      e = cuda::Copy(context_, in, cuda::DView{stage_in_, in.rows, in.cols, in.cols});
      src = stage_in_;
    }
    void* dst = Contiguous(out) ? out.data : stage_out_;
    if (e.ok()) {
      switch (op.collective) {
        case CollectiveOp::kAllReduce:
          e = cuda::NcclAllReduce(nccl_, src, dst, n_in, f32);
          break;
        case CollectiveOp::kReduceScatter:
          e = cuda::NcclReduceScatter(nccl_, src, dst, n_out);
          break;
        case CollectiveOp::kAllGather:
          e = cuda::NcclAllGather(nccl_, src, dst, n_in);
          break;
        case CollectiveOp::kNone:
          e = Error("not a collective");
          break;
      }
    }
    if (e.ok() && dst == stage_out_)
      e = cuda::Copy(context_, cuda::DView{stage_out_, out.rows, out.cols, out.cols}, out);
    if (!e.ok()) failed_ = true;
    return Ok(e, id);
  }

  // Enqueues the whole schedule on the two streams as PlanStreams says, with timing events
  // around every op.
  Status EnqueueAll(const std::function<void(size_t, size_t)>& progress) {
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

  // Median of `repeats` timed runs of `once` (after a warm-up) on the current stream, each after
  // `before` (work for another stream, or nothing).
  template <typename Once>
  Result<double> TimeMedian(int32_t id, int repeats, Once once,
                            const std::function<Status()>& before) {
    repeats = std::max(1, repeats);
    std::vector<double> us;
    for (int i = -1; i < repeats; ++i) {
      if (before) DOMINO_RETURN_IF_ERROR(before());
      DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, StartEvent(0), true), id));
      DOMINO_RETURN_IF_ERROR(once());
      DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(context_, EndEvent(0), true), id));
      DOMINO_RETURN_IF_ERROR(WaitFor(EndEvent(0)));
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_), id));
      float ms = 0;
      DOMINO_RETURN_IF_ERROR(Ok(cuda::ElapsedMs(context_, StartEvent(0), EndEvent(0), &ms), id));
      if (i >= 0) us.push_back(ms * 1e3);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  // Waits until `event` has happened (WaitForEvent); a failed or silent NCCL peer ends in an
  // error and an abort instead of a hang.
  Status WaitFor(int event) {
    DOMINO_RETURN_IF_ERROR(
        WaitForEvent(context_, event, nccl_, options_.timeout_s, "GPU's run", &failed_));
    return Ok(cuda::Synchronize(context_));
  }

  Result<Timeline> ReadTimeline() {
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

  bool Rms() const { return model_.norm == Norm::kRmsNorm; }
  bool Swiglu() const { return model_.activation == Activation::kSwiglu; }
  bool SquaredRelu() const { return model_.activation == Activation::kSquaredRelu; }
  // Token ids and labels are fp32 whatever the element type (exact for every vocabulary), and so
  // are the loss statistics (each part's log-sum-exp and the label's logit): in bf16 a
  // log-sum-exp near 9 rounds by up to 0.03, which would scale every logit's gradient by 3%.
  bool Ids(int32_t tensor) const { return IsTokens(schedule_.tensors()[tensor].role); }
  bool Fp32(int32_t tensor) const {
    return Ids(tensor) || schedule_.tensors()[tensor].role.kind == TensorKind::kLoss;
  }
  size_t ElementBytes(int32_t tensor) const {
    return Fp32(tensor) ? sizeof(float) : cuda::DTypeBytes(type_);
  }
  cuda::DView Of(const TensorUse& u) const {
    const Tensor& t = schedule_.tensors()[u.tensor];
    const size_t offset =
        static_cast<size_t>(u.view.row_begin * t.cols + u.view.col_begin) * ElementBytes(u.tensor);
    return cuda::DView{static_cast<char*>(device_[u.tensor]) + offset,
                       u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin,
                       t.cols};
  }
  cuda::DView Whole(int32_t id) const {
    const Tensor& t = schedule_.tensors()[id];
    return cuda::DView{device_[id], t.rows, t.cols, t.cols};
  }

  const Schedule& schedule_;
  ModelSpec model_;
  CudaOptions options_;
  cuda::DType type_ = cuda::DType::kF32;
  int rank_ = 0, tp_ = 1;
  uint64_t seed_ = 1;
  cuda::Context* context_ = nullptr;
  cuda::Nccl* nccl_ = nullptr;
  bool failed_ = false;  // NCCL failed: abort rather than finalize
  bool captured_ = false;
  std::vector<void*> device_;
  std::vector<int32_t> accumulators_;  // tensors the kernels add to (FindAccumulators)
  std::map<int32_t, cuda::DView> residual_grads_;
  void* stage_in_ = nullptr;
  void* stage_out_ = nullptr;
  std::vector<StreamStep> steps_;
};

}  // namespace

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
  auto backend = std::make_unique<CudaBackend>(schedule, model, options);
  DOMINO_RETURN_IF_ERROR(backend->Init(rank, tp, seed, host));
  return std::unique_ptr<CudaRunner>(std::move(backend));
}

}  // namespace domino::exec
