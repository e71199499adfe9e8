#pragma once
// The storage front end: everything below the engine's memory tier behind one object, opened from one
// configuration. It owns the local store, the read-through tiers under it (mounted packs, then the
// remote), the cross-process compile lease, and the counters of what it did.
//
// A request that is not in memory goes through it in two steps:
//  1. get_local(): the local store only, with no coordination (threads reading one entry at once each
//     read it). This is the request fast path: it adds nothing to a local disk hit.
//  2. On a miss, under the caller's single flight (one thread per key): get_or_reserve() reads the local
//     store again (another thread may have published since), then asks every tier in order; a tier hit
//     is copied into the local store. When nothing has the key it takes the compile lease (waiting for
//     another process's compile, then reading the local store again) and answers a Reservation. The
//     caller compiles and calls Reservation::put(), which writes the local store, releases the lease
//     and publishes to every tier. A reservation dropped without put() (the compile failed) abandons:
//     every tier is told (a remote releases its fleet-wide lease) and the local lease is released.
//
// Requests that read header files from include folders have a two-level key (the include home's
// dependency manifests, includes/include/kiln/includes/dep_manifest.hpp). The remotes hold those manifests
// too (packs do not), and to this front end they are opaque records, bytes under a request key, as entries
// are bytes under an entry key: publish_manifest() offers a record to every remote, and fetch_manifest()
// asks the remotes in order and hands the first authentic record to the caller, which checks and installs
// it (the include home; what it saves is the resolve) and says whether it took it; a record taken is
// back-filled into the remotes asked before. The manifests' local files, beside the local store, are the
// include home's.
//
// Remote tiers form a chain (KILN_REMOTE_CACHE="redis://...,https://..."), asked in order after the
// packs. A hit in one is back-filled into every remote before it (publish(), queued) and copied into
// the local store; a compile is published to all of them.
//
// Counters it keeps: disk_hits (local hits and pack hits; the remote counts its own remote_hits),
// bytes_read (local hits), corrupt_removed (damaged local entries and discard()), misses (lookups that
// found nothing anywhere), bytes_written (compiled entries written to the local store); counters() adds
// the local store's evictions and the remote's counters.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/lease.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/cache/tier.hpp"

namespace kiln::cache {

class RemoteTier;

/// The kinds of read-through tier, in the order they are asked.
enum class TierKind : std::uint8_t {
  pack,    ///< a mounted pack (read-only; a hit counts as a disk hit)
  remote,  ///< the remote tier (counts its own hits)
};
[[nodiscard]] std::string_view to_string(TierKind kind) noexcept;  ///< "pack", "remote"

/// Where an entry was found.
enum class HitOrigin : std::uint8_t { local, pack, remote };
[[nodiscard]] std::string_view to_string(HitOrigin origin) noexcept;  ///< "local", "pack", "remote"

struct StorageConfig {
  StoreConfig local;               ///< the local store
  std::vector<std::string> packs;  ///< pack files, asked in this order after the local store
  /// The remote tiers, asked last in this order: a ','-separated list of redis:// and http(s):// URLs
  /// (split_remote_urls; empty: none).
  std::string remote_url;
  /// How long a miss waits for another process's compile of the same key (the local lease).
  std::chrono::milliseconds lease_wait{std::chrono::seconds(120)};
  /// false: the tiers take no compile lease of their own on a miss (the remote's lease wait is 0). For
  /// callers that only inspect (the CLI) and never compile after a miss.
  bool tier_leases = true;
};

/// One configured tier as open_tiers() found it.
struct OpenedTier {
  TierKind kind = TierKind::pack;
  std::string location;        ///< the pack's path; the remote's URL without its password
  std::unique_ptr<Tier> tier;  ///< null when it could not be opened
  std::string error;           ///< why it could not be opened (the exception's text, less "remote cache <url>: ")
};

/// Opens every configured tier in lookup order: the packs as listed, then the remotes. A tier that
/// cannot be opened is returned with its error and no tier. The remote's settings come from the
/// KILN_REMOTE_* variables (remote_config_from_environment). Never throws except std::bad_alloc.
[[nodiscard]] std::vector<OpenedTier> open_tiers(const StorageConfig& config);

/// One configured tier as inspect_tiers() found it: for `kiln devices` and `kiln cache stats`.
struct TierHealth {
  TierKind kind = TierKind::pack;
  std::string location;  ///< the pack's path; the remote's URL without its password
  /// A remote's backend ("redis", "http": RemoteTier::backend(), or remote_backend_name() of its URL when
  /// it could not be opened); empty for a pack.
  std::string backend;
  bool opened = false;       ///< it could be opened (else `detail` says why)
  bool fleet_lease = false;  ///< an opened remote's RemoteTier::fleet_lease()
  /// Usable: a pack that opened; a remote that opened and, when its server was asked, answered.
  bool ok = false;
  std::string detail;  ///< "1234 entries", the server's answer ("redis 7.0.15, PONG in 0.21 ms"), or why not
  /// An opened remote: whether its entries are authenticated ("authenticated: ..." / "unauthenticated: set
  /// KILN_REMOTE_SECRET_FILE ..."), and a warning when TLS verification is off; empty otherwise.
  std::string security;
};

/// Every configured tier, opened to be inspected (a miss takes no compile lease: nothing is compiled
/// after one), in lookup order. `ask_servers`: each remote that opened is asked whether it answers
/// (RemoteTier::ping, ignoring its breaker). Never throws except std::bad_alloc.
[[nodiscard]] std::vector<TierHealth> inspect_tiers(const StorageConfig& config, bool ask_servers);

/// Which configured tier holds `key` (its describe(): "pack /p.kilnpack", "redis host:6379/0"), asking each
/// in lookup order as inspect_tiers() opens them; nothing is copied into the local store and no compile
/// lease is held afterwards. Empty when none holds it. `errors` gets why each tier that could not be
/// opened could not. Never throws except std::bad_alloc.
[[nodiscard]] std::string tier_holding(const StorageConfig& config, const Hash128& key, std::string_view canonical_key,
                                       std::vector<std::string>& errors);

/// What Storage::publish_stored() did.
struct StoredPublish {
  std::string urls;            ///< the remotes written to, without passwords (", "-separated)
  std::size_t written = 0;     ///< entries every remote took
  std::size_t failed = 0;      ///< entries some remote did not take, or that could not be read here
  std::size_t manifests = 0;   ///< dependency manifests every remote took
  std::set<std::string> reasons;  ///< why, once each (prefixed with the remote's URL in a chain of several)
};

/// A hit and where it came from.
struct Found {
  std::shared_ptr<const Entry> entry;
  HitOrigin origin = HitOrigin::local;
  bool stored = false;  ///< a tier hit that this lookup copied into the local store
};

class Storage;

/// What a miss of every tier holds until the caller has compiled: the local compile lease (when this
/// process took it) and the tiers' reservations. put() publishes; destroying it without put() (or
/// calling abandon()) abandons. The Storage must outlive it.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { abandon(); }

