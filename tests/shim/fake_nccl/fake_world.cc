// fake_world.cc: the NCCL test double's communicators as shared-memory worlds, and the steps
// that run its collectives and splits (fake_internal.h describes the protocol). Every wait is
// bounded by FAKE_NCCL_TIMEOUT_MS (default 60000) and ends early when a rank aborts the world.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "fake_internal.h"

namespace fakenccl {
namespace {

constexpr char kIdMagic[8] = {'F', 'A', 'K', 'E', 'N', 'C', 'C', 'L'};
constexpr size_t kHeaderBytes = (sizeof(WorldHeader) + 4095) / 4096 * 4096;
constexpr size_t kMinSlotBytes = 8 * kMaxRanks;  // a reduce-scatter step holds one element per rank

using Clock = std::chrono::steady_clock;

Clock::time_point deadline() { return Clock::now() + std::chrono::milliseconds(envInt("FAKE_NCCL_TIMEOUT_MS", 60000)); }

void backoff(int* spins) {
  if (++*spins < 200)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// --- one step of each kind of call: what a rank puts in its slot, and what it makes of all slots.

size_t elemBytes(const Op& o) { return o.kind == Kind::kSplit ? sizeof(int) : typeSize(o.dtype); }

// Elements of each rank's block that one step carries.
size_t perStep(const Op& o, uint64_t slotBytes) {
  if (o.kind == Kind::kSplit) return 2;
  size_t blocks = o.kind == Kind::kReduceScatter ? static_cast<size_t>(o.comm->nranks) : 1;
  return std::max<size_t>(1, slotBytes / (elemBytes(o) * blocks));
}

ncclResult_t fill(Op& o, char* mine) {
  const size_t es = elemBytes(o), off = o.stepIndex * o.perStep, n = std::min(o.perStep, o.count - off);
  const char* in = static_cast<const char*>(o.send);
  switch (o.kind) {
    case Kind::kSplit: {
      int ck[2] = {o.color, o.key};
      std::memcpy(mine, ck, sizeof(ck));
      return ncclSuccess;
    }
    case Kind::kBroadcast:
      return o.comm->rank == o.root ? copy(mine, in + off * es, n * es) : ncclSuccess;
    case Kind::kReduceScatter:
      for (int b = 0; b < o.comm->nranks; ++b) {
        ncclResult_t r = copy(mine + b * n * es, in + (b * o.count + off) * es, n * es);
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    default:
      return copy(mine, in + off * es, n * es);
  }
}

void finishSplit(Op& o, const World& w);

ncclResult_t consume(Op& o, const World& w) {
  const int n_ranks = o.comm->nranks, me = o.comm->rank;
  const size_t es = elemBytes(o), off = o.stepIndex * o.perStep, n = std::min(o.perStep, o.count - off);
  char* out = static_cast<char*>(o.recv);
  std::vector<const char*> in(n_ranks);
  switch (o.kind) {
    case Kind::kSplit:
      finishSplit(o, w);
      return o.result;
    case Kind::kBroadcast:
      return copy(out + off * es, w.slot(o.root), n * es);
    case Kind::kAllGather:
      for (int q = 0; q < n_ranks; ++q) {
        ncclResult_t r = copy(out + (q * o.count + off) * es, w.slot(q), n * es);
        if (r != ncclSuccess) return r;
      }
      return ncclSuccess;
    case Kind::kReduce:
      if (me != o.root) return ncclSuccess;
      [[fallthrough]];
    default:
      for (int q = 0; q < n_ranks; ++q) in[q] = w.slot(q) + (o.kind == Kind::kReduceScatter ? me * n * es : 0);
      o.scratch.resize(n * es);
      reduce(o.dtype, o.op, in.data(), n_ranks, n, o.scratch.data());
      return copy(out + off * es, o.scratch.data(), n * es);
  }
}

// Members of the new communicator: same color, ordered by key, then by rank in the parent.
void finishSplit(Op& o, const World& w) {
  if (o.color == NCCL_SPLIT_NOCOLOR) return;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int q = 0; q < o.comm->nranks; ++q) {
    int ck[2];
    std::memcpy(ck, w.slot(q), sizeof(ck));
    if (ck[0] == o.color) members.push_back({ck[1], q});
  }
  std::sort(members.begin(), members.end());
  int rank = 0;
  while (members[rank].second != o.comm->rank) ++rank;
  ncclComm* child = o.child;
  child->rank = rank;
  child->nranks = static_cast<int>(members.size());
  child->device = o.comm->device;
  std::string name = childWorldName(o.comm->world.name, o.comm->splits, o.color);
  o.result = joinWorld(name, child->nranks, rank, &child->world);
}

bool fail(Op& o, ncclResult_t r) {
  o.result = r;
  o.finished = true;
  if (r != ncclInProgress) o.comm->asyncError = r;
  return true;
}

// Whether all ranks made the same call as this one; names the first that did not.
bool sameCall(const Op& o, const World& w) {
  const RankState& me = w.h->ranks[o.comm->rank];
  for (int q = 0; q < o.comm->nranks; ++q) {
    const RankState& p = w.h->ranks[q];
    if (p.kind != me.kind || p.dtype != me.dtype || p.op != me.op || p.root != me.root || p.count != me.count) {
      setLastError(
          "fake NCCL: rank %d made call (kind %d, count %llu, dtype %d, op %d, root %d) where rank %d made "
          "(kind %d, count %llu, dtype %d, op %d, root %d)",
          q, p.kind, static_cast<unsigned long long>(p.count), p.dtype, p.op, p.root, o.comm->rank, me.kind,
          static_cast<unsigned long long>(me.count), me.dtype, me.op, me.root);
      return false;
    }
  }
  return true;
}

// One move of `o`: start, post a step, or finish one. False when it has to wait for a peer.
bool advance(Op& o) {
  ncclComm* c = o.comm;
  World& w = c->world;
  OnDevice on(c->device);
  if (!o.started) {
    o.started = true;
    if (c->asyncError != ncclSuccess && c->asyncError != ncclInProgress) {
      setLastError("fake NCCL: rank %d: the communicator failed earlier (%d)", c->rank, c->asyncError.load());
      return fail(o, ncclInvalidUsage);
    }
    ncclResult_t r = o.kind == Kind::kSplit ? ncclSuccess : syncStream(o.stream);
    if (r != ncclSuccess) return fail(o, r);
    o.perStep = perStep(o, w.h->slotBytes);
    o.steps = o.kind == Kind::kSplit ? 1 : (o.count + o.perStep - 1) / o.perStep;
    if (o.kind == Kind::kSplit) o.count = 2;
    if (o.steps == 0) o.finished = true;
    return true;
  }
  // Waiting for a rank that aborted fails; what it provided before it aborted is still read.
  auto waitOrFail = [&] {
    uint32_t a = w.h->abortedBy.load(std::memory_order_acquire);
    if (!a) return false;
    setLastError("fake NCCL: rank %u aborted the communicator", a - 1);
    return fail(o, ncclRemoteError);
  };
  const uint64_t step = c->step + 1;
  RankState& mine = w.h->ranks[c->rank];
  if (!o.posted) {
    for (int q = 0; q < c->nranks; ++q)
      if (w.h->ranks[q].done.load(std::memory_order_acquire) < step - 1) return waitOrFail();
    ncclResult_t r = fill(o, w.slot(c->rank));
    if (r != ncclSuccess) return fail(o, r);
    mine.kind = static_cast<int32_t>(o.kind);
    mine.dtype = o.kind == Kind::kSplit ? -1 : static_cast<int32_t>(o.dtype);
    mine.op = o.kind == Kind::kReduce || o.kind == Kind::kAllReduce || o.kind == Kind::kReduceScatter ? o.op : -1;
    mine.root = o.root;
    mine.count = o.count;
    mine.posted.store(step, std::memory_order_release);
    o.posted = true;
    return true;
  }
  for (int q = 0; q < c->nranks; ++q)
    if (w.h->ranks[q].posted.load(std::memory_order_acquire) < step) return waitOrFail();
  ncclResult_t r = sameCall(o, w) ? consume(o, w) : ncclInvalidUsage;
  mine.done.store(step, std::memory_order_release);
  c->step = step;
  o.posted = false;
  if (r != ncclSuccess) return fail(o, r);
  if (++o.stepIndex == o.steps) {
    if (o.kind == Kind::kSplit) ++c->splits;
    o.finished = true;
  }
  return true;
}

}  // namespace

char* World::slot(int rank) const { return static_cast<char*>(base) + kHeaderBytes + rank * h->slotBytes; }

std::string worldNameOf(const ncclUniqueId& id) {
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0) return "";
  const char* name = id.internal + sizeof(kIdMagic);
  size_t len = strnlen(name, sizeof(id.internal) - sizeof(kIdMagic));
  return len == sizeof(id.internal) - sizeof(kIdMagic) ? "" : std::string(name, len);
}

ncclUniqueId makeUniqueId() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  uint64_t salt = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::memcpy(id.internal, kIdMagic, sizeof(kIdMagic));
  std::snprintf(id.internal + sizeof(kIdMagic), sizeof(id.internal) - sizeof(kIdMagic), "/fakenccl-%d-%llu-%016llx",
                static_cast<int>(getpid()), static_cast<unsigned long long>(++counter),
                static_cast<unsigned long long>(salt));
  return id;
}

