// NCCL communicators of the CUDA backend: non-blocking, bootstrapped from rank 0's unique id,
// every wait bounded by a deadline.
#include "exec/nccl_ops.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "exec/nccl_ctas.h"

namespace domino::exec::cuda {

struct Nccl {
  Context* context = nullptr;
  ncclComm_t comm = nullptr;
  double timeout_s = 300;
  int size = 1;
};

namespace {

std::string Text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kBf16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kF32:
      break;
  }
  return ncclFloat32;
}

// Waits until the communicator has finished its last call (a non-blocking communicator reports
// ncclInProgress meanwhile: NCCL 2.28 finishes enqueueing every collective on a thread of its
// own), at most timeout_s. A collective's enqueue takes tens of microseconds, about the compute
// between two of Domino's split collectives, so the wait spins (yielding the core) instead of
// sleeping, which would cost at least a scheduler tick each; after kSpin it sleeps in short
// steps, for the long waits (init, a stuck peer).
Status Ready(Nccl* n, const char* what, ncclResult_t issued) {
  if (issued != ncclSuccess && issued != ncclInProgress)
    return Error(std::string(what) + ": " + Text(issued, n->comm));
  constexpr auto kSpin = std::chrono::milliseconds(20);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(n->timeout_s);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
    if (r != ncclSuccess) return Error(std::string(what) + ": " + Text(r, n->comm));
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return Error(std::string(what) + ": " + Text(state, n->comm));
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline)
      return Error(std::string(what) + ": still in progress after " +
                   std::to_string(static_cast<int>(n->timeout_s)) +
                   " s (a peer has died or hangs)");
    if (now - start < kSpin)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

cudaStream_t Stream(Nccl* n) {
  return static_cast<cudaStream_t>(StreamHandle(n->context, StreamKind::kComm));
}

}  // namespace

Status NcclUniqueId(std::string* id) {
  ncclUniqueId unique;
  ncclResult_t r = ncclGetUniqueId(&unique);
  if (r != ncclSuccess) return Error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  id->assign(unique.internal, sizeof(unique.internal));
  return Status::Ok();
}

Status NcclInit(Context* context, int rank, int size, const std::string& id,
                const NcclConfig& config, Nccl** out) {
  ncclUniqueId unique;
  if (id.size() != sizeof(unique.internal))
    return Error("NCCL unique id of " + std::to_string(id.size()) + " bytes, not " +
                 std::to_string(sizeof(unique.internal)));
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  // Both or neither: NCCL compares them before filling an unset one (exec/nccl_ctas.h).
  Result<NcclCtas> ctas = ResolveNcclCtas(config.min_ctas, config.max_ctas);
  if (!ctas.ok()) return ctas.error();
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  if (config.min_ctas > 0 || config.max_ctas > 0) {
    c.minCTAs = ctas->min;
    c.maxCTAs = ctas->max;
  }
  auto* n = new Nccl;
  n->context = context;
  n->timeout_s = config.timeout_s;
  n->size = size;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, size, unique, rank, &c);
  Status e = n->comm == nullptr && r != ncclSuccess
                 ? Error(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r))
                 : Ready(n, "ncclCommInitRankConfig", r);
  if (!e.ok()) {
    NcclAbort(n);
    return e;
  }
  *out = n;
  return Status::Ok();
}

Status NcclAllReduce(Nccl* n, const void* in, void* out, int64_t count, bool f32) {
  return Ready(
      n, "ncclAllReduce",
      ncclAllReduce(in, out, static_cast<size_t>(count),
                    f32 ? ncclFloat32 : NcclType(TypeOf(n->context)), ncclSum, n->comm, Stream(n)));
}

Status NcclReduceScatter(Nccl* n, const void* in, void* out, int64_t count) {
  return Ready(n, "ncclReduceScatter",
               ncclReduceScatter(in, out, static_cast<size_t>(count), NcclType(TypeOf(n->context)),
                                 ncclSum, n->comm, Stream(n)));
}

Status NcclAllGather(Nccl* n, const void* in, void* out, int64_t count) {
  return Ready(n, "ncclAllGather",
               ncclAllGather(in, out, static_cast<size_t>(count), NcclType(TypeOf(n->context)),
                             n->comm, Stream(n)));
}

namespace {

// Issues `call` for every piece inside one NCCL group; the group is the one call to wait for.
template <typename Call>
Status Grouped(Nccl* n, const char* what, const NcclPiece* pieces, int count, Call call) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return Error(std::string("ncclGroupStart: ") + Text(r, n->comm));
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < count; ++i) {
    ncclResult_t issued = call(pieces[i]);
    if (issued != ncclSuccess && issued != ncclInProgress && first == ncclSuccess) first = issued;
  }
  r = ncclGroupEnd();
  if (first != ncclSuccess) return Error(std::string(what) + ": " + Text(first, n->comm));
  return Ready(n, what, r);
}

}  // namespace

Status NcclBroadcasts(Nccl* n, const NcclPiece* pieces, int count) {
  const ncclDataType_t type = NcclType(TypeOf(n->context));
  return Grouped(n, "ncclBroadcast (grouped)", pieces, count, [&](const NcclPiece& p) {
    return ncclBroadcast(p.in, p.out, static_cast<size_t>(p.count), type, p.root, n->comm,
                         Stream(n));
  });
}

Status NcclReduces(Nccl* n, const NcclPiece* pieces, int count) {
  const ncclDataType_t type = NcclType(TypeOf(n->context));
  return Grouped(n, "ncclReduce (grouped)", pieces, count, [&](const NcclPiece& p) {
    return ncclReduce(p.in, p.out, static_cast<size_t>(p.count), type, ncclSum, p.root, n->comm,
                      Stream(n));
  });
}

Status NcclSend(Nccl* n, const void* data, int64_t count, DType type, int peer) {
  return Ready(
      n, "ncclSend",
      ncclSend(data, static_cast<size_t>(count), NcclType(type), peer, n->comm, Stream(n)));
}

Status NcclRecv(Nccl* n, void* data, int64_t count, DType type, int peer) {
  return Ready(
      n, "ncclRecv",
      ncclRecv(data, static_cast<size_t>(count), NcclType(type), peer, n->comm, Stream(n)));
}

void NcclUseContext(Nccl* n, Context* context) { n->context = context; }

Status NcclPoll(Nccl* n) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
  if (r != ncclSuccess) return Error(Text(r, n->comm));
  if (state != ncclSuccess && state != ncclInProgress) return Error(Text(state, n->comm));
  return Status::Ok();
}

void NcclAbort(Nccl* n) {
  if (n == nullptr) return;
  if (n->comm != nullptr) ncclCommAbort(n->comm);
  delete n;
}

void NcclDestroy(Nccl* n) {
  if (n == nullptr) return;
  if (n->comm != nullptr) {
    // Finalize flushes outstanding work; a non-blocking communicator finishes it asynchronously.
    if (Ready(n, "ncclCommFinalize", ncclCommFinalize(n->comm)).ok())
      ncclCommDestroy(n->comm);
    else
      ncclCommAbort(n->comm);
  }
  delete n;
}

}  // namespace domino::exec::cuda
