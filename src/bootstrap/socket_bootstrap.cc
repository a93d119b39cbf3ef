// Bootstrap over TCP (include/tpcomm/socket_bootstrap.h): a star through rank 0. Rendezvous:
// rank 0 listens on the unique id's port; rank r > 0 connects (non-blocking, retried until the
// deadline while rank 0 is not up yet) and sends a Hello (rank, size, secret); rank 0 refuses a
// wrong secret (constant-time compare), a rank out of range or taken, a different size, and
// once all ranks have arrived answers each with a Verdict carrying the secret back (so a rank
// knows it reached this job's rank 0). allGather: every rank sends (seq, bytes, data) to rank
// 0, which answers with the whole table, or with an error that every rank then returns (a size
// mismatch, a rank that closed its connection, a timeout naming the ranks missing). Every wait
// is a poll() bounded by the deadline; after any failure the bootstrap is broken and fails at
// once. Sockets are non-blocking and sends use MSG_NOSIGNAL (a dead peer never raises SIGPIPE).
#include "tpcomm/socket_bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {
namespace {

// --- the unique id --------------------------------------------------------------------------
// Layout of SocketUniqueId::bytes: magic (4) | version (1) | family (1: 4 or 6) | port (2, network
// order) | address (16) | IPv6 scope id (4) | unused (4) | secret (32) | zeros.
constexpr uint32_t kIdMagic = 0x42435054u;  // "TPCB"
constexpr uint8_t kIdVersion = 1;
constexpr int kSecretBytes = 32;

struct DecodedId {
  sockaddr_storage addr{};
  socklen_t addrLen = 0;
  uint8_t secret[kSecretBytes]{};
  char where[INET6_ADDRSTRLEN + 16]{};  // "address:port", for messages
};

bool decodeId(const SocketUniqueId& id, DecodedId* d) {
  uint32_t magic;
  std::memcpy(&magic, id.bytes, 4);
  if (magic != kIdMagic || id.bytes[4] != kIdVersion) return false;
  uint16_t port;
  std::memcpy(&port, id.bytes + 6, 2);
  char host[INET6_ADDRSTRLEN] = "";
  if (id.bytes[5] == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&d->addr);
    a->sin_family = AF_INET;
    a->sin_port = port;
    std::memcpy(&a->sin_addr, id.bytes + 8, 4);
    d->addrLen = sizeof(sockaddr_in);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    std::snprintf(d->where, sizeof(d->where), "%s:%u", host, ntohs(port));
  } else if (id.bytes[5] == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&d->addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = port;
    std::memcpy(&a->sin6_addr, id.bytes + 8, 16);
    std::memcpy(&a->sin6_scope_id, id.bytes + 24, 4);
    d->addrLen = sizeof(sockaddr_in6);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    std::snprintf(d->where, sizeof(d->where), "[%s]:%u", host, ntohs(port));
  } else {
    return false;
  }
  if (port == 0) return false;
  std::memcpy(d->secret, id.bytes + 32, kSecretBytes);
  return true;
}

