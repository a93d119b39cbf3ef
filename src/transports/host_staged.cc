#include "transports/host_staged.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/async_error.h"
#include "common/error.h"

namespace tpcomm {

namespace {
constexpr int kMaxRanks = 64;
constexpr uint64_t kMagic = 0x7470636f6d6d3031ull;  // "tpcomm01"
constexpr size_t kAlign = 128;
}  // namespace

struct HostStagedTransport::Header {
  uint64_t magic;
  // The barrier, one word so that completing a round and breaking it are one atomic choice:
  // bits 0..31 ranks arrived, bits 32..62 the round (generation), bit 63 broken (a rank's wait
  // expired: every later barrier fails at once, so a late rank can never pass a round its peer
  // left and read that peer's stale pointers).
  alignas(64) std::atomic<uint64_t> barrierState;
  std::atomic<uint32_t> arrivedRound[kMaxRanks];  // round + 1 each rank last entered (names the missing)
  alignas(64) std::atomic<int32_t> peerAccesses;  // threads mode: ranks now in a peer-access phase
  alignas(64) std::atomic<int32_t> refcount;
  int32_t cudaRegistered;  // threads mode: rank 0 registered the segment with CUDA
  // The failure word (poisonWord()): the first failure's error code, for every rank's host and
  // GPU to see (a staged_host kernel's or a host barrier's expired wait, a call that differed).
  alignas(64) uint32_t devicePoison;
  // Each rank's host call counter (beginCall()), written by that rank's host only, and its arrival
  // word, written by its staged_host kernels (arrivalStarted). Read by a waiter whose bound expired.
  struct alignas(64) CallCounter {
    std::atomic<uint64_t> calls;
  } hostCalls[kMaxRanks];
  alignas(64) uint64_t arrivals[kMaxRanks];
  struct Pointers {
    const void* send;
    void* recv;
  } pointers[kMaxRanks];
  CallWords words[kMaxRanks];
};

Status HostStagedTransport::create(const TransportEnv& ctx, const Geometry& g,
                                   std::unique_ptr<HostStagedTransport>* out) {
  const Topology& topo = ctx.topo;
  if (!topo.singleNode()) return TPCOMM_ERROR(kNotSupported, "host_staged: ranks span several nodes");
  if (ctx.nRanks > kMaxRanks)
    return TPCOMM_ERROR(kNotSupported, "host_staged: %d ranks exceed %d", ctx.nRanks, kMaxRanks);
  if (g.slots < 2 || g.blocks < 1 || g.chunkBytes < 4096 || g.chunkBytes % 4096)
    return TPCOMM_INVALID("host_staged: geometry slots=%d (>= 2) blocks=%d (>= 1) chunkBytes=%zu (multiple of 4096)",
                          g.slots, g.blocks, g.chunkBytes);
  std::unique_ptr<HostStagedTransport> t(new HostStagedTransport());
  t->geo_ = g;
  t->rank_ = ctx.rank;
  t->nRanks_ = ctx.nRanks;
  t->timeoutMs_ = ctx.timeoutMs;
  t->sameProcess_ = topo.singleProcess();
  // More ranks than online cores (tests, CI, the 2-core VM): a waiting rank yields at once,
  // since the rank it waits for may be queued behind it on the same core; spinning first
  // only delays that rank (the processes all-reduce passes a barrier per 2 MiB chunk).
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && ctx.nRanks > cores) t->spinsBeforeYield_ = 0;
  // Every product checked: the parameters' ranges already keep them small, a
  // Geometry from elsewhere might not.
  size_t flagWords = 0, slotBytes = 0, stagingBytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(3 * ctx.nRanks) * g.slots, static_cast<size_t>(g.blocks),
                             &flagWords) ||
      __builtin_mul_overflow(g.chunkBytes, static_cast<size_t>(g.slots), &slotBytes) ||
      __builtin_mul_overflow(slotBytes, static_cast<size_t>(ctx.nRanks + 1), &stagingBytes) ||
      stagingBytes > (size_t{1} << 46))
    return TPCOMM_INVALID("host_staged: a segment of %d ranks x %d slots x %zu bytes overflows", ctx.nRanks, g.slots,
                          g.chunkBytes);
  size_t flagsBytes = alignUp(sizeof(uint64_t) * flagWords, kAlign);
  t->flagsOffset_ = alignUp(sizeof(Header), 4096);
  t->slotsOffset_ = alignUp(t->flagsOffset_ + flagsBytes, 4096);
  t->resultOffset_ = t->slotsOffset_ + g.chunkBytes * g.slots * ctx.nRanks;
  t->bytes_ = t->resultOffset_ + g.chunkBytes * g.slots;

  // Rank 0 makes the segment and shares its address (threads) or name (processes). Everyone
  // takes part in every exchange, failed or not, so no rank is left waiting.
  struct Offer {
    uint64_t address;
    int32_t ok;
    char name[52];
  } mine{}, all[kMaxRanks];
  if (ctx.rank == 0) {
    if (t->sameProcess_) {
      void* p = std::aligned_alloc(4096, alignUp(t->bytes_, 4096));
      if (p) {
        std::memset(p, 0, t->bytes_);
        mine.address = reinterpret_cast<uint64_t>(p);
        mine.ok = 1;
      }
    } else {
      removeStaleSegments(nullptr);  // a crashed run's leftovers; ours are named by our own pid
      static std::atomic<unsigned> counter{0};
      std::snprintf(mine.name, sizeof(mine.name), "/tpcomm-%d-%u-%08x", static_cast<int>(getpid()), counter++,
                    static_cast<unsigned>(std::random_device{}()));
      int fd = shm_open(mine.name, O_CREAT | O_EXCL | O_RDWR, 0600);
      // posix_fallocate reserves the pages now: on a full /dev/shm it fails here with ENOSPC
      // instead of a SIGBUS at first touch.
      if (fd >= 0 && posix_fallocate(fd, 0, static_cast<off_t>(t->bytes_)) == 0) {
        void* p = mmap(nullptr, t->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          mine.address = reinterpret_cast<uint64_t>(p);
          mine.ok = 1;
        }
      }
      if (!mine.ok) {
        int err = errno;
        if (fd >= 0) shm_unlink(mine.name);
        TPCOMM_WARN(kInit, "host_staged: shared memory %s of %zu bytes: %s", mine.name, t->bytes_, std::strerror(err));
      }
      if (fd >= 0) close(fd);
    }
    if (mine.ok) {
      t->base_ = reinterpret_cast<char*>(mine.address);
      Header* h = t->header();
      h->magic = kMagic;
      h->refcount.store(0);
    }
  }
  Status shared = ctx.bootstrap->allGather(&mine, all, sizeof(Offer));
  if (shared != Status::kOk) {
    // A peer died or timed out before every rank had the name: nobody is to open it now, and the
    // mapping goes with t. Without this the segment stayed in /dev/shm (issue 34 item 1).
    if (ctx.rank == 0 && mine.ok && !t->sameProcess_) shm_unlink(mine.name);
    return shared;
  }
  if (!all[0].ok)
    return TPCOMM_ERROR(kSystemError, "host_staged: rank 0 could not create the %zu-byte shared segment", t->bytes_);
  int ok = 1;
  if (ctx.rank != 0) {
    if (t->sameProcess_) {
      t->base_ = reinterpret_cast<char*>(all[0].address);
    } else {
      int fd = shm_open(all[0].name, O_RDWR, 0600);
      void* p = fd >= 0 ? mmap(nullptr, t->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
      if (fd >= 0) close(fd);
      if (p == MAP_FAILED) {
        ok = 0;
        TPCOMM_WARN(kInit, "host_staged: rank %d cannot map %s: %s", ctx.rank, all[0].name, std::strerror(errno));
      } else {
        t->base_ = static_cast<char*>(p);
      }
    }
  }
  if (ok && t->header()->magic != kMagic) ok = 0;
#ifdef TPCOMM_HAVE_CUDA
  // Pin and map for the GPU. Threads of one process share one registration (Portable makes it
  // valid in every device's context); each process registers its own mapping.
  if (ok && ctx.device >= 0 && (!t->sameProcess_ || ctx.rank == 0)) {
    cudaError_t e = cudaHostRegister(t->base_, t->bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (e != cudaSuccess) {
      TPCOMM_WARN(kInit, "host_staged: cudaHostRegister of %zu bytes failed: %s", t->bytes_, cudaGetErrorString(e));
      cudaGetLastError();
      ok = 0;
    } else {
      t->cudaRegistered_ = true;
      t->header()->cudaRegistered = 1;
    }
  }
  if (ok && ctx.device >= 0) {
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&t->deviceTwin_), g.chunkBytes * g.slots);
    t->twinDevice_ = ctx.device;
    if (e != cudaSuccess) {
      TPCOMM_WARN(kInit, "host_staged: cudaMalloc of the %zu-byte device twin of the slots failed: %s",
                  g.chunkBytes * g.slots, cudaGetErrorString(e));
      cudaGetLastError();
      t->deviceTwin_ = nullptr;
      ok = 0;
    }
  }
  if (ok && ctx.device >= 0 && g.copyEngines) {
    CopyEngineResources& ce = t->ce_;
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&ce.inbox), 2 * g.chunkBytes * ctx.nRanks);
    for (cudaStream_t* st : ce.streams())
      if (e == cudaSuccess) e = cudaStreamCreateWithFlags(st, cudaStreamNonBlocking);
    for (cudaEvent_t* ev : ce.events())
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&ce.sms, cudaDevAttrMultiProcessorCount, ctx.device);
    if (e != cudaSuccess) {
      TPCOMM_WARN(kInit, "host_staged: the copy-engine mode's inbox, streams or events: %s", cudaGetErrorString(e));
      cudaGetLastError();
      ok = 0;  // the destructor frees what was made
    }
  }
