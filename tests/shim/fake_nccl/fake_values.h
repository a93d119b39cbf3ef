// fake_values.h: element values for the tests of and against the NCCL test double. Inputs are
// small integers (as nccl-tests' are), so every sum, product, max, min and average has one
// right answer in every type; `encode` writes a value in an NCCL type and `expected` computes
// what a collective must produce, independently of the double's own reduction code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fake_values {

struct Type {
  ncclDataType_t nccl;
  const char* name;
  size_t size;
  bool isFloat, isUnsigned;
};

inline const std::vector<Type>& reducibleTypes() {
  static const std::vector<Type> k = {
      {ncclInt8, "i8", 1, false, false},    {ncclUint8, "u8", 1, false, true},
      {ncclInt32, "i32", 4, false, false},  {ncclUint32, "u32", 4, false, true},
      {ncclInt64, "i64", 8, false, false},  {ncclUint64, "u64", 8, false, true},
      {ncclFloat16, "f16", 2, true, false}, {ncclFloat32, "f32", 4, true, false},
      {ncclFloat64, "f64", 8, true, false}, {ncclBfloat16, "bf16", 2, true, false},
  };
  return k;
}

inline const Type& typeOf(ncclDataType_t t) {
  for (const Type& x : reducibleTypes())
    if (x.nccl == t) return x;
  return reducibleTypes()[0];
}

inline const char* opName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "custom";
  }
}

/// Rank `rank`'s element `i` for `op`: in [-6, 6] ([0, 12] unsigned), or in {-1, 0, 1} ({0, 1, 2}
/// unsigned) for products, so that nothing overflows up to 7 ranks.
inline double input(const Type& t, ncclRedOp_t op, int rank, size_t i) {
  if (op == ncclProd) return static_cast<double>((i + rank) % 3) - (t.isUnsigned ? 0 : 1);
  return static_cast<double>((i * 7 + rank * 3) % 13) - (t.isUnsigned ? 0 : 6);
}

/// Writes `v` (an integer value) as element `i` of a buffer of type `t`.
inline void encode(const Type& t, void* base, size_t i, double v) {
  char* p = static_cast<char*>(base) + i * t.size;
  switch (t.nccl) {
    case ncclInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclUint8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case ncclInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclUint32: {
      uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclUint64: {
      uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case ncclFloat16: {
      __half x = __double2half(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case ncclFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case ncclFloat64:
      std::memcpy(p, &v, 8);
      break;
    case ncclBfloat16: {
      __nv_bfloat16 x = __double2bfloat16(v);
      std::memcpy(p, &x, 2);
      break;
    }
    default:
      break;
  }
}

/// What element `i` of an all-reduce over `n` ranks must be (as a value; encode it to compare).
/// Averages of integers truncate toward zero; of floating types they are the quotient rounded
/// once to the type (NCCL's own avg may round differently: tests compare it with the double only).
inline double expected(const Type& t, ncclRedOp_t op, int n, size_t i) {
  double acc = input(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = input(t, op, r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    if (op == ncclProd) acc *= v;
    if (op == ncclMax) acc = std::max(acc, v);
    if (op == ncclMin) acc = std::min(acc, v);
  }
  if (op == ncclAvg) acc = t.isFloat ? acc / n : std::trunc(acc / n);
  return acc;
}

/// A buffer of `count` elements of `t` filled by `f(i)`.
template <typename F>
std::vector<char> buffer(const Type& t, size_t count, F f) {
  std::vector<char> b(count * t.size);
  for (size_t i = 0; i < count; ++i) encode(t, b.data(), i, f(i));
  return b;
}

/// Index of the first element where `a` and `b` differ (bitwise), or -1.
inline long firstDifference(const Type& t, const std::vector<char>& a, const std::vector<char>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i * t.size < a.size(); ++i)
    if (std::memcmp(a.data() + i * t.size, b.data() + i * t.size, t.size) != 0) return static_cast<long>(i);
  return -1;
}

}  // namespace fake_values
