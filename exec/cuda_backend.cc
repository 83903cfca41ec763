#include "exec/cuda_backend.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "exec/cpu_backend.h"
#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"

namespace domino::exec {
namespace {

constexpr float kNormEps = 1e-5f;  // as the CPU backend

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Schedule& schedule, const ModelSpec& model) : schedule_(schedule), model_(model) {}
  ~CudaBackend() override {
    for (float* p : device_) cuda::Free(p);
    cuda::Destroy(context_);
  }

  Status Init(int rank, int tp, uint64_t seed, int device) {
    rank_ = rank, tp_ = tp, seed_ = seed;
    DOMINO_RETURN_IF_ERROR(Ok(cuda::Create(device, &context_)));
    const std::vector<Tensor>& tensors = schedule_.tensors();
    device_.assign(tensors.size(), nullptr);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Alloc(static_cast<size_t>(t.rows * t.cols), &device_[i])));
      std::vector<float> host(static_cast<size_t>(t.rows * t.cols), 0.0f);
      const bool initial = t.name == "l0.x" || (t.name.size() > 2 && t.name.ends_with(".w"));
      if (initial) FillReference(t, rank_, tp_, seed_, View{0, t.rows, 0, t.cols}, host);
      DOMINO_RETURN_IF_ERROR(Ok(cuda::Upload(context_, Whole(static_cast<int32_t>(i)), host.data())));
    }
    return Ok(cuda::Synchronize(context_));
  }

  Status Run(const Schedule& s, int32_t id) override {
    const Op& op = s.op(id);
    std::span<const TensorUse> reads = s.reads(op), writes = s.writes(op);
    auto in = [&](size_t i) { return Of(reads[i]); };
    auto out = [&](size_t i) { return Of(writes[i]); };
    std::string e;
    switch (op.func) {
      case OpFunc::kQkv: case OpFunc::kProj: case OpFunc::kFc1: case OpFunc::kFc2:
        e = cuda::Gemm(context_, in(0), false, in(1), false, out(0), false);
        break;
      case OpFunc::kQkvGradInput: case OpFunc::kProjGradInput: case OpFunc::kFc1GradInput:
      case OpFunc::kFc2GradInput:
        e = cuda::Gemm(context_, in(0), false, in(1), true, out(0), false);
        break;
      case OpFunc::kQkvGradWeight: case OpFunc::kProjGradWeight: case OpFunc::kFc1GradWeight:
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
      case OpFunc::kAct:
        e = in(0).cols == 2 * out(0).cols ? cuda::Swiglu(context_, in(0), out(0))
                                          : cuda::Gelu(context_, in(0), out(0));
        break;
      case OpFunc::kActGrad:
        e = in(0).cols == 2 * in(1).cols ? cuda::SwigluBackward(context_, in(0), in(1), out(0))
                                         : cuda::GeluBackward(context_, in(0), in(1), out(0));
        break;
      case OpFunc::kLn1: case OpFunc::kLn2:
        e = cuda::NormForward(context_, Rms(), in(0), in(1).data, kNormEps, out(0));
        break;
      case OpFunc::kLn1Grad: case OpFunc::kLn2Grad: {
        // dx = the residual gradient + the norm's backward; dgamma accumulates.
        cuda::DView dx = out(0);
        std::vector<float> residual(static_cast<size_t>(dx.rows * dx.cols));
        e = cuda::Download(context_, in(3), residual.data());
        if (e.empty()) e = cuda::Upload(context_, dx, residual.data());
        if (e.empty())
          e = cuda::NormBackward(context_, Rms(), in(0), in(2).data, kNormEps, in(1), dx, true,
                                 out(1).data);
        break;
      }
      case OpFunc::kResidual1: case OpFunc::kResidual2:
        e = cuda::Add(context_, in(0), in(1), out(0));
        break;
      case OpFunc::kResidualGrad: {
        const TensorUse& u = writes[0];
        const Tensor& t = s.tensors()[u.tensor];
        std::vector<float> host(static_cast<size_t>(t.rows * t.cols), 0.0f);
        FillReference(t, rank_, tp_, seed_, u.view, host);
        std::vector<float> part;
        for (int64_t r = u.view.row_begin; r < u.view.row_end; ++r)
          part.insert(part.end(), host.begin() + r * t.cols + u.view.col_begin,
                      host.begin() + r * t.cols + u.view.col_end);
        e = cuda::Upload(context_, out(0), part.data());
        break;
      }
      default:
        return Error(fmt::format("op {} ({}): not a compute op the CUDA backend runs", id, s.Label(id)));
    }
    if (e.empty()) e = cuda::Synchronize(context_);
    if (!e.empty()) return Error(fmt::format("op {} ({}): CUDA: {}", id, s.Label(id), e));
    return Status::Ok();
  }

  void Pack(const TensorUse& use, float* out) const override {
    (void)cuda::Download(context_, Of(use), out);
  }
  void Unpack(const TensorUse& use, const float* in) override {
    (void)cuda::Upload(context_, Of(use), in);
    (void)cuda::Synchronize(context_);
  }
  std::vector<float> Read(int32_t tensor) const override {
    const Tensor& t = schedule_.tensors()[tensor];
    std::vector<float> host(static_cast<size_t>(t.rows * t.cols));
    (void)cuda::Download(context_, Whole(tensor), host.data());
    return host;
  }

 private:
  static Status Ok(const std::string& error) {
    return error.empty() ? Status::Ok() : Status(Error("CUDA backend: " + error));
  }
  bool Rms() const { return model_.norm == Norm::kRmsNorm; }
  cuda::DView Of(const TensorUse& u) const {
    const Tensor& t = schedule_.tensors()[u.tensor];
    return cuda::DView{device_[u.tensor] + u.view.row_begin * t.cols + u.view.col_begin,
                       u.view.row_end - u.view.row_begin, u.view.col_end - u.view.col_begin, t.cols};
  }
  cuda::DView Whole(int32_t id) const {
    const Tensor& t = schedule_.tensors()[id];
    return cuda::DView{device_[id], t.rows, t.cols, t.cols};
  }

  const Schedule& schedule_;
  ModelSpec model_;
  int rank_ = 0, tp_ = 1;
  uint64_t seed_ = 1;
  cuda::Context* context_ = nullptr;
  std::vector<float*> device_;
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeCudaBackend(const Schedule& schedule, const ModelSpec& model,
                                                 int rank, int tp, uint64_t seed, int device) {
  Result<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.error();
  if (device < 0 || device >= static_cast<int>(devices->size()))
    return Error(fmt::format("CUDA device {} does not exist ({} visible)", device, devices->size()));
  auto backend = std::make_unique<CudaBackend>(schedule, model);
  DOMINO_RETURN_IF_ERROR(backend->Init(rank, tp, seed, device));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace domino::exec
