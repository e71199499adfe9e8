#pragma once
// What a compile read from include folders: the header files with their identity and digest, and the
// paths probed and found absent in folders searched before the one that matched (a header appearing
// there later would shadow the recorded one). The include resolver (engine) produces it on a miss;
// the dependency manifest (cache) records it and re-checks it on a lookup.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"

namespace kiln::cache {

/// The parts of stat(2) that say whether a file may have changed.
struct FileStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::uint64_t inode = 0;
  std::uint64_t device = 0;
  friend bool operator==(const FileStat&, const FileStat&) = default;
};

/// One header read from disk.
struct HeaderRecord {
  std::string path;      ///< resolved, absolute, lexically normal ("a/../b" folded)
  FileStat stat;         ///< at the time it was read
  bool trusted_stat = false;  ///< false: it changed too recently to be trusted by stat; always re-hashed
  Hash128 digest;        ///< XXH3-128 of its bytes (kKeySeed)
  friend bool operator==(const HeaderRecord&, const HeaderRecord&) = default;
};

struct DependencySet {
  std::vector<HeaderRecord> headers;  ///< in resolution order (deterministic for the same tree)
  std::vector<std::string> absent;    ///< absolute paths probed and not found; sorted, unique
  friend bool operator==(const DependencySet&, const DependencySet&) = default;
};

/// A file whose mtime or ctime lies within this many nanoseconds of the moment it was read (or after
/// it) may still be being written: its stat is not trusted (HeaderRecord::trusted_stat = false), so
/// it is re-hashed on every check instead of being judged by its stat.
inline constexpr std::int64_t kStatTrustWindowNs = 2'000'000'000;

/// The canonical-key field naming a dependency set: each header's path and digest (in order), then
/// each absent path. Two sets give equal text exactly when they name the same files with the same
/// bytes and the same absences. Stats are not part of it.
[[nodiscard]] std::string canonical_dependencies(const DependencySet& set);

}  // namespace kiln::cache
