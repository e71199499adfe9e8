// The dependency manifests of one cache root: the instance (its mode, warnings and atomic publishing),
// the lookups by stat and the recording of results. Reading files and the read-only queries are in
// manifest_read.cpp; the checking against the file system in manifest_check.cpp.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "atomic_file.hpp"
#include "header_files.hpp"
#include "kiln/base/log.hpp"
#include "manifest_fetched.hpp"
#include "manifest_store.hpp"
#include "manifest_view.hpp"
#include "mode_state.hpp"
#include "posix_util.hpp"
#include "sharded_dir.hpp"

namespace kiln::cache {
namespace {

using detail::bad_path;
using detail::check_fixed;
using detail::Checker;
using detail::describe;
using detail::ExpectedRequest;
using detail::Fixed;
using detail::HeadView;
using detail::parse_head;
using detail::parse_view;
using detail::serialize_view;
using detail::FileInfo;
using detail::ManifestView;
using detail::Mismatch;
using detail::RawManifest;
using detail::read_more;
using detail::read_raw;
using detail::ResultRefs;
using detail::stat_is_settled;

/// What a lookup reads first when it may be answered from the head: the head of a kernel's manifest
/// (its canonical key holds the source) mostly fits; a longer head is read on.
constexpr std::size_t kHeadRead = 16 * 1024;

using detail::distrust_reason;
using detail::is_permission_error;
using detail::kManifestDirectory;
using detail::kManifestSuffix;
using detail::ShardedNames;

// ---- merging a new result into a manifest ------------------------------------------------------------------

struct FileKey {
  std::uint32_t path;
  Hash128 digest;
  friend bool operator==(const FileKey&, const FileKey&) = default;
};
struct FileKeyHasher {
  std::size_t operator()(const FileKey& key) const noexcept {
    return Hash128Hasher{}(key.digest) ^ (static_cast<std::size_t>(key.path) * 0x9E3779B97F4A7C15ULL);
  }
};

/// Builds a manifest result by result (views into the caller's strings and the old manifest's bytes).
class Merger {
 public:
  Merger(const Hash128& request_key, std::string_view canonical) {
    m_view.request_key = request_key;
    m_view.canonical = canonical;
  }

  struct Mark {
    std::size_t paths, files, absent, results, indices;
  };
  [[nodiscard]] Mark mark() const {
    return Mark{m_view.paths.size(), m_view.files.size(), m_view.absent.size(), m_view.results.size(),
                m_view.indices.size()};
  }
  /// Drops everything added since `mark` (the maps keep stale entries: nothing may be added afterwards).
  void roll_back(const Mark& mark) {
    m_view.paths.resize(mark.paths);
    m_view.files.resize(mark.files);
    m_view.absent.resize(mark.absent);
    m_view.results.resize(mark.results);
    m_view.indices.resize(mark.indices);
  }

  /// Adds a result: `files` yields (path, stat, trusted, digest), `absent` yields paths. A header info
  /// already present (same path and digest) is shared and keeps the stat it was first added with.
  template <class Files, class Absent>
  void add_result(const Hash128& key, const Files& files, const Absent& absent) {
    ResultRefs refs;
    refs.key = key;
    refs.files_begin = static_cast<std::uint32_t>(m_view.indices.size());
    for (const auto& [path, file_stat, trusted, digest] : files) {
      const std::uint32_t path_index = intern(path);
      const auto [it, fresh] =
          m_files.try_emplace(FileKey{path_index, digest}, static_cast<std::uint32_t>(m_view.files.size()));
      if (fresh) m_view.files.push_back(FileInfo{path_index, file_stat, trusted, digest});
      m_view.indices.push_back(it->second);
    }
    refs.files_count = static_cast<std::uint32_t>(m_view.indices.size() - refs.files_begin);
    refs.absent_begin = static_cast<std::uint32_t>(m_view.indices.size());
    for (const std::string_view path : absent) {
      const std::uint32_t path_index = intern(path);
      const auto [it, fresh] = m_absent.try_emplace(path_index, static_cast<std::uint32_t>(m_view.absent.size()));
      if (fresh) m_view.absent.push_back(path_index);
      m_view.indices.push_back(it->second);
    }
    refs.absent_count = static_cast<std::uint32_t>(m_view.indices.size() - refs.absent_begin);
    m_view.results.push_back(refs);
  }

