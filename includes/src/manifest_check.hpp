#pragma once
// Private to the include home (includes/src/): checking a manifest's results against the file
// system (the lookups of manifest_store.cpp, explain() in manifest_read.cpp): each path is stat'ed (and a
// header re-read, by read_header_file) at most once per lookup, large results on several threads; what
// one lookup learned serves the next ones of the same DependencyManifests for a while (the stat memo,
// and whole dependency sets checked moments ago).
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "manifest_view.hpp"
#include "stat_memo.hpp"

namespace kiln::cache::detail {

/// A stat error that means "there is nothing at this path" (a component that is not a directory: the
/// compiler's probe cannot open anything there either).
inline bool is_absence(int error) noexcept { return error == ENOENT || error == ENOTDIR; }

/// What re-reading one header gave.
struct ReadProbe {
  bool ok = false;
  int error = 0;                                     ///< errno of the failed read
  DependencyChange change = DependencyChange::none;  ///< why the read failed
  const char* what = "";                             ///< static text for a failed read
  FileStat read_stat;                                ///< from fstat(2) of the file read (unchanged across the read)
  bool trusted = false;                              ///< read_stat lies outside the trust window (HeaderRead)
  Hash128 digest;                                    ///< of the bytes read
};

/// The first dependency of a result that does not match (change == none: the result matches).
struct Mismatch {
  DependencyChange change = DependencyChange::none;
  std::uint32_t path = 0;  ///< index into the view's paths
  int error = 0;
  const char* what = "";
  Hash128 recorded{};  ///< for a changed digest: the recorded one and the one found
  Hash128 found{};

  static Mismatch at(DependencyChange change, std::uint32_t path, int error = 0, const char* what = "") {
    Mismatch m;
    m.change = change;
    m.path = path;
    m.error = error;
    m.what = what;
    return m;
  }
};

/// What a mismatch says, for LookupStats::detail and ResultCheck::detail.
[[nodiscard]] std::string describe(const Mismatch& m);

/// Dependency sets this process checked against the file system, by their canonical text (the key
/// part: every header's path and digest, every absent path), each with the moment the oldest stat
/// that check relied on was taken. The kernels of one program often read the very same set under
/// different requests; a set checked less than the stat memo's time ago is not checked again, path by
/// path (the same promise as the stat memo: inside one process an edit may go unseen that long).
/// Bounded: cleared at kMaxSets.
class ValidatedSets {
 public:
  static constexpr std::size_t kMaxSets = 4096;

  [[nodiscard]] bool fresh(const std::string& set, std::int64_t now_ns, std::chrono::nanoseconds ttl) const;
  /// Whether any set is held (a lookup only reads a manifest's head first when one may be fresh).
  [[nodiscard]] bool any() const;
  void remember(const std::string& set, std::int64_t at_ns);

 private:
  mutable std::mutex m_mutex;
  std::unordered_map<std::string, std::int64_t> m_sets;
};

class Checker {
 public:
  /// Fewer unprobed paths than this in a result are stat'ed one by one (threads would cost more).
  static constexpr std::size_t kParallelStatPaths = 256;
  static constexpr std::size_t kStatBatch = 64;  ///< paths a thread takes at a time
  static constexpr std::size_t kStatPathBytes = 4096;  ///< longer paths are stat'ed by stat_path
  static constexpr std::size_t kWalkRun = 512;  ///< absent paths per run when they are settled in parallel

  /// `now_ns`: when the lookup started, before any header is read (the trust rule's time and the memo's
  /// clock). `memo`: the stat memo to ask and tell (null: every path is stat'ed).
  Checker(const ManifestView& view, const ManifestLimits& limits, std::int64_t now_ns, std::chrono::nanoseconds window,
          StatMemo* memo = nullptr, unsigned stat_threads = 1);

  /// Checks one result: absent paths first, then every header's stat, then re-hashes the headers whose
  /// stat differs or is not trusted (so a vanished header costs no read).
  Mismatch check(const ResultRefs& result);

  struct Refresh {
    std::uint32_t file;
    FileStat stat;
    bool trusted;
    Refresh(std::uint32_t f, const FileStat& s, bool t) : file(f), stat(s), trusted(t) {}
  };
  std::vector<Refresh> refreshes;  ///< header infos re-hashed with their recorded digest (may repeat)
  std::uint32_t stats = 0;
  std::uint32_t inferred = 0;  ///< absent paths settled by a folder above them found absent (no stat)
  std::uint64_t settle_ns = 0;      ///< time in prefetch (LookupStats::settle_ns)
  std::uint32_t settle_threads = 0;  ///< the most threads one prefetch used
  std::uint32_t memo_hits = 0;  ///< paths answered by the process's stat memo instead of stat(2)
  /// The oldest moment a stat this checker relied on was taken (a memo's answer may be older than now).
  std::int64_t oldest_ns = 0;
  std::uint32_t reads = 0;
  std::uint64_t bytes_hashed = 0;

  /// The probe table, for StatMemo::defer (the checker is done with it).
  std::vector<PathProbe> take_probes() noexcept { return std::move(m_probes); }

 private:
  /// One run of absent paths being settled (walk()): the folders it stat'ed, true when absent (views
  /// into the paths: prefixes of them), and what it did.
  struct Walker {
    std::unordered_map<std::string_view, bool> folders;
    std::uint32_t stats = 0;
    std::uint32_t inferred = 0;
  };
  static constexpr std::uint32_t kKnown = 0xffffffffU;  ///< a todo slot the memo answered

  const char* c_path(std::uint32_t path);
  void prefetch(const ResultRefs& result);
  void ask_memo(std::vector<std::uint32_t>& todo);
  static bool stat_probe(PathProbe& probe, std::string_view path, char* buffer) noexcept;
  void walk(std::span<const std::uint32_t> paths, Walker& walker, char* buffer) noexcept;
  static std::string_view folder_of(std::string_view path) noexcept;
  static bool under_absent_folder(std::string_view path, Walker& walker);
  static void note_absent_folders(std::string_view path, Walker& walker, char* buffer);
  const PathProbe& stat_path(std::uint32_t path);
  bool from_memo(std::uint32_t path);
  void fill_from_memo(std::uint32_t path, const StatMemo::Seen& seen);
  static void stat_into(PathProbe& probe, const char* path) noexcept;
  void remember(std::uint32_t path, const PathProbe& probe, std::int64_t at_ns);
  const ReadProbe& read_path(std::uint32_t path);

  unsigned m_stat_threads;
  const ManifestView& m_view;
  const ManifestLimits& m_limits;
  std::int64_t m_now_ns;
  std::chrono::nanoseconds m_window;
  StatMemo* m_memo;
  std::vector<PathProbe> m_probes;
  std::deque<ReadProbe> m_reads;
  std::vector<std::uint32_t> m_pending;
  std::string m_path_buffer;
  std::string m_bytes;  ///< a re-read header's bytes (read_header_file), reused
};

}  // namespace kiln::cache::detail
