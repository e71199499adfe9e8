#include "lanes/nvrtc_pch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/base/log.hpp"
#include "kiln/base/xxh3.hpp"
#include "scan.hpp"

namespace kiln::vendor::pch {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kScopeSeed = 0x6b696c6e2d706368ULL;  // "kiln-pch": the folder digest's own seed

std::string root_prefix() { return fmt::format("kiln-pch-{}-", static_cast<unsigned long>(::geteuid())); }

fs::path temp_folder() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && tmp[0] == '/' ? fs::path(tmp) : fs::path("/tmp");
}

/// Removes the roots of this user's processes that are gone: <tmp>/kiln-pch-<uid>-<pid>-XXXXXX whose pid
/// no longer runs. A folder of a live process (or of a pid reused since) is left alone.
void sweep_dead_roots(const fs::path& tmp) {
  DIR* dir = ::opendir(tmp.c_str());
  if (dir == nullptr) return;
  const std::string prefix = root_prefix();
  std::vector<fs::path> dead;
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name(e->d_name);
    if (!name.starts_with(prefix)) continue;
    const long pid = std::strtol(e->d_name + prefix.size(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    struct stat st {};
    const fs::path path = tmp / name;
    // Only a real folder of ours: never follow a link planted under that name.
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid()) dead.push_back(path);
  }
  ::closedir(dir);
  for (const fs::path& path : dead) {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
}

/// The digest naming a header set's folder: every in-memory header's name and bytes, in order.
std::pair<cache::Hash128, std::uint64_t> header_set(std::span<const HeaderText> headers) {
  cache::detail::Xxh3Stream stream(kScopeSeed);
  std::uint64_t bytes = 0;
  for (const HeaderText& h : headers) {
    const std::size_t name = std::strlen(h.name), text = std::strlen(h.text);
    stream.update(h.name, name + 1);  // with the NUL: names and texts cannot run into each other
    stream.update(h.text, text + 1);
    bytes += text;
  }
  return {stream.digest(), bytes};
}

}  // namespace

std::unique_ptr<Hoisted> Hoisted::make(const CompileInput& input) {
  // Debug and line information would name the prelude header in their tables.
  for (std::string_view flag : input.flags) {
    while (flag.starts_with('-')) flag.remove_prefix(1);
    if (flag == "G" || flag.starts_with("device-debug") || flag.starts_with("lineinfo") ||
        flag.starts_with("generate-line-info") || flag.starts_with("dopt")) {
      return nullptr;
    }
  }
  // The name goes into `#line N "<name>"`, which has no escapes for these.
  if (input.source_name.empty() || input.source_name.find_first_of("\"\\\n\r") != std::string_view::npos) return nullptr;
  if (input.source.find("include") == std::string_view::npos) return nullptr;
  cache::detail::ScanResult scan;
  cache::detail::scan_includes(input.source, scan);
  if (scan.prelude_end == 0 || scan.prelude_end > input.source.size()) return nullptr;
  return std::make_unique<Hoisted>(input, scan.prelude_end);
}

Hoisted::Hoisted(const CompileInput& input, std::size_t prelude_end) : m_input(input) {
  const std::string_view prefix = input.source.substr(0, prelude_end);
  const std::string_view rest = input.source.substr(prelude_end);
  // Named by its text, so that the compiles sharing a prefix hand NVRTC the same header under the same name
  // (the PCH is taken only then).
  cache::detail::Xxh3Stream stream(kScopeSeed);
  stream.update(prefix.data(), prefix.size());
  m_prelude_name = fmt::format("__kiln_prelude_{}.h", stream.digest().hex());
  // The prefix keeps its lines and the source's name; the rest starts at the line it had (the prefix ends
  // with the newline of its last #include, so the rest's first line is the prefix's newlines plus one).
  m_prelude_text = fmt::format("#line 1 \"{}\"\n{}", input.source_name, prefix);
  const auto lines = static_cast<std::size_t>(std::count(prefix.begin(), prefix.end(), '\n'));
  m_source = fmt::format("#include \"{}\"\n#line {} \"{}\"\n{}", m_prelude_name, lines + 1, input.source_name, rest);
  m_headers.assign(input.headers.begin(), input.headers.end());
  m_headers.push_back({m_prelude_name.c_str(), m_prelude_text.c_str()});
  m_input.source = m_source;
  m_input.headers = m_headers;
}

bool is_pch_flag(std::string_view flag) noexcept {
  while (flag.starts_with('-')) flag.remove_prefix(1);
  return flag == "pch" || flag.starts_with("pch-") || flag.starts_with("create-pch") || flag.starts_with("use-pch") ||
         flag.starts_with("instantiate-templates-in-pch");
}

