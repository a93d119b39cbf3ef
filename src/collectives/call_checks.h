// Argument checks of the public entry points (communicator.cc), each naming the argument and
// what was expected, before any peer is involved; and the one place a call's CollArgs is filled.
#pragma once

#include <cstddef>

#include "algos/common/coll_args.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// Null buffers, zero or overflowing counts, dtype and op outside their enums.
Status validateCall(const char* what, const void* send, const void* recv, size_t count, DataType dtype, ReduceOp op,
                    int nRanks, bool perRank);
/// Whether [p, p + bytes) lies below the top of the address space (no wrap-around).
bool fitsAddressSpace(const void* p, size_t bytes);
/// Whether p == base + offset, computed without forming a pointer that may wrap.
bool isAtOffset(const void* p, const void* base, size_t offset);
/// Both buffers must fit the address space (a wrapped end is refused, naming the buffer).
/// send and recv may be the same buffer (in place, as the collective defines it) or apart; any
/// other overlap would read what the call already wrote, silently wrong, so it is refused.
Status checkOverlap(const char* what, const void* send, size_t sendBytes, const void* recv, size_t recvBytes,
                    bool inPlace);
/// The residual add + RMSNorm's buffers, sizes and eps; `inName` names the reduced input.
Status validateNorm(const char* what, const char* inName, const void* in, void* residual, const void* weight, float eps,
                    void* out, size_t rows, size_t hidden, DataType dtype);
/// A call's arguments as the algorithms take them.
CollArgs collArgs(CollKind kind, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                  cudaStream_t stream);

}  // namespace tpcomm
