// fake_data.cc: the NCCL test double's element types, reductions and memory access. Reductions
// run on the host in rank order: integers in their own type (wrapping, as unsigned arithmetic),
// floating types accumulated in double and rounded once to the element type, so integer-valued
// inputs give exact, bitwise-reproducible results. Where a CUDA device is visible, every copy
// goes through cudaMemcpy(cudaMemcpyDefault), so buffers may be device or host memory; without
// one the double works on host memory with memcpy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <type_traits>

#include "fake_internal.h"

namespace fakenccl {
namespace {

template <typename T>
T loadAs(const char* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void storeAs(char* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}

// Integers: sum and product wrap (computed unsigned), avg is the sum divided by n.
template <typename T>
void reduceInt(ncclRedOp_t op, const char* const* in, int n, size_t count, char* out) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < count; ++i) {
    T acc = loadAs<T>(in[0], i);
    for (int r = 1; r < n; ++r) {
      T v = loadAs<T>(in[r], i);
      if (op == ncclSum || op == ncclAvg) acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
      if (op == ncclProd) acc = static_cast<T>(static_cast<U>(acc) * static_cast<U>(v));
      if (op == ncclMax) acc = v > acc ? v : acc;
      if (op == ncclMin) acc = v < acc ? v : acc;
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    storeAs<T>(out, i, acc);
  }
}

// Floating types: `load` gives a double, `store` rounds one back.
template <typename Load, typename Store>
void reduceFloat(ncclRedOp_t op, const char* const* in, int n, size_t count, char* out, Load load, Store store) {
  for (size_t i = 0; i < count; ++i) {
    double acc = load(in[0], i);
    for (int r = 1; r < n; ++r) {
      double v = load(in[r], i);
      if (op == ncclSum || op == ncclAvg) acc += v;
      if (op == ncclProd) acc *= v;
      if (op == ncclMax) acc = v > acc ? v : acc;
      if (op == ncclMin) acc = v < acc ? v : acc;
    }
    if (op == ncclAvg) acc /= n;
    store(out, i, acc);
  }
}

bool cudaVisible() {
  static const bool visible = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess && n > 0;
  }();
  return visible;
}

}  // namespace

size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
#if NCCL_VERSION_CODE >= 22400
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
#endif
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool canReduce(ncclDataType_t t, ncclRedOp_t op) {
  if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin && op != ncclAvg) return false;  // PreMulSum
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclInt32:
    case ncclUint32:
    case ncclInt64:
    case ncclUint64:
    case ncclFloat16:
    case ncclBfloat16:
    case ncclFloat32:
    case ncclFloat64:
      return true;
    default:
      return false;  // fp8: moved (all-gather, broadcast) but not reduced
  }
}

void reduce(ncclDataType_t t, ncclRedOp_t op, const char* const* in, int n, size_t count, char* out) {
  switch (t) {
    case ncclInt8:
      return reduceInt<int8_t>(op, in, n, count, out);
    case ncclUint8:
      return reduceInt<uint8_t>(op, in, n, count, out);
    case ncclInt32:
      return reduceInt<int32_t>(op, in, n, count, out);
    case ncclUint32:
      return reduceInt<uint32_t>(op, in, n, count, out);
    case ncclInt64:
      return reduceInt<int64_t>(op, in, n, count, out);
    case ncclUint64:
      return reduceInt<uint64_t>(op, in, n, count, out);
    case ncclFloat32:
      return reduceFloat(
          op, in, n, count, out, [](const char* b, size_t i) { return static_cast<double>(loadAs<float>(b, i)); },
          [](char* b, size_t i, double v) { storeAs<float>(b, i, static_cast<float>(v)); });
    case ncclFloat64:
      return reduceFloat(
          op, in, n, count, out, [](const char* b, size_t i) { return loadAs<double>(b, i); },
          [](char* b, size_t i, double v) { storeAs<double>(b, i, v); });
    case ncclFloat16:
      return reduceFloat(
          op, in, n, count, out,
          [](const char* b, size_t i) { return static_cast<double>(__half2float(loadAs<__half>(b, i))); },
          [](char* b, size_t i, double v) { storeAs<__half>(b, i, __double2half(v)); });
    case ncclBfloat16:
      return reduceFloat(
          op, in, n, count, out,
          [](const char* b, size_t i) { return static_cast<double>(__bfloat162float(loadAs<__nv_bfloat16>(b, i))); },
          [](char* b, size_t i, double v) { storeAs<__nv_bfloat16>(b, i, __double2bfloat16(v)); });
    default:
      return;
  }
}

bool hostOnly() { return !cudaVisible(); }

int deviceCount() {
  int n = 0;
  if (!cudaVisible() || cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

int currentDevice() {
  int d = 0;
  if (cudaVisible() && cudaGetDevice(&d) != cudaSuccess) d = 0;
  return d;
}

ncclResult_t copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return ncclSuccess;
  if (!cudaVisible()) {
    std::memmove(dst, src, bytes);
    return ncclSuccess;
  }
  // On a non-blocking stream of the double's own: a legacy-stream copy would also wait for
  // kernels on the caller's blocking streams (e.g. a tpcomm kernel waiting for a peer).
  thread_local std::map<int, cudaStream_t> streams;
  cudaStream_t& s = streams[currentDevice()];
  cudaError_t e = s ? cudaSuccess : cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) return ncclSuccess;
  cudaGetLastError();
  setLastError("fake NCCL: cudaMemcpy(%p <- %p, %zu bytes): %s", dst, src, bytes, cudaGetErrorString(e));
  return ncclUnhandledCudaError;
}

ncclResult_t streamCapturing(cudaStream_t stream, bool* capturing) {
  *capturing = false;
  if (!cudaVisible()) return ncclSuccess;
  cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &s);
  if (e != cudaSuccess) {
    cudaGetLastError();
    setLastError("fake NCCL: cudaStreamIsCapturing: %s", cudaGetErrorString(e));
    return ncclUnhandledCudaError;
  }
  *capturing = s != cudaStreamCaptureStatusNone;
  return ncclSuccess;
}

OnDevice::OnDevice(int device) {
  if (!cudaVisible() || cudaGetDevice(&prev_) != cudaSuccess || prev_ == device) {
    prev_ = -1;
    return;
  }
  cudaSetDevice(device);
}

OnDevice::~OnDevice() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

ncclResult_t syncStream(cudaStream_t stream) {
  if (!cudaVisible()) return ncclSuccess;
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) return ncclSuccess;
  cudaGetLastError();
  setLastError("fake NCCL: cudaStreamSynchronize: %s", cudaGetErrorString(e));
  return ncclUnhandledCudaError;
}

}  // namespace fakenccl
