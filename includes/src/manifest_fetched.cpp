// The check of a dependency manifest from another machine before it is installed (manifest_fetched.hpp).
#include "manifest_fetched.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "header_files.hpp"
#include "kiln/cache/storage.hpp"
#include "paths.hpp"

namespace kiln::cache::detail {
namespace {

/// Whether `path` lies below `folder` (both absolute and normal; every other path lies below "/").
bool below(std::string_view path, std::string_view folder) {
  if (folder == "/") return path.size() > 1;
  return path.size() > folder.size() + 1 && path.starts_with(folder) && path[folder.size()] == '/';
}

/// `path` with every symbolic link resolved (realpath(3)); nullopt when that fails (a part is missing).
std::optional<std::string> real_path(const std::string& path) {
  const std::unique_ptr<char, void (*)(void*)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (!real) return std::nullopt;
  return std::string(real.get());
}

/// A request's scope (ManifestScope), normal, with its folders as they resolve.
class Scope {
 public:
  explicit Scope(const ManifestScope& scope) {
    for (const std::string& folder : scope.folders) {
      if (folder.empty() || folder.front() != '/') continue;  // (IncludeFolders hands over absolute folders)
      m_folders.push_back(normalize(folder));
      if (std::optional<std::string> real = real_path(m_folders.back())) m_real_folders.push_back(std::move(*real));
    }
    for (const std::string& file : scope.files) {
      if (!file.empty() && file.front() == '/') m_files.push_back(normalize(file));
    }
    std::sort(m_files.begin(), m_files.end());
  }

  /// Whether `path` is one of the absolute paths the request's own texts include.
  [[nodiscard]] bool named(std::string_view path) const {
    return std::binary_search(m_files.begin(), m_files.end(), path, std::less<>{});
  }

  /// Why the manifest may not name `path`, by its spelling (empty: it may). A path that is not normal
  /// is refused even when it would fold into a folder: the resolver records normal paths only, and each
  /// spelling of one file would be read again.
  [[nodiscard]] std::string_view outside(std::string_view path) const {
    if (normalize(path) != path) return "is not a normal path (\".\" or \"..\" parts, doubled or trailing slashes)";
    if (named(path)) return {};
    for (const std::string& folder : m_folders) {
      if (below(path, folder)) return {};
    }
    return "lies outside the request's include folders and is none of the absolute paths it includes";
  }

  enum class Leads : std::uint8_t { inside, outside, nowhere };
  /// Where the header `path` (accepted by outside()) leads as symbolic links resolve: below one of the
  /// folders as they resolve (or it is an absolute include of the request, which the compiler follows as
  /// it is), outside them (`real` says where), or nowhere (nothing is there to read). Its folder is
  /// resolved once per check, the file itself only when it is a link.
  Leads leads(const std::string& path, std::string& real) {
    if (named(path)) return Leads::inside;
    const std::size_t slash = path.rfind('/');
    const std::string folder = slash == 0 ? std::string("/") : path.substr(0, slash);
    auto it = m_resolved.find(folder);
    if (it == m_resolved.end()) it = m_resolved.emplace(folder, real_path(folder)).first;
    if (!it->second) return Leads::nowhere;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return Leads::nowhere;
    if (S_ISLNK(st.st_mode)) {
      std::optional<std::string> resolved = real_path(path);
      if (!resolved) return Leads::nowhere;
      real = std::move(*resolved);
    } else {
      real = *it->second == "/" ? std::string() : *it->second;
      real.append(path, slash, std::string::npos);
    }
    for (const std::string& folder_real : m_real_folders) {
      if (below(real, folder_real)) return Leads::inside;
    }
    return Leads::outside;
  }

