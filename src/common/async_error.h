// The asynchronous error word of a communicator: GPU kernels and host helper paths record a
// failure there (first error wins) that the host reports at the next call (checkError()).
#pragma once

#include <cstdint>

#include "tpcomm/status.h"

namespace tpcomm {

/// GPU kernels write `word` (pinned, device-mapped host memory) on a bounded wait's expiry;
/// host code reads it without synchronizing. Layout: bits 0..15 the Status, bits 16..31 the
/// peer rank + 1 (0: unknown).
struct AsyncError {
  volatile uint32_t* word = nullptr;  ///< host view (pinned, or plain memory on host ranks)
  uint32_t* deviceWord = nullptr;     ///< device view of the same word (GPU ranks)
  static uint32_t encode(Status s, int peer) {
    return static_cast<uint32_t>(s) | (static_cast<uint32_t>(peer + 1) << 16);
  }
};

}  // namespace tpcomm
