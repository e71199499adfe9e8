// The HTTP remote tier against a real nginx (WebDAV PUT/DELETE) started by the test, and a fault
// server for what nginx does not do on purpose (stall, 500, a cut body). Each TEST_CASE has its own
// tag and runs as its own ctest test (tests/remote/CMakeLists.txt), each with its own servers.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_server.hpp"
#include "kiln/base/sha256.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"
#include "stderr_capture.hpp"
#include "synthetic_entry.hpp"
#include "test_support.hpp"
#if KILN_TEST_HAVE_REDIS
#include "redis_server.hpp"
#endif

using namespace std::chrono_literals;
using kiln::cache::Entry;
using kiln::cache::LookupOutcome;
using kiln::cache::RemoteConfig;
using kiln::cache::RemoteTier;
using kiln::test::count_occurrences;
using kiln::test::FaultServer;
using kiln::test::make_entry;
using kiln::test::NginxOptions;
using kiln::test::NginxServer;
using kiln::test::ScopedEnv;
using kiln::test::StderrCapture;
using kiln::test::TempDir;
namespace fs = std::filesystem;

namespace {

/// The remote entry cap (remote.hpp, kRemoteMaxEntryBytes), written out: the test must not take it from
/// the code it checks.
constexpr std::uint64_t kRemoteCap = 64ULL << 20;

NginxOptions basic_auth(std::string password) {
  NginxOptions options;
  options.basic_password = std::move(password);
  return options;
}
NginxOptions bearer_auth(std::string token) {
  NginxOptions options;
  options.bearer_token = std::move(token);
  return options;
}
NginxOptions with_tls() {
  NginxOptions options;
  options.tls = true;
  return options;
}

constexpr const char* kSecret = "fleet-secret-0123456789abcdef";
constexpr const char* kOtherSecret = "another-fleet-secret-9876543210";

std::string serialized(const Entry& entry) {
  const std::vector<std::byte> bytes = kiln::cache::serialize(entry);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// The MAC as remote.hpp documents it (the Redis tier's), computed here independently of the tier.
std::string documented_mac(std::string_view secret, const Entry& entry, const std::string& bytes) {
  std::string message("kiln-remote-entry/1");
  message.push_back('\0');
  message += entry.key_hash.hex();
  message.push_back('\0');
  message += bytes;
  return kiln::detail::to_hex(kiln::detail::hmac_sha256(secret, message));
}

/// The object as remote_object.hpp documents it: "KILNOBJ1", 16 hex digits of size, 64 of MAC, entry.
std::string documented_object(const std::string& bytes, const std::string& mac) {
  char size[17];
  std::snprintf(size, sizeof size, "%016zx", bytes.size());
  return "KILNOBJ1" + std::string(size) + (mac.empty() ? std::string(64, '-') : mac) + bytes;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

/// Where nginx keeps the object of `entry` in the subdirs layout under /kiln.
fs::path object_file(const NginxServer& server, const Entry& entry) {
  const std::string hex = entry.key_hash.hex();
  return server.root() / "kiln" / hex.substr(0, 2) / hex;
}

RemoteConfig config_for(const std::string& url, std::string secret = {}) {
  RemoteConfig config = kiln::cache::parse_remote_url(url);
  config.secret = std::move(secret);
  config.operation_timeout = 1000ms;
  return config;
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

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

kiln::cache::StorageConfig storage_config(const TempDir& dir, const std::string& remote_url) {
  kiln::cache::StorageConfig config;
  config.local.root = dir.path();
  config.remote_url = remote_url;
  return config;
}

}  // namespace

TEST_CASE("http: a miss, a publish, the object on disk as documented, a hit on another node", "[http_roundtrip]") {
  const NginxServer server;
  const auto node_a = kiln::cache::open_remote(config_for(server.url()));
  const auto node_b = kiln::cache::open_remote(config_for(server.url()));
  const Entry entry = make_entry("http-roundtrip");

  CHECK(node_b->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  node_a->publish(entry);
  REQUIRE(node_a->flush(5s));
  CHECK(node_a->remote_stats().published == 1);
  CHECK(node_a->remote_stats().publish_dropped == 0);

  // nginx holds exactly the documented object (no MAC without a secret) in the subdirs layout.
  CHECK(read_file(object_file(server, entry)) == documented_object(serialized(entry), {}));

  require_hit(*node_b, entry);
  const auto counters = node_b->counters();
  CHECK(counters.remote_hits == 1);
  CHECK(counters.remote_misses == 1);
  CHECK(counters.remote_errors == 0);

  std::string detail;
  CHECK(node_b->ping(&detail));
  CHECK(detail.find("HTTP 404") == 0);
  CHECK(node_b->describe().find("http 127.0.0.1:") == 0);

  // A publish of what the server has already is a HEAD, not a second upload.
  node_b->publish(entry);
  REQUIRE(node_b->flush(5s));
  CHECK(node_b->remote_stats().published == 1);
  CHECK(count_occurrences(read_file(server.access_log()), "\"PUT ") == 1);
  CHECK(count_occurrences(read_file(server.access_log()), "\"HEAD /kiln/") >= 2);

  CHECK(node_a->remove(entry.key_hash));
  CHECK_FALSE(fs::exists(object_file(server, entry)));
  CHECK(node_b->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
}

TEST_CASE("http: a second cache directory is served from the tier and keeps the entry locally", "[http_second_dir]") {
  NginxServer server;
  const TempDir dir_a("kiln-http-a");
  const TempDir dir_b("kiln-http-b");
  const Entry entry = make_entry("http-second-dir", 64 * 1024);
  {
    kiln::cache::Storage node_a(storage_config(dir_a, server.url()));
    REQUIRE(node_a.remotes().size() == 1);
    CHECK(node_a.store(entry));
    REQUIRE(node_a.remote()->flush(5s));
  }
  kiln::cache::Storage node_b(storage_config(dir_b, server.url()));
  CHECK(node_b.get_local(entry.key_hash, entry.canonical_key) == nullptr);
  const auto found = node_b.find(entry.key_hash, entry.canonical_key);
  REQUIRE(found.has_value());
  CHECK(found->origin == kiln::cache::HitOrigin::remote);
  CHECK(found->stored);
  CHECK(found->entry->payload == entry.payload);
  CHECK(node_b.counters().remote_hits == 1);
  // Now a local disk hit: the server is not asked again.
  server.stop();
  const auto local = node_b.get_local(entry.key_hash, entry.canonical_key);
  REQUIRE(local != nullptr);
  CHECK(local->payload == entry.payload);
}

#if KILN_TEST_HAVE_REDIS
TEST_CASE("http: a chain Redis -> HTTP back-fills Redis and the local store; a compile publishes to both",
          "[http_chain]") {
  if (!kiln::test::RedisServer::find_binary()) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string_view(ci) == "true") FAIL("redis-server is missing in CI (scripts/setup.sh installs it)");
    WARN("SKIPPED: redis-server not found");
    return;
  }
  const kiln::test::RedisServer redis;
  const NginxServer http;
  const std::string chain = redis.url() + " , " + http.url();
  const Entry entry = make_entry("http-chain", 32 * 1024);

  // Only the HTTP tier has the entry.
  {
    const auto writer = kiln::cache::open_remote(config_for(http.url()));
    std::string why;
    REQUIRE(writer->put(entry, &why));
  }
  REQUIRE_FALSE(redis.exists("kiln:v1:" + entry.key_hash.hex()));

  const TempDir dir("kiln-http-chain");
  {
    kiln::cache::Storage node(storage_config(dir, chain));
    REQUIRE(node.remotes().size() == 2);
    CHECK(node.remotes()[0]->config().kind == kiln::cache::RemoteKind::redis);
    CHECK(node.remotes()[1]->config().kind == kiln::cache::RemoteKind::http);
    const auto found = node.find(entry.key_hash, entry.canonical_key);
    REQUIRE(found.has_value());
    CHECK(found->origin == kiln::cache::HitOrigin::remote);
    CHECK(found->entry->payload == entry.payload);
    REQUIRE(node.remotes()[0]->flush(5s));
    CHECK(node.remotes()[0]->counters().remote_misses == 1);
    CHECK(node.remotes()[1]->counters().remote_hits == 1);
    CHECK(node.counters().remote_hits == 1);
    CHECK(node.counters().remote_misses == 1);
  }
  // Back-filled into Redis (exactly the serialized entry) and into the local store.
  const auto in_redis = redis.get("kiln:v1:" + entry.key_hash.hex());
  REQUIRE(in_redis.has_value());
  CHECK(*in_redis == serialized(entry));
  {
    kiln::cache::StorageConfig local_only = storage_config(dir, "");
    kiln::cache::Storage again(local_only);
    CHECK(again.get_local(entry.key_hash, entry.canonical_key) != nullptr);
  }

  // A fresh node whose chain has both now hits Redis first; HTTP is not asked.
  const TempDir dir2("kiln-http-chain2");
  {
    kiln::cache::Storage node(storage_config(dir2, chain));
    REQUIRE(node.find(entry.key_hash, entry.canonical_key).has_value());
    CHECK(node.remotes()[0]->counters().remote_hits == 1);
    CHECK(node.remotes()[1]->counters().remote_hits + node.remotes()[1]->counters().remote_misses == 0);
  }

  // A compile (Storage::store) publishes to every tier of the chain.
  const Entry compiled = make_entry("http-chain-compiled");
  const TempDir dir3("kiln-http-chain3");
  {
    kiln::cache::Storage node(storage_config(dir3, chain));
    CHECK(node.store(compiled));
    REQUIRE(node.remotes()[0]->flush(5s));
    REQUIRE(node.remotes()[1]->flush(5s));
  }
  CHECK(redis.exists("kiln:v1:" + compiled.key_hash.hex()));
  const std::string hex = compiled.key_hash.hex();
  CHECK(read_file(http.root() / "kiln" / hex.substr(0, 2) / hex) == documented_object(serialized(compiled), {}));
}
#endif

TEST_CASE("http: a planted object without the fleet's MAC is refused, counted, deleted and not back-filled",
          "[http_mac]") {
  const NginxServer server;
  const Entry entry = make_entry("http-planted");
  const std::string bytes = serialized(entry);

  const auto node = kiln::cache::open_remote(config_for(server.url(), kSecret));
  // Planted without a MAC (a node without the secret, or an attacker): it parses and matches its key.
  write_file(object_file(server, entry), documented_object(bytes, {}));
  {
    StderrCapture capture;
    const auto result = node->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK(result.detail.find("no MAC") != std::string::npos);
    CHECK(capture.warnings() == 1);
  }
  CHECK_FALSE(fs::exists(object_file(server, entry)));
  // Planted under another secret: refused too, and no second warning.
  write_file(object_file(server, entry), documented_object(bytes, documented_mac(kOtherSecret, entry, bytes)));
  {
    StderrCapture capture;
    const auto result = node->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK(result.detail.find("MAC is wrong") != std::string::npos);
    CHECK(capture.warnings() == 0);
  }
  CHECK(node->counters().remote_unauthenticated == 2);
  CHECK(node->counters().remote_errors == 0);
  CHECK(node->remote_stats().rejected == 2);

  // With the right MAC (as documented) it is served.
  write_file(object_file(server, entry), documented_object(bytes, documented_mac(kSecret, entry, bytes)));
  require_hit(*node, entry);

  // What this node publishes carries the MAC, and a node without the secret still reads it.
  const Entry published = make_entry("http-published-with-mac");
  std::string why;
  REQUIRE(node->put(published, &why));
  const std::string published_bytes = serialized(published);
  CHECK(read_file(object_file(server, published)) ==
        documented_object(published_bytes, documented_mac(kSecret, published, published_bytes)));
  const auto open_node = kiln::cache::open_remote(config_for(server.url()));
  require_hit(*open_node, published);

  // In a chain, a refused entry is never published onward: /front stays empty.
  const TempDir dir("kiln-http-mac");
  const std::string front = server.url("/front");
  write_file(object_file(server, entry), documented_object(bytes, {}));
  TempDir secret_dir("kiln-http-secret");
  const std::string secret_file = secret_dir.write_file("secret", kSecret, 0600);
  const ScopedEnv secret_env("KILN_REMOTE_SECRET_FILE", secret_file.c_str());
  {
    StderrCapture capture;
    kiln::cache::Storage chain(storage_config(dir, front + "," + server.url()));
    REQUIRE(chain.remotes().size() == 2);
    CHECK_FALSE(chain.find(entry.key_hash, entry.canonical_key).has_value());
    REQUIRE(chain.remotes()[0]->flush(5s));
    CHECK(chain.counters().remote_unauthenticated == 1);
    CHECK(chain.remotes()[0]->remote_stats().published == 0);
  }
  CHECK_FALSE(fs::exists(server.root() / "front"));
}

TEST_CASE("http: a server killed mid-run costs one warning, then the breaker skips it; kiln works locally",
          "[http_killed]") {
  NginxServer server;
  const TempDir dir("kiln-http-killed");
  ScopedEnv retry("KILN_REMOTE_RETRY_S", "30");
  kiln::cache::Storage node(storage_config(dir, server.url()));
  const Entry before = make_entry("http-before-kill");
  CHECK(node.store(before));
  REQUIRE(node.remote()->flush(5s));
  CHECK(node.remote()->remote_stats().published == 1);

  server.kill_now();
  const Entry after = make_entry("http-after-kill");
  StderrCapture capture;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(node.find(after.key_hash, after.canonical_key).has_value());
  CHECK_FALSE(node.find(make_entry("http-after-kill-2").key_hash, "x").has_value());
  CHECK(ms_since(start) < 1500);
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("connect") != std::string::npos);  // libcurl: "Failed to connect to 127.0.0.1 ..."
  const auto stats = node.remote()->remote_stats();
  CHECK(stats.failures == 1);
  CHECK(stats.skipped == 1);
  CHECK(node.counters().remote_errors == 2);
  // The local store still works: a store and a local hit.
  CHECK(node.store(after));
  CHECK(node.get_local(after.key_hash, after.canonical_key) != nullptr);
  CHECK(node.get_local(before.key_hash, before.canonical_key) != nullptr);
}

TEST_CASE("http: a server that stalls times out, warns once and opens the breaker", "[http_stall]") {
  const FaultServer server("stall");
  RemoteConfig config = config_for(server.url());
  config.operation_timeout = 300ms;
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("http-stall");
  StderrCapture capture;
  auto start = std::chrono::steady_clock::now();
  const auto first = tier->get(entry.key_hash, entry.canonical_key);
  const double first_ms = ms_since(start);
  CHECK(first.outcome == LookupOutcome::io_error);
  CHECK(first.detail.find("timed out") != std::string::npos);
  CHECK(first_ms >= 250);
  CHECK(first_ms < 3000);
  start = std::chrono::steady_clock::now();
  CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::io_error);
  CHECK(ms_since(start) < 50);  // not asked: the breaker is open
  CHECK(capture.warnings() == 1);
  CHECK(tier->remote_stats().failures == 1);
  CHECK(tier->remote_stats().skipped == 1);
  CHECK(server.requests().find("GET /kiln/") != std::string::npos);
}

TEST_CASE("http: a server answering 500 is an error, not a miss, for lookups and writes", "[http_500]") {
  const FaultServer server("status500");
  RemoteConfig config = config_for(server.url());
  config.retry_after = std::chrono::seconds(0);  // ask every time
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("http-500");
  StderrCapture capture;
  const auto result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::io_error);
  CHECK(result.detail.find("HTTP 500") != std::string::npos);
  std::string why;
  CHECK_FALSE(tier->put(entry, &why));
  CHECK(why.find("HTTP 500") != std::string::npos);
  CHECK(tier->counters().remote_errors == 1);
  CHECK(tier->counters().remote_misses == 0);
  CHECK(tier->remote_stats().published == 0);
  CHECK(tier->remote_stats().publish_dropped == 1);
  CHECK(capture.warnings() == 1);
}

