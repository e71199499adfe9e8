#include "kiln/base/hash.hpp"

#include "kiln/base/hot_path.hpp"
#include "kiln/base/xxh3.hpp"

namespace kiln::cache {

std::string Hash128::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(32, '0');
  for (int i = 0; i < 16; ++i) {
    text[static_cast<std::size_t>(15 - i)] = kDigits[(high >> (4 * i)) & 0xF];
    text[static_cast<std::size_t>(31 - i)] = kDigits[(low >> (4 * i)) & 0xF];
  }
  return text;
}

std::optional<Hash128> Hash128::from_hex(std::string_view text) noexcept {
  if (text.size() != 32) return std::nullopt;
  Hash128 result;
  for (std::size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    std::uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint64_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    std::uint64_t& half = i < 16 ? result.high : result.low;
    half = (half << 4) | digit;
  }
  return result;
}

KILN_HOT Hash128 hash128(std::span<const std::byte> bytes, std::uint64_t seed) noexcept {
  return detail::xxh3_128(bytes.data(), bytes.size(), seed);
}

KILN_HOT Hash128 hash128(std::string_view bytes, std::uint64_t seed) noexcept {
  return detail::xxh3_128(bytes.data(), bytes.size(), seed);
}

}  // namespace kiln::cache