  /// Why the manifest exceeds the limits; empty when it fits.
  [[nodiscard]] std::string over_limits(const ManifestLimits& limits) const {
    if (m_view.files.size() > limits.max_files)
      return fmt::format("{} headers (limit {})", m_view.files.size(), limits.max_files);
    if (m_view.absent.size() > limits.max_absent) {
      return fmt::format("{} absent paths (limit {})", m_view.absent.size(), limits.max_absent);
    }
    if (m_view.paths.size() > limits.max_paths)
      return fmt::format("{} paths (limit {})", m_view.paths.size(), limits.max_paths);
    if (m_view.results.size() > limits.max_results) {
      return fmt::format("{} results (limit {})", m_view.results.size(), limits.max_results);
    }
    if (const std::uint64_t bytes = m_view.byte_size(); bytes > limits.max_file_bytes) {
      return fmt::format("{} bytes (limit {})", bytes, limits.max_file_bytes);
    }
    return {};
  }

  [[nodiscard]] const ManifestView& view() const noexcept { return m_view; }

 private:
  std::uint32_t intern(std::string_view path) {
    const auto [it, fresh] = m_paths.try_emplace(path, static_cast<std::uint32_t>(m_view.paths.size()));
    if (fresh) m_view.paths.push_back(path);
    return it->second;
  }