// nginx answers a bare 500 to a PUT it cannot write (a root its workers' user cannot write to): every object of a
// prewarm fails alike and the breaker skips the rest, so the one warning says what to look at.
TEST_CASE("http: a PUT answered 500 names the server's folder and its user", "[http_500]") {
  const FaultServer server("put500");
  const auto tier = kiln::cache::open_remote(config_for(server.url()));
  const Entry entry = make_entry("http-put-500");
  StderrCapture capture;
  std::string why;
  CHECK_FALSE(tier->put(entry, &why));
  INFO(why);
  CHECK(why.find("PUT answered HTTP 500") != std::string::npos);
  CHECK(why.find("writable by the user its workers run as") != std::string::npos);
  CHECK(capture.warnings() == 1);
}

TEST_CASE("http: a body cut short of its Content-Length is a failed transfer, never an entry", "[http_truncated]") {
  const Entry entry = make_entry("http-truncated", 16 * 1024);
  const FaultServer server("truncate", documented_object(serialized(entry), {}));
  const auto tier = kiln::cache::open_remote(config_for(server.url()));
  StderrCapture capture;
  const auto result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::io_error);
  CHECK_FALSE(result.entry.has_value());
  CHECK(tier->counters().remote_hits == 0);
  CHECK(tier->counters().remote_errors == 1);
  CHECK(tier->remote_stats().failures == 1);
}

