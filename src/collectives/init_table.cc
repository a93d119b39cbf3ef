// initTable: what TPCOMM_DEBUG=INFO prints when a communicator is created, so a user can always
// see which transports came up (and why not) and which algorithm each size gets.
#include <cstdio>
#include <string>

#include "collectives/communicator_impl.h"
#include "collectives/cost_model.h"

namespace tpcomm {

std::string initTable(const Communicator::Impl& impl) {
  std::string out;
  char line[512];
  const Topology& t = impl.ctx->topo;
  std::snprintf(line, sizeof(line), "communicator: %d ranks, %s\n", t.nRanks(),
                t.allHost() ? "host ranks" : "GPU ranks");
  out += line;
  for (int r = 0; r < t.nRanks(); ++r) {
    const RankDevice& d = t.ranks[r];
    std::snprintf(line, sizeof(line), "  rank %d: %s dev %d cc %d.%d bus %s numa %d host %d proc %d\n", r,
                  d.name.c_str(), d.cudaDevice, d.ccMajor, d.ccMinor, d.busId.c_str(), d.numaNode, d.hostId,
                  d.processId);
    out += line;
  }
  out += "  links:";
  for (int b = 0; b < t.nRanks(); ++b) {
    std::snprintf(line, sizeof(line), " %8d", b);
    out += line;
  }
  out += "\n";
  for (int a = 0; a < t.nRanks(); ++a) {
    std::snprintf(line, sizeof(line), "  %5d:", a);
    out += line;
    for (int b = 0; b < t.nRanks(); ++b) {
      std::snprintf(line, sizeof(line), " %8s", linkKindName(t.links[a][b].kind));
      out += line;
    }
    out += "\n";
  }
  const TransportReport& why = impl.transports;
  for (const auto& [name, whyNot] : {std::pair<const char*, const std::string&>{"host_staged", why.hostStaged},
                                     {"cuda_p2p", why.p2p},
                                     {"nccl", why.nccl},
                                     {"multicast", why.multicast}}) {
    std::snprintf(line, sizeof(line), "  transport %-12s %s%s\n", name, whyNot.empty() ? "usable" : "not usable: ",
                  whyNot.c_str());
    out += line;
  }
  out += "  costs: " + costModelSource(t) + "\n";
  out += "  tuning file: " + (impl.tuning.path.empty() ? std::string("-") : impl.tuning.path) + ": " +
         impl.tuning.state + "\n";
  const TuningTable* measured = impl.tuning.table.get();
  const DataType dt = t.allHost() ? DataType::kF32 : DataType::kBF16;
  out += std::string("  all-reduce algorithm per size (") + dataTypeName(dt) + ", eager):\n";
  out += describeSelection(impl.algoList, t, impl.override, dt, false, measured);
  if (measured && !t.allHost()) {  // the table holds eager times: graphs stay modelled
    out += "  under CUDA graph capture:\n";
    out += describeSelection(impl.algoList, t, impl.override, dt, true, measured);
  }
  return out;
}

}  // namespace tpcomm
