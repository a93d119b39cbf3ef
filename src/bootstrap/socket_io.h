// Socket plumbing of the socket bootstrap (socket_bootstrap.cc): the unique id's layout, the
// choice of address (TPCOMM_SOCKET_IFNAME / TPCOMM_SOCKET_FAMILY, as NCCL's variables), and
// bounded non-blocking I/O: every wait is a poll() against a deadline, sends use MSG_NOSIGNAL (a
// dead peer never raises SIGPIPE).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tpcomm/socket_bootstrap.h"
#include "tpcomm/status.h"

namespace tpcomm {

constexpr int kSecretBytes = 32;

/// A unique id's fields. Layout of SocketUniqueId::bytes: magic (4) | version (1) | family (1: 4
/// or 6) | port (2, network order) | address (16) | IPv6 scope id (4) | unused (4) | secret (32)
/// | zeros.
struct DecodedId {
  sockaddr_storage addr{};
  socklen_t addrLen = 0;
  uint8_t secret[kSecretBytes]{};
  char where[INET6_ADDRSTRLEN + 16]{};  // "address:port", for messages
};
bool decodeId(const SocketUniqueId& id, DecodedId* d);
/// A new id for `addr`: a port free there now and a random secret.
Status makeIdFor(const sockaddr_storage& addr, SocketUniqueId* out);
Status parseNumericAddress(const char* text, sockaddr_storage* out);
/// The address TPCOMM_SOCKET_IFNAME / TPCOMM_SOCKET_FAMILY choose (see socket_bootstrap.h).
Status chooseInterfaceAddress(sockaddr_storage* out);
/// `n` random bytes (getrandom).
Status randomBytes(void* out, size_t n);

/// A point in time `ms` from now; remainingMs() is what poll() takes.
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

/// Sends or receives all `n` bytes on a non-blocking socket by the deadline. kTimeout names
/// `what` and the peer (`peer` < 0: "a peer"); kRemoteError when the peer closed or failed.
Status sendAll(int fd, const void* data, size_t n, const Deadline& dl, const char* what, int peer);
Status recvAll(int fd, void* data, size_t n, const Deadline& dl, const char* what, int peer);
/// Rank 0: a non-blocking listening socket on the id's address and port.
Status listenOn(const DecodedId& id, int* out);
/// Rank r > 0: connects to rank 0, retrying (backing off from 5 to 50 ms) while it is not up,
/// until the deadline; kTimeout names rank 0 and the bound (`boundMs` from `source`).
Status connectTo(const DecodedId& id, const Deadline& dl, int rank, int boundMs, const char* source, int* out);

}  // namespace tpcomm
