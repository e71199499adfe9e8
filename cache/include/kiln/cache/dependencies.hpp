#pragma once
// What a compile read from include folders: the header files with their identity and digest, and the
// paths probed and found absent in folders searched before the one that matched (a header appearing
// there later would shadow the recorded one). The include resolver produces it on a miss; the
// dependency manifest records it and re-checks it on a lookup.
#include <cstdint>
#include <memory>
#include <optional>
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

/// The canonical-key field naming a dependency set, "dependencies/2 headers=N absent=M xxh3=HEX": the
/// counts and an XXH3-128 (kKeySeed) over each header's path and digest (in order), then each absent
/// path, length-prefixed. Two sets give equal text exactly when they name the same files with the same
/// bytes and the same absences (up to a 128-bit collision, as for every digest in a key). Stats are not
/// part of it. The list itself lives in the dependency manifest (DependencyManifests::recorded), so an
/// entry's key stays small however many headers it read.
[[nodiscard]] std::string canonical_dependencies(const DependencySet& set);

/// What canonical_dependencies' text says: the counts and the digest.
struct DependencySummary {
  std::uint64_t headers = 0;
  std::uint64_t absent = 0;
  Hash128 digest;
  friend bool operator==(const DependencySummary&, const DependencySummary&) = default;
};

/// canonical_dependencies built one record at a time, with no allocation per record (a manifest lookup
/// streams the matched result straight from the file's bytes). Headers first, in order, then absents.
class DependencyDigest {
 public:
  DependencyDigest();  ///< throws std::bad_alloc
  ~DependencyDigest();
  DependencyDigest(const DependencyDigest&) = delete;
  DependencyDigest& operator=(const DependencyDigest&) = delete;
  void add_header(std::string_view path, const Hash128& digest) noexcept;
  void add_absent(std::string_view path) noexcept;
  [[nodiscard]] std::string text() const;
  [[nodiscard]] DependencySummary summary() const noexcept;  ///< what text() says, as numbers

 private:
  struct Stream;
  std::unique_ptr<Stream> m_stream;
  std::uint64_t m_headers = 0;
  std::uint64_t m_absent = 0;
};

/// The summary a canonical_dependencies text states; nullopt when the text does not follow the form (an
/// older key's dependency list, say). Never throws.
[[nodiscard]] std::optional<DependencySummary> parse_canonical_dependencies(std::string_view text) noexcept;
/// The text of a summary: canonical_dependencies of the set it summarizes. Throws std::bad_alloc.
[[nodiscard]] std::string canonical_dependencies(const DependencySummary& summary);

/// What differs between two dependency sets, header by header, each one line read from `a` to `b`:
/// "/x/y.h: bytes differ (3f12.. -> 9a07..)", "/x/z.h: only in the second (read now)", "/x/w.h: only in
/// the first", "/x/v.h: absent in the first, a header in the second (it shadows ...)" and the like. At
/// most `max_lines` lines, the last one saying how many more there are.
[[nodiscard]] std::vector<std::string> describe_dependency_changes(const DependencySet& a, const DependencySet& b,
                                                                   std::size_t max_lines = 20);

}  // namespace kiln::cache
