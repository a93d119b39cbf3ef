#include "collectives/registry.h"

#include "algos/lamport_p2p.h"
#include "algos/oneshot_p2p.h"
#include "algos/ring_nccl.h"
#include "algos/staged_host.h"
#include "algos/twoshot_multicast.h"
#include "algos/twoshot_p2p.h"

namespace tpcomm {

std::vector<std::unique_ptr<Algorithm>> makeAlgorithms(CommContext* ctx) {
  std::vector<std::unique_ptr<Algorithm>> list;
  // The one list. Order breaks cost ties (earlier wins).
  list.emplace_back(new LamportP2pAlgorithm(ctx));
  list.emplace_back(new OneshotP2pAlgorithm(ctx));
  list.emplace_back(new TwoshotP2pAlgorithm(ctx));
  list.emplace_back(new TwoshotMulticastAlgorithm(ctx));  // gated: see transports/multicast.h
  list.emplace_back(new RingNcclAlgorithm(ctx));
  list.emplace_back(new StagedHostAlgorithm(ctx));
  return list;
}

std::vector<std::string> algorithmNames() {
  std::vector<std::string> names;
  for (const auto& a : makeAlgorithms(nullptr)) names.push_back(a->name());
  return names;
}

std::vector<Algorithm*> rawList(const std::vector<std::unique_ptr<Algorithm>>& algos) {
  std::vector<Algorithm*> out;
  for (const auto& a : algos) out.push_back(a.get());
  return out;
}

}  // namespace tpcomm