#endif
  // Only a rank that counted itself may release a reference: a rank whose mapping or
  // registration failed must not take part in deciding who frees the segment.
  if (ok) {
    t->header()->refcount.fetch_add(1);
    t->counted_ = true;
  }
  int oks[kMaxRanks];
  Status s = ctx.bootstrap->allGather(&ok, oks, sizeof(int));
  if (ctx.rank == 0 && !t->sameProcess_) shm_unlink(all[0].name);  // every rank has mapped (or failed)
  TPCOMM_TRY(s);
  for (int r = 0; r < ctx.nRanks; ++r)
    if (!oks[r])
      return TPCOMM_ERROR(kSystemError, "host_staged: rank %d could not map or register the shared segment", r);
#ifdef TPCOMM_HAVE_CUDA
  if (ctx.device >= 0) {
    void* dptr = nullptr;
    if (cudaHostGetDevicePointer(&dptr, t->base_, 0) != cudaSuccess || dptr != t->base_) {
      cudaGetLastError();
      return TPCOMM_ERROR(kNotSupported, "host_staged: mapped host memory has no identical device address (no UVA)");
    }
  }
#endif
  *out = std::move(t);
  return Status::kOk;
}

int HostStagedTransport::removeStaleSegments(std::string* report) {
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    int pid = 0;
    unsigned counter = 0;
    char tail[32];
    if (std::sscanf(e->d_name, "tpcomm-%d-%u-%31s", &pid, &counter, tail) != 3 || pid <= 0 || pid == self) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge (EPERM)
    const std::string path = std::string("/dev/shm/") + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode)) continue;
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0) {
      ++removed;
      if (report)
        *report += "removed " + path + " (" + std::to_string(st.st_size) + " bytes; pid " + std::to_string(pid) +
                   " is gone)\n";
    }
  }
  closedir(d);
  return removed;
}