  ManifestView m_view;
  std::unordered_map<std::string_view, std::uint32_t> m_paths;
  std::unordered_map<FileKey, std::uint32_t, FileKeyHasher> m_files;
  std::unordered_map<std::uint32_t, std::uint32_t> m_absent;
};

/// A header of a DependencySet or of an old result, as Merger::add_result takes it.
struct MergeFile {
  std::string_view path;
  FileStat stat;
  bool trusted;
  Hash128 digest;
};

}  // namespace

// ---- public helpers ---------------------------------------------------------------------------------------

std::string_view to_string(ManifestOutcome outcome) noexcept {
  switch (outcome) {
    case ManifestOutcome::hit:
      return "hit";
    case ManifestOutcome::no_manifest:
      return "no manifest";
    case ManifestOutcome::no_match:
      return "no result matches";
    case ManifestOutcome::corrupt_removed:
      return "damaged (removed)";
    case ManifestOutcome::corrupt:
      return "damaged";
    case ManifestOutcome::io_error:
      return "I/O error";
    case ManifestOutcome::disabled:
      return "disabled";
  }
  return "unknown";
}

std::string_view to_string(DependencyChange change) noexcept {
  switch (change) {
    case DependencyChange::none:
      return "matches";
    case DependencyChange::changed:
      return "changed";
    case DependencyChange::vanished:
      return "vanished";
    case DependencyChange::appeared:
      return "appeared";
    case DependencyChange::unreadable:
      return "unreadable";
  }
  return "unknown";
}

// ---- DependencyManifests ------------------------------------------------------------------------------------

void DependencyManifests::State::degrade(StoreMode to, const std::string& why, bool warn) {
  detail::degrade_mode(mode, reason_mutex, reason, "dependency manifests", to, why, warn);
}

void DependencyManifests::State::warn_write_failure(const std::string& what) {
  if (!write_failure_warned.exchange(true)) {
    KILN_LOG(warn,
             "dependency manifest not written (kernels are still served; a later process resolves this request's "
             "includes again instead of checking them by stat): {}",
             what);
  } else {
    KILN_LOG(debug, "dependency manifest not written: {}", what);
  }
}

void DependencyManifests::State::warn_damage(const std::string& what) {
  if (!damage_warned.exchange(true)) {
    KILN_LOG(warn, "{} (it only costs resolving the request's includes again)", what);
  } else {
    KILN_LOG(info, "{}", what);
  }
}

void DependencyManifests::State::warn_refusal(const std::string& what) {
  if (!refusal_warned.exchange(true)) {
    KILN_LOG(warn, "dependency manifest not recorded: {}", what);
  } else {
    KILN_LOG(debug, "dependency manifest not recorded: {}", what);
  }
}

bool DependencyManifests::State::publish(const std::string& path, std::span<const std::byte> bytes) {
  if (const int error = names.make_shard_folder(path, root); error != 0) {
    const std::string why = fmt::format("cannot create the directory of {}: {}", path, std::strerror(error));
    if (is_permission_error(error)) {
      degrade(StoreMode::read_only, why, true);
    } else {
      warn_write_failure(why);
    }
    return false;
  }
  detail::AtomicFile file(path);
  if (file.write(bytes)) (void)file.commit();
  if (file.error() != 0) {
    if (is_permission_error(file.error())) {
      degrade(StoreMode::read_only, file.error_text(), true);
    } else {
      warn_write_failure(file.error_text());
    }
    return false;
  }
  return true;
}

DependencyManifests::DependencyManifests(std::filesystem::path root, bool read_only)
    : DependencyManifests([&] {
        ManifestConfig config;
        config.root = std::move(root);
        config.read_only = read_only;
        return config;
      }()) {}

DependencyManifests::DependencyManifests(ManifestConfig config)
    : m_config(std::move(config)), m_state(std::make_unique<State>(m_config.stat_memo)) {
  State& s = *m_state;
  if (m_config.disabled) {
    s.degrade(StoreMode::memory_only, "disabled (configuration)", false);
    return;
  }
  if (m_config.root.empty()) {
    s.degrade(StoreMode::memory_only, "no cache root", false);
    return;
  }
  s.root = m_config.root.lexically_normal().string();
  while (s.root.size() > 1 && s.root.back() == '/') s.root.pop_back();
  s.directory = s.root + "/" + std::string(kManifestDirectory);
  s.names = ShardedNames(s.directory, kManifestSuffix);
  // A manifest names the binary a request gets: only trust a tree nobody else can write to.
  const auto refuse = [&s](std::string_view what, const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return false;  // created by the first record
      s.degrade(StoreMode::memory_only, fmt::format("cannot stat {} {}: {}", what, path, std::strerror(errno)), true);
      return true;
    }
    if (std::string why = distrust_reason(what, path, st); !why.empty()) {
      s.degrade(StoreMode::memory_only, fmt::format("refused: {}", why), true);
      return true;
    }
    return false;
  };
  if (refuse("cache root", s.root) || refuse("manifest directory", s.directory)) return;
  if (m_config.read_only) {
    s.degrade(StoreMode::read_only, "read-only by configuration", false);
    return;
  }
  if (::access(s.root.c_str(), F_OK) == 0 && ::access(s.root.c_str(), W_OK | X_OK) != 0) {
    s.degrade(StoreMode::read_only, fmt::format("cache root {} is not writable: {}", s.root, std::strerror(errno)),
              false);
  }
}

DependencyManifests::~DependencyManifests() = default;

StoreMode DependencyManifests::mode() const noexcept { return m_state->mode.load(); }

std::string DependencyManifests::mode_reason() const {
  const std::lock_guard lock(m_state->reason_mutex);
  return m_state->reason;
}

std::filesystem::path DependencyManifests::directory() const { return m_state->directory; }

std::filesystem::path DependencyManifests::manifest_path(const Hash128& request_key) const {
  if (m_state->directory.empty()) return {};
  return m_state->path_of(request_key);
}

/// One lookup, in three steps: read (the file, or first its head while a set checked moments ago may answer
/// from it), check (each result against the file system, newest first, until one matches) and write back
/// (refreshed stats rewritten, the outcome said, the bytes handed to the stat memo or back to the buffers).
struct DependencyManifests::Lookup {
  Lookup(DependencyManifests& manifests, const Hash128& request_key, std::string_view request_canonical,
         StoreMode mode_in, LookupStats& out_in)
      : s(*manifests.m_state),
        config(manifests.m_config),
        out(out_in),
        mode(mode_in),
        path(s.path_of(request_key)),
        expected{request_key, request_canonical},
        memo_on(config.stat_memo.count() > 0) {}

