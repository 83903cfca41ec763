#ifndef DOMINO_EXEC_STEP_RUNNER_H_
#define DOMINO_EXEC_STEP_RUNNER_H_

// The state of a whole step's run (exec/step.h is the interface), shared by the files that run one
// part each: step.cc the chunks, passes and pipeline transfers; step_buckets.cc the DP gradient
// buckets, the tied embedding's sum, the optimizer and the weights' way back into the
// micro-batches; step_check.cc the comparison with the single-rank reference.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exec/communicator.h"
#include "exec/cp_attention.h"
#include "exec/cpu_backend.h"
#include "exec/cuda_backend.h"
#include "exec/interpreter.h"
#include "exec/step.h"
#include "exec/step_device.h"
#include "planner/iteration.h"

namespace domino::exec::whole_step {

// Bucket keys beside the layers: the chunk's other parameters (final norm, LM head) and the word
// embedding, which has a bucket of its own so that the first and last stage lay it out alike.
constexpr int kExtraBucket = -1;
constexpr int kEmbeddingBucket = -2;

// A weight (or norm gain) and its gradient: tensors of the chunk's schedule.
struct Param {
  int32_t value = -1, grad = -1;
  int64_t offset = 0, size = 0;  // in the bucket's flat buffers
};

// The parameters whose gradients one DP collective reduces, flattened in tensor order, with the
// optimizer's state. With the distributed optimizer the rank owns elements [r x shard, (r + 1) x
// shard) of the padded buffers, r its rank among the DP x CP replicas: only those of `grad` are
// reduced and only those of `master`, `m` and `v` are updated.
struct Bucket {
  int key = 0;  // the chunk's layer, kExtraBucket or kEmbeddingBucket
  std::vector<Param> params;
  int64_t size = 0, shard = 0;
  std::vector<float> grad, master, m, v;
  // The same in fp32 device memory when the step's transport is on the device (StepDevice);
  // `recv` takes the tied embedding's gradient from the other end of the pipeline.
  // `scratch` holds one micro-batch's gradient before its FSDP reduce-scatter.
  float *d_grad = nullptr, *d_master = nullptr, *d_m = nullptr, *d_v = nullptr, *d_recv = nullptr,
        *d_scratch = nullptr;
  // Gradient summed over micro-batches (and reduced, if a bucket op ran); with FSDP from the
  // step's start, as each micro-batch's reduce-scatter adds its part to the rank's shard.
  bool final = false;
  // The sharded optimizer updated the master weights and no gather has written them into the
  // micro-batches' copies yet (FSDP gathers a layer many times a step; only the first writes).
  bool stale = false;
};

// One model chunk (virtual stage) of this rank: its schedule, forward and backward, and one
// backend per micro-batch (each keeps its activations until its backward; weights are the same
// in all of them: on the GPU one copy, the first runner's, lent to the others).
struct Chunk {
  int vs = 0, first_layer = 0;
  ChunkShape shape;
  Schedule schedule;
  size_t forward_end = 0;     // ops [0, forward_end) are the forward pass
  std::vector<Backend*> mbs;  // one per micro-batch, owned by `cpu` or `cuda`
  std::vector<std::unique_ptr<CpuBackend>> cpu;
  std::vector<std::unique_ptr<CudaRunner>> cuda;
  std::vector<CudaRunner*> runners;  // `cuda`'s, for the device transport
  std::vector<size_t> cursor;        // per micro-batch: its next op
  std::vector<FillOffsets> fills;    // per micro-batch: where its backend's values sit
  std::vector<Bucket> buckets;
  int32_t input = -1, input_grad = -1, out_mid = -1, out_mlp = -1, out_grad = -1, loss = -1;
};

// The communicators of one rank: its TP group, its CP group (the ranks that share its sequences),
// its pipeline (the stages of its TP, CP and DP rank) and its replicas (the DP x CP ranks of its
// TP rank and stage, which hold the same weights: gradients are reduced over them).
struct Groups {
  std::unique_ptr<Communicator> tp, cp, pp, dp;
};

TensorRole RoleOf(TensorKind kind, TensorSlot slot, int layer, bool gradient,
                  TensorForm form = TensorForm::kPrimary);
int BucketKey(const TensorRole& role);
Result<Schedule> LowerChunk(const Plan& plan, const ChunkShape& shape);
// The chunk's parameters by bucket, its boundary tensors and where its forward ends.
Status Describe(const Plan& plan, Chunk& c);
Result<Groups> SplitGroups(const Plan& plan, Communicator& world, const RankCoords& me);

// One rank's run of an iteration, step after step.
class StepRunner {
 public:
  StepRunner(const Plan& plan, const Iteration& it, const RankCoords& me, Groups groups,
             const ExecuteOptions& options)
      : plan_(plan), it_(it), me_(me), g_(std::move(groups)), options_(options) {}

