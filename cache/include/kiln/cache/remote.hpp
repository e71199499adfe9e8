#pragma once
// The remote tiers: servers shared by a fleet of nodes (KILN_REMOTE_CACHE), so a kernel compiled on one
// node is a cache hit on every other. Consulted after the local store and the packs, before compiling;
// a compile is published to them in the background. KILN_REMOTE_CACHE is an ordered, ','-separated
// chain (split_remote_urls); the storage front end (storage.hpp) asks the tiers in order and back-fills
// the earlier ones from a later one's hit. Two backends behind one interface (RemoteTier), picked by
// the URL's scheme from one table (src/remote/remote_open.cpp; RemoteConfig::kind), sharing one shell
// (src/remote/remote_base.hpp: counters, stats, refusals):
//  - redis:// — described below: entry and MAC under two keys, and the fleet compile lease.
//  - http(s):// — plain GET/HEAD/PUT/DELETE of one self-authenticating object per entry
//    (src/remote/remote_object.hpp: "KILNOBJ1", 16 hex digits of entry size, 64 of MAC or '-', the
//    entry) at object_path() in the subdirs, flat or bazel layout; libcurl is dlopen()ed on first use
//    (KILN_REMOTE_HTTP_LIBCURL, default libcurl.so.4): without it the tier answers errors after one
//    warning. No compile lease (a plain PUT cannot hold one): lease_wait is always 0 there. The same
//    failure rules, verification, MAC (entry_mac over the same label, key and bytes) and counters as
//    Redis; a refused object is deleted where the server allows DELETE.
//
// The Redis tier:
//
// Keys (namespace `key_prefix`, default "kiln:v1:"):
//   <prefix><32 hex>         the entry: exactly the bytes cache::serialize() writes (optional TTL)
//   <prefix>lease:<32 hex>   the fleet-wide compile lease: "<host>:<pid>:<n>", SET NX PX lease_ttl
//   <prefix>mac:<32 hex>     the entry's MAC, written only by a node with a fleet secret (below)
// Contracts:
//  - A remote failure never fails a request. Connect and operation timeouts are short; after a failure
//    a circuit breaker skips the server for `retry_after` (then one request probes it), and one warning
//    is printed per outage ("remote cache redis://user@host:port/db: authentication failed: WRONGPASS
//    ..."). The password never appears in a message.
//  - A value is used only after cache::parse() (magic, version, sizes, checksum) and a comparison of
//    its key hash and canonical key with the request. Anything else (truncated, bit-flipped, foreign,
//    not a string) is deleted from the server and answered as corrupt_removed.
//  - get() and publish() are thread-safe (a small pool of connections). publish() only queues: a
//    bounded queue drained by one background thread; when the queue is full the entry is dropped.
//  - Lease (lease_wait > 0): a get() that misses takes the key's lease when it is free and answers
//    miss (the caller compiles and publishes, which releases the lease); when a peer holds it, get()
//    polls for the peer's entry until it appears (hit), the lease is free again (this caller takes it:
//    miss) or lease_wait passes (miss). So a fleet compiles each kernel once. A caller that does not
//    publish after a miss (its compile failed, or another local process compiled it) calls
//    abandon(key) (Tier::abandon); a lease never published is released when the tier is destroyed, and
//    a node that dies holding one frees it after lease_ttl (the background thread renews live leases
//    for at most lease_wait).
//
//
// Authentication (KILN_REMOTE_SECRET_FILE). The key and the entry checksum are unkeyed hashes, so
// anyone who can write to the server can plant an entry that parses, matches its key and would be
// loaded as GPU code by every node. A fleet secret (a file of at least 16 bytes, readable by its owner
// only) closes that: a node with the secret publishes each entry with a MAC, and serves only entries
// whose MAC it verifies. Wire format: the entry value is unchanged (so nodes without the secret, and
// kiln versions before it, read it as before); next to it, under <prefix>mac:<32 hex>, 64 lower-case
// hex digits of HMAC-SHA-256(secret, "kiln-remote-entry/1" NUL <32 hex key> NUL <entry bytes>), with
// the entry's TTL. Both are written in one MULTI/EXEC and read in one MGET, so a reader never sees an
// entry with another write's MAC. The MAC is compared in constant time. With the secret, an entry
// whose MAC is missing or wrong is refused (a lookup answers corrupt_removed, the node compiles
// instead), counted (remote_unauthenticated), deleted with its MAC key, and warned about once per
// tier. A key holding something other than a string reads as absent there (MGET answers nil) and is
// overwritten by the next publish. Without the secret nothing changes: entries are written without a
// MAC and read without looking for one (a deletion also removes the key's MAC).
//
// Dependency manifests (dep_manifest.hpp, the first level of an include-folder request's key) travel
// too, so a node with the same tree at the same paths hits without resolving its includes: under a key
// of their own (manifest_object_key(request key): XXH3-128 under another seed, so never an entry's key
// but by a 128-bit collision) in the same layout (Redis: <prefix><32 hex> and <prefix>mac:<32 hex>;
// HTTP: the same KILNOBJ1 frame at object_path()), with a MAC under a label of their own
// ("kiln-remote-manifest/1": no entry's MAC is valid for a manifest, nor the other way). With a
// fleet secret a manifest without a valid MAC is refused, deleted and counted (manifest_refused), never
// handed on; without one, as entries. What a server returns is handed on only when the caller's check
// (ManifestCheck: the include home parses it) takes it as the manifest of the request key asked for;
// anything else is refused the same way. To a tier a manifest is otherwise an opaque record.
// A manifest publish is always written (no HEAD first: a manifest under one name changes as results
// are added); no lease is taken for a manifest.
//
// Counters: remote_hits = verified entries served; remote_misses = key absent (after any lease wait);
// remote_errors = every other lookup (server unreachable, slow, refusing, breaker open, bad value);
// remote_unauthenticated = those of the remote_errors that were refused for their MAC.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/cache/tier.hpp"

