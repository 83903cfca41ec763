// A whole step's device transport (exec/step_device.h) on CUDA and NCCL.
#include "exec/step_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"
#include "exec/nccl_ops.h"

namespace domino::exec {
namespace {

// The events of each context: 0 marks what a wait waits for, 1 orders its compute stream before
// its comm stream.
constexpr int kWaitEvent = 0, kReadyEvent = 1;

// `count` contiguous fp32 elements as a view of an fp32 context: rows of up to 1024, so the
// kernels' row blocks spread over the GPU.
cuda::DView Flat(const float* data, int64_t count) {
  const int64_t cols = std::gcd(count, int64_t{1024});
  return cuda::DView{const_cast<float*>(data), cols > 0 ? count / cols : 0, cols, cols};
}

int64_t Elements(const cuda::DView& v) { return v.rows * v.cols; }

// A context and the NCCL communicators whose calls run on its comm stream.
struct Lane {
  cuda::Context* context = nullptr;
  cuda::Nccl* nccl = nullptr;  // a pipeline link's; the fp32 lane keeps its two apart
};

// One direction between two pipeline stages: a two-rank communicator whose sender is rank 0, on
// a stream of its own at each end, with the staging buffers of its sends (a + b) in flight.
struct Link {
  int from = 0, to = 0;
  Lane lane;
  std::vector<std::pair<void*, int64_t>> staging;  // buffer, elements
  size_t staged = 0;                               // buffers in use this step
};

class DeviceStep final : public StepDevice {
 public:
  explicit DeviceStep(const CudaOptions& options) : options_(options) {}

  ~DeviceStep() override {
    auto end = [&](cuda::Nccl* n) {
      if (n == nullptr) return;
      if (failed_)
        cuda::NcclAbort(n);
      else
        cuda::NcclDestroy(n);
    };
    for (Link& link : links_) end(link.lane.nccl);
    end(dp_);
    end(tp_);
    end(tp_typed_);
    for (Link& link : links_)
      for (auto& [buffer, elements] : link.staging) cuda::Free(buffer);
    for (void* p : buffers_) cuda::Free(p);
    for (Link& link : links_) cuda::Destroy(link.lane.context);
    cuda::Destroy(f32_);
  }

  Status Init(std::span<const std::pair<int, int>> links, Communicator& tp, Communicator& pp,
              Communicator& dp) {
    Result<cuda::DType> type = CudaElementType(options_.dtype);
    if (!type.ok()) return type.error();
    type_ = *type;
    DOMINO_RETURN_IF_ERROR(NewContext(cuda::DType::kF32, &f32_));
    dp_rank_ = dp.rank();
    // Groups of one need no communicator: their collectives are the identity.
    if (tp.size() > 1) {
      DOMINO_RETURN_IF_ERROR(Ok(InitNcclOver(tp, f32_, options_, &tp_)));
      // Bound to each runner's context in turn (TpCollective).
      DOMINO_RETURN_IF_ERROR(Ok(InitNcclOver(tp, f32_, options_, &tp_typed_)));
    }
    if (dp.size() > 1) DOMINO_RETURN_IF_ERROR(Ok(InitNcclOver(dp, f32_, options_, &dp_)));
    // Every rank of the pipeline splits off every link in the same order, so each link's
    // two-rank NCCL bootstrap meets its peer's.
    const std::set<std::pair<int, int>> ordered(links.begin(), links.end());
    const int me = pp.rank();
    for (const auto& [from, to] : ordered) {
      const bool member = me == from || me == to;
      Result<std::unique_ptr<Communicator>> pair = pp.Split(member ? 1 : 0, me == from ? 0 : 1);
      if (!pair.ok()) return pair.error();
      if (!member) continue;
      links_.push_back(Link{from, to, {}, {}, 0});  // owned before anything can fail
      Lane& lane = links_.back().lane;
      DOMINO_RETURN_IF_ERROR(NewContext(type_, &lane.context));
      DOMINO_RETURN_IF_ERROR(Ok(InitNcclOver(**pair, lane.context, options_, &lane.nccl)));
    }
    me_ = me;
    return Status::Ok();
  }

