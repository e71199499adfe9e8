// The remote tier's fleet-wide compile lease (remote_lease.hpp).
#if KILN_HAVE_HIREDIS

#include "remote_lease.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/base/log.hpp"

namespace kiln::cache::detail {

namespace {

using std::chrono::milliseconds;

// Compare-and-delete and compare-and-renew: only the node whose token the lease holds may touch it
// (a lease that expired and was taken by a peer is the peer's).
constexpr std::string_view kReleaseScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
constexpr std::string_view kRenewScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

std::string host_name() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown-host";
  return std::string(buffer.data());
}

}  // namespace

CompileLeases::CompileLeases(const RemoteConfig& config, ConnectionPool& pool, CircuitBreaker& breaker)
    : m_config(config), m_pool(pool), m_breaker(breaker), m_display(config.display()), m_host(host_name()) {}

std::string CompileLeases::ttl_text() const {
  return std::to_string(std::max<std::int64_t>(1, m_config.lease_ttl.count()));
}

milliseconds CompileLeases::renew_interval() const noexcept {
  return std::max(milliseconds(10), m_config.lease_ttl / 3);
}

CompileLeases::Attempt CompileLeases::try_take(const Hash128& key, const std::string& lease_name) {
  const std::string token = fmt::format("{}:{}:{}", m_host, ::getpid(), m_serial.fetch_add(1) + 1);
  const CommandResult result = m_pool.run({"SET", lease_name, token, "NX", "PX", ttl_text()});
  if (!result.reply) return Attempt::failed;
  if (result.reply->type == REDIS_REPLY_NIL) return Attempt::busy;
  if (result.reply->type == REDIS_REPLY_ERROR) {
    m_breaker.fail(reply_error("SET NX (compile lease)", text_of(result.reply.get())));
    return Attempt::failed;
  }
  const std::lock_guard lock(m_mutex);
  m_leases[key] = Lease{token, Clock::now(), false};
  return Attempt::taken;
}

LookupResult CompileLeases::take_or_wait(const Hash128& key, const std::function<Fetched()>& fetch) {
  using Found = Fetched::Found;
  const std::string lease_name = m_config.lease_key(key);
  const auto deadline = Clock::now() + m_config.lease_wait;
  bool waited = false;
  milliseconds poll{2};
  for (;;) {
    switch (try_take(key, lease_name)) {
      case Attempt::taken: {
        // The entry may have been written between the caller's GET and the lease (its compiler
        // released the lease right after): look once more before compiling it again.
        Fetched fetched = fetch();
        if (fetched.found == Found::absent) {
          m_taken.fetch_add(1, std::memory_order_relaxed);
          return {LookupOutcome::miss, std::nullopt, {}};
        }
        release(key);
        if (fetched.found == Found::entry && waited) m_wait_hits.fetch_add(1, std::memory_order_relaxed);
        return std::move(fetched.result);
      }
      case Attempt::failed:
        return {LookupOutcome::io_error, std::nullopt, fmt::format("remote cache {}: compile lease failed", m_display)};
      case Attempt::busy:
        break;
    }
    if (!waited) {
      waited = true;
      m_waits.fetch_add(1, std::memory_order_relaxed);
      KILN_LOG(debug, "remote cache {}: a peer is compiling {}; waiting for its entry", m_display, key.hex());
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      KILN_LOG(info, "remote cache {}: waited {} ms for a peer to compile {}; compiling here", m_display,
               m_config.lease_wait.count(), key.hex());
      return {LookupOutcome::miss, std::nullopt, {}};
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(poll, deadline - now));
    poll = std::min(poll * 2, milliseconds(50));
    Fetched fetched = fetch();
    if (fetched.found == Found::entry) m_wait_hits.fetch_add(1, std::memory_order_relaxed);
    if (fetched.found != Found::absent) return std::move(fetched.result);
  }
}

void CompileLeases::release(const Hash128& key) {
  std::string token;
  {
    const std::lock_guard lock(m_mutex);
    auto it = m_leases.find(key);
    if (it == m_leases.end()) return;
    token = std::move(it->second.token);
    m_leases.erase(it);
  }
  if (m_breaker.is_open()) return;  // it expires by itself
  const std::string name = m_config.lease_key(key);
  (void)m_pool.run({"EVAL", kReleaseScript, "1", name, token});
}

bool CompileLeases::mark_for_release(const Hash128& key) noexcept {
  try {
    const std::lock_guard lock(m_mutex);
    auto it = m_leases.find(key);
    if (it == m_leases.end()) return false;
    it->second.release = true;
    return true;
  } catch (...) {  // std::system_error from the mutex: the lease expires by itself
    return false;
  }
}

void CompileLeases::mark_all_for_release() {
  const std::lock_guard lock(m_mutex);
  for (auto& lease : m_leases) lease.second.release = true;
}

bool CompileLeases::release_pending() const {
  const std::lock_guard lock(m_mutex);
  return std::any_of(m_leases.begin(), m_leases.end(), [](const auto& lease) { return lease.second.release; });
}

void CompileLeases::maintain() {
  std::vector<std::pair<Hash128, std::string> > renew;
  std::vector<Hash128> marked;
  {
    const std::lock_guard lock(m_mutex);
    const auto now = Clock::now();
    for (auto it = m_leases.begin(); it != m_leases.end();) {
      if (it->second.release) {
        marked.push_back(it->first);
        ++it;
      } else if (now - it->second.taken > m_config.lease_wait) {
        it = m_leases.erase(it);
      } else {
        renew.emplace_back(it->first, it->second.token);
        ++it;
      }
    }
  }
  for (const Hash128& key : marked) release(key);
  if (m_breaker.is_open()) return;
  const std::string ttl = ttl_text();
  for (const auto& [key, token] : renew) {
    const std::string name = m_config.lease_key(key);
    (void)m_pool.run({"EVAL", kRenewScript, "1", name, token, ttl});
  }
}

}  // namespace kiln::cache::detail

#endif  // KILN_HAVE_HIREDIS
