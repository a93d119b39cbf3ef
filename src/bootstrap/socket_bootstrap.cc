// Bootstrap over TCP (include/tpcomm/socket_bootstrap.h): a star through rank 0. Rendezvous
// (socket_rendezvous.cc): rank 0 listens on the unique id's port and challenges every
// connection; rank r > 0 connects and proves it holds the id's secret without sending it; rank 0
// refuses a wrong proof, a rank out of range or taken, a different size, and once all ranks have
// arrived answers each with a verdict that proves it holds the secret too (socket_wire.h).
// allGather: rank 0 tells every rank it has entered the exchange, every rank sends (seq, bytes,
// data) to rank 0, which answers with the whole table, or with an error that every rank then
// returns (a size mismatch, a rank that closed its connection, a timeout naming the ranks
// missing). A rank waits for rank 0's arrival up to its own bound, then for the reply up to rank
// 0's bound from then: never more than twice the bound plus a little. Every wait is a poll();
// after any failure the bootstrap is broken and fails at once. Sockets are non-blocking and sends
// use MSG_NOSIGNAL (a dead peer never raises SIGPIPE).
#include "tpcomm/socket_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "bootstrap/socket_io.h"
#include "bootstrap/socket_wire.h"
#include "common/error.h"
#include "common/log.h"