  /// True when this process holds the local compile lease. False when the wait ended without it (it
  /// timed out, or the local store takes no leases): the caller compiles anyway.
  [[nodiscard]] bool lease_owned() const noexcept { return m_lease.owned(); }
  /// Writes the compiled entry to the local store (counting bytes_written), releases the lease and
  /// offers the entry to every tier. Returns whether the local store took it. Never throws.
  bool put(const Entry& entry) noexcept;
  /// Tells every tier the compile will not come, and releases the lease. Idempotent. Never throws.
  void abandon() noexcept;

 private:
  friend class Storage;
  Reservation(Storage& storage, const Hash128& key, CompileLease lease) noexcept
      : m_storage(&storage), m_key(key), m_lease(std::move(lease)) {}
  Storage* m_storage = nullptr;  ///< null once put() or abandon() ran
  Hash128 m_key;
  CompileLease m_lease;
};

class Storage {
 public:
  /// Opens the local store and every tier (open_tiers); a tier that cannot be opened is left out with
  /// one warning and never fails the caller. Throws only what opening the local store throws.
  explicit Storage(StorageConfig config);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  [[nodiscard]] const StorageConfig& config() const noexcept { return m_config; }
  [[nodiscard]] Store& local() noexcept { return m_local; }
  [[nodiscard]] const Store& local() const noexcept { return m_local; }
  /// The first remote tier, or null when none is configured or none could be opened.
  [[nodiscard]] RemoteTier* remote() const noexcept { return m_remote; }
  /// Every remote tier in use, in lookup order.
  [[nodiscard]] const std::vector<RemoteTier*>& remotes() const noexcept { return m_remotes; }
  /// The number of tiers in use (those that opened, plus any added).
  [[nodiscard]] std::size_t tier_count() const noexcept { return m_tiers.size(); }
  /// Appends a tier after the configured ones, asked last. A `remote` must be a RemoteTier (its counters
  /// are then included, and it joins the chain of remotes that back-fill each other); `pack` stands for
  /// any tier whose hits count as disk hits. Call before any
  /// lookup: the tier list is not guarded against concurrent use.
  void add_tier(TierKind kind, std::unique_ptr<Tier> tier);

  /// The local store only, with no coordination: the entry (a disk hit, counted) or null. A damaged
  /// entry is removed, counted and warned about. Thread-safe; never throws except std::bad_alloc.
  [[nodiscard]] std::shared_ptr<const Entry> get_local(const Hash128& key, std::string_view canonical_key);

  /// The miss path, for one thread per key at a time (see the top of this file). `refresh`: the caller
  /// refused what the store had (discard()) and needs a fresh compile: no tier is asked and the lease is
  /// not followed by a re-read. Thread-safe for different keys; never throws except std::bad_alloc.
  [[nodiscard]] std::variant<Found, Reservation> get_or_reserve(const Hash128& key, std::string_view canonical_key,
                                                                bool refresh = false);

