// Entries under a caller's key (kiln/cache/blob.hpp) and the remote tier, against a real redis-server
// started here: a put publishes, a node with an empty local cache finds the entry remotely (and keeps a
// local copy), a remove deletes the remote copy too, and with a fleet secret a blob planted without its
// MAC is refused and deleted while blobs the fleet publishes round-trip. The same path compiled entries
// take (Storage::find and Storage::store). And Storage::publish_stored (kiln prewarm --remote).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kiln/cache/blob.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/storage.hpp"
#include "redis_server.hpp"
#include "stderr_capture.hpp"
#include "synthetic_entry.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using kiln::cache::blob_get;
using kiln::cache::blob_key;
using kiln::cache::blob_put;
using kiln::cache::blob_remove;
using kiln::cache::HitOrigin;
using kiln::cache::Storage;
using kiln::cache::StorageConfig;
using kiln::test::RedisServer;
using kiln::test::ScopedEnv;
using kiln::test::StderrCapture;
using kiln::test::TempDir;

namespace {

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text)); }

/// A node: its own local cache, the shared remote.
StorageConfig node_config(const std::filesystem::path& root, const RedisServer& server) {
  StorageConfig config;
  config.local.root = root;
  config.remote_url = server.url();
  return config;
}

std::string remote_name(std::string_view name_space, std::string_view key) {
  return "kiln:v1:" + blob_key(name_space, bytes_of(key)).hash.hex();
}

}  // namespace

TEST_CASE("a blob put on one node is found on another through the remote", "[remote][blob]") {
  const RedisServer server;
  const TempDir dir;
  Storage first(node_config(dir / "first", server));
  REQUIRE(first.remote() != nullptr);
  REQUIRE(blob_put(first, "cuda.core", bytes_of("key"), bytes_of("shared bytes")));
  REQUIRE(first.remote()->flush(5s));
  CHECK(server.exists(remote_name("cuda.core", "key")));

  Storage second(node_config(dir / "second", server));
  auto found = blob_get(second, "cuda.core", bytes_of("key"));
  REQUIRE(found);
  CHECK(found->origin == HitOrigin::remote);
  const auto& payload = found->entry->payload;
  CHECK(std::string(reinterpret_cast<const char*>(payload.data()), payload.size()) == "shared bytes");
  CHECK(second.counters().remote_hits == 1);
  // Copied into the second node's local cache: the next lookup is local.
  CHECK(blob_get(second, "cuda.core", bytes_of("key"))->origin == HitOrigin::local);
  CHECK(kiln::cache::blob_count(second.local(), "cuda.core") == 1);

  // A miss asks the remote too, and leaves no lease behind (no compile follows a blob miss).
  CHECK_FALSE(blob_get(second, "cuda.core", bytes_of("absent")));
  CHECK(second.counters().remote_misses == 1);
  // (Released by the tier's background thread: without the release it would be held for seconds.)
  const std::string lease = "kiln:v1:lease:" + blob_key("cuda.core", bytes_of("absent")).hash.hex();
  for (int i = 0; i < 300 && server.exists(lease); ++i) std::this_thread::sleep_for(10ms);
  CHECK_FALSE(server.exists(lease));

  // A remove deletes the remote copy as well as the local one.
  CHECK(blob_remove(first, "cuda.core", bytes_of("key")));
  CHECK_FALSE(server.exists(remote_name("cuda.core", "key")));
  Storage third(node_config(dir / "third", server));
  CHECK_FALSE(blob_get(third, "cuda.core", bytes_of("key")));
}

TEST_CASE("with a fleet secret a planted blob is refused and the fleet's blobs round-trip", "[remote][blob][auth]") {
  const RedisServer server;
  const TempDir dir;
  const std::string secret = dir.write_file("secret", "fleet-secret-0123456789abcdef\n");
  const ScopedEnv secret_file("KILN_REMOTE_SECRET_FILE", secret.c_str());

  // Anyone who can write to the server can plant a self-consistent entry under a blob's key.
  const auto key = blob_key("cuda.core", bytes_of("planted"));
  const std::vector<std::byte> planted = kiln::cache::serialize(kiln::cache::blob_entry(key, bytes_of("evil")));
  server.set("kiln:v1:" + key.hash.hex(), std::string_view(reinterpret_cast<const char*>(planted.data()),
                                                           planted.size()));
  Storage node(node_config(dir / "node", server));
  REQUIRE(node.remote() != nullptr);
  REQUIRE(node.remote()->config().authenticated());
  {
    StderrCapture capture;
    CHECK_FALSE(blob_get(node, "cuda.core", bytes_of("planted")));
  }
  CHECK(node.counters().remote_unauthenticated == 1);
  CHECK_FALSE(server.exists("kiln:v1:" + key.hash.hex()));
  CHECK(kiln::cache::blob_count(node.local(), "cuda.core") == 0);

  // Published by a node with the secret: a MAC beside it, and a verified hit on another node.
  REQUIRE(blob_put(node, "cuda.core", bytes_of("good"), bytes_of("fleet bytes")));
  REQUIRE(node.remote()->flush(5s));
  CHECK(server.exists("kiln:v1:mac:" + blob_key("cuda.core", bytes_of("good")).hash.hex()));
  Storage other(node_config(dir / "other", server));
  auto found = blob_get(other, "cuda.core", bytes_of("good"));
  REQUIRE(found);
  CHECK(found->origin == HitOrigin::remote);
}

TEST_CASE("Storage::publish_stored writes local entries to every remote now and says what it could not",
          "[remote][publish]") {
  const RedisServer server;
  const TempDir dir;
  Storage node(node_config(dir / "a", server));
  // In the local store only: nothing has published them.
  const kiln::cache::Entry first = kiln::test::make_entry("stored-first");
  const kiln::cache::Entry second = kiln::test::make_entry("stored-second");
  REQUIRE(node.local().put(first));
  REQUIRE(node.local().put(second));
  const kiln::cache::Hash128 absent = kiln::test::make_entry("never-stored").key_hash;
  CHECK_FALSE(server.exists("kiln:v1:" + first.key_hash.hex()));

  const std::vector<kiln::cache::Hash128> keys{first.key_hash, absent, second.key_hash};
  const kiln::cache::StoredPublish done =
      node.publish_stored(keys, [](const kiln::cache::Hash128&) { return std::optional<std::vector<std::byte>>(); });
  CHECK(done.urls == kiln::cache::parse_remote_url(server.url()).display());
  CHECK(done.written == 2);
  CHECK(done.failed == 1);
  CHECK(done.manifests == 0);  // no request with include folders
  REQUIRE(done.reasons.size() == 1);
  CHECK(done.reasons.begin()->starts_with("local entry unreadable: "));
  // Written now, not queued: on the server when the call returns.
  CHECK(server.exists("kiln:v1:" + first.key_hash.hex()));
  CHECK(server.exists("kiln:v1:" + second.key_hash.hex()));
  // Through tiers of the call's own: the node's remote counted none of it (its lifetime counters count
  // what the engine published).
  REQUIRE(node.remote() != nullptr);
  CHECK(node.remote()->remote_stats().published == 0);

  // A node with an empty cache finds them through the remote.
  Storage other(node_config(dir / "b", server));
  const auto found = other.find(second.key_hash, second.canonical_key);
  REQUIRE(found.has_value());
  CHECK(found->origin == HitOrigin::remote);
}
