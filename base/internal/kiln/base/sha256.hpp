#pragma once
// Internal to libkiln: SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for authenticating what
// other machines hand us (the remote tier's entry MACs). XXH3, kiln's content hash, is fast but
// unkeyed: anyone can compute it, so it detects damage but not forgery. A keyed MAC under a secret only
// the fleet holds does. A portable implementation: the inputs are kernel binaries of a few hundred KB
// read from the network, so hashing them costs little next to the round trip.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::detail {

using Sha256Digest = std::array<std::uint8_t, 32>;

/// SHA-256 of data given in pieces. Never throws.
class Sha256 {
 public:
  Sha256() noexcept { reset(); }
  void reset() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  void update(std::string_view text) noexcept { update(text.data(), text.size()); }
  /// The digest of everything given since the last reset(); then resets.
  [[nodiscard]] Sha256Digest finish() noexcept;

  static constexpr std::size_t kBlockBytes = 64;

 private:
  void compress(const std::uint8_t* block) noexcept;

  std::array<std::uint32_t, 8> m_state{};
  std::array<std::uint8_t, kBlockBytes> m_buffer{};
  std::size_t m_buffered = 0;
  std::uint64_t m_total_bytes = 0;
};

/// HMAC-SHA-256 under one key, of data given in pieces. Never throws.
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const std::uint8_t> key) noexcept;
  explicit HmacSha256(std::string_view key) noexcept
      : HmacSha256(std::span(reinterpret_cast<const std::uint8_t*>(key.data()), key.size())) {}
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;

  void update(const void* data, std::size_t size) noexcept { m_inner.update(data, size); }
  void update(std::string_view text) noexcept { m_inner.update(text); }
  /// The MAC of everything given since construction or the last finish(); then starts a new message
  /// under the same key.
  [[nodiscard]] Sha256Digest finish() noexcept;

 private:
  void start() noexcept;

  std::array<std::uint8_t, Sha256::kBlockBytes> m_key_block{};  ///< the key, hashed when longer than a block
  Sha256 m_inner;
};

[[nodiscard]] Sha256Digest sha256(std::string_view data) noexcept;
[[nodiscard]] Sha256Digest hmac_sha256(std::string_view key, std::string_view data) noexcept;

/// Lower-case hex of a digest (64 characters).
[[nodiscard]] std::string to_hex(const Sha256Digest& digest);

/// Whether `a` and `b` hold the same bytes, in a time that depends on their sizes only (never on
/// where they first differ), so comparing a MAC an attacker sent with the right one tells the
/// attacker nothing about the right one. Never throws.
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace kiln::detail
