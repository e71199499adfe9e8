#pragma once
// The cross-process compile lease of the local store: one file per key, lock/<32 hex>.lease, created
// with O_EXCL and holding "pid host unix-time nonce start-ticks boot-id\n" (start-ticks: field 22 of
// /proc/<pid>/stat; boot-id: /proc/sys/kernel/random/boot_id; "-" when unknown). The process that
// creates it compiles the key; the others wait for the entry to appear (then read it) or for the lease
// to go away. A lease is broken by the next waiter when it is stale:
//   - not refreshed for kLeaseStaleAge, whoever holds it (a holder refreshes its leases while it works);
//   - on this host, when its pid is dead, or alive but started at another time (the pid was reused: a
//     container restarted under the same hostname), or the lease is from an earlier boot;
//   - empty or unreadable for more than a short grace (its writer died between create and write, or
//     the disk was full).
// A lease of the older four-field format is judged by its pid alone. A waiter still waiting after a
// second says once (KILN_LOG warn) whom it waits for, so a long wait is never silent.
#include <chrono>
#include <filesystem>
#include <string>

#include "kiln/base/hash.hpp"

namespace kiln::cache {

/// A lease not refreshed for this long is broken even when its owner looks alive. A holder refreshes
/// its lease (sets its mtime to now) every kLeaseRefresh while it compiles, from one thread per process,
/// so a live holder that stopped working (stopped, hung, or a lease file planted or left behind by a
/// process that is not compiling) blocks the key for this long, not for a waiter's whole wait.
inline constexpr std::chrono::seconds kLeaseStaleAge{15};
inline constexpr std::chrono::seconds kLeaseRefresh{3};

/// Held while this process compiles a key; released (lock file removed) in the destructor.
class CompileLease {
 public:
  CompileLease() = default;
  CompileLease(CompileLease&&) noexcept;
  CompileLease& operator=(CompileLease&&) noexcept;
  CompileLease(const CompileLease&) = delete;
  CompileLease& operator=(const CompileLease&) = delete;
  ~CompileLease();
  /// True when this process holds the lease and should compile. False when the wait ended without it
  /// (the owner finished: re-read the store; or the wait timed out: compile anyway).
  [[nodiscard]] bool owned() const noexcept { return !m_path.empty(); }
  void release() noexcept;

 private:
  friend CompileLease acquire_compile_lease(const std::string&, const Hash128&, const std::string&,
                                            std::chrono::milliseconds) noexcept;
  std::filesystem::path m_path;
  std::string m_token;  ///< the lease file's content: release() removes the file only while it still holds it
};

/// Waits (up to `max_wait`) for the lease of `key` in the directory `lock_dir` (created, mode 0700, when
/// missing). While another process holds it, polls every 10 ms and breaks it when it is stale (see
/// above). Returns a lease that is not owned when `entry_path` exists (the owner finished: read the
/// store), on timeout (compile anyway), or when no lease can be taken there. Never waits longer than
/// `max_wait`. The store's own entry point is Store::acquire_lease, which also checks its mode.
[[nodiscard]] CompileLease acquire_compile_lease(const std::string& lock_dir, const Hash128& key,
                                                 const std::string& entry_path,
                                                 std::chrono::milliseconds max_wait) noexcept;

}  // namespace kiln::cache
