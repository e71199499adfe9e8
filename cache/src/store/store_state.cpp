// The store's size accounting (the running total in lock/size, measured again when it is due), its temp
// sweeps and its LRU trims: Store::State's side (store_state.hpp) and the Store functions over it.
#include "store_state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "atomic_file.hpp"
#include "kiln/base/log.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

using Clock = std::chrono::system_clock;
using detail::process_alive;
using detail::read_small;
using detail::ShardedNames;
using detail::to_time_point;
using detail::UniqueFd;

constexpr auto kTrimTempAge = std::chrono::hours(1);
using detail::kRecentUse;

/// Calls `on_entry(EntryFile)` for every entry file and `on_temp(path, name, stat)` for every temp
/// file under <root>/v1. Unreadable directories, and links or files in place of one, are skipped.
/// `also`: a second name pattern in the same folder (pch/'s records beside its .pch files).
template <class OnEntry, class OnTemp>
void walk_store(const ShardedNames& names, OnEntry&& on_entry, OnTemp&& on_temp, const ShardedNames* also = nullptr) {
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
          auto hash = names.key_of(shard_name, name);
          if (!hash && also != nullptr) hash = also->key_of(shard_name, name);
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

void Store::State::collect_entries(std::vector<EntryFile>& files) const {
  walk_store(
      entries, [&files](EntryFile file) { files.push_back(std::move(file)); },
      [](const std::string&, std::string_view, const struct stat&) {});
}

void Store::State::collect_pch(std::vector<EntryFile>& files, bool with_records) const {
  if (pch_dir.empty()) return;
  // The records are walked either way: a use touches a PCH's record, so its record's mtime is its last use.
  std::vector<EntryFile> found;
  walk_store(
      pch_files, [&found](EntryFile file) { found.push_back(std::move(file)); },
      [](const std::string&, std::string_view, const struct stat&) {}, &pch_records);
  std::unordered_map<Hash128, Clock::time_point, Hash128Hasher> record_times;
  for (const EntryFile& f : found) {
    if (f.path.native().ends_with(kPchRecordSuffix)) record_times.emplace(f.file_hash, f.mtime);
  }
  for (EntryFile& f : found) {
    const bool record = f.path.native().ends_with(kPchRecordSuffix);
    if (record && !with_records) continue;
    if (const auto it = record_times.find(f.file_hash); !record && it != record_times.end()) f.record_mtime = it->second;
    files.push_back(std::move(f));
  }
}

Clock::time_point Store::State::pch_record_mtime(const std::string& pch_path) const {
  if (!pch_path.ends_with(kPchSuffix)) return {};
  const std::string record = pch_path.substr(0, pch_path.size() - kPchSuffix.size()).append(kPchRecordSuffix);
  struct stat st {};
  return ::lstat(record.c_str(), &st) == 0 ? to_time_point(st.st_mtim) : Clock::time_point{};
}

std::uint64_t Store::State::measure_entries() const {
  std::uint64_t total = 0;
  const auto add = [&total](const EntryFile& file) { total += file.size; };
  const auto no_temps = [](const std::string&, std::string_view, const struct stat&) {};
  walk_store(entries, add, no_temps);
  if (!pch_dir.empty()) walk_store(pch_files, add, no_temps, &pch_records);
  return total;
}

void Store::State::mark_measured() const noexcept {
  const UniqueFd fd(::open(measured_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd) (void)::futimens(fd.get(), nullptr);
}

std::optional<std::uint64_t> Store::State::adjust_size(std::int64_t delta, std::optional<std::uint64_t> set_to,
                                                       Measure how) const {
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

bool Store::State::unlink_if_same(const std::string& path, const struct stat& seen) const {
  if (!detail::unlink_if_same(path, seen)) return false;
  if (S_ISREG(seen.st_mode)) adjust_size(-static_cast<std::int64_t>(seen.st_size));
  return true;
}

std::size_t Store::State::sweep_temps(std::chrono::seconds age) const noexcept {
  if (mode.load() != StoreMode::read_write) return 0;
  std::size_t removed = 0;
  try {
    const auto now = Clock::now();
    const auto sweep = [&](const std::string& path, std::string_view name, const struct stat& st) {
      if (now - to_time_point(st.st_mtim) < age) return;
      const long owner = detail::temp_file_owner(name);
      if (owner > 0 && owner != ::getpid() && process_alive(owner)) return;
      if (owner == ::getpid() && age < kTrimTempAge) return;  // possibly one of our own writers
      if (::unlink(path.c_str()) == 0) ++removed;
    };
    walk_store(entries, [](const EntryFile&) {}, sweep);
    // A precompiled header being made is a temp file of 25-180 MB: one its maker left (it died) goes too.
    if (!pch_dir.empty()) walk_store(pch_files, [](const EntryFile&) {}, sweep, &pch_records);
  } catch (...) {
    // Out of memory: stop sweeping.
  }
  return removed;
}

std::optional<TrimResult> Store::State::trim(const StoreConfig& config, std::uint64_t target_bytes,
                                             const std::string* keep) noexcept {
  if (mode.load() != StoreMode::read_write) return std::nullopt;
  try {
    const UniqueFd lock(::open(trim_lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return std::nullopt;  // another process trims
    (void)sweep_temps(std::chrono::duration_cast<std::chrono::seconds>(kTrimTempAge));
    std::vector<EntryFile> files;
    collect_entries(files);
    collect_pch(files, /*with_records=*/true);  // one LRU over entries and precompiled headers
    TrimResult result;
    for (const EntryFile& file : files) result.bytes_before += file.size;
    std::uint64_t total = result.bytes_before;
    const auto recent_since = Clock::now() - kRecentUse;
    std::size_t recent = 0;  // removed entries written or used within kRecentUse
    if (total > target_bytes) {
      std::sort(files.begin(), files.end(), [](const EntryFile& a, const EntryFile& b) {
        return a.used() != b.used() ? a.used() < b.used() : a.path < b.path;
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
        // Used (touched, or a PCH's record touched) or rewritten since the scan: it is no longer among the least
        // recently used.
        if (to_time_point(now.st_mtim) != file.mtime || static_cast<std::uint64_t>(now.st_size) != file.size ||
            pch_record_mtime(file.path.native()) > file.record_mtime) {
          continue;
        }
        if (::unlink(file.path.c_str()) != 0) continue;
        total -= file.size;
        ++result.removed;
        if (file.used() > recent_since) ++recent;
      }
    }
    result.bytes_after = total;
    evictions += result.removed;
    (void)adjust_size(0, total);
    if (result.removed != 0) {
      KILN_LOG(info, "disk cache trimmed: {} {} removed, {} -> {} bytes", result.removed,
               result.removed == 1 ? "entry" : "entries", result.bytes_before, result.bytes_after);
    }
    // A cap below the working set evicts what was just compiled: say so (once per store) rather than
    // let every run recompile without a word. Only for the trims puts start; an explicit trim is asked for.
    if (recent != 0 && keep != nullptr) {
      const std::string what = fmt::format(
          "disk cache size cap {} bytes (KILN_CACHE_MAXSIZE) is smaller than the kernels in use: a trim removed {} "
          "of {} {} written or used within the last hour, which will be compiled again",
          config.max_size, recent, result.removed, result.removed == 1 ? "entry" : "entries");
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

std::optional<TrimResult> Store::trim(std::uint64_t target_bytes) {
  return m_state->trim(m_config, target_bytes, nullptr);
}

std::size_t Store::sweep_temps(std::chrono::seconds age) { return m_state->sweep_temps(age); }

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

}  // namespace kiln::cache
