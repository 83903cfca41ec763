#ifndef DOMINO_EXEC_NCCL_OPS_H_
#define DOMINO_EXEC_NCCL_OPS_H_

// NCCL for the CUDA backend's collectives, behind an interface with no CUDA or NCCL types
// (nccl_ops.cc implements it). The communicator is non-blocking: every call returns at once and
// the wait for it to be ready polls its asynchronous error with a deadline, so a dead or stuck peer
// ends in a clear error and ncclCommAbort instead of a hang.
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
// element type (sums in reductions). Counts as in exec/communicator.h: per rank.
Status NcclAllReduce(Nccl* nccl, const void* in, void* out, int64_t count);
Status NcclReduceScatter(Nccl* nccl, const void* in, void* out, int64_t count);
Status NcclAllGather(Nccl* nccl, const void* in, void* out, int64_t count);
// Ok while the communicator is healthy, else its asynchronous error (a peer failed).
Status NcclPoll(Nccl* nccl);
// Ends the communicator without waiting for peers (after an error or a timeout).
void NcclAbort(Nccl* nccl);
// Frees a healthy communicator; null-safe.
void NcclDestroy(Nccl* nccl);

}  // namespace domino::exec::cuda

#endif  // DOMINO_EXEC_NCCL_OPS_H_
