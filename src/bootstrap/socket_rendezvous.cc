// socket_rendezvous.cc: how the socket bootstrap's ranks meet and prove they belong to the job
// (socket_wire.h). Rank 0 listens and challenges every connection; rank r answers with a proof
// of the secret; once all ranks have arrived rank 0 answers each with a verdict and a proof of
// its own. Every wait is a poll() against the deadline.
//
// Hostile traffic on the port: at most max(16, 2 * size) connections wait for their hello at
// once; a new one pushes out the oldest (a real rank answers its challenge within one round
// trip, so it is never the oldest for long). When accept fails for want of file descriptors the
// oldest waiting connection is dropped and the listening socket rests for kAcceptBackoffMs, so
// rank 0 sleeps in poll instead of spinning on a listening socket that stays readable.
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>

#include "bootstrap/socket_wire.h"
#include "common/error.h"
#include "common/log.h"

namespace tpcomm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAcceptBackoffMs = 20;
constexpr int kVerdictSlackMs = 50;  // rank r waits this long past rank 0's own deadline for its verdict

void proof(const char* label, const uint8_t* secret, const uint8_t* challenge, const uint8_t* nonce, int32_t a,
           int32_t b, uint8_t out[kSha256Bytes]) {
  const ByteSpan parts[] = {
      {label, std::strlen(label)}, {challenge, kNonceBytes}, {nonce, kNonceBytes}, {&a, sizeof(a)}, {&b, sizeof(b)}};
  hmacSha256(secret, kSecretBytes, parts, sizeof(parts) / sizeof(parts[0]), out);
}

void copyText(char* dst, size_t n, const char* src) { std::snprintf(dst, n, "%s", src); }

struct Waiting {  // a connection rank 0 has challenged, waiting for its hello
  int fd;
  Challenge challenge;
  Hello hello;
  size_t got;
};

// Why rank 0 refuses `h` (empty: accepted).
std::string checkHello(const DecodedId& id, const Waiting& w, int size, const std::vector<int>& fds) {
  const Hello& h = w.hello;
  char buf[200];
  if (h.magic != kWireMagic || h.version != kWireVersion) {
    std::snprintf(buf, sizeof(buf), "not a tpcomm socket bootstrap peer of wire version %u (magic 0x%x, version %u)",
                  kWireVersion, h.magic, h.version);
    return buf;
  }
  uint8_t want[kSha256Bytes];
  helloProof(id.secret, w.challenge.nonce, h.nonce, h.rank, h.size, want);
  if (!equalInConstantTime(want, h.proof, kSha256Bytes))
    return "wrong secret: its proof does not match this id's (a process with another unique id)";
  if (h.size != size) {
    std::snprintf(buf, sizeof(buf), "rank %d says there are %d ranks, rank 0 says %d", h.rank, h.size, size);
    return buf;
  }
  if (h.rank <= 0 || h.rank >= size) {
    std::snprintf(buf, sizeof(buf), "rank %d out of range [1, %d)", h.rank, size);
    return buf;
  }
  if (fds[h.rank] >= 0) {
    std::snprintf(buf, sizeof(buf), "rank %d arrived twice", h.rank);
    return buf;
  }
  return "";
}

bool sendVerdict(int fd, Status s, const char* text, const uint8_t* proofOrNull, int timeoutMs) {
  Verdict v{};
  v.magic = kWireMagic;
  v.status = static_cast<int32_t>(s);
  if (proofOrNull) std::memcpy(v.proof, proofOrNull, kSha256Bytes);
  copyText(v.text, sizeof(v.text), text);
  return sendAll(fd, &v, sizeof(v), Deadline(std::min(timeoutMs, 2000)), "verdict", -1) == Status::kOk;
}

}  // namespace

void helloProof(const uint8_t* secret, const uint8_t* challenge, const uint8_t* nonce, int32_t rank, int32_t size,
                uint8_t out[kSha256Bytes]) {
  proof("tpcomm socket bootstrap v2 hello", secret, challenge, nonce, rank, size, out);
}

