// Bootstrap over MPI. Every exchange first trades a small point-to-point "arrival note" with every
// peer (the exchange number, the collective and its size), polled against a deadline, then runs
// the non-blocking collective polled against the same deadline; a rank that never arrives yields
// kTimeout (TPCOMM_TIMEOUT_MS, or Config::timeoutMs during a communicator's create and destroy)
// rather than a hang.
//
// After a timeout:
// - A rank whose peers' notes do not all come in time names the ranks whose notes are missing and
//   never starts the collective, so nothing is left pending. A peer whose note names another
//   collective (a barrier against an allGather, another size) is named with what it called, and
//   both sides fail at once with kInvalidArgument instead of handing MPI mismatched collectives
//   (Open MPI aborts the job on that).
// - MPI has no way to cancel a started collective (MPI_Cancel and MPI_Request_free are
//   erroneous on one), so a collective that every rank's note promised but that a peer gave up
//   on stays pending. It runs on buffers the bootstrap owns, never the caller's, so a late peer
//   that completes it later cannot write into memory the caller got back. Those buffers and the
//   request are kept (not freed) for as long as the request is pending, and a bootstrap with a
//   pending request never frees its duplicated communicator: MPI_Comm_free (or MPI_Finalize's
//   clean-up of it) with a collective pending crashes or hangs Open MPI. The communicator is left
//   to MPI; MPI_Finalize then returns normally.
// - The bootstrap is then unusable: every later call fails at once with kRemoteError.
// - Unreceived notes' receives are cancelled (allowed for point-to-point receives) and the sends
//   freed, their 8-byte buffers kept.
// - makeMpiBootstrap duplicates the communicator with MPI_Comm_idup, polled against the same
//   deadline, with notes of its own on the caller's communicator (tag 7320), so a rank whose
//   peers never call makeMpiBootstrap gets kTimeout naming them.
#include "tpcomm/mpi_bootstrap.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {
namespace {

constexpr int kNoteTag = 7321;     // arrival notes; the duplicated communicator has no other traffic
constexpr int kDupNoteTag = 7320;  // makeMpiBootstrap's arrival notes, on the caller's communicator

using Clock = std::chrono::steady_clock;

// Memory MPI may still write or read after a timeout (a pending collective's buffers, a freed
// note send, an unfinished MPI_Comm_idup's output): kept for the life of the process and
// reachable from here, so it is never freed under MPI and LeakSanitizer does not report it.
void retain(void* p) {
  static auto* mu = new std::mutex;  // never destroyed: a bootstrap may die in a static destructor
  static auto* kept = new std::vector<void*>();
  std::lock_guard<std::mutex> lock(*mu);
  kept->push_back(p);
}

// The bound in force (bootstrap_timeout.h): a communicator's Config::timeoutMs during its create
// and destroy, else TPCOMM_TIMEOUT_MS.
Clock::time_point deadlineFromNow(int64_t* ms) {
  *ms = bootstrapTimeoutMs();
  return Clock::now() + std::chrono::milliseconds(*ms);
}

// An arrival note: the exchange number (low 32 bits), the bytes per rank (bits 32..62, clamped)
// and bit 63 set for a barrier, so a peer in another collective is named as such.
uint64_t noteOf(uint64_t seq, bool barrier, size_t bytes) {
  const uint64_t b = bytes < 0x7fffffffull ? bytes : 0x7fffffffull;
  return (seq & 0xffffffffull) | (b << 32) | (barrier ? uint64_t{1} << 63 : 0);
}
std::string describeNote(uint64_t note) {
  if (note >> 63) return "barrier " + std::to_string(note & 0xffffffffull);
  return "allGather " + std::to_string(note & 0xffffffffull) + " of " + std::to_string((note >> 32) & 0x7fffffffull) +
         " bytes per rank";
}

// Polls `req` until it completes or `deadline` passes. rc: MPI's error code, if any.
bool pollUntil(MPI_Request* req, Clock::time_point deadline, int* rc) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    *rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS) return false;
    if (done) return true;
    if (Clock::now() > deadline) return false;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += " and " + std::to_string(ranks.size() - 16) + " more";
  return s.empty() ? std::string("(none: every rank sent its arrival note)") : s;
}

