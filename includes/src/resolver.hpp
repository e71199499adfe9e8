#pragma once
// Private to the include home (includes/src/): the resolver behind resolve_includes() (resolve.hpp), one
// class in two files: resolve.cpp (the full scan of every branch, the search, reading, the rewrite) and
// resolve_lean.cpp (the lean walk, which follows only the includes a compile can reach).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "conditions.hpp"
#include "header_files.hpp"
#include "include_places.hpp"
#include "kiln/base/threads.hpp"
#include "resolve.hpp"
#include "scan.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail::resolving {

constexpr std::size_t npos = std::string_view::npos;

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
std::string untaken_name(std::string_view name);

/// The lean walk went too deep or too long: the resolve is made in full instead.
struct LeanGiveUp {};

/// A file the resolve found by stat was gone (or no longer a regular file) when read.
struct Vanished {};

/// One resolve of one request (resolve_includes makes it, runs it once and drops it): the units it reached,
/// where each include leads, what it read and probed, and the texts the compiler gets.
class Resolver {
 public:
  static constexpr std::size_t kMaxLoadThreads = 8;
  static constexpr std::size_t kFilesPerThread = 16;  ///< fewer files than this per thread: fewer threads
  static constexpr std::size_t kRewriteBytesPerThread = 256 << 10;  ///< less text than this per thread: fewer threads

  explicit Resolver(const IncludeInput& input);

  ResolvedIncludes run();

 private:
  /// Every include of every file reached, in every branch (the full set).
  void scan_all();

  /// Every computed include of a text the compiler gets must expand to names kiln can hand over, read and
  /// keyed: the compiler opens whatever name its expansion gives, and an absolute one from the disk (read,
  /// not keyed: an edit of it would be served the old binary). So an operand with no name at all is refused,
  /// and every absolute name one may give is read (in any branch: the lean walk may judge a branch wrong).
  /// HIPRTC reads an absolute include from the disk even when an in-memory header has its name: refused.
  void check_computed();

  /// Notes a file's #defines for computed includes (every branch).
  void note_defines(const std::vector<Define>& defines);

  enum class Where { none, memory, disk };
  struct Found {
    Where where = Where::none;
    std::size_t index = 0;  ///< into m_units
  };
  struct Computed {
    std::size_t unit = 0;  ///< the file it is in
    std::string operand;
  };

  static std::vector<std::string> sorted_unique(std::vector<std::string> items);

  [[nodiscard]] Found memory(const std::string& name) const;

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
  static unsigned threads_for(std::size_t items, std::size_t per_thread);

  /// Reads the files from disk found since unit `first` that the HeaderFileCache did not hold, on several
  /// threads when there are many (a first resolve over a runtime's tree reads hundreds: reading and
  /// scanning them is most of its time). Where an include leads was settled by stat already, so the units
  /// and their order do not depend on when their bytes arrive. A file that no longer holds a regular file
  /// when read changed under the resolve: Vanished, and the resolve starts again.
  void load_unread(std::size_t first);

  /// Where there is a regular file at `path` (absolute, normal), a unit for it (read by load_unread
  /// unless the HeaderFileCache holds it); else the path is recorded as absent. Each path is probed once.
  Found probe(const std::string& path, std::optional<std::size_t> folder);

  /// How the search order (each_include_place) sees `unit`.
  static Includer includer_of(const Unit& unit);

  /// Where an include of `includer` leads: the first of its places (each_include_place) that has a header.
  Found resolve(const Unit& includer, const IncludeRef& ref);

  /// A name the compiler will ask for as written (a computed include, a retry name): looked up like
  /// an include of `includer`; a file from disk found for it takes that name as its compiler name, so
  /// every include of the file, rewritten or computed, names one in-memory header (#pragma once
  /// tells files apart by name). A second such name for the same file gets a copy. A name some other
  /// header already has is left to that header.
  Found add_alias(const Unit& includer, const std::string& name, bool angled, bool unresolved_if_none);

  void scan(std::size_t index);

  // ---- the lean walk ----------------------------------------------------------------------------

  static constexpr std::size_t kMaxWalkDirectives = 2'000'000;  ///< directives walked in all, repeats included
  static constexpr int kMaxWalkDepth = 200;                    ///< nested includes (the compilers stop near there)

  /// The name a link gives its include: the target's compiler name, or the untaken name.
  [[nodiscard]] std::string link_name(const std::pair<IncludeRef, std::size_t>& link) const;

  /// The scan of a unit: a disk file's was made when it was read; the source's and a memory header's here.
  const ScanResult& scan_of(Unit& unit, std::size_t index);

  /// Walks the source as the compiler reads it, then the memory headers no walk entered (a computed
  /// include may name one: they are walked as if maybe entered), then reads the files found only by
  /// __has_include (handed over, never entered).
  void walk_all();

  /// What the first entry of a file notes: its definitions (for computed includes), computed operands,
  /// include guard or #pragma once, and every __has_include operand resolved, in any branch (a header the
  /// compiler probes must be there whether or not kiln thinks the branch is taken).
  void first_entry(Unit& unit, std::size_t index, const ScanResult& scan);

  /// Resolves a ref the walk takes; the target (or kNoTarget) is noted for the rewrite.
  Found take(Unit& unit, const IncludeRef& ref, std::size_t i);

  Tri condition(const Directive& d) const;

  /// Enters a unit as the compiler would, `certain` when every conditional around the include is known
  /// to be taken. A file entered before whose include guard is defined (or that has #pragma once) adds
  /// nothing; one entered before only where the walk was unsure is walked again where it is sure.
  void walk(std::size_t index, bool certain, int depth);

  /// The links of every unit from what the walk took: an include taken that leads to a file from disk
  /// names it; one not taken (in a branch the walk skipped, or in a file never entered) names the untaken
  /// name, so a compile that reaches it fails rather than read a header kiln did not hand over.
  void lean_links();

  /// Every unit's text for the compiler. Each unit is rewritten alone (its links name final names by now),
  /// so a large set (a first resolve hands the compiler megabytes) is shared among a few threads.
  void rewrite_all();

  void rewrite(Unit& unit);

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

}  // namespace kiln::cache::detail::resolving