HostStagedTransport::~HostStagedTransport() {
#ifdef TPCOMM_HAVE_CUDA
  if (deviceTwin_ || ce_.inbox || ce_.quantize) {  // on their device, the caller's restored after
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(twinDevice_);
    if (deviceTwin_) cudaFree(deviceTwin_);
    if (ce_.inbox) cudaFree(ce_.inbox);
    for (cudaStream_t* st : ce_.streams())
      if (*st) cudaStreamDestroy(*st);
    for (cudaEvent_t* ev : ce_.events())
      if (*ev) cudaEventDestroy(*ev);
    cudaGetLastError();
    if (prev >= 0) cudaSetDevice(prev);
  }
#endif
  if (!base_) return;
  Header* h = header();
  // Never joined the count (its set-up failed): drop only its own mapping. Threads mode: if no
  // rank counted itself, the segment leaks on that failure path rather than risk a double free.
  if (!counted_) {
    if (!sameProcess_) munmap(base_, bytes_);
    return;
  }
  bool last = h->refcount.fetch_sub(1) == 1;
#ifdef TPCOMM_HAVE_CUDA
  // Threads mode: the registration belongs to the process and goes with the memory.
  bool unregister = sameProcess_ ? last && h->cudaRegistered : cudaRegistered_;
  if (unregister && cudaHostUnregister(base_) != cudaSuccess) cudaGetLastError();
#endif
  if (sameProcess_) {
    if (last) std::free(base_);
  } else {
    munmap(base_, bytes_);
  }
}