TEST_CASE("http: a wrong-size object is a failing server (one warning an outage); a damaged entry is refused",
          "[http_wrong_size]") {
  const NginxServer server;
  RemoteConfig config = config_for(server.url());
  config.retry_after = std::chrono::seconds(0);  // ask every time: each answer is judged
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("http-wrong-size", 8 * 1024);
  const std::string object = documented_object(serialized(entry), {});
  StderrCapture capture;

  // Cut short on the server (its header says more than it holds): wrong size, a failing server.
  write_file(object_file(server, entry), object.substr(0, object.size() - 100));
  auto result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::corrupt_removed);
  CHECK(result.detail.find("wrong size") != std::string::npos);
  CHECK_FALSE(fs::exists(object_file(server, entry)));  // deleted all the same
  CHECK(tier->remote_stats().failures == 1);

  // Longer than its header says: refused as the body passes the declared size, in the same outage.
  write_file(object_file(server, entry), object + "trailing");
  result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::corrupt_removed);
  CHECK(result.detail.find("wrong size") != std::string::npos);
  CHECK(tier->remote_stats().failures == 2);
  CHECK(capture.warnings() == 1);  // one outage, one warning

  // The right size, one payload bit flipped: a well-formed object whose entry's own checksum refuses it:
  // the object is at fault, not the server (warned for the object).
  std::string flipped = object;
  flipped[flipped.size() - 200] ^= 0x01;
  write_file(object_file(server, entry), flipped);
  result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::corrupt_removed);
  CHECK_FALSE(fs::exists(object_file(server, entry)));
  CHECK(tier->remote_stats().failures == 2);
  CHECK(capture.warnings() == 2);

  // Not a kiln object at all: the server failing again, a new outage.
  write_file(object_file(server, entry), "<html>hello</html>");
  result = tier->get(entry.key_hash, entry.canonical_key);
  CHECK(result.outcome == LookupOutcome::corrupt_removed);
  CHECK(result.detail.find("bad magic") != std::string::npos);
  CHECK(tier->remote_stats().failures == 3);

  CHECK(tier->remote_stats().rejected == 4);
  CHECK(tier->counters().remote_hits == 0);
  CHECK(capture.warnings() == 3);
}

