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

#include "resolver.hpp"
#include "scan.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail::resolving {
namespace {

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

}  // namespace

Resolver::Resolver(const IncludeInput& input) : m_input(input) {
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

ResolvedIncludes Resolver::run() {
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

void Resolver::scan_all() {
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

void Resolver::check_computed() {
  for (std::size_t i = 0; i < m_computed.size(); ++i) {
    const Computed computed = m_computed[i];  // a copy: add_alias may add to the list
    const std::vector<Guess> guesses = guess_computed(computed.operand, m_defines);
    const std::string& where = m_units[computed.unit].name;
    if (guesses.empty()) throw unnamed_include(where, computed.operand);
    for (const Guess& guess : guesses) {
      if (!guess.name.starts_with('/')) continue;
      if (m_input.traits.opens_absolute_paths) throw absolute_include_for_hip(where, computed.operand, guess.name);
      add_alias(m_units[computed.unit], guess.name, guess.angled, false);
    }
  }
}

void Resolver::note_defines(const std::vector<Define>& defines) {
  for (const Define& d : defines) m_defines[d.name].push_back({d.text, d.function_like});
}

std::vector<std::string> Resolver::sorted_unique(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  items.erase(std::unique(items.begin(), items.end()), items.end());
  return items;
}

Resolver::Found Resolver::memory(const std::string& name) const {
  const auto it = m_memory.find(name);
  return it == m_memory.end() ? Found{} : Found{Where::memory, it->second};
}

unsigned Resolver::threads_for(std::size_t items, std::size_t per_thread) {
  const unsigned hardware = std::max(1U, std::thread::hardware_concurrency());
  return static_cast<unsigned>(
      std::max<std::size_t>(1, std::min<std::size_t>({kMaxLoadThreads, hardware, items / per_thread})));
}

void Resolver::load_unread(std::size_t first) {
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

Resolver::Found Resolver::probe(const std::string& path, std::optional<std::size_t> folder) {
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
  unit.compiler_name = m_input.traits.opens_absolute_paths ? path.substr(1) : path;
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

Includer Resolver::includer_of(const Unit& unit) {
  return Includer{unit.kind == Unit::Kind::disk, unit.dir, unit.folder};
}

Resolver::Found Resolver::resolve(const Unit& includer, const IncludeRef& ref) {
  Found found;
  each_include_place(includer_of(includer), ref, m_folders, [&](const IncludePlace& place) {
    found = place.memory ? memory(place.path) : probe(place.path, place.folder);
    return found.where != Where::none;
  });
  return found;
}

Resolver::Found Resolver::add_alias(const Unit& includer, const std::string& name, bool angled,
                                    bool unresolved_if_none) {
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

void Resolver::scan(std::size_t index) {
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

void Resolver::rewrite_all() {
  std::size_t bytes = 0;
  for (const Unit& unit : m_units) bytes += unit.text.size();
  parallel_for(m_units.size(), threads_for(bytes, kRewriteBytesPerThread),
               [&](std::size_t k, FileWork&) { rewrite(m_units[k]); });
}

void Resolver::rewrite(Unit& unit) {
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

}  // namespace kiln::cache::detail::resolving

namespace kiln::cache::detail {

using namespace resolving;  // (the resolver's helpers, by their names)

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
