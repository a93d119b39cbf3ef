// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and dependency-free, for the socket
// bootstrap's challenge and response (socket_bootstrap.cc): a rank proves it holds the unique
// id's secret without sending it. Checked against the FIPS and RFC 4231 test vectors
// (tests/unit/hmac_sha256_test.cc). Not constant-time with respect to the message length.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpcomm {

constexpr size_t kSha256Bytes = 32;

/// Incremental SHA-256: update() any number of times, then finish().
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void finish(uint8_t out[kSha256Bytes]);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

/// SHA-256 of `n` bytes at `data`.
void sha256(const void* data, size_t n, uint8_t out[kSha256Bytes]);

/// HMAC-SHA256 of the concatenation of `parts` (count of them, each pointer + length) under `key`.
struct ByteSpan {
  const void* data;
  size_t size;
};
void hmacSha256(const uint8_t* key, size_t keyLen, const ByteSpan* parts, size_t count, uint8_t out[kSha256Bytes]);

/// Compares two byte strings of length n in time that depends only on n.
bool equalInConstantTime(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace tpcomm
