// Reading dependency manifest files (raw, for the lookups and records of manifest_store.cpp too), the
// read-only queries (recorded, explain, scan, read_file) and the removals.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "atomic_file.hpp"
#include "manifest_store.hpp"
#include "manifest_view.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace detail {

std::optional<Hash128> manifest_file_hash(std::string_view shard, std::string_view name) noexcept {
  return ShardedNames(std::string(), kManifestSuffix).key_of(shard, name);
}

ReadBuffers::Buffer ReadBuffers::take(std::size_t size) {
  {
    const std::lock_guard lock(m_mutex);
    for (auto it = m_free.begin(); it != m_free.end(); ++it) {
      if (it->capacity >= size) {
        Buffer found = std::move(*it);
        m_free.erase(it);
        return found;
      }
    }
  }
  const std::size_t capacity = (std::max<std::size_t>(size, 64 * 1024) + 4095) & ~std::size_t{4095};
  return Buffer{std::make_unique_for_overwrite<std::byte[]>(capacity), capacity};
}

void ReadBuffers::give(Buffer buffer) noexcept {
  if (!buffer.bytes || buffer.capacity > kKeepBytes) return;
  const std::lock_guard lock(m_mutex);
  if (m_free.size() >= kKeep) return;  // (freed on return)
  try {
    m_free.push_back(std::move(buffer));
  } catch (...) {
  }
}

bool read_more(RawManifest& raw, std::size_t upto) {
  upto = std::min(upto, raw.size);
  if (raw.have >= upto) return true;
  int error = 0;
  const ReadStatus status = read_exact(raw.fd.get(), raw.bytes.get() + raw.have, upto - raw.have, error);
  if (status == ReadStatus::io_error) {
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("I/O error: read failed: {}", std::strerror(error));
    return false;
  }
  if (status == ReadStatus::short_read) {
    raw.kind = RawManifest::Kind::content_error;
    raw.error = fmt::format("truncated while reading: file shorter than its {} bytes", raw.size);
    return false;
  }
  raw.have = upto;
  if (raw.have == raw.size) raw.fd = detail::UniqueFd();
  return true;
}

RawManifest read_raw(const std::string& path, const ManifestLimits& limits, ReadBuffers* buffers, std::size_t prefix) {
  RawManifest raw;
  raw.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  const UniqueFd& fd = raw.fd;
  if (!fd) {
    const int error = errno;
    if (is_absence(error)) return raw;
    if (error == ELOOP) {
      raw.kind = RawManifest::Kind::content_error;
      raw.error = "a symbolic link: refused";
      raw.have_st = ::lstat(path.c_str(), &raw.st) == 0 && S_ISLNK(raw.st.st_mode);
      return raw;
    }
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("cannot open: {}", std::strerror(error));
    return raw;
  }
  if (::fstat(fd.get(), &raw.st) != 0) {
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("cannot stat: {}", std::strerror(errno));
    return raw;
  }
  raw.have_st = true;
  raw.kind = RawManifest::Kind::content_error;
  if (!S_ISREG(raw.st.st_mode)) {
    raw.error = "not a regular file";
    return raw;
  }
  if (raw.st.st_uid != ::geteuid()) {
    raw.error = fmt::format("owned by uid {}, not by the current user", raw.st.st_uid);
    return raw;
  }
  const auto size = static_cast<std::uint64_t>(raw.st.st_size);
  if (size > limits.max_file_bytes) {
    raw.error = fmt::format("file length {} exceeds the limit {}", size, limits.max_file_bytes);
    return raw;
  }
  raw.size = static_cast<std::size_t>(size);
  if (buffers != nullptr) {
    ReadBuffers::Buffer buffer = buffers->take(std::max<std::size_t>(raw.size, 1));
    raw.bytes = std::move(buffer.bytes);
    raw.capacity = buffer.capacity;
  } else {
    raw.capacity = std::max<std::size_t>(raw.size, 1);
    raw.bytes = std::make_unique_for_overwrite<std::byte[]>(raw.capacity);
  }
  if (read_more(raw, prefix > 0 ? prefix : raw.size)) raw.kind = RawManifest::Kind::ok;
  return raw;
}

}  // namespace detail

using detail::Checker;
using detail::ExpectedRequest;
using detail::FileInfo;
using detail::manifest_file_hash;
using detail::ManifestView;
using detail::Mismatch;
using detail::parse_view;
using detail::RawManifest;
using detail::read_raw;
using detail::ResultRefs;
using detail::ShardedNames;