std::string childWorldName(const std::string& parent, uint64_t index, int color) {
  char name[64];
  std::snprintf(
      name, sizeof(name), "/fakenccl-split-%016llx",
      static_cast<unsigned long long>(fnv(parent + "/" + std::to_string(index) + "/" + std::to_string(color))));
  return name;
}

uint64_t worldIdOf(const std::string& name) { return fnv(name); }

ncclResult_t joinWorld(const std::string& name, int nranks, int rank, World* out) {
  const uint64_t slotBytes = std::max<uint64_t>(kMinSlotBytes, envInt("FAKE_NCCL_SLOT_BYTES", 1 << 20));
  const size_t want = kHeaderBytes + static_cast<size_t>(nranks) * slotBytes;
  // Create, or open the creator's; a name that vanishes between the two (ENOENT) is tried again
  // until the deadline.
  const auto openBy = deadline();
  int fd = -1, tries = 0;
  bool creator = false;
  for (;;) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    creator = fd >= 0;
    if (!creator) fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd >= 0 || errno != ENOENT || Clock::now() >= openBy) break;
    backoff(&tries);
  }
  if (fd < 0) {
    setLastError("fake NCCL: shm_open(%s): %s", name.c_str(), std::strerror(errno));
    return ncclSystemError;
  }
  auto end = deadline();
  size_t bytes = want;
  void* base = MAP_FAILED;
  if (creator) {
    if (ftruncate(fd, static_cast<off_t>(want)) == 0)
      base = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base != MAP_FAILED) {
      auto* h = new (base) WorldHeader();
      h->nranks = nranks;
      h->slotBytes = slotBytes;
      h->ready.store(kWorldReady, std::memory_order_release);
    }
  } else {
    // The creator sizes and fills the header; the world's size and slots are its.
    struct stat st;
    int spins = 0;
    while ((fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderBytes) && Clock::now() < end)
      backoff(&spins);
    base = static_cast<size_t>(st.st_size) >= kHeaderBytes
               ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
               : MAP_FAILED;
    bytes = static_cast<size_t>(st.st_size);
    if (base != MAP_FAILED) {
      auto* h = static_cast<WorldHeader*>(base);
      while (h->ready.load(std::memory_order_acquire) != kWorldReady && Clock::now() < end) backoff(&spins);
      if (h->ready.load(std::memory_order_acquire) != kWorldReady || h->nranks != nranks) {
        setLastError("fake NCCL: unique id %s: its communicator has %d ranks, this call says %d", name.c_str(),
                     h->nranks, nranks);
        munmap(base, bytes);
        close(fd);
        return ncclInvalidArgument;
      }
    }
  }
  close(fd);
  if (base == MAP_FAILED) {
    setLastError("fake NCCL: mapping %s (%zu bytes): %s", name.c_str(), bytes, std::strerror(errno));
    return ncclSystemError;
  }
  auto* h = static_cast<WorldHeader*>(base);
  uint32_t expected = 0;
  if (!h->ranks[rank].present.compare_exchange_strong(expected, 1)) {
    setLastError("fake NCCL: rank %d of %s joined twice", rank, name.c_str());
    munmap(base, bytes);
    return ncclInvalidArgument;
  }
  if (h->joined.fetch_add(1) + 1 == static_cast<uint32_t>(nranks)) shm_unlink(name.c_str());  // all are in
  out->name = name;
  out->id = worldIdOf(name);
  out->base = base;
  out->bytes = bytes;
  out->h = h;
  return ncclSuccess;
}

