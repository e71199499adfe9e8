#include "resolve.hpp"

#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <unordered_map>
#include <unordered_set>
#include <thread>

#include "scan.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail {
namespace {

constexpr std::size_t npos = std::string_view::npos;

struct Edit {
  std::size_t begin = 0, end = 0;
  std::string replacement;
};

/// `text` with each span replaced. A replaced span that held line splices is followed by as many
/// splices, so every later line keeps its number and the logical line stays joined as it was.
std::string apply_edits(std::string_view text, const std::vector<Edit>& edits) {
  std::string out;
  out.reserve(text.size() + edits.size() * 64);
  std::size_t at = 0;
  for (const Edit& edit : edits) {
    out.append(text.substr(at, edit.begin - at));
    out += edit.replacement;
    const auto newlines = std::count(text.begin() + static_cast<std::ptrdiff_t>(edit.begin),
                                     text.begin() + static_cast<std::ptrdiff_t>(edit.end), '\n');
    for (std::ptrdiff_t i = 0; i < newlines; ++i) out += "\\\n";
    at = edit.end;
  }
  out.append(text.substr(at));
  return out;
}

/// The edits that make an include of a file from disk name it `name`, the file's compiler name.
void add_link_edits(std::vector<Edit>& edits, const IncludeRef& ref, std::string_view name) {
  if (ref.next) edits.push_back({ref.keyword_begin, ref.keyword_end, ref.has_include ? "__has_include" : "include"});
  edits.push_back({ref.operand_begin, ref.operand_end, fmt::format("\"{}\"", name)});
}

// ---- resolving ------------------------------------------------------------------------------------

/// A file whose includes are scanned: the source, a memory header, or a file read from a folder.
struct Unit {
  enum class Kind { source, memory, disk };
  Kind kind = Kind::source;
  std::string name;                   ///< source/memory: the name as given; disk: the absolute, normal path
  std::string dir;                    ///< where its quoted includes are looked up first (in-memory names or disk)
  std::optional<std::size_t> folder;  ///< disk: the folder it was found in (#include_next goes on after it)
  std::string_view text;              ///< what is scanned (source/memory: the input's; disk: the file's bytes)
  std::shared_ptr<const HeaderFileCache::File> file;  ///< disk: the file read (bytes, record, scan)
  std::string compiler_name;          ///< disk: the name the compiler gets it under
  bool named_by_include = false;      ///< disk: compiler_name is a name a computed include asks for
  std::vector<std::pair<IncludeRef, std::size_t>> links;  ///< includes that lead to a disk unit
  std::shared_ptr<const std::string> rewritten;           ///< the text the compiler gets
};

/// The folder as an absolute, normal path; IncludeError when it is empty, missing or not a folder. With
/// `memo`, a folder it saw as a folder moments ago is not stat'ed again (a request names the same few
/// folders every time).
std::string checked_folder(const std::filesystem::path& folder, StatMemo* memo = nullptr, std::int64_t now_ns = 0) {
  if (folder.empty()) throw IncludeError("an include folder is empty");
  std::string path;
  const std::string& given = folder.native();
  if (given.front() == '/' && plainly_normal(given)) {
    path = given;
  } else {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
    if (ec) throw IncludeError(fmt::format("include folder '{}': {}", folder.string(), ec.message()));
    path = normalize(absolute.string());
  }
  if (memo != nullptr) {
    if (const auto seen = memo->find(path, now_ns); seen && seen->folder) return path;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw IncludeError(fmt::format("include folder '{}' does not exist ({})", folder.string(), std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) throw IncludeError(fmt::format("include folder '{}' is not a folder", folder.string()));
  if (memo != nullptr) memo->remember(path, StatMemo::Seen{true, to_file_stat(st), now_ns, true});
  return path;
}

/// A file the resolve found by stat was gone (or no longer a regular file) when read.
struct Vanished {};

class Resolver {
 public:
  static constexpr std::size_t kMaxLoadThreads = 8;
  static constexpr std::size_t kFilesPerThread = 16;  ///< fewer files than this per thread: fewer threads

  explicit Resolver(const IncludeInput& input) : m_input(input) {
    m_access.cache = input.file_cache;
    m_access.memo = input.file_cache != nullptr ? input.stat_memo : nullptr;
    m_access.now_ns = realtime_now_ns();
    m_access.trust_window = input.trust_window;
    m_access.work = &m_work;
    for (const std::filesystem::path& folder : input.folders) m_folders.push_back(checked_folder(folder));
    Unit source;
    source.kind = Unit::Kind::source;
    source.name = std::string(input.source_name);
    source.dir = dirname(normalize(input.source_name));
    source.text = input.source_text;
    m_units.push_back(std::move(source));
    for (const MemoryHeader& header : input.memory_headers) {
      Unit unit;
      unit.kind = Unit::Kind::memory;
      unit.name = header.name;
      unit.dir = dirname(normalize(header.name));
      unit.text = header.text;
      m_memory.try_emplace(normalize(header.name), m_units.size());  // the first of equal names wins
      m_names.insert(std::string(header.name));
      m_units.push_back(std::move(unit));
    }
  }

  ResolvedIncludes run() {
    // Retry names are looked up as <name> from the source; the compiler gets them under that name.
    for (const std::string& name : m_input.retry_names) add_alias(m_units.front(), name, true, true);
    // Breadth first from the source and every memory header (a memory header no include reaches
    // may still be named by a computed one): files are read in the order they are first reached.
    // Then the computed includes' guesses, which may reach more files (with more definitions), until
    // nothing new turns up.
    std::size_t scanned = 0;
    std::unordered_set<std::string> tried;
    while (true) {
      while (scanned < m_units.size()) {
        load_unread(scanned);
        for (const std::size_t end = m_units.size(); scanned < end; ++scanned) scan(scanned);
      }
      bool guessed = false;
      for (std::size_t i = 0; i < m_computed.size(); ++i) {
        for (const Guess& guess : guess_computed(m_computed[i].operand, m_defines)) {
          const std::string key = fmt::format("{}{}{}", m_computed[i].unit, guess.angled ? '<' : '"', guess.name);
          if (!tried.insert(key).second) continue;
          guessed = true;
          add_alias(m_units[m_computed[i].unit], guess.name, guess.angled, false);
        }
      }
      if (!guessed && scanned == m_units.size()) break;
    }

    // Names are final now: rewrite every include that leads to a file from disk.
    for (const Unit& unit : m_units) {
      if (unit.kind == Unit::Kind::disk) m_records.push_back(unit.file->record);
    }
    for (Unit& unit : m_units) rewrite(unit);
    ResolvedIncludes out;
    out.compiler_source = *m_units.front().rewritten;
    out.source_links.reserve(m_source_links.size());
    for (const auto& [ref, target] : m_source_links) out.source_links.emplace_back(ref, m_units[target].compiler_name);
    out.compiler_headers.reserve(m_units.size() - 1 + m_aliases.size());
    const auto hand_over = [&](const std::string& name, const std::shared_ptr<const std::string>& text) {
      out.compiler_headers.push_back({name, *text, text});
    };
    for (std::size_t i = 1; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::memory) hand_over(m_units[i].name, m_units[i].rewritten);
    }
    for (const auto& [name, index] : m_aliases) hand_over(name, m_units[index].rewritten);
    for (std::size_t i = 1; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::disk) hand_over(m_units[i].compiler_name, m_units[i].rewritten);
    }
    out.dependencies.headers = std::move(m_records);
    out.dependencies.absent = sorted_unique(std::move(m_absent));
    out.unresolved = sorted_unique(std::move(m_unresolved));
    for (Computed& computed : m_computed) out.computed.push_back(std::move(computed.operand));
    out.computed = sorted_unique(std::move(out.computed));
    out.work = m_work;
    return out;
  }

 private:
  enum class Where { none, memory, disk };
  struct Found {
    Where where = Where::none;
    std::size_t index = 0;  ///< into m_units
  };
  struct Computed {
    std::size_t unit = 0;  ///< the file it is in
    std::string operand;
  };

  static std::vector<std::string> sorted_unique(std::vector<std::string> items) {
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    return items;
  }

  [[nodiscard]] Found memory(const std::string& name) const {
    const auto it = m_memory.find(name);
    return it == m_memory.end() ? Found{} : Found{Where::memory, it->second};
  }

  /// Reads the files from disk found since unit `first` that the HeaderFileCache did not hold, on several
  /// threads when there are many (a first resolve over a runtime's tree reads hundreds: reading and
  /// scanning them is most of its time). Where an include leads was settled by stat already, so the units
  /// and their order do not depend on when their bytes arrive. A file that no longer holds a regular file
  /// when read changed under the resolve: Vanished, and the resolve starts again.
  void load_unread(std::size_t first) {
    std::vector<std::size_t> todo;
    for (std::size_t i = first; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::disk && !m_units[i].file) todo.push_back(i);
    }
    if (todo.empty()) return;
    const unsigned hardware = std::max(1U, std::thread::hardware_concurrency());
    const auto threads = static_cast<unsigned>(
        std::min<std::size_t>({kMaxLoadThreads, hardware, (todo.size() + kFilesPerThread - 1) / kFilesPerThread}));
    std::atomic<std::size_t> next{0};
    std::vector<FileWork> works(threads);
    std::vector<std::exception_ptr> errors(threads);
    const auto work = [&](unsigned t) {
      FileAccess access = m_access;
      access.work = &works[t];
      try {
        for (std::size_t k = next++; k < todo.size(); k = next++) {
          Unit& unit = m_units[todo[k]];  // each thread fills its own units; the deque does not grow meanwhile
          std::shared_ptr<const HeaderFileCache::File> file = load_header(unit.name, access);
          if (!file) throw Vanished{};
          unit.text = file->bytes;
          unit.file = std::move(file);
        }
      } catch (...) {
        errors[t] = std::current_exception();
        next = todo.size();  // the others stop at their next file
      }
    };
    std::vector<std::thread> pool;
    pool.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& thread : pool) thread.join();
    for (const FileWork& w : works) {  // (the memo answers here are the probe's own stats, not counted twice)
      m_work.stats += w.stats;
      m_work.reads += w.reads;
    }
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);
    }
  }

  /// Where there is a regular file at `path` (absolute, normal), a unit for it (read by load_unread
  /// unless the HeaderFileCache holds it); else the path is recorded as absent. Each path is probed once.
  Found probe(const std::string& path, std::optional<std::size_t> folder) {
    const auto [it, inserted] = m_probed.try_emplace(path, npos);
    if (!inserted) return it->second == npos ? Found{} : Found{Where::disk, it->second};  // absent: listed once
    HeaderProbe found = probe_header(path, m_access);
    if (found.state == HeaderProbe::State::absent) {
      m_absent.push_back(path);
      return {};
    }
    Unit unit;
    unit.kind = Unit::Kind::disk;
    unit.name = path;
    unit.dir = dirname(path);
    unit.folder = folder;
    unit.compiler_name = m_input.vendor == Vendor::hip ? path.substr(1) : path;
    if (unit.compiler_name.find_first_of("\"\n\r") != npos) {
      throw IncludeError(fmt::format("header '{}': its path cannot be written in an #include", path));
    }
    if (m_memory.contains(normalize(unit.compiler_name)) || !m_names.insert(unit.compiler_name).second) {
      throw IncludeError(fmt::format(
          "the in-memory header '{}' has the name kiln gives the header read from '{}'; rename the in-memory header",
          unit.compiler_name, path));
    }
    if (found.file) {
      unit.text = found.file->bytes;
      unit.file = std::move(found.file);
    }  // else read with the other files found at this depth (load_unread), before it is scanned
    const std::size_t index = m_units.size();
    m_units.push_back(std::move(unit));
    it->second = index;
    return {Where::disk, index};
  }

  Found search_folders(std::string_view name, std::size_t first) {
    for (std::size_t k = first; k < m_folders.size(); ++k) {
      if (const Found found = probe(join(m_folders[k], name), k); found.where != Where::none) return found;
    }
    return {};
  }

  /// Where an include of `includer` leads. "x": the includer's folder, the memory headers by name,
  /// then the folders; <x>: the memory headers, then the folders. #include_next in a file found in
  /// folder k searches the folders after k (all of them for a file found next to its includer or by
  /// an absolute path); in the source or a memory header it is an ordinary include.
  Found resolve(const Unit& includer, const IncludeRef& ref) {
    const std::string& name = ref.name;
    if (name.empty()) return {};
    if (name.front() == '/') {
      const std::string path = normalize(name);
      if (const Found found = memory(path); found.where != Where::none) return found;
      return probe(path, std::nullopt);
    }
    const bool from_disk = includer.kind == Unit::Kind::disk;
    if (ref.next && from_disk) return search_folders(name, includer.folder ? *includer.folder + 1 : 0);
    if (!ref.angled) {
      if (from_disk) {
        if (const Found found = probe(join(includer.dir, name), std::nullopt); found.where != Where::none) return found;
      } else if (const Found found = memory(join(includer.dir, name)); found.where != Where::none) {
        return found;
      }
    }
    if (const Found found = memory(normalize(name)); found.where != Where::none) return found;
    return search_folders(name, 0);
  }

  /// A name the compiler will ask for as written (a computed include, a retry name): looked up like
  /// an include of `includer`; a file from disk found for it takes that name as its compiler name, so
  /// every include of the file, rewritten or computed, names one in-memory header (#pragma once
  /// tells files apart by name). A second such name for the same file gets a copy. A name some other
  /// header already has is left to that header.
  void add_alias(const Unit& includer, const std::string& name, bool angled, bool unresolved_if_none) {
    IncludeRef ref;
    ref.name = name;
    ref.angled = angled;
    const Found found = resolve(includer, ref);
    if (found.where == Where::none && unresolved_if_none) m_unresolved.push_back(name);
    if (found.where != Where::disk) return;
    Unit& target = m_units[found.index];
    if (target.compiler_name == name || !m_names.insert(name).second) return;
    if (target.named_by_include) {
      m_aliases.emplace_back(name, found.index);
    } else {
      m_names.erase(target.compiler_name);
      target.compiler_name = name;
      target.named_by_include = true;
    }
  }

  void scan(std::size_t index) {
    ScanResult scanned;
    const ScanResult* found = &scanned;
    if (m_units[index].file) {
      found = &m_units[index].file->scan;  // a file from disk was scanned when it was read
    } else if (index == 0 && m_input.source_scan != nullptr) {
      found = m_input.source_scan;
    } else {
      scan_includes(m_units[index].text, scanned);
    }
    for (const auto& [name, text] : found->defines) m_defines[name].push_back(text);
    for (const std::string& operand : found->computed) m_computed.push_back({index, operand});
    for (std::size_t i = 0; i < found->refs.size(); ++i) {
      const IncludeRef& ref = found->refs[i];
      const Found target = resolve(m_units[index], ref);  // (m_units is a deque: references stay valid)
      if (target.where == Where::none) m_unresolved.push_back(ref.name);
      // Memory headers keep the names they are included by: only includes of disk files change.
      if (target.where == Where::disk) {
        m_units[index].links.emplace_back(ref, target.index);
        if (index == 0) m_source_links.emplace_back(i, target.index);
      }
    }
  }

  void rewrite(Unit& unit) {
    if (unit.file) {
      // A file from disk: the text an earlier resolve built, when its includes lead to the same names.
      const HeaderFileCache::File::Rewrite& last = unit.file->last_rewrite;
      const std::lock_guard lock(unit.file->rewrite_mutex);
      if (last.text && last.names.size() == unit.links.size() &&
          std::equal(unit.links.begin(), unit.links.end(), last.names.begin(), [&](const auto& link, const auto& name) {
            return link.first.operand_begin == name.first && m_units[link.second].compiler_name == name.second;
          })) {
        unit.rewritten = last.text;
      }
    }
    if (!unit.rewritten) {
      std::vector<Edit> edits;
      for (const auto& [ref, target] : unit.links) add_link_edits(edits, ref, m_units[target].compiler_name);
      unit.rewritten = std::make_shared<const std::string>(apply_edits(unit.text, edits));
      if (unit.file) {
        HeaderFileCache::File::Rewrite built;
        built.names.reserve(unit.links.size());
        for (const auto& [ref, target] : unit.links) built.names.emplace_back(ref.operand_begin, m_units[target].compiler_name);
        built.text = unit.rewritten;
        const std::lock_guard lock(unit.file->rewrite_mutex);
        unit.file->last_rewrite = std::move(built);
      }
    }
    unit.links = {};
    unit.text = {};  // the rewritten text is all that is kept
    unit.file.reset();
  }

  const IncludeInput& m_input;
  FileWork m_work;
  FileAccess m_access;
  std::vector<std::string> m_folders;                     ///< absolute, normal
  std::unordered_map<std::string, std::size_t> m_memory;  ///< normal name -> unit
  std::unordered_map<std::string, std::size_t> m_probed;  ///< path -> disk unit, or npos: absent
  std::unordered_set<std::string> m_names;                ///< every name the compiler gets a header under
  std::deque<Unit> m_units;  ///< the source, the memory headers, then the disk files (stable references)
  std::vector<HeaderRecord> m_records;                         ///< one per disk unit, same order
  std::vector<std::pair<std::string, std::size_t>> m_aliases;  ///< name -> disk unit
  std::vector<std::pair<std::size_t, std::size_t>> m_source_links;  ///< the source's include (ref index) -> disk unit
  Defines m_defines;
  std::vector<Computed> m_computed;
  std::vector<std::string> m_absent;
  std::vector<std::string> m_unresolved;
};