class MpiBootstrap : public Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiBootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (pending_) {
      // A late peer may have completed it since; otherwise leave request, buffers and the
      // communicator to MPI (see the top of this file): freeing any of them is unsafe.
      int done = 0;
      if (MPI_Test(&pending_->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
        retain(pending_);
        pending_ = nullptr;
        return;
      }
      delete pending_;
      pending_ = nullptr;
    }
    MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allGather(const void* mine, void* all, size_t bytesPerRank) override {
    if ((!mine || !all) && bytesPerRank) return TPCOMM_INVALID("allGather: null buffer");
    if (bytesPerRank > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(size_))
      return TPCOMM_INVALID("allGather: %zu bytes per rank x %d ranks exceeds MPI's int count", bytesPerRank, size_);
    return run("allGather", mine, all, bytesPerRank);
  }

  Status barrier() override { return run("barrier", nullptr, nullptr, 0); }

 private:
  // The collective in flight, on buffers of its own (they outlive a timed-out call).
  struct Op {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<char> send, recv;
    uint64_t noteOut = 0;           // this rank's arrival note (a freed send may still read it)
    std::vector<uint64_t> notesIn;  // the peers' notes
  };

  Status run(const char* what, const void* mine, void* all, size_t bytes) {
    if (!failed_.empty())
      return TPCOMM_ERROR(kRemoteError, "MPI bootstrap %s on rank %d: unusable after an earlier failure: %s", what,
                          rank_, failed_.c_str());
    int64_t timeoutMs = 0;
    const auto deadline = deadlineFromNow(&timeoutMs);
    const uint64_t seq = seq_++;

    // Arrival notes: one to and one from every peer, tagged so calls never mix.
    Op* op = new Op;
    const int tag = kNoteTag + static_cast<int>(seq % 16384);
    op->noteOut = noteOf(seq, std::strcmp(what, "barrier") == 0, bytes);
    op->notesIn.assign(size_, 0);
    std::vector<MPI_Request> recvs(size_, MPI_REQUEST_NULL), sends(size_, MPI_REQUEST_NULL);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Irecv(&op->notesIn[p], 1, MPI_UINT64_T, p, tag, comm_, &recvs[p]);
      MPI_Isend(&op->noteOut, 1, MPI_UINT64_T, p, tag, comm_, &sends[p]);
    }