  Status Init();
  Status Step(int step, Timeline* timeline);

  Result<double> Loss();
  Status Settle();

  const std::vector<std::unique_ptr<Chunk>>& chunks() const { return chunks_; }
  Groups& groups() { return g_; }

 private:
  Chunk* ChunkOf(int vs) {
    for (auto& c : chunks_)
      if (c->vs == vs) return c.get();
    return nullptr;
  }
  Result<Chunk*> StageChunk(const Op& op, int32_t id);
  Result<Chunk*> MyChunk(const Op& op, int32_t id);
  // Zeroes what the schedule computes (the given tensors keep their values; weights are set by
  // the optimizer).
  static Status ZeroComputed(const Chunk& c, Backend& backend) {
    const std::vector<Tensor>& tensors = c.schedule.tensors();
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!IsGiven(tensors[i].role)) DOMINO_RETURN_IF_ERROR(backend.Zero(static_cast<int32_t>(i)));
    return Status::Ok();
  }
  // Sets a whole tensor of the chunk's schedule from `values` (rows x cols).
  static Status Write(const Chunk& c, Backend& backend, int32_t id, const float* values) {
    const Tensor& t = c.schedule.tensors()[id];
    return backend.Unpack(TensorUse{id, View{0, t.rows, 0, t.cols}}, values);
  }

  // step.cc: the device transport's set-up, and each op of the iteration (a pass, a pipeline
  // transfer, a bucket op).
  Status InitDevice();
  Status RunIterationOp(int32_t id, int step);
  Status RunPass(const Op& op, int32_t id);

  // The pipeline stage that runs virtual stage `vs`.
  int StageOf(int vs) const { return vs % it_.stages; }

  Status Transfer(const Op& op, int32_t id);

  // step_buckets.cc: the DP gradient buckets, the tied embedding's sum, the optimizer step and the
  // updated weights' way back into every micro-batch's copy.
  Status Finalize(Chunk& c, Bucket& b);
  static std::vector<Bucket*> LayerUnit(Chunk& c, int layer);
  Status ReduceMicroBatch(Chunk& c, Bucket& b, int mb);
  Status ReduceOverDp(Bucket& b, bool scatter);
  Status GatherShards(std::vector<float>& flat, float* device);

  // The rank's range of a bucket: its DP shard with the distributed optimizer, else the whole.
  std::pair<int64_t, int64_t> Owned(const Bucket& b) const {
    if (!Sharded()) return {0, b.size};
    return {std::min(b.size, Replica() * b.shard), std::min(b.size, (Replica() + 1) * b.shard)};
  }
  // Whether the optimizer state is sharded over the replicas (DP x CP), and this rank's shard.
  bool Sharded() const { return plan_.distributed_optimizer && plan_.dp_cp() > 1; }
  // Whether parameters and gradients are sharded too (FSDP: the plan's per-layer gathers and
  // reduce-scatters).
  bool Fsdp() const { return plan_.fsdp && plan_.dp_cp() > 1; }
  int Replica() const { return g_.dp->rank(); }

  Status SyncEmbedding();
  Status Optimize(int step);
  Status GatherWeights(Chunk& c, Bucket& b);
  Status WriteWeights(Chunk& c, const Bucket& b);

  const Plan& plan_;
  const Iteration& it_;
  RankCoords me_;
  Groups g_;
  const ExecuteOptions& options_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::set<std::tuple<bool, int16_t, int16_t>> sends_;  // (backward, sender's vs, micro-batch)
  std::vector<int32_t> mine_;                           // this rank's iteration ops, in order
  std::vector<float> scratch_in_, scratch_out_, recv_, shard_, reduce_;
  std::unique_ptr<CpAttention> cp_attention_;  // context parallelism (cp > 1)
  std::unique_ptr<StepDevice> device_;         // CUDA with --comm nccl: transport on the device
};

// With ExecuteOptions::check: runs the single-rank reference on rank 0 and compares the losses,
// and after the last step every weight's gradient and updated value (exec/step.h).
Status CheckStep(const Plan& plan, const Iteration& it, StepRunner& run, const RankCoords& me,
                 Communicator& world, const ExecuteOptions& options,
                 const std::vector<double>& losses, ExecuteResult* result);

}  // namespace domino::exec::whole_step

#endif  // DOMINO_EXEC_STEP_RUNNER_H_