void verdictProof(const uint8_t* secret, const uint8_t* challenge, const uint8_t* nonce, int32_t rank, int32_t status,
                  uint8_t out[kSha256Bytes]) {
  proof("tpcomm socket bootstrap v2 verdict", secret, challenge, nonce, rank, status, out);
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

Status socketRootRendezvous(const DecodedId& id, int size, int timeoutMs, const char* source, std::vector<int>* fds) {
  Deadline dl(timeoutMs);
  int lfd = -1;
  TPCOMM_TRY(listenOn(id, &lfd));
  const size_t maxWaiting = static_cast<size_t>(std::max(16, 2 * size));
  std::deque<Waiting> waiting;  // oldest first
  std::vector<Challenge> challenges(size);
  std::vector<Hello> hellos(size);
  std::vector<std::string> refusals;
  int arrived = 1, dropped = 0;
  bool outOfDescriptors = false;
  Clock::time_point acceptRestsUntil{};
  Status result = Status::kOk;
  auto dropOldest = [&] {
    ::close(waiting.front().fd);
    waiting.pop_front();
    ++dropped;
  };
  while (arrived < size) {
    const int waitMs = dl.remainingMs();
    if (waitMs <= 0) break;
    const Clock::time_point now = Clock::now();
    const bool listening = now >= acceptRestsUntil;
    std::vector<pollfd> pfds;
    for (const Waiting& w : waiting) pfds.push_back({w.fd, POLLIN, 0});
    if (listening) pfds.push_back({lfd, POLLIN, 0});
    const int restMs =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(acceptRestsUntil - now).count() + 1);
    int n = ::poll(pfds.data(), pfds.size(), listening ? waitMs : std::min(waitMs, restMs));
    if (n < 0 && errno != EINTR) {
      result = TPCOMM_ERROR(kSystemError, "socket bootstrap rank 0: poll: %s", std::strerror(errno));
      break;
    }
    if (n <= 0) continue;
    // Hellos first (newest to oldest, so erasing keeps the earlier indices), then a new connection.
    for (size_t i = waiting.size(); i-- > 0;) {
      if (!pfds[i].revents) continue;
      Waiting& w = waiting[i];
      ssize_t got = ::recv(w.fd, reinterpret_cast<char*>(&w.hello) + w.got, sizeof(Hello) - w.got, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got > 0) w.got += static_cast<size_t>(got);
      if (got > 0 && w.got < sizeof(Hello)) continue;
      if (got > 0) {
        const std::string why = checkHello(id, w, size, *fds);
        if (why.empty()) {
          (*fds)[w.hello.rank] = w.fd;
          challenges[w.hello.rank] = w.challenge;
          hellos[w.hello.rank] = w.hello;
          ++arrived;
          waiting.erase(waiting.begin() + static_cast<long>(i));
          continue;
        }
        TPCOMM_WARN(kBoot, "socket bootstrap rank 0: refused a connection: %s", why.c_str());
        refusals.push_back(why);
        sendVerdict(w.fd, Status::kRemoteError, ("rank 0 refused the connection: " + why).c_str(), nullptr, timeoutMs);
      }
      ::close(w.fd);  // refused, or closed before its hello: not a rank of ours
      waiting.erase(waiting.begin() + static_cast<long>(i));
    }
    if (!listening || !(pfds.back().revents & POLLIN)) continue;
    if (waiting.size() >= maxWaiting) dropOldest();
    int cfd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (!outOfDescriptors)
          TPCOMM_WARN(kBoot, "socket bootstrap rank 0: accept: %s; dropping the oldest idle connection",
                      std::strerror(errno));
        outOfDescriptors = true;
        if (!waiting.empty()) dropOldest();
        acceptRestsUntil = Clock::now() + std::chrono::milliseconds(kAcceptBackoffMs);
      }
      continue;
    }
    int one = 1;
    ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Waiting w{cfd, Challenge{kWireMagic, kWireVersion, {}}, Hello{}, 0};
    Status r = randomBytes(w.challenge.nonce, kNonceBytes);
    // A fresh socket's send buffer is empty: the challenge goes out in one call or not at all.
    if (r != Status::kOk ||
        ::send(cfd, &w.challenge, sizeof(w.challenge), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(w.challenge))) {
      ::close(cfd);
      if (r != Status::kOk) {
        result = r;
        break;
      }
      continue;
    }
    waiting.push_back(w);
  }
  for (const Waiting& w : waiting) ::close(w.fd);
  ::close(lfd);
  if (result == Status::kOk && arrived < size) {
    std::vector<int> missing;
    for (int r = 1; r < size; ++r)
      if ((*fds)[r] < 0) missing.push_back(r);
    std::string note;
    for (const std::string& r : refusals) note += "; refused: " + r;
    if (dropped) note += "; " + std::to_string(dropped) + " idle connection(s) dropped";
    result = TPCOMM_ERROR(kTimeout,
                          "socket bootstrap rendezvous at %s: %s never arrived within %d ms (%s; %d of %d arrived)%s",
                          id.where, rankList(missing).c_str(), timeoutMs, source, arrived, size, note.c_str());
  }
  const std::string text = lastErrorMessage();
  for (int r = 1; r < size; ++r) {
    if ((*fds)[r] < 0) continue;
    uint8_t p[kSha256Bytes];
    verdictProof(id.secret, challenges[r].nonce, hellos[r].nonce, r, static_cast<int32_t>(result), p);
    if (!sendVerdict((*fds)[r], result, result == Status::kOk ? "" : text.c_str(), p, timeoutMs) &&
        result == Status::kOk)
      result =
          TPCOMM_ERROR(kRemoteError, "socket bootstrap rank 0: rank %d closed its connection during rendezvous", r);
  }
  return result;
}

