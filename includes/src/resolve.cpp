#include "resolve.hpp"

#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "include_places.hpp"
#include "kiln/base/threads.hpp"
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
  std::vector<std::pair<IncludeRef, std::size_t>> links;  ///< includes that lead to a disk unit (or kUntaken)
  std::shared_ptr<const std::string> rewritten;           ///< the text the compiler gets
  // The lean walk's:
  std::shared_ptr<const ScanResult> own_scan;  ///< source/memory: its scan
  std::vector<std::size_t> ref_targets;        ///< per ref: the unit it leads to, kNotTaken or kNoTarget
  bool walked_certain = false, walked_uncertain = false;  ///< entered where the walk was (not) sure it is
  bool once = false;                                      ///< #pragma once
  std::string guard;                                      ///< its include guard's macro, if it has one
};

constexpr std::size_t kNotTaken = npos;      ///< a ref the lean walk did not take
constexpr std::size_t kNoTarget = npos - 1;  ///< a ref taken that leads nowhere (unresolved)
constexpr std::size_t kUntaken = npos - 2;   ///< a link to the untaken name (Unit::links)

/// The name an untaken include is rewritten to (no '"': it goes between quotes).
std::string untaken_name(std::string_view name) {
  std::string out(kUntakenPrefix);
  for (const char c : name) out += c == '"' ? '_' : c;
  return out;
}

/// The lean walk went too deep or too long: the resolve is made in full instead.
struct LeanGiveUp {};

