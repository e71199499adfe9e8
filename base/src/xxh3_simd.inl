// The body of one vector-unit build of XXH3 (included by xxh3_avx2.cpp and xxh3_avx512.cpp, each of
// which first selects its instruction set through a GCC target pragma and XXH_VECTOR).
// KILN_XXH3_SUFFIX names the functions: xxh3_update_<suffix>, xxh3_128_<suffix>.
#include <xxhash.h>  // XXH_INLINE_ALL: every xxHash function is static to the including file

#define KILN_XXH3_CAT2(a, b) a##b
#define KILN_XXH3_CAT(a, b) KILN_XXH3_CAT2(a, b)

namespace kiln::cache::detail {

void KILN_XXH3_CAT(xxh3_update_, KILN_XXH3_SUFFIX)(void* state, const void* data, std::size_t size) noexcept {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

Hash128 KILN_XXH3_CAT(xxh3_128_, KILN_XXH3_SUFFIX)(const void* data, std::size_t size, std::uint64_t seed) noexcept {
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Hash128{h.high64, h.low64};
}

}  // namespace kiln::cache::detail

#undef KILN_XXH3_CAT
#undef KILN_XXH3_CAT2
