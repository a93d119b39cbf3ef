// tune_timer.cc: see tune_timer.h.
#include "tune_timer.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"

namespace tpcomm {

#ifdef TPCOMM_HAVE_CUDA
namespace {
// The tool is outside the library: map a CUDA error to a Status with its text here.
Status cudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::kOk;
  cudaGetLastError();
  return TPCOMM_ERROR(kCudaError, "tune: %s: %s", what, cudaGetErrorString(e));
}
}  // namespace
#define TUNE_CUDA(call) TPCOMM_TRY(cudaStatus((call), #call))
#endif

Status RankTimer::create(int device, size_t maxBytes, std::unique_ptr<RankTimer>* out) {
  std::unique_ptr<RankTimer> t(new RankTimer());
  t->device_ = device;
  const size_t bytes = (maxBytes + 4095) / 4096 * 4096;
  if (device < 0) {
    t->send_ = std::aligned_alloc(4096, bytes);
    t->recv_ = std::aligned_alloc(4096, bytes);
    if (!t->send_ || !t->recv_)
      return TPCOMM_ERROR(kSystemError, "tune: host buffers of %zu bytes: out of memory", bytes);
    // Integer-valued zeros: sums stay finite whatever is timed; touched now, so page faults stay
    // out of the timing.
    std::memset(t->send_, 0, bytes);
    std::memset(t->recv_, 0, bytes);
  } else {
#ifdef TPCOMM_HAVE_CUDA
    TUNE_CUDA(cudaSetDevice(device));
    TUNE_CUDA(cudaMalloc(&t->send_, bytes));
    TUNE_CUDA(cudaMalloc(&t->recv_, bytes));
    TUNE_CUDA(cudaMemset(t->send_, 0, bytes));
    cudaStream_t s;
    TUNE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    t->stream_ = s;
    cudaEvent_t a, b;
    TUNE_CUDA(cudaEventCreate(&a));
    t->start_ = a;
    TUNE_CUDA(cudaEventCreate(&b));
    t->stop_ = b;
    TUNE_CUDA(cudaDeviceSynchronize());
#else
    return TPCOMM_ERROR(kNotSupported, "tune: device %d requested but tpcomm-doctor was built without CUDA", device);
#endif
  }
  *out = std::move(t);
  return Status::kOk;
}

int RankTimer::visibleDevices() {
#ifdef TPCOMM_HAVE_CUDA
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess;
  if (!ok) cudaGetLastError();  // no driver: leave no error behind for later calls
  return ok ? n : 0;
#else
  return 0;
#endif
}

RankTimer::~RankTimer() {
  if (device_ < 0) {
    std::free(send_);
    std::free(recv_);
    return;
  }
#ifdef TPCOMM_HAVE_CUDA
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (send_) cudaFree(send_);
  if (recv_) cudaFree(recv_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
#endif
}

Status RankTimer::timeBatch(Communicator& comm, size_t count, DataType dtype, int calls, double* us) {
  if (device_ < 0) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) TPCOMM_TRY(comm.allReduce(send_, recv_, count, dtype, ReduceOp::kSum, nullptr));
    *us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return Status::kOk;
  }
#ifdef TPCOMM_HAVE_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaEvent_t a = static_cast<cudaEvent_t>(start_), b = static_cast<cudaEvent_t>(stop_);
  TUNE_CUDA(cudaSetDevice(device_));
  TUNE_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < calls; ++i) TPCOMM_TRY(comm.allReduce(send_, recv_, count, dtype, ReduceOp::kSum, s));
  TUNE_CUDA(cudaEventRecord(b, s));
  // The kernels' waits are bounded (TPCOMM_TIMEOUT_MS), so this wait is too.
  TUNE_CUDA(cudaEventSynchronize(b));
  TPCOMM_TRY(comm.checkError());
  float ms = 0;
  TUNE_CUDA(cudaEventElapsedTime(&ms, a, b));
  *us = 1000.0 * ms;
  return Status::kOk;
#else
  (void)comm;
  (void)count;
  (void)dtype;
  (void)calls;
  (void)us;
  return TPCOMM_ERROR(kNotSupported, "tune: built without CUDA");
#endif
}

}  // namespace tpcomm
