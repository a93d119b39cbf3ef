// cpu_group.cc: ranks as threads over tpcomm's thread bootstrap and host communicators.
#include "cpu_group.h"

#include <memory>
#include <thread>
#include <vector>

#include "tpcomm/tpcomm.h"

namespace qwen {

tpcomm::Config hostRankConfig(tpcomm::Compression compression) {
  tpcomm::Config c;
  c.compression = compression;
  if (compression == tpcomm::Compression::kFp8) c.algo = "staged_host+fp8|staged_host";
  if (compression == tpcomm::Compression::kInt8) c.algo = "staged_host+int8|staged_host";
  return c;
}

bool runCpuTpGroup(int tp, const std::function<bool(int, tpcomm::Communicator*, std::string*)>& fn, std::string* error,
                   const tpcomm::Config& config) {
  if (tp == 1) return fn(0, nullptr, error);
  auto group = tpcomm::ThreadGroup::create(tp);
  std::vector<std::string> errors(tp);
  std::vector<char> ok(tp, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<tpcomm::Bootstrap> boot;
      std::unique_ptr<tpcomm::Communicator> comm;
      tpcomm::Status s = tpcomm::makeThreadBootstrap(group, r, &boot);
      if (s == tpcomm::Status::kOk) s = tpcomm::Communicator::create(*boot, -1, config, &comm);
      if (s != tpcomm::Status::kOk) {
        errors[r] = std::string("rank ") + std::to_string(r) + ": communicator: " + tpcomm::statusName(s) + ": " +
                    tpcomm::lastErrorMessage();
        return;
      }
      ok[r] = fn(r, comm.get(), &errors[r]) ? 1 : 0;
      comm->destroy();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r)
    if (!ok[r]) {
      if (error) *error = "rank " + std::to_string(r) + ": " + errors[r];
      return false;
    }
  return true;
}

}  // namespace qwen
