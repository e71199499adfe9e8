#include "kiln/base/xxh3.hpp"
#include "kiln/base/hot_path.hpp"

#include <xxhash.h>

namespace kiln::cache::detail {
namespace {

static_assert(sizeof(XXH3_state_t) == Xxh3Stream::kStateBytes, "update Xxh3Stream::kStateBytes for this xxHash");
static_assert(alignof(XXH3_state_t) <= 64);

/// The widest vector unit the CPU has, decided once; safe to call during static initialization.
enum class Unit { baseline, avx2, avx512 };
KILN_HOT Unit unit() noexcept {
  static const Unit u = [] {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx2") != 0) return Unit::avx512;
    if (__builtin_cpu_supports("avx2") != 0) return Unit::avx2;
#endif
    return Unit::baseline;
  }();
  return u;
}

/// Decided when the library loads (as an ifunc resolver would), so no request pays the CPU query.
[[maybe_unused]] const Unit g_unit_at_load = unit();

XXH3_state_t* as_state(unsigned char* bytes) noexcept { return reinterpret_cast<XXH3_state_t*>(bytes); }
const XXH3_state_t* as_state(const unsigned char* bytes) noexcept {
  return reinterpret_cast<const XXH3_state_t*>(bytes);
}

}  // namespace

void xxh3_update_baseline(void* state, const void* data, std::size_t size) noexcept {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

Hash128 xxh3_128_baseline(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Hash128{h.high64, h.low64};
}

KILN_HOT std::uint64_t xxh3_64(const void* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

bool xxh3_cpu_has_avx512() noexcept { return unit() == Unit::avx512; }

KILN_HOT Hash128 xxh3_128(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  // Small inputs (keys) gain nothing from wide vectors. AVX-512 only from kAvx512MinBytes, where
  // bench/hash_dispatch found it faster than AVX2 (below, AVX2 won; a small kernel's entry is ~5 KB).
  constexpr std::size_t kAvx512MinBytes = 32 * 1024;
  if (size >= 1024) {
    if (unit() == Unit::avx512 && size >= kAvx512MinBytes) return xxh3_128_avx512(data, size, seed);
    if (unit() != Unit::baseline) return xxh3_128_avx2(data, size, seed);  // avx512 implies avx2 here
  }
  return xxh3_128_baseline(data, size, seed);
}

Xxh3Stream::Xxh3Stream(std::uint64_t seed) noexcept {
  XXH3_INITSTATE(as_state(m_state));
  XXH3_128bits_reset_withSeed(as_state(m_state), seed);
}

void Xxh3Stream::update(const void* data, std::size_t size) noexcept {
  switch (unit()) {
    case Unit::avx512: xxh3_update_avx512(m_state, data, size); break;
    case Unit::avx2: xxh3_update_avx2(m_state, data, size); break;
    case Unit::baseline: xxh3_update_baseline(m_state, data, size); break;
  }
}

Hash128 Xxh3Stream::digest() const noexcept {
  const XXH128_hash_t h = XXH3_128bits_digest(as_state(m_state));
  return Hash128{h.high64, h.low64};
}

}  // namespace kiln::cache::detail
