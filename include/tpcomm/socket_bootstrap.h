// Bootstrap over TCP sockets: needs neither MPI nor a torch process group. One process makes a
// unique id (an address, a port and a random secret) and hands it to every rank by any means (a
// file, an environment variable, torch's broadcast_object_list); each rank then calls
// makeSocketBootstrap() with it. Rank 0 listens on the id's port; the others connect to it (a
// star: every exchange goes through rank 0, which suits the few small set-up exchanges a
// Bootstrap carries).
//
// Every wait is bounded by the timeout (TPCOMM_TIMEOUT_MS by default): a rank that never
// arrives gives kTimeout on the ranks that did, naming the missing rank(s). Every connection
// must prove it holds the id's secret (challenge and response with HMAC-SHA256 over fresh nonces
// from both sides; the secret itself never goes over the wire) or rank 0 refuses it, and rank 0
// proves the same to every rank: a stray or misrouted process cannot join, and a process that
// squats the port learns nothing. The secret keeps strangers out; it is not encryption.
//
// The address: TPCOMM_SOCKET_IFNAME picks the interface as NCCL_SOCKET_IFNAME does ("eth0":
// names starting with eth0; "=eth0": exactly eth0; "^docker,lo": any but those), and
// TPCOMM_SOCKET_FAMILY ("AF_INET" or "AF_INET6") the address family. Unset, the first interface
// that is up and not loopback or docker is used, and loopback when there is no other.
#pragma once

#include <cstdint>
#include <memory>

#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// An opaque 128-byte rendezvous id (what ncclUniqueId is to NCCL). Plain bytes: copy it,
/// write it to a file, send it to the other ranks.
struct SocketUniqueId {
  unsigned char bytes[128];
};

/// Makes a new unique id: the address of this host's chosen interface (see the file comment), a
/// port free on it now, and a random secret. The process whose rank 0 later uses the id must
/// run on this host. kSystemError (with the OS's text) when no interface or port can be had.
Status makeSocketUniqueId(SocketUniqueId* out);

/// Makes the same kind of id for an explicit numeric address ("127.0.0.1", "::1", "10.0.0.5"),
/// e.g. loopback for single-host jobs and tests. kInvalidArgument names a malformed address.
Status makeSocketUniqueIdForAddress(const char* address, SocketUniqueId* out);

/// Writes "address:port" of an id into `buf` (for messages); false for a malformed id.
bool socketUniqueIdAddress(const SocketUniqueId& id, char* buf, size_t bufSize);

/// Joins the rendezvous of `id` as rank `rank` of `size` ranks, size in 1..65536 (collective: every rank calls it,
/// each with the same id and size). Returns once all `size` ranks have arrived, or kTimeout
/// after `timeoutMs` (0: TPCOMM_TIMEOUT_MS) naming the ranks that did not; kInvalidArgument for
/// a malformed id, a rank outside [0, size) or a size or rank another rank contradicts;
/// kRemoteError when rank 0 refused this rank (wrong secret, rank taken) or reported a failure.
Status makeSocketBootstrap(const SocketUniqueId& id, int rank, int size, int timeoutMs,
                           std::unique_ptr<Bootstrap>* out);

/// Makes every later exchange of a socket bootstrap fail at once with kRemoteError and closes
/// its connections, so a teardown (abort) never waits for peers; the peers see the connection
/// close and fail at once too. No-op for other bootstraps.
void abandonSocketBootstrap(Bootstrap* bootstrap);

}  // namespace tpcomm
