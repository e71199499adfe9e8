#pragma once
// Private to cache/, built with hiredis only: writing entries to the remote tier. publish() must not
// delay the compile that produced the entry, so it only queues a serialized copy; one background
// thread writes the queue in order. The queue is bounded (entries and bytes): when the server is slower
// than the compiles, entries are dropped rather than held. The same thread keeps this node's compile
// leases (renews them while compiles run, releases those marked), because it is the one thread that
// is always there to talk to the server in the background. Dependency manifests go through the same
// queue, under their own name and MAC label (remote_manifest.hpp), and hold no lease.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "circuit_breaker.hpp"
#include "kiln/cache/remote.hpp"
#include "publish_queue.hpp"
#include "redis_connection.hpp"
#include "remote_lease.hpp"
#include "remote_mac.hpp"
#include "remote_manifest.hpp"

namespace kiln::cache::detail {

/// The Redis tier's writes: what publish() queues goes through a PublishThread (publish_queue.hpp),
/// whose chores between jobs are this node's compile leases (renewed while held, released when marked,
/// all released when it closes).
class Publisher final : private PublishThread::Writer {
 public:
  /// All five are borrowed and must outlive the publisher (`manifests` counts the manifests written).
  /// Starts the background thread.
  Publisher(const RemoteConfig& config, ConnectionPool& pool, CircuitBreaker& breaker, CompileLeases& leases,
            ManifestCounters& manifests);
  /// close() with a deadline of close_flush from now.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  /// Queues `entry` for the background thread. Dropped (and its lease marked for release) while the
  /// breaker is open or when the queue is full. Never throws.
  void enqueue(const Entry& entry) noexcept;
  /// Queues the manifest of `request_key` (its bytes copied) as enqueue() queues an entry. Never throws.
  void enqueue_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept;
  /// Writes one serialized entry (or manifest: `what`, under manifest_object_key()) now (SET, with EX
  /// ttl when configured; with a fleet secret, the value and its MAC in one MULTI/EXEC). False with `why`
  /// (if given) when the server failed, which the breaker is told.
  bool write(const Hash128& key, std::span<const std::byte> bytes, std::string* why,
             RemoteValue what = RemoteValue::entry);
  /// Marks the lease for `key` for release by the background thread (the caller does not wait for the
  /// server). Never throws.
  void release_lease_soon(const Hash128& key) noexcept;
  /// Waits until the queue is empty and nothing is being written, at most `max_wait`. Never throws.
  bool wait_idle(std::chrono::milliseconds max_wait) noexcept { return m_thread.wait_idle(max_wait); }
  /// Takes no more jobs, writes what is queued until `deadline`, drops the rest, releases every lease
  /// still held and stops the thread. Idempotent (a later call keeps the first deadline). Never throws.
  void close(std::chrono::steady_clock::time_point deadline) noexcept { m_thread.close(deadline); }
  /// Whether close() has begun: nothing will release a lease taken after it.
  [[nodiscard]] bool closed() const noexcept { return m_thread.closed(); }

  [[nodiscard]] std::uint64_t published() const noexcept { return m_thread.published(); }
  [[nodiscard]] std::uint64_t dropped() const noexcept { return m_thread.dropped(); }

 private:
  using Clock = std::chrono::steady_clock;
  void drop(const Hash128& key, std::string_view why) noexcept;
  // PublishThread::Writer
  void write_job(PublishJob& job) noexcept override;
  [[nodiscard]] bool chores_due() noexcept override;
  void chores() noexcept override;
  [[nodiscard]] Clock::time_point next_chores() noexcept override { return m_next_renew; }
  void on_close() noexcept override;

  const RemoteConfig& m_config;
  ConnectionPool& m_pool;
  CircuitBreaker& m_breaker;
  CompileLeases& m_leases;
  ManifestCounters& m_manifests;
  const std::string m_display;
  const std::chrono::milliseconds m_renew_every;
  Clock::time_point m_next_renew;  ///< the thread's own: when the leases are next renewed

  PublishThread m_thread;  ///< last: its thread starts after every member above exists
};

}  // namespace kiln::cache::detail
