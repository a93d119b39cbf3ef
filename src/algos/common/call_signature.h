// callSignature: what every rank must agree on for one call, as one word the GPU kernels compare
// under TPCOMM_CHECK_CALLS (LaunchSettings::checkCalls): the P2P kernels (p2p_common.cuh) and
// staged_host's (staged_device.cuh). Ranks whose calls differ in it would pair wrong data.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "algos/common/coll_args.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// FNV-1a of the call's shape (collective, count, dtype, op, fused or not, wire format), never 0
/// (0 means "not checked"). The wire format is the algorithm's: ranks that ran an algorithm and
/// its compressed form on one call (after different per-call overrides) share epochs or slots
/// but not the format.
inline uint32_t callSignature(const CollArgs& a, bool fused, Compression wire) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {static_cast<uint64_t>(a.kind), static_cast<uint64_t>(a.count), static_cast<uint64_t>(a.dtype),
                     static_cast<uint64_t>(a.op), static_cast<uint64_t>(fused), static_cast<uint64_t>(wire)})
    for (int k = 0; k < 8; ++k) h = (h ^ ((v >> (8 * k)) & 0xff)) * 1099511628211ull;
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1u;
}

}  // namespace tpcomm
