// XXH3 compiled for AVX2, called only when the CPU has it (see xxh3.cpp). GCC compiles the xxHash code
// of this file for AVX2 through a target pragma (no per-file build flags); other compilers get the
// baseline code here. Every other header is included before the pragma, so no shared inline function
// is ever emitted with AVX2 instructions.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kiln/base/xxh3.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>
#undef XXH_VECTOR
#define XXH_VECTOR 2  // XXH_AVX2: the pragma does not define __AVX2__, so xxHash cannot detect it
#define KILN_XXH3_PRAGMA 1
#endif

#define KILN_XXH3_SUFFIX avx2
#include "xxh3_simd.inl"

#ifdef KILN_XXH3_PRAGMA
#pragma GCC pop_options
#endif