void leaveWorld(World* w) {
  if (!w->base) return;
  if (w->h->joined.load() < static_cast<uint32_t>(w->h->nranks)) shm_unlink(w->name.c_str());
  munmap(w->base, w->bytes);
  w->base = nullptr;
  w->h = nullptr;
}

ncclResult_t runOps(std::vector<Op>* ops) {
  auto end = deadline();
  int spins = 0;
  for (;;) {
    bool all = true, moved = false;
    for (size_t i = 0; i < ops->size(); ++i) {
      Op& o = (*ops)[i];
      if (o.finished) continue;
      all = false;
      bool earlier = false;  // an unfinished call before it on the same communicator
      for (size_t j = 0; j < i && !earlier; ++j) earlier = !(*ops)[j].finished && (*ops)[j].comm == o.comm;
      if (!earlier) moved = advance(o) || moved;
    }
    if (all) break;
    if (moved) {
      end = deadline();
      spins = 0;
      continue;
    }
    if (Clock::now() > end) {
      for (Op& o : *ops) {
        if (o.finished) continue;
        setLastError("fake NCCL: rank %d of %d: a peer did not make the matching call within FAKE_NCCL_TIMEOUT_MS",
                     o.comm->rank, o.comm->nranks);
        fail(o, ncclRemoteError);
      }
      break;
    }
    backoff(&spins);
  }
  for (const Op& o : *ops)
    if (o.result != ncclSuccess) return o.result;
  return ncclSuccess;
}

}  // namespace fakenccl