TEST_CASE("http: HTML for every path and 405 to PUT trips the breaker once; kiln devices calls it unusable",
          "[http_garbage]") {
  const FaultServer server("html");
  const TempDir dir("kiln-http-garbage");
  ScopedEnv retry("KILN_REMOTE_RETRY_S", "30");
  kiln::cache::Storage node(storage_config(dir, server.url()));
  StderrCapture capture;
  for (int i = 0; i < 5; ++i) {
    const Entry entry = make_entry("http-garbage-" + std::to_string(i));
    CHECK_FALSE(node.find(entry.key_hash, entry.canonical_key).has_value());
  }
  const auto stats = node.remote()->remote_stats();
  CHECK(stats.failures == 1);  // the first answer; the breaker skipped the other four
  CHECK(stats.skipped == 4);
  CHECK(stats.hits == 0);
  CHECK(node.counters().remote_errors == 5);
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("not a kiln object") != std::string::npos);

  // Its HEAD answers 200 for every path: that is not the object (not its size), so it is not counted as
  // published; the PUT's 405 is a failure.
  RemoteConfig config = config_for(server.url());
  config.retry_after = std::chrono::seconds(0);
  const auto tier = kiln::cache::open_remote(config);
  tier->publish(make_entry("http-garbage-publish"));
  REQUIRE(tier->flush(5s));
  CHECK(tier->remote_stats().published == 0);
  CHECK(tier->remote_stats().publish_dropped == 1);
  CHECK(tier->remote_stats().failures == 1);
  CHECK(server.requests().find("PUT /kiln/") != std::string::npos);
  std::string detail;
  CHECK_FALSE(tier->ping(&detail));
  CHECK(detail.find("answers every path") != std::string::npos);

