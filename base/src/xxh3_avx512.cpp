// XXH3 compiled for AVX-512F, called only when the CPU has it (see xxh3.cpp): about 1.5-2x the AVX2
// speed on large binaries where the unit is present (server CPUs such as GPU hosts'). Built the same
// way as xxh3_avx2.cpp, through a GCC target pragma.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/base/xxh3.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's own AVX-512 intrinsics (the _mm512_undefined_* they start from) trip -Wmaybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KILN_XXH3_DIAGNOSTICS 1
#include <immintrin.h>
#undef XXH_VECTOR
#define XXH_VECTOR 3  // XXH_AVX512
#define KILN_XXH3_PRAGMA 1
#endif

#define KILN_XXH3_SUFFIX avx512
#include "xxh3_simd.inl"

#ifdef KILN_XXH3_DIAGNOSTICS
#pragma GCC diagnostic pop
#endif
#ifdef KILN_XXH3_PRAGMA
#pragma GCC pop_options
#endif