namespace kiln::cache {

/// The remote tier's server kind: the URL's scheme picks it.
enum class RemoteKind : std::uint8_t {
  redis,  ///< redis://: entries and MACs under separate keys, the fleet compile lease
  http,   ///< http:// or https://: one self-authenticating object per entry (remote_http.hpp), no lease
};

/// Where an HTTP tier keeps an entry under the URL's path (`?layout=` in the URL).
enum class HttpLayout : std::uint8_t {
  subdirs,  ///< <path>/<first 2 hex>/<32 hex> (default; ccache's "subdirs")
  flat,     ///< <path>/<32 hex> (ccache's "flat")
  bazel,    ///< <path>/ac/<64 hex>: bazel-remote's action cache (run it with --disable_http_ac_validation)
};
[[nodiscard]] std::string_view to_string(HttpLayout layout) noexcept;  ///< "subdirs", "flat", "bazel"

/// The largest value a remote tier reads (an entry, or a manifest): a lookup holds the whole value in
/// memory, and a hostile or broken server chooses its size, so the cap is far below the local store's
/// 1 GiB. A kernel's entry is kilobytes to a few MB (binary and canonical key), so 64 MiB leaves an
/// order of magnitude of room while six lookups at once hold at most ~400 MB.
/// KILN_REMOTE_MAX_ENTRY_MB sets another (1 to 1024). A larger value is refused before it is read
/// (answered corrupt_removed and deleted, as a damaged one).
inline constexpr std::uint64_t kRemoteMaxEntryBytes = 64ULL << 20;

struct RemoteConfig {
  RemoteKind kind = RemoteKind::redis;
  std::string host;  ///< name or address; IPv6 without brackets
  std::uint16_t port = 6379;
  int db = 0;                                        ///< SELECT db when not 0
  std::string user;                                  ///< ACL user (AUTH user password); empty = AUTH password
  std::string password;                              ///< empty = no AUTH
  std::chrono::milliseconds connect_timeout{100};    ///< KILN_REMOTE_CONNECT_TIMEOUT_MS
  std::chrono::milliseconds operation_timeout{250};  ///< KILN_REMOTE_TIMEOUT_MS (per command)
  std::chrono::seconds retry_after{30};              ///< KILN_REMOTE_RETRY_S: breaker open time
  std::chrono::seconds ttl{0};                       ///< KILN_REMOTE_TTL: entry expiry, 0 = never
  std::chrono::milliseconds lease_wait{60000};       ///< KILN_REMOTE_LEASE_WAIT_MS: 0 = no lease
  std::chrono::milliseconds lease_ttl{10000};        ///< lease expiry (renewed while held)
  std::string key_prefix = "kiln:v1:";
  std::size_t publish_queue_entries = 256;           ///< queued publishes; more are dropped
  std::uint64_t publish_queue_bytes = 256ULL << 20;  ///< queued bytes; more are dropped
  std::chrono::milliseconds close_flush{2000};       ///< destructor: time to drain the queue
  std::size_t max_idle_connections = 8;
  /// Caps on a value read from the server; max_file_bytes is kRemoteMaxEntryBytes
  /// (KILN_REMOTE_MAX_ENTRY_MB), and a longer reply is not read.
  Limits limits{.max_file_bytes = kRemoteMaxEntryBytes};
  /// The fleet secret (KILN_REMOTE_SECRET_FILE's content): entries are published with a MAC under it
  /// and served only with a valid one. Empty: unauthenticated (no MAC written or checked).
  std::string secret;
  std::string secret_file;  ///< where the secret was read, for messages (never the secret itself)

