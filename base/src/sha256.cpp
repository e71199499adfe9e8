// SHA-256 (FIPS 180-4, section 6.2) and HMAC-SHA-256 (RFC 2104) (sha256.hpp).
#include "kiln/base/sha256.hpp"

#include <algorithm>
#include <cstring>

namespace kiln::detail {

namespace {

// The first 32 bits of the fractional parts of the cube roots of the first 64 primes (FIPS 180-4 4.2.2).
constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// The first 32 bits of the fractional parts of the square roots of the first 8 primes (FIPS 180-4 5.3.3).
constexpr std::array<std::uint32_t, 8> kInitial = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr std::uint8_t kInnerPad = 0x36;
constexpr std::uint8_t kOuterPad = 0x5c;

constexpr std::uint32_t rotr(std::uint32_t x, int n) noexcept { return (x >> n) | (x << (32 - n)); }

std::uint32_t load_be32(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

void store_be32(std::uint8_t* p, std::uint32_t value) noexcept {
  p[0] = static_cast<std::uint8_t>(value >> 24);
  p[1] = static_cast<std::uint8_t>(value >> 16);
  p[2] = static_cast<std::uint8_t>(value >> 8);
  p[3] = static_cast<std::uint8_t>(value);
}

/// Overwrites secret bytes in a way the compiler may not drop as a dead store.
void wipe(void* data, std::size_t size) noexcept {
  auto* volatile bytes = static_cast<volatile std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = 0;
}

}  // namespace

// ---- SHA-256 ---------------------------------------------------------------------------------------

void Sha256::reset() noexcept {
  m_state = kInitial;
  m_buffered = 0;
  m_total_bytes = 0;
}

void Sha256::compress(const std::uint8_t* block) noexcept {
  std::array<std::uint32_t, 64> w;  // the message schedule (FIPS 180-4 6.2.2 step 1)
  for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = m_state[0], b = m_state[1], c = m_state[2], d = m_state[3];
  std::uint32_t e = m_state[4], f = m_state[5], g = m_state[6], h = m_state[7];
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + sum1 + choose + kRound[t] + w[t];
    const std::uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  m_state[0] += a;
  m_state[1] += b;
  m_state[2] += c;
  m_state[3] += d;
  m_state[4] += e;
  m_state[5] += f;
  m_state[6] += g;
  m_state[7] += h;
}

void Sha256::update(const void* data, std::size_t size) noexcept {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  m_total_bytes += size;
  if (m_buffered > 0) {
    const std::size_t take = std::min(size, kBlockBytes - m_buffered);
    std::memcpy(m_buffer.data() + m_buffered, bytes, take);
    m_buffered += take;
    bytes += take;
    size -= take;
    if (m_buffered < kBlockBytes) return;
    compress(m_buffer.data());
    m_buffered = 0;
  }
  for (; size >= kBlockBytes; bytes += kBlockBytes, size -= kBlockBytes) compress(bytes);
  if (size > 0) {
    std::memcpy(m_buffer.data(), bytes, size);
    m_buffered = size;
  }
}

Sha256Digest Sha256::finish() noexcept {
  // Padding (FIPS 180-4 5.1.1): a 1 bit, zeros up to 56 bytes into a block, the length in bits (64 bits).
  const std::uint64_t total_bits = m_total_bytes * 8;
  m_buffer[m_buffered++] = 0x80;
  if (m_buffered > kBlockBytes - 8) {
    std::memset(m_buffer.data() + m_buffered, 0, kBlockBytes - m_buffered);
    compress(m_buffer.data());
    m_buffered = 0;
  }
  std::memset(m_buffer.data() + m_buffered, 0, kBlockBytes - 8 - m_buffered);
  store_be32(m_buffer.data() + 56, static_cast<std::uint32_t>(total_bits >> 32));
  store_be32(m_buffer.data() + 60, static_cast<std::uint32_t>(total_bits));
  compress(m_buffer.data());
  Sha256Digest digest;
  for (std::size_t i = 0; i < m_state.size(); ++i) store_be32(digest.data() + 4 * i, m_state[i]);
  wipe(m_buffer.data(), m_buffer.size());  // it may have held key material (HMAC's padded key)
  reset();
  return digest;
}

// ---- HMAC-SHA-256 ------------------------------------------------------------------------------------

HmacSha256::HmacSha256(std::span<const std::uint8_t> key) noexcept {
  // RFC 2104 section 2: a key longer than a block is replaced by its hash; the key is then padded
  // with zeros to a block.
  if (key.size() > m_key_block.size()) {
    Sha256 hash;
    hash.update(key.data(), key.size());
    const Sha256Digest digest = hash.finish();
    std::memcpy(m_key_block.data(), digest.data(), digest.size());
  } else if (!key.empty()) {
    std::memcpy(m_key_block.data(), key.data(), key.size());
  }
  start();
}

HmacSha256::~HmacSha256() { wipe(m_key_block.data(), m_key_block.size()); }

void HmacSha256::start() noexcept {
  std::array<std::uint8_t, Sha256::kBlockBytes> pad;
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = static_cast<std::uint8_t>(m_key_block[i] ^ kInnerPad);
  m_inner.reset();
  m_inner.update(pad.data(), pad.size());
  wipe(pad.data(), pad.size());
}

Sha256Digest HmacSha256::finish() noexcept {
  // H((K ^ opad) || H((K ^ ipad) || message))
  const Sha256Digest inner = m_inner.finish();
  std::array<std::uint8_t, Sha256::kBlockBytes> pad;
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = static_cast<std::uint8_t>(m_key_block[i] ^ kOuterPad);
  Sha256 outer;
  outer.update(pad.data(), pad.size());
  outer.update(inner.data(), inner.size());
  wipe(pad.data(), pad.size());
  start();
  return outer.finish();
}

Sha256Digest sha256(std::string_view data) noexcept {
  Sha256 hash;
  hash.update(data);
  return hash.finish();
}

Sha256Digest hmac_sha256(std::string_view key, std::string_view data) noexcept {
  HmacSha256 mac(key);
  mac.update(data);
  return mac.finish();
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(digest.size() * 2, '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    text[2 * i] = kDigits[digest[i] >> 4];
    text[2 * i + 1] = kDigits[digest[i] & 0x0F];
  }
  return text;
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;  // sizes are public: a MAC has one length
  // Every byte is looked at, whatever differs; the differences are OR-ed, never branched on.
  volatile std::uint8_t difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference =
        static_cast<std::uint8_t>(difference | (static_cast<std::uint8_t>(a[i]) ^ static_cast<std::uint8_t>(b[i])));
  }
  return difference == 0;
}

}  // namespace kiln::detail