    // 1. Every peer's note first, against the deadline: a rank that never comes is named and no
    //    collective is started without it (nothing left pending); a peer in another collective
    //    (a barrier against an allGather, other sizes) is named before MPI sees the mismatch,
    //    which it reports by aborting the job.
    std::vector<int> missing;
    std::string elsewhere;
    for (int spins = 0;; ++spins) {
      int all = 0;
      if (MPI_Testall(size_, recvs.data(), &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS) all = 0;
      if (all) break;
      if (Clock::now() > deadline) break;
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      // MPI_Testall nulls the receives only when all completed, and otherwise leaves every one
      // as it was, done or not: each is tested alone here (MPI_Test nulls a completed one), so
      // only the peers whose notes did not come are named.
      int got = 0;
      if (recvs[p] != MPI_REQUEST_NULL) MPI_Test(&recvs[p], &got, MPI_STATUS_IGNORE);
      if (recvs[p] != MPI_REQUEST_NULL)
        missing.push_back(p);
      else if (op->notesIn[p] != op->noteOut)
        elsewhere += (elsewhere.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p) + " called " +
                     describeNote(op->notesIn[p]) + " instead";
    }
    if (!missing.empty() || !elsewhere.empty()) {
      finishNotes(&recvs, &sends, /*cancel=*/true);
      retain(op);  // its freed note sends may still read noteOut
      char buf[640];
      if (!missing.empty())
        std::snprintf(buf, sizeof(buf), "%s: rank(s) %s never arrived within %lld ms (%s; rank %d waited)%s%s",
                      describeNote(op->noteOut).c_str(), rankList(missing).c_str(), static_cast<long long>(timeoutMs),
                      bootstrapTimeoutSource(), rank_, elsewhere.empty() ? "" : "; ", elsewhere.c_str());
      else
        std::snprintf(buf, sizeof(buf), "rank %d is in %s but %s: every rank must make the same calls in order", rank_,
                      describeNote(op->noteOut).c_str(), elsewhere.c_str());
      failed_ = buf;
      return missing.empty() ? TPCOMM_INVALID("MPI bootstrap: %s", buf)
                             : TPCOMM_ERROR(kTimeout, "MPI bootstrap: %s", buf);
    }

    // 2. The collective: every rank has arrived in the same one.
    int rc;
    if (bytes) {
      op->send.assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
      op->recv.resize(bytes * size_);
      rc = MPI_Iallgather(op->send.data(), static_cast<int>(bytes), MPI_BYTE, op->recv.data(), static_cast<int>(bytes),
                          MPI_BYTE, comm_, &op->request);
    } else {
      rc = MPI_Ibarrier(comm_, &op->request);
    }
    if (rc != MPI_SUCCESS) {
      finishNotes(&recvs, &sends, /*cancel=*/true);
      pending_ = op;  // its freed note sends may still read noteOut: kept
      failed_ = std::string(what) + " could not start (MPI error " + std::to_string(rc) + ")";
      return TPCOMM_ERROR(kSystemError, "MPI bootstrap %s on rank %d: %s", what, rank_, failed_.c_str());
    }
    if (!pollUntil(&op->request, deadline, &rc)) {
      finishNotes(&recvs, &sends, /*cancel=*/true);
      pending_ = op;  // still pending: kept alive with its buffers
      char buf[512];
      if (rc != MPI_SUCCESS) {
        std::snprintf(buf, sizeof(buf), "MPI_Test failed (%d) in %s %llu", rc, what,
                      static_cast<unsigned long long>(seq));
        failed_ = buf;
        return TPCOMM_ERROR(kSystemError, "MPI bootstrap on rank %d: %s", rank_, buf);
      }
      // Every note came, so every rank arrived; one of them gave up on this exchange (its own
      // bound ran out before the last note reached it) and never started the collective, or the
      // transfer itself outlasts the bound.
      std::snprintf(buf, sizeof(buf),
                    "%s: every rank arrived but the collective did not complete within %lld ms (%s; rank %d "
                    "waited): a rank gave up on it first (its own timeout ran out; its message names it), or "
                    "the transfer takes longer than the bound",
                    describeNote(op->noteOut).c_str(), static_cast<long long>(timeoutMs), bootstrapTimeoutSource(),
                    rank_);
      failed_ = buf;
      return TPCOMM_ERROR(kTimeout, "MPI bootstrap: %s", buf);
    }
    // Every peer entered the collective, so its note was sent before: the receives complete.
    bool sent = finishNotes(&recvs, &sends, /*cancel=*/false, deadline);
    if (bytes) std::memcpy(all, op->recv.data(), bytes * size_);
    if (sent) {
      delete op;
    } else {  // a freed note send may still read op->noteOut: keep that much
      std::vector<char>().swap(op->send);
      std::vector<char>().swap(op->recv);
      retain(op);
    }
    return Status::kOk;
  }

  // Completes (cancel=false) or cancels the note receives; completes the note sends if they
  // complete by `deadline`, else frees them. False when a freed send may still read its buffer.
  bool finishNotes(std::vector<MPI_Request>* recvs, std::vector<MPI_Request>* sends, bool cancel,
                   Clock::time_point deadline = Clock::time_point()) {
    for (MPI_Request& r : *recvs) {
      if (r == MPI_REQUEST_NULL) continue;
      if (cancel) {
        int done = 0;
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done) continue;
        MPI_Cancel(&r);
      }
      MPI_Wait(&r, MPI_STATUS_IGNORE);  // a cancelled receive completes at once
    }
    bool allSent = true;
    for (MPI_Request& r : *sends) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      while (MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!done) {
        MPI_Request_free(&r);  // an 8-byte note: MPI delivers it; nobody waits for it
        allSent = false;
      }
    }
    return allSent;
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  uint64_t seq_ = 0;
  std::string failed_;     // non-empty: why every later call fails
  Op* pending_ = nullptr;  // a timed-out collective MPI may still complete
};

}  // namespace

