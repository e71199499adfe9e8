#pragma once
// Private to the include home (includes/src/): resolves this process made, reused. The kernels of
// one program are distinct sources over one header tree: a runtime prepends the same includes to every
// kernel it generates (CuPy's four headers, which reach about a thousand files through CCCL), so every
// request resolves the very same tree. What a resolve finds is decided by its inputs other than the
// source's bytes (the source's includes and macro definitions as scanned, the in-memory headers, the
// folders, the vendor, the retry names) and by the file system. ResolvedSets keeps each resolve by a
// signature of those inputs; a later request with the same signature takes it, after a check that every
// header read still has the stat it had and every path probed absent is still absent (through the stat
// memo: the promise every check of this process makes, an edit unseen at most the memo's time after the
// last stat of that path). The source alone is rewritten again (rewrite_source). Nothing here is ever a
// key: the set taken is the set a resolve now would give, and its dependency part keys the request.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/base/hash.hpp"
#include "resolve.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

class StatMemo;

class ResolvedSets {
 public:
  /// Sets held at most; the oldest goes first. A program compiles with few distinct preludes.
  static constexpr std::size_t kMaxSets = 64;

  struct Set {
    std::shared_ptr<const ResolvedIncludes> resolved;
    std::string dependency_part;  ///< canonical_dependencies(resolved->dependencies)
  };

  /// What decides a resolve besides the file system: `source_scan` is the scan of input.source_text.
  [[nodiscard]] static Hash128 signature(const IncludeInput& input, const ScanResult& source_scan);

  /// The set held for `signature` when every header it read still has its recorded stat and every path it
  /// probed absent holds no regular file, asked of `memo` first and stat(2) else (what a stat finds is
  /// told to the memo; `work` counts both). nullopt when none is held or one path differs (the set is
  /// dropped: a resolve follows).
  [[nodiscard]] std::optional<Set> find(const Hash128& signature, StatMemo& memo, std::int64_t now_ns, FileWork& work);

  /// Keeps a resolve for later requests with its signature, unless a header it read had a stat too recent
  /// to vouch for the bytes (HeaderRecord::trusted_stat): such a set is resolved again next time.
  void remember(const Hash128& signature, Set set);

 private:
  std::mutex m_mutex;
  std::unordered_map<Hash128, Set, Hash128Hasher> m_sets;
  std::vector<Hash128> m_order;  ///< the signatures of m_sets, oldest first
};

/// A resolve's result for another source with the same includes: the held set's headers and dependencies,
/// the source rewritten (rewrite_source with the set's source links), `work` as given.
[[nodiscard]] std::shared_ptr<const ResolvedIncludes> for_source(const ResolvedIncludes& set, std::string_view text,
                                                                 const ScanResult& scan, const FileWork& work);

}  // namespace kiln::cache::detail
