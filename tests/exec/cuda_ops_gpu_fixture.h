// What the GPU tests of exec/cuda_ops.h share (cuda_ops_gpu_test.cc, cuda_measure_gpu_test.cc):
// a context per test on device 0, skipped without a GPU, and test blocks inside wider matrices.
#ifndef DOMINO_TESTS_EXEC_CUDA_OPS_GPU_FIXTURE_H_
#define DOMINO_TESTS_EXEC_CUDA_OPS_GPU_FIXTURE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "exec/cpu_kernels.h"
#include "exec/cuda_device.h"
#include "exec/cuda_ops.h"

#if DOMINO_HAVE_CUDA

namespace domino::exec::gpu_test {

using cuda::DType;
using cuda::DView;
using cuda::StreamKind;

// A Status as text: empty when ok, so that a failed call's message shows in the assertion.
inline std::string Msg(const Status& status) { return status.ok() ? "" : status.message(); }

inline constexpr float kEps = 1e-5f;
inline constexpr int64_t kBlockColumn = 3;  // where a test block starts in its wider matrix
inline constexpr int64_t kExtraColumns = 7;

// A device block and what the device holds, read back: `host` is the block (contiguous), `wide`
// the whole wider matrix, so a test can check that an op wrote nothing outside its block.
struct Matrix {
  DView view, whole;
  std::vector<float> host, wide;
};

inline cpu::ConstMat HostView(const std::vector<float>& data, int64_t rows, int64_t cols) {
  return cpu::ConstMat(data.data(), rows, cols, cols);
}
inline cpu::Mat HostView(std::vector<float>* data, int64_t rows, int64_t cols) {
  return cpu::Mat{data->data(), rows, cols, cols};
}
inline cpu::ConstMat HostView(const Matrix& m) {
  return HostView(m.host, m.view.rows, m.view.cols);
}

// One context per test on device 0, fp32 unless a typed test says otherwise.
class CudaOpsTest : public ::testing::Test {
 protected:
  virtual DType Type() const { return DType::kF32; }

  void SetUp() override {
    Result<std::vector<CudaDevice>> devices = ListCudaDevices();
    if (!devices.ok()) GTEST_SKIP() << devices.message();
    ASSERT_EQ(Msg(cuda::Create(0, Type(), &context_)), "");
  }
  void TearDown() override {
    for (void* p : allocations_) cuda::Free(p);
    cuda::Destroy(context_);
  }

  std::vector<float> Read(DView v) {
    std::vector<float> host(static_cast<size_t>(v.rows * v.cols));
    EXPECT_EQ(Msg(cuda::Download(context_, v, host.data())), "");
    return host;
  }

  // A rows x cols block of uniform values in [lo, hi) at column kBlockColumn of a matrix
  // kExtraColumns wider, so that kernels see a row pitch longer than the row and an offset start.
  // The CPU reference gets the values as the element type rounded them.
  // With `packed`, the block is the whole matrix instead (rows start where the allocation does and
  // follow each other), as the layers' activations are.
  Matrix Make(int64_t rows, int64_t cols, float lo = -1.0f, float hi = 1.0f, bool packed = false) {
    Matrix m;
    const int64_t wide = packed ? cols : cols + kExtraColumns;
    void* data = nullptr;
    EXPECT_EQ(Msg(cuda::Alloc(context_, static_cast<size_t>(rows * wide), &data)), "");
    allocations_.push_back(data);
    m.whole = DView{data, rows, wide, wide};
    m.view =
        DView{static_cast<char*>(data) + (packed ? 0 : kBlockColumn) * cuda::DTypeBytes(Type()),
              rows, cols, wide};
    std::uniform_real_distribution<float> uniform(lo, hi);
    std::vector<float> values(static_cast<size_t>(rows * wide));
    for (float& v : values) v = uniform(random_);
    EXPECT_EQ(Msg(cuda::Upload(context_, m.whole, values.data())), "");
    m.wide = Read(m.whole);
    m.host = Read(m.view);
    return m;
  }

  double Tolerance() const { return Type() == DType::kF32 ? 1e-4 : 2e-2; }

  // Every element within Tolerance() times the largest expected magnitude.
  void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    float peak = 1e-3f;
    for (float w : want) peak = std::max(peak, std::abs(w));
    const double bound = Tolerance() * peak;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::abs(static_cast<double>(got[i]) - want[i]) <= bound) continue;
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
                      << " within " << bound;
    }
    EXPECT_EQ(bad, 0) << what << " (" << DTypeName(Type()) << ")";
  }

  // The columns of m's wider matrix outside its block hold what they held when it was made.
  void ExpectOutsideKept(const Matrix& m, const std::string& what) {
    const std::vector<float> now = Read(m.whole);
    const int64_t first =
        (static_cast<const char*>(m.view.data) - static_cast<const char*>(m.whole.data)) /
        static_cast<int64_t>(cuda::DTypeBytes(Type()));
    int changed = 0;
    for (int64_t r = 0; r < m.whole.rows; ++r) {
      for (int64_t j = 0; j < m.whole.cols; ++j) {
        if (j >= first && j < first + m.view.cols) continue;
        const size_t i = static_cast<size_t>(r * m.whole.cols + j);
        if (now[i] != m.wide[i]) ++changed;
      }
    }
    EXPECT_EQ(changed, 0) << what << " wrote outside its view";
  }

  cuda::Context* context_ = nullptr;
  std::vector<void*> allocations_;
  std::mt19937 random_{7};
};

class CudaOpsTypedTest : public CudaOpsTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType Type() const override { return GetParam(); }
};

}  // namespace domino::exec::gpu_test

#endif  // DOMINO_HAVE_CUDA

#endif  // DOMINO_TESTS_EXEC_CUDA_OPS_GPU_FIXTURE_H_
