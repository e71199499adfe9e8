#pragma once
// Checking a manifest's results against the file system (dep_manifest.cpp's lookups): each path is
// stat'ed (and a header re-read) at most once per lookup, large results on several threads; what one
// lookup learned serves the next ones of the same DependencyManifests for a while (the stat memo, and
// whole dependency sets checked moments ago).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "dep_manifest_view.hpp"
#include "kiln/base/xxh3.hpp"
#include "posix_util.hpp"

namespace kiln::cache::detail {

inline constexpr std::size_t kReadChunk = 64 * 1024;  // headers are hashed in pieces of this size

/// A stat error that means "there is nothing at this path" (a component that is not a directory: the
/// compiler's probe cannot open anything there either).
inline bool is_absence(int error) noexcept { return error == ENOENT || error == ENOTDIR; }

/// What a lookup learned about one path by stat(2) (each path is stat'ed, and read, at most once per
/// lookup). Kept small: a lookup holds one per path of the manifest, and reads are rare (ReadProbe).
struct PathProbe {
  enum class Stat : std::uint8_t { unknown, present, absent, failed } stat_state = Stat::unknown;
  std::uint32_t read = 0;  ///< 0: not read; else 1 + the index of its ReadProbe
  int error = 0;           ///< errno of the failed stat
  FileStat stat;           ///< from stat(2)
};

/// What re-reading one header gave.
struct ReadProbe {
  bool ok = false;
  int error = 0;                                     ///< errno of the failed read
  DependencyChange change = DependencyChange::none;  ///< why the read failed
  const char* what = "";                             ///< static text for a failed read
  FileStat read_stat;                                ///< from fstat(2) of the file read (unchanged across the read)
  Hash128 digest;                                    ///< of the bytes read
};

/// The first dependency of a result that does not match (change == none: the result matches).
struct Mismatch {
  DependencyChange change = DependencyChange::none;
  std::uint32_t path = 0;  ///< index into the view's paths
  int error = 0;
  const char* what = "";
  Hash128 recorded{};  ///< for a changed digest: the recorded one and the one found
  Hash128 found{};

