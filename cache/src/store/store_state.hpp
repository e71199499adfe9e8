#pragma once
// Private to the store: Store::State, what a Store owns besides its configuration, shared by the files
// that make up the store. store.cpp defines the lookup and publish side (the v1/ descriptor, shard trust,
// entry paths, the mode and the put errors) beside get() and put(); store_state.cpp the size accounting
// (lock/size), temp sweeps and LRU trims; store_scan.cpp reads the layout only.
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/store.hpp"
#include "sharded_dir.hpp"
#include "store_hooks.hpp"

namespace kiln::cache {

namespace detail {

/// The file name suffix of an entry: v1/<2 hex>/<30 hex>.kiln.
inline constexpr std::string_view kEntrySuffix = ".kiln";

/// A trim that removes entries (or PCHs) used this recently warns that the cap (or the PCH share) is too small.
inline constexpr auto kRecentUse = std::chrono::hours(1);

/// The system's text for an errno value, for messages.
inline std::string errno_text(int error) { return std::strerror(error); }

}  // namespace detail

/// The members declared inline are defined in store.cpp and called from that file only: get() and put()
/// inline them there, as they did when this struct was defined in that file. The others are defined in
/// store_state.cpp, but for measurement_due() (in store.cpp, beside the clock check get() uses).
struct Store::State {
  detail::StoreHooks hooks;  ///< test-only (store_hooks.hpp); empty outside tests
  std::string root;
  std::string v1_dir;
  detail::ShardedNames entries;  ///< v1/<2 hex>/<30 hex>.kiln
  std::string pch_dir;               ///< pch/: precompiled headers (pch_store.hpp; store_pch.cpp)
  detail::ShardedNames pch_files;    ///< pch/<2 hex>/<30 hex>.pch
  detail::ShardedNames pch_records;  ///< pch/<2 hex>/<30 hex>.pchv
  std::string lock_dir;
  std::string size_file;
  std::string trim_lock;
  std::string measured_file;  ///< lock/measured: its mtime is when the running total was last measured
  bool root_refused = false;  ///< set by the constructor only

  /// The user whose entries this store trusts (entries owned by anyone else are refused as "not ours").
  uid_t euid = ::geteuid();

  /// v1/, opened once (O_PATH) on the first lookup: a lookup opens "<2 hex>/<30 hex>.kiln" relative to it
  /// instead of resolving the whole root path again. When v1/ is replaced (removed and made again, e.g.
  /// by a put after the cache was deleted), a lookup that finds nothing notices and opens the new one;
  /// the old descriptor stays open until the store is destroyed (another thread may still be using it).
  std::mutex v1_fd_mutex;
  std::atomic<int> v1_fd{-1};
  std::vector<int> retired_v1_fds;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  inline ~State();

  /// The v1/ descriptor, opened if it is not yet; -1 when v1/ cannot be opened (then use full paths).
  inline int open_v1();
  /// After an entry was not found through `fd`: when the directory at v1_dir is no longer the one `fd`
  /// holds, switches to it, sets `fd` and returns true (look again). False for a real miss.
  inline bool refresh_v1(int& fd);

  std::atomic<StoreMode> mode{StoreMode::read_write};
  mutable std::mutex reason_mutex;
  std::string reason;
  std::atomic<bool> write_failure_warned{false};
  std::atomic<std::uint64_t> evictions{0};
  mutable std::mutex put_error_mutex;
  std::string put_error;  ///< Store::last_put_error()

  /// Trust in each shard directory (v1/<2 hex>), looked at once per shard per store: a lookup pays one
  /// fstatat() the first time it reads from a shard, never per read.
  static constexpr std::uint8_t kShardUnknown = 0;
  static constexpr std::uint8_t kShardTrusted = 1;
  static constexpr std::uint8_t kShardRefused = 2;
  std::array<std::atomic<std::uint8_t>, Store::kShardCount> shard_trust{};
  std::atomic<bool> refusal_warned{false};
  std::atomic<bool> trim_warned{false};
  std::atomic<bool> pch_trim_warned{false};  ///< the PCH share's trim removed PCHs in use (store_pch.cpp)

