#pragma once
// Dependency manifests: the first level of a two-level key for kernels that include header trees.
//
// A request (source, options with the include folders, target, compiler) cannot name its binary by
// itself: the bytes of the headers it includes matter too. After a compile, record() stores, under the
// request's key, every header the compile read (path, stat, digest) and every path probed and found
// absent in a folder searched before the one that matched, together with the result key (the key of the
// entry, which covers the headers' digests). lookup() stats those paths: when every header's stat is the
// recorded one and every absent path is still absent, the result key is known without reading a byte of
// any header. A header whose stat changed is re-read and re-hashed: the same digest still matches (and its
// stat is refreshed in the manifest, so the next lookup reads nothing). Recording the absent paths closes
// the hole of stat-only checks: a new header that would now shadow a recorded one (it appears in a folder
// searched earlier) makes the result not match.
//
// A header changed within kStatTrustWindow of the moment its bytes were read is never trusted by stat
// (file times are coarse: a second write in the same tick can leave the stat unchanged): it is re-hashed
// on every lookup until a lookup outside the window refreshes it.
//
// Files: <root>/manifests/<2 hex>/<30 hex>.kman (hex of the request key), directories 0700, files 0600,
// published atomically (temp file beside the target, O_EXCL, fsync, rename) and opened with O_NOFOLLOW.
// The contracts are the entry store's (store.hpp): a content error (bad magic, short file, checksum,
// request key mismatch, not a regular file, not ours) is a miss and removes the manifest; an I/O error is
// a miss that deletes nothing; a read-only instance writes, refreshes and deletes nothing; a memory-only
// (disabled) one does nothing. Nothing here throws except where stated.
//
// Concurrent recorders of one request race read-modify-write: the last rename wins, so one of two results
// recorded at the same moment may be lost. That costs one miss (the request compiles, which finds its entry
// in the store or recompiles, and records again), never a wrong answer: every result in a manifest was
// recorded whole.
//
// Format (this comment is the grammar; integers little-endian):
//   manifest  := head paths files absent results checksum
//   head      := fixed canonical summaries head_checksum
//   fixed     := 64 bytes:
//     off  0  magic          8   "KILNMAN\x01"
//     off  8  format_version u32 kManifestFormatVersion (another version is a content error)
//     off 12  reserved       u32 0
//     off 16  request_key    16  XXH3-128 (seed kKeySeed) of the request's canonical key: high u64, low u64
//     off 32  canonical_len  u32 <= ManifestLimits::max_canonical_bytes
//     off 36  path_count     u32 <= max_paths
//     off 40  file_count     u32 <= max_files
//     off 44  absent_count   u32 <= max_absent
//     off 48  result_count   u32 <= max_results
//     off 52  index_count    u32 the number of u32 indices all results hold together
//     off 56  total_len      u64 the size of the whole manifest; must equal the file size
//   canonical := canonical_len bytes (the request's canonical key)
//   summaries := result_count * ( result_key:16 set_digest:16 headers:u32 absent:u32 )   one per result,
//                in the results' order: what canonical_dependencies() says of the result's dependency set
//   head_checksum := XXH3-128 (seed kManifestChecksumSeed) over fixed, canonical and summaries
//   paths     := path_count * ( length:u32 path )   each path 1..max_path_bytes bytes, starting with '/',
//                                                    without NUL; every header and absent path, once
//   files     := file_count * 64 bytes: path:u32 (index into paths) flags:u32 (bit 0: trusted; others 0)
//                size:u64 mtime_ns:i64 ctime_ns:i64 inode:u64 device:u64 digest:16
//   absent    := absent_count * path:u32 (index into paths)
//   results   := result_count * ( result_key:16 file_refs:u32 absent_refs:u32
//                                 file_refs * u32 (index into files) absent_refs * u32 (index into absent) )
//                newest first; the index lists add up to index_count
//   checksum  := XXH3-128 (seed kManifestChecksumSeed) over everything before it: high u64, low u64
// Reading checks, in order: size, magic, version, reserved field, every count against the limits, the
// minimum size the counts imply and total_len == file size (all before any allocation, so what a reader
// allocates is bounded by the size of the input), then the checksum, then the head (its checksum and
// request_key == hash(canonical), or the request asked for), then every path and index, that the parts
// fill the file exactly, and that each summary is its result's (same key, same set digest and counts).
//
// The head exists for the lookup of a request whose dependency set this instance checked moments ago
// for another request (ManifestConfig::stat_memo): such a lookup reads only the head, and takes the
// result whose summary names that set. Its answer does not depend on the rest of the file: the set was
// checked against the file system, and the engine accepts the result key only when it is the hash of the
// request with that set. Damage past the head is found by the next lookup that reads the whole file.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/store.hpp"

