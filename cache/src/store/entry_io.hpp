#pragma once
// Private to cache/: the entry parser reading straight from a file descriptor, and the header-only
// parser used by listings (Store::scan_shard), sharing every check with kiln::cache::parse().
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"

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
/// Entries up to kWholeReadBytes are read with one read() into a per-thread buffer and parsed in place
/// (the payload is copied out once, after every check has passed); larger ones read their fixed
/// header, then everything else with one readv() straight into the Entry's fields.
[[nodiscard]] FileParseResult parse_file(int fd, std::uint64_t file_size, const Limits& limits,
                                         const ExpectedKey* expected) noexcept;
inline constexpr std::uint64_t kWholeReadBytes = 128 * 1024;

/// How much of a header parse_header() checks and returns.
enum class HeaderParts : std::uint8_t {
  texts,  ///< the fixed part, target and compiler (a blob: all, always)
  all,    ///< everything before the payload: + canonical key and names (names list and key hash checked)
};

/// parse_header() needs the first `bytes` bytes of the file (more than it was given).
struct NeedBytes {
  std::uint64_t bytes = 0;
};

using HeaderParseResult = std::variant<EntryHeaderView, ContentError, NeedBytes>;

/// Parses the header at the start of `prefix`, the first bytes of an entry file of `file_size` bytes,
/// with the checks parse() makes up to the payload (see entry.hpp). Views point into `prefix`. Returns
/// NeedBytes when `prefix` is too short for `parts` (never more than `file_size`, and only after the
/// lengths were checked against the limits and the file size). Never throws.
[[nodiscard]] HeaderParseResult parse_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                                             HeaderParts parts, const Limits& limits) noexcept;

}  // namespace kiln::cache::detail
