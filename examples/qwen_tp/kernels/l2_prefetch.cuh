// l2_prefetch.cuh: a hint to the L2 cache that a weight matrix is read next (QWEN_PREFETCH).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace qwen {
namespace gpu {

/// Asks L2 to fetch bytes [p, p + bytes) from device memory (bulk L2 prefetches on sm_90+, one
/// 128-byte line prefetch a thread elsewhere), one CTA of 32 threads an SM, and returns; the
/// kernel writes nothing, so its only effect is timing. bytes is rounded down to 16; false (and
/// nothing launched) when p is not 16-byte aligned or the launch fails.
bool prefetchL2(const void* p, size_t bytes, cudaStream_t s);

/// Loads the kernel now (a lazy load at the first launch waits for the whole device, which a
/// rank must not do while a peer's all-reduce spins on it); false when that fails.
bool prepareL2Prefetch();

}  // namespace gpu
}  // namespace qwen
