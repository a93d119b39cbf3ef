// libFuzzer target: the topology JSON parsers that read untrusted files: MachineProbe::fromJson
// (the per-user probe cache, $XDG_CACHE_HOME/tpcomm/topo-*.json, and the probe child's report)
// and Topology::fromJson (fixtures). Any input must give kOk or kInvalidArgument: no exception,
// no crash, no UB (built with ASan+UBSan), and a parsed probe must survive its own round trip.
#include <cstddef>
#include <cstdint>
#include <string>

#include "topology/machine_probe.h"
#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tpcomm::MachineProbe m;
  if (tpcomm::MachineProbe::fromJson(text, &m) == tpcomm::Status::kOk) {
    tpcomm::MachineProbe back;
    if (tpcomm::MachineProbe::fromJson(m.toJson(), &back) != tpcomm::Status::kOk) __builtin_trap();
    (void)m.cacheable();
  }
  tpcomm::Topology t;
  if (tpcomm::Topology::fromJson(text, &t) == tpcomm::Status::kOk) (void)t.toJson();
  return 0;
}
