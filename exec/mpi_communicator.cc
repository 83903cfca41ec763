#include "exec/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <list>
#include <vector>

namespace domino::exec {
namespace {

Status Check(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Error(fmt::format("MPI {} failed: {}", what, std::string(text, length)));
}

Status CheckCount(int64_t count) {
  if (count > std::numeric_limits<int>::max())
    return Error(fmt::format("MPI collective of {} elements exceeds MPI's int count", count));
  return Status::Ok();
}

// Point-to-point sends use this tag; SendRecv uses 0.
constexpr int kSendTag = 1;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Every send has a receive in the schedule, so these complete.
    for (Pending& p : pending_) MPI_Wait(&p.request, MPI_STATUS_IGNORE);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllReduce(float* data, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    return Check(
        MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
        "all-reduce");
  }
  Status ReduceScatter(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(
        MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
        "reduce-scatter");
  }
  Status AllGather(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                               MPI_FLOAT, comm_),
                 "all-gather");
  }
  Status Gather(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Gather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                            MPI_FLOAT, 0, comm_),
                 "gather");
  }
  Status AllToAll(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Alltoall(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                              MPI_FLOAT, comm_),
                 "all-to-all");
  }
  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);  // every rank, not only this group's
    std::_Exit(exit_code);
  }
  Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    return Check(
        MPI_Sendrecv(send, static_cast<int>(count), MPI_FLOAT, to, /*tag=*/0, recv,
                     static_cast<int>(count), MPI_FLOAT, from, 0, comm_, MPI_STATUS_IGNORE),
        "send/recv");
  }

  Status Send(const float* data, int64_t count, int to) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    Complete();
    pending_.push_back(Pending{std::vector<float>(data, data + count), MPI_REQUEST_NULL});
    Pending& p = pending_.back();
    return Check(MPI_Isend(p.data.data(), static_cast<int>(count), MPI_FLOAT, to, kSendTag, comm_,
                           &p.request),
                 "send");
  }
  Status Recv(float* data, int64_t count, int from) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    MPI_Status status;
    DOMINO_RETURN_IF_ERROR(
        Check(MPI_Recv(data, static_cast<int>(count), MPI_FLOAT, from, kSendTag, comm_, &status),
              "recv"));
    int got = 0;
    MPI_Get_count(&status, MPI_FLOAT, &got);
    if (got != count)
      return Error(fmt::format("recv: rank {} sent {} elements, {} expected", from, got, count));
    Complete();
    return Status::Ok();
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MPI_Comm comm = MPI_COMM_NULL;
    DOMINO_RETURN_IF_ERROR(Check(MPI_Comm_split(comm_, color, key, &comm), "comm split"));
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(comm, rank, size));
  }

 private:
  // A send in flight and the copy it sends from.
  struct Pending {
    std::vector<float> data;
    MPI_Request request;
  };
  // Frees the copies of sends that have completed.
  void Complete() {
    std::erase_if(pending_, [](Pending& p) {
      int done = 0;
      MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  MPI_Comm comm_;
  int rank_, size_;
  std::list<Pending> pending_;  // a list: MPI holds pointers into each copy
};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool HaveMpi() { return true; }

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    DOMINO_RETURN_IF_ERROR(Check(MPI_Init(nullptr, nullptr), "init"));
    std::atexit(FinalizeAtExit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  DOMINO_RETURN_IF_ERROR(Check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "comm rank"));
  DOMINO_RETURN_IF_ERROR(Check(MPI_Comm_size(MPI_COMM_WORLD, &size), "comm size"));
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, rank, size));
}

}  // namespace domino::exec
