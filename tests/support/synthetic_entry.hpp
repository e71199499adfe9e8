#pragma once
// A cache entry made up for a test: no compiler involved, the same bytes for the same arguments.
#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/cache/entry.hpp"

namespace kiln::test {

/// A synthetic CUBIN entry whose canonical key reads like the engine's (format, vendor, compiler, target,
/// options, source) and is unique to `name`; `payload_bytes` bytes of pseudo-random payload seeded by
/// the key, two name expressions and 64 bytes of aux data.
cache::Entry make_entry(std::string_view name, std::size_t payload_bytes = 4096, std::string target = "sm_90",
                        std::string compiler = "nvrtc 13.0");

}  // namespace kiln::test
