#include "collectives/registry.h"

#include <algorithm>
#include <mutex>

namespace tpcomm {

// One factory per algorithm, each defined in its own file under src/algos/<family>/.
std::unique_ptr<Algorithm> makeLamportP2p(const AlgoContext* ctx);       // lamport_p2p.cc
std::unique_ptr<Algorithm> makeLlP2p(const AlgoContext* ctx);            // ll_p2p.cc
std::unique_ptr<Algorithm> makeOneshotP2p(const AlgoContext* ctx);       // oneshot_p2p.cc
std::unique_ptr<Algorithm> makeTwoshotP2p(const AlgoContext* ctx);       // twoshot_p2p.cc
std::unique_ptr<Algorithm> makeTwoshotMulticast(const AlgoContext* ctx);  // twoshot_multicast.cc
std::unique_ptr<Algorithm> makeRingNccl(const AlgoContext* ctx);         // ring_nccl.cc
std::unique_ptr<Algorithm> makeStagedHost(const AlgoContext* ctx);       // staged_host.cc
std::unique_ptr<Algorithm> makeCopyLocal(const AlgoContext* ctx);        // copy_local.cc
// Compressed all-reduce (offered only when Config::compression names the format).
std::unique_ptr<Algorithm> makeTwoshotP2pCompressed(const AlgoContext* ctx, Compression wire);  // twoshot_p2p_compressed.cc
std::unique_ptr<Algorithm> makeStagedHostCompressed(const AlgoContext* ctx, Compression wire);  // staged_host.cc

namespace {
std::mutex gTestMutex;
std::vector<AlgorithmFactory>& testFactories() {
  static std::vector<AlgorithmFactory> factories;
  return factories;
}
}  // namespace

std::vector<std::unique_ptr<Algorithm>> makeAlgorithms(const AlgoContext* ctx) {
  std::vector<std::unique_ptr<Algorithm>> list;
  // The one list. Order breaks cost ties (earlier wins).
  list.push_back(makeLamportP2p(ctx));
  list.push_back(makeLlP2p(ctx));  // reduce-scatter and all-gather only
  list.push_back(makeOneshotP2p(ctx));
  list.push_back(makeTwoshotP2p(ctx));
  list.push_back(makeTwoshotMulticast(ctx));  // gated: see transports/multicast.h
  list.push_back(makeRingNccl(ctx));
  list.push_back(makeStagedHost(ctx));
  list.push_back(makeCopyLocal(ctx));  // one rank only
  for (Compression wire : {Compression::kFp8, Compression::kInt8}) {
    list.push_back(makeTwoshotP2pCompressed(ctx, wire));
    list.push_back(makeStagedHostCompressed(ctx, wire));
  }
  std::lock_guard<std::mutex> lock(gTestMutex);
  for (AlgorithmFactory f : testFactories()) list.push_back(f(ctx));
  return list;
}

ScopedTestAlgorithm::ScopedTestAlgorithm(AlgorithmFactory factory) : factory_(factory) {
  std::lock_guard<std::mutex> lock(gTestMutex);
  testFactories().push_back(factory);
}

ScopedTestAlgorithm::~ScopedTestAlgorithm() {
  std::lock_guard<std::mutex> lock(gTestMutex);
  auto& f = testFactories();
  f.erase(std::find(f.begin(), f.end(), factory_));
}

std::unique_ptr<Algorithm> makeAlgorithm(const std::string& name, const AlgoContext* ctx) {
  for (auto& a : makeAlgorithms(ctx))
    if (name == a->name()) return std::move(a);
  return nullptr;
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
