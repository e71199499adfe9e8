#pragma once
// Reading the files named on the command line (--source, --header): whole, bounded, regular files only.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "kiln/cache/key.hpp"

namespace kiln::cli {

/// Reads a whole regular file of at most `max_bytes` (default: the cache's canonical key limit, which a
/// source and its headers must fit in). Throws UsageError "<what> FILE: why" for anything else: a file
/// that cannot be read, a directory, a FIFO or device (never waited on or read without end), a file
/// over the limit.
[[nodiscard]] std::string read_text_file(const std::filesystem::path& path, std::string_view what,
                                         std::uint64_t max_bytes = cache::kMaxCanonicalKeyBytes);

}  // namespace kiln::cli