struct stat;

namespace kiln::cache {
namespace detail {
struct ManifestsAccess;
}  // namespace detail
class Storage;

inline constexpr std::uint32_t kManifestFormatVersion = 2;
inline constexpr std::size_t kManifestFixedBytes = 64;
inline constexpr std::size_t kManifestFileInfoBytes = 64;
inline constexpr char kManifestMagic[8] = {'K', 'I', 'L', 'N', 'M', 'A', 'N', '\x01'};
/// The manifest checksum's seed: differs from kKeySeed and kChecksumSeed, so no manifest checksum can be
/// mistaken for a key or an entry checksum.
inline constexpr std::uint64_t kManifestChecksumSeed = 0x6b696c6e2d6d616eULL;  // "kiln-man"

/// A header whose mtime or ctime lies within this window of the moment its bytes were read (or of the
/// moment it is recorded) is never trusted by stat: file times are coarse, so a write in the same tick as
/// the read can leave size and times unchanged. Such a header is re-hashed on every lookup until a lookup
/// outside the window refreshes it.
inline constexpr std::chrono::seconds kStatTrustWindow{2};

/// ManifestConfig::stat_memo's default.
inline constexpr std::chrono::milliseconds kStatMemo{1000};

/// The FileStat of a stat(2) result (times in nanoseconds since the epoch).
[[nodiscard]] FileStat to_file_stat(const struct ::stat& st) noexcept;
/// CLOCK_REALTIME in nanoseconds since the epoch.
[[nodiscard]] std::int64_t realtime_now_ns() noexcept;

/// Caps applied while parsing, before any allocation (a manifest may be hostile), and while recording.
struct ManifestLimits {
  std::uint64_t max_file_bytes = 256ULL << 20;    ///< the whole manifest
  std::uint32_t max_canonical_bytes = 64U << 20;  ///< the request's canonical key (it holds the source)
  std::uint32_t max_files = 65536;                ///< header infos
  std::uint32_t max_absent = 262144;              ///< absent paths (probes in earlier folders add up)
  std::uint32_t max_paths = 65536 + 262144;       ///< distinct paths
  std::uint32_t max_path_bytes = 4096;            ///< PATH_MAX
  std::uint32_t max_results = 64;                 ///< what a parser accepts (record keeps ManifestConfig::max_results)
  std::uint64_t max_header_bytes = 64ULL << 20;   ///< a header larger than this is not re-hashed (no match)
};

/// One result: the header infos and absent paths it depends on, and the key of its entry.
struct ManifestResult {
  Hash128 result_key;
  std::vector<std::uint32_t> files;   ///< indices into Manifest::files, in resolution order
  std::vector<std::uint32_t> absent;  ///< indices into Manifest::absent
  friend bool operator==(const ManifestResult&, const ManifestResult&) = default;
};

/// A manifest in memory (parse_manifest, serialize_manifest, the CLI).
struct Manifest {
  Hash128 request_key;                  ///< hash128(request_canonical)
  std::string request_canonical;        ///< CanonicalKey::bytes() of the request
  std::vector<HeaderRecord> files;      ///< deduplicated by path + digest
  std::vector<std::string> absent;      ///< deduplicated
  std::vector<ManifestResult> results;  ///< newest first
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

/// Serializes a manifest (the grammar above; the path table is built from the distinct paths). Writes
/// request_key as given. Throws std::bad_alloc, or std::length_error for a field that cannot be
/// represented (over 4 GiB, an index out of range).
[[nodiscard]] std::vector<std::byte> serialize_manifest(const Manifest& manifest);
/// Parses and verifies a manifest. Never throws on malformed input (only std::bad_alloc); never reads
/// outside `bytes`. Every error is a content error.
[[nodiscard]] std::variant<Manifest, ContentError> parse_manifest(std::span<const std::byte> bytes,
                                                                  const ManifestLimits& limits = {});
/// Human-readable text: the request key, each header with its digest and stat, the absent paths, and each
/// result with the headers and absent paths it depends on.
[[nodiscard]] std::string render_manifest(const Manifest& manifest);

/// What a dependency manifest from another machine may name (DependencyManifests::install): the places a
/// resolve of the request here could read. Such a manifest is untrusted input: every path it names is
/// stat'ed, and every header read and hashed, and what the node then asks a remote for (the result key,
/// taken when the digests match) would tell its writer what a file holds. So it may name only paths
/// below the request's include folders, or one of the absolute paths its own source and in-memory
/// headers include; a header reached through a symbolic link must still lie, as the link resolves,
/// below one of the folders as they resolve. Anything else (a path outside, one with "." or ".." parts or
/// doubled slashes, a link out of the folders) refuses the whole manifest, before any file is opened.
struct ManifestScope {
  std::vector<std::string> folders;  ///< the request's include folders, absolute (IncludeFolders::folders)
  std::vector<std::string> files;    ///< absolute paths the source and in-memory headers include by name
};

/// The bounds on checking a manifest from another machine (install() reads and hashes each header it names
/// once): past any of them the manifest is refused and the request resolves its includes here, which is
/// always correct. Real sets are far below them: a CUB or CuPy kernel reads 675-1,000 headers of 8-10 MB
/// and probes 700-2,200 paths absent (bench/RESULTS.md); the bounds leave about ten times that.
struct FetchedLimits {
  std::uint32_t max_files = 8192;            ///< header infos
  std::uint32_t max_absent = 32768;          ///< absent paths
  std::uint64_t max_bytes = 128ULL << 20;    ///< bytes read and hashed, all headers together
  std::chrono::milliseconds max_time{2000};  ///< the whole check
};

struct ManifestConfig {
  std::filesystem::path root;  ///< the cache root (manifests/ lives below it); empty: memory-only
  bool disabled = false;       ///< memory-only: nothing is read or written
  bool read_only = false;      ///< lookups only: nothing is written, refreshed or removed
  ManifestLimits limits{};
  std::size_t max_results = 16;  ///< results kept per manifest; recording more drops the oldest
  /// kStatTrustWindow; tests shorten it (a freshly written or touched file's ctime is always "now"). The
  /// include resolver that works with these manifests judges the headers it reads by the same window.
  std::chrono::nanoseconds trust_window = kStatTrustWindow;
  /// How long a lookup may reuse what an earlier lookup of this instance learned by stat(2) about a path
  /// (present with its stat, or absent) instead of stat'ing it again: the kernels of one program mostly
  /// include the same tree, so a burst of lookups stats each path once. Within this time an edit is seen
  /// by the first lookup after it only when that path was not stat'ed in the last `stat_memo`. The same
  /// time applies to whole dependency sets: a result whose set (the same headers with the same digests,
  /// the same absent paths) another request's lookup checked within it is taken without checking a
  /// path. The include resolver that works with these manifests shares the memo: a burst of compiles
  /// over one tree stats each path once too. Zero: every lookup and resolve stats every path.
  std::chrono::nanoseconds stat_memo = kStatMemo;
  /// Threads a lookup may stat a large result's paths on (at most the machine's hardware threads; only
  /// for a result with hundreds of paths not stat'ed yet). 1: one by one, on the calling thread.
  unsigned stat_threads = 8;
  /// The bounds on checking a manifest from another machine before it is installed (install()).
  FetchedLimits fetched{};
};

enum class ManifestOutcome : std::uint8_t {
  hit,              ///< a recorded result matches: its key is the answer
  no_manifest,      ///< nothing recorded for the request
  no_match,         ///< a manifest, but no result matches the files as they are now
  corrupt_removed,  ///< content error (damaged, not ours, another request's): the manifest was deleted
  corrupt,          ///< content error, not deleted (read-only, explain(), or it changed meanwhile)
  io_error,         ///< could not read the manifest: nothing deleted
  disabled,         ///< memory-only
};
[[nodiscard]] std::string_view to_string(ManifestOutcome outcome) noexcept;

/// What one lookup did (the caller's counters and `kiln cache why-miss`).
struct LookupStats {
  ManifestOutcome outcome = ManifestOutcome::no_manifest;
  std::string detail;                 ///< why, when it is not a hit: the content error, or each result's first change
  std::uint32_t results_checked = 0;  ///< results looked at (up to and including the matching one)
  /// stat(2) calls: on headers and absent paths (each at most once), and on the folders above an absent
  /// path (upwards until one exists), whose answer settles the other absent paths under them.
  std::uint32_t stats = 0;
  std::uint32_t inferred_absent = 0;  ///< absent paths settled by a folder above them found absent (no stat)
  std::uint32_t memo_hits = 0;        ///< paths answered from the stat memo (ManifestConfig::stat_memo)
  /// Results answered because this instance checked the same dependency set (same headers with the same
  /// digests, same absent paths) for another request within the stat memo's time: no path checked.
  std::uint32_t validated_hits = 0;
  std::uint32_t reads = 0;            ///< headers read and re-hashed
  std::uint64_t bytes_hashed = 0;     ///< their bytes
  std::uint32_t refreshed = 0;        ///< header infos whose stat or trust was refreshed
  bool rewritten = false;             ///< the manifest was rewritten with the refreshed stats
  std::uint64_t manifest_bytes = 0;   ///< the manifest file's size
  std::uint64_t bytes_read = 0;       ///< of it read (the head alone for a set checked moments ago)
  /// Where the lookup's time went (the engine's debug log prints them): reading the file, parsing and
  /// verifying it, checking the results (digests of the sets, stats, re-reads).
  std::uint64_t read_ns = 0, parse_ns = 0, check_ns = 0;
  /// Of check_ns: settling paths not known yet (the memo asked, the stats and the absent folders), and
  /// the threads that did it (1: this one alone; 0: nothing was left to settle).
  std::uint64_t settle_ns = 0;
  std::uint32_t settle_threads = 0;
};

/// How a recorded dependency differs from the file system now.
enum class DependencyChange : std::uint8_t {
  none,        ///< every dependency of the result still matches
  changed,     ///< a header's bytes differ (or it is no longer a regular file, or larger than the cap)
  vanished,    ///< a header no longer exists
  appeared,    ///< a path that was absent exists now (it would shadow a recorded header)
  unreadable,  ///< a header or absent path could not be checked (stat or read failed)
};
[[nodiscard]] std::string_view to_string(DependencyChange change) noexcept;

/// One result as explain() found it.
struct ResultCheck {
  Hash128 result_key;
  DependencyChange change = DependencyChange::none;
  std::string path;    ///< the first dependency found not to match (empty when none)
  std::string detail;  ///< e.g. "digest 3f.. -> 9a..", "stat: Permission denied"
};

/// Why a request's manifest does (not) give a result key: `kiln cache why-miss`.
struct ManifestExplanation {
  ManifestOutcome outcome = ManifestOutcome::no_manifest;  ///< hit, no_manifest, no_match, corrupt, io_error, disabled
  std::string detail;                                      ///< the content or I/O error
  std::vector<ResultCheck> results;                        ///< every result, newest first
};

/// One manifest file as scan() saw it.
struct ScannedManifest {
  std::filesystem::path path;
  Hash128 request_key;  ///< from the file name
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point mtime;
  std::size_t files = 0;    ///< header infos (when it parsed)
  std::size_t absent = 0;   ///< absent paths
  std::size_t results = 0;  ///< results
  /// Empty when it parsed; else a content error, or one starting with "cannot open", "cannot stat" or
  /// "I/O error" (an I/O error: the manifest may be fine).
  std::string error;
  /// `path` is a link or file where the manifests folder or one of its shard folders belongs (not
  /// entered; request_key is zero). Removing it removes only that link or file.
  bool in_place_of_folder = false;
};

/// The manifests of the cache root of `local` (the local entry store), in its mode: none for a
/// memory-only store (a refused or disabled root), read-only for a read-only one.
[[nodiscard]] ManifestConfig manifest_config_of(const Store& local);

class DependencyManifests {
 public:
  /// `root` empty: memory-only (disabled).
  DependencyManifests(std::filesystem::path root, bool read_only);
  explicit DependencyManifests(ManifestConfig config);
  ~DependencyManifests();
  DependencyManifests(const DependencyManifests&) = delete;
  DependencyManifests& operator=(const DependencyManifests&) = delete;

