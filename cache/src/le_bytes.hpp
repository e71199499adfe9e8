#pragma once
// Private to cache/: the little-endian fields of kiln's file formats (entries, dependency manifests,
// packs), read and written byte by byte (no alignment or host byte order assumed).
#include <cstddef>
#include <cstdint>

#include "kiln/base/hash.hpp"

namespace kiln::cache::detail {

inline std::uint64_t load_le(const std::byte* p, std::size_t width) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return value;
}
inline std::uint32_t load_u32(const std::byte* p) noexcept { return static_cast<std::uint32_t>(load_le(p, 4)); }
inline std::uint64_t load_u64(const std::byte* p) noexcept { return load_le(p, 8); }
/// A Hash128 stored as high then low.
inline Hash128 load_hash(const std::byte* p) noexcept { return Hash128{load_u64(p), load_u64(p + 8)}; }

inline void store_le(std::byte* p, std::uint64_t value, std::size_t width) noexcept {
  for (std::size_t i = 0; i < width; ++i) p[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}
inline void store_u32(std::byte* p, std::uint32_t value) noexcept { store_le(p, value, 4); }
inline void store_u64(std::byte* p, std::uint64_t value) noexcept { store_le(p, value, 8); }
inline void store_hash(std::byte* p, const Hash128& h) noexcept {
  store_le(p, h.high, 8);
  store_le(p + 8, h.low, 8);
}

}  // namespace kiln::cache::detail
