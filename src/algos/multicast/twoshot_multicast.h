// twoshot_multicast: what its class (twoshot_multicast.cc) and its kernel (twoshot_multicast.cu)
// share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/common/launch_params.h"
#include "transports/multicast.h"

namespace tpcomm {

/// Parameters of one multicast all-reduce (twoshot_multicast.cu).
struct MulticastLaunch : CallParams {
  int blocks;
  char* uc;  // this rank's allocation (unicast view)
  char* mc;  // the multicast view of the same offsets
  MulticastLayout layout;
  uint32_t* errorWord;
  uint64_t timeoutNs;
};

/// Whether multimem.ld_reduce can reduce this type with this op: add for f32/f16/bf16 (16-bit
/// types accumulated in fp32 by .acc::f32); max/min for f16/bf16 only (PTX has no f32 max/min).
bool multicastReducible(DataType dtype, ReduceOp op);

/// Blocks for a call of `count` elements of `elemBytes` (the same on every rank): one pack per
/// thread of a rank's slice of a chunk, within the layout's and the caller's maximum.
int multicastBlocks(size_t count, size_t elemBytes, int nRanks, const MulticastLayout& l, int maxBlocks);

Status launchTwoshotMulticast(const MulticastLaunch& p, cudaStream_t stream);
Status preloadTwoshotMulticast();

}  // namespace tpcomm
