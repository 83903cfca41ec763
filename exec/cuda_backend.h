#ifndef DOMINO_EXEC_CUDA_BACKEND_H_
#define DOMINO_EXEC_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>

#include "exec/interpreter.h"
#include "models/base/result.h"
#include "models/model_spec.h"
#include "planner/schedule.h"

namespace domino::exec {

// The CUDA backend: rank `rank`'s tensors in the memory of CUDA device `device`, initialized
// like the CPU backend's (so `--check` compares the two), ops run in fp32 with cuBLAS GEMMs and
// the kernels of exec/cuda_ops.cu, one at a time on one stream (the interpreter times each).
// Fails clearly without CUDA support or without a GPU.
Result<std::unique_ptr<Backend>> MakeCudaBackend(const Schedule& schedule, const ModelSpec& model,
                                                 int rank, int tp, uint64_t seed, int device);

}  // namespace domino::exec

#endif  // DOMINO_EXEC_CUDA_BACKEND_H_