#ifdef KILN_CLI_PATH
  const std::string command = "KILN_CACHE_DIR=" + dir.path().string() + " KILN_REMOTE_CACHE=" + server.url() + " " +
                              KILN_CLI_PATH + " devices 2>&1";
  const std::string output = kiln::test::shell_output(command);
  INFO(output);
  CHECK(output.find("unusable: HEAD of an object no node writes answered HTTP 200") != std::string::npos);
  CHECK(output.find("ok: HTTP 200") == std::string::npos);
#endif
}

namespace {

/// The peak resident set of this process so far, in bytes.
std::uint64_t peak_rss() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

/// How many body bytes a flood mode of the fault server wrote before the client stopped reading ("sent N").
std::uint64_t bytes_sent(const FaultServer& server) {
  for (int i = 0; i < 500; ++i) {
    const std::string log = server.requests();
    if (const std::size_t at = log.find("sent "); at != std::string::npos) return std::stoull(log.substr(at + 5));
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the fault server never said how much it sent:\n" << server.requests());
  return 0;
}

}  // namespace

TEST_CASE("http: a hostile server cannot make a lookup read past the cap or the object's own header",
          "[http_hostile]") {
  RemoteConfig base;
  base.operation_timeout = 20s;  // the caps, not the time-out, must stop these
  const std::uint64_t rss_before = peak_rss();
  const Entry entry = make_entry("http-hostile", 2000);
  const std::string object = documented_object(serialized(entry), {});
  // The 24 bytes that say an object's size, declaring 2 GB.
  const std::string huge_header = "KILNOBJ1" + std::string("0000000080000000");
  const struct {
    const char* mode;
    std::string body;  // sent first, then zeros
    const char* why;
    std::uint64_t max_sent;
  } cases[] = {
      // A Content-Length over the cap: refused before the body is read.
      {"flood", "", "announced", 16U << 20},
      // Chunked, no Content-Length: zeros are not a kiln object, refused at its first 24 bytes.
      {"flood_chunked", "", "bad magic", 16U << 20},
      // Chunked, an object header that declares more than the cap.
      {"flood_chunked", huge_header, "over the cap", 16U << 20},
      // Chunked, a well-formed object that goes on past its declared size.
      {"flood_chunked", object, "past the", 16U << 20},
  };
  for (const auto& c : cases) {
    INFO(c.mode << " " << c.why);
    const FaultServer server(c.mode, c.body);
    RemoteConfig config = kiln::cache::parse_remote_url(server.url());
    config.operation_timeout = base.operation_timeout;
    const auto tier = kiln::cache::open_remote(config);
    CHECK(tier->config().limits.max_file_bytes == kRemoteCap);
    StderrCapture capture;
    const auto start = std::chrono::steady_clock::now();
    const auto result = tier->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome != LookupOutcome::hit);
    CHECK(result.detail.find(c.why) != std::string::npos);
    CHECK(bytes_sent(server) < c.max_sent);
    CHECK(ms_since(start) < 10000);
    CHECK(tier->remote_stats().failures == 1);  // a server that sends such things is failing
  }
  // Nothing near the old 1 GiB cap (or the 300 MB a flood sends) was ever held.
  CHECK(peak_rss() - rss_before < (100ULL << 20));
}

