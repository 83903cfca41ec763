#ifndef DOMINO_EXEC_CPU_BACKEND_H_
#define DOMINO_EXEC_CPU_BACKEND_H_

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "exec/interpreter.h"
#include "exec/reference.h"
#include "models/model_spec.h"
#include "planner/schedule.h"

namespace domino::exec {

// The CPU reference backend: fp32 tensors in host memory, kernels on Eigen (exec/cpu_kernels.h).
// It holds rank `rank`'s shard (of a TP group of `tp`) of every tensor of the schedule:
// the tensors whose values the schedule is given (IsGiven: weights, norm gains, the stage's input)
// filled with ReferenceValue through the tensors' Shard rules (tokens and labels with
// ReferenceToken), everything else zero. The activation function is the model's. Weight-gradient
// GEMMs and the embedding's gradient accumulate, as the row slices of a micro-batch add to one
// gradient (and the tied LM head's to the embedding's). The loss is the mean cross-entropy over
// the micro-batch's tokens; vocabulary padding takes no part in it. Biases and position
// embeddings are not modelled.
//
// Given tensors are filled by FillGiven (exec/reference.h) with `offsets`, which also say the
// dropouts' rates (the attention's and each residual branch's) and where their masks sit
// (exec/dropout.h).
class CpuBackend final : public Backend {
 public:
  CpuBackend(const Schedule& schedule, const ModelSpec& model, int rank, int tp, uint64_t seed,
             const FillOffsets& offsets = {});

  Status Run(const Schedule& schedule, int32_t id) override;
  Status Pack(const TensorUse& use, float* out) const override;
  Status Unpack(const TensorUse& use, const float* in) override;
  Result<std::vector<float>> Read(int32_t tensor) const override { return data_[tensor]; }
  Status Zero(int32_t tensor) override {
    std::fill(data_[tensor].begin(), data_[tensor].end(), 0.0f);
    return Status::Ok();
  }

  // This rank's values of tensor `id` (rows x cols, row-major).
  const std::vector<float>& data(int32_t id) const { return data_[id]; }
  std::vector<float>& mutable_data(int32_t id) { return data_[id]; }

  // Bytes the backend would allocate for `schedule`.
  static double BytesFor(const Schedule& schedule);

 private:
  // The hidden dropout of op's layer's attention (`branch` 1) or MLP (2) branch, placed by the
  // residual-stream view `residual` (exec/reference.h BranchDropoutAt).
  BranchDropout Dropout(const Op& op, int branch, const TensorUse& residual) const;

  const Schedule& schedule_;
  ModelSpec model_;
  int rank_, tp_;
  uint64_t seed_;
  FillOffsets offsets_;
  std::vector<std::vector<float>> data_;
};

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CPU_BACKEND_H_
