// launch_shape.h: the shape every tpcomm kernel is launched with, visible to host code (the host
// norm's arithmetic follows the kernels' block, and grids are computed on the host);
// common/launch.cuh launches with it.
#pragma once

#include <cstddef>

namespace tpcomm {

/// Threads per block of every tpcomm kernel. The norm's sum-of-squares order (fused_rmsnorm.h)
/// and the resident-blocks figure of the create-time check (common/residency.h) are for it.
constexpr int kThreads = 512;
/// Warps per block.
constexpr int kWarpsPerBlock = kThreads / 32;

/// One launch: grid, block, and whether it is a programmatic dependent launch (sm_90+).
struct LaunchShape {
  unsigned blocks = 1;
  unsigned threads = kThreads;
  bool pdl = false;
};

/// Blocks for `work` units when one block takes `perBlock` of them: ceil(work / perBlock),
/// within [1, maxBlocks].
constexpr unsigned gridFor(size_t work, size_t perBlock, size_t maxBlocks) {
  const size_t want = (work + perBlock - 1) / perBlock;
  return static_cast<unsigned>(want < 1 ? 1 : want > maxBlocks ? maxBlocks : want);
}

}  // namespace tpcomm
