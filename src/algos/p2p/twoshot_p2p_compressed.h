// twoshot_p2p+fp8 / +int8: what its class (twoshot_p2p_compressed.cc) and its kernel
// (twoshot_p2p_compressed.cu) share. Its scratch is twoshot_p2p's (twoshot_p2p.h).
#pragma once

#include "algos/compressed/quantize.h"
#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// Its kernels for one wire format (twoshot_p2p_compressed.cu); no fused kernel.
extern const P2pKernels kTwoshotFp8Kernels, kTwoshotInt8Kernels;

}  // namespace tpcomm