/// The text between `open` and the next `close` after the first occurrence of `marker`, on one line.
std::optional<std::string> quoted_after(std::string_view log, std::string_view marker, char close) {
  const std::size_t at = log.find(marker);
  if (at == npos) return std::nullopt;
  const std::size_t begin = at + marker.size();
  const std::size_t end = log.find_first_of(std::string_view(&close, 1), begin);
  const std::size_t line_end = log.find('\n', begin);
  if (end == npos || end > line_end || end == begin) return std::nullopt;
  return std::string(log.substr(begin, end - begin));
}

}  // namespace

ResolvedIncludes resolve_includes(const IncludeInput& input) {
  // A header that vanished between its stat and its read: the tree changed under the resolve, which
  // starts again (the second sees the tree as it is now). A tree that keeps changing is an error.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      return Resolver(input).run();
    } catch (const Vanished&) {
    }
  }
  throw IncludeError("the include tree kept changing while kiln read it (a header vanished between its stat and its "
                     "read twice); try again once it is written");
}

std::string rewrite_source(std::string_view text, const ScanResult& scan,
                           std::span<const std::pair<std::size_t, std::string>> links) {
  std::vector<Edit> edits;
  edits.reserve(links.size() * 2);
  for (const auto& [ref, name] : links) add_link_edits(edits, scan.refs.at(ref), name);
  return apply_edits(text, edits);
}

