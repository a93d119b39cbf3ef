// The asynchronous error word of a communicator: GPU kernels and host helper paths record a
// failure there (first error wins) that the host reports at the next call (checkError()).
// A timeout's code also says, where the waiter could tell, why the rank it waited for was late:
// its host had not made the call (a per-rank call counter in shared memory, compared with the
// waiter's call number), or it had but its kernel had not started (the rank's arrival word, which
// its kernel writes when it starts), or the kernel had started and not reached the waiter's step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/host_device.h"
#include "tpcomm/status.h"

namespace tpcomm {

/// Why the rank a timeout names was late, as the waiter saw it when its bound expired.
enum class Lateness : uint32_t {
  kUnknown = 0,           ///< not known (no call numbers: a host segment missing, or a path that keeps none)
  kCallNotMade = 1,       ///< its host had not made this call (the code carries how many calls behind)
  kKernelNotStarted = 2,  ///< it made the call, but its kernel had not started (its stream was busy)
  kInsideCall = 3,        ///< it made the call and had started it, but had not reached the waiter's step
};

/// Layout of an error code (the error word, the poison words): bits 0..7 the Status, 8..9 the
/// Lateness, 10..15 calls behind (kCallNotMade; capped at kMaxCallsBehind), 16..31 the peer rank
/// + 1 (0: unknown). For a timeout the peer is the rank that did not arrive.
constexpr uint32_t kMaxCallsBehind = 63;
TPCOMM_HD constexpr uint32_t asyncErrorCode(Status s, int peer, Lateness why = Lateness::kUnknown,
                                            uint64_t behind = 0) {
  return (static_cast<uint32_t>(s) & 0xffu) | (static_cast<uint32_t>(why) & 3u) << 8 |
         static_cast<uint32_t>(behind < kMaxCallsBehind ? behind : kMaxCallsBehind) << 10 |
         static_cast<uint32_t>(peer + 1) << 16;
}
TPCOMM_HD constexpr Status asyncErrorStatus(uint32_t code) { return static_cast<Status>(code & 0xffu); }
TPCOMM_HD constexpr int asyncErrorPeer(uint32_t code) { return static_cast<int>(code >> 16) - 1; }
TPCOMM_HD constexpr Lateness asyncErrorLateness(uint32_t code) { return static_cast<Lateness>((code >> 8) & 3u); }
TPCOMM_HD constexpr uint32_t asyncErrorBehind(uint32_t code) { return (code >> 10) & 63u; }

/// A rank's arrival word (GPU paths): its kernel of call number c writes arrivalStarted(c) when it
/// starts and, where graph replays could leave it behind (the P2P kernels), arrivalDone(c) when
/// it ends. Call numbers start at 1; 0 means "none".
TPCOMM_HD constexpr uint64_t arrivalStarted(uint64_t call) { return call << 1 | 1u; }
TPCOMM_HD constexpr uint64_t arrivalDone(uint64_t call) { return call << 1; }

/// Words (u64) from one rank's host call counter to the next: one 64-byte line each, since every
/// rank's host writes its own at every call (HostStagedTransport::callCounters).
constexpr size_t kCallCounterWords = 8;

/// A waiter's timeout code for `peer`, for the waiter's call number `call` (0: unknown), the
/// peer's host call counter `peerCalls`, and its arrival word `peerArrival` (kernels; pass
/// `kernels` false on host ranks, whose calls run no kernel).
TPCOMM_HD constexpr uint32_t timeoutCode(int peer, uint64_t call, uint64_t peerCalls, uint64_t peerArrival,
                                         bool kernels) {
  return call == 0          ? asyncErrorCode(Status::kTimeout, peer)
         : peerCalls < call ? asyncErrorCode(Status::kTimeout, peer, Lateness::kCallNotMade, call - peerCalls)
         : !kernels         ? asyncErrorCode(Status::kTimeout, peer, Lateness::kInsideCall)
         : peerArrival != arrivalStarted(call) ? asyncErrorCode(Status::kTimeout, peer, Lateness::kKernelNotStarted)
                                               : asyncErrorCode(Status::kTimeout, peer, Lateness::kInsideCall);
}

/// What a timeout code says of the late rank, e.g. "rank 0 never made this call (its host is 1
/// call behind)" or "rank 0 made the call but its kernel had not started after 150 ms (its stream
/// is busy)"; "" when the code does not say (Lateness::kUnknown).
std::string latenessText(uint32_t code, int timeoutMs);

/// GPU kernels write `word` (pinned, device-mapped host memory) on a bounded wait's expiry;
/// host code reads it without synchronizing.
struct AsyncError {
  volatile uint32_t* word = nullptr;  ///< host view (pinned, or plain memory on host ranks)
  uint32_t* deviceWord = nullptr;     ///< device view of the same word (GPU ranks)
  /// GPU ranks: the host_staged segment's failure word (HostStagedTransport::poisonWord), which
  /// any rank's staged_host kernel sets when a wait expires or a call differs: every rank's host
  /// reports it, and refuses later calls, even where its own kernel never saw it. Null elsewhere.
  volatile uint32_t* shared = nullptr;
  static uint32_t encode(Status s, int peer) { return asyncErrorCode(s, peer); }
  /// The code to report: this rank's word, else the shared one (0: no failure).
  uint32_t read() const {
    const uint32_t w = word ? *word : 0;
    return w != 0 || !shared ? w : *shared;
  }
};

}  // namespace tpcomm
