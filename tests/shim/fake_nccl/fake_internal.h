// fake_internal.h: the parts of the NCCL test double (fake_nccl.h) shared by its files.
//   world   a communicator's shared-memory segment: a header (per rank: joined, the last step
//           posted, the last step read, and what the rank's current call is) and one slot per
//           rank. Named by the unique id, so threads and processes of one host meet in it.
//   step    one exchange: every rank copies its piece of input into its slot and posts the step;
//           once all have posted, each checks that all made the same call, computes its own
//           output from all slots (in rank order) and marks the step read. A rank rewrites its
//           slot only after every rank has read the previous step. Calls larger than a slot
//           take several steps.
//   op      one call (collective or split) as a sequence of steps, advanced without blocking,
//           so one thread can drive several ranks inside a group.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "fake_nccl.h"

namespace fakenccl {

constexpr int kMaxRanks = 256;
constexpr uint32_t kWorldReady = 0x46414b45u;
constexpr uint64_t kCommLive = 0xfa4e0c033c0ffee1ull;
constexpr uint64_t kCommDead = 0xdeadc0ffdeadc0ffull;

enum class Kind : int32_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSplit };

// One rank's part of the shared header. What a rank posts for a step (kind ... count) is
// written before `posted` is released, and read by peers after they acquire it.
struct alignas(64) RankState {
  std::atomic<uint32_t> present;
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> done;
  int32_t kind, dtype, op, root;
  uint64_t count;
};

struct WorldHeader {
  std::atomic<uint32_t> ready;
  int32_t nranks;
  uint64_t slotBytes;
  std::atomic<uint32_t> joined;
  std::atomic<uint32_t> abortedBy;  // 0, or 1 + the rank whose ncclCommAbort ended the world
  RankState ranks[kMaxRanks];
};

// This process's mapping of a world.
struct World {
  std::string name;
  uint64_t id = 0;
  void* base = nullptr;
  size_t bytes = 0;
  WorldHeader* h = nullptr;
  char* slot(int rank) const;
};

/// Maps the world `name` for `rank` of `nranks` (creating it if this rank is the first), and
/// marks the rank present. ncclInvalidArgument when the world has another size or the rank is
/// taken; ncclSystemError when shared memory fails. The message goes to setLastError.
ncclResult_t joinWorld(const std::string& name, int nranks, int rank, World* out);
/// Unmaps; removes the name too while some rank has not joined yet.
void leaveWorld(World* w);

/// A unique id's world name ("" when it is not one of the double's).
std::string worldNameOf(const ncclUniqueId& id);
/// A fresh unique id.
ncclUniqueId makeUniqueId();
/// The world name of split number `index` of `parent`, color `color`.
std::string childWorldName(const std::string& parent, uint64_t index, int color);
uint64_t worldIdOf(const std::string& name);

// One call, advanced step by step (fake_world.cc).
struct Op {
  Kind kind = Kind::kAllReduce;
  struct ::ncclComm* comm = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = -1;
  cudaStream_t stream = nullptr;
  // kSplit
  int color = 0, key = 0;
  struct ::ncclComm* child = nullptr;  // filled at completion (null for NCCL_SPLIT_NOCOLOR)
  // progress
  size_t perStep = 0, steps = 0, stepIndex = 0;
  bool started = false, posted = false, finished = false;
  ncclResult_t result = ncclSuccess;
  std::vector<char> scratch;
};

/// Runs `ops` to completion, each after the earlier ones on the same communicator; returns the
/// first failure (ncclSuccess if none). Bounded by FAKE_NCCL_TIMEOUT_MS per wait.
ncclResult_t runOps(std::vector<Op>* ops);

// Data (fake_data.cc).
size_t typeSize(ncclDataType_t t);  // 0 for a type the double does not know
bool canReduce(ncclDataType_t t, ncclRedOp_t op);
/// out[i] = op over r of in[r][i], r = 0..n-1 in rank order (avg: the sum divided by n).
void reduce(ncclDataType_t t, ncclRedOp_t op, const char* const* in, int n, size_t count, char* out);
/// Whether the double works on host memory only (no CUDA device visible).
bool hostOnly();
/// memcpy, or cudaMemcpy(cudaMemcpyDefault) where a device is visible (either side may be device memory).
ncclResult_t copy(void* dst, const void* src, size_t bytes);
/// Waits for the work queued on `stream`.
ncclResult_t syncStream(cudaStream_t stream);
/// Makes `device` current for a scope (where a device is visible): a communicator's calls run on
/// its device, as NCCL's do, whatever the caller's current device.
class OnDevice {
 public:
  explicit OnDevice(int device);
  ~OnDevice();
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int prev_ = -1;
};
ncclResult_t streamCapturing(cudaStream_t stream, bool* capturing);
/// The calling thread's current CUDA device (0 on the host).
int currentDevice();
int deviceCount();

// Log, errors, settings (fake_log.cc).
fakeNcclCall callRecord(const char* fn, const struct ::ncclComm* comm);
void logCall(fakeNcclCall* c);  // assigns seq
/// True (and *r set) when an injected failure is due for `fn`.
bool injectedFailure(const char* fn, ncclResult_t* r);
void setLastError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
const char* lastError();
int64_t envInt(const char* name, int64_t dflt);

}  // namespace fakenccl

// The double's communicator (nccl.h only declares the struct).
struct ncclComm {
  uint64_t magic = fakenccl::kCommLive;
  fakenccl::World world;
  int rank = -1, nranks = 0, device = 0;
  int blocking = 1;
  uint64_t step = 0;    // steps this rank has completed on the world
  uint64_t splits = 0;  // splits made from it: names the children
  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<int> inProgressPolls{0};  // FAKE_NCCL_INPROGRESS: polls still answering ncclInProgress
  bool pending = false;                 // a split made in a group: complete at the outermost ncclGroupEnd
  bool finalized = false;
};

namespace fakenccl {
/// `c` if it is a live communicator of the double, else null.
ncclComm* live(ncclComm_t c);
void addLive(ncclComm* c);
/// Marks `c` dead; its memory is kept, so a stale handle is never mistaken for a new one.
void retire(ncclComm* c);
}  // namespace fakenccl