  static Mismatch at(DependencyChange change, std::uint32_t path, int error = 0, const char* what = "") {
    Mismatch m;
    m.change = change;
    m.path = path;
    m.error = error;
    m.what = what;
    return m;
  }
};

inline std::string describe(const Mismatch& m) {
  switch (m.change) {
    case DependencyChange::none:
      return "matches";
    case DependencyChange::changed:
      if (m.recorded != m.found) return fmt::format("digest {} -> {}", m.recorded.hex(), m.found.hex());
      return m.what;
    case DependencyChange::vanished:
      return "no longer exists";
    case DependencyChange::appeared:
      return "was absent and exists now (it would shadow a recorded header)";
    case DependencyChange::unreadable:
      return fmt::format("{}: {}", m.what, std::strerror(m.error));
  }
  return {};
}

/// What this process learned by stat(2) about header and absent paths, shared by the lookups of one
/// DependencyManifests: a path stat'ed less than `ttl` ago (CLOCK_REALTIME) is not stat'ed again. Many
/// kernels of one program include the same tree (a runtime's own headers, CCCL), so a burst of lookups
/// stats each path once instead of once per kernel. Only present-with-stat and absent are remembered;
/// a failed stat is asked again. Bounded: cleared when it reaches kMaxPaths.
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
    bool folder = false;  ///< present, and a directory (include folders: DependencyManifests::note_stat)
  };
  static constexpr std::size_t kMaxPaths = 1 << 18;

  /// True exactly once per memo: that lookup neither asks nor tells the memo, and calls defer() at its end.
  bool first_lookup() noexcept { return !m_started.exchange(true, std::memory_order_acq_rel); }

  /// The first lookup's probes (probes[i] is what it learned about paths[i], at or after at_ns).
  void defer(std::unique_ptr<std::byte[]> bytes, std::vector<std::string_view> paths, std::vector<PathProbe> probes,
             std::int64_t at_ns) {
    const std::lock_guard lock(m_mutex);
    m_pending.emplace(Pending{std::move(bytes), std::move(paths), std::move(probes), at_ns});
  }

  std::optional<Seen> find(std::string_view path, std::int64_t now_ns, std::chrono::nanoseconds ttl) {
    if (ttl.count() <= 0) return std::nullopt;
    const std::lock_guard lock(m_mutex);
    if (m_pending) materialize();
    return find_locked(path, now_ns, ttl);
  }
  /// find() for many paths under one lock: found(i, seen) for each paths[i] the memo knows.
  template <class Found>
  void find_each(std::span<const std::string_view> paths, std::int64_t now_ns, std::chrono::nanoseconds ttl,
                 Found&& found) {
    if (ttl.count() <= 0 || paths.empty()) return;
    const std::lock_guard lock(m_mutex);
    if (m_pending) materialize();
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (const std::optional<Seen> seen = find_locked(paths[i], now_ns, ttl)) found(i, *seen);
    }
  }
  void remember(std::string_view path, const Seen& seen) {
    const std::lock_guard lock(m_mutex);
    if (m_pending) materialize();
    put(path, seen, false);
  }

 private:
  struct Pending {
    std::unique_ptr<std::byte[]> bytes;  ///< what `paths` point into
    std::vector<std::string_view> paths;
    std::vector<PathProbe> probes;
    std::int64_t at_ns = 0;
  };

  std::optional<Seen> find_locked(std::string_view path, std::int64_t now_ns, std::chrono::nanoseconds ttl) const {
    const Item* item = m_table.find(path, path_hash(path));
    if (item == nullptr) return std::nullopt;
    const std::int64_t age = now_ns - item->seen.at_ns;
    if (age < 0 || age >= ttl.count()) return std::nullopt;
    return item->seen;
  }

  static std::uint64_t path_hash(std::string_view path) noexcept { return xxh3_64(path.data(), path.size()); }

  /// `kept`: the path's bytes are kept by the memo already (a deferred lookup's buffer); else a new
  /// path is copied into the memo's own storage. Keys are views into one or the other.
  void put(std::string_view path, const Seen& seen, bool kept) {
    if (m_table.size() >= kMaxPaths) {
      m_table.clear();
      m_buffers.clear();
      m_owned.clear();
    }
    const std::uint64_t hash = path_hash(path);
    if (Item* item = m_table.find(path, hash)) {
      if (item->seen.at_ns <= seen.at_ns) item->seen = seen;
      return;
    }
    m_table.insert(kept ? path : std::string_view(m_owned.emplace_back(path)), hash, seen);
  }

  void materialize() {
    Pending pending = std::move(*m_pending);
    m_pending.reset();
    m_table.reserve(std::min(m_table.size() + pending.paths.size(), kMaxPaths));
    // The paths point into the lookup's buffer: the memo keeps that buffer and keys by those bytes, so
    // taking over a manifest's few thousand paths allocates no string. It joins the kept buffers only
    // after the loop: a put() that clears a full memo drops the buffers kept before, never this one.
    for (std::size_t i = 0; i < pending.paths.size() && i < pending.probes.size(); ++i) {
      const PathProbe& probe = pending.probes[i];
      if (probe.stat_state == PathProbe::Stat::present) put(pending.paths[i], Seen{true, probe.stat, pending.at_ns}, true);
      if (probe.stat_state == PathProbe::Stat::absent) put(pending.paths[i], Seen{false, {}, pending.at_ns}, true);
    }
    m_buffers.push_back(std::move(pending.bytes));
  }

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
    void clear() noexcept {
      m_items.clear();
      std::fill(m_index.begin(), m_index.end(), 0);
    }
    /// Room for `items` without moving an item or rebuilding the index; the items' vector gets twice that
    /// (only what is used is ever touched): the stats that follow a takeover add paths one by one.
    void reserve(std::size_t items) {
      m_items.reserve(2 * items);
      if (2 * items > m_index.size()) rebuild(items);
    }
    [[nodiscard]] const Item* find(std::string_view path, std::uint64_t hash) const noexcept {
      return const_cast<Table*>(this)->find(path, hash);
    }
    Item* find(std::string_view path, std::uint64_t hash) noexcept {
      if (m_index.empty()) return nullptr;
      const std::size_t mask = m_index.size() - 1;
      const auto tag = static_cast<std::uint32_t>(hash >> 32);
      for (std::size_t at = hash & mask;; at = (at + 1) & mask) {
        const std::uint64_t slot = m_index[at];
        if (slot == 0) return nullptr;
        if (static_cast<std::uint32_t>(slot >> 32) != tag) continue;
        Item& item = m_items[static_cast<std::uint32_t>(slot) - 1];
        if (item.hash == hash && item.path == path) return &item;
      }
    }
    /// Adds a path that find() did not find.
    void insert(std::string_view path, std::uint64_t hash, const Seen& seen) {
      if (2 * (m_items.size() + 1) > m_index.size()) rebuild(m_items.size() + 1);
      m_items.push_back(Item{path, hash, seen});
      place(m_items.size() - 1);
    }

   private:
    void rebuild(std::size_t items) {
      std::size_t capacity = 1024;
      while (capacity < 2 * items) capacity *= 2;
      m_index.assign(capacity, 0);
      for (std::size_t i = 0; i < m_items.size(); ++i) place(i);
    }
    void place(std::size_t item) noexcept {
      const std::uint64_t hash = m_items[item].hash;
      const std::size_t mask = m_index.size() - 1;
      std::size_t at = hash & mask;
      while (m_index[at] != 0) at = (at + 1) & mask;
      m_index[at] = (hash & 0xffffffff00000000ULL) | static_cast<std::uint64_t>(item + 1);
    }
    std::vector<Item> m_items;
    std::vector<std::uint64_t> m_index;  ///< 0: empty; else (hash's top 32 bits << 32) | (item + 1)
  };

  std::mutex m_mutex;
  std::atomic<bool> m_started{false};
  std::optional<Pending> m_pending;
  std::vector<std::unique_ptr<std::byte[]>> m_buffers;  ///< deferred lookups' bytes that keys point into
  std::deque<std::string> m_owned;                      ///< the other keys' bytes (a deque: they never move)
  Table m_table;
};