namespace tpcomm {
namespace {

constexpr int kMaxSocketRanks = 1 << 16;  // a star through rank 0; more is a mistake, not a job
constexpr int kReplySlackMs = 50;  // a rank waits this long past rank 0's deadline for its reply

void copyText(char* dst, size_t n, const char* src) { std::snprintf(dst, n, "%s", src); }

class SocketBootstrap : public Bootstrap {
 public:
  // explicitMs: makeSocketBootstrap's timeoutMs (0: none; TPCOMM_TIMEOUT_MS then).
  SocketBootstrap(const DecodedId& id, int rank, int size, int explicitMs)
      : id_(id), rank_(rank), size_(size), explicitMs_(explicitMs), fds_(size, -1) {}
  ~SocketBootstrap() override {
    for (int& fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status connectAll() { return rank_ == 0 ? rootRendezvous() : clientRendezvous(); }

  Status allGather(const void* mine, void* all, size_t bytes) override {
    if ((!mine || !all) && bytes) return TPCOMM_INVALID("socket bootstrap allGather: null buffer");
    if (bytes > SIZE_MAX / static_cast<size_t>(size_))
      return TPCOMM_INVALID("socket bootstrap allGather: bytesPerRank %zu x %d ranks overflows a size_t", bytes, size_);
    if (abandoned_.load()) return TPCOMM_ERROR(kRemoteError, "socket bootstrap rank %d: abandoned (aborted)", rank_);
    if (!broken_.empty())
      return TPCOMM_ERROR(kRemoteError, "socket bootstrap rank %d: an earlier exchange failed: %s", rank_,
                          broken_.c_str());
    ++seq_;
    if (size_ == 1) {
      if (bytes) std::memmove(all, mine, bytes);
      return Status::kOk;
    }
    Status s = rank_ == 0 ? rootExchange(mine, all, bytes) : clientExchange(mine, all, bytes);
    if (s != Status::kOk && broken_.empty()) broken_ = lastErrorMessage();
    return s;
  }
  Status barrier() override {
    char dummy = 0;
    std::vector<char> all(size_);
    return allGather(&dummy, all.data(), 1);
  }

  void abandon() {
    abandoned_.store(true);
    for (int fd : fds_)
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // peers see EOF now; fds close in the destructor
  }

 private:
  // The bound in force (bootstrap_timeout.h): a communicator's Config::timeoutMs during its create
  // and destroy, else this bootstrap's explicit one, else TPCOMM_TIMEOUT_MS.
  int timeoutMs() const { return bootstrapTimeoutMs(explicitMs_); }
  Deadline deadline(int extraMs = 0) const { return Deadline(static_cast<int64_t>(timeoutMs()) + extraMs); }

  Status rootRendezvous() {
    Status st = socketRootRendezvous(id_, size_, timeoutMs(), bootstrapTimeoutSource(explicitMs_), &fds_);
    if (st != Status::kOk) broken_ = lastErrorMessage();
    return st;
  }
  Status clientRendezvous() {
    Status st = socketClientRendezvous(id_, rank_, size_, timeoutMs(), bootstrapTimeoutSource(explicitMs_), &fds_[0]);
    if (st != Status::kOk) broken_ = lastErrorMessage();
    return st;
  }

  // --- exchanges ----------------------------------------------------------------------------
  Status rootExchange(const void* mine, void* all, size_t bytes) {
    char* table = static_cast<char*>(all);
    if (bytes) std::memmove(table, mine, bytes);
    Deadline dl = deadline();
    // Arrived: each rank's wait for the reply is now bounded by this rank's deadline.
    const Entered in{kWireMagic, seq_};
    for (int r = 1; r < size_; ++r)
      if (sendAll(fds_[r], &in, sizeof(in), dl, "exchange start", r) != Status::kOk)
        return TPCOMM_ERROR(kRemoteError,
                            "socket bootstrap exchange %u: rank %d closed its connection (exited or aborted)", seq_, r);
    struct Peer {
      MsgHeader h;
      size_t got;  // of header, then of header + data
      bool done;
    };
    std::vector<Peer> peers(size_, Peer{MsgHeader{}, 0, false});
    peers[0].done = true;
    int left = size_ - 1;
    Status s = Status::kOk;
    while (left > 0 && s == Status::kOk) {
      int waitMs = dl.remainingMs();
      if (waitMs <= 0) {
        std::vector<int> missing;
        for (int r = 1; r < size_; ++r)
          if (!peers[r].done) missing.push_back(r);
        s = TPCOMM_ERROR(kTimeout, "socket bootstrap exchange %u: %s never arrived within %d ms (%s; %d of %d arrived)",
                         seq_, rankList(missing).c_str(), timeoutMs(), bootstrapTimeoutSource(explicitMs_),
                         size_ - static_cast<int>(missing.size()), size_);
        break;
      }
      std::vector<pollfd> pfds;
      for (int r = 1; r < size_; ++r)
        if (!peers[r].done) pfds.push_back({fds_[r], POLLIN, 0});
      int n = ::poll(pfds.data(), pfds.size(), waitMs);
      if (n < 0 && errno != EINTR) {
        s = TPCOMM_ERROR(kSystemError, "socket bootstrap rank 0: poll: %s", std::strerror(errno));
        break;
      }
      for (int r = 1, k = 0; r < size_ && n > 0 && s == Status::kOk; ++r) {
        if (peers[r].done) continue;
        if (!pfds[k++].revents) continue;
        Peer& p = peers[r];
        bool inHeader = p.got < sizeof(MsgHeader);
        char* dst = inHeader ? reinterpret_cast<char*>(&p.h) + p.got : table + r * bytes + (p.got - sizeof(MsgHeader));
        size_t want = inHeader ? sizeof(MsgHeader) - p.got : sizeof(MsgHeader) + bytes - p.got;
        ssize_t got = ::recv(fds_[r], dst, want, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {
          s = TPCOMM_ERROR(kRemoteError, "socket bootstrap: rank %d closed its connection (exited or aborted)", r);
          break;
        }
        p.got += got;
        if (inHeader && p.got == sizeof(MsgHeader)) {
          if (p.h.magic != kWireMagic || p.h.seq != seq_) {
            s = TPCOMM_ERROR(
                kInternal,
                "socket bootstrap: rank %d is at exchange %u, rank 0 at %u (ranks called different collectives)", r,
                p.h.seq, seq_);
          } else if (p.h.bytes != bytes) {
            s = TPCOMM_INVALID("socket bootstrap exchange %u: rank %d passed %llu bytes per rank, rank 0 passed %zu",
                               seq_, r, static_cast<unsigned long long>(p.h.bytes), bytes);
          }
        }
        if (s == Status::kOk && p.got == sizeof(MsgHeader) + bytes) {
          p.done = true;
          --left;
        }
      }
    }
    ReplyHeader rh{};
    rh.magic = kWireMagic;
    rh.status = static_cast<int32_t>(s);
    rh.seq = seq_;
    rh.bytes = bytes;
    if (s != Status::kOk) copyText(rh.text, sizeof(rh.text), lastErrorMessage());
    std::string failure = s == Status::kOk ? "" : lastErrorMessage();
    Deadline sendDl = deadline();
    for (int r = 1; r < size_; ++r) {
      Status w = sendAll(fds_[r], &rh, sizeof(rh), sendDl, "reply", r);
      if (w == Status::kOk && s == Status::kOk) w = sendAll(fds_[r], table, bytes * size_, sendDl, "table", r);
      if (w != Status::kOk && s == Status::kOk) {
        s = w;
        failure = lastErrorMessage();
      }
    }
    if (s != Status::kOk) {  // the sends above may have overwritten this thread's message
      size_t colon = failure.find(": ");
      setError(s, __FILE__, __LINE__, "%s", colon == std::string::npos ? failure.c_str() : failure.c_str() + colon + 2);
    }
    return s;
  }

  Status clientExchange(const void* mine, void* all, size_t bytes) {
    Deadline dl = deadline();
    MsgHeader h{kWireMagic, seq_, bytes};
    int fd = fds_[0];
    TPCOMM_TRY(sendAll(fd, &h, sizeof(h), dl, "exchange header", 0));
    TPCOMM_TRY(sendAll(fd, mine, bytes, dl, "exchange data", 0));
    // Rank 0's arrival, by this rank's own deadline; then its reply, by rank 0's deadline (which
    // started no later than the arrival note was read) plus a little.
    Entered in{};
    Status s = recvAll(fd, &in, sizeof(in), dl, "rank 0's arrival", 0);
    if (s == Status::kTimeout)
      return TPCOMM_ERROR(kTimeout,
                          "socket bootstrap exchange %u: rank 0 (the root, at %s) never arrived within %d ms (%s; "
                          "rank %d waited)",
                          seq_, id_.where, timeoutMs(), bootstrapTimeoutSource(explicitMs_), rank_);
    TPCOMM_TRY(s);
    if (in.magic != kWireMagic || in.seq != seq_)
      return TPCOMM_ERROR(kInternal, "socket bootstrap rank %d: rank 0 entered exchange %u, this rank is at %u", rank_,
                          in.seq, seq_);
    ReplyHeader rh{};
    s = recvAll(fd, &rh, sizeof(rh), deadline(kReplySlackMs), "rank 0's reply", 0);
    if (s == Status::kTimeout)  // rank 0 answers by its own deadline, naming any rank missing
      return TPCOMM_ERROR(kTimeout,
                          "socket bootstrap exchange %u: rank 0 (the root, at %s) arrived but never answered within "
                          "%d ms (%s + %d ms; rank %d waited): it hung or exited",
                          seq_, id_.where, timeoutMs() + kReplySlackMs, bootstrapTimeoutSource(explicitMs_),
                          kReplySlackMs, rank_);
    TPCOMM_TRY(s);
    if (rh.magic != kWireMagic)
      return TPCOMM_ERROR(kInternal, "socket bootstrap rank %d: malformed reply from rank 0", rank_);
    if (rh.status != 0) {
      rh.text[sizeof(rh.text) - 1] = '\0';
      Status remote = static_cast<Status>(rh.status);
      return setError(remote, __FILE__, __LINE__, "socket bootstrap rank %d: rank 0 reports: %s", rank_, rh.text);
    }
    if (rh.seq != seq_ || rh.bytes != bytes)
      return TPCOMM_ERROR(kInternal,
                          "socket bootstrap rank %d: reply for exchange %u of %llu bytes, expected %u of %zu", rank_,
                          rh.seq, static_cast<unsigned long long>(rh.bytes), seq_, bytes);
    return recvAll(fd, all, bytes * size_, deadline(kReplySlackMs), "exchange table", 0);
  }

  DecodedId id_;
  int rank_, size_, explicitMs_;
  std::vector<int> fds_;  // rank 0: one per peer rank; rank r > 0: fds_[0] is rank 0
  uint32_t seq_ = 0;
  std::string broken_;  // set by the first failure: later exchanges fail at once
  std::atomic<bool> abandoned_{false};
};

}  // namespace

Status makeSocketUniqueId(SocketUniqueId* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("makeSocketUniqueId: out is null");
  sockaddr_storage addr{};
  TPCOMM_TRY(chooseInterfaceAddress(&addr));
  return makeIdFor(addr, out);
}

Status makeSocketUniqueIdForAddress(const char* address, SocketUniqueId* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("makeSocketUniqueIdForAddress: out is null");
  sockaddr_storage addr{};
  TPCOMM_TRY(parseNumericAddress(address, &addr));
  return makeIdFor(addr, out);
}

bool socketUniqueIdAddress(const SocketUniqueId& id, char* buf, size_t bufSize) {
  DecodedId d;
  if (!decodeId(id, &d) || !buf || bufSize == 0) return false;
  std::snprintf(buf, bufSize, "%s", d.where);
  return true;
}

Status makeSocketBootstrap(const SocketUniqueId& id, int rank, int size, int timeoutMs,
                           std::unique_ptr<Bootstrap>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("makeSocketBootstrap: out is null");
  out->reset();
  if (size < 1 || size > kMaxSocketRanks)
    return TPCOMM_INVALID("makeSocketBootstrap: size %d: expected 1..%d", size, kMaxSocketRanks);
  if (rank < 0 || rank >= size) return TPCOMM_INVALID("makeSocketBootstrap: rank %d out of range [0, %d)", rank, size);
  if (timeoutMs < 0)
    return TPCOMM_INVALID("makeSocketBootstrap: timeoutMs %d: expected >= 0 (0: TPCOMM_TIMEOUT_MS)", timeoutMs);
  DecodedId d;
  if (!decodeId(id, &d))
    return TPCOMM_INVALID(
        "makeSocketBootstrap: id is not a tpcomm socket unique id (bad magic or version: corrupted or not made by "
        "makeSocketUniqueId)");
  auto bs = std::make_unique<SocketBootstrap>(d, rank, size, timeoutMs);
  if (size > 1) TPCOMM_TRY(bs->connectAll());
  TPCOMM_INFO(kBoot, "socket bootstrap: rank %d of %d connected through %s", rank, size, d.where);
  *out = std::move(bs);
  return Status::kOk;
}

void abandonSocketBootstrap(Bootstrap* bootstrap) {
  if (auto* s = dynamic_cast<SocketBootstrap*>(bootstrap)) s->abandon();
}

}  // namespace tpcomm
