#include "lanes/nvrtc_pch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/base/log.hpp"
#include "kiln/base/xxh3.hpp"
#include "lanes/nvrtc_pch_store.hpp"

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

/// The digest naming a header set's folder (and part of its stored PCH's key): every in-memory header's name
/// and bytes, in order; and the source's name where a header names __BASE_FILE__. That macro is the compile's
/// main file, which a header expands into the PCH as the maker's (measured on 13.0: a PCH made for aaa.cu gave a
/// compile of zzz.cu the string "aaa.cu"), so such a set shares its PCH only among sources of one name.
std::pair<cache::Hash128, std::uint64_t> header_set(std::span<const HeaderText> headers, std::string_view source_name) {
  cache::detail::Xxh3Stream stream(kScopeSeed);
  std::uint64_t bytes = 0;
  bool names_base_file = false;
  constexpr std::string_view kBaseFile = "__BASE_FILE__";
  for (const HeaderText& h : headers) {
    const std::size_t name = std::strlen(h.name), text = std::strlen(h.text);
    stream.update(h.name, name + 1);  // with the NUL: names and texts cannot run into each other
    stream.update(h.text, text + 1);
    bytes += text;
    names_base_file = names_base_file || ::memmem(h.text, text, kBaseFile.data(), kBaseFile.size()) != nullptr;
  }
  if (names_base_file) {
    stream.update(kBaseFile.data(), kBaseFile.size());
    stream.update(source_name.data(), source_name.size());
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
  if (input.prelude_end == 0 || input.prelude_end > input.source.size()) return nullptr;
  // Every header the prefix includes is one level deeper once the prefix is a header: a header that reads
  // __INCLUDE_LEVEL__ would see another number (the scan refuses the prefix itself when it names it).
  // Which headers the prefix reaches is not known here, so no handed header may name it.
  constexpr std::string_view kLevel = "__INCLUDE_LEVEL__";
  for (const HeaderText& h : input.headers) {
    if (::memmem(h.text, std::strlen(h.text), kLevel.data(), kLevel.size()) != nullptr) return nullptr;
  }
  return std::make_unique<Hoisted>(input, input.prelude_end);
}

Hoisted::Hoisted(const CompileInput& input, std::size_t prelude_end) : m_input(input) {
  // A leading byte order mark stays out of the prefix: in the prelude header it would follow the #line and be
  // a stray token (the lane drops it only at the start of a text, rtc_compile.hpp).
  const std::size_t bom = input.source.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  const std::string_view prefix = input.source.substr(bom, prelude_end - bom);
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
  if (plan.marker.empty()) return notes;
  std::string kept;
  kept.reserve(log.size());
  bool dropped_warning = false, other_warning = false;
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < log.size();) {
    const std::size_t end = std::min(log.find('\n', start), log.size());
    lines.emplace_back(log.data() + start, end - start);
    start = end + 1;
  }
  for (const std::string_view line : lines) {
    if (line.find(plan.marker) == std::string_view::npos) {
      other_warning = other_warning || line.find("warning #") != std::string_view::npos ||
                      line.find("Warning #") != std::string_view::npos;
      continue;
    }
    if (line.find(": creating precompiled header file ") != std::string_view::npos) {
      notes.created = true;
    } else if (line.find(": using precompiled header file ") != std::string_view::npos) {
      notes.used = true;
    } else {
      // NVRTC did not take the PCH it was given: #629 (other flags), #630 (other leading directives), #20282
      // (another heap address). The compile went on without it.
      dropped_warning = true;
      if (notes.refusal.empty()) notes.refusal = std::string(line.substr(0, std::min<std::size_t>(line.find(". "), 300)));
    }
  }
  for (const std::string_view line : lines) {
    if (line.find(plan.marker) != std::string_view::npos) continue;
    // The remark NVRTC adds after warnings goes with the last of them.
    if (dropped_warning && !other_warning && line.starts_with("Remark: The warnings can be suppressed")) continue;
    kept.append(line);
    kept.push_back('\n');
  }
  while (!kept.empty() && kept.back() == '\n') kept.pop_back();
  if (dropped_warning && !other_warning) {
    const std::size_t first = kept.find_first_not_of('\n');
    kept.erase(0, first == std::string::npos ? kept.size() : first);
  }
  log = std::move(kept);
  return notes;
}

Folders::Folders(std::string off_reason, std::unique_ptr<Shelf> shelf, std::string no_shelf_reason)
    : m_off_reason(std::move(off_reason)),
      m_on(m_off_reason.empty()),
      m_shelf(std::move(shelf)),
      m_no_shelf_reason(std::move(no_shelf_reason)) {}

