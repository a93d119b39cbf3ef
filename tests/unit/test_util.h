// Shared helpers for tpcomm's tests (unit, mpi, gpu): integer-valued inputs whose reductions are
// exact in every dtype (the nccl-tests idea), bitwise expected buffers, scoped environment
// changes, and "ranks as threads" (each thread one host rank of a communicator).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algos/host/host_reduce.h"
#include "common/params.h"
#include "tpcomm/tpcomm.h"

namespace tpcomm {
namespace test {

/// Input element `i` of rank `r`: an integer in [-16, 16]. Sums over up to 8 ranks stay within
/// +-128, exact in f32, f16 and bf16 (bf16 holds integers up to 256 exactly), so a reduction in
/// any order gives one bit pattern. Varies with both i and r so a misplaced element shows.
inline int inputValue(int r, size_t i) {
  return static_cast<int>((i * 13 + static_cast<size_t>(r) * 7 + (i >> 7)) % 33) - 16;
}

/// op over ranks 0..n-1 of inputValue(r, i), as an exact integer.
inline int expectedValue(int n, size_t i, ReduceOp op) {
  int acc = inputValue(0, i);
  for (int r = 1; r < n; ++r) {
    int v = inputValue(r, i);
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
  }
  return acc;
}

/// Raw bits of element i (f32: 32 bits, 16-bit types: 16 bits).
inline uint32_t elementBits(const void* buf, size_t i, DataType dt) {
  if (dt == DataType::kF32) {
    uint32_t u;
    std::memcpy(&u, static_cast<const char*>(buf) + i * 4, 4);
    return u;
  }
  return static_cast<const uint16_t*>(buf)[i];
}

/// A byte buffer of `count` elements of `dt`, filled with `poison` bytes.
inline std::vector<char> makeBuffer(size_t count, DataType dt, unsigned char poison = 0xA5) {
  return std::vector<char>(count * dataTypeSize(dt), static_cast<char>(poison));
}

/// buf[k] = inputValue(rank, first + k) for k < count.
inline void fillInput(void* buf, size_t count, DataType dt, int rank, size_t first = 0) {
  for (size_t k = 0; k < count; ++k) storeFromFloat(buf, k, dt, static_cast<float>(inputValue(rank, first + k)));
}

/// Compares buf[k] bitwise with `want(k)` (an exact integer) for every k < count. Returns the
/// number of wrong elements and describes the first one in *first.
inline size_t countWrong(const void* buf, size_t count, DataType dt, const std::function<int(size_t)>& want,
                         std::string* first) {
  std::vector<char> one(dataTypeSize(dt));
  size_t wrong = 0;
  for (size_t k = 0; k < count; ++k) {
    int w = want(k);
    storeFromFloat(one.data(), 0, dt, static_cast<float>(w));
    uint32_t got = elementBits(buf, k, dt), exp = elementBits(one.data(), 0, dt);
    if (got != exp) {
      if (wrong++ == 0 && first) {
        char msg[160];
        std::snprintf(msg, sizeof(msg), "element %zu: got bits 0x%x (%g), want 0x%x (%d)", k, got,
                      static_cast<double>(loadAsFloat(buf, k, dt)), exp, w);
        *first = msg;
      }
    }
  }
  return wrong;
}

/// Sets (or with value == nullptr unsets) an environment variable and reloads tpcomm's params;
/// the destructor restores the previous state. Never use it to unset the multicast safety
/// switches (NCCL_NVLS_ENABLE and friends): only to set them to 0 and put back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
    reloadParams();
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
    reloadParams();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

/// Runs `body(rank, comm)` on n threads, each the host rank `rank` of one communicator created
/// with Communicator::create(bootstrap, -1, config). Destroys the communicators afterwards.
/// Failures inside body are reported through gtest (EXPECT_* is thread-safe).
inline void runHostRanks(int n, const Config& config, const std::function<void(int, Communicator&)>& body) {
  auto group = ThreadGroup::create(n);
  ASSERT_NE(group, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      ASSERT_EQ(makeThreadBootstrap(group, r, &bs), Status::kOk) << lastErrorMessage();
      std::unique_ptr<Communicator> comm;
      Status s = Communicator::create(*bs, -1, config, &comm);
      ASSERT_EQ(s, Status::kOk) << "rank " << r << ": " << lastErrorMessage();
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), n);
      EXPECT_EQ(comm->device(), -1);
      body(r, *comm);
      EXPECT_EQ(comm->destroy(), Status::kOk) << "rank " << r << ": " << lastErrorMessage();
    });
  }
  for (auto& t : threads) t.join();
}

