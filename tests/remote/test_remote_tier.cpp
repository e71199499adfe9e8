// The Redis tier against a real redis-server on 127.0.0.1 (started here, on a free port, stopped
// afterwards): round trips between two tiers ("nodes"), rejected values, timeouts and the circuit
// breaker, authentication, the compile lease, TTL, concurrency.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "http_server.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/remote.hpp"
#include "redis_server.hpp"
#include "stderr_capture.hpp"
#include "synthetic_entry.hpp"

using namespace std::chrono_literals;
using kiln::cache::Entry;
using kiln::cache::LookupOutcome;
using kiln::cache::RemoteConfig;
using kiln::cache::RemoteTier;
using kiln::test::count_occurrences;
using kiln::test::make_entry;
using kiln::test::RedisServer;
using kiln::test::StderrCapture;

namespace {

/// The remote entry cap (remote.hpp, kRemoteMaxEntryBytes), written out: the test must not take it from
/// the code it checks.
constexpr std::uint64_t kRemoteCap = 64ULL << 20;

std::string as_string(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// A config for `server` with short, test-friendly settings.
RemoteConfig config_for(const RedisServer& server, std::string_view user_info = {}, int db = 0) {
  RemoteConfig config = kiln::cache::parse_remote_url(server.url(user_info, db));
  config.lease_wait = 0ms;
  return config;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void require_hit(RemoteTier& tier, const Entry& entry) {
  const auto result = tier.get(entry.key_hash, entry.canonical_key);
  INFO(result.detail);
  REQUIRE(result.outcome == LookupOutcome::hit);
  REQUIRE(result.entry.has_value());
  CHECK(result.entry->payload == entry.payload);
  CHECK(result.entry->names == entry.names);
  CHECK(result.entry->canonical_key == entry.canonical_key);
}

}  // namespace

TEST_CASE("an entry published by one node is a verified hit on another", "[remote]") {
  const RedisServer server;
  const auto node_a = kiln::cache::open_remote(config_for(server));
  const auto node_b = kiln::cache::open_remote(config_for(server));
  const Entry entry = make_entry("roundtrip");

  CHECK(node_b->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  node_a->publish(entry);
  REQUIRE(node_a->flush(5s));
  CHECK(node_a->remote_stats().published == 1);

  // Stored under the namespaced key, as exactly the serialized bytes.
  const auto stored = server.get("kiln:v1:" + entry.key_hash.hex());
  REQUIRE(stored.has_value());
  CHECK(*stored == as_string(kiln::cache::serialize(entry)));

  require_hit(*node_b, entry);
  const auto counters = node_b->counters();
  CHECK(counters.remote_hits == 1);
  CHECK(counters.remote_misses == 1);
  CHECK(counters.remote_errors == 0);

  std::string detail;
  CHECK(node_b->ping(&detail));
  CHECK(detail.find("redis ") == 0);
  CHECK(detail.find("PONG") != std::string::npos);

  CHECK(node_a->remove(entry.key_hash));
  CHECK_FALSE(server.exists("kiln:v1:" + entry.key_hash.hex()));
}

TEST_CASE("a 500 KB entry and put() round-trip; the database number is honoured", "[remote]") {
  const RedisServer server;
  const auto tier = kiln::cache::open_remote(config_for(server, {}, 3));
  const Entry big = make_entry("big", 500 * 1024);
  std::string detail;
  REQUIRE(tier->put(big, &detail));
  CHECK(server.exists("kiln:v1:" + big.key_hash.hex(), 3));
  CHECK_FALSE(server.exists("kiln:v1:" + big.key_hash.hex(), 0));
  require_hit(*tier, big);
}

TEST_CASE("truncated, bit-flipped, foreign and non-string values are rejected and deleted", "[remote]") {
  const RedisServer server;
  const auto tier = kiln::cache::open_remote(config_for(server));
  const Entry entry = make_entry("victim");
  const Entry other = make_entry("other");
  const std::string name = "kiln:v1:" + entry.key_hash.hex();
  const std::string good = as_string(kiln::cache::serialize(entry));

  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x10);
  std::string flipped_header = good;
  flipped_header[20] = static_cast<char>(flipped_header[20] ^ 0x01);

  const std::vector<std::pair<std::string, std::string>> planted = {
      {"truncated", good.substr(0, good.size() - 100)},
      {"truncated to the header", good.substr(0, 50)},
      {"bit flip in the payload", flipped},
      {"bit flip in the header", flipped_header},
      {"foreign entry", as_string(kiln::cache::serialize(other))},
      {"garbage", std::string(5000, 'x')},
      {"empty", std::string()},
  };
  std::uint64_t expected_rejections = 0;
  for (const auto& [what, value] : planted) {
    SECTION(what) {
      server.set(name, value);
      const auto result = tier->get(entry.key_hash, entry.canonical_key);
      INFO(what << ": " << result.detail);
      CHECK(result.outcome == LookupOutcome::corrupt_removed);
      CHECK_FALSE(result.entry.has_value());
      CHECK_FALSE(server.exists(name));
      CHECK(tier->remote_stats().rejected == ++expected_rejections);
      CHECK(tier->counters().remote_errors == 1);
      CHECK(tier->counters().remote_hits == 0);
      // The next lookup is a plain miss, and a fresh publish is served.
      CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
      std::string detail;
      REQUIRE(tier->put(entry, &detail));
      require_hit(*tier, entry);
      expected_rejections = 0;
    }
  }

  SECTION("a list under the key") {
    server.command({"RPUSH", name, "a", "b"});
    const auto result = tier->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK_FALSE(server.exists(name));
  }

  SECTION("a value larger than the entry cap") {
    RemoteConfig capped = config_for(server);
    capped.limits.max_file_bytes = 1000;
    const auto small_tier = kiln::cache::open_remote(capped);
    server.set(name, good);
    const auto result = small_tier->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK(result.detail.find("cap") != std::string::npos);
  }
}

TEST_CASE("a server that announces a value of gigabytes is refused before the value is read", "[remote][hostile]") {
  // fault_server.py's redis_flood: GET and MGET answer "$3221225472" and then zeros as long as they are
  // read (up to 300 MB); hiredis alone would buffer all of it.
  for (const bool authenticated : {false, true}) {  // GET, then MGET (with a secret)
    INFO("with a secret: " << authenticated);
    const kiln::test::FaultServer server("redis_flood");
    const std::string http_url = server.url("");  // http://127.0.0.1:<port>
    RemoteConfig config = kiln::cache::parse_remote_url("redis://" + http_url.substr(http_url.find("://") + 3));
    config.lease_wait = 0ms;
    config.operation_timeout = 5000ms;  // the cap, not the time-out, must stop it
    if (authenticated) config.secret = "fleet-secret-0123456789abcdef";
    CHECK(config.limits.max_file_bytes == kRemoteCap);
    const auto tier = kiln::cache::open_remote(config);
    const Entry entry = make_entry("hostile-redis");
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    const StderrCapture capture;
    const auto result = tier->get(entry.key_hash, entry.canonical_key);
    INFO(result.detail);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK(result.detail.find("larger than the remote entry cap") != std::string::npos);
    CHECK(tier->remote_stats().rejected == 1);
    CHECK(tier->remote_stats().failures == 0);  // the value is refused, not the server
    // The server said how much it wrote before kiln stopped reading: socket buffers' worth at most.
    std::string log;
    for (int i = 0; i < 500 && log.find("sent ") == std::string::npos; ++i) {
      std::this_thread::sleep_for(10ms);
      log = server.requests();
    }
    INFO(log);
    const std::size_t at = log.find("sent ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stoull(log.substr(at + 5)) < (16ULL << 20));
    CHECK(log.find("DEL kiln:v1:" + entry.key_hash.hex()) != std::string::npos);  // and asked to delete it
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    CHECK(after.ru_maxrss - before.ru_maxrss < 100 * 1024);  // KiB: nothing near the 300 MB it offered
  }
}

TEST_CASE("an unreachable server fails fast and the breaker stops asking", "[remote]") {
  RemoteConfig config = kiln::cache::parse_remote_url("redis://127.0.0.1:" + std::to_string(RedisServer::free_port()));
  config.lease_wait = 0ms;
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("nowhere");

  const StderrCapture capture(StderrCapture::AtEnd::echo);
  auto start = std::chrono::steady_clock::now();
  const auto first = tier->get(entry.key_hash, entry.canonical_key);
  const double first_ms = ms_since(start);
  CHECK(first.outcome == LookupOutcome::io_error);
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i)
    CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::io_error);
  const double skipped_ms = ms_since(start) / 100;
  tier->publish(entry);  // dropped: must not block, must not throw
  std::string detail;
  CHECK_FALSE(tier->put(entry, &detail));
  CHECK_FALSE(tier->ping(&detail));
  CHECK(detail.find("cannot connect") != std::string::npos);

  const auto stats = tier->remote_stats();
  CHECK(stats.failures == 1);
  CHECK(stats.skipped >= 100);
  CHECK(tier->counters().remote_errors == 101);
  CHECK(count_occurrences(capture.text(), "remote cache redis://127.0.0.1:") == 1);
  std::printf("unreachable (closed port): first lookup %.3f ms, then %.4f ms per lookup while the breaker is open\n",
              first_ms, skipped_ms);
}

TEST_CASE("a server stopped in the middle of a run: lookups fail fast, one warning", "[remote]") {
  auto server = std::make_unique<RedisServer>();
  RemoteConfig config = config_for(*server);
  config.retry_after = 1s;
  const auto tier = kiln::cache::open_remote(config);
  std::vector<Entry> entries;
  for (int i = 0; i < 6; ++i) entries.push_back(make_entry("run" + std::to_string(i)));
  std::string detail;
  for (const Entry& e : entries) REQUIRE(tier->put(e, &detail));
  require_hit(*tier, entries[0]);
  require_hit(*tier, entries[1]);

  const StderrCapture capture(StderrCapture::AtEnd::echo);
  server->stop();
  double worst_ms = 0;
  for (std::size_t i = 2; i < entries.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto result = tier->get(entries[i].key_hash, entries[i].canonical_key);
    worst_ms = std::max(worst_ms, ms_since(start));
    CHECK(result.outcome == LookupOutcome::io_error);
  }
  CHECK(tier->remote_stats().failures == 1);
  // After retry_after one request probes again (and fails again, without a second warning).
  std::this_thread::sleep_for(1100ms);
  CHECK(tier->get(entries[0].key_hash, entries[0].canonical_key).outcome == LookupOutcome::io_error);
  CHECK(tier->remote_stats().failures == 2);
  CHECK(count_occurrences(capture.text(), "warning: remote cache") == 1);
  std::printf("redis stopped mid-run: worst lookup %.3f ms (budget: connect %lld ms + operation %lld ms)\n", worst_ms,
              static_cast<long long>(config.connect_timeout.count()),
              static_cast<long long>(config.operation_timeout.count()));
}

TEST_CASE("a slow server (DEBUG SLEEP) costs one operation timeout, then is skipped", "[remote]") {
  const RedisServer server;
  RemoteConfig config = config_for(server);
  config.retry_after = 30s;
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("slow");
  std::string detail;
  REQUIRE(tier->put(entry, &detail));
  require_hit(*tier, entry);

  std::thread sleeper = server.debug_sleep(2);

  const StderrCapture capture(StderrCapture::AtEnd::echo);
  auto start = std::chrono::steady_clock::now();
  const auto slow = tier->get(entry.key_hash, entry.canonical_key);
  const double slow_ms = ms_since(start);
  CHECK(slow.outcome == LookupOutcome::io_error);
  CHECK(slow.detail.find("no answer within 250 ms") != std::string::npos);
  start = std::chrono::steady_clock::now();
  const auto skipped = tier->get(entry.key_hash, entry.canonical_key);
  const double skipped_ms = ms_since(start);
  CHECK(skipped.outcome == LookupOutcome::io_error);
  sleeper.join();
  CHECK(count_occurrences(capture.text(), "no answer within 250 ms") == 1);
  std::printf("slow redis (DEBUG SLEEP 2): first lookup %.1f ms (operation timeout %lld ms), next %.4f ms\n", slow_ms,
              static_cast<long long>(config.operation_timeout.count()), skipped_ms);
}

TEST_CASE("a large SET on a connection the server closed does not kill the process (SIGPIPE)", "[remote]") {
  // The pooled connection got the server's FIN; writing 8 MB into it draws a reset, and the next
  // write(2) raises SIGPIPE, whose default action would end the test binary here.
  auto server = std::make_unique<RedisServer>();
  const auto tier = kiln::cache::open_remote(config_for(*server));
  const Entry small = make_entry("before-stop");
  std::string detail;
  REQUIRE(tier->put(small, &detail));
  server->stop();
  std::this_thread::sleep_for(50ms);
  const Entry big = make_entry("after-stop", 8 << 20);
  CHECK_FALSE(tier->put(big, &detail));
  INFO(detail);
  CHECK_FALSE(detail.empty());
}

TEST_CASE("authentication: password, ACL user, wrong password, missing password", "[remote]") {
  const RedisServer server(kiln::test::RedisServerOptions{"sesame", {}});
  const Entry entry = make_entry("auth");

  SECTION("the right password works") {
    const auto tier = kiln::cache::open_remote(config_for(server, ":sesame"));
    std::string detail;
    REQUIRE(tier->put(entry, &detail));
    require_hit(*tier, entry);
  }

  SECTION("an ACL user works") {
    server.command({"ACL", "SETUSER", "kiln", "on", ">opensesame", "~kiln:*", "+@all"});
    const auto tier = kiln::cache::open_remote(config_for(server, "kiln:opensesame"));
    std::string detail;
    REQUIRE(tier->put(entry, &detail));
    require_hit(*tier, entry);
  }

  SECTION("a wrong password: one clear warning, never the password, lookups keep answering") {
    RemoteConfig config = config_for(server, "kiln:wrong-password");
    config.retry_after = 0s;  // probe on every lookup: still only one warning per outage
    const auto tier = kiln::cache::open_remote(config);
    const StderrCapture capture(StderrCapture::AtEnd::echo);
    for (int i = 0; i < 5; ++i)
      CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::io_error);
    tier->publish(entry);
    CHECK(tier->flush(5s));
    const std::string text = capture.text();
    CHECK(count_occurrences(text, "warning: remote cache redis://kiln@127.0.0.1:") == 1);
    CHECK(count_occurrences(text, "authentication failed: WRONGPASS") == 1);
    CHECK(text.find("wrong-password") == std::string::npos);
    CHECK(tier->remote_stats().failures >= 5);
    CHECK_FALSE(server.exists("kiln:v1:" + entry.key_hash.hex()));
  }

