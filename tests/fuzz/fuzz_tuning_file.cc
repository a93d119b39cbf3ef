// libFuzzer target: the tuning file parser (collectives/tuning_file.h), which reads the per-user
// $XDG_CACHE_HOME/tpcomm/tune.json at every Communicator::create. Any input must give kOk or
// kInvalidArgument: no exception, no crash, no UB (ASan+UBSan); a parsed file must survive its
// own round trip, and every lookup on it must stay in bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/tuning_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> kKnown = {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl",
                                                  "staged_host"};
  const std::string text(reinterpret_cast<const char*>(data), size);
  tpcomm::TuningFile f;
  if (tpcomm::TuningFile::fromJson(text, kKnown, &f) != tpcomm::Status::kOk) return 0;
  tpcomm::TuningFile back;
  if (tpcomm::TuningFile::fromJson(f.toJson(), kKnown, &back) != tpcomm::Status::kOk) __builtin_trap();
  for (const tpcomm::TuningTable& t : f.tables)
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, uint64_t{1} << 40, UINT64_MAX / 4})
      (void)t.measuredUs({tpcomm::CollKind::kAllReduce, tpcomm::DataType::kBF16, tpcomm::ReduceOp::kSum, bytes, false},
                         "lamport_p2p");
  return 0;
}
