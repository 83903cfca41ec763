#include "planner/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>

namespace domino {

std::string_view StreamName(Stream stream) {
  static constexpr std::array<std::string_view, kStreamCount> kNames = {
      "compute", "tp-comm", "dp-comm", "pp-comm", "cp-comm", "pp-recv"};
  return kNames[static_cast<int>(stream)];
}

std::string_view OpFuncName(OpFunc func) {
  static constexpr std::array<std::string_view, static_cast<int>(OpFunc::kCount)> kNames = {
      "ln1",
      "qkv",
      "attn",
      "proj",
      "residual1",
      "ln2",
      "fc1",
      "act",
      "fc2",
      "residual2",
      "ln1.grad",
      "qkv.dgrad",
      "qkv.wgrad",
      "attn.grad",
      "proj.dgrad",
      "proj.wgrad",
      "ln2.grad",
      "fc1.dgrad",
      "fc1.wgrad",
      "act.grad",
      "fc2.dgrad",
      "fc2.wgrad",
      "residual.grad",
      "tp.allreduce",
      "tp.reducescatter",
      "tp.allgather",
      "embed",
      "embed.grad",
      "final_norm",
      "lm_head",
      "loss",
      "loss.grad",
      "lm_head.dgrad",
      "lm_head.wgrad",
      "final_norm.grad",
      "forward",
      "backward",
      "pp.send",
      "pp.recv",
      "dp.allreduce",
      "dp.reducescatter",
      "dp.allgather",
      "embedding.allreduce",
      "optimizer",
      "cp.sendrecv",
      "cp.merge",
      "fsdp.allgather",
      "fsdp.reducescatter",
      "rope",
      "rope.grad",
      "attn.copy",
      "attn.copy.grad",
      "amax.allreduce",
      "amax.update",
      "cp.allgather",
      "cp.reducescatter",
      "cp.alltoall",
      "cp.copy",
      "qk_norm",
      "qk_norm.grad",
      "post_norm1",
      "post_norm2",
      "post_norm1.grad",
      "post_norm2.grad",
      "dropout1.grad",
      "dropout2.grad"};
  int index = static_cast<int>(func);
  return index < static_cast<int>(kNames.size()) ? kNames[index] : "op";
}

int32_t Schedule::Add(const Op& op, std::span<const int32_t> deps, std::span<const TensorUse> reads,
                      std::span<const TensorUse> writes) {
  int32_t id = static_cast<int32_t>(ops_.size());
  Op stored = op;
  stored.dep_begin = static_cast<uint32_t>(deps_.size());
  stored.dep_count = 0;
  for (int32_t dep : deps) {
    assert(dep >= 0 && dep < id && "dependencies must precede the op");
    // Implied by stream order (a stream belongs to one stage's rank).
    if (ops_[dep].stream == op.stream && ops_[dep].stage == op.stage) continue;
    deps_.push_back(dep);
    ++stored.dep_count;
  }
  stored.use_begin = static_cast<uint32_t>(uses_.size());
  stored.read_count = static_cast<uint32_t>(reads.size());
  stored.write_count = static_cast<uint32_t>(writes.size());
  uses_.insert(uses_.end(), reads.begin(), reads.end());
  uses_.insert(uses_.end(), writes.begin(), writes.end());
  ops_.push_back(stored);
  return id;
}

int32_t Schedule::AddTensor(const Tensor& tensor) {
  tensors_.push_back(tensor);
  return static_cast<int32_t>(tensors_.size() - 1);
}

void Schedule::Reserve(size_t ops, size_t tensors) {
  ops_.reserve(ops);
  tensors_.reserve(tensors);
  deps_.reserve(ops * 2);
  uses_.reserve(ops * 3);
}

std::string Schedule::Label(int32_t id) const {
  const Op& o = ops_[id];
  std::string label(OpFuncName(o.func));
  if (o.stage > 0) label += fmt::format(" S{}", o.stage);
  if (o.tags.virtual_stage >= 0) label += fmt::format(" v{}", o.tags.virtual_stage);
  if (o.tags.layer >= 0) label += fmt::format(" L{}", o.tags.layer);
  if (o.tags.micro_batch >= 0) label += fmt::format(" mb{}", o.tags.micro_batch);
  if (o.tags.row_slice >= 0) label += fmt::format(" s{}", o.tags.row_slice);
  if (o.tags.col_chunk >= 0) label += fmt::format(" c{}", o.tags.col_chunk);
  if (o.tags.chunk >= 0) label += fmt::format(" k{}", o.tags.chunk);
  if (o.tags.ring_step >= 0) label += fmt::format(" r{}", o.tags.ring_step);
  static constexpr std::array<std::string_view, 4> kPhases = {"fwd", "bwd", "recompute", "optim"};
  label += fmt::format(" {}", kPhases[static_cast<int>(o.tags.phase)]);
  return label;
}

Shape2 WholeShape(const Tensor& t, int tp) {
  switch (t.shard) {
    case Shard::kRows:
    case Shard::kSequence:
      return {t.rows * tp, t.cols};
    case Shard::kCols:
    case Shard::kQkvCols:
    case Shard::kGluCols:
    case Shard::kQkCols:
      return {t.rows, t.cols * tp};
    case Shard::kReplicated:
    case Shard::kPartialSum:
      break;
  }
  return {t.rows, t.cols};
}

Shape2 WholeIndex(const Tensor& t, int rank, int tp, int64_t row, int64_t col) {
  switch (t.shard) {
    case Shard::kRows:
      return {rank * t.rows + row, col};
    case Shard::kCols:
      return {row, rank * t.cols + col};
    case Shard::kQkvCols: {
      const int64_t kv = t.part_cols, q = t.cols - 2 * kv;
      if (col < q) return {row, rank * q + col};
      if (col < q + kv) return {row, q * tp + rank * kv + (col - q)};
      return {row, q * tp + kv * tp + rank * kv + (col - q - kv)};
    }
    case Shard::kQkCols: {
      const int64_t kv = t.part_cols, q = t.cols - kv;
      if (col < q) return {row, rank * q + col};
      return {row, q * tp + rank * kv + (col - q)};
    }
    case Shard::kGluCols: {
      const int64_t half = t.cols / 2;
      if (col < half) return {row, rank * half + col};
      return {row, half * tp + rank * half + (col - half)};
    }
    case Shard::kSequence: {
      const int64_t per_slice = t.rows / t.part_cols;  // this rank's rows of each slice
      const int64_t slice = row / per_slice, j = row % per_slice;
      return {slice * per_slice * tp + rank * per_slice + j, col};
    }
    case Shard::kReplicated:
    case Shard::kPartialSum:
      break;
  }
  return {row, col};
}

double Timeline::end_us() const {
  double end = 0;
  for (const OpTime& t : ops) end = std::max(end, t.end_us);
  return end;
}

bool IsGiven(const TensorRole& role) {
  return !role.gradient &&
         (role.kind == TensorKind::kWeight || role.kind == TensorKind::kNormWeight ||
          role.kind == TensorKind::kInput);
}

int32_t FindTensor(std::span<const Tensor> tensors, const TensorRole& role) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].role == role) return static_cast<int32_t>(i);
  return -1;
}