std::optional<DependencySet> DependencyManifests::recorded(const Hash128& request_key, std::string_view request_canonical,
                                                          const Hash128& result_key) const {
  const State& s = *m_state;
  if (s.mode.load() == StoreMode::memory_only) return std::nullopt;
  const RawManifest raw = read_raw(s.path_of(request_key), m_config.limits);
  if (raw.kind != RawManifest::Kind::ok) return std::nullopt;
  const ExpectedRequest expected{request_key, request_canonical};
  std::variant<ManifestView, ContentError> parsed = parse_view(raw.span(), m_config.limits, &expected);
  const ManifestView* view = std::get_if<ManifestView>(&parsed);
  if (view == nullptr) return std::nullopt;
  for (const ResultRefs& result : view->results) {
    if (result.key != result_key) continue;
    DependencySet set;
    for (const std::uint32_t index : view->result_files(result)) {
      const FileInfo& info = view->files[index];
      set.headers.push_back(HeaderRecord{std::string(view->paths[info.path]), info.stat, info.trusted, info.digest});
    }
    for (const std::uint32_t index : view->result_absent(result)) set.absent.emplace_back(view->paths[view->absent[index]]);
    return set;
  }
  return std::nullopt;
}

std::optional<std::vector<std::byte>> DependencyManifests::bytes(const Hash128& request_key) const {
  const State& s = *m_state;
  if (s.mode.load() == StoreMode::memory_only) return std::nullopt;
  const RawManifest raw = read_raw(s.path_of(request_key), m_config.limits);
  if (raw.kind != RawManifest::Kind::ok) return std::nullopt;
  const std::variant<ManifestView, ContentError> parsed = parse_view(raw.span(), m_config.limits, nullptr);
  const ManifestView* view = std::get_if<ManifestView>(&parsed);
  if (view == nullptr || view->request_key != request_key) return std::nullopt;
  return std::vector<std::byte>(raw.span().begin(), raw.span().end());
}

ManifestExplanation DependencyManifests::explain(const Hash128& request_key, std::string_view request_canonical) const {
  const State& s = *m_state;
  ManifestExplanation out;
  if (s.mode.load() == StoreMode::memory_only) {
    out.outcome = ManifestOutcome::disabled;
    return out;
  }
  try {
    const std::int64_t now_ns = realtime_now_ns();
    const std::string path = s.path_of(request_key);
    RawManifest raw = read_raw(path, m_config.limits);
    if (raw.kind == RawManifest::Kind::absent) {
      out.outcome = ManifestOutcome::no_manifest;
      return out;
    }
    if (raw.kind == RawManifest::Kind::io_error) {
      out.outcome = ManifestOutcome::io_error;
      out.detail = fmt::format("{}: {}", path, raw.error);
      return out;
    }
    std::variant<ManifestView, ContentError> parsed = ContentError{raw.error};
    if (raw.kind == RawManifest::Kind::ok) {
      const ExpectedRequest expected{request_key, request_canonical};
      parsed = parse_view(raw.span(), m_config.limits, &expected);
    }
    if (auto* error = std::get_if<ContentError>(&parsed)) {
      out.outcome = ManifestOutcome::corrupt;
      out.detail = fmt::format("{}: {}", path, error->reason);
      return out;
    }
    const ManifestView& view = std::get<ManifestView>(parsed);
    Checker checker(view, m_config.limits, now_ns, m_config.trust_window, nullptr, m_config.stat_threads);
    out.outcome = ManifestOutcome::no_match;
    for (const ResultRefs& result : view.results) {
      const Mismatch mismatch = checker.check(result);
      ResultCheck check;
      check.result_key = result.key;
      check.change = mismatch.change;
      if (mismatch.change == DependencyChange::none) {
        out.outcome = ManifestOutcome::hit;
      } else {
        check.path.assign(view.paths[mismatch.path]);
        check.detail = detail::describe(mismatch);
      }
      out.results.push_back(std::move(check));
    }
    return out;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& error) {
    out.outcome = ManifestOutcome::io_error;
    out.detail = error.what();
    return out;
  }
}

bool DependencyManifests::remove(const Hash128& request_key) noexcept {
  if (m_state->mode.load() != StoreMode::read_write) return false;
  try {
    return ::unlink(m_state->path_of(request_key).c_str()) == 0;
  } catch (...) {
    return false;
  }
}

