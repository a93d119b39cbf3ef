// What a collective call carries down to an algorithm.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/enum_names.h"
#include "tpcomm/types.h"

namespace tpcomm {

enum class CollKind : int { kAllReduce = 0, kReduceScatter, kAllGather };
inline const char* collKindName(CollKind k) {
  static const char* const kNames[] = {"allReduce", "reduceScatter", "allGather"};
  return enumName(k, kNames, "invalid");
}

/// A validated collective call. `count` is the per-rank piece in elements: allReduce's count,
/// reduceScatter's recvCount, allGather's sendCount.
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  cudaStream_t stream = nullptr;
  bool capturing = false;  ///< the stream is capturing a CUDA graph
  int nRanks = 1;
  int compression = -1;  ///< this call's Compression; -1: the communicator's (AlgoOverride::compression)
  /// This rank's number for the call (HostStagedTransport::beginCall: 1, 2, ..., the same on every
  /// rank for the same call); 0 where no host segment counts calls. Kernels record it as they
  /// start, so a peer whose wait expires can tell why this rank was late (common/async_error.h).
  uint64_t callNumber = 0;

  size_t elemSize() const { return dataTypeSize(dtype); }
  /// Bytes of the largest buffer (nccl-tests' "size"): allReduce count, else count * nRanks.
  size_t bytes() const { return count * elemSize() * (kind == CollKind::kAllReduce ? 1 : nRanks); }
};

/// The part of a call the selector looks at (pure data).
struct AlgoQuery {
  CollKind kind = CollKind::kAllReduce;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  size_t bytes = 0;
  bool capturing = false;
  int compression = -1;  ///< the call's Compression; -1: the communicator's (AlgoOverride::compression)

  static AlgoQuery of(const CollArgs& a) { return {a.kind, a.dtype, a.op, a.bytes(), a.capturing, a.compression}; }
};

}  // namespace tpcomm