/// Creates one host communicator per rank on n threads, rank r with configFor(r) (create may
/// fail); returns each rank's create status and last error message.
inline void createOnThreads(int n, const std::function<Config(int)>& configFor, std::vector<Status>* status,
                            std::vector<std::string>* messages) {
  auto group = ThreadGroup::create(n);
  status->assign(n, Status::kOk);
  messages->assign(n, "");
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      ASSERT_EQ(makeThreadBootstrap(group, r, &bs), Status::kOk);
      std::unique_ptr<Communicator> comm;
      (*status)[r] = Communicator::create(*bs, -1, configFor(r), &comm);
      (*messages)[r] = lastErrorMessage();
    });
  for (auto& t : threads) t.join();
}

/// createOnThreads with the default Config on every rank: each rank must return `want`, and a
/// failing rank's message must contain every string in `mention`.
inline void expectCreateOnThreads(int n, Status want, const std::vector<std::string>& mention = {}) {
  std::vector<Status> status;
  std::vector<std::string> messages;
  createOnThreads(
      n, [](int) { return Config{}; }, &status, &messages);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(status[r], want) << "rank " << r << ": " << messages[r];
    if (status[r] == Status::kOk) continue;
    for (const std::string& m : mention)
      EXPECT_NE(messages[r].find(m), std::string::npos) << "rank " << r << ": " << messages[r];
  }
}

/// One value of each kind the environment rule rejects (common/params.h): the variable, the
/// value, and a piece of what its message must say is accepted. params_test checks checkParams
/// with them, bad_input_test that create refuses each on every rank.
struct RejectedValue {
  const char* env;
  const char* value;
  const char* accepted;
};
inline const std::vector<RejectedValue>& rejectedValues() {
  static const std::vector<RejectedValue> rows = {
      {"TPCOMM_TIMEOUT_MS", "abc", "an integer in [1, 2147483647]"},
      {"TPCOMM_STAGED_SLOTS", "1", "an integer in [2, 64]"},
      {"TPCOMM_NCCL", "yes", "0 or 1"},
      {"TPCOMM_MULTICAST", "off", "0 or 1"},
      {"TPCOMM_DETERMINISTIC", "yes", "0 or 1"},
      {"TPCOMM_STAGED_CHUNK_BYTES", "5000", "a multiple of 4096"},  // staged_host's slots are whole pages
      {"TPCOMM_STAGED_CHUNK_BYTES", "1G", "[4096, 67108864]"},      // create took 35 s
      {"TPCOMM_DEBUG", "garbage", "NONE, WARN, INFO or TRACE"},
      {"TPCOMM_DEBUG_SUBSYS", "INIT,BOGUS", "INIT, TOPO, TUNE, COLL, BOOT, ALL"},
      {"TPCOMM_COMPRESSION", "zstd", "none, fp8"},
      {"TPCOMM_SOCKET_FAMILY", "IPX", "AF_INET, AF_INET6"},
      {"TPCOMM_TOPO_HELPER", "/nonexistent/tpcomm-doctor", "executable"},
      {"TPCOMM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", "existing"},
  };
  return rows;
}

}  // namespace test
}  // namespace tpcomm