void Folders::turn_off(const std::string& reason) {
  const std::lock_guard lock(m_mutex);
  if (!m_on.exchange(false)) return;
  m_off_reason = reason;
  KILN_LOG(warn, "precompiled headers off for this process: {}", reason);
  if (!m_root.empty() && m_root_pid == ::getpid()) {
    std::error_code ignored;
    fs::remove_all(m_root, ignored);
    m_root.clear();
  }
}

bool Folders::has_room(const Plan& plan, std::uint64_t heap_bytes) {
  // NVRTC writes a PCH through a mapping of its file: a write past the space the file system has left is a
  // SIGBUS, which ends the process and cannot be caught. A PCH is an image of NVRTC's PCH heap, so it is
  // never larger than the heap (a PCH that does not fit is not made): that much room, and some to spare, or
  // this compile goes without one.
  struct statvfs fs_info {};
  if (::statvfs(plan.folder.c_str(), &fs_info) != 0) return false;
  const std::uint64_t free = static_cast<std::uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  if (free >= heap_bytes + kSpareBytes) return true;
  if (!m_space_warned.exchange(true)) {
    KILN_LOG(warn,
             "precompiled headers skipped: {} has {} MiB free, and a precompiled header may take up to {} MiB (NVRTC's "
             "PCH heap) plus {} MiB to spare; compiles go without until there is room (TMPDIR names another folder)",
             plan.folder.parent_path().parent_path().string(), free >> 20, heap_bytes >> 20, kSpareBytes >> 20);
  }
  return false;
}

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

std::optional<Plan> Folders::plan(const CompileInput& input, std::uint64_t heap_bytes) {
  if (!on()) return std::nullopt;
  // The request's own PCH flags are refused by the options; a raw flag that slipped through wins.
  if (std::any_of(input.flags.begin(), input.flags.end(), [](const std::string& f) { return is_pch_flag(f); })) {
    return std::nullopt;
  }
  const auto [digest, bytes] = header_set(input.headers, input.source_name);
  if (bytes < kMinHeaderBytes) return std::nullopt;
  if (m_shelf && input.store != nullptr) {
    // With a cache, its stored PCH decides; the folders below serve only where it leaves it to them.
    Shelf::Decision decided =
        m_shelf->decide(*input.store, m_shelf->key(input, digest, heap_bytes), bytes, heap_bytes, input.source_name);
    if (decided.kind == Shelf::Decision::Kind::skip) return std::nullopt;
    if (decided.kind == Shelf::Decision::Kind::plan) return stored_plan(std::move(decided.plan));
  }
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
  // NVRTC maps a PCH file it uses: one cut short since it was made is a SIGBUS when NVRTC reads past its end,
  // which ends the process. The folder is private to this process, so a file changed under it means something
  // else writes there: PCH goes off for the process.
  std::string changed;
  switch (check_files(plan.folder, changed)) {
    case Check::intact:
      break;
    case Check::rewritten:  // not as this process last saw it: this compile goes without
      return std::nullopt;
    case Check::cut_short:
      turn_off("a precompiled header file was cut short after this process made it (" + changed + ")");
      return std::nullopt;
  }
  if (!has_room(plan, heap_bytes)) return std::nullopt;
  plan.flags = {"-pch", "--pch-dir=" + plan.folder.string(), "--instantiate-templates-in-pch=false",
                "--pch-verbose=false", "--pch-messages=true"};
  plan.marker = "\"" + plan.folder.string() + "/";
  return plan;
}

Plan Folders::stored_plan(std::shared_ptr<StoredPlan> stored) {
  Plan plan;
  std::string file;
  if (stored->kind == StoredPlan::Kind::use) {
    file = stored->file->compiler_path();
    plan.flags.push_back("--use-pch=" + file);
  } else if (stored->kind == StoredPlan::Kind::make) {
    file = stored->draft->temp_path();
    plan.flags.push_back("--create-pch=" + file);
  }
  if (!file.empty()) {
    // The same PCH flags as the folders' (a key part: nvrtc_pch_store.cpp), messages on to tell what happened.
    plan.flags.insert(plan.flags.end(),
                      {"--instantiate-templates-in-pch=false", "--pch-verbose=false", "--pch-messages=true"});
    plan.marker = "\"" + file + "\"";
  }
  plan.stored = std::move(stored);
  return plan;
}

