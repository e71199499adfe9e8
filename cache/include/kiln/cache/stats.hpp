#pragma once
// Cache statistics: per-engine counters (in memory) and lifetime counters persisted across processes
// in sharded files under <root>/stats/ (one shard chosen by pid, updated under a lock). A failed stats
// write is never an error.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace kiln::cache {

/// Every counter once, in Counters' order: the one list that the atomic mirror, +=, the persisted text
/// form, the C API's kiln_stats copy and `kiln cache stats` are made from. Adding a counter: a field
/// below, here, in kiln_stats (kiln.h, at its end, with an API version) and in the Python binding.
// clang-format off
#define KILN_CACHE_COUNTERS(X) \
  X(memory_hits) X(disk_hits) X(misses) X(compiles) X(compile_failures) X(compile_nanoseconds) \
  X(corrupt_removed) X(evictions) X(bytes_written) X(bytes_read) X(remote_hits) X(remote_misses) X(remote_errors) \
  X(manifest_hits) X(include_resolves) X(remote_unauthenticated) X(pch_made) X(pch_used)
// clang-format on

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
  /// Requests that read files (include folders, or an include by path) whose entry key came from the
  /// dependency manifest (no header read).
  std::uint64_t manifest_hits = 0;
  /// Requests that read files and resolved their includes (read every header they reach).
  std::uint64_t include_resolves = 0;
  /// Remote entries refused for a missing or wrong MAC (counted here only, not also in remote_errors).
  std::uint64_t remote_unauthenticated = 0;
  /// Compiles that made an NVRTC precompiled header, and compiles that used one (KILN_PCH).
  std::uint64_t pch_made = 0;
  std::uint64_t pch_used = 0;

  Counters& operator+=(const Counters& other) noexcept;
  [[nodiscard]] double compile_seconds() const noexcept { return static_cast<double>(compile_nanoseconds) * 1e-9; }
  /// (memory + disk + remote hits) / (hits + misses); 0 when there were no requests.
  [[nodiscard]] double hit_ratio() const noexcept;
};

#define KILN_COUNT_ONE(field) +1
static_assert(sizeof(Counters) == (0 KILN_CACHE_COUNTERS(KILN_COUNT_ONE)) * sizeof(std::uint64_t),
              "every field of Counters is in KILN_CACHE_COUNTERS");
#undef KILN_COUNT_ONE

/// Thread-safe counters for one engine.
class AtomicCounters {
 public:
  void add(const Counters& delta) noexcept;
  [[nodiscard]] Counters snapshot() const noexcept;
  void reset() noexcept;
#define KILN_ATOMIC_COUNTER(field) std::atomic<std::uint64_t> field{0};
  KILN_CACHE_COUNTERS(KILN_ATOMIC_COUNTER)
#undef KILN_ATOMIC_COUNTER
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
