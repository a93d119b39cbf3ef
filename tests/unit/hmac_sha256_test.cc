// SHA-256 and HMAC-SHA256 (src/bootstrap/hmac_sha256.h, the socket bootstrap's challenge and
// response) against the FIPS 180-2 examples and the RFC 4231 test cases.
#include "bootstrap/hmac_sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace tpcomm {
namespace {

std::string hex(const uint8_t* d, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%02x", d[i]);
    s += b;
  }
  return s;
}

std::string sha(const std::string& m) {
  uint8_t out[kSha256Bytes];
  sha256(m.data(), m.size(), out);
  return hex(out, sizeof(out));
}

std::string hmac(const std::string& key, const std::string& m) {
  uint8_t out[kSha256Bytes];
  const ByteSpan part{m.data(), m.size()};
  hmacSha256(reinterpret_cast<const uint8_t*>(key.data()), key.size(), &part, 1, out);
  return hex(out, sizeof(out));
}

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Fed in pieces of every size: the same digest.
  const std::string m(300, 'x');
  for (size_t piece : {1, 7, 63, 64, 65}) {
    Sha256 s;
    for (size_t at = 0; at < m.size(); at += piece) s.update(m.data() + at, std::min(piece, m.size() - at));
    uint8_t out[kSha256Bytes];
    s.finish(out);
    EXPECT_EQ(hex(out, sizeof(out)), sha(m)) << "pieces of " << piece;
  }
}

TEST(HmacSha256, Rfc4231) {
  EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, ConstantTimeCompare) {
  const uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_TRUE(equalInConstantTime(a, a, 4));
  EXPECT_FALSE(equalInConstantTime(a, b, 4));
  EXPECT_TRUE(equalInConstantTime(a, b, 3));
}

}  // namespace
}  // namespace tpcomm
