#include "kiln/cache/store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "atomic_file.hpp"
#include "entry_io.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "posix_util.hpp"
#include "sharded_dir.hpp"
#include "store_hooks.hpp"

namespace kiln::cache {
namespace {

using Clock = std::chrono::system_clock;
using detail::distrust_reason;
using detail::is_permission_error;
using detail::kHexDigits;
using detail::make_private_dir;
using detail::make_private_dirs;
using detail::process_alive;
using detail::ShardedNames;
using detail::read_small;
using detail::to_time_point;
using detail::UniqueFd;

constexpr std::string_view kCacheDirTag =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by kiln (a GPU kernel cache).\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n";
constexpr std::string_view kEntrySuffix = ".kiln";
constexpr auto kTrimTempAge = std::chrono::hours(1);
/// A trim that removes entries whose mtime is this recent warns that the cap is too small.
constexpr auto kRecentUse = std::chrono::hours(1);

std::string errno_text(int error) { return std::strerror(error); }

/// Whether the time `ts` (CLOCK_REALTIME) lies more than `age` before now. Reads the clock itself:
/// no std::chrono clock on the hit path (its first call in a process binds clock_gettime lazily).
KILN_HOT bool older_than(const struct timespec& ts, std::chrono::seconds age) noexcept {
  struct timespec now {};
  if (::clock_gettime(CLOCK_REALTIME, &now) != 0) return false;
  return now.tv_sec - ts.tv_sec > age.count();
}

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  const std::string_view text(value);
  return !(text.empty() || text == "0" || text == "false" || text == "FALSE" || text == "no" || text == "off");
}

/// Calls `on_entry(EntryFile)` for every entry file and `on_temp(path, name, stat)` for every temp
/// file under <root>/v1. Unreadable directories, and links or files in place of one, are skipped.
template <class OnEntry, class OnTemp>
void walk_store(const ShardedNames& names, OnEntry&& on_entry, OnTemp&& on_temp) {
  names.for_each_shard(
      [&](std::string_view shard_name, const std::string& shard_path, int shard_fd) {
        DIR* files = ::fdopendir(::dup(shard_fd));
        if (files == nullptr) return;
        while (const dirent* file = ::readdir(files)) {
          const std::string_view name(file->d_name);
          if (name == "." || name == "..") continue;
          struct stat st {};
          if (::fstatat(shard_fd, file->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
          if (name[0] == '.') {
            if (name.find(detail::kTempMarker) != std::string_view::npos) {
              on_temp(fmt::format("{}/{}", shard_path, name), name, st);
            }
            continue;
          }
          const auto hash = names.key_of(shard_name, name);
          if (!hash) continue;
          std::string path;
          path.reserve(shard_path.size() + 1 + name.size());
          path.append(shard_path).append("/").append(name);
          on_entry(EntryFile{std::move(path), *hash, static_cast<std::uint64_t>(st.st_size), to_time_point(st.st_mtim)});
        }
        ::closedir(files);
      },
      nullptr);
}

/// The content of lock/size: the total in decimal and a newline. nullopt for anything else.
std::optional<std::uint64_t> parse_total(std::string_view text) noexcept {
  std::uint64_t total = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), total);
  if (error != std::errc{} || end == text.data() || end != text.data() + text.size() - 1 || *end != '\n') {
    return std::nullopt;
  }
  return total;
}

}  // namespace

std::string_view to_string(StoreMode mode) noexcept {
  switch (mode) {
    case StoreMode::read_write:
      return "read-write";
    case StoreMode::read_only:
      return "read-only";
    case StoreMode::memory_only:
      return "memory-only";
  }
  return "unknown";
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, value);
  if (error != std::errc{} || end != text.data() + digits) return std::nullopt;
  std::string_view suffix = text.substr(digits);
  // Accept "G", "GB", "GiB" (binary multiples, any case) and a bare "B".
  if (suffix.size() >= 2 &&
      (suffix.substr(1) == "iB" || suffix.substr(1) == "ib" || suffix.substr(1) == "B" || suffix.substr(1) == "b")) {
    suffix = suffix.substr(0, 1);
  }
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B" || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "K") {
    shift = 10;
  } else if (suffix == "m" || suffix == "M") {
    shift = 20;
  } else if (suffix == "g" || suffix == "G") {
    shift = 30;
  } else if (suffix == "t" || suffix == "T") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (shift != 0 && value > (std::uint64_t{~0ULL} >> shift)) return std::nullopt;
  return value << shift;
}