  /// Step one. True when the lookup ends here, with `from_head` (a hit from the head alone) or without (no
  /// manifest, an I/O or content error: `out` says); else the manifest is parsed into `view`.
  bool read(std::optional<Hash128>& from_head, std::string* matched) {
    // While this instance holds sets checked moments ago, the head comes first: a result whose set is
    // one of them is the answer without reading the rest (see the grammar's notes).
    const bool head_first = memo_on && s.validated.any();
    raw = read_raw(path, config.limits, &s.buffers, head_first ? kHeadRead : 0);
    out.read_ns = lap();
    out.manifest_bytes = raw.size;
    if (raw.kind == RawManifest::Kind::absent) {
      out.outcome = ManifestOutcome::no_manifest;
      return true;
    }
    if (raw.kind == RawManifest::Kind::io_error) return io_error();
    if (raw.kind == RawManifest::Kind::content_error) return content_error(raw.error);
    if (raw.have < raw.size) {
      auto fixed = check_fixed(raw.bytes.get(), raw.size, config.limits);  // (kHeadRead > the fixed part)
      if (auto* error = std::get_if<ContentError>(&fixed)) return content_error(error->reason);
      if (!read_more(raw, std::get<Fixed>(fixed).head_size())) return read_error();
      auto head = parse_head(raw.span(), std::get<Fixed>(fixed), &expected);
      if (auto* error = std::get_if<ContentError>(&head)) return content_error(error->reason);
      for (const auto& [key, summary] : std::get<HeadView>(head).results) {
        ++out.results_checked;
        std::string set = canonical_dependencies(summary);
        if (s.validated.fresh(set, now_ns, config.stat_memo)) {
          ++out.validated_hits;
          out.parse_ns = lap();
          out.outcome = ManifestOutcome::hit;
          out.bytes_read = raw.have;
          if (matched != nullptr) *matched = std::move(set);
          s.buffers.give({std::move(raw.bytes), raw.capacity});
          from_head = key;
          return true;
        }
      }
      out.results_checked = 0;  // checked again below, with the rest
      if (!read_more(raw, raw.size)) return read_error();
    }
    out.bytes_read = raw.have;
    std::variant<ManifestView, ContentError> parsed = parse_view(raw.span(), config.limits, &expected);
    out.parse_ns = lap();
    if (auto* error = std::get_if<ContentError>(&parsed)) return content_error(error->reason);
    view = std::move(std::get<ManifestView>(parsed));
    return false;
  }

  /// Step two: the results of `view`, newest first, each taken whole when its set was checked moments ago,
  /// else checked against the file system (Checker); the first that matches is the answer.
  void check() {
    // This instance's first lookup stats everything itself and hands its probes to the memo at the end.
    first = memo_on && s.stat_memo.first_lookup();
    for (std::size_t i = 0; i < view.results.size(); ++i) {
      const ResultRefs& result = view.results[i];
      ++out.results_checked;
      std::string set = canonical_dependencies(view.summaries[i]);
      if (memo_on && s.validated.fresh(set, now_ns, config.stat_memo)) {
        ++out.validated_hits;
        answer = result.key;
        answer_set = std::move(set);
        break;
      }
      const std::uint32_t reads_before = checker().reads;
      const Mismatch mismatch = checker().check(result);
      if (mismatch.change == DependencyChange::none) {
        // A set with a header whose stat is not trusted (changed moments ago) is re-hashed on every
        // lookup, so it is never taken whole either.
        if (memo_on && checker().reads == reads_before) s.validated.remember(set, checker().oldest_ns);
        answer = result.key;
        answer_set = std::move(set);
        break;
      }
      misses.emplace_back(result.key, mismatch);
    }
    out.check_ns = lap();
    if (checker_slot) {
      out.stats = checker_slot->stats;
      out.inferred_absent = checker_slot->inferred;
      out.settle_ns = checker_slot->settle_ns;
      out.settle_threads = checker_slot->settle_threads;
      out.memo_hits = checker_slot->memo_hits;
      out.reads = checker_slot->reads;
      out.bytes_hashed = checker_slot->bytes_hashed;
    }
  }

