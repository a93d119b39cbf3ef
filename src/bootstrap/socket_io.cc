// socket_io.cc: see socket_io.h.
#include "bootstrap/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/params.h"

namespace tpcomm {
namespace {

// --- the unique id --------------------------------------------------------------------------
constexpr uint32_t kIdMagic = 0x42435054u;  // "TPCB"
constexpr uint8_t kIdVersion = 1;

}  // namespace

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

static socklen_t addrLength(const sockaddr_storage& a) {
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
  return randomBytes(out->bytes + 32, kSecretBytes);
}

Status randomBytes(void* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::getrandom(static_cast<char*>(out) + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return TPCOMM_ERROR(kSystemError, "socket bootstrap: getrandom: %s", std::strerror(errno));
    got += static_cast<size_t>(k);
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
static bool ifnameMatches(const std::string& spec, const char* name) {
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
static std::string peerName(int peer) { return peer >= 0 ? "rank " + std::to_string(peer) : std::string("a peer"); }

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
Status connectTo(const DecodedId& id, const Deadline& dl, int rank, int boundMs, const char* source, int* out) {
  std::string lastWhy = "connection refused";
  int retryMs = 5;
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
    // Back off, 5 ms doubling to 50 ms: quick when rank 0 comes up just after, no spin otherwise.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(retryMs, dl.remainingMs())));
    retryMs = std::min(2 * retryMs, 50);
  }
  return TPCOMM_ERROR(kTimeout,
                      "socket bootstrap rendezvous: rank 0 (the root, at %s) never arrived within %d ms (%s; rank %d "
                      "waited), or gave up before this rank came (last: %s)",
                      id.where, boundMs, source, rank, lastWhy.c_str());
}

}  // namespace tpcomm