/// Dependency sets this process checked against the file system, by their canonical text (the key
/// part: every header's path and digest, every absent path), each with the moment the oldest stat
/// that check relied on was taken. The kernels of one program often read the very same set under
/// different requests; a set checked less than the stat memo's time ago is not checked again, path by
/// path (the same promise as the stat memo: inside one process an edit may go unseen that long).
/// Bounded: cleared at kMaxSets.
class ValidatedSets {
 public:
  static constexpr std::size_t kMaxSets = 4096;

  bool fresh(const std::string& set, std::int64_t now_ns, std::chrono::nanoseconds ttl) const {
    if (ttl.count() <= 0) return false;
    const std::lock_guard lock(m_mutex);
    const auto it = m_sets.find(set);
    if (it == m_sets.end()) return false;
    const std::int64_t age = now_ns - it->second;
    return age >= 0 && age < ttl.count();
  }
  /// Whether any set is held (a lookup only reads a manifest's head first when one may be fresh).
  bool any() const {
    const std::lock_guard lock(m_mutex);
    return !m_sets.empty();
  }
  void remember(const std::string& set, std::int64_t at_ns) {
    const std::lock_guard lock(m_mutex);
    if (m_sets.size() >= kMaxSets) m_sets.clear();
    auto [it, inserted] = m_sets.try_emplace(set, at_ns);
    if (!inserted && it->second < at_ns) it->second = at_ns;
  }

 private:
  mutable std::mutex m_mutex;
  std::unordered_map<std::string, std::int64_t> m_sets;
};

class Checker {
 public:
  /// Fewer unprobed paths than this in a result are stat'ed one by one (threads would cost more).
  static constexpr std::size_t kParallelStatPaths = 256;
  static constexpr std::size_t kStatBatch = 64;  ///< paths a thread takes at a time
  static constexpr std::size_t kStatPathBytes = 4096;  ///< longer paths are stat'ed by stat_path
  static constexpr std::size_t kWalkRun = 512;  ///< absent paths per run when they are settled in parallel

  Checker(const ManifestView& view, const ManifestLimits& limits, std::int64_t now_ns, std::chrono::nanoseconds window,
          StatMemo* memo = nullptr, std::chrono::nanoseconds memo_ttl = {}, unsigned stat_threads = 1)
      : m_stat_threads(std::min(stat_threads, std::max(1u, std::thread::hardware_concurrency()))),
        m_view(view),
        m_limits(limits),
        m_now_ns(now_ns),
        m_window(window),
        m_memo(memo),
        m_memo_ttl(memo_ttl),
        m_probes(view.paths.size()) {
    oldest_ns = now_ns;
  }

