// The local entry store (store.hpp): its construction (the root's trust, the mode), the lookup and publish
// side of Store::State (store_state.hpp), get(), put() and remove(), and the test hooks (store_hooks.hpp).
// The size accounting and trims are in store_state.cpp, the CLI's reads in store_scan.cpp, the
// configuration from the environment in store_config.cpp.
#include "kiln/cache/store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <exception>
#include <string>

#include "atomic_file.hpp"
#include "entry_io.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "mode_state.hpp"
#include "posix_util.hpp"
#include "sharded_dir.hpp"
#include "store_hooks.hpp"
#include "store_state.hpp"

namespace kiln::cache {
namespace {

using detail::distrust_reason;
using detail::errno_text;
using detail::is_permission_error;
using detail::kEntrySuffix;
using detail::kHexDigits;
using detail::make_private_dir;
using detail::make_private_dirs;
using detail::ShardedNames;
using detail::UniqueFd;

constexpr std::string_view kCacheDirTag =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by kiln (a GPU kernel cache).\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n";

/// Whether the time `ts` (CLOCK_REALTIME) lies more than `age` before now. Reads the clock itself:
/// no std::chrono clock on the hit path (its first call in a process binds clock_gettime lazily).
KILN_HOT bool older_than(const struct timespec& ts, std::chrono::seconds age) noexcept {
  struct timespec now {};
  if (::clock_gettime(CLOCK_REALTIME, &now) != 0) return false;
  return now.tv_sec - ts.tv_sec > age.count();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Store::State: the lookup and publish side

inline Store::State::~State() {
  if (const int fd = v1_fd.load(); fd >= 0) ::close(fd);
  for (const int fd : retired_v1_fds) ::close(fd);
}

inline int Store::State::open_v1() {
  const std::lock_guard lock(v1_fd_mutex);
  int fd = v1_fd.load();
  if (fd < 0 && !v1_dir.empty()) {
    fd = ::open(v1_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) v1_fd.store(fd, std::memory_order_release);
  }
  return fd;
}

inline bool Store::State::refresh_v1(int& fd) {
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

inline void Store::State::note_refusal(const std::string& why) {
  if (!refusal_warned.exchange(true)) {
    KILN_LOG(warn, "disk cache refused {} (further refusals are logged at info level)", why);
  } else {
    KILN_LOG(info, "disk cache refused {}", why);
  }
}

KILN_HOT inline bool Store::State::shard_trusted(unsigned shard, int dir_fd) {
  const std::uint8_t known = shard_trust[shard].load(std::memory_order_relaxed);
  if (known != kShardUnknown) return known == kShardTrusted;
  return judge_shard(shard, dir_fd);
}

inline bool Store::State::judge_shard(unsigned shard, int dir_fd) {
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

inline void Store::State::record_put_error(const std::string& why) {
  const std::lock_guard lock(put_error_mutex);
  put_error = why;
}

inline void Store::State::fail_put(const std::string& why) {
  record_put_error(why);
  warn_write_failure(why);
}

inline void Store::State::degrade(StoreMode to, const std::string& why, bool warn) {
  detail::degrade_mode(mode, reason_mutex, reason, "disk cache", to, why, warn);
}

inline void Store::State::warn_write_failure(const std::string& what) {
  if (!write_failure_warned.exchange(true)) {
    KILN_LOG(warn, "disk cache write failed, the entry is not stored (kernels are still served): {}", what);
  } else {
    KILN_LOG(debug, "disk cache write failed: {}", what);
  }
}

inline std::string Store::State::entry_path(const Hash128& file_hash) const {
  std::string path;
  entry_path_into(path, file_hash);
  return path;
}

KILN_HOT inline Store::State::RelativeName Store::State::relative_name(const Hash128& file_hash) noexcept {
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

inline void Store::State::entry_path_into(std::string& path, const Hash128& file_hash) const {
  const RelativeName name = relative_name(file_hash);
  path.clear();
  path.reserve(v1_dir.size() + 1 + name.size());
  path.append(v1_dir).append("/").append(name.data());
}

// The size accounting's (store_state.cpp) one member here: it shares older_than with get(), which inlines it.
bool Store::State::measurement_due() const noexcept {
  struct stat st {};
  return ::stat(measured_file.c_str(), &st) != 0 ||
         older_than(st.st_mtim, std::chrono::duration_cast<std::chrono::seconds>(Store::kRemeasureInterval));
}

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
  s.pch_dir = s.root + "/pch";
  s.pch_files = ShardedNames(s.pch_dir, kPchSuffix);
  s.pch_records = ShardedNames(s.pch_dir, kPchRecordSuffix);
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
  for (const std::string& dir : {s.v1_dir, s.lock_dir, s.pch_dir}) {
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
    if (auto problem = payload_problem(entry.vendor, entry.payload_kind, entry.payload, entry.aux.size())) {
      s.fail_put(fmt::format("entry {} refused: {}", entry.key_hash.hex(), *problem));
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
    m_state->collect_entries(files);
  } catch (...) {
    // Out of memory while listing: hand back what was found.
  }
  return files;
}

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
