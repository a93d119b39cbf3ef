#include "common/residency.h"

#include <atomic>

namespace tpcomm {

namespace {
std::atomic<int> gMinBlocks{0};  // trivially destructible: safe at exit
}  // namespace

void noteResidentBlocksPerSm(int blocks, int threads) {
  if (threads <= 0) return;
  const int asFullBlocks = blocks * threads / 512;  // in 512-thread blocks, every kernel's size
  int cur = gMinBlocks.load(std::memory_order_relaxed);
  while ((cur == 0 || asFullBlocks < cur) &&
         !gMinBlocks.compare_exchange_weak(cur, asFullBlocks, std::memory_order_relaxed)) {
  }
}

int residentBlocksPerSm() { return gMinBlocks.load(std::memory_order_relaxed); }

}  // namespace tpcomm