char* HostStagedTransport::slot(int r, int s) const {
  return base_ + slotsOffset_ + (static_cast<size_t>(r) * geo_.slots + s) * geo_.chunkBytes;
}
char* HostStagedTransport::result() const { return base_ + resultOffset_; }
uint32_t* HostStagedTransport::poisonWord() const { return &header()->devicePoison; }
uint32_t HostStagedTransport::failureCode() const { return __atomic_load_n(&header()->devicePoison, __ATOMIC_ACQUIRE); }

uint64_t* HostStagedTransport::readyFlags() const { return reinterpret_cast<uint64_t*>(base_ + flagsOffset_); }
uint64_t* HostStagedTransport::consumedFlags() const {
  return readyFlags() + static_cast<size_t>(nRanks_) * geo_.slots * geo_.blocks;
}
uint64_t* HostStagedTransport::signatureFlags() const {
  return consumedFlags() + static_cast<size_t>(nRanks_) * geo_.slots * geo_.blocks;
}

uint64_t HostStagedTransport::beginCall() {
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free &&
                    sizeof(Header::CallCounter) == kCallCounterWords * sizeof(uint64_t),
                "the call counters are read as plain words, kCallCounterWords apart, by the GPU");
  std::atomic<uint64_t>& mine = header()->hostCalls[rank_].calls;
  const uint64_t call = mine.load(std::memory_order_relaxed) + 1;  // only this rank writes it
  mine.store(call, std::memory_order_release);
  return call;
}
const uint64_t* HostStagedTransport::callCounters() const {
  return reinterpret_cast<const uint64_t*>(header()->hostCalls);
}
uint64_t* HostStagedTransport::arrivalWords() const { return header()->arrivals; }

