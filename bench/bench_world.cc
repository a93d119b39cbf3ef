// bench_world: reductions and gathers over the controllers of a run (see bench_world.h).
#include "bench_world.h"

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench_args.h"

namespace tpcomm_bench {

World::World(tpcomm::Bootstrap* bootstrap, int firstRank, int localRanks, int nRanks)
    : bootstrap_(bootstrap), firstRank_(firstRank), localRanks_(localRanks), nRanks_(nRanks) {}

bool World::gather(const void* mine, void* all, size_t bytes) {
  if (!bootstrap_) {
    std::memcpy(all, mine, bytes);
    return true;
  }
  tpcomm::Status s = bootstrap_->allGather(mine, all, bytes);
  if (s != tpcomm::Status::kOk) {
    std::fprintf(stderr, "%s: rank %d: bootstrap allGather failed: %s: %s\n", gBenchName, firstRank_,
                 tpcomm::statusName(s), tpcomm::lastErrorMessage());
    return false;
  }
  return true;
}

bool World::barrier() {
  if (!bootstrap_) return true;
  tpcomm::Status s = bootstrap_->barrier();
  if (s != tpcomm::Status::kOk) {
    std::fprintf(stderr, "%s: rank %d: bootstrap barrier failed: %s: %s\n", gBenchName, firstRank_,
                 tpcomm::statusName(s), tpcomm::lastErrorMessage());
    return false;
  }
  return true;
}

double World::maxOf(double v) {
  int n = bootstrap_ ? bootstrap_->size() : 1;
  std::vector<double> all(n);
  if (!gather(&v, all.data(), sizeof(double))) return v;
  return *std::max_element(all.begin(), all.end());
}

double World::minOf(double v) {
  int n = bootstrap_ ? bootstrap_->size() : 1;
  std::vector<double> all(n);
  if (!gather(&v, all.data(), sizeof(double))) return v;
  return *std::min_element(all.begin(), all.end());
}

int64_t World::sumOf(int64_t v) {
  int n = bootstrap_ ? bootstrap_->size() : 1;
  std::vector<int64_t> all(n);
  // A failed gather must not read as "0 wrong": report -1 so the table shows the failure.
  if (!gather(&v, all.data(), sizeof(int64_t))) return -1;
  int64_t s = 0;
  for (int64_t x : all) s += x;
  return s;
}

std::vector<std::string> World::gatherStrings(const std::string& mine) {
  constexpr size_t kMax = 1024;
  int n = bootstrap_ ? bootstrap_->size() : 1;
  std::vector<char> buf(kMax, 0), all(kMax * n, 0);
  std::memcpy(buf.data(), mine.data(), std::min(mine.size(), kMax - 1));
  std::vector<std::string> out;
  if (!gather(buf.data(), all.data(), kMax)) return {mine};
  for (int i = 0; i < n; ++i) out.emplace_back(all.data() + i * kMax);
  return out;
}

bool World::broadcastFromFirst(void* data, size_t bytes) {
  int n = bootstrap_ ? bootstrap_->size() : 1;
  std::vector<char> all(bytes * n);
  if (!gather(data, all.data(), bytes)) return false;
  std::memcpy(data, all.data(), bytes);  // controller 0 drives rank 0
  return true;
}

}  // namespace tpcomm_bench
