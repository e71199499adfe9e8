#include "xxh3.hpp"

#include <xxhash.h>

namespace kiln::cache::detail {
namespace {

static_assert(sizeof(XXH3_state_t) == Xxh3Stream::kStateBytes, "update Xxh3Stream::kStateBytes for this xxHash");
static_assert(alignof(XXH3_state_t) <= 64);

/// Decided once; safe to call during static initialization.
bool use_avx2() noexcept {
  static const bool use = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
#else
    return false;
#endif
  }();
  return use;
}

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

Hash128 xxh3_128(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  // Small inputs (keys) gain nothing from wide vectors.
  if (size >= 1024 && use_avx2()) return xxh3_128_avx2(data, size, seed);
  return xxh3_128_baseline(data, size, seed);
}

Xxh3Stream::Xxh3Stream(std::uint64_t seed) noexcept {
  XXH3_INITSTATE(as_state(m_state));
  XXH3_128bits_reset_withSeed(as_state(m_state), seed);
}

void Xxh3Stream::update(const void* data, std::size_t size) noexcept {
  if (use_avx2()) {
    xxh3_update_avx2(m_state, data, size);
  } else {
    xxh3_update_baseline(m_state, data, size);
  }
}

Hash128 Xxh3Stream::digest() const noexcept {
  const XXH128_hash_t h = XXH3_128bits_digest(as_state(m_state));
  return Hash128{h.high64, h.low64};
}

}  // namespace kiln::cache::detail
