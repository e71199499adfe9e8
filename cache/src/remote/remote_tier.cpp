// The Redis remote tier (remote.hpp): RemoteTier composed of a circuit breaker, a connection pool,
// the fleet's compile leases and a publisher. This file answers lookups (one GET, verified like a local
// entry; with a fleet secret one MGET of the entry and its MAC, the MAC verified first; anything else is
// deleted); the shell it shares with the HTTP tier (counters, stats, refusals, the frames of get and
// get_manifest) is RemoteTierBase (remote_base.hpp). Without hiredis (KILN_HAVE_HIREDIS=0) opening a
// redis:// tier throws an error that says so. The backend's row in the table of backends is in
// remote_open.cpp.
#ifndef KILN_HAVE_HIREDIS
#error "KILN_HAVE_HIREDIS must be 0 or 1 (set by cache/Optional.cmake)"
#endif

#include <fmt/format.h>

#include <stdexcept>

#include "kiln/cache/remote.hpp"
#include "remote_open.hpp"

#if KILN_HAVE_HIREDIS
#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>
#include <vector>

#include "circuit_breaker.hpp"
#include "kiln/base/log.hpp"
#include "kiln/base/sha256.hpp"
#include "redis_connection.hpp"
#include "remote_base.hpp"
#include "remote_lease.hpp"
#include "remote_mac.hpp"
#include "remote_manifest.hpp"
#include "remote_publish.hpp"
#endif

namespace kiln::cache {

bool remote_supported() noexcept { return KILN_HAVE_HIREDIS != 0; }

#if !KILN_HAVE_HIREDIS

std::unique_ptr<RemoteTier> detail::open_redis_remote(const RemoteConfig& config) {
  throw std::runtime_error(
      fmt::format("remote cache {}: this kiln was built without the Redis client (hiredis); install libhiredis-dev and "
                  "reconfigure, or unset KILN_REMOTE_CACHE",
                  config.display()));
}

#else  // KILN_HAVE_HIREDIS

namespace {

using detail::CircuitBreaker;
using detail::CommandResult;
using detail::CompileLeases;
using detail::ConnectionPool;
using detail::Fetched;
using detail::ping_server;
using detail::Publisher;
using detail::RemoteTierBase;
using detail::set_detail;
using detail::reply_error;
using detail::text_of;
using detail::ValueSink;
using Found = Fetched::Found;

class RedisTier final : public RemoteTierBase {
 public:
  explicit RedisTier(RemoteConfig config)
      : RemoteTierBase(std::move(config)),
        m_pool(m_config, m_breaker),
        m_leases(m_config, m_pool, m_breaker),
        m_publisher(m_config, m_pool, m_breaker, m_leases, m_manifests) {}

  [[nodiscard]] std::string_view backend() const noexcept override { return "redis"; }
  [[nodiscard]] bool fleet_lease() const noexcept override { return true; }

  void publish(const Entry& entry) noexcept override { m_publisher.enqueue(entry); }

