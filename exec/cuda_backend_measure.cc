// The CUDA backend's measurements for `domino calibrate`: one op or one collective timed by
// events, an op beside an emulated collective, GEMM throughput, HBM bandwidth and launch overhead.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "exec/cuda_backend_impl.h"
#include "exec/cuda_device.h"

namespace domino::exec::internal {

Result<double> CudaBackend::TimeOp(int32_t id, int repeats) {
  const bool collective = schedule_.op(id).kind == OpKind::kCollective;
  if (collective && nccl_ == nullptr && options_.comm != CommMode::kEmulate)
    return Error(fmt::format("op {} ({}): timing a collective needs NCCL or its emulation", id,
                             schedule_.Label(id)));
  cuda::UseStream(context_, collective ? cuda::StreamKind::kComm : cuda::StreamKind::kCompute);
  auto once = [&] { return collective ? EnqueueCollective(id) : Enqueue(id); };
  return TimeMedian(id, repeats, once, {});
}

Result<double> CudaBackend::TimeCollective(int32_t id, int repeats, Communicator& host) {
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

Status CudaBackend::FillRandom(uint64_t seed) {
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
  cuda::UseStream(context_, cuda::StreamKind::kCompute);
  // Token ids and labels keep their values (random ones would all look up row 0); the fp32 loss
  // statistics are computed before anything reads them.
  for (int32_t t = 0; t < static_cast<int32_t>(device_.size()); ++t)
    if (!Fp32(t) && !borrowed_[t])
      DOMINO_RETURN_IF_ERROR(Ok(cuda::FillRandom(context_, Whole(t), seed + t)));
  uint64_t salt = device_.size();
  for (auto& [id, view] : residual_grads_)
    DOMINO_RETURN_IF_ERROR(Ok(cuda::FillRandom(context_, view, seed + salt++)));
  return Ok(cuda::Synchronize(context_));
}

Result<double> CudaBackend::TimeOpBeside(int32_t id, const EmulatedCollective& beside,
                                         int repeats) {
  if (schedule_.op(id).kind == OpKind::kCollective)
    return Error(
        fmt::format("op {} ({}) is a collective, not a compute op", id, schedule_.Label(id)));
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Synchronize(context_)));
  DOMINO_RETURN_IF_ERROR(Ok(cuda::Reserve(
      context_, std::max(WorkspaceBytes(), cuda::EmulationWorkspaceBytes(beside.hbm_bytes)))));
  auto collective = [&]() -> Status {
    cuda::UseStream(context_, cuda::StreamKind::kComm);
    Status s = Ok(cuda::EmulateCollective(context_, beside.ctas, beside.hbm_bytes, beside.us), id);
    cuda::UseStream(context_, cuda::StreamKind::kCompute);
    return s;
  };
  return TimeMedian(
      id, repeats, [&] { return Enqueue(id); }, collective);
}

Result<double> CudaBackend::GemmTflops(int64_t m, int64_t n, int64_t k, int warmup, int repeats,
                                       bool fp8) {
  double tflops = 0;
  DOMINO_RETURN_IF_ERROR(
      Ok(cuda::MeasureGemmTflops(context_, m, n, k, warmup, repeats, fp8, &tflops)));
  return tflops;
}

Result<std::vector<double>> CudaBackend::SoakGemm(int64_t n, double seconds, double window_s,
                                                  bool fp8) {
  std::vector<double> tflops;
  DOMINO_RETURN_IF_ERROR(Ok(cuda::SoakGemm(context_, n, seconds, window_s, fp8, &tflops)));
  return tflops;
}

Result<double> CudaBackend::HbmGBps(size_t bytes) {
  double GBps = 0;
  DOMINO_RETURN_IF_ERROR(Ok(cuda::MeasureHbmGBps(context_, bytes, 10, &GBps)));
  return GBps;
}

Result<cuda::LaunchOverhead> CudaBackend::LaunchOverhead(int kernels, int repeats) {
  cuda::LaunchOverhead overhead;
  DOMINO_RETURN_IF_ERROR(Ok(cuda::MeasureLaunchUs(context_, kernels, repeats, &overhead)));
  return overhead;
}

Result<double> CudaBackend::TimeMedian(int32_t id, int repeats, const std::function<Status()>& once,
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

}  // namespace domino::exec::internal