  Result<float*> Floats(int64_t count) override {
    void* data = nullptr;
    DOMINO_RETURN_IF_ERROR(
        Ok(cuda::Alloc(f32_, static_cast<size_t>(std::max<int64_t>(1, count)), &data)));
    buffers_.push_back(data);
    DOMINO_RETURN_IF_ERROR(Zero(static_cast<float*>(data), count));
    return static_cast<float*>(data);
  }

  Status Zero(float* data, int64_t count) override {
    cuda::UseStream(f32_, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Zero(f32_, Flat(data, count))));
    return Ok(cuda::Synchronize(f32_));
  }

  Status Upload(const float* host, float* data, int64_t count) override {
    cuda::UseStream(f32_, cuda::StreamKind::kCompute);
    return Ok(cuda::Upload(f32_, Flat(data, count), host, true));
  }

  Status Download(const float* data, float* host, int64_t count) override {
    cuda::UseStream(f32_, cuda::StreamKind::kCompute);
    return Ok(cuda::Download(f32_, Flat(data, count), host, true));
  }

  // One runner at a time: each adds into the same elements from its own stream.
  Status Accumulate(std::span<CudaRunner* const> runners, int32_t tensor, float* data,
                    float scale) override {
    for (CudaRunner* r : runners) {
      cuda::UseStream(r->context(), cuda::StreamKind::kCompute);
      DOMINO_RETURN_IF_ERROR(Ok(cuda::AccumulateF32(r->context(), r->Device(tensor), data, scale)));
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(r->context())));
    }
    return Status::Ok();
  }

  Status Add(const float* src, float* data, int64_t count) override {
    cuda::UseStream(f32_, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::AccumulateF32(f32_, Flat(src, count), data, 1.0f)));
    return Ok(cuda::Synchronize(f32_));
  }

  Status Store(const float* data, std::span<CudaRunner* const> runners, int32_t tensor) override {
    for (CudaRunner* r : runners) {
      cuda::UseStream(r->context(), cuda::StreamKind::kCompute);
      DOMINO_RETURN_IF_ERROR(Ok(cuda::StoreF32(r->context(), data, r->Device(tensor))));
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(r->context())));
    }
    return Status::Ok();
  }

  Status Adam(float* master, float* m, float* v, const float* grad, int64_t count,
              const AdamOptions& adam, int step) override {
    cuda::AdamStep a;
    a.lr = static_cast<float>(adam.lr);
    a.beta1 = static_cast<float>(adam.beta1), a.beta2 = static_cast<float>(adam.beta2);
    a.eps = static_cast<float>(adam.eps);
    a.c1 = static_cast<float>(1 - std::pow(adam.beta1, step));
    a.c2 = static_cast<float>(1 - std::pow(adam.beta2, step));
    cuda::UseStream(f32_, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::AdamF32(f32_, master, m, v, grad, count, a)));
    return Ok(cuda::Synchronize(f32_));
  }

  Status AllReduceTp(float* data, int64_t count) override {
    if (tp_ == nullptr) return Status::Ok();
    return Collective(tp_, "TP all-reduce",
                      [&] { return cuda::NcclAllReduce(tp_, data, data, count); });
  }
  Status AllReduceDp(float* data, int64_t count) override {
    if (dp_ == nullptr) return Status::Ok();
    return Collective(dp_, "DP all-reduce",
                      [&] { return cuda::NcclAllReduce(dp_, data, data, count); });
  }
  Status ReduceScatterDp(float* data, int64_t shard) override {
    if (dp_ == nullptr) return Status::Ok();
    return Collective(dp_, "DP reduce-scatter", [&] {
      return cuda::NcclReduceScatter(dp_, data, data + dp_rank_ * shard, shard);
    });
  }
  Status AllGatherDp(float* data, int64_t shard) override {
    if (dp_ == nullptr) return Status::Ok();
    return Collective(dp_, "DP all-gather", [&] {
      return cuda::NcclAllGather(dp_, data + dp_rank_ * shard, data, shard);
    });
  }

  Status TpCollective(CudaRunner& runner, int32_t id) override {
    if (tp_typed_ == nullptr) return Error("CUDA step: a TP collective without a TP group");
    if (Status run = runner.RunCollective(id, tp_typed_); !run.ok()) {
      failed_ = true;
      return run;
    }
    return Status::Ok();
  }

  Status SendSum(CudaRunner& runner, int32_t a, int32_t b, std::span<const DroppedRows> dropout,
                 int peer) override {
    Result<Link*> found = LinkOf(me_, peer);
    if (!found.ok()) return found.error();
    Link& link = **found;
    const cuda::DView x = runner.Device(a), y = runner.Device(b);
    if (x.rows != y.rows || x.cols != y.cols)
      return Error("pipeline send: the output's parts differ in shape");
    Result<void*> stage = Staging(link, Elements(x));
    if (!stage.ok()) return stage.error();
    cuda::Context* c = link.lane.context;
    cuda::UseStream(c, cuda::StreamKind::kCompute);
    const cuda::DView sum{*stage, x.rows, x.cols, x.cols};
    // Row runs: each with its branch's dropout (one run, none, without it).
    const size_t bytes = cuda::DTypeBytes(type_);
    auto rows = [&](cuda::DView v, int64_t begin, int64_t end) {
      return cuda::DView{static_cast<char*>(v.data) + begin * v.stride * bytes, end - begin, v.cols,
                         v.stride};
    };
    if (dropout.empty()) DOMINO_RETURN_IF_ERROR(Ok(cuda::Add(c, x, y, sum)));
    for (const DroppedRows& run : dropout) {
      if (run.row_begin < 0 || run.row_end > x.rows || run.row_begin > run.row_end)
        return Error("pipeline send: a dropout's rows outside the output");
      DOMINO_RETURN_IF_ERROR(
          Ok(cuda::Add(c, rows(x, run.row_begin, run.row_end), rows(y, run.row_begin, run.row_end),
                       rows(sum, run.row_begin, run.row_end), run.dropout)));
    }
    // The sum is complete before the host goes on (a recompute may write the parts again).
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(c)));
    return Post(link, /*send=*/true, *stage, Elements(x), type_);
  }
  Status Send(CudaRunner& runner, int32_t tensor, int peer) override {
    Result<Link*> link = LinkOf(me_, peer);
    if (!link.ok()) return link.error();
    const cuda::DView t = runner.Device(tensor);
    return Post(**link, true, t.data, Elements(t), type_);
  }
  Status Recv(CudaRunner& runner, int32_t tensor, int peer) override {
    Result<Link*> link = LinkOf(peer, me_);
    if (!link.ok()) return link.error();
    const cuda::DView t = runner.Device(tensor);
    return Post(**link, false, t.data, Elements(t), type_);
  }
  Status SendFloats(const float* data, int64_t count, int peer) override {
    Result<Link*> link = LinkOf(me_, peer);
    if (!link.ok()) return link.error();
    return Post(**link, true, const_cast<float*>(data), count, cuda::DType::kF32);
  }
  Status RecvFloats(float* data, int64_t count, int peer) override {
    Result<Link*> link = LinkOf(peer, me_);
    if (!link.ok()) return link.error();
    return Post(**link, false, data, count, cuda::DType::kF32);
  }

  Status Finish() override {
    for (Link& link : links_) {
      DOMINO_RETURN_IF_ERROR(Wait(link.lane.context, link.lane.nccl, "pipeline sends"));
      link.staged = 0;
    }
    return Status::Ok();
  }

 private:
  static Status Ok(Status status) {
    if (status.ok()) return status;
    return Error("CUDA step: " + status.message());
  }

  // `*out` is set as soon as the context exists, so the destructor frees it whatever fails next.
  Status NewContext(cuda::DType type, cuda::Context** out) {
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Create(options_.device, type, out)));
    return Ok(cuda::CreateEvents(*out, 2));
  }

  Result<Link*> LinkOf(int from, int to) {
    for (Link& link : links_)
      if (link.from == from && link.to == to) return &link;
    return Error(fmt::format("CUDA step: no pipeline link from stage {} to stage {}", from, to));
  }

  // A staging buffer of at least `elements` of the element type, in use until the step ends.
  Result<void*> Staging(Link& link, int64_t elements) {
    if (link.staged == link.staging.size()) {
      void* data = nullptr;
      DOMINO_RETURN_IF_ERROR(
          Ok(cuda::Alloc(link.lane.context, static_cast<size_t>(elements), &data)));
      link.staging.emplace_back(data, elements);
    } else if (link.staging[link.staged].second < elements) {
      auto& [data, capacity] = link.staging[link.staged];
      cuda::Free(data);
      data = nullptr;
      DOMINO_RETURN_IF_ERROR(
          Ok(cuda::Alloc(link.lane.context, static_cast<size_t>(elements), &data)));
      capacity = elements;
    }
    return link.staging[link.staged++].first;
  }

  // A send (rank 0 of the link to rank 1) or a receive (the other way) on the link's comm
  // stream, after what its compute stream holds; a receive is waited for.
  Status Post(Link& link, bool send, void* data, int64_t count, cuda::DType type) {
    cuda::Context* c = link.lane.context;
    cuda::UseStream(c, cuda::StreamKind::kCompute);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(c, kReadyEvent, false)));
    cuda::UseStream(c, cuda::StreamKind::kComm);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::WaitEvent(c, kReadyEvent)));
    const Status posted = send ? cuda::NcclSend(link.lane.nccl, data, count, type, 1)
                               : cuda::NcclRecv(link.lane.nccl, data, count, type, 0);
    if (!posted.ok()) {
      failed_ = true;
      return Ok(posted);
    }
    if (send) return Status::Ok();
    return Wait(c, link.lane.nccl, "pipeline receive");
  }

  // A collective of the fp32 lane on its comm stream, waited for.
  template <typename Call>
  Status Collective(cuda::Nccl* nccl, const char* what, Call call) {
    cuda::UseStream(f32_, cuda::StreamKind::kComm);
    if (Status posted = call(); !posted.ok()) {
      failed_ = true;
      return Ok(posted);
    }
    return Wait(f32_, nccl, what);
  }

  // Waits until the work queued on `c`'s comm stream has run (WaitForEvent).
  Status Wait(cuda::Context* c, cuda::Nccl* nccl, const char* what) {
    cuda::UseStream(c, cuda::StreamKind::kComm);
    DOMINO_RETURN_IF_ERROR(Ok(cuda::RecordEvent(c, kWaitEvent, false)));
    return Ok(WaitForEvent(c, kWaitEvent, nccl, options_.timeout_s, what, &failed_));
  }

  CudaOptions options_;
  cuda::DType type_ = cuda::DType::kF32;
  cuda::Context* f32_ = nullptr;  // buckets: arithmetic on its compute stream, collectives on comm
  cuda::Nccl* tp_ = nullptr;      // fp32 over the TP group (sequence-parallel norm gradients)
  cuda::Nccl* tp_typed_ = nullptr;  // the element type's over the TP group (the passes')
  cuda::Nccl* dp_ = nullptr;        // fp32 over the DP x CP replicas
  int dp_rank_ = 0, me_ = 0;
  std::vector<Link> links_;
  std::vector<void*> buffers_;
  bool failed_ = false;  // NCCL failed or timed out: abort rather than finalize
};

}  // namespace

Result<std::unique_ptr<StepDevice>> MakeStepDevice(const CudaOptions& options,
                                                   std::span<const std::pair<int, int>> links,
                                                   Communicator& tp, Communicator& pp,
                                                   Communicator& dp) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.error();
  if (options.device < 0 || options.device >= static_cast<int>(devices->size()))
    return Error(
        fmt::format("CUDA device {} does not exist ({} visible)", options.device, devices->size()));
  auto device = std::make_unique<DeviceStep>(options);
  DOMINO_RETURN_IF_ERROR(device->Init(links, tp, pp, dp));
  return std::unique_ptr<StepDevice>(std::move(device));
}

}  // namespace domino::exec