TEST_CASE("http: KILN_REMOTE_MAX_ENTRY_MB sets the cap", "[http_hostile]") {
  {
    const ScopedEnv cap("KILN_REMOTE_MAX_ENTRY_MB", "2");
    CHECK(kiln::cache::remote_config_from_environment("http://127.0.0.1/kiln").limits.max_file_bytes == (2U << 20));
  }
  CHECK(kiln::cache::remote_config_from_environment("http://127.0.0.1/kiln").limits.max_file_bytes == kRemoteCap);
  const ScopedEnv cap("KILN_REMOTE_MAX_ENTRY_MB", "0");
  CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment("http://127.0.0.1/kiln"),
                    Catch::Contains("KILN_REMOTE_MAX_ENTRY_MB"));
}

TEST_CASE("http: basic auth from a password file; missing and wrong credentials are refused", "[http_basic_auth]") {
  const NginxServer server(basic_auth("open-sesame-42"));
  const Entry entry = make_entry("http-basic");
  const TempDir secrets("kiln-http-cred");
  ScopedEnv retry("KILN_REMOTE_RETRY_S", "0");
  {
    StderrCapture capture;
    const auto anonymous = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
    const auto result = anonymous->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::io_error);
    CHECK(result.detail.find("HTTP 401") != std::string::npos);
    CHECK(result.detail.find("refused the credentials") != std::string::npos);
    std::string detail;
    CHECK_FALSE(anonymous->ping(&detail));
    CHECK(detail.find("401") != std::string::npos);
  }
  {
    const std::string wrong = secrets.write_file("wrong", "not-the-password\n", 0600);
    const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD_FILE", wrong.c_str());
    StderrCapture capture;
    const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(
        server.url().replace(0, 7, "http://kiln@")));
    CHECK(tier->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::io_error);
    std::string why;
    CHECK_FALSE(tier->put(entry, &why));
    CHECK(why.find("401") != std::string::npos);
    CHECK(capture.text().find("not-the-password") == std::string::npos);  // never in a message
  }
  {
    const std::string right = secrets.write_file("right", "open-sesame-42\n", 0600);
    const ScopedEnv user("KILN_REMOTE_HTTP_USER", "kiln");
    const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD_FILE", right.c_str());
    const RemoteConfig config = kiln::cache::remote_config_from_environment(server.url());
    CHECK(config.display().find("open-sesame") == std::string::npos);
    const auto tier = kiln::cache::open_remote(config);
    std::string why;
    REQUIRE(tier->put(entry, &why));
    require_hit(*tier, entry);
    std::string detail;
    CHECK(tier->ping(&detail));
  }
  // A password file others can read is refused before any request.
  const std::string loose = secrets.write_file("loose", "open-sesame-42\n", 0644);
  const ScopedEnv password("KILN_REMOTE_HTTP_PASSWORD_FILE", loose.c_str());
  const ScopedEnv user("KILN_REMOTE_HTTP_USER", "kiln");
  CHECK_THROWS_WITH(kiln::cache::remote_config_from_environment(server.url()),
                    Catch::Contains("KILN_REMOTE_HTTP_PASSWORD_FILE") && Catch::Contains("chmod 600"));
}