 private:
  std::vector<std::string> m_folders;       ///< as the request names them, normal
  std::vector<std::string> m_real_folders;  ///< as they resolve (a folder that does not is left out)
  std::vector<std::string> m_files;         ///< sorted
  std::unordered_map<std::string, std::optional<std::string>> m_resolved;  ///< header folders as they resolve
};

/// What reading one header path gave.
struct Found {
  std::uint32_t path = 0;
  bool ok = false;  ///< read whole and steady: `digest` is of the bytes `stat` describes
  Hash128 digest;
  FileStat stat;
  bool trusted = false;
};

}  // namespace

FetchedCheck check_fetched(ManifestView& view, const ManifestScope& scope, const ManifestConfig& config) {
  FetchedCheck out;
  const FetchedLimits& limits = config.fetched;
  const auto started = std::chrono::steady_clock::now();
  // Counts first: they bound all that follows.
  if (view.files.size() > limits.max_files) {
    out.refused = fmt::format("it lists {} headers (at most {} are checked for a manifest from another machine)",
                              view.files.size(), limits.max_files);
    return out;
  }
  if (view.absent.size() > limits.max_absent) {
    out.refused = fmt::format("it lists {} absent paths (at most {} are checked for a manifest from another machine)",
                              view.absent.size(), limits.max_absent);
    return out;
  }
  const std::size_t max_results =
      std::max<std::size_t>(1, std::min<std::size_t>(config.max_results, config.limits.max_results));
  if (view.results.size() > max_results) {
    out.refused =
        fmt::format("it holds {} results (a manifest here keeps at most {})", view.results.size(), max_results);
    return out;
  }
  // Every path by its spelling, headers and absent paths alike (a stat tells whether a file exists),
  // before any file is touched: one path outside refuses the whole manifest.
  Scope allowed(scope);
  for (const std::string_view path : view.paths) {
    if (const std::string_view why = allowed.outside(path); !why.empty()) {
      out.refused = fmt::format("it names {}, which {}", path, why);
      return out;
    }
  }
  // Then each header path once (infos of one path with several digests share its read), within the
  // budget of bytes and time.
  std::vector<Found> found;
  found.reserve(view.files.size());
  for (const FileInfo& info : view.files) {
    Found header;
    header.path = info.path;
    found.push_back(header);
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.path < b.path; });
  found.erase(std::unique(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.path == b.path; }),
              found.end());
  const auto late = [&] { return std::chrono::steady_clock::now() - started > limits.max_time; };
  const auto too_late = [&] {
    return fmt::format("checking it took longer than {} ms ({} of {} headers read)", limits.max_time.count(), out.reads,
                       found.size());
  };
  const std::uint64_t max_header = config.limits.max_header_bytes;
  const std::int64_t now_ns = realtime_now_ns();  // before any header is read (stat_is_settled)
  std::string bytes;
  std::string real;
  for (Found& header : found) {
    if (late()) {
      out.refused = too_late();
      return out;
    }
    const std::string path(view.paths[header.path]);
    const Scope::Leads leads = allowed.leads(path, real);
    if (leads == Scope::Leads::outside) {
      out.refused = fmt::format("it names {}, which leads outside the request's include folders (to {})", path, real);
      return out;
    }
    if (leads == Scope::Leads::nowhere) continue;  // no stat: the lookup finds it vanished
    const std::uint64_t left = limits.max_bytes - out.bytes_hashed;
    const HeaderRead read =
        read_header_file(path.c_str(), bytes, std::min(max_header, left), now_ns, config.trust_window);
    ++out.reads;
    if (read.status == HeaderRead::Status::too_large && left < max_header && read.size <= max_header) {
      out.refused = fmt::format("checking it would read more than {} bytes of headers ({} of {} headers read)",
                                limits.max_bytes, out.reads - 1, found.size());
      return out;
    }
    if (read.status != HeaderRead::Status::ok) continue;  // (a header over the limit: not read, no stat)
    out.bytes_hashed += bytes.size();
    header.ok = read.steady;
    header.digest = read.digest;
    header.stat = read.stat;
    header.trusted = read.trusted;
  }
  if (late()) {
    out.refused = too_late();
    return out;
  }
  for (FileInfo& info : view.files) {
    const auto it = std::lower_bound(found.begin(), found.end(), info.path,
                                     [](const Found& f, std::uint32_t path) { return f.path < path; });
    if (it->ok && it->digest == info.digest) {
      info.stat = it->stat;
      info.trusted = it->trusted;
      ++out.verified;
    } else {
      info.stat = FileStat{};
      info.trusted = false;
    }
  }
  return out;
}

}  // namespace kiln::cache::detail

namespace kiln::cache {

ManifestConfig manifest_config_of(const Store& local) {
  ManifestConfig config;
  const StoreMode mode = local.mode();
  config.disabled = mode == StoreMode::memory_only;  // a refused or disabled root: no manifests either
  config.root = config.disabled ? std::filesystem::path() : local.config().root;
  config.read_only = mode == StoreMode::read_only;
  return config;
}

namespace {

/// Why bytes a tier found under the manifest name of `request_key` are not handed on (empty when they are):
/// parse_manifest()'s checks (bounded before any allocation: the input may be hostile) and its request key.
/// The tier refuses (deletes and counts) what fails it. Never throws.
std::string manifest_refusal(std::span<const std::byte> bytes, const Hash128& request_key) noexcept {
  try {
    auto parsed = parse_manifest(bytes);
    if (const auto* error = std::get_if<ContentError>(&parsed)) return "not a dependency manifest: " + error->reason;
    const Hash128& key = std::get<Manifest>(parsed).request_key;
    if (key != request_key) return fmt::format("the manifest of another request ({})", key.hex());
    return {};
  } catch (...) {  // std::bad_alloc
    return "cannot parse it (out of memory)";
  }
}

}  // namespace

bool DependencyManifests::fetch(Storage& storage, const Hash128& request_key, std::string_view request_canonical,
                                const ManifestScope& scope) noexcept {
  // A manifest could not be installed (memory-only or read-only): not worth a round trip per request.
  if (mode() != StoreMode::read_write) return false;
  // The tier refuses what does not parse as this request's manifest; the install checks it all again
  // against the canonical key and the request's scope, and refuses when a manifest was recorded here
  // meanwhile.
  try {
    return storage.fetch_manifest(
        request_key, [&](std::span<const std::byte> bytes) { return manifest_refusal(bytes, request_key); },
        [&](std::span<const std::byte> bytes) { return install(request_key, request_canonical, bytes, scope); });
  } catch (...) {  // std::bad_alloc making the callbacks: the request resolves
    return false;
  }
}

}  // namespace kiln::cache
