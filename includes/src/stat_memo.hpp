#pragma once
// Private to the include home (includes/src/): the stat memo, what this process learned by stat(2)
// about header paths, places probed empty and include folders. One memo per DependencyManifests, shared
// by its lookups (manifest_check.hpp) and by the include resolver (resolve.hpp): a burst of lookups and
// of cold compiles over one tree stats each path once per ManifestConfig::stat_memo, and each side
// profits from the other's stats.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/dependencies.hpp"

namespace kiln::cache {
class DependencyManifests;
}  // namespace kiln::cache

namespace kiln::cache::detail {

/// What a lookup learned about one path by stat(2) (each path is stat'ed, and read, at most once per
/// lookup). Kept small: a lookup holds one per path of the manifest, and reads are rare (ReadProbe).
struct PathProbe {
  enum class Stat : std::uint8_t { unknown, present, absent, failed } stat_state = Stat::unknown;
  std::uint32_t read = 0;  ///< 0: not read; else 1 + the index of its ReadProbe
  int error = 0;           ///< errno of the failed stat
  FileStat stat;           ///< from stat(2)
};

/// What this process learned by stat(2) about header and absent paths, shared by the lookups of one
/// DependencyManifests and the include resolves that use it: a path stat'ed less than `ttl` ago
/// (CLOCK_REALTIME) is not stat'ed again. Many kernels of one program include the same tree (a runtime's
/// own headers, CCCL), so a burst of lookups stats each path once instead of once per kernel. Only
/// present-with-stat and absent are remembered; a failed stat is asked again. Same promise for every
/// user: inside one process an edit goes unseen at most `ttl` after the last stat of that path. A memo
/// of no time (ttl <= 0) knows nothing and remembers nothing. Bounded: cleared when it reaches kMaxPaths.
///
/// A process that makes one lookup (a CLI call, a short program) should not pay for building the memo:
/// the first lookup does not use it, and hands over its probes as they are (defer: the manifest's bytes
/// the paths point into, and the probe table). They become memo entries only when a second lookup asks.
class StatMemo {
 public:
  struct Seen {
    bool present = false;
    FileStat stat;
    std::int64_t at_ns = 0;
    bool folder = false;  ///< present, and a directory (an include folder checked: checked_include_folders)
  };
  static constexpr std::size_t kMaxPaths = 1 << 18;

  explicit StatMemo(std::chrono::nanoseconds ttl) noexcept : m_ttl(ttl) {}
  StatMemo(const StatMemo&) = delete;
  StatMemo& operator=(const StatMemo&) = delete;

  [[nodiscard]] std::chrono::nanoseconds ttl() const noexcept { return m_ttl; }

  /// True exactly once per memo: that lookup neither asks nor tells the memo, and calls defer() at its end.
  bool first_lookup() noexcept { return !m_started.exchange(true, std::memory_order_acq_rel); }

  /// The first lookup's probes (probes[i] is what it learned about paths[i], at or after at_ns).
  void defer(std::unique_ptr<std::byte[]> bytes, std::vector<std::string_view> paths, std::vector<PathProbe> probes,
             std::int64_t at_ns);

  /// What a stat of `path` found less than ttl before `now_ns` (CLOCK_REALTIME), if one did.
  [[nodiscard]] std::optional<Seen> find(std::string_view path, std::int64_t now_ns);
  /// find() for many paths under one lock: found(i, seen) for each paths[i] the memo knows.
  template <class Found>
  void find_each(std::span<const std::string_view> paths, std::int64_t now_ns, Found&& found) {
    if (m_ttl.count() <= 0 || paths.empty()) return;
    const std::lock_guard lock(m_mutex);
    if (m_pending) materialize();
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (const std::optional<Seen> seen = find_locked(paths[i], now_ns)) found(i, *seen);
    }
  }
  /// Records what a stat of `path` taken at or after seen.at_ns found.
  void remember(std::string_view path, const Seen& seen);

 private:
  struct Pending {
    std::unique_ptr<std::byte[]> bytes;  ///< what `paths` point into
    std::vector<std::string_view> paths;
    std::vector<PathProbe> probes;
    std::int64_t at_ns = 0;
  };

  [[nodiscard]] std::optional<Seen> find_locked(std::string_view path, std::int64_t now_ns) const;
  /// `kept`: the path's bytes are kept by the memo already (a deferred lookup's buffer); else a new
  /// path is copied into the memo's own storage. Keys are views into one or the other.
  void put(std::string_view path, const Seen& seen, bool kept);
  void materialize();

  /// The memo's table: items in one vector, found through an open-addressing index (linear probing,
  /// at most half full) that holds each item's number and the top of its hash. No allocation per path:
  /// a lookup that hands over thousands of paths fills two vectors, and a find is one hash (XXH3-64)
  /// and, mostly, one probe.
  struct Item {
    std::string_view path;
    std::uint64_t hash = 0;
    Seen seen;
  };
  class Table {
   public:
    [[nodiscard]] std::size_t size() const noexcept { return m_items.size(); }
    void clear() noexcept;
    /// Room for `items` without moving an item or rebuilding the index; the items' vector gets twice that
    /// (only what is used is ever touched): the stats that follow a takeover add paths one by one.
    void reserve(std::size_t items);
    [[nodiscard]] const Item* find(std::string_view path, std::uint64_t hash) const noexcept {
      return const_cast<Table*>(this)->find(path, hash);
    }
    Item* find(std::string_view path, std::uint64_t hash) noexcept;
    /// Adds a path that find() did not find.
    void insert(std::string_view path, std::uint64_t hash, const Seen& seen);

   private:
    void rebuild(std::size_t items);
    void place(std::size_t item) noexcept;
    std::vector<Item> m_items;
    std::vector<std::uint64_t> m_index;  ///< 0: empty; else (hash's top 32 bits << 32) | (item + 1)
  };

  const std::chrono::nanoseconds m_ttl;
  std::mutex m_mutex;
  std::atomic<bool> m_started{false};
  std::optional<Pending> m_pending;
  std::vector<std::unique_ptr<std::byte[]>> m_buffers;  ///< deferred lookups' bytes that keys point into
  std::deque<std::string> m_owned;                      ///< the other keys' bytes (a deque: they never move)
  Table m_table;
};

/// The include home's way into a DependencyManifests (its friend): the stat memo its lookups use, with
/// its time (ManifestConfig::stat_memo). Works in every mode (memory-only too).
struct ManifestsAccess {
  [[nodiscard]] static StatMemo& stat_memo(const DependencyManifests& manifests) noexcept;
};

}  // namespace kiln::cache::detail
