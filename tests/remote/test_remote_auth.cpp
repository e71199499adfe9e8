// The remote tier's fleet secret (remote.hpp, "Authentication") against a real redis-server started
// here: an entry planted with a raw Redis client is served by a node without the secret (the old
// behaviour) and refused, counted and deleted by a node with it; nodes with different secrets refuse
// each other's entries; nodes sharing the secret round-trip, and the MAC they write follows the
// documented wire format; `kiln devices` and `kiln cache stats` (when the CLI is built) show it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "kiln/base/sha256.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "redis_server.hpp"
#include "stderr_capture.hpp"
#include "synthetic_entry.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using kiln::cache::Entry;
using kiln::cache::LookupOutcome;
using kiln::cache::RemoteConfig;
using kiln::cache::RemoteTier;
using kiln::test::count_occurrences;
using kiln::test::make_entry;
using kiln::test::RedisServer;
using kiln::test::ScopedEnv;
using kiln::test::StderrCapture;
using kiln::test::TempDir;

namespace {

constexpr const char* kSecret = "fleet-secret-0123456789abcdef";
constexpr const char* kOtherSecret = "another-fleet-secret-9876543210";

std::string serialized(const Entry& entry) {
  const std::vector<std::byte> bytes = kiln::cache::serialize(entry);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// The MAC as remote.hpp documents it, computed here independently of the tier:
/// hex(HMAC-SHA-256(secret, "kiln-remote-entry/1" NUL <32 hex key> NUL <entry bytes>)).
std::string documented_mac(std::string_view secret, const Entry& entry, const std::string& bytes) {
  std::string message("kiln-remote-entry/1");
  message.push_back('\0');
  message += entry.key_hash.hex();
  message.push_back('\0');
  message += bytes;
  return kiln::detail::to_hex(kiln::detail::hmac_sha256(secret, message));
}

RemoteConfig config_for(const RedisServer& server, std::string secret = {}) {
  RemoteConfig config = kiln::cache::parse_remote_url(server.url());
  config.lease_wait = 0ms;
  config.secret = std::move(secret);
  return config;
}

std::string entry_name(const Entry& entry) { return "kiln:v1:" + entry.key_hash.hex(); }
std::string mac_name(const Entry& entry) { return "kiln:v1:mac:" + entry.key_hash.hex(); }

void require_hit(RemoteTier& tier, const Entry& entry) {
  const auto result = tier.get(entry.key_hash, entry.canonical_key);
  INFO(result.detail);
  REQUIRE(result.outcome == LookupOutcome::hit);
  REQUIRE(result.entry.has_value());
  CHECK(result.entry->payload == entry.payload);
  CHECK(result.entry->canonical_key == entry.canonical_key);
}

/// A lookup the tier refuses for its MAC: answered corrupt_removed, the entry and its MAC deleted.
void require_refused(RemoteTier& tier, const RedisServer& server, const Entry& entry, std::string_view why) {
  const auto result = tier.get(entry.key_hash, entry.canonical_key);
  INFO(result.detail);
  CHECK(result.outcome == LookupOutcome::corrupt_removed);
  CHECK_FALSE(result.entry.has_value());
  CHECK(result.detail.find(why) != std::string::npos);
  CHECK_FALSE(server.exists(entry_name(entry)));
  CHECK_FALSE(server.exists(mac_name(entry)));
}

}  // namespace

TEST_CASE("a planted self-consistent entry is served without a secret and refused with one", "[remote][auth]") {
  const RedisServer server;
  const Entry planted = make_entry("planted", 2048);
  const std::string bytes = serialized(planted);
  server.set(entry_name(planted), bytes);  // what anyone who can write to the server can do

  // Without the secret (the behaviour before it existed, and still the default): a verified hit.
  const auto open_node = kiln::cache::open_remote(config_for(server));
  require_hit(*open_node, planted);
  CHECK(open_node->counters().remote_unauthenticated == 0);
  REQUIRE(server.exists(entry_name(planted)));

  // With the secret: refused, counted, deleted; one warning for any number of refusals.
  const auto node = kiln::cache::open_remote(config_for(server, kSecret));
  const StderrCapture capture(StderrCapture::AtEnd::echo);
  require_refused(*node, server, planted, "no MAC");
  CHECK(node->remote_stats().unauthenticated == 1);
  CHECK(node->remote_stats().rejected == 1);
  CHECK(node->counters().remote_unauthenticated == 1);
  CHECK(node->counters().remote_errors == 0);  // a refusal is counted once, as remote_unauthenticated
  CHECK(node->counters().remote_hits == 0);
  // The next lookup is a plain miss.
  CHECK(node->get(planted.key_hash, planted.canonical_key).outcome == LookupOutcome::miss);

  // Planted with a MAC made under another secret, with a made-up MAC, and with a valid MAC of other
  // bytes (the entry swapped under its MAC): all refused.
  server.set(entry_name(planted), bytes);
  server.set(mac_name(planted), documented_mac(kOtherSecret, planted, bytes));
  require_refused(*node, server, planted, "MAC is wrong");
  server.set(entry_name(planted), bytes);
  server.set(mac_name(planted), std::string(64, 'a'));
  require_refused(*node, server, planted, "MAC is wrong");
  Entry swapped = planted;
  swapped.payload[0] ^= std::byte{1};
  const std::string swapped_bytes = serialized(swapped);  // self-consistent: its checksum is recomputed
  server.set(entry_name(planted), swapped_bytes);
  server.set(mac_name(planted), documented_mac(kSecret, planted, bytes));
  require_refused(*node, server, planted, "MAC is wrong");
  // A MAC that is not a string (planted as a list) is no MAC.
  server.set(entry_name(planted), bytes);
  server.command({"RPUSH", mac_name(planted), "x"});
  require_refused(*node, server, planted, "no MAC");

  CHECK(node->remote_stats().unauthenticated == 5);
  CHECK(node->counters().remote_unauthenticated == 5);
  CHECK(node->counters().remote_errors == 0);
  const std::string warnings = capture.text();
  INFO(warnings);
  CHECK(count_occurrences(warnings, "refused the entry under") == 1);
  CHECK(warnings.find("remote_unauthenticated") != std::string::npos);
  CHECK(warnings.find("this process") != std::string::npos);  // each worker process says it once
}

TEST_CASE("nodes sharing the secret round-trip; the MAC follows the documented format", "[remote][auth]") {
  const RedisServer server;
  const auto node_a = kiln::cache::open_remote(config_for(server, kSecret));
  const auto node_b = kiln::cache::open_remote(config_for(server, kSecret));
  const Entry entry = make_entry("shared", 2048);

  node_a->publish(entry);
  REQUIRE(node_a->flush(5s));
  CHECK(node_a->remote_stats().published == 1);
  // The entry's value is exactly what a node without the secret writes; the MAC sits beside it.
  const auto stored = server.get(entry_name(entry));
  REQUIRE(stored.has_value());
  CHECK(*stored == serialized(entry));
  const auto mac = server.get(mac_name(entry));
  REQUIRE(mac.has_value());
  CHECK(*mac == documented_mac(kSecret, entry, *stored));

  require_hit(*node_b, entry);
  CHECK(node_b->counters().remote_unauthenticated == 0);
  CHECK(node_b->counters().remote_errors == 0);

  // A node without the secret reads it as before.
  const auto open_node = kiln::cache::open_remote(config_for(server));
  require_hit(*open_node, entry);

  // put() (kiln prewarm --remote) writes the MAC too.
  const Entry put_entry = make_entry("put", 2048);
  std::string detail;
  REQUIRE(node_a->put(put_entry, &detail));
  require_hit(*node_b, put_entry);

  // remove() deletes the entry and its MAC.
  CHECK(node_a->remove(entry.key_hash));
  CHECK_FALSE(server.exists(entry_name(entry)));
  CHECK_FALSE(server.exists(mac_name(entry)));
}

TEST_CASE("with a TTL the MAC expires with its entry", "[remote][auth]") {
  const RedisServer server;
  RemoteConfig config = config_for(server, kSecret);
  config.ttl = 300s;
  const auto node = kiln::cache::open_remote(config);
  const Entry entry = make_entry("ttl", 2048);
  std::string detail;
  REQUIRE(node->put(entry, &detail));
  for (const std::string& name : {entry_name(entry), mac_name(entry)}) {
    const auto ttl = server.command({"TTL", name});
    REQUIRE(ttl);
    REQUIRE(ttl->type == REDIS_REPLY_INTEGER);
    CHECK(ttl->integer > 0);
    CHECK(ttl->integer <= 300);
  }
  require_hit(*node, entry);
}

TEST_CASE("a node with another secret refuses the entries of a node with the secret", "[remote][auth]") {
  const RedisServer server;
  const auto node = kiln::cache::open_remote(config_for(server, kSecret));
  const auto stranger = kiln::cache::open_remote(config_for(server, kOtherSecret));
  const Entry entry = make_entry("fleet", 2048);

  std::string detail;
  REQUIRE(node->put(entry, &detail));
  REQUIRE(server.exists(mac_name(entry)));
  require_refused(*stranger, server, entry, "MAC is wrong");
  CHECK(stranger->remote_stats().unauthenticated == 1);
  CHECK(stranger->counters().remote_unauthenticated == 1);

  // And the other way round.
  REQUIRE(stranger->put(entry, &detail));
  require_refused(*node, server, entry, "MAC is wrong");
  CHECK(node->counters().remote_unauthenticated == 1);
}

TEST_CASE("a node without the secret publishes no MAC, which a node with it refuses", "[remote][auth]") {
  const RedisServer server;
  const auto open_node = kiln::cache::open_remote(config_for(server));
  const auto node = kiln::cache::open_remote(config_for(server, kSecret));
  const Entry entry = make_entry("unsigned", 2048);

  open_node->publish(entry);
  REQUIRE(open_node->flush(5s));
  REQUIRE(server.exists(entry_name(entry)));
  CHECK_FALSE(server.exists(mac_name(entry)));
  require_refused(*node, server, entry, "no MAC");
}

TEST_CASE("the compile lease with a secret: the waiter verifies the holder's entry", "[remote][auth][lease]") {
  const RedisServer server;
  RemoteConfig config = config_for(server, kSecret);
  config.lease_wait = 10s;
  config.lease_ttl = 2s;
  const Entry entry = make_entry("leased", 2048);

  SECTION("a holder with the secret: a hit") {
    const auto holder = kiln::cache::open_remote(config);
    const auto waiter = kiln::cache::open_remote(config);
    CHECK(holder->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    std::thread compile([&] {
      std::this_thread::sleep_for(300ms);  // "compiling"
      holder->publish(entry);
    });
    const auto result = waiter->get(entry.key_hash, entry.canonical_key);
    compile.join();
    INFO(result.detail);
    CHECK(result.outcome == LookupOutcome::hit);
    CHECK(waiter->remote_stats().lease_wait_hits == 1);
  }
  SECTION("a holder without it: its entry is refused") {
    RemoteConfig open_config = config;
    open_config.secret.clear();
    const auto holder = kiln::cache::open_remote(open_config);
    const auto waiter = kiln::cache::open_remote(config);
    CHECK(holder->get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
    std::thread compile([&] {
      std::this_thread::sleep_for(300ms);
      holder->publish(entry);
    });
    const auto result = waiter->get(entry.key_hash, entry.canonical_key);
    compile.join();
    INFO(result.detail);
    CHECK(result.outcome == LookupOutcome::corrupt_removed);
    CHECK(waiter->remote_stats().unauthenticated == 1);
    CHECK(waiter->remote_stats().lease_wait_hits == 0);
  }
}

TEST_CASE("the secret read from KILN_REMOTE_SECRET_FILE authenticates a tier", "[remote][auth]") {
  const RedisServer server;
  const TempDir dir;
  const std::string path = dir.write_file("secret", std::string(kSecret) + "\n");
  RemoteConfig from_file;
  {
    const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", path.c_str());
    from_file = kiln::cache::remote_config_from_environment(server.url());
  }
  CHECK(from_file.authenticated());
  CHECK(from_file.secret == kSecret);  // the trailing newline is not part of it
  from_file.lease_wait = 0ms;

  const auto node = kiln::cache::open_remote(from_file);
  const auto same = kiln::cache::open_remote(config_for(server, kSecret));
  const Entry entry = make_entry("from-file", 2048);
  std::string detail;
  REQUIRE(node->put(entry, &detail));
  require_hit(*same, entry);
}

#ifdef KILN_CLI_PATH
namespace {

/// Runs the kiln CLI with `environment` ("NAME=value" words, shell-quoted here) and returns what it
/// printed on stdout and stderr.
std::string run_cli(const std::vector<std::string>& environment, const std::string& arguments) {
  std::string command = "env";
  for (const std::string& assignment : environment) command += " '" + assignment + "'";
  command += " '" KILN_CLI_PATH "' " + arguments + " 2>&1";
  return kiln::test::shell_output(command);
}

/// The line of `text` that starts with `prefix` (empty if none).
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, prefix.size(), prefix) == 0) return text.substr(at, end - at);
    at = end + 1;
  }
  return {};
}

}  // namespace