  /// Step three: refreshed stats written back (hit or miss, so the next lookup trusts them without
  /// reading), the outcome said, and the bytes handed on. Returns the answer.
  std::optional<Hash128> write_back(std::string* matched) {
    if (checker_slot && !checker_slot->refreshes.empty()) {
      for (const Checker::Refresh& refresh : checker_slot->refreshes) {
        FileInfo& info = view.files[refresh.file];
        if (info.stat != refresh.stat || info.trusted != refresh.trusted) {
          info.stat = refresh.stat;
          info.trusted = refresh.trusted;
          ++out.refreshed;
        }
      }
      if (out.refreshed != 0 && mode == StoreMode::read_write) {
        // Best effort, and only over the manifest this lookup read: a record renamed in since must win.
        struct stat now {};
        if (::lstat(path.c_str(), &now) == 0 && now.st_ino == raw.st.st_ino && now.st_dev == raw.st.st_dev &&
            now.st_size == raw.st.st_size && now.st_mtim.tv_sec == raw.st.st_mtim.tv_sec &&
            now.st_mtim.tv_nsec == raw.st.st_mtim.tv_nsec) {
          out.rewritten = s.publish(path, serialize_view(view));
        }
      }
    }
    if (answer) {
      out.outcome = ManifestOutcome::hit;
      if (matched != nullptr) *matched = std::move(answer_set);
    } else {
      out.outcome = ManifestOutcome::no_match;
      out.detail = view.results.empty() ? "the manifest holds no result" : "";
      for (std::size_t i = 0; i < misses.size(); ++i) {
        const auto& [key, mismatch] = misses[i];
        out.detail += fmt::format("{}result {} ({}): {} {} {}", i == 0 ? "" : "; ", i + 1, key.hex(),
                                  to_string(mismatch.change), view.paths[mismatch.path], describe(mismatch));
      }
    }
    // Done with the view: its paths (into raw's bytes) and the probes go to the memo as they are.
    if (first && checker_slot) {
      s.stat_memo.defer(std::move(raw.bytes), std::move(view.paths), checker_slot->take_probes(), now_ns);
    } else {
      s.buffers.give({std::move(raw.bytes), raw.capacity});  // (the view is not used past here)
    }
    return answer;
  }

 private:
  /// Nanoseconds since the previous lap.
  std::uint64_t lap() {
    const auto now = std::chrono::steady_clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - phase).count();
    phase = now;
    return static_cast<std::uint64_t>(ns);
  }
  /// An I/O error must never delete a manifest: a transient EIO would destroy a valid one.
  bool io_error() {
    out.outcome = ManifestOutcome::io_error;
    out.detail = fmt::format("{}: {}", path, raw.error);
    out.bytes_read = raw.have;
    return true;
  }
  bool content_error(const std::string& reason) {
    out.detail = fmt::format("{}: {}", path, reason);
    out.bytes_read = raw.have;
    if (mode == StoreMode::read_write && raw.have_st && detail::unlink_if_same(path, raw.st)) {
      s.warn_damage(fmt::format("removed a damaged dependency manifest: {}", out.detail));
      out.outcome = ManifestOutcome::corrupt_removed;
    } else {
      out.outcome = ManifestOutcome::corrupt;
    }
    return true;
  }
  /// read_more() failed.
  bool read_error() { return raw.kind == RawManifest::Kind::io_error ? io_error() : content_error(raw.error); }
  /// Built only when a result needs its paths checked (its probe table has a slot per path).
  Checker& checker() {
    if (!checker_slot) {
      checker_slot.emplace(view, config.limits, now_ns, config.trust_window,
                           memo_on && !first ? &s.stat_memo : nullptr, config.stat_threads);
    }
    return *checker_slot;
  }

  State& s;
  const ManifestConfig& config;
  LookupStats& out;
  const StoreMode mode;
  const std::string path;
  const ExpectedRequest expected;
  const bool memo_on;
  const std::int64_t now_ns = realtime_now_ns();  // before any header is read (see stat_is_settled)
  std::chrono::steady_clock::time_point phase = std::chrono::steady_clock::now();
  RawManifest raw;
  ManifestView view;
  bool first = false;  ///< this instance's first lookup (check)
  std::optional<Checker> checker_slot;
  std::optional<Hash128> answer;
  std::string answer_set;  ///< canonical_dependencies of the answer
  std::vector<std::pair<Hash128, Mismatch>> misses;
};