  /// Checks one result: absent paths first, then every header's stat, then re-hashes the headers whose
  /// stat differs or is not trusted (so a vanished header costs no read).
  Mismatch check(const ResultRefs& result) {
    prefetch(result);
    for (const std::uint32_t absent : m_view.result_absent(result)) {
      const std::uint32_t path = m_view.absent[absent];
      const PathProbe& probe = stat_path(path);
      if (probe.stat_state == PathProbe::Stat::present) return Mismatch::at(DependencyChange::appeared, path);
      if (probe.stat_state == PathProbe::Stat::failed) {
        return Mismatch::at(DependencyChange::unreadable, path, probe.error, "stat");
      }
    }
    m_pending.clear();
    for (const std::uint32_t file : m_view.result_files(result)) {
      const FileInfo& info = m_view.files[file];
      const PathProbe& probe = stat_path(info.path);
      if (probe.stat_state == PathProbe::Stat::absent) return Mismatch::at(DependencyChange::vanished, info.path);
      if (probe.stat_state == PathProbe::Stat::failed) {
        return Mismatch::at(DependencyChange::unreadable, info.path, probe.error, "stat");
      }
      if (info.trusted && probe.stat == info.stat) continue;
      m_pending.push_back(file);
    }
    for (const std::uint32_t file : m_pending) {
      const FileInfo& info = m_view.files[file];
      const ReadProbe& probe = read_path(info.path);
      if (!probe.ok) return Mismatch::at(probe.change, info.path, probe.error, probe.what);
      if (probe.digest != info.digest) {
        Mismatch m = Mismatch::at(DependencyChange::changed, info.path);
        m.recorded = info.digest;
        m.found = probe.digest;
        return m;
      }
      // Same bytes: remember the stat they have now (trusted once it lies outside the window).
      const bool trusted = stat_is_settled(probe.read_stat, m_now_ns, m_window);
      if (probe.read_stat != info.stat || trusted != info.trusted)
        refreshes.emplace_back(file, probe.read_stat, trusted);
    }
    return Mismatch{};
  }

  struct Refresh {
    std::uint32_t file;
    FileStat stat;
    bool trusted;
    Refresh(std::uint32_t f, const FileStat& s, bool t) : file(f), stat(s), trusted(t) {}
  };
  std::vector<Refresh> refreshes;  ///< header infos re-hashed with their recorded digest (may repeat)
  std::uint32_t stats = 0;
  std::uint32_t inferred = 0;  ///< absent paths settled by a folder above them found absent (no stat)
  std::uint64_t settle_ns = 0;      ///< time in prefetch (LookupStats::settle_ns)
  std::uint32_t settle_threads = 0;  ///< the most threads one prefetch used
  std::uint32_t memo_hits = 0;  ///< paths answered by the process's stat memo instead of stat(2)
  /// The oldest moment a stat this checker relied on was taken (a memo's answer may be older than now).
  std::int64_t oldest_ns = 0;
  std::uint32_t reads = 0;
  std::uint64_t bytes_hashed = 0;

 private:
  const char* c_path(std::uint32_t path) {
    m_path_buffer.assign(m_view.paths[path]);
    return m_path_buffer.c_str();
  }