TEST_CASE("kiln devices says whether the remote is authenticated; kiln cache stats shows refusals", "[remote][auth]") {
  const RedisServer server;
  const TempDir dir;
  const std::string cache = (dir / "cache").string();
  const std::string secret = dir.write_file("secret", kSecret);
  const std::string shared = dir.write_file("shared", kSecret, 0644);
  std::filesystem::create_directory(cache);
  const std::string remote_line = "remote: redis://127.0.0.1:" + std::to_string(server.port()) + "/0 (";
  const std::vector<std::string> base = {"KILN_CACHE_DIR=" + cache, "KILN_REMOTE_CACHE=" + server.url()};

  SECTION("no secret: unauthenticated") {
    const std::string output = run_cli(base, "devices");
    INFO(output);
    const std::string line = line_starting(output, remote_line);
    CHECK(line.find("PONG") != std::string::npos);
    CHECK(line.ends_with("; unauthenticated: set KILN_REMOTE_SECRET_FILE to refuse planted entries)"));
    const std::string json = run_cli(base, "devices --json");
    CHECK(json.find("\"security\":\"unauthenticated: set KILN_REMOTE_SECRET_FILE") != std::string::npos);
    // The backend and its part in compile-once, as the tier says them (RemoteTier::backend, fleet_lease).
    CHECK(json.find("\"backend\":\"redis\"") != std::string::npos);
    CHECK(json.find("\"lease\":\"compile lease\"") != std::string::npos);
    CHECK(line.find("no fleet compile lease") == std::string::npos);
  }
  SECTION("a secret: authenticated") {
    std::vector<std::string> environment = base;
    environment.push_back("KILN_REMOTE_SECRET_FILE=" + secret);
    const std::string output = run_cli(environment, "devices");
    INFO(output);
    const std::string line = line_starting(output, remote_line);
    CHECK(line.find("PONG") != std::string::npos);
    CHECK(line.ends_with("; authenticated: entries carry an HMAC-SHA-256 under the secret in " + secret + ")"));
    CHECK(output.find(kSecret) == std::string::npos);
  }
  SECTION("a secret file others can read: unusable, and why") {
    std::vector<std::string> environment = base;
    environment.push_back("KILN_REMOTE_SECRET_FILE=" + shared);
    const std::string output = run_cli(environment, "devices");
    INFO(output);
    const std::string line = line_starting(output, "remote: ");
    CHECK(line.find("unusable: KILN_REMOTE_SECRET_FILE=" + shared) != std::string::npos);
    CHECK(line.find("chmod 600") != std::string::npos);
    CHECK(output.find(kSecret) == std::string::npos);
  }
  SECTION("kiln cache stats: the lifetime count of refused entries") {
    kiln::cache::Counters refused;
    refused.remote_errors = 3;
    refused.remote_unauthenticated = 3;
    kiln::cache::PersistentStats(cache).add(refused);
    const std::string text = run_cli(base, "cache stats");
    INFO(text);
    CHECK(text.find("  unauthenticated 3 remote entries refused for a missing or wrong MAC (deleted)") !=
          std::string::npos);
    CHECK(run_cli(base, "cache stats --json").find("\"remote_unauthenticated\":3") != std::string::npos);
  }
}
#endif