/// The macro a file's include guard tests (#ifndef G / #if !defined(G), then #define G, and the matching
/// #endif last), or "".
std::string include_guard(const std::vector<Directive>& d) {
  using K = Directive::Kind;
  if (d.size() < 3 || d[1].kind != K::define || d[1].function_like || d.back().kind != K::endif) return {};
  std::string name;
  if (d[0].kind == K::ifndef) {
    name = d[0].name;
  } else if (d[0].kind == K::if_) {
    std::string text;
    for (const char c : d[0].text) {
      if (c != ' ' && c != '\t') text += c;
    }
    if (text.starts_with("!defined(") && text.ends_with(")")) name = text.substr(9, text.size() - 10);
    else if (text.starts_with("!defined")) name = text.substr(8);
  }
  if (name.empty() || name != d[1].name) return {};
  int depth = 0;  // the #endif that closes d[0] must be the last directive
  for (std::size_t i = 0; i < d.size(); ++i) {
    const K k = d[i].kind;
    if (k == K::if_ || k == K::ifdef || k == K::ifndef) ++depth;
    if (k == K::endif && --depth == 0) return i + 1 == d.size() ? name : std::string();
  }
  return {};
}

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
  static constexpr std::size_t kRewriteBytesPerThread = 256 << 10;  ///< less text than this per thread: fewer threads

  explicit Resolver(const IncludeInput& input) : m_input(input) {
    m_access.cache = input.file_cache;
    m_access.memo = input.file_cache != nullptr ? input.stat_memo : nullptr;
    m_access.now_ns = realtime_now_ns();
    m_access.trust_window = input.trust_window;
    m_access.work = &m_work;
    for (const std::filesystem::path& folder : input.folders) m_folders.push_back(checked_folder(folder));
    if (input.macros != nullptr) add_flag_defines(*input.macros, m_defines);
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
    const auto started = std::chrono::steady_clock::now();
    if (m_input.lean && m_input.macros != nullptr && m_input.retry_names.empty()) {
      walk_all();
    } else {
      scan_all();
    }
    const auto walked = std::chrono::steady_clock::now();

    // Names are final now: rewrite every include that leads to a file from disk.
    for (const Unit& unit : m_units) {
      if (unit.kind == Unit::Kind::disk) m_records.push_back(unit.file->record);
    }
    if (m_state) lean_links();
    rewrite_all();
    ResolvedIncludes out;
    out.walk_time = walked - started;
    out.rewrite_time = std::chrono::steady_clock::now() - walked;
    out.read_ahead = m_read_ahead_reads;
    out.walk_wait_time = m_wait_time;
    out.walk_read_time = m_read_time;
    out.compiler_source = *m_units.front().rewritten;
    out.source_links.reserve(m_source_links.size());
    for (const auto& [ref, target] : m_source_links) out.source_links.emplace_back(ref, m_units[target].compiler_name);
    for (auto& [ref, name] : m_source_untaken) out.source_links.emplace_back(ref, std::move(name));
    if (!m_source_untaken.empty()) std::sort(out.source_links.begin(), out.source_links.end());
    {
      // The compiler's prelude: from the source's scan, not a scan of the rewritten text (the caller's scan
      // when it made one, as the engine's requests do).
      ScanResult scanned;
      const ScanResult* source_scan = m_input.source_scan;
      if (source_scan == nullptr) {
        scan_includes(m_input.source_text, scanned);
        source_scan = &scanned;
      }
      out.prelude_end = rewritten_prelude_end(m_input.source_text, *source_scan, out.source_links, out.compiler_source);
    }
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
    out.lean = m_state.has_value();
    out.untaken = m_untaken;
    return out;
  }

 private:
  /// Every include of every file reached, in every branch (the full set).
  void scan_all() {
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
    check_computed();
    load_unread(0);
  }

  /// Every computed include of a text the compiler gets must expand to names kiln can hand over, read and
  /// keyed: the compiler opens whatever name its expansion gives, and an absolute one from the disk (read,
  /// not keyed: an edit of it would be served the old binary). So an operand with no name at all is refused,
  /// and every absolute name one may give is read (in any branch: the lean walk may judge a branch wrong).
  /// HIPRTC reads an absolute include from the disk even when an in-memory header has its name: refused.
  void check_computed() {
    for (std::size_t i = 0; i < m_computed.size(); ++i) {
      const Computed computed = m_computed[i];  // a copy: add_alias may add to the list
      const std::vector<Guess> guesses = guess_computed(computed.operand, m_defines);
      const std::string& where = m_units[computed.unit].name;
      if (guesses.empty()) throw unnamed_include(where, computed.operand);
      for (const Guess& guess : guesses) {
        if (!guess.name.starts_with('/')) continue;
        if (m_input.vendor != Vendor::cuda) throw absolute_include_for_hip(where, computed.operand, guess.name);
        add_alias(m_units[computed.unit], guess.name, guess.angled, false);
      }
    }
  }

  /// Notes a file's #defines for computed includes (every branch).
  void note_defines(const std::vector<Define>& defines) {
    for (const Define& d : defines) m_defines[d.name].push_back({d.text, d.function_like});
  }

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

  /// Calls `job(k, work)` for every k below `count`, on up to `threads` threads (this one among them), each
  /// with a FileWork of its own, added to the resolve's at the end. The first exception stops the others
  /// at their next item and is rethrown here.
  template <class Job>
  void parallel_for(std::size_t count, unsigned threads, Job&& job) {
    std::vector<FileWork> works(threads);
    const auto count_work = [&] {  // (the memo answers here are the probe's own stats, not counted twice)
      for (const FileWork& w : works) {
        m_work.stats += w.stats;
        m_work.reads += w.reads;
      }
    };
    try {
      kiln::detail::share_items(count, threads, 1, [&](std::size_t k, unsigned t) { job(k, works[t]); });
    } catch (...) {
      count_work();
      throw;
    }
    count_work();
  }

  /// How many threads share `items` items of which each thread should get at least `per_thread`.
  static unsigned threads_for(std::size_t items, std::size_t per_thread) {
    const unsigned hardware = std::max(1U, std::thread::hardware_concurrency());
    return static_cast<unsigned>(
        std::max<std::size_t>(1, std::min<std::size_t>({kMaxLoadThreads, hardware, items / per_thread})));
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
    parallel_for(todo.size(), threads_for(todo.size() + kFilesPerThread - 1, kFilesPerThread),
                 [&](std::size_t k, FileWork& work) {
                   FileAccess access = m_access;
                   access.work = &work;
                   Unit& unit = m_units[todo[k]];  // each thread fills its own units; the deque does not grow meanwhile
                   std::shared_ptr<const HeaderFileCache::File> file = load_header(unit.name, access);
                   if (!file) throw Vanished{};
                   unit.text = file->bytes;
                   unit.file = std::move(file);
                 });
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

  /// How the search order (each_include_place) sees `unit`.
  static Includer includer_of(const Unit& unit) {
    return Includer{unit.kind == Unit::Kind::disk, unit.dir, unit.folder};
  }

  /// Where an include of `includer` leads: the first of its places (each_include_place) that has a header.
  Found resolve(const Unit& includer, const IncludeRef& ref) {
    Found found;
    each_include_place(includer_of(includer), ref, m_folders, [&](const IncludePlace& place) {
      found = place.memory ? memory(place.path) : probe(place.path, place.folder);
      return found.where != Where::none;
    });
    return found;
  }

  /// A name the compiler will ask for as written (a computed include, a retry name): looked up like
  /// an include of `includer`; a file from disk found for it takes that name as its compiler name, so
  /// every include of the file, rewritten or computed, names one in-memory header (#pragma once
  /// tells files apart by name). A second such name for the same file gets a copy. A name some other
  /// header already has is left to that header.
  Found add_alias(const Unit& includer, const std::string& name, bool angled, bool unresolved_if_none) {
    IncludeRef ref;
    ref.name = name;
    ref.angled = angled;
    const Found found = resolve(includer, ref);
    if (found.where == Where::none && unresolved_if_none) m_unresolved.push_back(name);
    if (found.where != Where::disk) return found;
    Unit& target = m_units[found.index];
    if (target.compiler_name == name || !m_names.insert(name).second) return found;
    if (target.named_by_include) {
      m_aliases.emplace_back(name, found.index);
    } else {
      m_names.erase(target.compiler_name);
      target.compiler_name = name;
      target.named_by_include = true;
    }
    return found;
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
    note_defines(found->defines);
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


  // ---- the lean walk ----------------------------------------------------------------------------

  static constexpr std::size_t kMaxWalkDirectives = 2'000'000;  ///< directives walked in all, repeats included
  static constexpr int kMaxWalkDepth = 200;                    ///< nested includes (the compilers stop near there)

  /// The name a link gives its include: the target's compiler name, or the untaken name.
  [[nodiscard]] std::string link_name(const std::pair<IncludeRef, std::size_t>& link) const {
    return link.second == kUntaken ? untaken_name(link.first.name) : m_units[link.second].compiler_name;
  }

  /// The scan of a unit: a disk file's was made when it was read; the source's and a memory header's here.
  const ScanResult& scan_of(Unit& unit, std::size_t index) {
    if (unit.file) return unit.file->scan;
    if (!unit.own_scan) {
      if (index == 0 && m_input.source_scan != nullptr) {
        unit.own_scan = std::shared_ptr<const ScanResult>(std::shared_ptr<const ScanResult>(), m_input.source_scan);
      } else {
        auto scanned = std::make_shared<ScanResult>();
        scan_includes(unit.text, *scanned);
        unit.own_scan = std::move(scanned);
      }
    }
    return *unit.own_scan;
  }

  /// Walks the source as the compiler reads it, then the memory headers no walk entered (a computed
  /// include may name one: they are walked as if maybe entered), then reads the files found only by
  /// __has_include (handed over, never entered).
  void walk_all() {
    m_state.emplace(*m_input.macros);
    HeaderReadAhead read_ahead(m_access, m_folders);
    m_read_ahead = read_ahead.on() ? &read_ahead : nullptr;
    struct Clear {
      HeaderReadAhead*& p;
      ~Clear() { p = nullptr; }
    } clear{m_read_ahead};
    walk(0, true, 0);
    for (std::size_t i = 1; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::memory && !m_units[i].walked_certain && !m_units[i].walked_uncertain) {
        walk(i, false, 0);
      }
    }
    m_read_ahead_reads = read_ahead.finish();
    check_computed();
    load_unread(0);
  }

  /// What the first entry of a file notes: its definitions (for computed includes), computed operands,
  /// include guard or #pragma once, and every __has_include operand resolved, in any branch (a header the
  /// compiler probes must be there whether or not kiln thinks the branch is taken).
  void first_entry(Unit& unit, std::size_t index, const ScanResult& scan) {
    unit.ref_targets.assign(scan.refs.size(), kNotTaken);
    note_defines(scan.defines);
    for (const std::string& operand : scan.computed) m_computed.push_back({index, operand});
    unit.guard = include_guard(scan.directives);
    int depth = 0;
    for (const Directive& d : scan.directives) {
      using K = Directive::Kind;
      if (d.kind == K::if_ || d.kind == K::ifdef || d.kind == K::ifndef) ++depth;
      if (d.kind == K::endif) --depth;
      if (d.kind == K::pragma_once && depth == 0) unit.once = true;
    }
    if (m_read_ahead != nullptr) m_read_ahead->add(includer_of(unit), scan.refs);
    for (std::size_t i = 0; i < scan.refs.size(); ++i) {
      if (scan.refs[i].has_include) take(unit, scan.refs[i], i);
    }
  }

  /// Resolves a ref the walk takes; the target (or kNoTarget) is noted for the rewrite.
  Found take(Unit& unit, const IncludeRef& ref, std::size_t i) {
    const Found target = resolve(unit, ref);
    if (target.where == Where::none) {
      m_unresolved.push_back(ref.name);
      unit.ref_targets[i] = kNoTarget;
    } else {
      unit.ref_targets[i] = target.index;
    }
    return target;
  }

  Tri condition(const Directive& d) const {
    using K = Directive::Kind;
    switch (d.kind) {
      case K::if_:
      case K::elif:
        return m_state->evaluate(d.text);
      case K::ifdef:
      case K::elifdef:
        return m_state->defined(d.name);
      case K::ifndef:
      case K::elifndef: {
        const Tri t = m_state->defined(d.name);
        return t == Tri::unknown ? t : (t == Tri::yes ? Tri::no : Tri::yes);
      }
      default:
        return Tri::yes;  // #else
    }
  }

  /// Enters a unit as the compiler would, `certain` when every conditional around the include is known
  /// to be taken. A file entered before whose include guard is defined (or that has #pragma once) adds
  /// nothing; one entered before only where the walk was unsure is walked again where it is sure.
  void walk(std::size_t index, bool certain, int depth) {
    if (depth > kMaxWalkDepth) throw LeanGiveUp{};
    Unit& unit = m_units[index];  // (m_units is a deque: references stay valid as it grows)
    if (unit.kind == Unit::Kind::disk && !unit.file) {
      const auto asked = std::chrono::steady_clock::now();
      if (m_read_ahead != nullptr) {
        m_read_ahead->start();
        m_read_ahead->wait_for(unit.name);  // a helper reading it now: it will be in the cache
      }
      const auto waited = std::chrono::steady_clock::now();
      std::shared_ptr<const HeaderFileCache::File> file = load_header(unit.name, m_access);
      m_wait_time += waited - asked;
      m_read_time += std::chrono::steady_clock::now() - waited;
      if (!file) throw Vanished{};
      unit.text = file->bytes;
      unit.file = std::move(file);
    }
    const ScanResult& scan = scan_of(unit, index);
    if (unit.walked_certain || unit.walked_uncertain) {
      const bool seen_here = unit.walked_certain || !certain;  // entered before at least as surely as now
      if (unit.once && seen_here) return;
      if (!unit.guard.empty()) {
        const Tri guarded = m_state->defined(unit.guard);
        if (guarded == Tri::yes || (guarded == Tri::unknown && seen_here)) return;
      }
    } else {
      first_entry(unit, index, scan);
    }
    (certain ? unit.walked_certain : unit.walked_uncertain) = true;
    m_walked += scan.directives.size();
    if (m_walked > kMaxWalkDirectives) throw LeanGiveUp{};

    struct Group {
      bool parent_live, parent_certain;
      bool live = false, certain = false;
      bool done = false;   ///< a branch known to be taken was seen: the rest are not
      bool maybe = false;  ///< a branch that may be taken was seen: the rest are not certain
    };
    std::vector<Group> groups;
    bool live = true, here = certain;
    const auto enter = [](Group& g, Tri c) {
      g.live = c != Tri::no;
      g.certain = g.parent_certain && !g.maybe && c == Tri::yes;
      if (c == Tri::yes) g.done = true;
      if (c == Tri::unknown) g.maybe = true;
    };
    using K = Directive::Kind;
    const std::vector<Directive>& directives = scan.directives;
    for (std::size_t at = 0; at < directives.size(); ++at) {
      const Directive& d = directives[at];
      switch (d.kind) {
        case K::if_:
        case K::ifdef:
        case K::ifndef: {
          if (at < scan.inert_until.size() && scan.inert_until[at] != 0) {
            at = scan.inert_until[at];  // to its #endif: no branch of it changes what is read or defined
            continue;
          }
          Group g{live, here};
          if (live && &d == &scan.directives.front() && !unit.guard.empty() && !m_state->tracked(unit.guard)) {
            // A file's include guard that nothing defined yet: not defined, whatever its form (a compiler
            // that predefined a header's guard would compile the header empty).
            enter(g, Tri::yes);
          } else if (live) {
            enter(g, condition(d));
          } else {
            g.done = true;
          }
          groups.push_back(g);
          break;
        }
        case K::elif:
        case K::elifdef:
        case K::elifndef:
        case K::else_: {
          if (groups.empty()) break;  // a stray one: the compiler reports it
          Group& g = groups.back();
          if (!g.parent_live || g.done) {
            g.live = false;
          } else {
            enter(g, condition(d));
          }
          break;
        }
        case K::endif:
          if (!groups.empty()) groups.pop_back();
          break;
        default:
          if (!live) break;
          if (d.kind == K::define) {
            m_state->define(d.name, d.text, d.function_like, here);
          } else if (d.kind == K::undef) {
            m_state->undefine(d.name, here);
          } else if (d.kind == K::include) {
            const Found target = take(unit, scan.refs[d.index], d.index);
            if (target.where != Where::none) walk(target.index, here, depth + 1);
          } else if (d.kind == K::computed) {
            // Every name its operand may expand to, walked as maybe entered (the engine retries for a name
            // no guess reaches).
            for (const Guess& guess : guess_computed(scan.computed[d.index], m_defines)) {
              const Found target = add_alias(unit, guess.name, guess.angled, false);
              if (target.where != Where::none) walk(target.index, false, depth + 1);
            }
          }
          continue;
      }
      live = groups.empty() ? true : groups.back().live;
      here = groups.empty() ? certain : groups.back().certain;
    }
  }

  /// The links of every unit from what the walk took: an include taken that leads to a file from disk
  /// names it; one not taken (in a branch the walk skipped, or in a file never entered) names the untaken
  /// name, so a compile that reaches it fails rather than read a header kiln did not hand over.
  void lean_links() {
    for (std::size_t index = 0; index < m_units.size(); ++index) {
      Unit& unit = m_units[index];
      const ScanResult& scan = scan_of(unit, index);
      unit.links.clear();
      for (std::size_t i = 0; i < scan.refs.size(); ++i) {
        const IncludeRef& ref = scan.refs[i];
        const std::size_t target = unit.ref_targets.empty() ? kNotTaken : unit.ref_targets[i];
        if (target == kNotTaken) {
          if (ref.has_include) continue;  // in a file never entered: nothing asks
          unit.links.emplace_back(ref, kUntaken);
          ++m_untaken;
          if (index == 0) m_source_untaken.emplace_back(i, untaken_name(ref.name));
        } else if (target != kNoTarget && m_units[target].kind == Unit::Kind::disk) {
          unit.links.emplace_back(ref, target);
          if (index == 0) m_source_links.emplace_back(i, target);
        }
      }
    }
  }

  /// Every unit's text for the compiler. Each unit is rewritten alone (its links name final names by now),
  /// so a large set (a first resolve hands the compiler megabytes) is shared among a few threads.
  void rewrite_all() {
    std::size_t bytes = 0;
    for (const Unit& unit : m_units) bytes += unit.text.size();
    parallel_for(m_units.size(), threads_for(bytes, kRewriteBytesPerThread),
                 [&](std::size_t k, FileWork&) { rewrite(m_units[k]); });
  }

  void rewrite(Unit& unit) {
    if (unit.file) {
      // A file from disk: the text an earlier resolve built, when its includes lead to the same names.
      const HeaderFileCache::File::Rewrite& last = unit.file->last_rewrite;
      const std::lock_guard lock(unit.file->rewrite_mutex);
      if (last.text && last.names.size() == unit.links.size() &&
          std::equal(unit.links.begin(), unit.links.end(), last.names.begin(), [&](const auto& link, const auto& name) {
            return link.first.operand_begin == name.first && link_name(link) == name.second;
          })) {
        unit.rewritten = last.text;
      }
    }
    if (!unit.rewritten) {
      std::vector<Edit> edits;
      for (const auto& link : unit.links) add_link_edits(edits, link.first, link_name(link));
      unit.rewritten = std::make_shared<const std::string>(apply_edits(unit.text, edits));
      if (unit.file) {
        HeaderFileCache::File::Rewrite built;
        built.names.reserve(unit.links.size());
        for (const auto& link : unit.links) built.names.emplace_back(link.first.operand_begin, link_name(link));
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
  std::optional<MacroState> m_state;  ///< the lean walk's
  HeaderReadAhead* m_read_ahead = nullptr;     ///< the lean walk's read-ahead, while it runs (walk_all)
  std::uint32_t m_read_ahead_reads = 0;  ///< files the read-ahead read
  std::chrono::nanoseconds m_wait_time{}, m_read_time{};  ///< the walk's waits for the read-ahead, and its own reads
  std::size_t m_walked = 0;           ///< directives it walked
  std::size_t m_untaken = 0;          ///< includes it left behind
  std::vector<std::pair<std::size_t, std::string>> m_source_untaken;  ///< the source's (ref index, untaken name)
  std::vector<std::string> m_absent;
  std::vector<std::string> m_unresolved;
};

/// The text between `open` and the next `close` after the first occurrence of `marker`, on one line.
}  // namespace

ResolvedIncludes resolve_includes(const IncludeInput& input) {
  // A header that vanished between its stat and its read: the tree changed under the resolve, which
  // starts again (the second sees the tree as it is now). A tree that keeps changing is an error.
  // A lean walk that went too deep or too long gives way to the full resolve.
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      try {
        return Resolver(input).run();
      } catch (const LeanGiveUp&) {
        IncludeInput full = input;
        full.lean = false;
        return Resolver(full).run();
      }
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

std::size_t rewritten_prelude_end(std::string_view text, const ScanResult& scan,
                                  std::span<const std::pair<std::size_t, std::string>> links,
                                  std::string_view rewritten) {
  std::vector<Edit> edits;
  edits.reserve(links.size() * 2);
  for (const auto& [ref, name] : links) {
    // An #include_next becomes an #include, which may move the prelude's end (the scan stops the prelude
    // at an #include_next): the rewritten text is scanned. Rare in a source (it is a header's directive).
    if (scan.refs.at(ref).next) {
      ScanResult again;
      scan_includes(rewritten, again);
      return again.prelude_end;
    }
    add_link_edits(edits, scan.refs.at(ref), name);
  }
  // Otherwise the rewrite changes only include operands, which decide nothing about the prelude: its end
  // moves by what apply_edits adds before it (the operand's new text, a splice per newline the old held).
  const std::size_t end = scan.prelude_end;
  if (end == 0) return 0;
  std::ptrdiff_t shift = 0;
  for (const Edit& edit : edits) {
    if (edit.end > end) continue;
    const auto newlines = std::count(text.begin() + static_cast<std::ptrdiff_t>(edit.begin),
                                     text.begin() + static_cast<std::ptrdiff_t>(edit.end), '\n');
    shift += static_cast<std::ptrdiff_t>(edit.replacement.size()) + 2 * newlines -
             static_cast<std::ptrdiff_t>(edit.end - edit.begin);
  }
  return static_cast<std::size_t>(static_cast<std::ptrdiff_t>(end) + shift);
}

std::vector<std::filesystem::path> checked_include_folders(std::span<const std::filesystem::path> folders,
                                                           StatMemo* memo) {
  std::vector<std::filesystem::path> out;
  out.reserve(folders.size());
  const std::int64_t now_ns = memo != nullptr ? realtime_now_ns() : 0;
  for (const std::filesystem::path& folder : folders) out.emplace_back(checked_folder(folder, memo, now_ns));
  return out;
}

}  // namespace kiln::cache::detail
