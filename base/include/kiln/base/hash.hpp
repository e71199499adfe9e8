#pragma once
// 128-bit content hashes (XXH3-128) and their canonical text form.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kiln::cache {

/// A 128-bit hash. Its canonical text form is 32 lower-case hex digits, high half first.
struct Hash128 {
  std::uint64_t high = 0;
  std::uint64_t low = 0;

  friend bool operator==(const Hash128&, const Hash128&) = default;
  /// 32 hex digits, high half first (the form used in file names and printed by the CLI).
  [[nodiscard]] std::string hex() const;
  /// Parses exactly 32 hex digits (either case); nullopt otherwise. Never throws.
  static std::optional<Hash128> from_hex(std::string_view text) noexcept;
};

/// Seeds. The key and the entry checksum use different seeds, so a checksum can never be
/// mistaken for a key (docs/design.md §7).
inline constexpr std::uint64_t kKeySeed = 0;
inline constexpr std::uint64_t kChecksumSeed = 0x6b696c6e2d636b73ULL;  // "kiln-cks"

/// XXH3-128 of bytes with a seed. Never throws.
[[nodiscard]] Hash128 hash128(std::span<const std::byte> bytes, std::uint64_t seed = kKeySeed) noexcept;
[[nodiscard]] Hash128 hash128(std::string_view bytes, std::uint64_t seed = kKeySeed) noexcept;

/// A cheap hash for hash maps that already hold a Hash128.
struct Hash128Hasher {
  std::size_t operator()(const Hash128& h) const noexcept {
    return static_cast<std::size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ULL));
  }
};

}  // namespace kiln::cache