TEST_CASE("http: a bearer token from a file or the environment; a wrong one is refused", "[http_bearer]") {
  const NginxServer server(bearer_auth("tok-0123456789"));
  const Entry entry = make_entry("http-bearer");
  const TempDir secrets("kiln-http-token");
  {
    const ScopedEnv token("KILN_REMOTE_HTTP_TOKEN", "tok-wrong");
    StderrCapture capture;
    const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
    const auto result = tier->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::io_error);
    CHECK(result.detail.find("401") != std::string::npos);
    CHECK(capture.text().find("tok-wrong") == std::string::npos);
  }
  const std::string file = secrets.write_file("token", "tok-0123456789\n", 0600);
  const ScopedEnv token_file("KILN_REMOTE_HTTP_TOKEN_FILE", file.c_str());
  const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
  std::string why;
  REQUIRE(tier->put(entry, &why));
  require_hit(*tier, entry);
}

TEST_CASE("http: layout=bazel keeps entries at /ac/<64 hex>, as bazel-remote serves them", "[http_bazel]") {
  const NginxServer server;
  const std::string url = server.url("/cache") + "?layout=bazel";
  const RemoteConfig config = config_for(url);
  CHECK(config.layout == kiln::cache::HttpLayout::bazel);
  const auto tier = kiln::cache::open_remote(config);
  const Entry entry = make_entry("http-bazel");
  std::string why;
  REQUIRE(tier->put(entry, &why));
  const std::string name = kiln::detail::to_hex(kiln::detail::sha256("kiln-entry/1:" + entry.key_hash.hex()));
  REQUIRE(name.size() == 64);
  CHECK(read_file(server.root() / "cache" / "ac" / name) == documented_object(serialized(entry), {}));
  const auto other = kiln::cache::open_remote(config_for(url));
  require_hit(*other, entry);
  CHECK(other->config().display().ends_with("/cache?layout=bazel"));
}

TEST_CASE("http: layout=flat keeps entries at <path>/<32 hex>", "[http_flat]") {
  const NginxServer server;
  const auto tier = kiln::cache::open_remote(config_for(server.url("/flat/") + "?layout=flat"));
  const Entry entry = make_entry("http-flat");
  std::string why;
  REQUIRE(tier->put(entry, &why));
  CHECK(read_file(server.root() / "flat" / entry.key_hash.hex()) == documented_object(serialized(entry), {}));
  require_hit(*tier, entry);
  // The subdirs layout of the same path does not see it.
  const auto subdirs = kiln::cache::open_remote(config_for(server.url("/flat")));
  CHECK(subdirs->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
}

TEST_CASE("http: TLS verification refuses a self-signed server unless its CA is given", "[http_tls]") {
  const NginxServer server(with_tls());
  const Entry entry = make_entry("http-tls");
  {
    StderrCapture capture;
    const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
    CHECK(tier->config().verify_tls);
    const auto result = tier->get(entry.key_hash, entry.canonical_key);
    CHECK(result.outcome == LookupOutcome::io_error);
    CHECK(result.detail.find("certificate") != std::string::npos);
  }
  {
    const ScopedEnv ca("KILN_REMOTE_HTTP_CA_FILE", server.cert_path().c_str());
    const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
    std::string why;
    REQUIRE(tier->put(entry, &why));
    require_hit(*tier, entry);
  }
  const ScopedEnv insecure("KILN_REMOTE_HTTP_INSECURE", "1");
  StderrCapture capture;
  const auto tier = kiln::cache::open_remote(kiln::cache::remote_config_from_environment(server.url()));
  CHECK_FALSE(tier->config().verify_tls);
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("verification is off") != std::string::npos);
  require_hit(*tier, entry);
}

TEST_CASE("http: with KILN_REMOTE_HTTP_INSECURE=1 kiln devices warns once and its remote line says so",
          "[http_insecure]") {
#ifdef KILN_CLI_PATH
  const NginxServer server(with_tls());
  const TempDir dir("kiln-http-insecure");
  const std::string command = "KILN_CACHE_DIR=" + dir.path().string() + " KILN_REMOTE_CACHE=" + server.url() +
                              " KILN_REMOTE_HTTP_INSECURE=1 " + KILN_CLI_PATH + " devices 2>&1";
  const std::string output = kiln::test::shell_output(command);
  INFO(output);
  CHECK(count_occurrences(output, "kiln: warning:") == 1);
  const std::size_t line = output.find("\nremote: ");
  REQUIRE(line != std::string::npos);
  const std::string remote_line = output.substr(line + 1, output.find('\n', line + 1) - line - 1);
  CHECK(remote_line.find("TLS certificate verification is off (KILN_REMOTE_HTTP_INSECURE=1)") != std::string::npos);
  CHECK(remote_line.find("(HTTP 404 in") != std::string::npos);
  CHECK(remote_line.ends_with("; no fleet compile lease (HTTP))"));  // RemoteTier::fleet_lease(), backend()
#else
  SUCCEED("no kiln CLI in this build");
#endif
}