LogNotes strip_pch_messages(std::string& log, const Plan& plan) {
  LogNotes notes;
  const std::string folder = "\"" + plan.folder.string() + "/";
  std::string kept;
  kept.reserve(log.size());
  for (std::size_t start = 0; start < log.size();) {
    const std::size_t end = std::min(log.find('\n', start), log.size());
    const std::string_view line(log.data() + start, end - start);
    const bool ours = line.find(folder) != std::string_view::npos;
    if (ours && line.find(": creating precompiled header file ") != std::string_view::npos) {
      notes.created = true;
    } else if (ours && line.find(": using precompiled header file ") != std::string_view::npos) {
      notes.used = true;
    } else {
      kept.append(line);
      if (end < log.size()) kept.push_back('\n');
    }
    start = end + 1;
  }
  while (!kept.empty() && kept.back() == '\n') kept.pop_back();
  log = std::move(kept);
  return notes;
}

Folders::Folders(std::string off_reason) : m_off_reason(std::move(off_reason)) {}

Folders::~Folders() {
  const std::lock_guard lock(m_mutex);
  if (!m_root.empty() && m_root_pid == ::getpid()) {
    std::error_code ignored;
    fs::remove_all(m_root, ignored);
  }
}

std::optional<fs::path> Folders::root() {
  const std::lock_guard lock(m_mutex);
  if (!m_root.empty() && m_root_pid == ::getpid()) return m_root;
  if (m_root_failed) return std::nullopt;
  // First use in this process (or in a child forked after the parent's first use: its own root).
  const fs::path tmp = temp_folder();
  sweep_dead_roots(tmp);
  std::string templ = (tmp / fmt::format("{}{}-XXXXXX", root_prefix(), static_cast<long>(::getpid()))).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    m_root_failed = true;
    KILN_LOG(warn, "precompiled headers off: cannot make a private folder under {}: {}", tmp.string(),
             std::strerror(errno));
    return std::nullopt;
  }
  m_root = templ;
  m_root_pid = ::getpid();
  return m_root;
}

std::optional<Plan> Folders::plan(const CompileInput& input) {
  if (!on()) return std::nullopt;
  // The request's own PCH flags are refused by the options; a raw flag that slipped through wins.
  if (std::any_of(input.flags.begin(), input.flags.end(), [](const std::string& f) { return is_pch_flag(f); })) {
    return std::nullopt;
  }
  const auto [digest, bytes] = header_set(input.headers);
  if (bytes < kMinHeaderBytes) return std::nullopt;
  {
    // A header set's first compile goes without: making a PCH costs more than it saves in that compile
    // (measured on the H200: a process's first request 1.04x bare NVRTC with it, 0.94x without), and
    // only a set that comes again can use one. A heavy set makes it at once (kMakeAtFirstBytes).
    const std::lock_guard lock(m_mutex);
    if (m_seen.insert(digest).second && bytes < kMakeAtFirstBytes) return std::nullopt;
  }
  const std::optional<fs::path> where = root();
  if (!where) return std::nullopt;
  Plan plan;
  plan.folder = *where / digest.hex();
  if (::mkdir(plan.folder.c_str(), 0700) != 0 && errno != EEXIST) return std::nullopt;
  plan.flags = {"-pch", "--pch-dir=" + plan.folder.string(), "--instantiate-templates-in-pch=false",
                "--pch-verbose=false", "--pch-messages=true"};
  return plan;
}

void Folders::note(const Plan& plan, const LogNotes& notes) {
  if (notes.used) m_used.fetch_add(1, std::memory_order_relaxed);
  if (!notes.created) return;
  m_made.fetch_add(1, std::memory_order_relaxed);
  ::utimensat(AT_FDCWD, plan.folder.c_str(), nullptr, 0);  // the folder's mtime: when it last made a PCH
  trim();
}

void Folders::trim() {
  const std::lock_guard lock(m_mutex);
  if (m_root.empty()) return;
  struct Folder {
    fs::path path;
    fs::file_time_type made;
    std::uint64_t bytes = 0;
  };
  std::vector<Folder> folders;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(m_root, ec)) {
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    Folder f{entry.path(), entry.last_write_time(ec), 0};
    for (const fs::directory_entry& file : fs::directory_iterator(entry.path(), ec)) {
      if (file.is_regular_file(ec)) f.bytes += file.file_size(ec);
    }
    total += f.bytes;
    folders.push_back(std::move(f));
  }
  if (total <= kMaxBytes) return;
  std::sort(folders.begin(), folders.end(), [](const Folder& a, const Folder& b) { return a.made < b.made; });
  for (const Folder& f : folders) {
    if (total <= kMaxBytes) break;
    // A compile that is using a file of this folder keeps its open file; a later one makes it again.
    fs::remove_all(f.path, ec);
    total -= f.bytes;
  }
}

std::string Folders::describe(std::uint64_t heap_bytes) const {
  if (!on()) return "off: " + m_off_reason;
  return fmt::format("on ({} made, {} used in this process; PCH heap {} MiB)", m_made.load(), m_used.load(),
                     heap_bytes >> 20);
}

}  // namespace kiln::vendor::pch
