// SHA-256 and HMAC-SHA-256 (base/internal/kiln/base/sha256.hpp) against the published vectors: the
// FIPS 180-4 examples (NIST's "abc", two-block and one-million-'a' messages) and RFC 4231's seven
// HMAC-SHA-256 test cases; data given in pieces hashes as it does in one; the MAC comparison.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/sha256.hpp"

using kiln::detail::constant_time_equal;
using kiln::detail::hmac_sha256;
using kiln::detail::HmacSha256;
using kiln::detail::sha256;
using kiln::detail::Sha256;
using kiln::detail::to_hex;

namespace {

std::string repeat(char c, std::size_t n) { return std::string(n, c); }

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (const int v : values) out.push_back(static_cast<char>(v));
  return out;
}

}  // namespace

TEST_CASE("SHA-256 matches the FIPS 180-4 examples", "[sha256]") {
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(to_hex(sha256(repeat('a', 1000000))) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // 112 bytes: the length no longer fits the first padded block.
  CHECK(to_hex(
            sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmno"
                   "pqrstnopqrstu")) == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST_CASE("SHA-256 of data in pieces equals the one-shot digest", "[sha256]") {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  for (const std::size_t piece : {1, 3, 55, 56, 63, 64, 65, 127, 999}) {
    INFO("piece " << piece);
    Sha256 hash;
    for (std::size_t at = 0; at < data.size(); at += piece) hash.update(std::string_view(data).substr(at, piece));
    CHECK(hash.finish() == sha256(data));
    // finish() resets: the object hashes a new message.
    hash.update("abc");
    CHECK(to_hex(hash.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
  // The one-million 'a' message fed in uneven pieces crosses every block boundary offset.
  Sha256 million;
  const std::string chunk = repeat('a', 997);
  std::size_t left = 1000000;
  while (left > 0) {
    const std::size_t n = std::min(left, chunk.size());
    million.update(chunk.data(), n);
    left -= n;
  }
  CHECK(to_hex(million.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("HMAC-SHA-256 matches RFC 4231 test cases 1-7", "[sha256][hmac]") {
  SECTION("1") {
    CHECK(to_hex(hmac_sha256(repeat('\x0b', 20), "Hi There")) ==
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  }
  SECTION("2: a key shorter than the output") {
    CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  }
  SECTION("3") {
    CHECK(to_hex(hmac_sha256(repeat('\xaa', 20), repeat('\xdd', 50))) ==
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  }
  SECTION("4") {
    const std::string key = bytes({0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
                                   0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19});
    CHECK(to_hex(hmac_sha256(key, repeat('\xcd', 50))) ==
          "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  }
  SECTION("5: output truncated to 128 bits") {
    CHECK(to_hex(hmac_sha256(repeat('\x0c', 20), "Test With Truncation")).substr(0, 32) ==
          "a3b6167473100ee06e0c796c2955552b");
  }
  SECTION("6: a key larger than a block is hashed first") {
    CHECK(to_hex(hmac_sha256(repeat('\xaa', 131), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  }
  SECTION("7: a large key and data larger than a block") {
    CHECK(to_hex(hmac_sha256(repeat('\xaa', 131),
                             "This is a test using a larger than block-size key and a larger than block-size data. "
                             "The key needs to be hashed before being used by the HMAC algorithm.")) ==
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  }
}

TEST_CASE("HMAC-SHA-256 in pieces, and reused for a second message", "[sha256][hmac]") {
  HmacSha256 mac(std::string_view("Jefe"));
  mac.update("what do ya ");
  mac.update("want for nothing?");
  CHECK(to_hex(mac.finish()) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  mac.update("what do ya want for nothing?");  // the same key, a fresh message
  CHECK(to_hex(mac.finish()) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key of exactly one block is used as it is; one byte more is hashed: different MACs.
  CHECK(hmac_sha256(repeat('k', 64), "m") != hmac_sha256(repeat('k', 65), "m"));
}

TEST_CASE("constant_time_equal compares bytes and sizes", "[sha256]") {
  const std::string mac = to_hex(sha256("abc"));
  CHECK(constant_time_equal(mac, mac));
  CHECK(constant_time_equal("", ""));
  std::string last = mac;
  last.back() = last.back() == '0' ? '1' : '0';
  CHECK_FALSE(constant_time_equal(mac, last));
  std::string first = mac;
  first.front() = first.front() == '0' ? '1' : '0';
  CHECK_FALSE(constant_time_equal(mac, first));
  CHECK_FALSE(constant_time_equal(mac, mac.substr(0, 63)));
  CHECK_FALSE(constant_time_equal(mac, ""));
  const std::vector<char> high = {'\x80', '\xff'};
  CHECK(constant_time_equal(std::string_view(high.data(), 2), std::string_view(high.data(), 2)));
}