  /// Asks the memo about every path of `result` not probed yet (under one lock), then settles the rest:
  /// the absent paths by way of their folders (walk()), the headers by a stat each. With enough paths to
  /// pay for threads (a big tree in a fresh process: each stat(2) is a path walk in the kernel, and they
  /// run side by side), both run on several threads: the absent paths in a few runs of the manifest's
  /// order (each run's paths share their folders), the headers in batches. check() then finds them
  /// probed; what is left (few headers, very long paths) it stats itself.
  void prefetch(const ResultRefs& result) {
    const auto started = std::chrono::steady_clock::now();
    struct Clock {  // adds this prefetch's time to settle_ns however it returns
      Checker& self;
      std::chrono::steady_clock::time_point started;
      ~Clock() {
        self.settle_ns += static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
      }
    } clock{*this, started};
    std::vector<std::uint32_t> files;
    std::vector<std::uint32_t> absent;
    for (const std::uint32_t file : m_view.result_files(result)) {
      if (m_probes[m_view.files[file].path].stat_state == PathProbe::Stat::unknown) files.push_back(m_view.files[file].path);
    }
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    for (const std::uint32_t index : m_view.result_absent(result)) {
      const std::uint32_t path = m_view.absent[index];
      // (A path named as both a header and absent is settled as a header: one writer per probe.)
      if (m_probes[path].stat_state == PathProbe::Stat::unknown && !std::binary_search(files.begin(), files.end(), path)) {
        absent.push_back(path);
      }
    }
    std::sort(absent.begin(), absent.end());  // (each once, even from a manifest that names one twice)
    absent.erase(std::unique(absent.begin(), absent.end()), absent.end());
    if (m_memo != nullptr) {
      ask_memo(files);
      ask_memo(absent);
    }
    if (files.empty() && absent.empty()) return;
    const std::int64_t at_ns = realtime_now_ns();
    const bool parallel = m_stat_threads >= 2 && files.size() + absent.size() >= kParallelStatPaths;
    // Work units: first the runs of absent paths, then batches of headers (stat'ed here only in parallel).
    const std::size_t runs =
        absent.empty() ? 0 : parallel ? std::clamp<std::size_t>(absent.size() / kWalkRun, 1, m_stat_threads) : 1;
    std::vector<Walker> walkers(runs);
    const std::size_t batches = parallel ? (files.size() + kStatBatch - 1) / kStatBatch : 0;
    const std::size_t units = runs + batches;
    std::atomic<std::size_t> next{0};
    std::atomic<std::uint32_t> header_stats{0};
    const auto work = [&]() noexcept {
      char buffer[kStatPathBytes + 1];
      for (;;) {
        const std::size_t unit = next.fetch_add(1, std::memory_order_relaxed);
        if (unit >= units) return;
        if (unit < runs) {
          walk(std::span(absent).subspan(unit * absent.size() / runs, (unit + 1) * absent.size() / runs -
                                                                           unit * absent.size() / runs),
               walkers[unit], buffer);
          continue;
        }
        const std::size_t begin = (unit - runs) * kStatBatch;
        std::uint32_t stated = 0;
        for (std::size_t i = begin; i < std::min(files.size(), begin + kStatBatch); ++i) {
          stated += stat_probe(m_probes[files[i]], m_view.paths[files[i]], buffer) ? 1 : 0;
        }
        header_stats.fetch_add(stated, std::memory_order_relaxed);
      }
    };
    std::vector<std::thread> helpers;
    if (parallel) {
      const std::size_t wanted = std::min<std::size_t>(m_stat_threads, units) - 1;
      try {
        helpers.reserve(wanted);
        for (std::size_t t = 0; t < wanted; ++t) helpers.emplace_back(work);
      } catch (...) {
        // No more threads: the ones started and this one share the work all the same.
      }
    }
    work();
    for (std::thread& helper : helpers) helper.join();
    settle_threads = std::max<std::uint32_t>(settle_threads, static_cast<std::uint32_t>(helpers.size() + 1));
    stats += header_stats.load();
    for (const Walker& walker : walkers) {
      stats += walker.stats;
      inferred += walker.inferred;
    }
    if (m_memo == nullptr) return;
    for (const std::uint32_t path : absent) remember(path, m_probes[path], at_ns);
    if (parallel) {
      for (const std::uint32_t path : files) remember(path, m_probes[path], at_ns);
    }
  }

  /// What the memo knows of `paths`, asked under one lock; the paths it answered leave the list.
  void ask_memo(std::vector<std::uint32_t>& todo) {
    if (todo.empty()) return;
    std::vector<std::string_view> paths(todo.size());
    for (std::size_t i = 0; i < todo.size(); ++i) paths[i] = m_view.paths[todo[i]];
    m_memo->find_each(paths, m_now_ns, m_memo_ttl, [&](std::size_t i, const StatMemo::Seen& seen) {
      fill_from_memo(todo[i], seen);
      todo[i] = kKnown;
    });
    todo.erase(std::remove(todo.begin(), todo.end(), kKnown), todo.end());
  }

  /// Stats `path` into `probe` through `buffer` (kStatPathBytes + 1 bytes); false, leaving the probe
  /// unknown (for stat_path), when the path is longer than that.
  static bool stat_probe(PathProbe& probe, std::string_view path, char* buffer) noexcept {
    if (path.size() > kStatPathBytes) return false;
    std::memcpy(buffer, path.data(), path.size());
    buffer[path.size()] = '\0';
    stat_into(probe, buffer);
    return true;
  }

  /// One run of absent paths being settled (walk()): the folders it stat'ed, true when absent (views
  /// into the paths: prefixes of them), and what it did.
  struct Walker {
    std::unordered_map<std::string_view, bool> folders;
    std::uint32_t stats = 0;
    std::uint32_t inferred = 0;
  };

