#include "exec/interpreter.h"

#include <chrono>
#include <vector>

#include <fmt/format.h>

namespace domino::exec {
namespace {

int64_t Elements(const View& v) { return (v.row_end - v.row_begin) * (v.col_end - v.col_begin); }

Status RunCollective(const Schedule& schedule, int32_t id, Backend& backend,
                     Communicator& comm, std::vector<float>& in, std::vector<float>& out) {
  const Op& op = schedule.op(id);
  std::span<const TensorUse> reads = schedule.reads(op), writes = schedule.writes(op);
  if (reads.size() != 1 || writes.size() != 1)
    return Error(fmt::format("op {} ({}): a collective needs one buffer to read and one to write",
                             id, schedule.Label(id)));
  const int64_t n_in = Elements(reads[0].view), n_out = Elements(writes[0].view);
  const int ranks = comm.size();
  auto mismatch = [&] {
    return Error(fmt::format("op {} ({}): buffer sizes {} and {} do not fit a {} over {} ranks",
                             id, schedule.Label(id), n_in, n_out, OpFuncName(op.func), ranks));
  };
  in.resize(static_cast<size_t>(n_in));
  backend.Pack(reads[0], in.data());
  switch (op.collective) {
    case CollectiveOp::kAllReduce:
      if (n_in != n_out) return mismatch();
      DOMINO_RETURN_IF_ERROR(comm.AllReduce(in.data(), n_in));
      backend.Unpack(writes[0], in.data());
      return Status::Ok();
    case CollectiveOp::kReduceScatter:
      if (n_in != n_out * ranks) return mismatch();
      out.resize(static_cast<size_t>(n_out));
      DOMINO_RETURN_IF_ERROR(comm.ReduceScatter(in.data(), out.data(), n_out));
      backend.Unpack(writes[0], out.data());
      return Status::Ok();
    case CollectiveOp::kAllGather:
      if (n_out != n_in * ranks) return mismatch();
      out.resize(static_cast<size_t>(n_out));
      DOMINO_RETURN_IF_ERROR(comm.AllGather(in.data(), out.data(), n_in));
      backend.Unpack(writes[0], out.data());
      return Status::Ok();
    case CollectiveOp::kNone:
      break;
  }
  return Error(fmt::format("op {} ({}): not a collective the executor knows", id,
                           schedule.Label(id)));
}

}  // namespace

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
    const Op& op = schedule.op(id);
    const Clock::time_point start = Clock::now();
    switch (op.kind) {
      case OpKind::kCollective:
        DOMINO_RETURN_IF_ERROR(RunCollective(schedule, id, backend, comm, in, out));
        break;
      case OpKind::kSendRecv:
      case OpKind::kOptimizer:
        return Error(fmt::format("op {} ({}): the executor runs the TP layer stack only", id,
                                 schedule.Label(id)));
      default:
        DOMINO_RETURN_IF_ERROR(backend.Run(schedule, id));
    }
    timeline.ops[i] = OpTime{since(start), since(Clock::now())};
    if (progress) progress(i + 1, schedule.size());
  }
  return timeline;
}

}  // namespace domino::exec
