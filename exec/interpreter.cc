#include "exec/interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace domino::exec {
namespace {

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

// A part of a decomposed all-gather or reduce-scatter (Op::part of Op::parts): rows [lo, hi) of
// the slice's R gathered rows, of which this rank's shard holds [mine_lo, mine_hi). Both move as
// an all-reduce of the part's rows, each rank adding only what it owns (all-gather) or keeping
// only its own rows of the sum (reduce-scatter): the same data a ring exchange moves, in one call.
Status RunCollectivePart(const Schedule& schedule, int32_t id, Backend& backend, Communicator& comm,
                         std::vector<float>& in, std::vector<float>& out) {
  const Op& op = schedule.op(id);
  const TensorUse& read = schedule.reads(op)[0];
  const TensorUse& write = schedule.writes(op)[0];
  const bool gather = op.collective == CollectiveOp::kAllGather;
  const TensorUse& shard = gather ? read : write;
  const TensorUse& part = gather ? write : read;
  const int ranks = comm.size();
  const int64_t cols = shard.view.col_end - shard.view.col_begin;
  const int64_t shard_rows = shard.view.row_end - shard.view.row_begin;
  const int64_t part_rows = part.view.row_end - part.view.row_begin;
  const int64_t rows = shard_rows * ranks;
  if ((op.collective != CollectiveOp::kAllGather &&
       op.collective != CollectiveOp::kReduceScatter) ||
      part.view.col_end - part.view.col_begin != cols || part_rows * op.parts != rows ||
      op.part < 0 || op.part >= op.parts)
    return Error(fmt::format("op {} ({}): part {} of {} does not fit a {} of {} rows over {} ranks",
                             id, schedule.Label(id), op.part, op.parts, OpFuncName(op.func), rows,
                             ranks));
  const int64_t lo = op.part * part_rows, hi = lo + part_rows;
  const int64_t mine_lo = std::max(lo, comm.rank() * shard_rows);
  const int64_t mine_hi = std::min(hi, (comm.rank() + 1) * shard_rows);
  out.assign(static_cast<size_t>(part_rows * cols), 0.0f);
  if (gather) {
    in.resize(static_cast<size_t>(shard_rows * cols));
    DOMINO_RETURN_IF_ERROR(backend.Pack(read, in.data()));
    for (int64_t r = mine_lo; r < mine_hi; ++r)
      std::copy_n(in.data() + (r - comm.rank() * shard_rows) * cols, cols,
                  out.data() + (r - lo) * cols);
  } else {
    DOMINO_RETURN_IF_ERROR(backend.Pack(read, out.data()));
  }
  DOMINO_RETURN_IF_ERROR(comm.AllReduce(out.data(), static_cast<int64_t>(out.size())));
  if (gather) {
    DOMINO_RETURN_IF_ERROR(backend.Unpack(write, out.data()));
  } else if (mine_lo < mine_hi) {
    TensorUse mine = write;
    mine.view.row_begin = write.view.row_begin + mine_lo - comm.rank() * shard_rows;
    mine.view.row_end = mine.view.row_begin + (mine_hi - mine_lo);
    DOMINO_RETURN_IF_ERROR(backend.Unpack(mine, out.data() + (mine_lo - lo) * cols));
  }
  return Status::Ok();
}

Status RunCollective(const Schedule& schedule, int32_t id, Backend& backend, Communicator& comm,
                     std::vector<float>& in, std::vector<float>& out) {
  const Op& op = schedule.op(id);
  std::span<const TensorUse> reads = schedule.reads(op), writes = schedule.writes(op);
  if (reads.size() != 1 || writes.size() != 1)
    return Error(fmt::format("op {} ({}): a collective needs one buffer to read and one to write",
                             id, schedule.Label(id)));
  if (op.parts > 1) return RunCollectivePart(schedule, id, backend, comm, in, out);
  const int64_t n_in = Elements(reads[0].view), n_out = Elements(writes[0].view);
  const int ranks = comm.size();
  auto mismatch = [&] {
    return Error(fmt::format("op {} ({}): buffer sizes {} and {} do not fit a {} over {} ranks", id,
                             schedule.Label(id), n_in, n_out, OpFuncName(op.func), ranks));
  };
  in.resize(static_cast<size_t>(n_in));
  DOMINO_RETURN_IF_ERROR(backend.Pack(reads[0], in.data()));
  switch (op.collective) {
    case CollectiveOp::kAllReduce:
      if (n_in != n_out) return mismatch();
      DOMINO_RETURN_IF_ERROR(comm.AllReduce(in.data(), n_in));
      DOMINO_RETURN_IF_ERROR(backend.Unpack(writes[0], in.data()));
      return Status::Ok();
    case CollectiveOp::kReduceScatter:
      if (n_in != n_out * ranks) return mismatch();
      out.resize(static_cast<size_t>(n_out));
      DOMINO_RETURN_IF_ERROR(comm.ReduceScatter(in.data(), out.data(), n_out));
      DOMINO_RETURN_IF_ERROR(backend.Unpack(writes[0], out.data()));
      return Status::Ok();
    case CollectiveOp::kAllGather:
      if (n_out != n_in * ranks) return mismatch();
      out.resize(static_cast<size_t>(n_out));
      DOMINO_RETURN_IF_ERROR(comm.AllGather(in.data(), out.data(), n_in));
      DOMINO_RETURN_IF_ERROR(backend.Unpack(writes[0], out.data()));
      return Status::Ok();
    case CollectiveOp::kAllToAll:  // context parallelism's a2a: exec/cp_attention.h
    case CollectiveOp::kNone:
      break;
  }
  return Error(
      fmt::format("op {} ({}): not a collective the executor knows", id, schedule.Label(id)));
}

}  // namespace

bool RunsNothing(const Op& op) {
  switch (op.func) {
    case OpFunc::kAmaxAllReduce:
    case OpFunc::kAmaxUpdate:
    case OpFunc::kCpMerge:
    case OpFunc::kCpCopy:
    case OpFunc::kAttnCopy:
    case OpFunc::kAttnCopyGrad:
      return true;
    default:
      return false;
  }
}

Status RunOp(const Schedule& schedule, int32_t id, Backend& backend, Communicator& comm,
             std::vector<float>& in, std::vector<float>& out) {
  const Op& op = schedule.op(id);
  if (RunsNothing(op)) return Status::Ok();
  switch (op.kind) {
    case OpKind::kCollective:
      return RunCollective(schedule, id, backend, comm, in, out);
    case OpKind::kSendRecv:
    case OpKind::kOptimizer:
    case OpKind::kPass:
      return Error(
          fmt::format("op {} ({}): an iteration op, not an op of a pass (exec/step.h runs "
                      "iterations)",
                      id, schedule.Label(id)));
    default:
      return backend.Run(schedule, id);
  }
}

Result<Timeline> Interpret(const Schedule& schedule, Backend& backend, Communicator& comm,
                           const std::function<void(size_t, size_t)>& progress) {
  using Clock = std::chrono::steady_clock;
  Timeline timeline;
  timeline.ops.resize(schedule.size());
  std::vector<float> in, out;
  const Clock::time_point t0 = Clock::now();
  auto since = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - t0).count();
  };
  for (size_t i = 0; i < schedule.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const Clock::time_point start = Clock::now();
    DOMINO_RETURN_IF_ERROR(RunOp(schedule, id, backend, comm, in, out));
    timeline.ops[i] = OpTime{since(start), since(Clock::now())};
    if (progress) progress(i + 1, schedule.size());
  }
  return timeline;
}

}  // namespace domino::exec