  /// read_write, read_only, or memory_only (disabled, no root, or a root that is not this user's alone).
  [[nodiscard]] StoreMode mode() const noexcept;
  /// Why it is not read_write (empty otherwise).
  [[nodiscard]] std::string mode_reason() const;
  [[nodiscard]] const ManifestConfig& config() const noexcept { return m_config; }

  /// The result key recorded for the request whose dependencies match the file system now (results are
  /// tried newest first), else nullopt. Stats every path of a result at most once per lookup; re-reads a
  /// header only when its stat differs from the recorded one or is not trusted. When a re-read header still
  /// has its recorded digest, its stat is refreshed and the manifest rewritten (best effort; read-write
  /// only). Never throws. `stats` (optional) says what it did and, on a miss, why.
  /// `matched` (optional) receives, on a hit, canonical_dependencies() of the matching result as recorded
  /// (computed from the file's bytes, no per-header allocation): the text the result key was made with,
  /// so the caller can rebuild and check that key.
  [[nodiscard]] std::optional<Hash128> lookup(const Hash128& request_key, std::string_view request_canonical,
                                              LookupStats* stats = nullptr, std::string* matched = nullptr);

  /// The dependency set recorded for one result of the request's manifest (headers in resolution order
  /// with their recorded stats, absent paths in recorded order), or nullopt when the manifest is absent,
  /// unreadable, damaged or holds no such result. Reads only. `kiln cache show` and `why-miss` list an
  /// entry's headers with it. Never throws but std::bad_alloc.
  [[nodiscard]] std::optional<DependencySet> recorded(const Hash128& request_key, std::string_view request_canonical,
                                                      const Hash128& result_key) const;

