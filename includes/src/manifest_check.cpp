#include "manifest_check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "header_files.hpp"
#include "kiln/base/threads.hpp"

namespace kiln::cache::detail {

std::string describe(const Mismatch& m) {
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

// ---- ValidatedSets ------------------------------------------------------------------------------------------

bool ValidatedSets::fresh(const std::string& set, std::int64_t now_ns, std::chrono::nanoseconds ttl) const {
  if (ttl.count() <= 0) return false;
  const std::lock_guard lock(m_mutex);
  const auto it = m_sets.find(set);
  if (it == m_sets.end()) return false;
  const std::int64_t age = now_ns - it->second;
  return age >= 0 && age < ttl.count();
}

bool ValidatedSets::any() const {
  const std::lock_guard lock(m_mutex);
  return !m_sets.empty();
}

void ValidatedSets::remember(const std::string& set, std::int64_t at_ns) {
  const std::lock_guard lock(m_mutex);
  if (m_sets.size() >= kMaxSets) m_sets.clear();
  auto [it, inserted] = m_sets.try_emplace(set, at_ns);
  if (!inserted && it->second < at_ns) it->second = at_ns;
}

// ---- Checker ------------------------------------------------------------------------------------------------

Checker::Checker(const ManifestView& view, const ManifestLimits& limits, std::int64_t now_ns,
                 std::chrono::nanoseconds window, StatMemo* memo, unsigned stat_threads)
    : m_stat_threads(std::min(stat_threads, std::max(1u, std::thread::hardware_concurrency()))),
      m_view(view),
      m_limits(limits),
      m_now_ns(now_ns),
      m_window(window),
      m_memo(memo),
      m_probes(view.paths.size()) {
  oldest_ns = now_ns;
}

Mismatch Checker::check(const ResultRefs& result) {
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
    if (probe.read_stat != info.stat || probe.trusted != info.trusted)
      refreshes.emplace_back(file, probe.read_stat, probe.trusted);
  }
  return Mismatch{};
}

const char* Checker::c_path(std::uint32_t path) {
  m_path_buffer.assign(m_view.paths[path]);
  return m_path_buffer.c_str();
}

/// Asks the memo about every path of `result` not probed yet (under one lock), then settles the rest:
/// the absent paths by way of their folders (walk()), the headers by a stat each. With enough paths to
/// pay for threads (a big tree in a fresh process: each stat(2) is a path walk in the kernel, and they
/// run side by side), both run on several threads: the absent paths in a few runs of the manifest's
/// order (each run's paths share their folders), the headers in batches. check() then finds them
/// probed; what is left (few headers, very long paths) it stats itself.
void Checker::prefetch(const ResultRefs& result) {
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
  const unsigned threads = parallel ? static_cast<unsigned>(std::min<std::size_t>(m_stat_threads, units)) : 1;
  const unsigned ran = kiln::detail::share_work(threads, [&](unsigned) { work(); });
  settle_threads = std::max<std::uint32_t>(settle_threads, ran);
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
void Checker::ask_memo(std::vector<std::uint32_t>& todo) {
  if (todo.empty()) return;
  std::vector<std::string_view> paths(todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) paths[i] = m_view.paths[todo[i]];
  m_memo->find_each(paths, m_now_ns, [&](std::size_t i, const StatMemo::Seen& seen) {
    fill_from_memo(todo[i], seen);
    todo[i] = kKnown;
  });
  todo.erase(std::remove(todo.begin(), todo.end(), kKnown), todo.end());
}

/// Stats `path` into `probe` through `buffer` (kStatPathBytes + 1 bytes); false, leaving the probe
/// unknown (for stat_path), when the path is longer than that.
bool Checker::stat_probe(PathProbe& probe, std::string_view path, char* buffer) noexcept {
  if (path.size() > kStatPathBytes) return false;
  std::memcpy(buffer, path.data(), path.size());
  buffer[path.size()] = '\0';
  stat_into(probe, buffer);
  return true;
}

/// Settles paths recorded absent, most without a stat of their own: a compiler probes a header in
/// every include folder before the one that has it, so a big tree's absent paths are mostly names
/// under a few folders that do not exist (<folder>/cuda/std/... where <folder> has no cuda/). When a
/// path is absent, its folders are stat'ed upwards until one exists; every path under a folder found
/// absent is then absent too, as its own stat at that moment would have said. Never throws: a path it
/// cannot settle (no memory, too long) stays unknown, and check() stats it.
void Checker::walk(std::span<const std::uint32_t> paths, Walker& walker, char* buffer) noexcept {
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

std::string_view Checker::folder_of(std::string_view path) noexcept {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return {};  // no folder, or "/" (always there)
  return path.substr(0, slash);
}

/// Whether a folder above `path` was found absent; folders passed on the way up that were not known
/// yet are absent as well and are noted. Stops at the first folder found present.
bool Checker::under_absent_folder(std::string_view path, Walker& walker) {
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
void Checker::note_absent_folders(std::string_view path, Walker& walker, char* buffer) {
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

const PathProbe& Checker::stat_path(std::uint32_t path) {
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
bool Checker::from_memo(std::uint32_t path) {
  if (m_memo == nullptr) return false;
  const std::optional<StatMemo::Seen> seen = m_memo->find(m_view.paths[path], m_now_ns);
  if (!seen) return false;
  fill_from_memo(path, *seen);
  return true;
}
void Checker::fill_from_memo(std::uint32_t path, const StatMemo::Seen& seen) {
  PathProbe& probe = m_probes[path];
  probe.stat_state = seen.present ? PathProbe::Stat::present : PathProbe::Stat::absent;
  probe.stat = seen.stat;
  ++memo_hits;
  oldest_ns = std::min(oldest_ns, seen.at_ns);
}

void Checker::stat_into(PathProbe& probe, const char* path) noexcept {
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

void Checker::remember(std::uint32_t path, const PathProbe& probe, std::int64_t at_ns) {
  if (probe.stat_state == PathProbe::Stat::present) {
    m_memo->remember(m_view.paths[path], StatMemo::Seen{true, probe.stat, at_ns});
  } else if (probe.stat_state == PathProbe::Stat::absent) {
    m_memo->remember(m_view.paths[path], StatMemo::Seen{false, {}, at_ns});
  }
}

const ReadProbe& Checker::read_path(std::uint32_t path) {
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
  const HeaderRead read = read_header_file(c_path(path), m_bytes, m_limits.max_header_bytes, m_now_ns, m_window);
  switch (read.status) {
    case HeaderRead::Status::ok:
      break;
    case HeaderRead::Status::failed:
      if (std::string_view(read.what) == "open" && is_absence(read.error)) {
        return fail(DependencyChange::vanished, read.error, read.what);
      }
      return fail(DependencyChange::unreadable, read.error, read.what);
    case HeaderRead::Status::not_regular:
      return fail(DependencyChange::changed, 0, "no longer a regular file");
    case HeaderRead::Status::too_large:  // (at the fstat, or grown past the limit while being read)
      return fail(DependencyChange::changed, 0,
                  read.size > read.stat.size ? "changed while being read" : "larger than the re-hash limit");
  }
  if (!read.steady) return fail(DependencyChange::changed, 0, "changed while being read");
  bytes_hashed += read.stat.size;
  probe.digest = read.digest;
  probe.read_stat = read.stat;
  probe.trusted = read.trusted;
  probe.ok = true;
  return probe;
}

}  // namespace kiln::cache::detail
