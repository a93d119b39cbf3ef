// Bootstrap over MPI. Uses non-blocking collectives polled against a deadline so a rank that
// never arrives yields kTimeout (TPCOMM_TIMEOUT_MS) rather than a hang.
#include "tpcomm/mpi_bootstrap.h"

#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/params.h"

namespace tpcomm {
namespace {

class MpiBootstrap : public Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiBootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allGather(const void* mine, void* all, size_t bytesPerRank) override {
    if ((!mine || !all) && bytesPerRank) return TPCOMM_INVALID("allGather: null buffer");
    if (bytesPerRank > static_cast<size_t>(INT32_MAX))
      return TPCOMM_INVALID("allGather: %zu bytes per rank exceeds MPI's int count", bytesPerRank);
    MPI_Request req;
    int rc = MPI_Iallgather(mine, static_cast<int>(bytesPerRank), MPI_BYTE, all, static_cast<int>(bytesPerRank),
                            MPI_BYTE, comm_, &req);
    if (rc != MPI_SUCCESS) return TPCOMM_ERROR(kSystemError, "MPI_Iallgather failed (%d)", rc);
    return wait(&req, "allGather");
  }

  Status barrier() override {
    MPI_Request req;
    int rc = MPI_Ibarrier(comm_, &req);
    if (rc != MPI_SUCCESS) return TPCOMM_ERROR(kSystemError, "MPI_Ibarrier failed (%d)", rc);
    return wait(&req, "barrier");
  }

 private:
  Status wait(MPI_Request* req, const char* what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(paramInt(ParamId::kTimeoutMs));
    for (int spins = 0;; ++spins) {
      int done = 0;
      int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return TPCOMM_ERROR(kSystemError, "MPI_Test in %s failed (%d)", what, rc);
      if (done) return Status::kOk;
      if (std::chrono::steady_clock::now() > deadline)
        // The request stays pending; MPI offers no portable cancel for collectives.
        return TPCOMM_ERROR(kTimeout, "MPI bootstrap %s: rank %d waited TPCOMM_TIMEOUT_MS for the other ranks", what,
                            rank_);
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

Status makeMpiBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out) {
  if (!out) return TPCOMM_INVALID("makeMpiBootstrap: out is null");
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return TPCOMM_INVALID("makeMpiBootstrap: MPI is not initialized (call MPI_Init first)");
  if (comm == MPI_COMM_NULL) return TPCOMM_INVALID("makeMpiBootstrap: comm is MPI_COMM_NULL");
  MPI_Comm dup;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return TPCOMM_ERROR(kSystemError, "MPI_Comm_dup failed");
  out->reset(new MpiBootstrap(dup));
  return Status::kOk;
}

}  // namespace tpcomm
