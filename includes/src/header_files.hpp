#pragma once
// Private to the include home (includes/src/): reading header files. One function reads a header
// and says what its bytes and stat are worth (read_header_file): the include resolver reads every header
// through it, and the manifest checker re-reads a header whose stat changed through it, so both judge a
// header by one rule, with one trust window (ManifestConfig::trust_window). The resolver's files stay
// in the process's HeaderFileCache while their stat holds.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "include_places.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/dependencies.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

class StatMemo;

/// The largest header file kiln reads. Real headers are far below it; a bigger file named by an
/// include is almost certainly not a header, and reading it whole would hold that much memory.
inline constexpr std::uint64_t kMaxHeaderBytes = 64ULL << 20;

/// Whether a stat may be trusted: its mtime and ctime lie more than `window` before `now_ns` (CLOCK_REALTIME,
/// nanoseconds since the epoch), taken before the file's bytes were read. File times are coarse: a write in
/// the same tick as the read can leave size and times unchanged, so a file touched within the window (or
/// dated in the future) may still be being written and is never vouched for by its stat.
[[nodiscard]] bool stat_is_settled(const FileStat& stat, std::int64_t now_ns, std::chrono::nanoseconds window) noexcept;

/// What reading one header gave (read_header_file).
struct HeaderRead {
  enum class Status : std::uint8_t {
    ok,           ///< read: bytes, digest and the verdict on the stat below
    failed,       ///< a call failed: `what` and `error` say which and why
    not_regular,  ///< a folder, device or FIFO: not a header
    too_large,    ///< more than the limit: `size` bytes
  };
  Status status = Status::failed;
  int error = 0;           ///< failed: errno
  const char* what = "";   ///< failed: "open", "fstat" or "read"
  FileStat stat;           ///< fstat(2) of the file opened, before the read (all but a failed open or fstat)
  std::uint64_t size = 0;  ///< too_large: the bytes found (more than `stat` says when it grew while read)
  /// ok: the read got exactly the size fstat said and fstat after the read still says `stat`: the bytes
  /// are the file's as `stat` describes it. A file whose length changed while it was read certainly
  /// was being written.
  bool steady = false;
  bool trusted = false;  ///< ok: steady, and `stat` settled (stat_is_settled) at the time given
  Hash128 digest;        ///< ok: XXH3-128 (kKeySeed) of the bytes
};

/// Reads the header at `path` into `bytes` (replaced; its capacity is reused): one open (following
/// symlinks: toolkits are full of them; non-blocking so a FIFO planted under a header's name cannot hang
/// the caller), fstat on that descriptor, read to the end (at most `max_bytes`), fstat again. Judges the
/// stat by stat_is_settled with `now_ns` (taken before the read) and `window`. Never throws but
/// std::bad_alloc.
[[nodiscard]] HeaderRead read_header_file(const char* path, std::string& bytes, std::uint64_t max_bytes,
                                          std::int64_t now_ns, std::chrono::nanoseconds window);

/// Header files read by earlier resolves of this process: their bytes, digest and include scan, reused
/// by a later resolve while the file keeps the stat it had when read (size, mtime, ctime, inode, device),
/// so a program whose kernels include one tree reads and scans it once, not once per kernel. Only files
/// whose stat was trusted when read (HeaderRecord::trusted_stat: untouched for the trust window) are
/// kept, the rule the dependency manifests judge headers by. Each file also keeps the text the compiler
/// got from it last (its includes rewritten; about its own size), shared by later resolves that rewrite
/// it the same way. Thread-safe. Bounded: cleared when the files' bytes would pass kMaxBytes (the
/// rewritten texts about double that at most).
class HeaderFileCache {
 public:
  struct File {
    HeaderRecord record;  ///< path, stat and digest as read
    std::string bytes;
    ScanResult scan;  ///< of bytes

    /// The text the compiler got from the file last time, with its includes rewritten to these names
    /// (by the offset of each rewritten operand). A later resolve that rewrites them to the same names,
    /// as the kernels of one program over one tree do, shares that text instead of building it again.
    struct Rewrite {
      std::vector<std::pair<std::size_t, std::string>> names;
      std::shared_ptr<const std::string> text;
    };
    mutable std::mutex rewrite_mutex;
    mutable Rewrite last_rewrite;
  };
  static constexpr std::uint64_t kMaxBytes = 256ULL << 20;

  HeaderFileCache();
  ~HeaderFileCache();
  HeaderFileCache(const HeaderFileCache&) = delete;
  HeaderFileCache& operator=(const HeaderFileCache&) = delete;

  /// The file read from `path` when it had exactly this stat; null otherwise.
  [[nodiscard]] std::shared_ptr<const File> find(const std::string& path, const FileStat& stat) const;
  void put(const std::string& path, std::shared_ptr<const File> file);
  struct Usage {
    std::size_t files = 0;    ///< held
    std::uint64_t bytes = 0;  ///< held
    std::uint64_t hits = 0;   ///< find() calls that returned a file
  };
  [[nodiscard]] Usage usage() const;

 private:
  struct State;
  std::unique_ptr<State> m_state;
};

