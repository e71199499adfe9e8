#pragma once
// The on-disk store: <root>/v1/<2 hex>/<30 hex>.kiln, CACHEDIR.TAG, lock/, stats/.
// Contracts (docs/design.md §7, "The cache on disk"):
//  - get(): a content error (bad magic, short file, checksum, key mismatch, not a regular file, not
//    ours) deletes the entry and is a miss; an I/O error is a miss that deletes nothing (a transient
//    EIO must never destroy a valid entry); a permission error switches the store to read-only.
//    Entries are opened with O_NOFOLLOW: a symbolic link at an entry path is never followed (it is
//    removed, with a warning). get() never throws.
//  - put(): temp file beside the target (O_EXCL, 0600), write, fsync, rename. A failed put leaves no
//    temp file and never throws; it returns false and warns once per store.
//  - Security: directories 0700, files 0600. A root (or v1/, lock/) not owned by the current user, or
//    group/world-writable, is refused: the store is memory-only and says why once (warning). A shard
//    directory (v1/<2 hex>) the same: its entries are misses and nothing is written into it (checked once
//    per shard per store); an entry file that is group/world-writable is a miss (a later put replaces
//    it). The first such refusal of a store is a warning, later ones are logged at info level.
//  - Read-only stores (configuration, KILN_CACHE_READONLY, no write permission) serve hits and write,
//    touch and delete nothing.
//  - Size: every put/remove/trim keeps a running total in lock/size (under a file lock, so a put never
//    rescans the cache); when a put takes it past max_size, that process trims to 90% (try-lock). The
//    total is measured again (a walk of the store) when a put finds the last measurement older than
//    kRemeasureInterval (lock/measured's mtime), so entries added or removed behind the store's back
//    (copied in, deleted by hand) are counted within that time; remeasure_size() does it at once.
//    A trim that removes entries written or used within the last hour warns once per store: the cap
//    is smaller than the kernels in use.
//  - Cache trouble never fails a request that a compile can serve.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/lease.hpp"
#include "kiln/cache/lookup.hpp"
#include "kiln/cache/pch_store.hpp"

