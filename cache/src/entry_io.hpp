#pragma once
// Private to cache/: the entry parser reading straight from a file descriptor (one copy from the page
// cache into the Entry), sharing every check with kiln::cache::parse().
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/hash.hpp"

namespace kiln::cache::detail {

/// A read() failed: not a content error; the file must not be deleted for it.
struct IoFailure {
  int error = 0;     ///< errno
  std::string what;  ///< "read failed: Input/output error"
};

/// What the caller asked for. When given, the stored key is compared with it instead of being
/// re-hashed: a different key is a content error whose reason starts with "key mismatch".
struct ExpectedKey {
  Hash128 key_hash;
  std::string_view canonical_key;
};

using FileParseResult = std::variant<Entry, ContentError, IoFailure>;

/// Parses the entry held in `fd` (a regular file of `file_size` bytes, read from its current offset).
/// Never throws; never allocates more than `file_size` bytes in total for the entry's fields.
[[nodiscard]] FileParseResult parse_file(int fd, std::uint64_t file_size, const Limits& limits,
                                         const ExpectedKey* expected) noexcept;

}  // namespace kiln::cache::detail