std::optional<Hash128> DependencyManifests::lookup(const Hash128& request_key, std::string_view request_canonical,
                                                   LookupStats* stats, std::string* matched) {
  LookupStats local;
  LookupStats& out = stats != nullptr ? *stats : local;
  out = LookupStats{};
  const StoreMode mode = m_state->mode.load();
  if (mode == StoreMode::memory_only) {
    out.outcome = ManifestOutcome::disabled;
    return std::nullopt;
  }
  try {
    Lookup lookup(*this, request_key, request_canonical, mode, out);
    std::optional<Hash128> answer;
    if (lookup.read(answer, matched)) return answer;
    lookup.check();
    return lookup.write_back(matched);
  } catch (const std::exception& error) {
    out.outcome = ManifestOutcome::io_error;
    try {
      out.detail = error.what();
    } catch (...) {
    }
    return std::nullopt;
  }
}

std::vector<std::byte> DependencyManifests::record(const Hash128& request_key, std::string_view request_canonical,
                                                   const DependencySet& dependencies, const Hash128& result_key) noexcept {
  State& s = *m_state;
  if (s.mode.load() != StoreMode::read_write) return {};
  try {
    const ManifestLimits& limits = m_config.limits;
    if (hash128(request_canonical, kKeySeed) != request_key) {
      s.warn_refusal(fmt::format("request {}: the key is not the hash of its canonical key", request_key.hex()));
      return {};
    }
    if (request_canonical.size() > limits.max_canonical_bytes) {
      s.warn_refusal(fmt::format("request {}: canonical key of {} bytes exceeds the limit {}", request_key.hex(),
                                 request_canonical.size(), limits.max_canonical_bytes));
      return {};
    }
    for (const HeaderRecord& header : dependencies.headers) {
      if (auto why = bad_path(header.path, limits.max_path_bytes)) {
        s.warn_refusal(fmt::format("request {}: header \"{}\": {}", request_key.hex(), header.path, *why));
        return {};
      }
    }
    for (const std::string& path : dependencies.absent) {
      if (auto why = bad_path(path, limits.max_path_bytes)) {
        s.warn_refusal(fmt::format("request {}: absent path \"{}\": {}", request_key.hex(), path, *why));
        return {};
      }
    }
    const std::string path = s.path_of(request_key);
    RawManifest raw = read_raw(path, limits);
    if (raw.kind == RawManifest::Kind::io_error) {
      // Overwriting a manifest that could not be read would drop its results for a transient error.
      s.warn_write_failure(fmt::format("{}: {}", path, raw.error));
      return {};
    }
    std::optional<ManifestView> old;
    if (raw.kind == RawManifest::Kind::ok) {
      const ExpectedRequest expected{request_key, request_canonical};
      auto parsed = parse_view(raw.span(), limits, &expected);
      if (auto* view = std::get_if<ManifestView>(&parsed)) {
        old = std::move(*view);
      } else {
        s.warn_damage(
            fmt::format("replacing a damaged dependency manifest {}: {}", path, std::get<ContentError>(parsed).reason));
      }
    }
    // A header is trusted by stat only when the resolver trusted it (relative to when it read it) and its
    // stat still lies outside the window now.
    const std::int64_t now_ns = realtime_now_ns();
    std::vector<MergeFile> files;
    files.reserve(dependencies.headers.size());
    for (const HeaderRecord& header : dependencies.headers) {
      files.push_back(MergeFile{header.path, header.stat,
                                header.trusted_stat && stat_is_settled(header.stat, now_ns, m_config.trust_window),
                                header.digest});
    }
    std::vector<std::string_view> absent(dependencies.absent.begin(), dependencies.absent.end());
    Merger merger(request_key, request_canonical);
    merger.add_result(result_key, files, absent);
    if (std::string why = merger.over_limits(limits); !why.empty()) {
      s.warn_refusal(fmt::format("request {}: {}", request_key.hex(), why));
      return {};
    }
    const std::size_t max_results =
        std::max<std::size_t>(1, std::min<std::size_t>(m_config.max_results, limits.max_results));
    if (old) {
      for (const ResultRefs& result : old->results) {
        if (merger.view().results.size() >= max_results) break;
        if (result.key == result_key) continue;  // replaced by the new record
        files.clear();
        for (const std::uint32_t index : old->result_files(result)) {
          const FileInfo& info = old->files[index];
          files.push_back(MergeFile{old->paths[info.path], info.stat, info.trusted, info.digest});
        }
        absent.clear();
        for (const std::uint32_t index : old->result_absent(result)) absent.push_back(old->paths[old->absent[index]]);
        const Merger::Mark mark = merger.mark();
        merger.add_result(result.key, files, absent);
        if (!merger.over_limits(limits).empty()) {  // drop this and every older result
          merger.roll_back(mark);
          break;
        }
      }
    }
    std::vector<std::byte> bytes = serialize_view(merger.view());
    if (!s.publish(path, bytes)) return {};
    return bytes;
  } catch (const std::exception& error) {
    try {
      s.warn_write_failure(fmt::format("request {}: {}", request_key.hex(), error.what()));
    } catch (...) {
    }
  }
  return {};
}