  /// Records that the request, with these dependencies, compiled to `result_key`: merged into the
  /// request's manifest (the new result first; the same result key replaces its older record; beyond
  /// ManifestConfig::max_results the oldest are dropped; header infos are shared by path + digest). A header
  /// is stored trusted only when the set says so and its stat lies outside the trust window now. Refuses
  /// (warns once) a set whose paths are not absolute or exceed the limits, or a request key that is not
  /// the hash of its canonical key. Never throws; a failed write warns once per instance. Returns the
  /// manifest's bytes as written (empty when nothing was written), for the remote tiers.
  std::vector<std::byte> record(const Hash128& request_key, std::string_view request_canonical,
                                const DependencySet& dependencies, const Hash128& result_key) noexcept;

  /// Installs a manifest that came from another machine (a remote tier) as the request's, when none is
  /// here. Parsed with every check of a local one, for this request (key and canonical key); then, before
  /// any file is opened, its counts are held to ManifestConfig::fetched and every path it names to
  /// `scope` (ManifestScope: a manifest naming anything else is refused whole). Then each header it names
  /// is read and hashed once, within ManifestConfig::fetched's bytes and time: a header info whose digest
  /// is the one found keeps the stat just read (trusted as a re-read header's is), any other keeps no stat
  /// and is untrusted (a stat of another machine means nothing here), so the lookup that follows stats
  /// the headers and re-reads only those; absent paths are checked by it as always. A refusal for what
  /// it names or what checking it would cost is counted (installs_refused) and warned of once per
  /// instance (then at debug level). Read-write only. Returns why it was not installed (empty when it
  /// was). Never throws.
  std::string install(const Hash128& request_key, std::string_view request_canonical, std::span<const std::byte> bytes,
                      const ManifestScope& scope) noexcept;