void Folders::note(const Plan& plan, const LogNotes& notes, double ms) {
  if (notes.used) m_used.fetch_add(1, std::memory_order_relaxed);
  if (plan.stored) {
    if (notes.created) m_made.fetch_add(1, std::memory_order_relaxed);
    m_shelf->after(*plan.stored, notes.created, notes.used, notes.refusal, ms);
    return;
  }
  if (!notes.created) return;
  m_made.fetch_add(1, std::memory_order_relaxed);
  ::utimensat(AT_FDCWD, plan.folder.c_str(), nullptr, 0);  // the folder's mtime: when it last made a PCH
  remember_files(plan.folder);
  trim();
}

namespace {

/// What says a PCH file is still the one NVRTC wrote: its inode, size and modification time.
Folders::Stamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_ino), static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

/// Each regular file of `folder` with its stat.
template <class F>
void each_file(const fs::path& folder, F&& f) {
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = (folder / e->d_name).string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) f(path, st);
  }
  ::closedir(dir);
}

}  // namespace

void Folders::remember_files(const fs::path& folder) {
  const std::lock_guard lock(m_mutex);
  each_file(folder, [&](const std::string& path, const struct stat& st) { m_files[path] = stamp_of(st); });
}

Folders::Check Folders::check_files(const fs::path& folder, std::string& changed) {
  const std::lock_guard lock(m_mutex);
  Check verdict = Check::intact;
  each_file(folder, [&](const std::string& path, const struct stat& st) {
    const auto known = m_files.find(path);
    // A file this process has not seen finished (another of its compiles may be writing it) is NVRTC's to judge.
    if (verdict == Check::cut_short || known == m_files.end()) return;
    const Stamp now = stamp_of(st);
    if (now.size < known->second.size) {
      verdict = Check::cut_short;
      changed = fmt::format("{} is {} bytes; this process made it {} bytes", path, now.size, known->second.size);
    } else if (now.inode != known->second.inode || now.size != known->second.size ||
               now.mtime_ns != known->second.mtime_ns) {
      verdict = Check::rewritten;  // NVRTC may rewrite a PCH of another prelude under the same name
    }
  });
  return verdict;
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
    each_file(f.path, [&](const std::string& path, const struct stat&) { m_files.erase(path); });
    fs::remove_all(f.path, ec);
    total -= f.bytes;
  }
}

std::string Folders::describe(std::uint64_t heap_bytes) const {
  const std::lock_guard lock(m_mutex);
  if (!on()) return "off: " + m_off_reason;
  const std::string where = !m_root.empty() ? m_root.string()
                                            : (temp_folder() / (root_prefix() + "<pid>-*")).string();
  return fmt::format("on ({} made, {} used in this process; PCH heap {} MiB; {}; where not: files in {}, at most {} "
                     "MiB a process, removed when it ends)",
                     m_made.load(), m_used.load(), heap_bytes >> 20,
                     m_shelf ? "stored PCHs " + m_shelf->describe() : "stored PCHs off: " + m_no_shelf_reason, where,
                     kMaxBytes >> 20);
}

std::string Folders::outlook(const CompileInput& input, std::uint64_t heap_bytes) const {
  if (!on()) {
    const std::lock_guard lock(m_mutex);
    return "off: " + m_off_reason;
  }
  const auto [digest, bytes] = header_set(input.headers, input.source_name);
  if (bytes < kMinHeaderBytes) {
    return fmt::format("none: {} KiB of headers reach NVRTC, under the {} KiB a precompiled header is made for",
                       bytes >> 10, kMinHeaderBytes >> 10);
  }
  if (m_shelf && input.store != nullptr) {
    // A process whose heap grew (a PCH that did not fit) keys its PCHs by the grown size: look there too.
    constexpr std::uint64_t kLargestHeap = 4ULL << 30;
    std::vector<std::pair<std::uint64_t, cache::Hash128>> grown;
    for (std::uint64_t size = (heap_bytes / kHeapStep + 1) * kHeapStep; size <= kLargestHeap; size += kHeapStep) {
      grown.emplace_back(size, m_shelf->key(input, digest, size));
    }
    return m_shelf->outlook(*input.store, m_shelf->key(input, digest, heap_bytes), bytes, heap_bytes, grown);
  }
  return fmt::format("private to each process ({}): in a process, this header set's ({} KiB) {}",
                     m_no_shelf_reason.empty() ? "no disk cache" : m_no_shelf_reason, bytes >> 10,
                     bytes < kMakeAtFirstBytes ? "first compile goes without one, its second makes one, later ones use it"
                                               : "first compile makes one, later ones use it");
}

}  // namespace kiln::vendor::pch
