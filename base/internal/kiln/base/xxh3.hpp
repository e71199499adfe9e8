#pragma once
// Internal to libkiln (base/ and cache/): XXH3-128, one-shot and in pieces, computed with AVX-512 or AVX2 when the CPU has
// it (AVX2: about 2.5x faster than baseline on large binaries). XXH3 is defined independently of the
// vector unit, so results are identical either way; the dispatch is chosen once per process.
#include <cstddef>
#include <cstdint>

#include "kiln/base/hash.hpp"

namespace kiln::cache::detail {

/// XXH3-128 of `size` bytes with a seed. Never throws.
[[nodiscard]] Hash128 xxh3_128(const void* data, std::size_t size, std::uint64_t seed) noexcept;

/// XXH3-64 of `size` bytes (seed 0): a fast hash for in-memory tables (paths), not a key or a checksum.
[[nodiscard]] std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept;

/// XXH3-128 of data given in pieces (the entry checksum while an entry is read).
class Xxh3Stream {
 public:
  explicit Xxh3Stream(std::uint64_t seed) noexcept;
  void update(const void* data, std::size_t size) noexcept;
  [[nodiscard]] Hash128 digest() const noexcept;

  /// sizeof(XXH3_state_t) for xxHash 0.8 (checked by a static_assert in xxh3.cpp).
  static constexpr std::size_t kStateBytes = 576;

 private:
  alignas(64) unsigned char m_state[kStateBytes];
};

// The implementations behind the dispatch (xxh3.cpp: baseline; xxh3_avx2.cpp, xxh3_avx512.cpp). `state`
// points at an XXH3_state_t. Call the vector ones only where the CPU has the unit.
void xxh3_update_baseline(void* state, const void* data, std::size_t size) noexcept;
void xxh3_update_avx2(void* state, const void* data, std::size_t size) noexcept;
void xxh3_update_avx512(void* state, const void* data, std::size_t size) noexcept;
Hash128 xxh3_128_baseline(const void* data, std::size_t size, std::uint64_t seed) noexcept;
Hash128 xxh3_128_avx2(const void* data, std::size_t size, std::uint64_t seed) noexcept;
Hash128 xxh3_128_avx512(const void* data, std::size_t size, std::uint64_t seed) noexcept;
/// Whether the dispatch uses AVX-512 on this CPU (tests compare it with the baseline only then).
[[nodiscard]] bool xxh3_cpu_has_avx512() noexcept;

}  // namespace kiln::cache::detail
