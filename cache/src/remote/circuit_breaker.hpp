#pragma once
// Private to cache/: the remote tier's circuit breaker. A server that failed is not asked again for
// `retry_after`, so an outage costs each request nothing instead of a timeout; when that time has
// come, exactly one caller probes the server while the others keep skipping it. An outage is reported
// once (a warning on its first failure, an info line when the server answers again): a fleet whose
// cache server is down must not flood its logs.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cache::detail {

class CircuitBreaker {
 public:
  /// `subject` names the server in messages: "remote cache redis://user@host:6379/0".
  CircuitBreaker(std::string subject, std::chrono::seconds retry_after);

  /// True while the breaker is open and the retry time has not come. Counts nothing.
  [[nodiscard]] bool is_open() const noexcept;
  /// Whether to ask the server now. While open: no (counted as skipped), except for the one caller
  /// that claims the retry; it pushes the retry time on by `retry_after` for everyone else.
  [[nodiscard]] bool admit() noexcept;
  /// The server failed: open for `retry_after`. The first failure of an outage is a warning, later
  /// ones are debug lines.
  void fail(std::string_view why) noexcept;
  /// The server answered: close, and say so when an outage had been reported.
  void succeed() noexcept;

  [[nodiscard]] std::chrono::seconds retry_after() const noexcept { return m_retry_after; }
  /// Failures reported since construction.
  [[nodiscard]] std::uint64_t failures() const noexcept { return m_failures.load(std::memory_order_relaxed); }
  /// admit() calls answered no.
  [[nodiscard]] std::uint64_t skipped() const noexcept { return m_skipped.load(std::memory_order_relaxed); }

 private:
  /// How long a failure opens the breaker, in steady-clock ns.
  [[nodiscard]] std::int64_t open_ns() const noexcept;
  void report_failure(std::string_view why);

  const std::string m_subject;
  const std::chrono::seconds m_retry_after;
  std::atomic<std::int64_t> m_open_until{0};  ///< steady-clock ns; 0 = closed
  std::atomic<bool> m_outage{false};          ///< a warning was printed for the current outage
  std::atomic<std::uint64_t> m_failures{0};
  std::atomic<std::uint64_t> m_skipped{0};
};

}  // namespace kiln::cache::detail