namespace kiln::cache {

enum class StoreMode : std::uint8_t {
  read_write,
  read_only,    ///< hits are served, nothing is written (KILN_CACHE_READONLY=1, or no write permission)
  memory_only,  ///< no disk at all (KILN_CACHE_DISABLE=1, or a refused root)
};
[[nodiscard]] std::string_view to_string(StoreMode mode) noexcept;

/// One file in the store, for listing, pruning and the CLI.
struct EntryFile {
  std::filesystem::path path;
  Hash128 file_hash;  ///< from the file name
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point mtime;  ///< the file's own mtime (what a removal compares)
  /// A precompiled header's: its record's mtime (each use touches the record, Store::touch_pch_record, not the
  /// checked .pch file); unset for other files. used() is the later of the two.
  std::chrono::system_clock::time_point record_mtime{};
  /// The file's last use, the order trims and prune take (least recently used first).
  [[nodiscard]] std::chrono::system_clock::time_point used() const noexcept {
    return record_mtime > mtime ? record_mtime : mtime;
  }
};

/// How much of each entry Store::scan_shard reads (with the one entry parser).
enum class ScanDepth : std::uint8_t {
  lane,    ///< the fixed header, target and compiler (`kiln cache stats`, `prune --target`); a blob's whole
           ///< header (its labels: blob.hpp)
  header,  ///< everything before the payload: + canonical key and names, names list and key hash checked
           ///< (`kiln cache ls`); neither depth reads the payload or verifies the checksum
  entry,   ///< the whole entry, checksum and stored key verified as get() does (`kiln cache verify`)
};

/// One entry file as Store::scan_shard saw it. Every pointer and view is valid only during the callback.
struct ScannedEntry {
  std::string_view path;  ///< <root>/v1/<2 hex>/<30 hex>.kiln
  Hash128 file_hash;      ///< from the file name
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point mtime;  ///< only when scan_shard was asked for it (else the epoch)
  const EntryHeaderView* header = nullptr;      ///< lane/header depth: the header, when it parsed
  const Entry* entry = nullptr;                 ///< entry depth: the entry, when it parsed and verified
  /// Why it did not parse (header and entry are null): a content error, or one starting with "cannot open",
  /// "cannot stat" or "I/O error" (an I/O error: the entry may be fine). Empty otherwise.
  std::string_view error;
  /// `error` is an I/O error (could not open, stat or read the file): the entry may be fine, and nothing
  /// may delete it for that.
  bool io_error = false;
  /// Why Store::get refuses this file whatever its bytes: its shard directory is not ours or is group/
  /// world-writable (shard_refused), or the file itself is not ours or is group/world-writable (known
  /// only where the scan fstat()s the file: ScanDepth::entry, or with_mtime). Empty otherwise.
  std::string_view refused;
  bool shard_refused = false;
};

/// Something in a shard directory that is not an entry file scan_shard reads: a symbolic link, FIFO,
/// socket, device or directory at an entry path, or a file whose name is not an entry's (a stray).
/// Temp files (".<name>.tmp.*") and other names starting with '.' are not reported.
struct StrayFile {
  std::string_view path;
  std::string_view kind;             ///< "symbolic link", "FIFO", "socket", "device", "directory", "regular file"
  std::optional<Hash128> file_hash;  ///< set when the name is an entry's name (the thing sits at an entry path)
  std::uint64_t size = 0;            ///< lstat size
  std::chrono::system_clock::time_point mtime;  ///< lstat mtime
  [[nodiscard]] bool is_directory() const noexcept { return kind == "directory"; }
};

struct StoreConfig {
  std::filesystem::path root;           ///< the cache root (v1/ lives below it)
  bool disabled = false;                ///< KILN_CACHE_DISABLE=1
  bool read_only = false;               ///< KILN_CACHE_READONLY=1
  /// KILN_CACHE_MAXSIZE (bytes; accepts K/M/G suffixes). 4 GiB: its PCH share (half) holds CuPy's header sets
  /// (a program's eight took 737 MiB: two CUB passes of 171 MiB, four of 92 MiB; bench/RESULTS.md section 18).
  std::uint64_t max_size = 4ULL << 30;
  /// KILN_PCH_MAXSIZE: the share of max_size precompiled headers may take (0: half of it); pch_limit().
  std::uint64_t pch_max_size = 0;
  Limits limits{};

  /// The bytes precompiled headers may take: pch_max_size (half of max_size when 0), never above max_size.
  /// Inside max_size rather than beside it, and smaller than it, so that entries always keep the rest: a
  /// precompiled header is 25-180 MB and saves part of a compile, an entry is 10-200 KB and saves all of one.
  [[nodiscard]] std::uint64_t pch_limit() const noexcept {
    return pch_max_size == 0 ? max_size / 2 : (pch_max_size < max_size ? pch_max_size : max_size);
  }

  /// Root from KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; plus the variables above.
  /// Throws std::invalid_argument with a clear message for a malformed or zero KILN_CACHE_MAXSIZE, an
  /// empty KILN_CACHE_DIR (set but empty: never silently the default cache) and a KILN_LOG that names
  /// no level (every engine and CLI configuration reads its environment through here).
  static StoreConfig from_environment();
};

/// Parses "1G", "512M", "100k", "12345" (bytes). nullopt for nonsense. Never throws.
[[nodiscard]] std::optional<std::uint64_t> parse_size(std::string_view text) noexcept;

struct TrimResult {
  std::uint64_t bytes_before = 0;
  std::uint64_t bytes_after = 0;
  std::size_t removed = 0;
};

class Store {
 public:
  explicit Store(StoreConfig config);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  [[nodiscard]] StoreMode mode() const noexcept;
  /// Why the store is not read_write (empty otherwise), e.g. "root /x is world-writable (mode 0777)".
  [[nodiscard]] std::string mode_reason() const;
  [[nodiscard]] const StoreConfig& config() const noexcept { return m_config; }

  /// Looks an entry up and verifies it against `canonical_key`. Never throws.
  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key);
  /// Publishes atomically. Returns false (and warns once per store) on failure. Never throws. Refuses
  /// an entry its own readers would reject (a canonical key over Limits::max_canonical_bytes, any other
  /// length over the limits), with the reader's reason.
  bool put(const Entry& entry);
  /// Why the most recent failed put of this store failed, with the system's reason where there is one
  /// (e.g. "write /c/v1/ab/.cd.kiln.tmp.1.2: No space left on device"); empty while none failed.
  /// Callers print it beside their own message. Never throws (but std::bad_alloc).
  [[nodiscard]] std::string last_put_error() const;
  /// Removes the entry for a key; true if a file was removed. Never throws.
  bool remove(const Hash128& key) noexcept;

