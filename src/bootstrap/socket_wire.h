// The socket bootstrap's messages (wire version 2) and the proofs that authenticate its
// rendezvous. Neither side ever sends the unique id's secret: rank 0 opens every connection with
// a fresh random challenge; rank r answers with a nonce of its own and HMAC-SHA256(secret,
// "hello" | challenge | its nonce | rank | size); rank 0's verdict carries HMAC-SHA256(secret,
// "verdict" | challenge | rank r's nonce | rank | status). A process that squats the port learns
// neither the secret nor a proof it could replay (both nonces are fresh per connection), and a
// rank accepts only a verdict whose proof checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/hmac_sha256.h"
#include "bootstrap/socket_io.h"

namespace tpcomm {

constexpr uint32_t kWireMagic = 0x54504357u;  // "TPCW"
constexpr uint32_t kWireVersion = 2;
constexpr int kNonceBytes = 32;

struct Challenge {  // rank 0 -> every new connection, at once
  uint32_t magic, version;
  uint8_t nonce[kNonceBytes];
};
struct Hello {  // rank r -> rank 0, answering the challenge
  uint32_t magic, version;
  int32_t rank, size;
  uint8_t nonce[kNonceBytes];
  uint8_t proof[kSha256Bytes];
};
struct Verdict {  // rank 0 -> rank r once all ranks arrived (status 0), or a refusal / failure
  uint32_t magic;
  int32_t status;
  uint8_t proof[kSha256Bytes];  // zeros on a refusal: rank 0 cannot prove anything to a stranger
  char text[256];
};
struct MsgHeader {  // rank r -> rank 0, then `bytes` of data
  uint32_t magic, seq;
  uint64_t bytes;
};
struct Entered {  // rank 0 -> every rank as it enters exchange `seq`: bounds the ranks' wait for its reply
  uint32_t magic, seq;
};
struct ReplyHeader {  // rank 0 -> rank r, then size * bytes of data when status is 0
  uint32_t magic;
  int32_t status;
  uint32_t seq, pad;
  uint64_t bytes;
  char text[256];
};

/// rank r's proof that it holds the secret (Hello::proof).
void helloProof(const uint8_t* secret, const uint8_t* challenge, const uint8_t* nonce, int32_t rank, int32_t size,
                uint8_t out[kSha256Bytes]);
/// rank 0's proof, bound to rank r's fresh nonce and to the status it reports (Verdict::proof).
void verdictProof(const uint8_t* secret, const uint8_t* challenge, const uint8_t* nonce, int32_t rank, int32_t status,
                  uint8_t out[kSha256Bytes]);

/// "rank 2" / "ranks 1, 3".
std::string rankList(const std::vector<int>& ranks);

/// Rank 0's side of the rendezvous: listens on the id's port until ranks 1..size-1 have proved
/// themselves, or the deadline; at most max(16, 2 * size) connections wait for their hello at
/// once (the oldest is dropped for a new one), and when accept fails for want of descriptors it
/// backs off instead of spinning. *fds gets each rank's connection (fds[0] stays -1).
Status socketRootRendezvous(const DecodedId& id, int size, int timeoutMs, const char* source, std::vector<int>* fds);
/// Rank r's side: connects, answers the challenge, waits for rank 0's verdict and checks its proof.
Status socketClientRendezvous(const DecodedId& id, int rank, int size, int timeoutMs, const char* source, int* fd);

}  // namespace tpcomm