  /// Says that a shard directory or an entry file was refused: a warning the first time for this store,
  /// info level afterwards (a cache someone made group-writable would otherwise warn for every entry).
  inline void note_refusal(const std::string& why);
  /// Whether the entries of shard directory `shard` may be used and written: it is ours and not group/
  /// world-writable (as the root must be). `dir_fd` is v1/ (-1: use the path). A directory that cannot
  /// be looked at is not judged (nothing in it can be read either) and is looked at again next time.
  inline bool shard_trusted(unsigned shard, int dir_fd);
  inline bool judge_shard(unsigned shard, int dir_fd);

  /// Records why a put failed (Store::last_put_error).
  inline void record_put_error(const std::string& why);
  /// Records why a put failed and warns once per store.
  inline void fail_put(const std::string& why);
  /// Lowers the mode (read_write -> read_only -> memory_only; never raises it) and records why.
  /// `warn`: say so once, at warning level (refused roots, write trouble); otherwise at info level.
  inline void degrade(StoreMode to, const std::string& why, bool warn);
  /// Warns about a failed write once per store (later failures are logged at debug level).
  inline void warn_write_failure(const std::string& what);

  [[nodiscard]] inline std::string entry_path(const Hash128& file_hash) const;
  /// An entry's file name relative to v1/: "<2 hex>/<30 hex>.kiln", NUL-terminated.
  using RelativeName = std::array<char, 2 + 1 + 30 + detail::kEntrySuffix.size() + 1>;
  static inline RelativeName relative_name(const Hash128& file_hash) noexcept;
  /// Writes the entry path into `path` (reusing its memory).
  inline void entry_path_into(std::string& path, const Hash128& file_hash) const;

  /// How adjust_size() arrives at the new total.
  enum class Measure : std::uint8_t {
    if_unknown,  ///< add the delta to the stored total; measure only when there is no valid one
    if_due,      ///< the same, but also measure when the last measurement is older than kRemeasureInterval
    now,         ///< measure (the delta is then already on disk)
  };

  /// Appends every entry file (not temps) to `files`. Unreadable directories are skipped.
  void collect_entries(std::vector<EntryFile>& files) const;
  /// Appends every file of pch/ (.pch files, and their records with `with_records`; not temps) to `files`, each
  /// .pch with its record's mtime (EntryFile::record_mtime: its last use).
  void collect_pch(std::vector<EntryFile>& files, bool with_records) const;
  /// The mtime of the record beside the .pch at `pch_path` (its last use); the epoch when it has none or the
  /// path is not a .pch file's.
  [[nodiscard]] std::chrono::system_clock::time_point pch_record_mtime(const std::string& pch_path) const;
  /// The bytes of every entry file and every file of pch/ on disk now (a stat-only walk of the store): the
  /// size total counts both, and the trim removes the oldest of both.
  [[nodiscard]] std::uint64_t measure_entries() const;
  /// True when lock/measured is missing or older than kRemeasureInterval.
  [[nodiscard]] bool measurement_due() const noexcept;
  /// Records that the total was measured now (lock/measured's mtime).
  void mark_measured() const noexcept;
  /// Adds `delta` to the running total in lock/size under a file lock and returns the new total, or
  /// writes `set_to` (a total the caller measured). Measures the store instead as `how` says (see
  /// Measure): entries copied in or deleted behind the store's back are counted within
  /// kRemeasureInterval. nullopt on failure.
  std::optional<std::uint64_t> adjust_size(std::int64_t delta, std::optional<std::uint64_t> set_to = {},
                                           Measure how = Measure::if_unknown) const;
  /// Unlinks `path` if it is still the file described by `seen` (a concurrent writer may have renamed
  /// a fresh entry into place since). Returns true when it removed it.
  bool unlink_if_same(const std::string& path, const struct stat& seen) const;

  /// Removes temp files older than `age` whose writer is dead. Never throws.
  std::size_t sweep_temps(std::chrono::seconds age) const noexcept;
  /// LRU trim to `target_bytes` under the trim try-lock. `keep`: a path never removed (the entry a put
  /// has just written: file times are coarse, so it may tie with the oldest). Never throws.
  std::optional<TrimResult> trim(const StoreConfig& config, std::uint64_t target_bytes,
                                 const std::string* keep) noexcept;
};

}  // namespace kiln::cache
