// nccl_bootstrap: tpcomm's set-up exchange over an existing NCCL communicator. allGather stages
// the caller's bytes into a small device buffer, runs ncclAllGather (ncclUint8) on a private
// non-blocking stream and copies the result back only after the stream is known to be idle,
// so no host call ever blocks on a kernel that waits for a peer. The wait polls
// cudaStreamQuery and ncclCommGetAsyncError; past the timeout it aborts the communicator.
// Large exchanges go in pieces of kPieceBytes per rank.
#include "tpcomm/nccl_bootstrap.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "common/error.h"

namespace tpcomm {
namespace {

constexpr size_t kPieceBytes = 64 * 1024;  // per rank per NCCL call

// Restores the caller's device on scope exit.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

class NcclBootstrap : public Bootstrap {
 public:
  NcclBootstrap(ncclComm_t comm, const NcclFunctions& f, int rank, int size, int device, int timeoutMs)
      : comm_(comm), f_(f), rank_(rank), size_(size), device_(device), timeoutMs_(timeoutMs) {}

  ~NcclBootstrap() override {
    DeviceScope scope(device_);
    // After an abort the stream may still hold the aborted kernel's tail; it ends promptly.
    if (stream_ && !aborted_) cudaStreamSynchronize(stream_);
    if (stream_) cudaStreamDestroy(stream_);
    if (sendBuf_) cudaFree(sendBuf_);
    if (recvBuf_) cudaFree(recvBuf_);
    cudaGetLastError();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allGather(const void* mine, void* all, size_t bytesPerRank) override {
    if (abandoned_) return TPCOMM_ERROR(kRemoteError, "nccl bootstrap: abandoned (communicator teardown)");
    if (aborted_)
      return TPCOMM_ERROR(kRemoteError, "nccl bootstrap: the NCCL communicator was aborted after a timeout");
    if (bytesPerRank == 0) return Status::kOk;
    if (!mine || !all) return TPCOMM_INVALID("nccl bootstrap allGather: %s is null", mine ? "all" : "mine");
    DeviceScope scope(device_);
    TPCOMM_TRY(ensureBuffers());
    const char* in = static_cast<const char*>(mine);
    char* out = static_cast<char*>(all);
    for (size_t off = 0; off < bytesPerRank; off += kPieceBytes) {
      size_t n = std::min(kPieceBytes, bytesPerRank - off);
      TPCOMM_TRY(cuda(cudaMemcpyAsync(sendBuf_, in + off, n, cudaMemcpyHostToDevice, stream_), "copy in"));
      ncclResult_t r = f_.allGather(sendBuf_, recvBuf_, n, ncclUint8, comm_, stream_);
      if (r != ncclSuccess && r != ncclInProgress)
        return TPCOMM_ERROR(kRemoteError, "nccl bootstrap: ncclAllGather: %s", f_.getErrorString(r));
      TPCOMM_TRY(waitIdle());
      // The stream is idle: these copies cannot block on a peer.
      piece_.resize(n * size_);
      TPCOMM_TRY(cuda(cudaMemcpy(piece_.data(), recvBuf_, n * size_, cudaMemcpyDeviceToHost), "copy out"));
      for (int r2 = 0; r2 < size_; ++r2) std::memcpy(out + r2 * bytesPerRank + off, piece_.data() + r2 * n, n);
    }
    return Status::kOk;
  }

  Status barrier() override {
    char mine = 1;
    std::vector<char> all(size_);
    return allGather(&mine, all.data(), 1);
  }

  void abandon() { abandoned_ = true; }
  bool aborted() const { return aborted_; }

 private:
  Status cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::kOk;
    cudaGetLastError();
    return TPCOMM_ERROR(kCudaError, "nccl bootstrap (rank %d, device %d): %s: %s", rank_, device_, what,
                        cudaGetErrorString(e));
  }

  Status ensureBuffers() {
    if (stream_) return Status::kOk;
    TPCOMM_TRY(cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    TPCOMM_TRY(cuda(cudaMalloc(&sendBuf_, kPieceBytes), "cudaMalloc"));
    TPCOMM_TRY(cuda(cudaMalloc(&recvBuf_, kPieceBytes * size_), "cudaMalloc"));
    return Status::kOk;
  }

  // Bounded wait for the enqueued exchange: a non-blocking communicator first finishes
  // enqueuing (ncclInProgress -> ncclSuccess), then the stream drains.
  Status waitIdle() {
    const int bound = bootstrapTimeoutMs(timeoutMs_);  // timeoutMs_: the explicit value, 0 if none
    auto start = std::chrono::steady_clock::now();
    auto elapsedMs = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    };
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = f_.commGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress)
        return TPCOMM_ERROR(kRemoteError, "nccl bootstrap (rank %d): NCCL reports %s", rank_, f_.getErrorString(state));
      if (state == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::kOk;
        if (e != cudaErrorNotReady) return cuda(e, "cudaStreamQuery");
      }
      if (elapsedMs() > bound) {
        f_.commAbort(comm_);
        aborted_ = true;
        return TPCOMM_ERROR(kTimeout,
                            "nccl bootstrap (rank %d of %d): a peer did not join the exchange within %d ms (%s; "
                            "NCCL cannot say which); the bootstrap's NCCL communicator was aborted",
                            rank_, size_, bound, bootstrapTimeoutSource(timeoutMs_));
      }
      if (spins < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  ncclComm_t comm_;
  NcclFunctions f_;
  int rank_, size_, device_, timeoutMs_;
  cudaStream_t stream_ = nullptr;
  void* sendBuf_ = nullptr;
  void* recvBuf_ = nullptr;
  std::vector<char> piece_;
  bool abandoned_ = false;
  bool aborted_ = false;
};

}  // namespace

Status makeNcclBootstrap(ncclComm_t comm, const NcclFunctions& f, int timeoutMs, std::unique_ptr<Bootstrap>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("makeNcclBootstrap: out is null");
  out->reset();
  if (!comm) return TPCOMM_INVALID("makeNcclBootstrap: comm is null");
  if (!f.allGather || !f.commGetAsyncError || !f.commAbort || !f.getErrorString || !f.commCount || !f.commUserRank ||
      !f.commCuDevice)
    return TPCOMM_INVALID("makeNcclBootstrap: nccl: a function pointer is null (use linkedNcclFunctions())");
  if (timeoutMs < 0)
    return TPCOMM_INVALID("makeNcclBootstrap: timeoutMs %d: expected >= 0 (0: TPCOMM_TIMEOUT_MS)", timeoutMs);
  int rank = -1, size = 0, device = -1;
  ncclResult_t r = f.commUserRank(comm, &rank);
  if (r == ncclSuccess) r = f.commCount(comm, &size);
  if (r == ncclSuccess) r = f.commCuDevice(comm, &device);
  if (r != ncclSuccess)
    return TPCOMM_INVALID("makeNcclBootstrap: comm is not a ready NCCL communicator: %s", f.getErrorString(r));
  if (size < 1 || rank < 0 || rank >= size || device < 0)
    return TPCOMM_INVALID("makeNcclBootstrap: comm reports rank %d of %d on device %d", rank, size, device);
  out->reset(new NcclBootstrap(comm, f, rank, size, device, timeoutMs));
  return Status::kOk;
}

void abandonNcclBootstrap(Bootstrap* b) {
  if (auto* n = dynamic_cast<NcclBootstrap*>(b)) n->abandon();
}

bool ncclBootstrapAborted(const Bootstrap* b) {
  auto* n = dynamic_cast<const NcclBootstrap*>(b);
  return n && n->aborted();
}

}  // namespace tpcomm