  /// Settles paths recorded absent, most without a stat of their own: a compiler probes a header in
  /// every include folder before the one that has it, so a big tree's absent paths are mostly names
  /// under a few folders that do not exist (<folder>/cuda/std/... where <folder> has no cuda/). When a
  /// path is absent, its folders are stat'ed upwards until one exists; every path under a folder found
  /// absent is then absent too, as its own stat at that moment would have said. Never throws: a path it
  /// cannot settle (no memory, too long) stays unknown, and check() stats it.
  void walk(std::span<const std::uint32_t> paths, Walker& walker, char* buffer) noexcept {
    try {
      for (const std::uint32_t path : paths) {
        PathProbe& probe = m_probes[path];
        const std::string_view text = m_view.paths[path];
        if (under_absent_folder(text, walker)) {
          probe.stat_state = PathProbe::Stat::absent;
          ++walker.inferred;
          continue;
        }
        if (!stat_probe(probe, text, buffer)) continue;
        ++walker.stats;
        if (probe.stat_state == PathProbe::Stat::absent) note_absent_folders(text, walker, buffer);
      }
    } catch (...) {  // (std::bad_alloc from the folder map) the rest is left to check()
    }
  }

  static std::string_view folder_of(std::string_view path) noexcept {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return {};  // no folder, or "/" (always there)
    return path.substr(0, slash);
  }

  /// Whether a folder above `path` was found absent; folders passed on the way up that were not known
  /// yet are absent as well and are noted. Stops at the first folder found present.
  static bool under_absent_folder(std::string_view path, Walker& walker) {
    std::size_t unknown = 0;
    for (std::string_view folder = folder_of(path); !folder.empty(); folder = folder_of(folder)) {
      const auto it = walker.folders.find(folder);
      if (it == walker.folders.end()) {
        ++unknown;
        continue;
      }
      if (!it->second) return false;
      // Absent: so is every folder below it on the way here.
      for (std::string_view below = folder_of(path); unknown > 0; below = folder_of(below), --unknown) {
        walker.folders.emplace(below, true);
      }
      return true;
    }
    return false;
  }

  /// `path` was found absent: stats its folders upwards, noting each, until one exists (or is known).
  static void note_absent_folders(std::string_view path, Walker& walker, char* buffer) {
    for (std::string_view folder = folder_of(path); !folder.empty(); folder = folder_of(folder)) {
      if (walker.folders.contains(folder)) return;
      PathProbe probe;
      if (!stat_probe(probe, folder, buffer)) return;
      ++walker.stats;
      if (probe.stat_state == PathProbe::Stat::failed) return;  // (not known either way: not noted)
      const bool absent = probe.stat_state == PathProbe::Stat::absent;
      walker.folders.emplace(folder, absent);
      if (!absent) return;
    }
  }

  const PathProbe& stat_path(std::uint32_t path) {
    PathProbe& probe = m_probes[path];
    if (probe.stat_state != PathProbe::Stat::unknown) return probe;
    if (from_memo(path)) return probe;
    ++stats;
    const std::int64_t at_ns = realtime_now_ns();
    stat_into(probe, c_path(path));
    if (m_memo != nullptr) remember(path, probe, at_ns);
    return probe;
  }

  /// Fills the probe from the stat memo; false when the memo does not know the path (or is off).
  bool from_memo(std::uint32_t path) {
    if (m_memo == nullptr) return false;
    const std::optional<StatMemo::Seen> seen = m_memo->find(m_view.paths[path], m_now_ns, m_memo_ttl);
    if (!seen) return false;
    fill_from_memo(path, *seen);
    return true;
  }
  void fill_from_memo(std::uint32_t path, const StatMemo::Seen& seen) {
    PathProbe& probe = m_probes[path];
    probe.stat_state = seen.present ? PathProbe::Stat::present : PathProbe::Stat::absent;
    probe.stat = seen.stat;
    ++memo_hits;
    oldest_ns = std::min(oldest_ns, seen.at_ns);
  }
  static constexpr std::uint32_t kKnown = 0xffffffffU;  ///< a todo slot the memo answered

  static void stat_into(PathProbe& probe, const char* path) noexcept {
    struct stat st {};
    if (::stat(path, &st) == 0) {
      probe.stat_state = PathProbe::Stat::present;
      probe.stat = to_file_stat(st);
    } else if (is_absence(errno)) {
      probe.stat_state = PathProbe::Stat::absent;
    } else {
      probe.stat_state = PathProbe::Stat::failed;
      probe.error = errno;
    }
  }