socklen_t addrLength(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// A port free on `addr` now: bind port 0, read the port the kernel chose, close. Rank 0 binds
// it again (SO_REUSEADDR) when it joins; a process that takes the port in between makes rank 0
// fail with a message saying to make a new id.
Status makeIdFor(const sockaddr_storage& addrIn, SocketUniqueId* out) {
  sockaddr_storage addr = addrIn;
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return TPCOMM_ERROR(kSystemError, "socket unique id: socket(): %s", std::strerror(errno));
  if (addr.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = 0;
  socklen_t len = addrLength(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int e = errno;
    ::close(fd);
    return TPCOMM_ERROR(kSystemError, "socket unique id: cannot bind a port on the chosen address: %s",
                        std::strerror(e));
  }
  ::close(fd);
  std::memset(out->bytes, 0, sizeof(out->bytes));
  std::memcpy(out->bytes, &kIdMagic, 4);
  out->bytes[4] = kIdVersion;
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    out->bytes[5] = 4;
    std::memcpy(out->bytes + 6, &a->sin_port, 2);
    std::memcpy(out->bytes + 8, &a->sin_addr, 4);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    out->bytes[5] = 6;
    std::memcpy(out->bytes + 6, &a->sin6_port, 2);
    std::memcpy(out->bytes + 8, &a->sin6_addr, 16);
    std::memcpy(out->bytes + 24, &a->sin6_scope_id, 4);
  }
  size_t got = 0;
  while (got < kSecretBytes) {
    ssize_t n = ::getrandom(out->bytes + 32 + got, kSecretBytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return TPCOMM_ERROR(kSystemError, "socket unique id: getrandom: %s", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return Status::kOk;
}

Status parseNumericAddress(const char* text, sockaddr_storage* out) {
  if (!text || !*text)
    return TPCOMM_INVALID("socket unique id: address is null or empty (expected e.g. \"127.0.0.1\" or \"::1\")");
  *out = sockaddr_storage{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(out);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET, text, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    return Status::kOk;
  }
  if (inet_pton(AF_INET6, text, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    return Status::kOk;
  }
  return TPCOMM_INVALID("socket unique id: address '%s' is not a numeric IPv4 or IPv6 address", text);
}

// TPCOMM_SOCKET_IFNAME, as NCCL_SOCKET_IFNAME: "a,b" prefixes, "=a,b" exact names, "^a,b"
// excluded prefixes (with "^=" excluded exact names).
bool ifnameMatches(const std::string& spec, const char* name) {
  std::string s = spec;
  bool exclude = !s.empty() && s[0] == '^';
  if (exclude) s.erase(0, 1);
  bool exact = !s.empty() && s[0] == '=';
  if (exact) s.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty() && (exact ? item == name : std::strncmp(name, item.c_str(), item.size()) == 0)) hit = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

Status chooseInterfaceAddress(sockaddr_storage* out) {
  const std::string& famText = paramString(ParamId::kSocketFamily);
  int family = AF_UNSPEC;
  if (famText == "AF_INET")
    family = AF_INET;
  else if (famText == "AF_INET6")
    family = AF_INET6;
  else if (!famText.empty())
    return TPCOMM_INVALID("TPCOMM_SOCKET_FAMILY='%s': expected AF_INET, AF_INET6 or empty", famText.c_str());
  const std::string& ifname = paramString(ParamId::kSocketIfname);
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return TPCOMM_ERROR(kSystemError, "socket unique id: getifaddrs: %s", std::strerror(errno));
  // Pass 0: the user's spec, or (none given) any interface but loopback and docker; pass 1 (no
  // spec only): loopback. Within a pass IPv4 comes before IPv6; IPv6 link-local is skipped.
  const ifaddrs* pick = nullptr;
  for (int pass = 0; pass < 2 && !pick; ++pass) {
    if (pass == 1 && !ifname.empty()) break;
    for (int fam : {AF_INET, AF_INET6}) {
      if (pick || (family != AF_UNSPEC && fam != family)) continue;
      for (const ifaddrs* i = list; i && !pick; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != fam || !(i->ifa_flags & IFF_UP)) continue;
        if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
          continue;
        bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
        bool ok = !ifname.empty() ? ifnameMatches(ifname, i->ifa_name)
                                  : (pass == 0 ? !loop && std::strncmp(i->ifa_name, "docker", 6) != 0 : loop);
        if (ok) pick = i;
      }
    }
  }
  if (!pick) {
    ::freeifaddrs(list);
    return TPCOMM_ERROR(
        kSystemError,
        "socket unique id: no interface is up that matches TPCOMM_SOCKET_IFNAME='%s' TPCOMM_SOCKET_FAMILY='%s'",
        ifname.c_str(), famText.c_str());
  }
  *out = sockaddr_storage{};
  std::memcpy(out, pick->ifa_addr, pick->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
  TPCOMM_INFO(kBoot, "socket bootstrap: interface %s", pick->ifa_name);
  ::freeifaddrs(list);
  return Status::kOk;
}

// --- bounded socket I/O -----------------------------------------------------------------------
class Deadline {
 public:
  explicit Deadline(int64_t ms) : end_(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)) {}
  int remainingMs() const {  // an int (poll's timeout), clamped
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now()).count();
    return left <= 0 ? 0 : left >= INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }

 private:
  std::chrono::steady_clock::time_point end_;
};

std::string peerName(int peer) { return peer >= 0 ? "rank " + std::to_string(peer) : std::string("a peer"); }

Status sendAll(int fd, const void* data, size_t n, const Deadline& dl, const char* what, int peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return TPCOMM_ERROR(kRemoteError, "socket bootstrap: sending the %s to %s failed: %s (did it exit?)", what,
                          peerName(peer).c_str(), std::strerror(errno));
    pollfd pfd{fd, POLLOUT, 0};
    int left = dl.remainingMs();
    if (left <= 0 || ::poll(&pfd, 1, left) == 0)
      return TPCOMM_ERROR(kTimeout, "socket bootstrap: %s did not take the %s within the timeout",
                          peerName(peer).c_str(), what);
  }
  return Status::kOk;
}

Status recvAll(int fd, void* data, size_t n, const Deadline& dl, const char* what, int peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0)
      return TPCOMM_ERROR(kRemoteError,
                          "socket bootstrap: %s closed the connection while we waited for %s (exited or aborted)",
                          peerName(peer).c_str(), what);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return TPCOMM_ERROR(kRemoteError, "socket bootstrap: receiving %s from %s failed: %s", what,
                          peerName(peer).c_str(), std::strerror(errno));
    pollfd pfd{fd, POLLIN, 0};
    int left = dl.remainingMs();
    if (left <= 0 || ::poll(&pfd, 1, left) == 0)
      return TPCOMM_ERROR(kTimeout, "socket bootstrap: no %s from %s within the timeout", what, peerName(peer).c_str());
  }
  return Status::kOk;
}