  /// A lookup that no compile follows (entries under a caller's key: blob.hpp): the local store as
  /// get_local() reads it, then every tier in order, a tier hit copied into the local store as
  /// get_or_reserve() copies it. A miss takes no compile lease and tells every tier at once that nothing
  /// follows (Tier::abandon: a remote releases the fleet-wide lease its get() may have taken); it is not
  /// counted in `misses` (no compile). Thread-safe; never throws except std::bad_alloc.
  [[nodiscard]] std::optional<Found> find(const Hash128& key, std::string_view canonical_key);
  /// Stores an entry that no reservation preceded (blob.hpp): the local store (bytes_written counted),
  /// then every tier is offered it, as Reservation::put() does. Returns whether the local store took it.
  /// Never throws.
  bool store(const Entry& entry) noexcept;
  /// Removes the local entry of `key` and asks every remote tier to delete its copy
  /// (packs are read-only: an entry a mounted pack holds is still found). Returns whether a local file
  /// was removed. Never throws.
  bool remove(const Hash128& key) noexcept;

  /// What fetch_manifest() hands a record to: checks and installs it, and says why it did not take it
  /// (empty: taken). Must not throw.
  using ManifestInstall = std::function<std::string(std::span<const std::byte> bytes)>;
  /// Asks every remote in order for the dependency manifest record of `request_key` (opaque bytes here);
  /// the first that answers one (authentic, and the request's by `check`, which each tier applies: what
  /// fails it is refused there, RemoteTier::get_manifest) is handed to `install`. When it takes it, the
  /// record is published to the remotes asked before it (back-fill, queued) and the answer is true. Never
  /// throws.
  bool fetch_manifest(const Hash128& request_key, const ManifestCheck& check, const ManifestInstall& install) noexcept;
  /// Offers a manifest's bytes, as recorded here, to every remote (queued: the caller does not wait).
  /// Never throws.
  void publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept;

  /// Writes the local entries under `keys` to every configured remote now (RemoteTier::put, not queued:
  /// `kiln prewarm --remote`), each read from the local store with the engine's parser; an entry of a
  /// request with include folders brings its request's dependency manifest (put_manifest, once per
  /// request: the bytes `manifest_bytes` gives for the request key, nullopt for none; the manifests' files
  /// are the include home's), so a node with the same tree hits without resolving. An entry counts as written when every
  /// remote took it. The remotes are opened for this call (as inspect_tiers() opens them: no lease), so
  /// what it writes is not in this storage's remote counters. Throws std::runtime_error when a configured
  /// remote cannot be opened (inspect_tiers() says so before anything is compiled).
  using ManifestBytes = std::function<std::optional<std::vector<std::byte>>(const Hash128& request_key)>;
  [[nodiscard]] StoredPublish publish_stored(std::span<const Hash128> keys, const ManifestBytes& manifest_bytes);

  /// Removes the local entry of `key` because its content was refused after it was read (e.g. a
  /// binary the driver rejects); counted as corrupt_removed. Never throws.
  void discard(const Hash128& key) noexcept;

  /// This front end's counters, plus the local store's evictions and every remote's counters.
  [[nodiscard]] Counters counters() const noexcept;

  /// What the destructor does for the remote tiers, for a process that ends without running destructors
  /// (`kiln prewarm` and its workers end in _exit): every remote's queued publishes are written (for at
  /// most its close_flush, 2 s, all remotes at once; a write under way may run on for one operation
  /// timeout, so a dead or stalled server cannot hold the exit), the fleet compile leases this node holds
  /// are released, and each remote's lifetime counters are recorded under the cache root (`kiln cache
  /// stats`). After it the remotes take no publish and no lease; lookups still work. Idempotent (the
  /// counters are recorded once). Call it when no other thread uses this storage. Never throws.
  void close_tiers() noexcept;

 private:
  friend class Reservation;
  /// Every tier in order; the first hit, copied into the local store (nullopt: no tier has it).
  [[nodiscard]] std::optional<Found> find_in_tiers(const Hash128& key, std::string_view canonical_key);
  /// The local half of a put: writes the entry and counts bytes_written. Never throws.
  bool put_local(const Entry& entry) noexcept;
  /// Offers the entry to every tier. Never throws.
  void publish_to_tiers(const Entry& entry) noexcept;
  struct TierSlot {
    TierKind kind;
    std::unique_ptr<Tier> tier;
  };
  StorageConfig m_config;
  Store m_local;
  std::vector<TierSlot> m_tiers;       // packs, then the remotes, then any added
  std::vector<RemoteTier*> m_remotes;  // the remotes in m_tiers, in order
  RemoteTier* m_remote = nullptr;      // the first of them, if any
  std::atomic<bool> m_tiers_closed{false};  // close_tiers() ran
  AtomicCounters m_counters;
};

}  // namespace kiln::cache