  void remember(std::uint32_t path, const PathProbe& probe, std::int64_t at_ns) {
    if (probe.stat_state == PathProbe::Stat::present) {
      m_memo->remember(m_view.paths[path], StatMemo::Seen{true, probe.stat, at_ns});
    } else if (probe.stat_state == PathProbe::Stat::absent) {
      m_memo->remember(m_view.paths[path], StatMemo::Seen{false, {}, at_ns});
    }
  }

  const ReadProbe& read_path(std::uint32_t path) {
    PathProbe& path_probe = m_probes[path];
    if (path_probe.read != 0) return m_reads[path_probe.read - 1];
    ++reads;
    ReadProbe& probe = m_reads.emplace_back();  // a deque: references to earlier ones stay valid
    path_probe.read = static_cast<std::uint32_t>(m_reads.size());
    const auto fail = [&probe](DependencyChange change, int error, const char* what) -> const ReadProbe& {
      probe.change = change;
      probe.error = error;
      probe.what = what;
      return probe;
    };
    // O_NONBLOCK: a FIFO planted at a header path cannot block the lookup (it is not a regular file).
    const UniqueFd fd(::open(c_path(path), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (!fd) {
      const int error = errno;
      if (is_absence(error)) return fail(DependencyChange::vanished, error, "open");
      return fail(DependencyChange::unreadable, error, "open");
    }
    struct stat before {};
    if (::fstat(fd.get(), &before) != 0) return fail(DependencyChange::unreadable, errno, "fstat");
    if (!S_ISREG(before.st_mode)) return fail(DependencyChange::changed, 0, "no longer a regular file");
    const auto size = static_cast<std::uint64_t>(before.st_size);
    if (size > m_limits.max_header_bytes) return fail(DependencyChange::changed, 0, "larger than the re-hash limit");
    if (!m_buffer) m_buffer = std::make_unique_for_overwrite<std::byte[]>(kReadChunk);
    detail::Xxh3Stream stream(kKeySeed);
    std::uint64_t total = 0;
    bool whole_in_buffer = false;
    for (;;) {
      const ssize_t n = ::read(fd.get(), m_buffer.get(), kReadChunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(DependencyChange::unreadable, errno, "read");
      }
      if (n == 0) break;
      // A file that fits one chunk is hashed in one call below (the one-shot hash is faster).
      if (total == 0 && static_cast<std::uint64_t>(n) == size && size < kReadChunk) {
        whole_in_buffer = true;
        total = size;
        continue;  // the next read() sees the end of the file (or bytes appended meanwhile)
      }
      if (whole_in_buffer) {  // the file grew while it was read
        return fail(DependencyChange::changed, 0, "changed while being read");
      }
      stream.update(m_buffer.get(), static_cast<std::size_t>(n));
      total += static_cast<std::uint64_t>(n);
      if (total > size) return fail(DependencyChange::changed, 0, "changed while being read");
    }
    struct stat after {};
    if (::fstat(fd.get(), &after) != 0) return fail(DependencyChange::unreadable, errno, "fstat");
    const FileStat read_stat = to_file_stat(before);
    if (total != size || to_file_stat(after) != read_stat) {
      return fail(DependencyChange::changed, 0, "changed while being read");
    }
    bytes_hashed += total;
    probe.digest =
        whole_in_buffer ? detail::xxh3_128(m_buffer.get(), static_cast<std::size_t>(total), kKeySeed) : stream.digest();
    probe.read_stat = read_stat;
    probe.ok = true;
    return probe;
  }

 public:
  /// The probe table, for StatMemo::defer (the checker is done with it).
  std::vector<PathProbe> take_probes() noexcept { return std::move(m_probes); }

 private:

  unsigned m_stat_threads;
  const ManifestView& m_view;
  const ManifestLimits& m_limits;
  std::int64_t m_now_ns;
  std::chrono::nanoseconds m_window;
  StatMemo* m_memo;
  std::chrono::nanoseconds m_memo_ttl;
  std::vector<PathProbe> m_probes;
  std::deque<ReadProbe> m_reads;
  std::vector<std::uint32_t> m_pending;
  std::string m_path_buffer;
  std::unique_ptr<std::byte[]> m_buffer;
};

}  // namespace kiln::cache::detail