Status listenOn(const DecodedId& id, int* out) {
  int fd = ::socket(id.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return TPCOMM_ERROR(kSystemError, "socket bootstrap rank 0: socket(): %s", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&id.addr), id.addrLen) != 0 || ::listen(fd, 128) != 0) {
    int e = errno;
    ::close(fd);
    return TPCOMM_ERROR(
        kSystemError,
        "socket bootstrap rank 0: cannot listen on %s: %s (is another job using this unique id? make a new one)",
        id.where, std::strerror(e));
  }
  *out = fd;
  return Status::kOk;
}

// Connects to rank 0, retrying (rank 0 may not listen yet) until the deadline.
Status connectTo(const DecodedId& id, const Deadline& dl, int rank, int* out) {
  std::string lastWhy = "connection refused";
  while (dl.remainingMs() > 0) {
    int fd = ::socket(id.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return TPCOMM_ERROR(kSystemError, "socket bootstrap rank %d: socket(): %s", rank, std::strerror(errno));
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&id.addr), id.addrLen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int n = ::poll(&pfd, 1, std::min(dl.remainingMs(), 1000));
      socklen_t len = sizeof(err);
      if (n <= 0)
        err = ETIMEDOUT;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      *out = fd;
      return Status::kOk;
    }
    ::close(fd);
    lastWhy = std::strerror(err);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, dl.remainingMs())));
  }
  return TPCOMM_ERROR(
      kTimeout,
      "socket bootstrap rank %d: rank 0 (the root, at %s) did not arrive within the timeout, or gave up "
      "before this rank came (last: %s)",
      rank, id.where, lastWhy.c_str());
}

constexpr uint32_t kWireMagic = 0x54504357u;  // "TPCW"
constexpr uint32_t kWireVersion = 1;
constexpr int kClientGraceMs = 1000;  // a non-root rank waits this much past the timeout for rank 0's verdict

struct Hello {
  uint32_t magic, version;
  int32_t rank, size;
  uint8_t secret[kSecretBytes];
};
struct Verdict {  // rank 0 -> rank r once all ranks arrived (status 0), or a refusal / failure
  uint32_t magic;
  int32_t status;
  uint8_t secret[kSecretBytes];
  char text[256];
};
struct MsgHeader {  // rank r -> rank 0, then `bytes` of data
  uint32_t magic, seq;
  uint64_t bytes;
};
struct ReplyHeader {  // rank 0 -> rank r, then size * bytes of data when status is 0
  uint32_t magic;
  int32_t status;
  uint32_t seq, pad;
  uint64_t bytes;
  char text[256];
};

