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

Status checkOverlap(const char* what, const void* send, size_t sendBytes, const void* recv, size_t recvBytes,
                    bool inPlace) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const bool apart = s + sendBytes <= r || r + recvBytes <= s;
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