std::size_t DependencyManifests::clear() noexcept {
  State& s = *m_state;
  if (s.mode.load() != StoreMode::read_write) return 0;
  std::size_t removed = 0;
  try {
    s.names.for_each_shard(
        [&](std::string_view shard, const std::string& shard_path, int shard_fd) {
          DIR* files = ::fdopendir(::dup(shard_fd));
          if (files == nullptr) return;
          std::vector<std::pair<std::string, bool>> doomed;  // name, is a manifest
          while (const dirent* file = ::readdir(files)) {
            const std::string_view name(file->d_name);
            if (manifest_file_hash(shard, name)) {
              doomed.emplace_back(name, true);
            } else if (name.starts_with('.') && name.find(detail::kTempMarker) != std::string_view::npos) {
              doomed.emplace_back(name, false);
            }
          }
          ::closedir(files);
          for (const auto& [name, manifest] : doomed) {
            if (::unlinkat(shard_fd, name.c_str(), 0) == 0 && manifest) ++removed;
          }
          (void)::rmdir(shard_path.c_str());  // only when empty
        },
        nullptr);
  } catch (...) {
    // Out of memory: stop.
  }
  return removed;
}

std::vector<ScannedManifest> DependencyManifests::scan() const {
  std::vector<ScannedManifest> out;
  const State& s = *m_state;
  if (s.directory.empty()) return out;  // no cache root: nothing on disk
  // A link or file in place of the manifests folder or a shard folder is reported as itself (verify
  // --fix removes that, never anything it points to) and not entered: opened with O_NOFOLLOW. That
  // holds also when such a thing made the manifests memory-only (refused); a folder refused for its
  // owner or mode is not entered either.
  const auto not_a_folder = [&](const std::string& path, const struct stat& st) {
    ScannedManifest scanned;
    scanned.path = path;
    scanned.in_place_of_folder = true;
    scanned.size = static_cast<std::uint64_t>(st.st_size);
    scanned.error = S_ISLNK(st.st_mode) ? "a symbolic link where a folder of the cache belongs (not followed)"
                                        : "a file where a folder of the cache belongs";
    out.push_back(std::move(scanned));
  };
  if (s.mode.load() == StoreMode::memory_only) {
    const ShardedNames::Opened top = s.names.open_shard(s.directory);
    if (top.fd >= 0) ::close(top.fd);
    if (top.is_link_or_file) not_a_folder(s.directory, top.in_place);
    return out;
  }
  const auto scan_shard = [&](std::string_view shard, const std::string& shard_path, int shard_fd) {
    DIR* files = ::fdopendir(::dup(shard_fd));
    if (files == nullptr) return;
    std::vector<std::pair<std::string, Hash128>> names;
    try {
      while (const dirent* file = ::readdir(files)) {
        const std::string_view name(file->d_name);
        if (const auto hash = manifest_file_hash(shard, name)) names.emplace_back(name, *hash);
      }
    } catch (...) {
      ::closedir(files);
      throw;
    }
    ::closedir(files);
    std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [name, hash] : names) {
      ScannedManifest scanned;
      scanned.path = shard_path + "/" + name;
      scanned.request_key = hash;
      const RawManifest raw = read_raw(scanned.path.string(), m_config.limits);
      if (raw.kind == RawManifest::Kind::absent) continue;  // removed meanwhile
      if (raw.have_st) {
        scanned.size = static_cast<std::uint64_t>(raw.st.st_size);
        scanned.mtime =
            std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(raw.st.st_mtim.tv_sec) + std::chrono::nanoseconds(raw.st.st_mtim.tv_nsec)));
      }
      if (raw.kind != RawManifest::Kind::ok) {
        scanned.error = raw.error;
      } else {
        auto parsed = parse_view(raw.span(), m_config.limits, nullptr);
        if (auto* error = std::get_if<ContentError>(&parsed)) {
          scanned.error = std::move(error->reason);
        } else {
          const ManifestView& view = std::get<ManifestView>(parsed);
          if (view.request_key != hash) {
            scanned.error = fmt::format("holds request {}, not the one its name says", view.request_key.hex());
          }
          scanned.files = view.files.size();
          scanned.absent = view.absent.size();
          scanned.results = view.results.size();
        }
      }
      out.push_back(std::move(scanned));
    }
  };
  s.names.for_each_shard(scan_shard, not_a_folder, /*report_folder=*/true);
  return out;
}

std::variant<Manifest, ContentError> DependencyManifests::read_file(const std::filesystem::path& path) const {
  const RawManifest raw = read_raw(path.string(), m_config.limits);
  if (raw.kind == RawManifest::Kind::absent) return ContentError{fmt::format("cannot open: {}", std::strerror(ENOENT))};
  if (raw.kind != RawManifest::Kind::ok) return ContentError{raw.error};
  return parse_manifest(raw.span(), m_config.limits);
}

}  // namespace kiln::cache