bool sameSecret(const uint8_t* a, const uint8_t* b) {
  volatile uint8_t diff = 0;
  for (int i = 0; i < kSecretBytes; ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

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

  // --- rendezvous ---------------------------------------------------------------------------
  Status rootRendezvous() {
    Deadline dl = deadline();
    int lfd = -1;
    TPCOMM_TRY(listenOn(id_, &lfd));
    struct Pending {
      int fd;
      Hello hello;
      size_t got;
    };
    std::vector<Pending> pending;
    std::vector<std::string> refusals;
    int arrived = 1;
    Status result = Status::kOk;
    while (arrived < size_) {
      int waitMs = dl.remainingMs();
      if (waitMs <= 0) break;
      std::vector<pollfd> pfds{{lfd, POLLIN, 0}};
      for (const Pending& p : pending) pfds.push_back({p.fd, POLLIN, 0});
      int n = ::poll(pfds.data(), pfds.size(), waitMs);
      if (n < 0 && errno != EINTR) {
        result = TPCOMM_ERROR(kSystemError, "socket bootstrap rank 0: poll: %s", std::strerror(errno));
        break;
      }
      if (n <= 0) continue;
      if (pfds[0].revents & POLLIN) {
        int cfd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0) pending.push_back({cfd, Hello{}, 0});
      }
      for (size_t i = pending.size(); i-- > 0;) {
        if (!(pfds.size() > i + 1 && pfds[i + 1].fd == pending[i].fd && pfds[i + 1].revents)) continue;
        Pending& p = pending[i];
        ssize_t got = ::recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {  // a connection that closed before its Hello: not a rank of ours
          ::close(p.fd);
          pending.erase(pending.begin() + i);
          continue;
        }
        p.got += got;
        if (p.got < sizeof(Hello)) continue;
        std::string why = checkHello(p.hello);
        if (why.empty()) {
          fds_[p.hello.rank] = p.fd;
          ++arrived;
        } else {
          TPCOMM_WARN(kBoot, "socket bootstrap rank 0: refused a connection: %s", why.c_str());
          refusals.push_back(why);
          sendVerdict(p.fd, Status::kRemoteError, ("rank 0 refused the connection: " + why).c_str(), false);
          ::close(p.fd);
        }
        pending.erase(pending.begin() + i);
      }
    }
    for (const Pending& p : pending) ::close(p.fd);
    ::close(lfd);
    if (result == Status::kOk && arrived < size_) {
      std::vector<int> missing;
      for (int r = 1; r < size_; ++r)
        if (fds_[r] < 0) missing.push_back(r);
      std::string note;
      for (const std::string& r : refusals) note += "; refused: " + r;
      result = TPCOMM_ERROR(kTimeout,
                            "socket bootstrap rendezvous at %s: %s never arrived within %d ms (%s; %d of %d "
                            "arrived)%s",
                            id_.where, rankList(missing).c_str(), timeoutMs(), bootstrapTimeoutSource(explicitMs_),
                            arrived, size_, note.c_str());
    }
    std::string text = lastErrorMessage();
    for (int r = 1; r < size_; ++r) {
      if (fds_[r] < 0) continue;
      if (!sendVerdict(fds_[r], result, result == Status::kOk ? "" : text.c_str(), result == Status::kOk) &&
          result == Status::kOk)
        result =
            TPCOMM_ERROR(kRemoteError, "socket bootstrap rank 0: rank %d closed its connection during rendezvous", r);
    }
    if (result != Status::kOk) broken_ = lastErrorMessage();
    return result;
  }

  std::string checkHello(const Hello& h) const {
    char buf[160];
    if (h.magic != kWireMagic || h.version != kWireVersion)
      return "not a tpcomm socket bootstrap peer (bad magic/version)";
    if (!sameSecret(h.secret, id_.secret)) return "wrong secret (a process with another unique id)";
    if (h.size != size_) {
      std::snprintf(buf, sizeof(buf), "rank %d says there are %d ranks, rank 0 says %d", h.rank, h.size, size_);
      return buf;
    }
    if (h.rank <= 0 || h.rank >= size_) {
      std::snprintf(buf, sizeof(buf), "rank %d out of range [1, %d)", h.rank, size_);
      return buf;
    }
    if (fds_[h.rank] >= 0) {
      std::snprintf(buf, sizeof(buf), "rank %d arrived twice", h.rank);
      return buf;
    }
    return "";
  }

  bool sendVerdict(int fd, Status s, const char* text, bool withSecret) {
    Verdict v{};
    v.magic = kWireMagic;
    v.status = static_cast<int32_t>(s);
    if (withSecret) std::memcpy(v.secret, id_.secret, kSecretBytes);
    copyText(v.text, sizeof(v.text), text);
    Deadline dl(std::min(timeoutMs(), 2000));
    return sendAll(fd, &v, sizeof(v), dl, "verdict", -1) == Status::kOk;
  }

  Status clientRendezvous() {
    Deadline dl = deadline();
    int fd = -1;
    TPCOMM_TRY(connectTo(id_, dl, rank_, &fd));
    fds_[0] = fd;
    Hello h{};
    h.magic = kWireMagic;
    h.version = kWireVersion;
    h.rank = rank_;
    h.size = size_;
    std::memcpy(h.secret, id_.secret, kSecretBytes);
    Status s = sendAll(fd, &h, sizeof(h), dl, "hello", 0);
    Verdict v{};
    // Rank 0 started listening no later than we connected: its own deadline falls within ours
    // (plus a grace), so its verdict, naming any rank that did not arrive, reaches us first.
    if (s == Status::kOk) s = recvAll(fd, &v, sizeof(v), deadline(kClientGraceMs), "rank 0's verdict", 0);
    if (s == Status::kTimeout)
      s = TPCOMM_ERROR(kTimeout,
                       "socket bootstrap rendezvous: rank 0 (the root, at %s) gave no verdict within %d ms (%s + %d "
                       "ms grace; rank %d waited): it exited or hung after accepting this rank",
                       id_.where, timeoutMs() + kClientGraceMs, bootstrapTimeoutSource(explicitMs_), kClientGraceMs,
                       rank_);
    if (s == Status::kOk && v.magic != kWireMagic)
      s = TPCOMM_ERROR(kRemoteError, "socket bootstrap rank %d: %s is not a tpcomm rank 0", rank_, id_.where);
    if (s == Status::kOk && v.status != 0) {
      v.text[sizeof(v.text) - 1] = '\0';
      Status remote = static_cast<Status>(v.status);
      if (remote != Status::kTimeout) remote = Status::kRemoteError;
      s = setError(remote, __FILE__, __LINE__, "socket bootstrap rank %d: rank 0 at %s reports: %s", rank_, id_.where,
                   v.text);
    }
    if (s == Status::kOk && !sameSecret(v.secret, id_.secret))
      s = TPCOMM_ERROR(kRemoteError,
                       "socket bootstrap rank %d: %s did not present the id's secret (not this job's rank 0)", rank_,
                       id_.where);
    if (s != Status::kOk) broken_ = lastErrorMessage();
    return s;
  }

  // --- exchanges ----------------------------------------------------------------------------
  Status rootExchange(const void* mine, void* all, size_t bytes) {
    char* table = static_cast<char*>(all);
    if (bytes) std::memmove(table, mine, bytes);
    Deadline dl = deadline();
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
    ReplyHeader rh{};
    Status s = recvAll(fd, &rh, sizeof(rh), deadline(kClientGraceMs), "rank 0's reply", 0);
    if (s == Status::kTimeout)  // rank 0 answers by its own deadline, naming any rank missing: it is the one
      return TPCOMM_ERROR(kTimeout,
                          "socket bootstrap exchange %u: rank 0 (the root, at %s) never answered within %d ms (%s + "
                          "%d ms grace; rank %d waited): it exited, hung, or never made this exchange",
                          seq_, id_.where, timeoutMs() + kClientGraceMs, bootstrapTimeoutSource(explicitMs_),
                          kClientGraceMs, rank_);
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
    return recvAll(fd, all, bytes * size_, dl.remainingMs() > 0 ? dl : deadline(), "exchange table", 0);
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
  if (size < 1) return TPCOMM_INVALID("makeSocketBootstrap: size %d: expected >= 1", size);
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