  /// Waits (up to `max_wait`) for the cross-process compile lease of `key` in lock/ (lease.hpp: the
  /// file, its format and when it is broken). Returns a lease that is not owned when the entry appears
  /// (the owner finished: read the store), on timeout (compile anyway), or when the store is not
  /// read-write. Never throws; never waits longer than `max_wait`.
  [[nodiscard]] CompileLease acquire_lease(const Hash128& key, std::chrono::milliseconds max_wait);

  /// Every entry file (not temps), unordered. Never throws; unreadable directories are skipped.
  [[nodiscard]] std::vector<EntryFile> list() const;
  /// The number of shard directories (v1/00 .. v1/ff) that scan_shard takes.
  static constexpr unsigned kShardCount = 256;
  /// Reads every entry file of one shard directory (v1/<shard as 2 hex>), opening each relative to the
  /// directory (O_NOFOLLOW, O_NONBLOCK: links and non-regular files are skipped, as list() skips them),
  /// reading what `depth` needs and parsing it with the entry parser; calls fn once per entry file, in
  /// directory order. `with_mtime`: fstat every file for its mtime (otherwise the size comes from the
  /// read where the read reached the end of the file). `on_stray`, when given, is called for what the
  /// directory holds besides entry files (see StrayFile), from the same directory read. Deletes nothing.
  /// Throws only what fn throws and std::bad_alloc. Safe to call for different shards on different threads.
  void scan_shard(unsigned shard, ScanDepth depth, bool with_mtime, const std::function<void(const ScannedEntry&)>& fn,
                  const std::function<void(const StrayFile&)>& on_stray = {}) const;
  /// Reads and parses one entry file without deleting anything (CLI verify/show). An I/O error is
  /// reported as a ContentError whose reason starts with "cannot open", "cannot stat" or "I/O error".
  [[nodiscard]] std::variant<Entry, ContentError> read_file(const std::filesystem::path& path) const;
  /// read_file of the entry file for `key`: what the CLI reads by key (remote fill, packs).
  [[nodiscard]] std::variant<Entry, ContentError> read_entry(const Hash128& key) const;
  /// Whether a regular file is where the entry for `key` lives (one stat; its bytes are not checked:
  /// a request served from it still reads and verifies them). Never throws.
  [[nodiscard]] bool contains(const Hash128& key) const noexcept;
  /// LRU trim: removes oldest entries until the total is <= target_bytes; an entry whose mtime changed
  /// since the scan survives. One process at a time (try-lock on lock/trim); returns nullopt if another
  /// holds it or the store is not read-write. Never throws.
  std::optional<TrimResult> trim(std::uint64_t target_bytes);
  /// Removes temp files older than `age` whose writer process is dead (or whose name records no pid).
  /// Every trim also sweeps temps older than an hour. Returns how many were removed. Never throws.
  std::size_t sweep_temps(std::chrono::seconds age);

  /// Entries this store removed by trimming (its own trims only). Never throws.
  [[nodiscard]] std::uint64_t evictions() const noexcept;
  /// The running total of entry bytes kept in lock/size (updated under a file lock by every put,
  /// remove and trim; re-measured by each trim). nullopt when there is none yet. Never throws.
  [[nodiscard]] std::optional<std::uint64_t> size_estimate() const noexcept;
  /// Measures the entry bytes on disk now and stores that as the running total (for commands that
  /// remove files themselves: clear, prune, verify --fix). nullopt when the store is not read-write or
  /// the total cannot be written. Never throws.
  std::optional<std::uint64_t> remeasure_size() noexcept;
  /// True when the cache root (or v1/, lock/) was refused as untrusted (not ours, or group/world-
  /// writable): the engine serves nothing from it. mode_reason() says why.
  [[nodiscard]] bool refused() const noexcept;

