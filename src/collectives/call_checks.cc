// call_checks.cc: see call_checks.h.
#include "collectives/call_checks.h"

#include <cmath>
#include <cstdint>

#include "algos/fused/fused_rmsnorm.h"
#include "common/error.h"

namespace tpcomm {

Status validateCall(const char* what, const void* send, const void* recv, size_t count, DataType dtype, ReduceOp op,
                    int nRanks, bool perRank) {
  if (!send) return TPCOMM_INVALID("%s: send is null", what);
  if (!recv) return TPCOMM_INVALID("%s: recv is null", what);
  if (count == 0) return TPCOMM_INVALID("%s: count is 0: expected at least one element", what);
  if (dataTypeSize(dtype) == 0)
    return TPCOMM_INVALID("%s: dtype %d is not a DataType (f32, f16, bf16)", what, static_cast<int>(dtype));
  if (op != ReduceOp::kSum && op != ReduceOp::kMax && op != ReduceOp::kMin)
    return TPCOMM_INVALID("%s: op %d is not a ReduceOp (sum, max, min)", what, static_cast<int>(op));
  size_t limit = SIZE_MAX / dataTypeSize(dtype) / (perRank ? static_cast<size_t>(nRanks) : 1);
  if (count > limit) return TPCOMM_INVALID("%s: count %zu overflows the byte size of the buffers", what, count);
  return Status::kOk;
}

bool fitsAddressSpace(const void* p, size_t bytes) { return bytes <= UINTPTR_MAX - reinterpret_cast<uintptr_t>(p); }

bool isAtOffset(const void* p, const void* base, size_t offset) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  return a >= b && a - b == offset;
}

Status checkOverlap(const char* what, const void* send, size_t sendBytes, const void* recv, size_t recvBytes,
                    bool inPlace) {
  // No pointer + size is formed: near the top of the address space it wraps, and a wrapped end
  // made a buffer that cannot exist look apart from the other one.
  if (!fitsAddressSpace(send, sendBytes))
    return TPCOMM_INVALID("%s: send [%p, +%zu) runs past the end of the address space: expected a real buffer", what,
                          send, sendBytes);
  if (!fitsAddressSpace(recv, recvBytes))
    return TPCOMM_INVALID("%s: recv [%p, +%zu) runs past the end of the address space: expected a real buffer", what,
                          recv, recvBytes);
  const uintptr_t s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const bool apart = s <= r ? r - s >= sendBytes : s - r >= recvBytes;
  if (apart || inPlace) return Status::kOk;
  return TPCOMM_INVALID(
      "%s: send [%p, +%zu) and recv [%p, +%zu) overlap without being in place: expected the same buffer or "
      "disjoint ones",
      what, send, sendBytes, recv, recvBytes);
}

Status validateNorm(const char* what, const char* inName, const void* in, void* residual, const void* weight, float eps,
                    void* out, size_t rows, size_t hidden, DataType dtype) {
  if (!in) return TPCOMM_INVALID("%s: %s is null", what, inName);
  if (!residual) return TPCOMM_INVALID("%s: residualInOut is null", what);
  if (!weight) return TPCOMM_INVALID("%s: weight is null", what);
  if (!out) return TPCOMM_INVALID("%s: out is null", what);
  if (dataTypeSize(dtype) == 0)
    return TPCOMM_INVALID("%s: dtype %d is not a DataType (f32, f16, bf16)", what, static_cast<int>(dtype));
  if (rows == 0) return TPCOMM_INVALID("%s: rows is 0: expected at least one row", what);
  if (hidden == 0 || hidden > kMaxRmsNormHidden)
    return TPCOMM_INVALID("%s: hidden %zu: expected 1..%zu", what, hidden, kMaxRmsNormHidden);
  if (!std::isfinite(eps) || eps < 0) return TPCOMM_INVALID("%s: eps %g: expected a finite value >= 0", what, eps);
  if (rows > SIZE_MAX / hidden / dataTypeSize(dtype))
    return TPCOMM_INVALID("%s: rows %zu x hidden %zu overflows the byte size of the buffers", what, rows, hidden);
  const size_t bytes = rows * hidden * dataTypeSize(dtype);
  const struct {
    const char* name;
    const void* p;
    size_t bytes;
  } buffers[] = {{inName, in, bytes},
                 {"residualInOut", residual, bytes},
                 {"weight", weight, hidden * dataTypeSize(dtype)},
                 {"out", out, bytes}};
  for (const auto& b : buffers)
    if (!fitsAddressSpace(b.p, b.bytes))
      return TPCOMM_INVALID("%s: %s [%p, +%zu) runs past the end of the address space: expected a real buffer", what,
                            b.name, b.p, b.bytes);
  if (residual == in || residual == out)
    return TPCOMM_INVALID("%s: residualInOut must not be the same buffer as %s or out", what, inName);
  if (weight == out || weight == residual) return TPCOMM_INVALID("%s: weight must not be an output buffer", what);
  return Status::kOk;
}

CollArgs collArgs(CollKind kind, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                  cudaStream_t stream) {
  CollArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.stream = stream;
  return a;
}

}  // namespace tpcomm
