// XXH3 compiled for AVX2, called only when the CPU has it (see xxh3.cpp). GCC compiles the xxHash code
// of this file for AVX2 through a target pragma (no per-file build flags); other compilers get the
// baseline code here. Every other header is included before the pragma, so no shared inline function
// is ever emitted with AVX2 instructions.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xxh3.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>
#undef XXH_VECTOR
#define XXH_VECTOR 2  // XXH_AVX2: the pragma does not define __AVX2__, so xxHash cannot detect it
#define KILN_XXH3_AVX2_PRAGMA 1
#endif
#include <xxhash.h>  // XXH_INLINE_ALL: every xxHash function is static to this file

namespace kiln::cache::detail {

void xxh3_update_avx2(void* state, const void* data, std::size_t size) noexcept {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

Hash128 xxh3_128_avx2(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Hash128{h.high64, h.low64};
}

}  // namespace kiln::cache::detail

#ifdef KILN_XXH3_AVX2_PRAGMA
#pragma GCC pop_options
#endif