  // HTTP only (kind == http). `user` and `password` above are the basic-auth credentials; the password
  // and the token come from a file or the environment only (remote_config_from_environment), never the
  // URL.
  bool tls = false;                  ///< https://
  std::string path;                  ///< the URL's path without a trailing '/' ("" or "/kiln/cache")
  HttpLayout layout = HttpLayout::subdirs;
  std::string bearer_token;          ///< "Authorization: Bearer <token>"; empty = none
  std::string credentials_source;    ///< where the password or token was read, for messages
  bool verify_tls = true;            ///< KILN_REMOTE_HTTP_INSECURE=1 turns it off (warned)
  std::string ca_file;               ///< KILN_REMOTE_HTTP_CA_FILE: CA bundle instead of the system's
  std::string curl_library = "libcurl.so.4";  ///< KILN_REMOTE_HTTP_LIBCURL: what dlopen() loads

  /// Whether entries are authenticated (a secret is set).
  [[nodiscard]] bool authenticated() const noexcept { return !secret.empty(); }

  /// "redis://user@host:port/db" or "https://user@host:port/path?layout=flat": the URL without the
  /// password, for messages.
  [[nodiscard]] std::string display() const;
  /// HTTP: the object's path below host:port for `key` in the configured layout ("/kiln/ab/ab12...").
  [[nodiscard]] std::string object_path(const Hash128& key) const;
  /// The entry's Redis key: key_prefix + 32 hex.
  [[nodiscard]] std::string entry_key(const Hash128& key) const;
  /// The compile lease's Redis key: key_prefix + "lease:" + 32 hex.
  [[nodiscard]] std::string lease_key(const Hash128& key) const;
  /// The entry MAC's Redis key: key_prefix + "mac:" + 32 hex.
  [[nodiscard]] std::string mac_key(const Hash128& key) const;
};

/// Parses redis://[[user]:password@]host[:port][/db] (port defaults to 6379, db to 0; user and password
/// may be percent-encoded; an IPv6 host goes in brackets) or http(s)://[user@]host[:port][/path]
/// [?layout=subdirs|flat|bazel] (port defaults to 80/443; a password in an http URL is refused: it
/// belongs in KILN_REMOTE_HTTP_PASSWORD_FILE). Throws std::invalid_argument naming what is wrong, with
/// the URL shown without its password.
[[nodiscard]] RemoteConfig parse_remote_url(std::string_view url);

/// The name of the backend whose scheme `url` has ("redis", "http": RemoteTier::backend() of the tier it
/// would open), or empty when no backend takes it. Never throws.
[[nodiscard]] std::string_view remote_backend_name(std::string_view url) noexcept;

/// Splits KILN_REMOTE_CACHE's ordered list of tier URLs at ',' (spaces around an item are dropped,
/// empty items skipped, and an item that names the same tier as an earlier one, by its display() form,
/// is dropped: one server is one tier). A ',' inside one URL is written %2C.
[[nodiscard]] std::vector<std::string> split_remote_urls(std::string_view list);

/// parse_remote_url(url), then the KILN_REMOTE_* variables listed in RemoteConfig (and
/// KILN_REMOTE_MAX_ENTRY_MB: limits.max_file_bytes in MiB) and the secret in
/// KILN_REMOTE_SECRET_FILE when that is set. Throws std::invalid_argument naming the variable for a
/// malformed value, and naming the variable and the file for a secret file that is missing, unreadable,
/// not a regular file, readable or writable by group or others, empty or shorter than 16 bytes (after
/// one trailing newline is trimmed).
///
/// For an http(s) URL also: KILN_REMOTE_HTTP_TOKEN_FILE or KILN_REMOTE_HTTP_TOKEN (a bearer token),
/// KILN_REMOTE_HTTP_USER (or the URL's user) with KILN_REMOTE_HTTP_PASSWORD_FILE or
/// KILN_REMOTE_HTTP_PASSWORD (basic auth), KILN_REMOTE_HTTP_INSECURE=1, KILN_REMOTE_HTTP_CA_FILE and
/// KILN_REMOTE_HTTP_LIBCURL. Credential files follow the secret file's rules (owner-only mode).
[[nodiscard]] RemoteConfig remote_config_from_environment(std::string_view url);

/// `url` with the password replaced by "***" (best effort on malformed text). Never throws except
/// std::bad_alloc.
[[nodiscard]] std::string redact_remote_url(std::string_view url);

/// Why bytes a tier found under a request's manifest name are not that request's manifest (empty: they
/// are). The manifests' reader supplies it (the include home, which owns their format): to a tier a
/// manifest is an opaque record. Must not throw.
using ManifestCheck = std::function<std::string(std::span<const std::byte> bytes)>;

/// What RemoteTier::get_manifest() found.
struct ManifestFetch {
  enum class Outcome : std::uint8_t {
    hit,      ///< `bytes` hold a manifest of the request (MAC verified with a secret, the caller's check passed)
    miss,     ///< nothing under its name
    refused,  ///< something that is not the request's authentic manifest: deleted where the server allows
    error,    ///< the server failed, or was not asked (breaker open, no libcurl)
  };
  Outcome outcome = Outcome::miss;
  std::vector<std::byte> bytes;
  std::string detail;  ///< why, when it is not a hit or a miss
};

/// What the remote tier did, beyond the three numbers in Counters.
struct RemoteStats {
  std::uint64_t hits = 0;                 ///< verified entries served
  std::uint64_t misses = 0;               ///< key absent
  std::uint64_t failures = 0;             ///< lookups the server failed (connect, timeout, auth, error reply)
  std::uint64_t skipped = 0;              ///< lookups not sent: breaker open
  std::uint64_t rejected = 0;             ///< values that were not a valid entry for the key (deleted)
  std::uint64_t unauthenticated = 0;      ///< ... of those, refused for a missing or wrong MAC
  std::uint64_t published = 0;            ///< entries written
  std::uint64_t publish_dropped = 0;      ///< not written: queue full, breaker open, or server failed
  std::uint64_t leases_taken = 0;         ///< misses for which this node took the compile lease
  std::uint64_t lease_waits = 0;          ///< misses that waited for a peer's compile
  std::uint64_t lease_wait_hits = 0;      ///< ... and got the peer's entry
  std::uint64_t manifest_hits = 0;        ///< dependency manifests served (get_manifest)
  std::uint64_t manifest_misses = 0;      ///< ... not there
  std::uint64_t manifest_refused = 0;     ///< ... refused: no or a wrong MAC, not a manifest, another request's
  std::uint64_t manifests_published = 0;  ///< manifests written (publish_manifest, put_manifest)
  std::uint64_t get_nanoseconds = 0;      ///< total time callers spent in get() (incl. lease waits)
  std::uint64_t get_max_nanoseconds = 0;  ///< the slowest get()
};

/// One remote tier's lifetime counters (every process that used it from this cache root, summed): the
/// hits, misses, failures, skipped, rejected, unauthenticated, published, publish_dropped and manifest
/// fields of RemoteStats (others 0), under the tier's URL without its password.
struct TierLifetime {
  std::string url;
  RemoteStats stats;
};
/// Adds `delta` to the tier `url`'s lifetime counters under <root>/stats/ (a file per tier, under a lock).
/// Nothing is written for an all-zero delta. Never throws; a failed write is ignored.
void record_tier_stats(const std::filesystem::path& root, const std::string& url, const RemoteStats& delta) noexcept;
/// Every tier's lifetime counters recorded under `root`. Never throws.
[[nodiscard]] std::vector<TierLifetime> load_tier_stats(const std::filesystem::path& root) noexcept;
/// Removes every tier's lifetime counters under `root`. Never throws.
void zero_tier_stats(const std::filesystem::path& root) noexcept;

class RemoteTier : public Tier {
 public:
  /// The backend's name: "redis", "http" (the table of backends, src/remote/remote_open.cpp, has one
  /// row per backend). For messages and `kiln devices`: callers never test a URL's scheme.
  [[nodiscard]] virtual std::string_view backend() const noexcept = 0;
  /// Whether the backend can hold the fleet compile lease (Redis: yes, a tier opened with lease_wait 0
  /// takes none; HTTP: no, a plain PUT cannot): a chain without such a tier compiles a kernel once per
  /// node, not once per fleet.
  [[nodiscard]] virtual bool fleet_lease() const noexcept = 0;
  /// The configuration the tier was opened with.
  [[nodiscard]] virtual const RemoteConfig& config() const noexcept = 0;
  /// remote_hits, remote_misses, remote_errors and remote_unauthenticated since the tier was opened
  /// (other fields 0).
  [[nodiscard]] virtual Counters counters() const noexcept = 0;
  [[nodiscard]] virtual RemoteStats remote_stats() const noexcept = 0;
  /// Asks the server on a fresh connection (AUTH, SELECT, PING), ignoring the breaker. True when it
  /// answers; `detail` (if given) gets "redis 7.0.15, PONG in 0.3 ms" or why not. Never throws.
  virtual bool ping(std::string* detail) noexcept = 0;
  /// Writes one entry now (for `kiln prewarm --remote`). False (with `detail`) when the server fails
  /// or the breaker is open. Never throws.
  virtual bool put(const Entry& entry, std::string* detail) noexcept = 0;
  /// Waits until every queued publish is written or dropped, at most `max_wait`. True when the queue
  /// is empty. Never throws.
  virtual bool flush(std::chrono::milliseconds max_wait) noexcept = 0;
  /// Ends the tier's background work, for a process about to end (Storage::close_tiers): no publish is
  /// taken any more, what is queued is written until `deadline` and the rest dropped (a write under way
  /// then may run on for one operation timeout), every compile lease this node holds is released, and
  /// the publishing thread stops. Lookups still answer, but take no lease. Idempotent; the destructor
  /// does the same with a deadline of close_flush from then. Never throws. The default (for tiers with
  /// no thread of their own) only flushes until `deadline`.
  virtual void close(std::chrono::steady_clock::time_point deadline) noexcept {
    const auto left = deadline - std::chrono::steady_clock::now();
    (void)flush(std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(left)));
  }
  /// Deletes the entry for `key` from the server. False when it could not. Never throws.
  virtual bool remove(const Hash128& key) noexcept = 0;

