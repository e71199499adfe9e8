#pragma once
// Private to cache/: the shell every remote backend shares, so a backend file holds only its wire
// protocol. RemoteTierBase keeps the configuration, the display URL, the circuit breaker, the lookup and
// manifest counters, and answers what does not depend on the server: describe(), config(), counters(),
// remote_stats(), the frame of get() (timing; an exception answered io_error; the outcome counted) and of
// get_manifest() (counted_manifest_fetch), and the refusal paths (a rejected value, an unauthenticated
// one, a refused manifest: counted, warned about in the same words for every backend). A backend
// implements lookup(), fetch_manifest() and the writes, and adds its own numbers in add_stats().
// Plain code: built with or without hiredis and libcurl.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "circuit_breaker.hpp"
#include "kiln/cache/remote.hpp"
#include "remote_manifest.hpp"

namespace kiln::cache::detail {

/// Sets an optional out-parameter; a failed allocation leaves it as it was.
void set_detail(std::string* detail, std::string_view text) noexcept;

class RemoteTierBase : public RemoteTier {
 public:
  RemoteTierBase(const RemoteTierBase&) = delete;
  RemoteTierBase& operator=(const RemoteTierBase&) = delete;

  /// "<backend> <display URL without its scheme>": "redis user@host:6379/0", "http host:80/kiln".
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] const RemoteConfig& config() const noexcept final { return m_config; }
  [[nodiscard]] Counters counters() const noexcept final;
  /// The shared numbers, then the backend's (add_stats).
  [[nodiscard]] RemoteStats remote_stats() const noexcept final;
  /// Times and counts lookup(): a hit, a miss, or an error (an entry refused for its MAC is counted as
  /// remote_unauthenticated only: it is not the server failing). Never throws.
  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key) final;
  /// counted_manifest_fetch over fetch_manifest(). Never throws.
  [[nodiscard]] ManifestFetch get_manifest(const Hash128& request_key, const ManifestCheck& check) noexcept final;

 protected:
  explicit RemoteTierBase(RemoteConfig config);
  ~RemoteTierBase() override = default;

  /// The backend's lookup: a verified entry, a miss, or why not. Sets `refused_unauthenticated` when it
  /// refused an entry for its MAC (unauthenticated()). May throw std::bad_alloc (get() answers io_error).
  virtual LookupResult lookup(const Hash128& key, std::string_view canonical_key, bool& refused_unauthenticated) = 0;
  /// The backend's manifest lookup (get_manifest() counts it). May throw std::bad_alloc.
  virtual ManifestFetch fetch_manifest(const Hash128& request_key, const ManifestCheck& check) = 0;
  /// Adds what only the backend knows to `stats` (published, publish_dropped, leases, more skipped).
  virtual void add_stats(RemoteStats& stats) const noexcept = 0;

  /// "not asked: it failed less than N s ago": the breaker refused a write (put, put_manifest).
  [[nodiscard]] std::string not_asked() const;
  /// A value that is not a valid entry for its key (`where`: "the value under kiln:v1:..."): counted as
  /// rejected, warned about, answered corrupt_removed. `deleted`: whether the backend could delete it.
  [[nodiscard]] LookupResult rejected(std::string_view where, std::string_view why, bool deleted);
  /// Counts a rejected value without a warning, and answers corrupt_removed with `why` (a backend that
  /// says more or less about it itself).
  [[nodiscard]] LookupResult rejected_quietly(std::string_view why);
  /// A value whose MAC is missing or wrong (`where`: "the entry under ...", "the object at ..."): counted
  /// as rejected and unauthenticated, warned about once per tier (whoever can write to the server can
  /// plant many; each is counted), answered corrupt_removed; sets `refused_unauthenticated`.
  [[nodiscard]] LookupResult unauthenticated(std::string_view where, const Hash128& key, bool had_mac, bool deleted,
                                             bool& refused_unauthenticated);
  /// A manifest refused at `where` (ManifestCounters::refuse under this tier's name).
  [[nodiscard]] ManifestFetch refused_manifest(std::string_view where, std::string_view why, bool deleted) noexcept;

  // Construction order is the order of use: a backend's own parts borrow these.
  const RemoteConfig m_config;
  const std::string m_display;  ///< m_config.display(): never the password
  CircuitBreaker m_breaker;
  ManifestCounters m_manifests;

 private:
  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_errors{0}, m_rejected{0}, m_unauthenticated{0}, m_get_ns{0},
      m_get_max_ns{0};
  std::atomic<bool> m_warned_unauthenticated{false};
};

}  // namespace kiln::cache::detail