/// What a resolve asked the file system: stat(2) calls made, paths answered by the stat memo, and files
/// opened and read (the rest came from the HeaderFileCache).
struct FileWork {
  std::uint32_t stats = 0;
  std::uint32_t memo_hits = 0;
  std::uint32_t reads = 0;
};

/// How a resolve looks at the file system: through the HeaderFileCache and the stat memo when it has them.
struct FileAccess {
  HeaderFileCache* cache = nullptr;
  StatMemo* memo = nullptr;  ///< with `cache` only
  std::int64_t now_ns = 0;   ///< when the resolve started (CLOCK_REALTIME): the memo's clock and the trust rule's
  std::chrono::nanoseconds trust_window{};
  FileWork* work = nullptr;
};

/// Whether there is a header at `path`, without reading it: absent (no regular file there), found in
/// the cache (the file still has the stat it was read with), or to be read (load_header reads it). A
/// resolve settles where every include leads by these, and reads the files it found many at a time.
struct HeaderProbe {
  enum class State : std::uint8_t { absent, cached, unread } state = State::absent;
  std::shared_ptr<const HeaderFileCache::File> file;  ///< cached: the file
};
[[nodiscard]] HeaderProbe probe_header(const std::string& path, const FileAccess& access);

/// The header at `path` (null when there is no regular file there): from the cache when the file still
/// has the stat it was read with (a stat made now, or one the stat memo holds), else read and scanned
/// (and kept when its stat is trusted). Throws IncludeError when there is a file that cannot be read, or
/// one too large to be a header.
[[nodiscard]] std::shared_ptr<const HeaderFileCache::File> load_header(const std::string& path,
                                                                       const FileAccess& access);

/// Reading ahead of a resolve that reads its files one by one (the lean walk reads them in the compiler's
/// order): the includes of each file the resolve enters are searched as the resolve will search them
/// (each_include_place), and the first regular file of each include's places is read and scanned on a few
/// helper threads into the HeaderFileCache, and then the includes of that file in turn, every branch, so
/// the helpers run ahead down the tree while the resolve decides which branches it takes. The newest
/// includes are read first (a stack): the resolve goes depth first, into what it entered last. It records
/// nothing: the resolve still probes, reads through the cache by path and stat, and decides; a file read
/// ahead that the resolve never takes costs its read only, and one the cache does not keep (its stat too
/// recent to trust) is read again by the resolve. Errors are the resolve's to meet. The destructor drops
/// what is queued and waits for the files being read.
class HeaderReadAhead {
 public:
  /// Half the hardware threads, at most 4; none for one, or without a cache in `access`. `folders`: the
  /// resolve's include folders (absolute, normal).
  HeaderReadAhead(const FileAccess& access, std::span<const std::string> folders);
  ~HeaderReadAhead();
  HeaderReadAhead(const HeaderReadAhead&) = delete;
  HeaderReadAhead& operator=(const HeaderReadAhead&) = delete;

  /// Whether it has helpers to start.
  [[nodiscard]] bool on() const noexcept { return m_threads_wanted > 0; }
  /// Starts the helpers (once, not after finish()): when the resolve reads a file itself, the tree is not
  /// all in the cache. A resolve over files the cache holds starts none.
  void start();
  /// The includes `refs` of a file the resolve entered: each include's first regular file on disk is read,
  /// unless an include whose search starts at the same path came before. `refs` must live until finish().
  void add(const Includer& includer, const std::vector<IncludeRef>& refs);
  /// Returns once no helper is reading `path`: a file being read ahead is not read twice (the resolve then
  /// finds it in the cache).
  void wait_for(const std::string& path);
  /// Drops what is queued and waits for the files being read (the destructor does too); returns how many
  /// files the helpers read. Nothing is read ahead after it.
  std::uint32_t finish();

 private:
  /// What the stack holds: a file whose includes are to be searched (on a helper, not the resolve's
  /// thread), or one include's places on disk, to be read.
  struct Task {
    // A file's includes (the file kept alive by `keep`, or by the resolve), and where it is for their search.
    const std::vector<IncludeRef>* refs = nullptr;
    std::shared_ptr<const void> keep;
    bool from_disk = false;
    std::string dir;
    std::optional<std::size_t> folder;
    // Or one include's places on disk.
    std::vector<IncludePlace> places;
  };
  void push(Task task);
  void expand(const Task& file);
  void run(FileWork& work);

  FileAccess m_access;
  const std::vector<std::string> m_folders;
  const unsigned m_threads_wanted;
  std::vector<FileWork> m_works;  ///< the helpers' own (not the resolve's: what they read ahead is not its work)
  std::vector<std::thread> m_threads;
  std::mutex m_mutex;
  std::condition_variable m_ready;  ///< something to do, or stop
  std::condition_variable m_read;   ///< a file in flight was read
  std::vector<Task> m_stack;        ///< the newest on top
  std::unordered_set<std::string> m_seen;       ///< the first place of each include read
  std::unordered_set<std::string> m_in_flight;  ///< paths being read now
  bool m_stop = false;
};

}  // namespace kiln::cache::detail