  /// A request with no manifest here: asks `storage`'s remotes in order for one (Storage::fetch_manifest,
  /// which carries manifests as opaque records) and installs the first authentic one (install(), held to
  /// `scope`); the remotes asked before it are back-filled. Asks nothing when this instance is not
  /// read-write (nothing could be installed: not worth a round trip per request). True when one was
  /// installed. Never throws.
  bool fetch(Storage& storage, const Hash128& request_key, std::string_view request_canonical,
             const ManifestScope& scope) noexcept;

  /// Manifests from other machines that install() refused for a path outside the request's scope, for
  /// their counts, or for the bytes or time checking them would take.
  [[nodiscard]] std::uint64_t installs_refused() const noexcept;

  /// The bytes of the request's manifest, when it exists and parses as the manifest of `request_key`
  /// (`kiln prewarm --remote` publishes them). Reads only. Never throws but std::bad_alloc.
  [[nodiscard]] std::optional<std::vector<std::byte>> bytes(const Hash128& request_key) const;

  /// Every result of the request's manifest checked against the file system now, each with its first
  /// mismatch. Reads, never writes or deletes. Never throws but std::bad_alloc.
  [[nodiscard]] ManifestExplanation explain(const Hash128& request_key, std::string_view request_canonical) const;

  /// Removes the request's manifest; true if a file was removed. Never throws.
  bool remove(const Hash128& request_key) noexcept;
  /// Removes every manifest and temp file under manifests/ (read-write only). Returns how many manifests
  /// were removed. Never throws.
  std::size_t clear() noexcept;
  /// Every manifest file, parsed and checked (not against any request): `kiln cache ls/verify`. Deletes
  /// nothing. Unreadable directories are skipped. Never throws but std::bad_alloc.
  [[nodiscard]] std::vector<ScannedManifest> scan() const;
  /// Reads and parses one manifest file without deleting anything (CLI show). An I/O error is reported as
  /// a ContentError whose reason starts with "cannot open", "cannot stat" or "I/O error".
  [[nodiscard]] std::variant<Manifest, ContentError> read_file(const std::filesystem::path& path) const;

  /// <root>/manifests; empty when memory-only.
  [[nodiscard]] std::filesystem::path directory() const;
  /// The path the manifest of `request_key` lives at (empty when memory-only).
  [[nodiscard]] std::filesystem::path manifest_path(const Hash128& request_key) const;

 private:
  /// The include resolver's way to this instance's stat memo (kiln's own sources only).
  friend struct detail::ManifestsAccess;
  struct State;
  struct Lookup;  ///< lookup()'s three steps (manifest_store.cpp)
  ManifestConfig m_config;
  std::unique_ptr<State> m_state;
};

}  // namespace kiln::cache