TEST_CASE("http: without libcurl the tier is unavailable with one warning and kiln works locally",
          "[http_no_libcurl]") {
  const NginxServer server;
  const ScopedEnv library("KILN_REMOTE_HTTP_LIBCURL", "libkiln-test-no-such-curl.so.4");
  const TempDir dir("kiln-http-nocurl");
  StderrCapture capture;
  kiln::cache::Storage node(storage_config(dir, server.url()));
  REQUIRE(node.remotes().size() == 1);
  const Entry entry = make_entry("http-no-curl");
  for (int i = 0; i < 3; ++i) CHECK_FALSE(node.find(make_entry("nocurl-" + std::to_string(i)).key_hash, "x"));
  CHECK(node.store(entry));
  REQUIRE(node.remote()->flush(2s));
  CHECK(node.get_local(entry.key_hash, entry.canonical_key) != nullptr);
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("libcurl could not be loaded") != std::string::npos);
  CHECK(node.counters().remote_errors == 3);
  CHECK(node.remote()->remote_stats().published == 0);
  std::string detail;
  CHECK_FALSE(node.remote()->ping(&detail));
  CHECK(detail.find("libkiln-test-no-such-curl.so.4") != std::string::npos);
  CHECK_FALSE(fs::exists(server.root() / "kiln"));  // nothing reached the server
}

TEST_CASE("http: many threads publish and read at once through the handle pool", "[http_threads]") {
  const NginxServer server;
  const auto tier = kiln::cache::open_remote(config_for(server.url()));
  std::vector<Entry> entries;
  for (int i = 0; i < 32; ++i) entries.push_back(make_entry("http-thread-" + std::to_string(i), 2048 + 97 * i));
  for (const Entry& e : entries) tier->publish(e);
  REQUIRE(tier->flush(10s));
  CHECK(tier->remote_stats().published == entries.size());
  std::vector<std::thread> threads;
  std::atomic<int> hits{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < entries.size(); i += 4) {
        const auto result = tier->get(entries[i].key_hash, entries[i].canonical_key);
        if (result.outcome == LookupOutcome::hit && result.entry->payload == entries[i].payload) ++hits;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(hits.load() == static_cast<int>(entries.size()));
  CHECK(tier->counters().remote_errors == 0);
}

TEST_CASE("http: each tier's lifetime counters are recorded per cache root and shown by kiln cache stats",
          "[http_stats]") {
  const NginxServer server;
  const TempDir dir_a("kiln-http-stats-a");
  const TempDir dir_b("kiln-http-stats-b");
  const Entry entry = make_entry("http-stats");
  {
    kiln::cache::Storage node(storage_config(dir_a, server.url()));
    CHECK_FALSE(node.find(entry.key_hash, entry.canonical_key).has_value());
    CHECK(node.store(entry));
  }  // destroyed: flushes, then records
  {
    kiln::cache::Storage node(storage_config(dir_b, server.url()));
    CHECK(node.find(entry.key_hash, entry.canonical_key).has_value());
  }
  const auto a = kiln::cache::load_tier_stats(dir_a.path());
  REQUIRE(a.size() == 1);
  CHECK(a[0].url == kiln::cache::parse_remote_url(server.url()).display());
  CHECK(a[0].stats.misses == 1);
  CHECK(a[0].stats.published == 1);
  CHECK(a[0].stats.hits == 0);
  const auto b = kiln::cache::load_tier_stats(dir_b.path());
  REQUIRE(b.size() == 1);
  CHECK(b[0].stats.hits == 1);
  CHECK(b[0].stats.published == 0);
  // A second process adds to the same record.
  {
    kiln::cache::Storage node(storage_config(dir_b, server.url()));
    (void)node.find(make_entry("http-stats-other").key_hash, "x");
  }
  const auto b2 = kiln::cache::load_tier_stats(dir_b.path());
  REQUIRE(b2.size() == 1);
  CHECK(b2[0].stats.hits == 1);
  CHECK(b2[0].stats.misses == 1);

#ifdef KILN_CLI_PATH
  const std::string command = "KILN_CACHE_DIR=" + dir_a.path().string() + " KILN_REMOTE_CACHE=" + server.url() +
                              " " + KILN_CLI_PATH + " cache stats 2>&1";
  const std::string output = kiln::test::shell_output(command);
  INFO(output);
  CHECK(output.find("remote http  " + a[0].url + "  ok: HTTP 404") != std::string::npos);
  CHECK(output.find("0 hits, 1 misses, 1 published (0 not), 0 refused") != std::string::npos);
#endif
}
