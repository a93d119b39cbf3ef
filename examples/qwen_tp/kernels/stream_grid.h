// stream_grid.h: the grid of gemv_stream.cu's kernels as plain constexpr arithmetic, so the host
// (GpuModel's choice of which streams launch with PDL) and CPU-only tests use the kernels' rule.
#pragma once

namespace qwen {
namespace gpu {

constexpr int kStreamWarps = 16;       // warps a block
constexpr int kStreamBlocksPerSm = 2;  // resident blocks a multiprocessor (the launch bounds)

/// The warps a product of `out` rows uses of `warps`: as many rows for each as the busiest would
/// have, so no warp takes a last round of rows alone (0 when out or warps is not positive).
constexpr int balancedWarps(int out, int warps) {
  if (out <= 0 || warps <= 0) return 0;
  const int rowsPerWarp = (out + warps - 1) / warps;
  return (out + rowsPerWarp - 1) / rowsPerWarp;
}

/// The blocks a stream of `out` rows launches on `sms` multiprocessors, `perSm` blocks of them a
/// multiprocessor at most (kStreamBlocksPerSm, or 1: setGemvStreamSlots).
constexpr int streamBlocks(int out, int sms, int perSm = kStreamBlocksPerSm) {
  return (balancedWarps(out, sms * perSm * kStreamWarps) + kStreamWarps - 1) / kStreamWarps;
}

/// Whether those blocks take at least 90% of the sms x kStreamBlocksPerSm resident slots. A
/// PDL-launched stream was measured faster only then (qwen3-8b's down: 256 of 264 slots on an
/// H200); with free slots (qwen3-32b's down: 160) its early blocks made the step slower.
constexpr bool streamFillsSlots(int out, int sms) {
  return sms > 0 && 10 * streamBlocks(out, sms) >= 9 * sms * kStreamBlocksPerSm;
}

static_assert(streamBlocks(4096, 132) == 256 && streamFillsSlots(4096, 132), "qwen3-8b's down on an H200");
static_assert(streamBlocks(5120, 132) == 160 && !streamFillsSlots(5120, 132), "qwen3-32b's down on an H200");
static_assert(streamBlocks(4096, 132, 1) == 128 && streamBlocks(151936, 132, 1) == 132, "one block a multiprocessor");

}  // namespace gpu
}  // namespace qwen