  SECTION("no password for a server that needs one") {
    const auto tier = kiln::cache::open_remote(config_for(server));
    const StderrCapture capture(StderrCapture::AtEnd::echo);
    CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::io_error);
    CHECK(count_occurrences(capture.text(), "authentication required: NOAUTH") == 1);
  }
}

TEST_CASE("an optional TTL is set on published entries", "[remote]") {
  const RedisServer server;
  RemoteConfig config = config_for(server);
  config.ttl = 3600s;
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("ttl");
  tier->publish(entry);
  REQUIRE(tier->flush(5s));
  const auto ttl = server.command({"TTL", "kiln:v1:" + entry.key_hash.hex()});
  REQUIRE(ttl->type == REDIS_REPLY_INTEGER);
  CHECK(ttl->integer > 3500);
  CHECK(ttl->integer <= 3600);

  const auto forever = kiln::cache::open_remote(config_for(server));
  const Entry other = make_entry("no-ttl");
  forever->publish(other);
  REQUIRE(forever->flush(5s));
  CHECK(server.command({"TTL", "kiln:v1:" + other.key_hash.hex()})->integer == -1);
}

TEST_CASE("publish never blocks: a full queue drops the entry", "[remote]") {
  const RedisServer server;
  RemoteConfig config = config_for(server);
  config.publish_queue_entries = 0;
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("dropped");
  tier->publish(entry);
  CHECK(tier->flush(5s));
  CHECK(tier->remote_stats().publish_dropped == 1);
  CHECK(tier->remote_stats().published == 0);
  CHECK_FALSE(server.exists("kiln:v1:" + entry.key_hash.hex()));
}

