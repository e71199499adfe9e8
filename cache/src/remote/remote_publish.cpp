// Writing entries to the remote tier, and its background thread (remote_publish.hpp).
#if KILN_HAVE_HIREDIS

#include "remote_publish.hpp"

#include <fmt/format.h>

#include "kiln/base/log.hpp"
#include "remote_mac.hpp"

namespace kiln::cache::detail {

Publisher::Publisher(const RemoteConfig& config, ConnectionPool& pool, CircuitBreaker& breaker, CompileLeases& leases,
                     ManifestCounters& manifests)
    : m_config(config),
      m_pool(pool),
      m_breaker(breaker),
      m_leases(leases),
      m_manifests(manifests),
      m_display(config.display()),
      m_renew_every(leases.renew_interval()),
      m_next_renew(Clock::now() + m_renew_every),
      m_thread(config, *this) {}

Publisher::~Publisher() { close(Clock::now() + m_config.close_flush); }

void Publisher::enqueue(const Entry& entry) noexcept {
  try {
    if (m_breaker.is_open()) {
      m_thread.count_dropped();
      release_lease_soon(entry.key_hash);
      return;
    }
    if (!m_thread.push(entry.key_hash, RemoteValue::entry, [&entry] { return serialize(entry); })) {
      drop(entry.key_hash, "the publish queue is full");
    }
  } catch (...) {
    m_thread.count_dropped();
  }
}

void Publisher::enqueue_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept {
  // A manifest dropped costs a resolve on another node, never an error: not counted, said at debug level.
  try {
    if (!m_breaker.is_open() &&
        m_thread.push(manifest_object_key(request_key), RemoteValue::manifest,
                      [bytes] { return std::vector<std::byte>(bytes.begin(), bytes.end()); })) {
      return;
    }
    KILN_LOG(debug, "remote cache {}: dependency manifest of {} not published: {}", m_display, request_key.hex(),
             m_breaker.is_open() ? "the server failed moments ago" : "the publish queue is full");
  } catch (...) {
  }
}

void Publisher::drop(const Hash128& key, std::string_view why) noexcept {
  m_thread.count_dropped();
  try {
    KILN_LOG(debug, "remote cache {}: entry {} not published: {}", m_display, key.hex(), why);
  } catch (...) {
  }
  release_lease_soon(key);
}

namespace {

/// Why a transaction's reply is not a success: EXEC's array holds one reply per command, any of which
/// may be an error (out of memory, a read-only replica); nil means the server aborted it. Empty when
/// every command succeeded.
std::string transaction_error(const redisReply* reply) {
  if (reply->type == REDIS_REPLY_ERROR) return text_of(reply).empty() ? "an error reply" : std::string(text_of(reply));
  if (reply->type != REDIS_REPLY_ARRAY) return "the transaction was aborted";
  for (std::size_t i = 0; i < reply->elements; ++i) {
    if (reply->element[i]->type == REDIS_REPLY_ERROR)
      return "a queued command failed: " + std::string(text_of(reply->element[i]));
  }
  return {};
}

}  // namespace

bool Publisher::write(const Hash128& key, std::span<const std::byte> bytes, std::string* why, RemoteValue what) {
  const bool entry = what == RemoteValue::entry;
  const std::string name = m_config.entry_key(key);
  const std::string_view value(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string ttl = std::to_string(m_config.ttl.count());
  const bool expires = m_config.ttl.count() > 0;
  CommandResult result;
  std::string failed;  // an error reply's text
  if (m_config.authenticated()) {
    // The entry and its MAC in one transaction: a reader (one MGET) sees both or neither, never one
    // publisher's entry with another's MAC.
    const std::string mac_name = m_config.mac_key(key);
    const std::string mac = remote_mac(m_config.secret, what, key, bytes.data(), bytes.size());
    result = expires ? m_pool.run_transaction({{"SET", name, value, "EX", ttl}, {"SET", mac_name, mac, "EX", ttl}})
                     : m_pool.run_transaction({{"SET", name, value}, {"SET", mac_name, mac}});
    if (result.reply) failed = transaction_error(result.reply.get());
  } else {
    result = expires ? m_pool.run({"SET", name, value, "EX", ttl}) : m_pool.run({"SET", name, value});
    if (result.reply && result.reply->type == REDIS_REPLY_ERROR) {
      failed = text_of(result.reply.get());
      if (failed.empty()) failed = "an error reply";
    }
  }
  if (!result.reply) {
    if (why) *why = result.error;
    if (entry) m_thread.count_dropped();
    return false;
  }
  if (!failed.empty()) {
    std::string error = reply_error("SET", failed);
    m_breaker.fail(error);
    if (why) *why = std::move(error);
    if (entry) m_thread.count_dropped();
    return false;
  }
  m_breaker.succeed();
  if (entry) {
    m_thread.count_published();
  } else {
    m_manifests.published.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

void Publisher::release_lease_soon(const Hash128& key) noexcept {
  if (m_leases.mark_for_release(key)) m_thread.wake();
}

void Publisher::write_job(PublishJob& job) noexcept {
  const bool entry = job.what == RemoteValue::entry;
  try {
    if (m_breaker.admit()) {
      (void)write(job.key, job.bytes, nullptr, job.what);
    } else if (entry) {
      m_thread.count_dropped();
    }
    if (entry) m_leases.release(job.key);
  } catch (...) {
    if (entry) m_thread.count_dropped();
  }
}

bool Publisher::chores_due() noexcept {
  try {
    return m_leases.release_pending() || Clock::now() >= m_next_renew;
  } catch (...) {  // std::system_error from the leases' mutex: renew on time only
    return Clock::now() >= m_next_renew;
  }
}

void Publisher::chores() noexcept {
  try {
    m_leases.maintain();
  } catch (...) {
  }
  m_next_renew = Clock::now() + m_renew_every;
}

// Closing: every lease still held is freed (its peers stop waiting for this node's compile).
void Publisher::on_close() noexcept {
  try {
    m_leases.mark_all_for_release();
    m_leases.maintain();
  } catch (...) {
  }
}

}  // namespace kiln::cache::detail

#endif  // KILN_HAVE_HIREDIS