Status HostStagedTransport::barrier() {
  constexpr uint64_t kBroken = uint64_t{1} << 63, kArrivedMask = 0xffffffffull;
  Header* h = header();
  uint64_t st = h->barrierState.load(std::memory_order_acquire);
  uint64_t round;
  for (;;) {  // arrive
    if (st & kBroken) return brokenBarrier();
    round = (st & ~kBroken) >> 32;
    const uint64_t arrived = (st & kArrivedMask) + 1;
    const uint64_t next =
        arrived == static_cast<uint64_t>(nRanks_) ? ((round + 1) & 0x7fffffffull) << 32 : (round << 32) | arrived;
    // Before the CAS, so a waiter that expires never names a rank that has arrived.
    h->arrivedRound[rank_].store(static_cast<uint32_t>(round + 1), std::memory_order_relaxed);
    if (h->barrierState.compare_exchange_weak(st, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      if (arrived == static_cast<uint64_t>(nRanks_)) return Status::kOk;  // the last one completes it
      break;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs_);
  for (uint64_t spin = 0;; ++spin) {
    st = h->barrierState.load(std::memory_order_acquire);
    if (st & kBroken) return brokenBarrier();
    if (((st >> 32) & 0x7fffffffull) != round) return Status::kOk;
    if (spin < spinsBeforeYield_) continue;
    // More ranks than cores is common (tests, CI): yield so the rank we wait for can run. Check
    // the clock after every yield: on a loaded machine one yield can take a whole time slice.
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() <= deadline) continue;
    // Expired: break the barrier unless the round completed meanwhile (one atomic choice).
    if (!h->barrierState.compare_exchange_strong(st, st | kBroken, std::memory_order_seq_cst,
                                                 std::memory_order_acquire))
      continue;  // it changed: completed (or broken by another rank); the next pass tells which
    // Why each missing rank was late: its host call counter against this call's number (host
    // ranks run no kernel). The first one's code goes to the failure word at once (something goes
    // there in any case: every rank that finds the barrier broken waits for it), so every rank
    // reports the same code (brokenBarrier, StagedHost::run).
    const uint64_t call = h->hostCalls[rank_].calls.load(std::memory_order_relaxed);
    auto codeFor = [&](int r) {
      return timeoutCode(r, call, h->hostCalls[r].calls.load(std::memory_order_acquire), 0, false);
    };
    const uint32_t entered = static_cast<uint32_t>(round + 1);
    uint32_t first = AsyncError::encode(Status::kTimeout, -1), none = 0;
    for (int r = 0; r < nRanks_; ++r)
      if (h->arrivedRound[r].load(std::memory_order_relaxed) != entered) {
        first = codeFor(r);
        break;
      }
    __atomic_compare_exchange_n(&h->devicePoison, &none, first, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    // A slower peer may still be reading or writing this rank's buffers: it stops at its next
    // check of the broken bit (one block of its work), and only then may this call return.
    while (h->peerAccesses.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    std::string missing;
    std::string why;  // what each missing rank's host had done
    for (int r = 0; r < nRanks_; ++r)
      if (h->arrivedRound[r].load(std::memory_order_relaxed) != static_cast<uint32_t>(round + 1)) {
        if (missing.empty()) firstMissing_ = r;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        const std::string text = latenessText(codeFor(r), timeoutMs_);
        if (!text.empty()) why += (why.empty() ? ": " : "; ") + text;
      }
    return TPCOMM_ERROR(kTimeout,
                        "host_staged: rank(s) %s did not arrive within %d ms (rank %d waited; %llu of %d arrived)%s; "
                        "the communicator is unusable",
                        missing.c_str(), timeoutMs_, rank_, static_cast<unsigned long long>(st & kArrivedMask), nRanks_,
                        why.c_str());
  }
}

// Dekker-style with sequentially consistent operations: a phase announces itself and then looks
// at the broken bit; a breaker sets the bit and then looks at the count. At least one of them sees
// the other, so either the phase never starts or the breaker waits for it to end.
bool HostStagedTransport::beginPeerAccess() {
  Header* h = header();
  h->peerAccesses.fetch_add(1, std::memory_order_seq_cst);
  if (accessBroken()) {
    endPeerAccess();
    return false;
  }
  return true;
}

void HostStagedTransport::endPeerAccess() { header()->peerAccesses.fetch_sub(1, std::memory_order_seq_cst); }

bool HostStagedTransport::accessBroken() const {
  return (header()->barrierState.load(std::memory_order_seq_cst) >> 63) != 0;
}

Status HostStagedTransport::brokenBarrier() const {
  // Like the rank that broke it, no rank returns while a peer may still touch its buffers.
  Header* h = header();
  while (h->peerAccesses.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  // The ranks that had not reached the round that broke (the most advanced round seen).
  uint32_t latest = 0;
  for (int r = 0; r < nRanks_; ++r) latest = std::max(latest, h->arrivedRound[r].load(std::memory_order_relaxed));
  std::string missing;
  for (int r = 0; r < nRanks_; ++r)
    if (h->arrivedRound[r].load(std::memory_order_relaxed) != latest)
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  // What the rank whose wait expired saw of the first missing rank (this rank, when it was late):
  // it publishes that right after breaking the barrier.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs_);
  while (failureCode() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  const uint32_t code = failureCode();
  std::string why = asyncErrorStatus(code) == Status::kTimeout ? latenessText(code, timeoutMs_) : "";
  if (!why.empty()) why = ": " + why;
  return TPCOMM_ERROR(kTimeout,
                      "host_staged: rank %d: a peer's wait at a barrier expired; rank(s) %s had not arrived%s; the "
                      "communicator is unusable (destroy or abort it)",
                      rank_, missing.empty() ? "(none recorded)" : missing.c_str(), why.c_str());
}

Status HostStagedTransport::exchangePointers(const void* send, void* recv, const CallWords& words, const void** sends,
                                             void** recvs, CallWords* allWords) {
  if (!sameProcess_) return TPCOMM_ERROR(kInternal, "host_staged: pointer exchange needs threads of one process");
  Header* h = header();
  h->pointers[rank_] = {send, recv};
  h->words[rank_] = words;
  TPCOMM_TRY(barrier());
  for (int r = 0; r < nRanks_; ++r) {
    sends[r] = h->pointers[r].send;
    recvs[r] = h->pointers[r].recv;
    allWords[r] = h->words[r];
  }
  return Status::kOk;
}

Status HostStagedTransport::exchangeWords(const CallWords& words, CallWords* allWords) {
  Header* h = header();
  // The table is rewritten by the next call only after every rank has passed this call's next
  // barrier, which no rank reaches before it has read the table here.
  std::memcpy(&h->words[rank_], &words, sizeof(words));
  std::atomic_thread_fence(std::memory_order_release);
  TPCOMM_TRY(barrier());
  std::memcpy(allWords, h->words, sizeof(CallWords) * nRanks_);
  return Status::kOk;
}

}  // namespace tpcomm
