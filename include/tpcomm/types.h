// Element types, reduction operators and the stream type used across the public API.
#pragma once

#include <cstddef>
#include <cstdint>

// CUDA's own typedef, repeated so the public headers compile without the CUDA toolkit. An
// identical typedef is legal in C++, so including cuda_runtime.h before or after is fine.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace tpcomm {

/// Element type of a collective's buffers. 16-bit types are always accumulated in fp32.
enum class DataType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

/// Reduction operator.
enum class ReduceOp : int { kSum = 0, kMax = 1, kMin = 2 };

/// Wire format of a compressed all-reduce (docs/compression.md): block-scaled one-byte codes
/// (64 elements share an fp32 scale), fp32 accumulation. Opt-in; only bf16/f16/f32 sums use it.
enum class Compression : int { kNone = 0, kFp8 = 1, kInt8 = 2 };

/// Bytes per element of `t`, or 0 for a value outside the enum.
size_t dataTypeSize(DataType t);

/// "f32", "f16", "bf16", or "invalid".
const char* dataTypeName(DataType t);

/// "sum", "max", "min", or "invalid".
const char* reduceOpName(ReduceOp op);

/// "none", "fp8", "int8", or "invalid".
const char* compressionName(Compression c);

/// Parses "none", "fp8" (also "fp8_e4m3") or "int8" (exact, lower case) into *out; false (and
/// *out untouched) for anything else, NULL included.
bool parseCompression(const char* text, Compression* out);

}  // namespace tpcomm