  /// A lease older than this is broken even when its owner looks alive (lease.hpp).
  static constexpr std::chrono::seconds kLeaseStaleAge = cache::kLeaseStaleAge;
  static constexpr std::chrono::seconds kLeaseRefresh = cache::kLeaseRefresh;
  /// A hit touches an entry's mtime (its LRU age) when the mtime is older than this.
  static constexpr std::chrono::hours kTouchInterval{24};
  /// A put measures the store again when the last measurement is older than this.
  static constexpr std::chrono::minutes kRemeasureInterval{10};

  /// The path an entry for `key` lives at.
  [[nodiscard]] std::filesystem::path entry_path(const Hash128& key) const;

  // ---- Precompiled headers (pch_store.hpp; store_pch.cpp): <root>/pch, counted in the size total (lock/size)
  //      and trimmed with the entries, least recently used first (EntryFile::used); their own share of it is
  //      StoreConfig::pch_limit(). ----

  /// Opens the PCH stored for `key` and checks it whole (the trust rule entries have, the trailer, the key,
  /// the checksum). A damaged, cut short or foreign file is removed (read-write stores) and is a miss; an I/O
  /// error is a miss that removes nothing. Touches its mtime (its LRU age) as a hit touches an entry's.
  /// Never throws but std::bad_alloc.
  [[nodiscard]] std::variant<PchFile, PchMiss> open_pch(const Hash128& key);
  /// A temp file beside the final name of `key`'s PCH for the compiler to write into; nullopt (with `why`)
  /// when the store is not read-write or the folder cannot be made.
  [[nodiscard]] std::optional<PchDraft> begin_pch(const Hash128& key, std::string& why);
  /// Appends the trailer (with `label`, a line for `kiln cache ls`) to what the compiler wrote and renames it
  /// into place; then keeps the PCH files under pch_limit() and everything under max_size, least recently
  /// used first.
  /// False, with the draft removed and `why` set, when the file is empty, larger than pch_limit()
  /// (`too_large` set), or on an I/O error. Never throws but std::bad_alloc.
  bool publish_pch(PchDraft&& draft, std::string_view label, std::string& why, bool* too_large = nullptr);
  /// Removes `key`'s .pch (not its record). True when a file was removed. Never throws.
  bool remove_pch(const Hash128& key) noexcept;
  /// The record of `key` (its .pchv), nullopt when there is none or it does not parse. Never throws.
  [[nodiscard]] std::optional<PchRecord> read_pch_record(const Hash128& key) const noexcept;
  /// Writes `key`'s record atomically (the last writer wins). False when the store is not read-write or
  /// the write failed. Never throws.
  bool write_pch_record(const Hash128& key, const PchRecord& record) noexcept;
  /// Marks a use of `key`'s PCH: sets its record's mtime to now (the record only: a process compares the .pch it
  /// checked with one fstat before each use, and a touch would change it). Trims and prune take a PCH's last
  /// use as the later of the two mtimes (EntryFile::used), so a PCH in use is not the first to go because it
  /// was made first. False when there is no record or the store is not read-write. Never throws.
  bool touch_pch_record(const Hash128& key) noexcept;
  /// The compile lease of `key`'s PCH (lock/<key>.lease, as acquire_lease; one maker per key across
  /// processes): not owned when the .pch appears, on timeout, or when the store is not read-write.
  [[nodiscard]] CompileLease acquire_pch_lease(const Hash128& key, std::chrono::milliseconds max_wait);
  /// The bytes free on the file system of <root>/pch (made when missing); nullopt when unknown.
  [[nodiscard]] std::optional<std::uint64_t> pch_free_bytes() const noexcept;
  /// Every file of <root>/pch (not temps), with its trailer or record parsed (nothing hashed). Never throws
  /// but std::bad_alloc; unreadable folders are skipped.
  [[nodiscard]] std::vector<PchListing> list_pch() const;
  /// Checks one .pch file whole (trailer, key against its name, checksum) without removing it: empty when
  /// intact, else what is wrong (an I/O error starts with "cannot open" or "I/O error").
  [[nodiscard]] std::string check_pch_file(const std::filesystem::path& path) const;
  /// <root>/pch.
  [[nodiscard]] std::filesystem::path pch_folder() const;

 private:
  struct State;
  StoreConfig m_config;
  std::unique_ptr<State> m_state;
};

}  // namespace kiln::cache
