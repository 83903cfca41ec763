#ifndef DOMINO_EXEC_NCCL_OPS_H_
#define DOMINO_EXEC_NCCL_OPS_H_

// NCCL for the CUDA backend's collectives, behind an interface with no CUDA or NCCL types
// (nccl_ops.cc implements it). The communicator is non-blocking: every call returns at once and
// the wait for it to be ready polls its asynchronous error with a deadline, so a dead or stuck peer
// ends in a clear error and ncclCommAbort instead of a hang.
#include <cstdint>
#include <string>

#include "exec/cuda_ops.h"

namespace domino::exec::cuda {

struct Nccl;

// The 128-byte ncclUniqueId rank 0 creates and every rank must receive (over MPI).
Status NcclUniqueId(std::string* id);

struct NcclConfig {
  int min_ctas = 0;  // 0: NCCL's default
  int max_ctas = 0;
  double timeout_s = 300;  // how long a call may stay in progress
};

// Rank `rank` of `size` on the context's device, from rank 0's unique id.
Status NcclInit(Context* context, int rank, int size, const std::string& id,
                const NcclConfig& config, Nccl** out);
// Collectives on the context's current stream, on contiguous device buffers of the context's
// element type (sums in reductions; an all-reduce's in fp32 with `f32`, as the loss statistics
// are held). Counts as in exec/communicator.h: per rank.
Status NcclAllReduce(Nccl* nccl, const void* in, void* out, int64_t count, bool f32 = false);
Status NcclReduceScatter(Nccl* nccl, const void* in, void* out, int64_t count);
Status NcclAllGather(Nccl* nccl, const void* in, void* out, int64_t count);
// Rooted collectives in one NCCL group (ncclGroupStart/End), for a decomposed collective's part:
// each piece moves `count` elements of the context's type. Broadcast: from rank `root`'s `in`
// into every rank's `out` (`in` read on the root only). Reduce: the sum over ranks of `in` into
// rank `root`'s `out` (`out` written on the root only).
struct NcclPiece {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;
  int root = 0;
};
Status NcclBroadcasts(Nccl* nccl, const NcclPiece* pieces, int count);
Status NcclReduces(Nccl* nccl, const NcclPiece* pieces, int count);
// Point-to-point on the context's comm stream: `count` elements of `type` (whatever the
// context's) to or from rank `peer`. A send completes once its receive has; sends and receives
// between two ranks match in issue order.
Status NcclSend(Nccl* nccl, const void* data, int64_t count, DType type, int peer);
Status NcclRecv(Nccl* nccl, void* data, int64_t count, DType type, int peer);
// Later calls run on `context`'s comm stream, in its element type: a communicator lent to
// several contexts of one device, one at a time.
void NcclUseContext(Nccl* nccl, Context* context);
// Ok while the communicator is healthy, else its asynchronous error (a peer failed).
Status NcclPoll(Nccl* nccl);
// Ends the communicator without waiting for peers (after an error or a timeout).
void NcclAbort(Nccl* nccl);
// Frees a healthy communicator; null-safe.
void NcclDestroy(Nccl* nccl);

}  // namespace domino::exec::cuda

#endif  // DOMINO_EXEC_NCCL_OPS_H_