TEST_CASE("queued publishes are written before the tier closes", "[remote]") {
  const RedisServer server;
  std::vector<Entry> entries;
  for (int i = 0; i < 20; ++i) entries.push_back(make_entry("close" + std::to_string(i), 64 * 1024));
  {
    const auto tier = kiln::cache::open_remote(config_for(server));
    for (const Entry& e : entries) tier->publish(e);
  }
  for (const Entry& e : entries) CHECK(server.exists("kiln:v1:" + e.key_hash.hex()));
}

TEST_CASE("the compile lease: one node compiles, the other waits for its entry", "[remote][lease]") {
  const RedisServer server;
  RemoteConfig config = config_for(server);
  config.lease_wait = 10s;
  config.lease_ttl = 2s;
  const Entry entry = make_entry("leased");
  const std::string lease_name = "kiln:v1:lease:" + entry.key_hash.hex();

  SECTION("the waiter gets the holder's entry") {
    const auto holder = kiln::cache::open_remote(config);
    const auto waiter = kiln::cache::open_remote(config);
    CHECK(holder->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    CHECK(holder->remote_stats().leases_taken == 1);
    CHECK(server.exists(lease_name));

    std::thread compile([&] {
      std::this_thread::sleep_for(300ms);  // "compiling"
      holder->publish(entry);
    });
    const auto start = std::chrono::steady_clock::now();
    const auto result = waiter->get(entry.key_hash, entry.canonical_key);
    const double waited_ms = ms_since(start);
    compile.join();
    INFO(result.detail);
    REQUIRE(result.outcome == LookupOutcome::hit);
    CHECK(result.entry->payload == entry.payload);
    CHECK(waiter->remote_stats().lease_waits == 1);
    CHECK(waiter->remote_stats().lease_wait_hits == 1);
    CHECK(waiter->remote_stats().leases_taken == 0);
    REQUIRE(holder->flush(5s));
    CHECK_FALSE(server.exists(lease_name));  // released after the entry was written
    std::printf("lease: waited %.1f ms for the peer's 300 ms compile\n", waited_ms);
  }

  SECTION("an abandoned lease passes to the waiter") {
    const auto holder = kiln::cache::open_remote(config);
    const auto waiter = kiln::cache::open_remote(config);
    CHECK(holder->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    std::thread fail([&] {
      std::this_thread::sleep_for(200ms);
      holder->abandon(entry.key_hash);  // the compile failed
    });
    const auto result = waiter->get(entry.key_hash, entry.canonical_key);
    fail.join();
    CHECK(result.outcome == LookupOutcome::miss);
    CHECK(waiter->remote_stats().leases_taken == 1);
    CHECK(waiter->remote_stats().lease_waits == 1);
  }

  SECTION("a lease held across its TTL is renewed while the holder lives, freed when it closes") {
    auto holder = kiln::cache::open_remote(config);
    CHECK(holder->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    std::this_thread::sleep_for(2500ms);  // longer than lease_ttl
    CHECK(server.exists(lease_name));
    holder.reset();
    CHECK_FALSE(server.exists(lease_name));
  }

  SECTION("the wait is bounded by lease_wait") {
    server.set(lease_name, "someone-else");
    RemoteConfig impatient = config;
    impatient.lease_wait = 300ms;
    const auto waiter = kiln::cache::open_remote(impatient);
    const auto start = std::chrono::steady_clock::now();
    CHECK(waiter->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    std::printf("lease: gave up on a stuck peer after %.1f ms (lease_wait 300 ms)\n", ms_since(start));
    CHECK(server.get(lease_name) == std::optional<std::string>("someone-else"));
  }
}

TEST_CASE("many threads share the tier", "[remote]") {
  const RedisServer server;
  const auto tier = kiln::cache::open_remote(config_for(server));
  std::vector<Entry> entries;
  for (int i = 0; i < 16; ++i) entries.push_back(make_entry("threads" + std::to_string(i)));
  std::string detail;
  for (const Entry& e : entries) REQUIRE(tier->put(e, &detail));

  std::atomic<int> hits{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const Entry& e = entries[static_cast<std::size_t>((t * 7 + i) % 16)];
        const auto result = tier->get(e.key_hash, e.canonical_key);
        if (result.outcome == LookupOutcome::hit && result.entry->payload == e.payload) {
          ++hits;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(hits == 400);
  CHECK(wrong == 0);
  CHECK(tier->counters().remote_hits == 400);
}