std::string DependencyManifests::install(const Hash128& request_key, std::string_view request_canonical,
                                         std::span<const std::byte> bytes, const ManifestScope& scope) noexcept {
  State& s = *m_state;
  try {
    if (s.mode.load() != StoreMode::read_write) return "the dependency manifests are not writable here";
    const ExpectedRequest expected{request_key, request_canonical};
    std::variant<ManifestView, ContentError> parsed = parse_view(bytes, m_config.limits, &expected);
    if (auto* error = std::get_if<ContentError>(&parsed)) return error->reason;
    ManifestView& view = std::get<ManifestView>(parsed);
    // Only where none is: a manifest recorded here meanwhile knows more than one from elsewhere (asked
    // before the check too, which reads every header).
    const std::string path = s.path_of(request_key);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) return "a manifest exists here";
    const auto started = std::chrono::steady_clock::now();
    const detail::FetchedCheck checked = detail::check_fetched(view, scope, m_config);
    if (!checked.refused.empty()) {
      s.installs_refused.fetch_add(1, std::memory_order_relaxed);
      const std::string text = fmt::format("refused the dependency manifest of request {} from another machine: {}",
                                           request_key.hex(), checked.refused);
      if (!s.install_refusal_warned.exchange(true)) {
        KILN_LOG(warn, "{} (the request resolves its includes here instead; further refusals are said at debug level)",
                 text);
      } else {
        KILN_LOG(debug, "{}", text);
      }
      return checked.refused;
    }
    KILN_LOG(debug,
             "dependency manifest of request {} from another machine checked in {:.3f} ms: {} of {} header "
             "info(s) have the digest found here ({} header(s), {} bytes read)",
             request_key.hex(),
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
             checked.verified, view.files.size(), checked.reads, checked.bytes_hashed);
    if (::lstat(path.c_str(), &st) == 0) return "a manifest exists here";
    if (!s.publish(path, serialize_view(view))) return "cannot write it";
    return {};
  } catch (const std::exception& error) {
    return error.what();
  }
}

std::uint64_t DependencyManifests::installs_refused() const noexcept {
  return m_state->installs_refused.load(std::memory_order_relaxed);
}

}  // namespace kiln::cache

namespace kiln::cache::detail {

StatMemo& ManifestsAccess::stat_memo(const DependencyManifests& manifests) noexcept {
  return manifests.m_state->stat_memo;
}

}  // namespace kiln::cache::detail