std::string RoleName(const TensorRole& role) {
  static constexpr std::array<std::string_view, 20> kSlots = {
      "",        "x",       "ln1",        "qkv",        "ctx",      "proj",    "mid",
      "ln2",     "fc1",     "act",        "fc2",        "out",      "embed",   "final_norm",
      "lm_head", "qk_norm", "post_norm1", "post_norm2", "dropout1", "dropout2"};
  std::string name = role.layer >= 0 ? fmt::format("l{}.", role.layer) : "";
  // The ends' data: the tokens the embedding looks up, the labels the loss reads, and the LM
  // head's output.
  if (role.kind == TensorKind::kInput && role.slot == TensorSlot::kEmbedding)
    name += "tokens";
  else if (role.kind == TensorKind::kInput && role.slot == TensorSlot::kLmHead)
    name += "labels";
  else if (role.kind == TensorKind::kActivation && role.slot == TensorSlot::kLmHead)
    name += "logits";
  else
    name += kSlots[static_cast<size_t>(role.slot)];
  switch (role.kind) {
    case TensorKind::kWeight:
    case TensorKind::kNormWeight:
      name += ".w";
      break;
    case TensorKind::kOptimizerState:
      name += ".w.adam";
      break;
    case TensorKind::kLoss:
      name = "loss";
      break;
    case TensorKind::kInput:
    case TensorKind::kActivation:
      break;
  }
  if (role.slice >= 0) name += fmt::format(".s{}", role.slice);
  if (role.gradient) name += ".grad";
  if (role.form == TensorForm::kSequenceShard) name += ".shard";
  if (role.form == TensorForm::kGathered) name += ".full";
  return name;
}

}  // namespace domino