Status makeMpiBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out) {
  if (!out) return TPCOMM_INVALID("makeMpiBootstrap: out is null");
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return TPCOMM_INVALID("makeMpiBootstrap: MPI is not initialized (call MPI_Init first)");
  if (comm == MPI_COMM_NULL) return TPCOMM_INVALID("makeMpiBootstrap: comm is MPI_COMM_NULL");
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Arrival notes on `comm` (tag kDupNoteTag, one 8-byte message to and from each peer), so a
  // timeout names the ranks that never called makeMpiBootstrap. When every rank arrives every
  // note is received; after a timeout the notes sent to the missing ranks stay queued for them.
  auto* noteOut = new uint64_t(0);  // a freed send may still read it: freed only once sent
  std::vector<uint64_t> notesIn(size, 0);
  std::vector<MPI_Request> recvs(size, MPI_REQUEST_NULL), sends(size, MPI_REQUEST_NULL);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Irecv(&notesIn[p], 1, MPI_UINT64_T, p, kDupNoteTag, comm, &recvs[p]);
    MPI_Isend(noteOut, 1, MPI_UINT64_T, p, kDupNoteTag, comm, &sends[p]);
  }
  // Finishes the notes: receives completed (arrived) or cancelled, sends completed or freed.
  auto finishNotes = [&](bool arrived, Clock::time_point until) {
    for (MPI_Request& r : recvs) {
      if (r == MPI_REQUEST_NULL) continue;
      if (!arrived) {
        int done = 0;
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Cancel(&r);
      }
      MPI_Wait(&r, MPI_STATUS_IGNORE);  // arrived: every peer sent its note before its idup
    }
    bool allSent = true;
    for (MPI_Request& r : sends) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      while (MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!done) {
        MPI_Request_free(&r);
        allSent = false;
      }
    }
    if (allSent)
      delete noteOut;
    else
      retain(noteOut);
  };
  // MPI_Comm_dup is collective and blocks until every rank of comm calls it: the non-blocking
  // form, polled against the timeout, bounds it. On timeout the request stays pending (it
  // cannot be cancelled) and the half-made communicator is left to MPI.
  MPI_Comm* dup = new MPI_Comm(MPI_COMM_NULL);
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Comm_idup(comm, dup, &req) != MPI_SUCCESS) {
    delete dup;
    finishNotes(false, Clock::now());
    return TPCOMM_ERROR(kSystemError, "makeMpiBootstrap: MPI_Comm_idup failed");
  }
  int64_t timeoutMs = 0;
  int rc = MPI_SUCCESS;
  const Clock::time_point deadline = deadlineFromNow(&timeoutMs);
  if (!pollUntil(&req, deadline, &rc)) {
    retain(dup);  // MPI may still write the new communicator into it
    std::vector<int> missing;
    for (int p = 0; p < size; ++p) {
      int got = 0;
      if (p != rank && (MPI_Test(&recvs[p], &got, MPI_STATUS_IGNORE), !got)) missing.push_back(p);
    }
    finishNotes(false, Clock::now());
    if (rc != MPI_SUCCESS) return TPCOMM_ERROR(kSystemError, "makeMpiBootstrap: MPI_Test on MPI_Comm_idup failed");
    return TPCOMM_ERROR(kTimeout,
                        "makeMpiBootstrap (duplicating the communicator): rank(s) %s never arrived within %lld ms "
                        "(%s; rank %d waited): every rank of the communicator must call makeMpiBootstrap",
                        rankList(missing).c_str(), static_cast<long long>(timeoutMs), bootstrapTimeoutSource(), rank);
  }
  finishNotes(true, deadline);
  MPI_Comm c = *dup;
  delete dup;
  out->reset(new MpiBootstrap(c));
  return Status::kOk;
}

}  // namespace tpcomm
