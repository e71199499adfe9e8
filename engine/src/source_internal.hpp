#pragma once
// What the engine knows about sources beyond the public Source API.
#include <cstdint>

#include "kiln/cache/hash.hpp"

namespace kiln::detail {

/// Seed of the embedded-header digest (a third seed, so it is never mistaken for a key or checksum).
inline constexpr std::uint64_t kEmbeddedDigestSeed = 0x6b696c6e2d686472ULL;  // "kiln-hdr"

/// XXH3-128 over kiln's embedded headers (device_src/**/*.h: each one's name and text as their length
/// and XXH3-128, in name order), computed once per process. Cache keys of sources that use these
/// headers unchanged name them by this digest instead of carrying their text: they are kiln's own
/// files, fixed in each build, so the digest identifies them (nobody chooses their bytes to collide),
/// and a key stays small.
[[nodiscard]] const cache::Hash128& embedded_headers_digest();

}  // namespace kiln::detail
