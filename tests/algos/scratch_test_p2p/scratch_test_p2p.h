// scratch_test_p2p: a P2P algorithm that lives in the test tree only. It shows that an algorithm
// with scratch of its own is added with its own files and one registration (the registry's list,
// or a test's ScopedTestAlgorithm): nothing in src/transports/ or src/collectives/ knows of it
// (docs/architecture.md, "Adding an algorithm"). Its all-reduce is one-shot in shape, one element
// per thread, over its own region of the cuda_p2p buffer: two buffers (epoch parity) of one slot
// of kScratchTestBytes per sending rank, with its own flags, epochs and call signatures.
#pragma once

#include <cstddef>
#include <memory>

#include "algos/common/algorithm.h"
#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// Bytes of one rank's slot: the largest message it runs.
constexpr size_t kScratchTestBytes = size_t{64} << 10;

/// Its factory (the registration line's argument).
std::unique_ptr<Algorithm> makeScratchTestP2p(const AlgoContext* ctx);

/// Its kernels (scratch_test_p2p.cu): the all-reduce, no fused one.
extern const P2pKernels kScratchTestKernels;

}  // namespace tpcomm
