#include "common/async_error.h"

namespace tpcomm {

std::string latenessText(uint32_t code, int timeoutMs) {
  const std::string who = "rank " + std::to_string(asyncErrorPeer(code));
  switch (asyncErrorLateness(code)) {
    case Lateness::kCallNotMade: {
      const uint32_t behind = asyncErrorBehind(code);
      return who + " never made this call (its host is " +
             (behind >= kMaxCallsBehind ? std::to_string(kMaxCallsBehind) + " or more calls"
                                        : std::to_string(behind) + (behind == 1 ? " call" : " calls")) +
             " behind)";
    }
    case Lateness::kKernelNotStarted:
      return who + " made the call but its kernel had not started after " + std::to_string(timeoutMs) +
             " ms (its stream is busy)";
    case Lateness::kInsideCall:
      return who + " made the call but had not reached this step of it after " + std::to_string(timeoutMs) +
             " ms (busy or blocked inside the call)";
    case Lateness::kUnknown:
      break;
  }
  return "";
}

}  // namespace tpcomm