std::vector<std::filesystem::path> checked_include_folders(std::span<const std::filesystem::path> folders,
                                                           StatMemo* memo) {
  std::vector<std::filesystem::path> out;
  out.reserve(folders.size());
  const std::int64_t now_ns = memo != nullptr ? realtime_now_ns() : 0;
  for (const std::filesystem::path& folder : folders) out.emplace_back(checked_folder(folder, memo, now_ns));
  return out;
}

std::optional<std::string> missing_include_from_log(std::string_view log) {
  // NVRTC: `catastrophic error: cannot open source file "x"`, or `could not open source file "x"
  // (no directories in search list)` for an <x> include.
  if (auto name = quoted_after(log, "cannot open source file \"", '"')) return name;
  if (auto name = quoted_after(log, "could not open source file \"", '"')) return name;
  // clang (HIPRTC): `fatal error: 'x' file not found`, or `error: 'x' file not found, did you mean 'y'?`.
  for (std::size_t at = log.find("' file not found"); at != npos; at = log.find("' file not found", at + 1)) {
    const std::size_t line = log.rfind('\n', at);
    const std::size_t begin = log.find("error: '", line == npos ? 0 : line + 1);
    if (begin != npos && begin < at) {
      const std::size_t name = begin + 8;
      if (name < at) return std::string(log.substr(name, at - name));
    }
  }
  return std::nullopt;
}

std::string describe_missing_include(std::string_view name, std::span<const std::filesystem::path> folders) {
  if (folders.empty()) {
    return fmt::format(
        "header '{}' is not among the in-memory headers and no include folder was given (pass -I DIR, or "
        "--toolkit-includes for the toolkit's own headers; the compiler searches neither the working directory "
        "nor the source's folder, so a header there needs -I too)",
        name);
  }
  std::string list;
  for (const std::filesystem::path& folder : folders) {
    if (!list.empty()) list += ", ";
    list += folder.string();
  }
  return fmt::format(
      "header '{}' is not among the in-memory headers nor in the include folders searched: {} (the working directory "
      "and the source's folder are not searched: a header there needs -I too)",
      name, list);
}

}  // namespace kiln::cache::detail