  /// The dependency manifest of the request key (see "Dependency manifests" above): a hit holds bytes
  /// that `check` takes as the manifest of `request_key` (anything else is refused); the caller installs
  /// them (with every stat untrusted). No lease is taken. Counted in manifest_hits / manifest_misses /
  /// manifest_refused. Never throws.
  [[nodiscard]] virtual ManifestFetch get_manifest(const Hash128& request_key, const ManifestCheck& check) noexcept = 0;
  /// Queues a manifest's bytes (as recorded locally) for writing under the request key's name. Must not
  /// delay the caller; dropped when the queue is full or the breaker is open. Never throws.
  virtual void publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept = 0;
  /// Writes one manifest now (`kiln prewarm --remote`). False (with `detail`) when the server fails or
  /// the breaker is open. Never throws.
  virtual bool put_manifest(const Hash128& request_key, std::span<const std::byte> bytes,
                            std::string* detail) noexcept = 0;
};

/// True when this build has the Redis client (hiredis); open_remote() of a redis:// tier throws
/// otherwise.
[[nodiscard]] bool remote_supported() noexcept;
/// True when this build has the HTTP tier (libcurl's headers at build time; the library itself is
/// loaded with dlopen on first use, so kiln runs without it).
[[nodiscard]] bool http_remote_supported() noexcept;

/// Opens the tier: config.kind picks the backend's row in the table of backends (remote_open.cpp), as a
/// URL's scheme picks it in parse_remote_url(). Does not connect: a server that is down (or a
/// libcurl that cannot be loaded) is found on first use and never makes this throw. Throws
/// std::runtime_error when kiln was built without the tier's client.
[[nodiscard]] std::unique_ptr<RemoteTier> open_remote(const RemoteConfig& config);

}  // namespace kiln::cache
