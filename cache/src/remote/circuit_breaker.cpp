// The remote tier's circuit breaker (circuit_breaker.hpp). Lock-free: every lookup passes through
// admit(), from any thread.
#include "circuit_breaker.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/base/log.hpp"

namespace kiln::cache::detail {

namespace {

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CircuitBreaker::CircuitBreaker(std::string subject, std::chrono::seconds retry_after)
    : m_subject(std::move(subject)), m_retry_after(retry_after) {}

// At least 1 ns, so that opening always puts the retry time past now, even with retry_after 0.
std::int64_t CircuitBreaker::open_ns() const noexcept {
  return std::max<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(m_retry_after).count(), 1);
}

bool CircuitBreaker::is_open() const noexcept {
  const std::int64_t until = m_open_until.load(std::memory_order_acquire);
  return until != 0 && now_ns() < until;
}

bool CircuitBreaker::admit() noexcept {
  std::int64_t until = m_open_until.load(std::memory_order_acquire);
  if (until == 0) return true;
  const std::int64_t now = now_ns();
  if (now < until) {
    m_skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (m_open_until.compare_exchange_strong(until, now + open_ns())) return true;
  m_skipped.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void CircuitBreaker::fail(std::string_view why) noexcept {
  m_open_until.store(now_ns() + open_ns(), std::memory_order_release);
  m_failures.fetch_add(1, std::memory_order_relaxed);
  try {
    report_failure(why);
  } catch (...) {  // std::bad_alloc while formatting: the warning is lost, nothing else
  }
}

void CircuitBreaker::report_failure(std::string_view why) {
  if (!m_outage.exchange(true)) {
    while (why.ends_with('.') || why.ends_with(' ')) why.remove_suffix(1);
    const std::string when = m_retry_after.count() > 0
                                 ? fmt::format("not asking it again for {} s", m_retry_after.count())
                                 : std::string("asking again on the next lookup");
    KILN_LOG(warn, "{}: {}; {} (the local cache and compiles carry on)", m_subject, why, when);
  } else {
    KILN_LOG(debug, "{}: {}", m_subject, why);
  }
}

void CircuitBreaker::succeed() noexcept {
  if (m_open_until.load(std::memory_order_relaxed) != 0) m_open_until.store(0, std::memory_order_release);
  if (!m_outage.exchange(false)) return;
  try {
    KILN_LOG(info, "{}: answering again", m_subject);
  } catch (...) {
  }
}

}  // namespace kiln::cache::detail