  bool ping(std::string* detail) noexcept override {
    try {
      std::string text;
      const bool answered = ping_server(m_config, text);
      if (answered) m_breaker.succeed();
      if (detail) *detail = std::move(text);
      return answered;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  bool put(const Entry& entry, std::string* detail) noexcept override {
    try {
      if (!m_breaker.admit()) {
        set_detail(detail, not_asked());
        return false;
      }
      const std::vector<std::byte> bytes = serialize(entry);
      std::string why;
      const bool ok = m_publisher.write(entry.key_hash, bytes, &why);
      if (!ok) set_detail(detail, why);
      m_leases.release(entry.key_hash);
      return ok;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

  bool flush(std::chrono::milliseconds max_wait) noexcept override { return m_publisher.wait_idle(max_wait); }

  void close(std::chrono::steady_clock::time_point deadline) noexcept override { m_publisher.close(deadline); }

  void abandon(const Hash128& key) noexcept override { m_publisher.release_lease_soon(key); }

  bool remove(const Hash128& key) noexcept override {
    try {
      const std::string name = m_config.entry_key(key);
      const std::string mac_name = m_config.mac_key(key);
      const CommandResult result = m_pool.run({"DEL", name, mac_name});
      return result.reply && result.reply->type == REDIS_REPLY_INTEGER;
    } catch (...) {
      return false;
    }
  }

  void publish_manifest(const Hash128& request_key, std::span<const std::byte> bytes) noexcept override {
    m_publisher.enqueue_manifest(request_key, bytes);
  }

  bool put_manifest(const Hash128& request_key, std::span<const std::byte> bytes, std::string* detail) noexcept override {
    try {
      if (!m_breaker.admit()) {
        set_detail(detail, not_asked());
        return false;
      }
      std::string why;
      const bool ok =
          m_publisher.write(detail::manifest_object_key(request_key), bytes, &why, detail::RemoteValue::manifest);
      if (!ok) set_detail(detail, why);
      return ok;
    } catch (const std::exception& e) {
      set_detail(detail, e.what());
      return false;
    }
  }

 private:
  /// What one GET (with a secret: one MGET of the value and its MAC) answered.
  struct Read {
    enum class Kind { failed, absent, too_large, value } kind = Kind::failed;
    CommandResult result;                ///< holds the replies below
    const redisReply* value = nullptr;   ///< value: the value's reply (a string, or WRONGTYPE)
    const redisReply* mac = nullptr;     ///< value, with a secret: the MAC's reply
    std::string error;                   ///< failed: why (the breaker has been told); too_large: why
  };

  /// Sends the GET or MGET of `name` (and `mac_name`), `sink` armed when given, and sorts the answer.
  Read read(const std::string& name, const std::string& mac_name, ValueSink* sink) {
    Read read;
    const bool authenticated = m_config.authenticated();
    const char* const command_name = authenticated ? "MGET" : "GET";
    read.result = authenticated ? m_pool.run({"MGET", name, mac_name}, sink) : m_pool.run({"GET", name}, sink);
    if (!read.result.reply) {
      read.error = read.result.error;
      if (read.result.too_large) read.kind = Read::Kind::too_large;  // the value is refused, not the server
      return read;
    }
    // The value: the GET's reply, or the MGET's first element (the MAC its second).
    const redisReply* reply = read.result.reply.get();
    if (authenticated && reply->type == REDIS_REPLY_ARRAY) {
      if (reply->elements != 2) {
        read.error = fmt::format("MGET answered {} values for 2 keys", reply->elements);
        m_breaker.fail(read.error);
        return read;
      }
      read.mac = reply->element[1];
      reply = reply->element[0];
    } else if (authenticated && reply->type != REDIS_REPLY_ERROR) {
      read.error = "MGET did not answer an array";
      m_breaker.fail(read.error);
      return read;
    }
    if (reply->type == REDIS_REPLY_NIL) {
      m_breaker.succeed();
      read.kind = Read::Kind::absent;
      return read;
    }
    if (reply->type == REDIS_REPLY_ERROR && !text_of(reply).starts_with("WRONGTYPE")) {
      read.error = reply_error(command_name, text_of(reply));
      m_breaker.fail(read.error);
      return read;
    }
    m_breaker.succeed();
    read.kind = Read::Kind::value;
    read.value = reply;
    return read;
  }

  /// Whether a value read with a secret carries the MAC `expected` (empty: none could be computed).
  static bool mac_matches(const Read& read, std::string_view expected) {
    const bool has_mac = read.mac != nullptr && read.mac->type == REDIS_REPLY_STRING;
    return has_mac && !expected.empty() && kiln::detail::constant_time_equal(text_of(read.mac), expected);
  }

  /// The manifest of `request_key`: one GET (MGET with its MAC), the MAC first, then the caller's check
  /// (ManifestCheck). What fails is deleted with its MAC.
  ManifestFetch fetch_manifest(const Hash128& request_key, const ManifestCheck& check) override {
    using Outcome = ManifestFetch::Outcome;
    if (!m_breaker.admit()) return {Outcome::error, {}, "not asked: it failed moments ago"};
    const Hash128 key = detail::manifest_object_key(request_key);
    const std::string name = m_config.entry_key(key);
    const std::string mac_name = m_config.mac_key(key);
    Read read = this->read(name, mac_name, nullptr);
    if (read.kind == Read::Kind::failed) return {Outcome::error, {}, fmt::format("remote cache {}: {}", m_display, read.error)};
    if (read.kind == Read::Kind::absent) return {Outcome::miss, {}, {}};
    std::string why;
    if (read.kind == Read::Kind::too_large) {
      why = read.error;
    } else if (read.value->type != REDIS_REPLY_STRING) {
      why = "the key does not hold a string value";
    } else {
      const std::span bytes(reinterpret_cast<const std::byte*>(read.value->str), read.value->len);
      if (m_config.authenticated() &&
          !mac_matches(read, detail::remote_mac(m_config.secret, detail::RemoteValue::manifest, key, bytes.data(),
                                                bytes.size()))) {
        why = read.mac != nullptr && read.mac->type == REDIS_REPLY_STRING ? "its MAC is wrong" : "it has no MAC";
      } else {
        why = check(bytes);
        if (why.empty()) return {Outcome::hit, std::vector<std::byte>(bytes.begin(), bytes.end()), {}};
      }
    }
    read.result.reply.reset();
    const CommandResult deleted = m_pool.run({"DEL", name, mac_name});
    return refused_manifest(name, why, deleted.reply != nullptr);
  }

  void add_stats(RemoteStats& s) const noexcept override {
    s.published = m_publisher.published();
    s.publish_dropped = m_publisher.dropped();
    s.leases_taken = m_leases.taken();
    s.lease_waits = m_leases.waits();
    s.lease_wait_hits = m_leases.wait_hits();
  }

  LookupResult lookup(const Hash128& key, std::string_view canonical_key, bool& refused_unauthenticated) override {
    if (!m_breaker.admit()) {
      return {LookupOutcome::io_error, std::nullopt,
              fmt::format("remote cache {} not asked: it failed less than {} s ago", m_display,
                          m_config.retry_after.count())};
    }
    const std::string name = m_config.entry_key(key);
    Fetched fetched = fetch(key, name, canonical_key, refused_unauthenticated);
    // After close() nothing would release a lease taken now (the publisher's thread is gone).
    if (fetched.found != Found::absent || m_config.lease_wait.count() == 0 || m_publisher.closed()) {
      return std::move(fetched.result);
    }
    return m_leases.take_or_wait(key, [&] { return fetch(key, name, canonical_key, refused_unauthenticated); });
  }

  /// One GET (with a secret: one MGET of the entry and its MAC), verified: the MAC first, then parse()
  /// and a comparison of the key hash and canonical key with the request. A value that fails is deleted
  /// from the server with its MAC (answered corrupt_removed).
  Fetched fetch(const Hash128& key, const std::string& name, std::string_view canonical_key,
                bool& refused_unauthenticated) {
    ValueSink sink;
    sink.limits = &m_config.limits;
    const bool authenticated = m_config.authenticated();
    const std::string mac_name = m_config.mac_key(key);
    if (authenticated) {
      sink.secret = &m_config.secret;
      sink.key = key;
    }
    Read read = this->read(name, mac_name, &sink);
    if (read.kind == Read::Kind::failed) {
      return {Found::failed,
              {LookupOutcome::io_error, std::nullopt, fmt::format("remote cache {}: {}", m_display, read.error)}};
    }
    if (read.kind == Read::Kind::absent) return {Found::absent, {LookupOutcome::miss, std::nullopt, {}}};
    if (read.kind == Read::Kind::too_large) return reject(name, mac_name, read.error);
    const redisReply* reply = read.value;
    CommandResult& result = read.result;
    std::string why;
    if (reply->type == REDIS_REPLY_STRING && !sink.captured) sink.capture(reply->str, reply->len);
    if (authenticated && reply->type == REDIS_REPLY_STRING) {
      // Before anything else is believed: a value without the fleet's MAC may have been planted.
      if (!mac_matches(read, sink.mac)) {
        const bool has_mac = read.mac != nullptr && read.mac->type == REDIS_REPLY_STRING;
        result.reply.reset();
        const CommandResult deleted = m_pool.run({"DEL", name, mac_name});
        return {Found::rejected, unauthenticated(fmt::format("the entry under {}", name), key, has_mac,
                                                 deleted.reply != nullptr, refused_unauthenticated)};
      }
    }
    if (reply->type != REDIS_REPLY_STRING) {
      why = "the key does not hold a string value";
    } else {
      auto& parsed = sink.parsed;
      if (auto* error = std::get_if<ContentError>(&parsed)) {
        why = error->reason;
      } else {
        Entry& entry = std::get<Entry>(parsed);
        if (entry.key_hash != key) {
          why = fmt::format("foreign entry for key {}", entry.key_hash.hex());
        } else if (entry.canonical_key != canonical_key) {
          why = "foreign entry: its canonical key differs from the request's";
        } else {
          return {Found::entry, {LookupOutcome::hit, std::move(entry), {}}};
        }
      }
    }
    result.reply.reset();
    return reject(name, mac_name, why);
  }

  /// A value that is not a valid entry for the key: deleted from the server with its MAC, counted,
  /// answered corrupt_removed.
  Fetched reject(const std::string& name, const std::string& mac_name, std::string_view why) {
    const CommandResult deleted = m_pool.run({"DEL", name, mac_name});
    return {Found::rejected, rejected(fmt::format("the value under {}", name), why, deleted.reply != nullptr)};
  }

  // Construction order is the order of use: each piece borrows those above it (and the base's), and
  // the publisher's thread (last) stops before any of them is destroyed.
  ConnectionPool m_pool;
  CompileLeases m_leases;
  Publisher m_publisher;
};

}  // namespace

std::unique_ptr<RemoteTier> detail::open_redis_remote(const RemoteConfig& config) {
  return std::make_unique<RedisTier>(config);
}

#endif  // KILN_HAVE_HIREDIS

}  // namespace kiln::cache
