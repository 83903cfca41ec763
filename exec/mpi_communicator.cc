#include "exec/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <limits>

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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllReduce(float* data, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    return Check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD),
                 "all-reduce");
  }
  Status ReduceScatter(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD),
                 "reduce-scatter");
  }
  Status AllGather(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                               MPI_FLOAT, MPI_COMM_WORLD),
                 "all-gather");
  }
  Status Gather(const float* in, float* out, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count * size_));
    return Check(MPI_Gather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                            MPI_FLOAT, 0, MPI_COMM_WORLD),
                 "gather");
  }
  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }
  Status SendRecv(const float* send, int to, float* recv, int from, int64_t count) override {
    DOMINO_RETURN_IF_ERROR(CheckCount(count));
    return Check(MPI_Sendrecv(send, static_cast<int>(count), MPI_FLOAT, to, /*tag=*/0, recv,
                              static_cast<int>(count), MPI_FLOAT, from, 0, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE),
                 "send/recv");
  }

 private:
  int rank_, size_;
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
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(rank, size));
}

}  // namespace domino::exec