StoreConfig StoreConfig::from_environment() {
  StoreConfig config;
  // Checked here because every configuration (engine and CLI) reads the environment through this
  // function; the logger itself cannot report a bad value.
  if (const char* level = std::getenv("KILN_LOG"); level != nullptr && *level != '\0' && !log::parse_level(level)) {
    throw std::invalid_argument(fmt::format("KILN_LOG='{}': expected error, warn, info or debug", level));
  }
  const char* dir = std::getenv("KILN_CACHE_DIR");
  if (dir != nullptr && *dir == '\0') {
    // Set but empty is almost always an unset shell variable ("$CACHE"): falling back to the default
    // cache would let `kiln cache clear` empty the user's own cache.
    throw std::invalid_argument(
        "KILN_CACHE_DIR is set but empty: give a directory, or unset it to use $XDG_CACHE_HOME/kiln or "
        "~/.cache/kiln");
  }
  if (dir != nullptr) {
    config.root = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    config.root = std::filesystem::path(xdg) / "kiln";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    config.root = std::filesystem::path(home) / ".cache" / "kiln";
  } else {
    struct passwd entry {};
    struct passwd* found = nullptr;
    char buffer[4096];
    if (::getpwuid_r(::geteuid(), &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr &&
        found->pw_dir != nullptr && found->pw_dir[0] == '/') {
      config.root = std::filesystem::path(found->pw_dir) / ".cache" / "kiln";
    }
  }
  config.disabled = env_flag("KILN_CACHE_DISABLE");
  config.read_only = env_flag("KILN_CACHE_READONLY");
  if (const char* size = std::getenv("KILN_CACHE_MAXSIZE"); size != nullptr && *size != '\0') {
    const auto bytes = parse_size(size);
    if (!bytes) {
      throw std::invalid_argument(fmt::format(
          "KILN_CACHE_MAXSIZE=\"{}\" is not a size: give bytes or a K/M/G/T suffix (binary), e.g. 512M or 2G", size));
    }
    if (*bytes == 0) {
      throw std::invalid_argument(
          fmt::format("KILN_CACHE_MAXSIZE=\"{}\": the size cap must be above 0 (to keep nothing on disk, set "
                      "KILN_CACHE_DISABLE=1)",
                      size));
    }
    config.max_size = *bytes;
  }
  return config;
}

// ---------------------------------------------------------------------------------------------------
// Store state

struct Store::State {
  detail::StoreHooks hooks;  ///< test-only (store_hooks.hpp); empty outside tests
  std::string root;
  std::string v1_dir;
  ShardedNames entries;  ///< v1/<2 hex>/<30 hex>.kiln
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
  ~State() {
    if (const int fd = v1_fd.load(); fd >= 0) ::close(fd);
    for (const int fd : retired_v1_fds) ::close(fd);
  }

  /// The v1/ descriptor, opened if it is not yet; -1 when v1/ cannot be opened (then use full paths).
  int open_v1() {
    const std::lock_guard lock(v1_fd_mutex);
    int fd = v1_fd.load();
    if (fd < 0 && !v1_dir.empty()) {
      fd = ::open(v1_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) v1_fd.store(fd, std::memory_order_release);
    }
    return fd;
  }

  /// After an entry was not found through `fd`: when the directory at v1_dir is no longer the one `fd`
  /// holds, switches to it, sets `fd` and returns true (look again). False for a real miss.
  bool refresh_v1(int& fd) {
    struct stat now {};
    struct stat held {};
    if (::lstat(v1_dir.c_str(), &now) != 0 || ::fstat(fd, &held) != 0) return false;
    if (now.st_ino == held.st_ino && now.st_dev == held.st_dev) return false;
    const std::lock_guard lock(v1_fd_mutex);
    if (v1_fd.load() == fd) {
      const int fresh = ::open(v1_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fresh < 0) return false;
      retired_v1_fds.push_back(fd);
      v1_fd.store(fresh, std::memory_order_release);
      for (auto& trust : shard_trust) trust.store(kShardUnknown, std::memory_order_relaxed);  // new directories
    }
    fd = v1_fd.load();
    return true;
  }

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

  /// Says that a shard directory or an entry file was refused: a warning the first time for this store,
  /// info level afterwards (a cache someone made group-writable would otherwise warn for every entry).
  void note_refusal(const std::string& why) {
    if (!refusal_warned.exchange(true)) {
      KILN_LOG(warn, "disk cache refused {} (further refusals are logged at info level)", why);
    } else {
      KILN_LOG(info, "disk cache refused {}", why);
    }
  }

  /// Whether the entries of shard directory `shard` may be used and written: it is ours and not group/
  /// world-writable (as the root must be). `dir_fd` is v1/ (-1: use the path). A directory that cannot
  /// be looked at is not judged (nothing in it can be read either) and is looked at again next time.
  KILN_HOT bool shard_trusted(unsigned shard, int dir_fd) {
    const std::uint8_t known = shard_trust[shard].load(std::memory_order_relaxed);
    if (known != kShardUnknown) return known == kShardTrusted;
    return judge_shard(shard, dir_fd);
  }

  bool judge_shard(unsigned shard, int dir_fd) {
    const char name[3] = {kHexDigits[shard >> 4], kHexDigits[shard & 0xF], '\0'};
    const std::string path = v1_dir + "/" + name;
    struct stat st {};
    if ((dir_fd >= 0 ? ::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) : ::lstat(path.c_str(), &st)) != 0)
      return true;
    const std::string why = distrust_reason("shard directory", path, st);
    if (why.empty()) {
      shard_trust[shard].store(kShardTrusted, std::memory_order_relaxed);
      return true;
    }
    if (shard_trust[shard].exchange(kShardRefused) != kShardRefused) {
      note_refusal(
          fmt::format("{}: its entries are not used and nothing is written into it (make it mode 0700, "
                      "or clear the cache)",
                      why));
    }
    return false;
  }

  /// Records why a put failed (Store::last_put_error).
  void record_put_error(const std::string& why) {
    const std::lock_guard lock(put_error_mutex);
    put_error = why;
  }
  /// Records why a put failed and warns once per store.
  void fail_put(const std::string& why) {
    record_put_error(why);
    warn_write_failure(why);
  }

  /// Lowers the mode (read_write -> read_only -> memory_only; never raises it) and records why.
  /// `warn`: say so once, at warning level (refused roots, write trouble); otherwise at info level.
  void degrade(StoreMode to, const std::string& why, bool warn) {
    StoreMode current = mode.load();
    while (static_cast<int>(current) < static_cast<int>(to)) {
      if (mode.compare_exchange_weak(current, to)) {
        {
          const std::lock_guard lock(reason_mutex);
          reason = why;
        }
        if (warn) {
          KILN_LOG(warn, "disk cache is {}: {}", to_string(to), why);
        } else {
          KILN_LOG(info, "disk cache is {}: {}", to_string(to), why);
        }
        return;
      }
    }
  }

  /// Warns about a failed write once per store (later failures are logged at debug level).
  void warn_write_failure(const std::string& what) {
    if (!write_failure_warned.exchange(true)) {
      KILN_LOG(warn, "disk cache write failed, the entry is not stored (kernels are still served): {}", what);
    } else {
      KILN_LOG(debug, "disk cache write failed: {}", what);
    }
  }

  [[nodiscard]] std::string entry_path(const Hash128& file_hash) const {
    std::string path;
    entry_path_into(path, file_hash);
    return path;
  }

  /// An entry's file name relative to v1/: "<2 hex>/<30 hex>.kiln", NUL-terminated.
  using RelativeName = std::array<char, 2 + 1 + 30 + kEntrySuffix.size() + 1>;
  KILN_HOT static RelativeName relative_name(const Hash128& file_hash) noexcept {
    char hex[32];
    for (int i = 0; i < 16; ++i) {
      hex[15 - i] = kHexDigits[(file_hash.high >> (4 * i)) & 0xF];
      hex[31 - i] = kHexDigits[(file_hash.low >> (4 * i)) & 0xF];
    }
    RelativeName name{};
    char* out = std::copy_n(hex, 2, name.data());
    *out++ = '/';
    out = std::copy_n(hex + 2, 30, out);
    out = std::copy(kEntrySuffix.begin(), kEntrySuffix.end(), out);
    *out = '\0';
    return name;
  }

  /// Writes the entry path into `path` (reusing its memory).
  void entry_path_into(std::string& path, const Hash128& file_hash) const {
    const RelativeName name = relative_name(file_hash);
    path.clear();
    path.reserve(v1_dir.size() + 1 + name.size());
    path.append(v1_dir).append("/").append(name.data());
  }

  /// How adjust_size() arrives at the new total.
  enum class Measure : std::uint8_t {
    if_unknown,  ///< add the delta to the stored total; measure only when there is no valid one
    if_due,      ///< the same, but also measure when the last measurement is older than kRemeasureInterval
    now,         ///< measure (the delta is then already on disk)
  };

  /// The bytes of every entry file on disk now (a stat-only walk of the store).
  [[nodiscard]] std::uint64_t measure_entries() const {
    std::uint64_t total = 0;
    walk_store(
        entries, [&total](const EntryFile& file) { total += file.size; },
        [](const std::string&, std::string_view, const struct stat&) {});
    return total;
  }

  /// True when lock/measured is missing or older than kRemeasureInterval.
  [[nodiscard]] bool measurement_due() const noexcept {
    struct stat st {};
    return ::stat(measured_file.c_str(), &st) != 0 ||
           older_than(st.st_mtim, std::chrono::duration_cast<std::chrono::seconds>(Store::kRemeasureInterval));
  }

  /// Records that the total was measured now (lock/measured's mtime).
  void mark_measured() const noexcept {
    const UniqueFd fd(::open(measured_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd) (void)::futimens(fd.get(), nullptr);
  }

  /// Adds `delta` to the running total in lock/size under a file lock and returns the new total, or
  /// writes `set_to` (a total the caller measured). Measures the store instead as `how` says (see
  /// Measure): entries copied in or deleted behind the store's back are counted within
  /// kRemeasureInterval. nullopt on failure.
  std::optional<std::uint64_t> adjust_size(std::int64_t delta, std::optional<std::uint64_t> set_to = {},
                                           Measure how = Measure::if_unknown) const {
    const UniqueFd fd(::open(size_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd || ::flock(fd.get(), LOCK_EX) != 0) return std::nullopt;
    std::uint64_t total = 0;
    bool measured = true;
    if (set_to) {
      total = *set_to;
    } else if (const auto stored = parse_total(read_small(fd.get(), 32));
               stored && how != Measure::now && !(how == Measure::if_due && measurement_due())) {
      total = delta < 0 ? *stored - std::min(*stored, static_cast<std::uint64_t>(-delta))
                        : *stored + static_cast<std::uint64_t>(delta);
      measured = false;
    } else {
      total = measure_entries();
    }
    const std::string text = fmt::format("{}\n", total);
    if (::pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return std::nullopt;
    if (::ftruncate(fd.get(), static_cast<off_t>(text.size())) != 0) return std::nullopt;
    if (measured) mark_measured();
    return total;
  }

  /// Unlinks `path` if it is still the file described by `seen` (a concurrent writer may have renamed
  /// a fresh entry into place since). Returns true when it removed it.
  bool unlink_if_same(const std::string& path, const struct stat& seen) const {
    if (!detail::unlink_if_same(path, seen)) return false;
    if (S_ISREG(seen.st_mode)) adjust_size(-static_cast<std::int64_t>(seen.st_size));
    return true;
  }

  /// Removes temp files older than `age` whose writer is dead. Never throws.
  std::size_t sweep_temps(std::chrono::seconds age) const noexcept {
    if (mode.load() != StoreMode::read_write) return 0;
    std::size_t removed = 0;
    try {
      const auto now = Clock::now();
      walk_store(
          entries, [](const EntryFile&) {},
          [&](const std::string& path, std::string_view name, const struct stat& st) {
            if (now - to_time_point(st.st_mtim) < age) return;
            const long owner = detail::temp_file_owner(name);
            if (owner > 0 && owner != ::getpid() && process_alive(owner)) return;
            if (owner == ::getpid() && age < kTrimTempAge) return;  // possibly one of our own writers
            if (::unlink(path.c_str()) == 0) ++removed;
          });
    } catch (...) {
      // Out of memory: stop sweeping.
    }
    return removed;
  }

  /// LRU trim to `target_bytes` under the trim try-lock. `keep`: a path never removed (the entry a put
  /// has just written: file times are coarse, so it may tie with the oldest). Never throws.
  std::optional<TrimResult> trim(const StoreConfig& config, std::uint64_t target_bytes,
                                 const std::string* keep) noexcept {
    if (mode.load() != StoreMode::read_write) return std::nullopt;
    try {
      const UniqueFd lock(::open(trim_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return std::nullopt;  // another process trims
      (void)sweep_temps(std::chrono::duration_cast<std::chrono::seconds>(kTrimTempAge));
      std::vector<EntryFile> files;
      walk_store(
          entries, [&files](EntryFile file) { files.push_back(std::move(file)); },
          [](const std::string&, std::string_view, const struct stat&) {});
      TrimResult result;
      for (const EntryFile& file : files) result.bytes_before += file.size;
      std::uint64_t total = result.bytes_before;
      const auto recent_since = Clock::now() - kRecentUse;
      std::size_t recent = 0;  // removed entries written or used within kRecentUse
      if (total > target_bytes) {
        std::sort(files.begin(), files.end(), [](const EntryFile& a, const EntryFile& b) {
          return a.mtime != b.mtime ? a.mtime < b.mtime : a.path < b.path;
        });
        if (hooks.trim_scan) hooks.trim_scan(files);
        for (const EntryFile& file : files) {
          if (total <= target_bytes) break;
          if (keep != nullptr && file.path == *keep) continue;
          struct stat now {};
          if (::lstat(file.path.c_str(), &now) != 0) {  // already gone
            total -= file.size;
            continue;
          }
          // Used (touched) or rewritten since the scan: it is no longer among the least recently used.
          if (to_time_point(now.st_mtim) != file.mtime || static_cast<std::uint64_t>(now.st_size) != file.size) {
            continue;
          }
          if (::unlink(file.path.c_str()) != 0) continue;
          total -= file.size;
          ++result.removed;
          if (file.mtime > recent_since) ++recent;
        }
      }
      result.bytes_after = total;
      evictions += result.removed;
      (void)adjust_size(0, total);
      if (result.removed != 0) {
        KILN_LOG(info, "disk cache trimmed: {} entries removed, {} -> {} bytes", result.removed, result.bytes_before,
                 result.bytes_after);
      }
      // A cap below the working set evicts what was just compiled: say so (once per store) rather than
      // let every run recompile without a word. Only for the trims puts start; an explicit trim is asked for.
      if (recent != 0 && keep != nullptr) {
        const std::string what = fmt::format(
            "disk cache size cap {} bytes (KILN_CACHE_MAXSIZE) is smaller than the kernels in use: a trim removed {} "
            "of {} entries written or used within the last hour, which will be compiled again",
            config.max_size, recent, result.removed);
        if (!trim_warned.exchange(true)) {
          KILN_LOG(warn, "{} (raise the cap)", what);
        } else {
          KILN_LOG(info, "{}", what);
        }
      }
      return result;
    } catch (...) {
      return std::nullopt;
    }
  }
};

// ---------------------------------------------------------------------------------------------------
// Store

Store::Store(StoreConfig config) : m_config(std::move(config)), m_state(std::make_unique<State>()) {
  State& s = *m_state;
  s.hooks = detail::current_store_hooks();
  if (m_config.disabled) {
    s.degrade(StoreMode::memory_only, "disabled (KILN_CACHE_DISABLE or configuration)", false);
    return;
  }
  if (m_config.root.empty()) {
    s.degrade(StoreMode::memory_only, "no cache root (set KILN_CACHE_DIR, XDG_CACHE_HOME or HOME)", true);
    return;
  }
  s.root = m_config.root.lexically_normal().string();
  while (s.root.size() > 1 && s.root.back() == '/') s.root.pop_back();
  s.v1_dir = s.root + "/v1";
  s.entries = ShardedNames(s.v1_dir, kEntrySuffix);
  s.lock_dir = s.root + "/lock";
  s.size_file = s.lock_dir + "/size";
  s.trim_lock = s.lock_dir + "/trim";
  s.measured_file = s.lock_dir + "/measured";

  if (!m_config.read_only) {
    if (const int error = make_private_dirs(s.root); error != 0 && !is_permission_error(error)) {
      s.degrade(StoreMode::memory_only, fmt::format("cannot create cache root {}: {}", s.root, errno_text(error)),
                true);
      return;
    }
  }
  struct stat st {};
  if (::stat(s.root.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      // Read-only (or not creatable) and absent: nothing to read, nothing to write.
      s.degrade(m_config.read_only ? StoreMode::read_only : StoreMode::memory_only,
                fmt::format("cache root {} does not exist", s.root), !m_config.read_only);
    } else {
      s.degrade(StoreMode::memory_only, fmt::format("cannot stat cache root {}: {}", s.root, errno_text(error)), true);
    }
    return;
  }
  // A cached binary is code that runs on the GPU: only trust a tree nobody else can write to.
  if (std::string why = distrust_reason("cache root", s.root, st); !why.empty()) {
    s.root_refused = true;
    s.degrade(StoreMode::memory_only, fmt::format("refused: {}", why), true);
    return;
  }
  for (const std::string& dir : {s.v1_dir, s.lock_dir}) {
    struct stat sub {};
    if (::lstat(dir.c_str(), &sub) != 0) continue;
    if (std::string why = distrust_reason("cache directory", dir, sub); !why.empty()) {
      s.root_refused = true;
      s.degrade(StoreMode::memory_only, fmt::format("refused: {}", why), true);
      return;
    }
  }
  (void)s.open_v1();  // the directory every lookup opens entries relative to (again below if it is new)
  if (m_config.read_only) {
    s.degrade(StoreMode::read_only, "read-only by configuration (KILN_CACHE_READONLY)", false);
    return;
  }
  if (::access(s.root.c_str(), W_OK | X_OK) != 0) {
    s.degrade(StoreMode::read_only, fmt::format("cache root {} is not writable: {}", s.root, errno_text(errno)), false);
    return;
  }
  for (const std::string& dir : {s.v1_dir, s.lock_dir}) {
    if (const int error = make_private_dir(dir); error != 0) {
      s.degrade(is_permission_error(error) ? StoreMode::read_only : StoreMode::memory_only,
                fmt::format("cannot create {}: {}", dir, errno_text(error)), !is_permission_error(error));
      return;
    }
  }
  const std::string tag = s.root + "/CACHEDIR.TAG";
  if (::access(tag.c_str(), F_OK) != 0) {
    detail::AtomicFile file(tag);
    if (file.write(std::as_bytes(std::span(kCacheDirTag.data(), kCacheDirTag.size())))) (void)file.commit();
  }
  (void)s.open_v1();
}

Store::~Store() = default;

StoreMode Store::mode() const noexcept { return m_state->mode.load(); }

std::string Store::mode_reason() const {
  const std::lock_guard lock(m_state->reason_mutex);
  return m_state->reason;
}

std::uint64_t Store::evictions() const noexcept { return m_state->evictions.load(); }

bool Store::refused() const noexcept { return m_state->root_refused; }

std::string Store::last_put_error() const {
  const std::lock_guard lock(m_state->put_error_mutex);
  return m_state->put_error;
}

std::optional<std::uint64_t> Store::remeasure_size() noexcept {
  try {
    if (m_state->mode.load() != StoreMode::read_write) return std::nullopt;
    return m_state->adjust_size(0, std::nullopt, State::Measure::now);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<std::uint64_t> Store::size_estimate() const noexcept {
  try {
    const UniqueFd fd(::open(m_state->size_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd || ::flock(fd.get(), LOCK_SH) != 0) return std::nullopt;
    return parse_total(read_small(fd.get(), 32));
  } catch (...) {
    return std::nullopt;
  }
}

std::filesystem::path Store::entry_path(const Hash128& key) const {
  return m_state->entry_path(m_state->hooks.file_name ? m_state->hooks.file_name(key) : key);
}

KILN_HOT LookupResult Store::get(const Hash128& key, std::string_view canonical_key) {
  State& s = *m_state;
  const StoreMode mode = s.mode.load();
  if (mode == StoreMode::memory_only) return LookupResult{LookupOutcome::disabled, std::nullopt, {}};
  try {
    // The name relative to v1/ is built on the stack, and the full path only for messages and
    // removal: a hit allocates nothing but the Entry it returns.
    const Hash128 file_hash = s.hooks.file_name ? s.hooks.file_name(key) : key;
    const State::RelativeName relative = State::relative_name(file_hash);
    const auto full_path = [&] { return s.v1_dir + "/" + relative.data(); };
    // O_NOFOLLOW: a symbolic link planted at an entry path is never followed. O_NONBLOCK: a FIFO
    // planted there cannot block us (it is rejected as not a regular file below). Opened relative to
    // v1/ (see State::v1_fd).
    constexpr int kOpenFlags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int dir_fd = s.v1_fd.load(std::memory_order_acquire);
    if (dir_fd < 0) dir_fd = s.open_v1();
    const auto open_entry = [&] {
      return dir_fd >= 0 ? ::openat(dir_fd, relative.data(), kOpenFlags) : ::open(full_path().c_str(), kOpenFlags);
    };
    int opened = open_entry();
    int open_error = opened < 0 ? errno : 0;
    if (opened < 0 && open_error == ENOENT && dir_fd >= 0 && s.refresh_v1(dir_fd)) {
      opened = open_entry();
      open_error = opened < 0 ? errno : 0;
    }
    const UniqueFd fd(opened);
    if (!fd && (open_error == ENOENT || open_error == ENOTDIR))
      return LookupResult{LookupOutcome::miss, std::nullopt, {}};
    // Something is there: use (or remove) it only when its shard directory may be trusted.
    if (!s.shard_trusted(static_cast<unsigned>(file_hash.high >> 56), dir_fd)) {
      return LookupResult{
          LookupOutcome::miss, std::nullopt,
          fmt::format("{}: its shard directory is refused (not ours, or group/world-writable)", full_path())};
    }
    if (!fd) {
      const int error = open_error;
      const std::string path = full_path();
      if (error == ELOOP) {
        const std::string why = fmt::format("{} is a symbolic link: refused", path);
        KILN_LOG(warn, "disk cache: {}", why);
        struct stat link {};
        if (mode == StoreMode::read_write && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode) &&
            ::unlink(path.c_str()) == 0) {
          return LookupResult{LookupOutcome::corrupt_removed, std::nullopt, why};
        }
        return LookupResult{LookupOutcome::miss, std::nullopt, why};
      }
      const std::string why = fmt::format("cannot open {}: {}", path, errno_text(error));
      if (is_permission_error(error)) s.degrade(StoreMode::read_only, why, false);
      return LookupResult{LookupOutcome::io_error, std::nullopt, why};
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      const int error = errno;
      return LookupResult{LookupOutcome::io_error, std::nullopt,
                          fmt::format("cannot stat {}: {}", full_path(), errno_text(error))};
    }
    std::string content_error;
    if (!S_ISREG(st.st_mode)) {
      content_error = "not a regular file";
    } else if (st.st_uid != s.euid) {
      content_error = fmt::format("owned by uid {}, not by the current user", st.st_uid);
    } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      // Others could have written it: not used, not removed (the put after the compile replaces it).
      const std::string why =
          fmt::format("entry {}: it is {}-writable (mode {:04o}); it is not used, and a new compile replaces it",
                      full_path(), (st.st_mode & S_IWOTH) != 0 ? "world" : "group", st.st_mode & 07777);
      s.note_refusal(why);
      return LookupResult{LookupOutcome::miss, std::nullopt, why};
    } else {
      const detail::ExpectedKey expected{key, canonical_key};
      detail::FileParseResult parsed =
          detail::parse_file(fd.get(), static_cast<std::uint64_t>(st.st_size), m_config.limits, &expected);
      if (auto* entry = std::get_if<Entry>(&parsed)) {
        // LRU age: touch at most once per kTouchInterval, so hits stay read-only on disk.
        if (mode == StoreMode::read_write && older_than(st.st_mtim, kTouchInterval))
          (void)::futimens(fd.get(), nullptr);
        return LookupResult{LookupOutcome::hit, std::move(*entry), {}};
      }
      if (auto* failure = std::get_if<detail::IoFailure>(&parsed)) {
        // An I/O error must never delete an entry: a transient EIO would destroy a valid one.
        return LookupResult{LookupOutcome::io_error, std::nullopt, fmt::format("{}: {}", full_path(), failure->what)};
      }
      content_error = std::get<ContentError>(parsed).reason;
    }
    const std::string path = full_path();
    const std::string why = fmt::format("{}: {}", path, content_error);
    if (mode == StoreMode::read_write && s.unlink_if_same(path, st)) {
      KILN_LOG(info, "disk cache: removed a bad entry: {}", why);
      return LookupResult{LookupOutcome::corrupt_removed, std::nullopt, why};
    }
    return LookupResult{LookupOutcome::miss, std::nullopt, fmt::format("{} (not removed)", why)};
  } catch (const std::exception& error) {
    return LookupResult{LookupOutcome::io_error, std::nullopt, error.what()};
  }
}

bool Store::put(const Entry& entry) {
  State& s = *m_state;
  if (const StoreMode mode = s.mode.load(); mode != StoreMode::read_write) {
    try {
      s.record_put_error(fmt::format("the disk cache is {}: {}", to_string(mode), mode_reason()));
    } catch (...) {
      // Out of memory: the reason stays what it was.
    }
    return false;
  }
  try {
    if (hash128(entry.canonical_key, kKeySeed) != entry.key_hash) {
      s.fail_put(fmt::format("entry {} refused: key_hash is not the hash of its canonical key", entry.key_hash.hex()));
      return false;
    }
    // Nothing is written that this store's own readers would reject (it would be read back as damaged,
    // removed and compiled again on every run): the key first, before it is copied.
    if (entry.canonical_key.size() > m_config.limits.max_canonical_bytes) {
      s.fail_put(fmt::format("entry {} refused: {}", entry.key_hash.hex(),
                             canonical_key_too_long(entry.canonical_key.size(), m_config.limits.max_canonical_bytes)));
      return false;
    }
    const std::vector<std::byte> bytes = serialize(entry);
    // Then every other length, with the reader's own checks (the header parser: sizes and limits).
    if (auto checked = detail::parse_header(bytes, bytes.size(), detail::HeaderParts::texts, m_config.limits);
        const auto* error = std::get_if<ContentError>(&checked)) {
      s.fail_put(fmt::format("entry {} refused: {}", entry.key_hash.hex(), error->reason));
      return false;
    }
    const Hash128 file_hash = s.hooks.file_name ? s.hooks.file_name(entry.key_hash) : entry.key_hash;
    const std::string path = s.entry_path(file_hash);
    const std::string shard_dir = path.substr(0, path.rfind('/'));
    int error = make_private_dir(shard_dir);
    if (error == ENOENT) {  // v1/ itself was removed (e.g. the cache was cleared): recreate it.
      error = make_private_dir(s.v1_dir);
      if (error == 0) error = make_private_dir(shard_dir);
    }
    if (error != 0) {
      const std::string why = fmt::format("cannot create {}: {}", shard_dir, errno_text(error));
      if (is_permission_error(error)) {
        s.record_put_error(why);
        s.degrade(StoreMode::read_only, why, true);
      } else {
        s.fail_put(why);
      }
      return false;
    }
    if (!s.shard_trusted(static_cast<unsigned>(file_hash.high >> 56), s.v1_fd.load(std::memory_order_acquire))) {
      s.fail_put(
          fmt::format("entry {} not written: its shard directory {} is refused (not ours, or group/world-"
                      "writable)",
                      entry.key_hash.hex(), shard_dir));
      return false;
    }
    struct stat previous {};
    std::uint64_t replaced_bytes = 0;
    {
      detail::AtomicFile file(path);
      if (file.write(bytes)) {
        if (::lstat(path.c_str(), &previous) == 0 && S_ISREG(previous.st_mode)) {
          replaced_bytes = static_cast<std::uint64_t>(previous.st_size);
        }
        (void)file.commit();
      }
      if (file.error() != 0) {
        if (is_permission_error(file.error())) {
          s.record_put_error(file.error_text());
          s.degrade(StoreMode::read_only, file.error_text(), true);
        } else {
          s.fail_put(file.error_text());
        }
        return false;  // ~AtomicFile removes the temp file.
      }
    }
    const auto total =
        s.adjust_size(static_cast<std::int64_t>(bytes.size()) - static_cast<std::int64_t>(replaced_bytes), std::nullopt,
                      State::Measure::if_due);
    if (total && *total > m_config.max_size) (void)s.trim(m_config, m_config.max_size / 10 * 9, &path);
    return true;
  } catch (const std::exception& error) {
    try {
      s.fail_put(fmt::format("entry {}: {}", entry.key_hash.hex(), error.what()));
    } catch (...) {
      // Out of memory while reporting: the put still fails cleanly.
    }
    return false;
  }
}

bool Store::remove(const Hash128& key) noexcept {
  try {
    if (m_state->mode.load() != StoreMode::read_write) return false;
    const std::string path = entry_path(key).string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return false;
    return m_state->unlink_if_same(path, st);
  } catch (...) {
    return false;
  }
}

std::vector<EntryFile> Store::list() const {
  std::vector<EntryFile> files;
  if (m_state->v1_dir.empty()) return files;
  try {
    walk_store(
        m_state->entries, [&files](EntryFile file) { files.push_back(std::move(file)); },
        [](const std::string&, std::string_view, const struct stat&) {});
  } catch (...) {
    // Out of memory while listing: hand back what was found.
  }
  return files;
}

namespace {

/// The first read of a header scan: a whole small entry, and always the fixed part, target and compiler.
constexpr std::size_t kHeaderReadBytes = 16 * 1024;

/// The buffer a shard's header reads go to. Owned by one scan_shard call (not the per-thread scratch
/// buffer of parse_file): the views handed to the callback stay valid whatever the callback reads.
class HeaderBuffer {
 public:
  std::byte* get(std::size_t bytes) {
    if (bytes > m_capacity) {
      m_data.reset();
      m_capacity = 0;
      m_data = std::make_unique_for_overwrite<std::byte[]>(bytes);
      m_capacity = bytes;
    }
    return m_data.get();
  }

 private:
  std::unique_ptr<std::byte[]> m_data;
  std::size_t m_capacity = 0;
};

/// Reads up to `count` bytes at `offset`, retrying EINTR; stops early only at the end of the file.
/// Returns the bytes read, or -1 with errno set.
ssize_t pread_full(int fd, std::byte* out, std::size_t count, std::uint64_t offset) noexcept {
  std::size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd, out + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

/// What a thing in a shard directory is, for StrayFile::kind.
std::string_view file_kind(mode_t mode) noexcept {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device";
  return "special file";
}

/// Why Store::get refuses an entry file whatever its bytes (not ours, or group/world-writable); empty
/// when it does not.
std::string entry_refusal(const struct stat& st, uid_t euid) {
  if (st.st_uid != euid) return fmt::format("owned by uid {}, not by the current user", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{}-writable (mode {:04o})", (st.st_mode & S_IWOTH) != 0 ? "world" : "group",
                       st.st_mode & 07777);
  }
  return {};
}

/// One entry file of a scan, opened relative to its shard directory. Calls fn unless the file is
/// not one list() would list (gone since readdir, a link, not a regular file).
void scan_file(int dir_fd, const char* name, ScanDepth depth, bool with_mtime, const Limits& limits, uid_t euid,
               HeaderBuffer& header_buffer, ScannedEntry& scanned, const std::function<void(const ScannedEntry&)>& fn) {
  const UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  std::string error;
  std::string refusal;
  auto report = [&](std::string why, bool io = false) {
    error = std::move(why);
    scanned.error = error;
    scanned.io_error = io;
    fn(scanned);
  };
  if (!fd) {
    const int open_error = errno;
    if (open_error == ENOENT || open_error == ELOOP) return;  // removed since readdir, or a link: list() skips both
    struct stat st {};                                        // what list() would say of it
    if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISREG(st.st_mode)) return;
      scanned.size = static_cast<std::uint64_t>(st.st_size);
      scanned.mtime = to_time_point(st.st_mtim);
    }
    return report(fmt::format("cannot open: {}", errno_text(open_error)), true);
  }
  bool size_known = false;
  auto stat_file = [&]() -> bool {  // false: skip (not regular) or reported
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      report(fmt::format("cannot stat: {}", errno_text(errno)), true);
      return false;
    }
    if (!S_ISREG(st.st_mode)) return false;
    scanned.size = static_cast<std::uint64_t>(st.st_size);
    scanned.mtime = to_time_point(st.st_mtim);
    size_known = true;
    if (!scanned.shard_refused) {
      refusal = entry_refusal(st, euid);
      scanned.refused = refusal;
    }
    return true;
  };
  if ((with_mtime || depth == ScanDepth::entry) && !stat_file()) return;

  if (depth == ScanDepth::entry) {
    detail::FileParseResult parsed = detail::parse_file(fd.get(), scanned.size, limits, nullptr);
    if (const auto* entry = std::get_if<Entry>(&parsed)) {
      scanned.entry = entry;
      fn(scanned);
      scanned.entry = nullptr;
      return;
    }
    if (const auto* failure = std::get_if<detail::IoFailure>(&parsed))
      return report("I/O error: " + failure->what, true);
    return report(std::get<ContentError>(std::move(parsed)).reason);
  }

  // A header: one read. Without an fstat, a read that stops short of the buffer stopped at the end of the
  // file (a regular file), so it gave the size; a content error found with that size is re-checked
  // against fstat before it is reported.
  const detail::HeaderParts parts = depth == ScanDepth::lane ? detail::HeaderParts::texts : detail::HeaderParts::all;
  std::byte* buffer = header_buffer.get(kHeaderReadBytes);
  std::size_t want =
      size_known ? static_cast<std::size_t>(std::min<std::uint64_t>(scanned.size, kHeaderReadBytes)) : kHeaderReadBytes;
  ssize_t got = -1;
  if (size_known) {
    got = pread_full(fd.get(), buffer, want, 0);
  } else {
    do {
      got = ::read(fd.get(), buffer, want);
    } while (got < 0 && errno == EINTR);
  }
  if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
  if (!size_known) {
    if (static_cast<std::size_t>(got) < want) {
      scanned.size = static_cast<std::uint64_t>(got);
    } else if (!stat_file()) {
      return;
    }
  }
  auto length = static_cast<std::size_t>(got);
  for (;;) {
    detail::HeaderParseResult parsed =
        detail::parse_header(std::span<const std::byte>(buffer, length), scanned.size, parts, limits);
    if (const auto* header = std::get_if<EntryHeaderView>(&parsed)) {
      scanned.header = header;
      fn(scanned);
      scanned.header = nullptr;
      return;
    }
    if (const auto* need = std::get_if<detail::NeedBytes>(&parsed)) {
      // A header longer than the first read (a long canonical key): read it whole. The length was
      // checked against the limits and the file size before it was asked for.
      want = static_cast<std::size_t>(need->bytes);
      buffer = header_buffer.get(want);
      got = pread_full(fd.get(), buffer, want, 0);
      if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
      if (static_cast<std::size_t>(got) < want) {
        return report(fmt::format("truncated while reading: file shorter than its {} bytes", scanned.size));
      }
      length = want;
      continue;
    }
    if (!size_known) {
      // The size came from the read: make sure before calling the entry damaged.
      const std::uint64_t seen = scanned.size;
      if (!stat_file()) return;
      if (scanned.size != seen) {
        want = static_cast<std::size_t>(std::min<std::uint64_t>(scanned.size, kHeaderReadBytes));
        got = pread_full(fd.get(), buffer, want, 0);
        if (got < 0) return report(fmt::format("I/O error: read failed: {}", errno_text(errno)), true);
        length = static_cast<std::size_t>(got);
        continue;
      }
    }
    return report(std::get<ContentError>(std::move(parsed)).reason);
  }
}

}  // namespace

void Store::scan_shard(unsigned shard, ScanDepth depth, bool with_mtime,
                       const std::function<void(const ScannedEntry&)>& fn,
                       const std::function<void(const StrayFile&)>& on_stray) const {
  const State& s = *m_state;
  if (s.v1_dir.empty() || shard >= kShardCount) return;
  const char shard_name[2] = {kHexDigits[shard >> 4], kHexDigits[shard & 0xF]};
  std::string path;
  path.reserve(s.v1_dir.size() + 4 + 30 + kEntrySuffix.size());
  path.append(s.v1_dir).append("/").append(shard_name, 2);
  // A link or any other non-directory in place of the shard directory is reported as what it is, never
  // entered (its target's files would be taken for this cache's, and removed by verify --fix).
  const ShardedNames::Opened opened = s.entries.open_shard(path);
  const int dir_fd = opened.fd;
  if (dir_fd < 0) {
    if (opened.is_link_or_file && on_stray) {
      const struct stat& st = opened.in_place;
      on_stray(StrayFile{path, file_kind(st.st_mode), std::nullopt, static_cast<std::uint64_t>(st.st_size),
                         to_time_point(st.st_mtim)});
    }
    return;
  }
  path.append("/");
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return;
  }
  struct Closer {
    DIR* dir;
    ~Closer() { ::closedir(dir); }
  } closer{dir};
  const std::size_t base = path.size();
  // The directory itself, judged as Store::get judges it: its entries are refused with it.
  std::string shard_refusal;
  if (struct stat st{}; ::fstat(dir_fd, &st) == 0) {
    shard_refusal = distrust_reason("shard directory", path.substr(0, base - 1), st);
  }
  const uid_t euid = ::geteuid();
  HeaderBuffer header_buffer;
  while (const dirent* file = ::readdir(dir)) {
    const std::string_view name(file->d_name);
    if (name.empty() || name[0] == '.') continue;  // ".", "..", temp files (swept by trims), hidden files
    const auto hash = s.entries.key_of(std::string_view(shard_name, 2), name);
    struct stat st {};
    bool regular = file->d_type == DT_REG;
    bool stat_known = false;
    if (file->d_type == DT_UNKNOWN) {
      if (::fstatat(dir_fd, file->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      regular = S_ISREG(st.st_mode);
      stat_known = true;
    }
    if (!hash || !regular) {
      // Not an entry file: a link, FIFO, device or directory at an entry path, or a stray name.
      if (!on_stray || (!stat_known && ::fstatat(dir_fd, file->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)) continue;
      path.resize(base);
      path.append(name);
      on_stray(StrayFile{path, file_kind(st.st_mode), hash, static_cast<std::uint64_t>(st.st_size),
                         to_time_point(st.st_mtim)});
      continue;
    }
    path.resize(base);
    path.append(name);
    ScannedEntry scanned;
    scanned.path = path;
    scanned.file_hash = *hash;
    if (!shard_refusal.empty()) {
      scanned.refused = shard_refusal;
      scanned.shard_refused = true;
    }
    scan_file(dir_fd, file->d_name, depth, with_mtime, m_config.limits, euid, header_buffer, scanned, fn);
  }
}

std::variant<Entry, ContentError> Store::read_file(const std::filesystem::path& path) const {
  try {
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return ContentError{fmt::format("cannot open: {}", errno_text(errno))};
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ContentError{fmt::format("cannot stat: {}", errno_text(errno))};
    if (!S_ISREG(st.st_mode)) return ContentError{"not a regular file"};
    detail::FileParseResult parsed =
        detail::parse_file(fd.get(), static_cast<std::uint64_t>(st.st_size), m_config.limits, nullptr);
    if (auto* entry = std::get_if<Entry>(&parsed)) return std::move(*entry);
    if (auto* failure = std::get_if<detail::IoFailure>(&parsed)) return ContentError{"I/O error: " + failure->what};
    return std::get<ContentError>(std::move(parsed));
  } catch (const std::exception& error) {
    return ContentError{error.what()};
  }
}

std::optional<TrimResult> Store::trim(std::uint64_t target_bytes) {
  return m_state->trim(m_config, target_bytes, nullptr);
}

std::size_t Store::sweep_temps(std::chrono::seconds age) { return m_state->sweep_temps(age); }

CompileLease Store::acquire_lease(const Hash128& key, std::chrono::milliseconds max_wait) {
  if (m_state->mode.load() != StoreMode::read_write) return CompileLease{};
  try {
    return acquire_compile_lease(m_state->lock_dir, key, entry_path(key).string(), max_wait);
  } catch (...) {
    return CompileLease{};  // out of memory building the entry path: compile without a lease
  }
}

}  // namespace kiln::cache

namespace kiln::cache::detail {
namespace {
StoreHooks& hooks_in_effect() {
  static StoreHooks hooks;
  return hooks;
}
}  // namespace
void set_store_hooks(StoreHooks hooks) { hooks_in_effect() = std::move(hooks); }
StoreHooks current_store_hooks() { return hooks_in_effect(); }
}  // namespace kiln::cache::detail
