#pragma once
// Private to cache/, built with hiredis only: the fleet-wide compile lease of the remote tier, so a
// fleet compiles each kernel once. After a miss, a node takes the key's lease on the server (SET NX PX
// lease_ttl, value "<host>:<pid>:<n>") and compiles; a node that finds the lease held polls for the
// holder's entry instead. A lease is released (compare-and-delete, so only its holder can) when its
// entry is published or its compile is abandoned, renewed while the compile runs (for at most
// lease_wait: peers stop waiting then anyway), and expires by itself when its holder dies.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "circuit_breaker.hpp"
#include "kiln/cache/remote.hpp"
#include "redis_connection.hpp"

namespace kiln::cache::detail {

/// What one verified GET of an entry found, and the lookup's answer for it.
struct Fetched {
  enum class Found { entry, absent, rejected, failed };
  Found found = Found::absent;
  LookupResult result;
};

class CompileLeases {
 public:
  /// All three are borrowed and must outlive this object.
  CompileLeases(const RemoteConfig& config, ConnectionPool& pool, CircuitBreaker& breaker);

  /// After a miss: takes the key's lease (answers miss: this caller compiles and publishes), or, while
  /// a peer holds it, polls `fetch` (one verified GET) until the peer's entry appears (its answer),
  /// the lease is free again (this caller takes it) or lease_wait passes (miss).
  [[nodiscard]] LookupResult take_or_wait(const Hash128& key, const std::function<Fetched()>& fetch);

  /// Releases the lease for `key` now, if this node holds it. While the breaker is open the server is
  /// not asked: the lease expires by itself.
  void release(const Hash128& key);
  /// Marks the lease for `key`, if this node holds it, for release by maintain(). True when one was
  /// marked. Never throws (a lease that cannot be marked expires by itself).
  bool mark_for_release(const Hash128& key) noexcept;
  /// Marks every lease this node holds (the tier is closing).
  void mark_all_for_release();
  /// True when a lease is marked for release.
  [[nodiscard]] bool release_pending() const;
  /// Releases the marked leases, forgets those held longer than lease_wait and renews the rest.
  void maintain();
  /// How often maintain() must run to keep a lease alive: a third of lease_ttl, at least 10 ms.
  [[nodiscard]] std::chrono::milliseconds renew_interval() const noexcept;

  [[nodiscard]] std::uint64_t taken() const noexcept { return m_taken.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t waits() const noexcept { return m_waits.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t wait_hits() const noexcept { return m_wait_hits.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Attempt { taken, busy, failed };
  struct Lease {
    std::string token;
    Clock::time_point taken;
    bool release = false;
  };

  Attempt try_take(const Hash128& key, const std::string& lease_name);
  [[nodiscard]] std::string ttl_text() const;

  const RemoteConfig& m_config;
  ConnectionPool& m_pool;
  CircuitBreaker& m_breaker;
  const std::string m_display;
  const std::string m_host;

  mutable std::mutex m_mutex;  ///< guards m_leases
  std::unordered_map<Hash128, Lease, Hash128Hasher> m_leases;
  std::atomic<std::uint64_t> m_serial{0};
  std::atomic<std::uint64_t> m_taken{0};
  std::atomic<std::uint64_t> m_waits{0};
  std::atomic<std::uint64_t> m_wait_hits{0};
};

}  // namespace kiln::cache::detail