Status socketClientRendezvous(const DecodedId& id, int rank, int size, int timeoutMs, const char* source, int* out) {
  Deadline dl(timeoutMs);
  int fd = -1;
  TPCOMM_TRY(connectTo(id, dl, rank, timeoutMs, source, &fd));
  *out = fd;
  // Rank 0 listened before this connection could succeed, so its own deadline ends within
  // timeoutMs of now: the challenge and the verdict come by then, or it is gone.
  const Deadline afterConnect(static_cast<int64_t>(timeoutMs) + kVerdictSlackMs);
  Challenge ch{};
  Status s = recvAll(fd, &ch, sizeof(ch), afterConnect, "rank 0's challenge", 0);
  if (s == Status::kOk && (ch.magic != kWireMagic || ch.version != kWireVersion))
    s = TPCOMM_ERROR(kRemoteError,
                     "socket bootstrap rank %d: the process at %s is not a tpcomm rank 0 of wire version %u (magic "
                     "0x%x, version %u)",
                     rank, id.where, kWireVersion, ch.magic, ch.version);
  Hello h{};
  if (s == Status::kOk) {
    h.magic = kWireMagic;
    h.version = kWireVersion;
    h.rank = rank;
    h.size = size;
    s = randomBytes(h.nonce, kNonceBytes);
  }
  if (s == Status::kOk) {
    helloProof(id.secret, ch.nonce, h.nonce, rank, size, h.proof);
    s = sendAll(fd, &h, sizeof(h), afterConnect, "hello", 0);
  }
  Verdict v{};
  if (s == Status::kOk) s = recvAll(fd, &v, sizeof(v), afterConnect, "rank 0's verdict", 0);
  if (s == Status::kTimeout)
    return TPCOMM_ERROR(kTimeout,
                        "socket bootstrap rendezvous: rank 0 (the root, at %s) gave no verdict within %d ms of this "
                        "rank's connection (%s + %d ms; rank %d waited): it exited or hung",
                        id.where, timeoutMs + kVerdictSlackMs, source, kVerdictSlackMs, rank);
  TPCOMM_TRY(s);
  v.text[sizeof(v.text) - 1] = '\0';
  uint8_t want[kSha256Bytes];
  verdictProof(id.secret, ch.nonce, h.nonce, rank, v.status, want);
  const bool proven = v.magic == kWireMagic && equalInConstantTime(want, v.proof, kSha256Bytes);
  if (!proven && v.magic == kWireMagic && v.status != 0)  // a refusal: rank 0 could not prove it to us
    return TPCOMM_ERROR(kRemoteError, "socket bootstrap rank %d: rank 0 at %s refused this rank: %s", rank, id.where,
                        v.text);
  if (!proven)
    return TPCOMM_ERROR(kRemoteError,
                        "socket bootstrap rank %d: the process at %s did not prove it holds the id's secret: not this "
                        "job's rank 0 (another process on the port?)",
                        rank, id.where);
  if (v.status != 0) {
    const Status remote = static_cast<Status>(v.status) == Status::kTimeout ? Status::kTimeout : Status::kRemoteError;
    return setError(remote, __FILE__, __LINE__, "socket bootstrap rank %d: rank 0 at %s reports: %s", rank, id.where,
                    v.text);
  }
  return Status::kOk;
}

}  // namespace tpcomm
