// Status codes returned by every tpcomm call. No exception ever crosses the API and the library
// never aborts the process; every non-kOk status comes with a human-readable message.
#pragma once

namespace tpcomm {

/// Result of a tpcomm call.
enum class Status {
  kOk = 0,           ///< success
  kInvalidArgument,  ///< a caller-supplied argument is wrong; the message names it
  kNotSupported,     ///< this path cannot run this call (the selector moves on to the next one)
  kCudaError,        ///< a CUDA runtime/driver call failed; the message has file:line and the CUDA text
  kSystemError,      ///< an OS call failed (shm, mmap, socket, ...); the message has errno text
  kTimeout,          ///< a peer did not arrive within TPCOMM_TIMEOUT_MS; the message names the rank
  kRemoteError,      ///< another rank reported an error
  kInternal,         ///< a bug in tpcomm; please report it with the message
};

/// Short name of a status ("kOk", "kInvalidArgument", ...). Never null.
const char* statusName(Status s);

/// Message describing the most recent non-kOk status returned to this thread by any tpcomm call,
/// without the status's name (print statusName(s) beside it: "allReduce: kInvalidArgument:
/// allReduce: count 0 ..."). Empty string when the last call on this thread succeeded. Never
/// null; valid until the next tpcomm call on this thread.
const char* lastErrorMessage();

}  // namespace tpcomm
