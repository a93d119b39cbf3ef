// libFuzzer target: TPCOMM_ALGO, parsed by parseAlgoOverride (src/collectives/algo_override.h)
// against the real algorithm names. Malformed text must be kInvalidArgument, never a crash/UB.
#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/algo_override.h"
#include "collectives/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> names = tpcomm::algorithmNames();
  const std::string text(reinterpret_cast<const char*>(data), size);
  tpcomm::AlgoOverride ovr;
  (void)tpcomm::parseAlgoOverride(text, names, &ovr);
  return 0;
}
