#pragma once
// Cache statistics: per-engine counters (in memory) and lifetime counters persisted across processes
// in sharded files under <root>/stats/ (one shard chosen by pid, updated under a lock). A failed stats
// write is never an error.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace kiln::cache {

/// A plain snapshot of counters. All counts since the engine (or the cache) started.
struct Counters {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t misses = 0;  ///< requests that reached the compiler (or waited on a lease)
  std::uint64_t compiles = 0;
  std::uint64_t compile_failures = 0;
  std::uint64_t compile_nanoseconds = 0;
  std::uint64_t corrupt_removed = 0;
  std::uint64_t evictions = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t remote_hits = 0;
  std::uint64_t remote_misses = 0;
  std::uint64_t remote_errors = 0;
  /// Requests with include folders whose entry key came from the dependency manifest (no header read).
  std::uint64_t manifest_hits = 0;
  /// Requests with include folders that resolved their includes (read every header they reach).
  std::uint64_t include_resolves = 0;
  std::uint64_t remote_unauthenticated = 0;  ///< remote entries refused for a missing or wrong MAC (in remote_errors)

  Counters& operator+=(const Counters& other) noexcept;
  [[nodiscard]] double compile_seconds() const noexcept { return static_cast<double>(compile_nanoseconds) * 1e-9; }
  /// (memory + disk + remote hits) / (hits + misses); 0 when there were no requests.
  [[nodiscard]] double hit_ratio() const noexcept;
};

/// Thread-safe counters for one engine.
class AtomicCounters {
 public:
  void add(const Counters& delta) noexcept;
  [[nodiscard]] Counters snapshot() const noexcept;
  void reset() noexcept;
  std::atomic<std::uint64_t> memory_hits{0}, disk_hits{0}, misses{0}, compiles{0}, compile_failures{0},
      compile_nanoseconds{0}, corrupt_removed{0}, evictions{0}, bytes_written{0}, bytes_read{0}, remote_hits{0},
      remote_misses{0}, remote_errors{0}, manifest_hits{0}, include_resolves{0},
      remote_unauthenticated{0};
};

/// Lifetime counters under <root>/stats/. Every method never throws; failures are ignored.
class PersistentStats {
 public:
  explicit PersistentStats(std::filesystem::path root);
  /// Adds a delta to this process's shard (under a file lock).
  void add(const Counters& delta) noexcept;
  /// Sum over all shards.
  [[nodiscard]] Counters load_total() const noexcept;
  /// Resets every shard to zero.
  void zero() noexcept;

 private:
  std::filesystem::path m_dir;
};

}  // namespace kiln::cache
