// Dependency manifests through the remote tiers (remote.hpp, "Dependency manifests"), against a real
// redis-server and nginx started here. Through the engine (NVRTC compiles for sm_90, no GPU): node A
// compiles a request with an include folder and publishes its manifest; node B, with an empty cache and
// the same tree, gets the manifest and the entry from the remote and hits without resolving its
// includes; after a header is edited, node C gets the manifest, finds that it does not match, resolves
// and compiles the new binary. Through the storage front end: a manifest planted without a MAC, with a
// wrong one or with an entry's, garbage with a valid MAC and another request's manifest are refused,
// counted, deleted and never installed; an authentic one is installed with the stats read here. Through
// the include home: a forged manifest naming a file outside the include folders, with a guessed digest
// and the result key that digest gives, is refused whatever the file holds (no request depends on it).
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <variant>

#include "engine_access.hpp"
#include "http_server.hpp"
#include "include_folders.hpp"
#include "kiln/base/sha256.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/includes/include_home.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "redis_server.hpp"
#include "stderr_capture.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using kiln::Engine;
using kiln::Origin;
using kiln::Source;
using kiln::cache::Hash128;
using kiln::cache::ManifestFetch;
using kiln::cache::Storage;
using kiln::cache::StorageConfig;
using kiln::test::NginxServer;
using kiln::test::RedisServer;
using kiln::test::ScopedEnv;
using kiln::test::StderrCapture;
using kiln::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSecret = "fleet-secret-0123456789abcdef";

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// The name a request's manifest is kept under, as remote.hpp documents it, computed here: XXH3-128 of
/// the request key's 32 hex digits under the seed "kiln-rmf".
Hash128 documented_object_key(const Hash128& request_key) {
  return kiln::cache::hash128(request_key.hex(), 0x6b696c6e2d726d66ULL);
}

/// HMAC-SHA-256 under `secret` of `label` NUL <32 hex key> NUL bytes, as remote.hpp documents it.
std::string documented_mac(std::string_view secret, std::string_view label, const Hash128& key, const std::string& bytes) {
  std::string message(label);
  message.push_back('\0');
  message += key.hex();
  message.push_back('\0');
  message += bytes;
  return kiln::detail::to_hex(kiln::detail::hmac_sha256(secret, message));
}

const Source& uses_value() {
  static const Source source = Source::from_text(
      "uses_value.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  return source;
}

/// One tree at one path that every node of a test reads; each node has its own cache root.
struct Fleet {
  TempDir dir{"kiln-remote-manifest"};
  fs::path tree = dir.path() / "tree";
  std::string url;

  explicit Fleet(std::string remote_url) : url(std::move(remote_url)) {
    write_file(tree / "lib/value.h", "#pragma once\n#include \"detail.h\"\n#define VALUE (DETAIL + 1)\n");
    write_file(tree / "lib/detail.h", "#pragma once\n#define DETAIL 1\n");
  }
  [[nodiscard]] std::unique_ptr<Engine> node(const std::string& name) const {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = dir.path() / name;
    config.remote = url;
    return std::make_unique<Engine>(config);
  }
  kiln::PrewarmResult prewarm(Engine& engine) const {
    return engine.prewarm(uses_value(), kiln::Options({"-I" + tree.string()}), {}, "sm_90");
  }
};

kiln::cache::RemoteTier& remote_of(Engine& engine) {
  kiln::cache::RemoteTier* tier = kiln::detail::EngineAccess::core(engine).remote();
  REQUIRE(tier != nullptr);
  return *tier;
}

/// The fleet story on one remote: A compiles and publishes; B hits without resolving; after an edit C
/// compiles the new binary.
void manifest_travels(const std::string& url) {
  const Fleet fleet(url);
  const auto a = fleet.node("a");
  const kiln::PrewarmResult compiled = fleet.prewarm(*a);
  CHECK(compiled.origin == Origin::compiled);
  CHECK(a->stats().include_resolves == 1);
  REQUIRE(remote_of(*a).flush(10s));
  CHECK(remote_of(*a).remote_stats().manifests_published == 1);

  const auto b = fleet.node("b");
  const kiln::PrewarmResult hit = fleet.prewarm(*b);
  CHECK(hit.key == compiled.key);
  CHECK(hit.origin == Origin::disk);  // (a prewarm reports any cache tier as disk)
  CHECK(b->stats().remote_hits == 1);
  CHECK(b->stats().include_resolves == 0);  // no resolve: the manifest named the entry
  CHECK(b->stats().manifest_hits == 1);
  CHECK(b->stats().compiles == 0);
  const kiln::cache::RemoteStats b_remote = remote_of(*b).remote_stats();
  CHECK(b_remote.manifest_hits == 1);
  CHECK(b_remote.manifest_refused == 0);
  CHECK(b_remote.manifests_published == 0);  // it resolved nothing, so it recorded nothing
  // Installed here: a later process of node B is settled by stat from its own manifest.
  const auto b2 = fleet.node("b");
  CHECK(fleet.prewarm(*b2).origin == Origin::disk);
  CHECK(b2->stats().manifest_hits == 1);
  CHECK(b2->stats().remote_hits == 0);
  CHECK(remote_of(*b2).remote_stats().manifest_hits + remote_of(*b2).remote_stats().manifest_misses == 0);

  // An edit before node C's first request (same size, other bytes): the travelled manifest does not
  // match, C resolves and compiles the new binary, never the old one.
  write_file(fleet.tree / "lib/detail.h", "#pragma once\n#define DETAIL 2\n");
  const auto c = fleet.node("c");
  const kiln::PrewarmResult edited = fleet.prewarm(*c);
  CHECK(edited.key != compiled.key);
  CHECK(edited.origin == Origin::compiled);
  CHECK(c->stats().include_resolves == 1);
  CHECK(c->stats().manifest_hits == 0);
  CHECK(remote_of(*c).remote_stats().manifest_hits == 1);
  // What C compiled is what a node with no remote at all compiles for the edited tree.
  kiln::EngineConfig alone;
  alone.runtime = false;
  alone.cache.root = fleet.dir.path() / "alone";
  CHECK(fleet.prewarm(*std::make_unique<Engine>(alone)).key == edited.key);
}

/// A request key and its canonical key, for the storage-level tests.
struct Request {
  std::string canonical;
  Hash128 key;
  explicit Request(const std::string& source) {
    kiln::cache::CanonicalKey k;
    k.add("format", "test");
    k.add("source", source);
    canonical = k.bytes();
    key = k.hash();
  }
};

/// The bytes of a manifest for `request` naming one header of `tree` (as a node records it).
std::vector<std::byte> recorded_manifest(const fs::path& root, const fs::path& header, const Request& request) {
  kiln::cache::DependencyManifests manifests(root, false);
  kiln::cache::DependencySet set;
  const std::string text = read_file(header);
  set.headers.push_back(
      kiln::cache::HeaderRecord{header.string(), kiln::cache::FileStat{}, true, kiln::cache::hash128(text)});
  set.absent.push_back((header.parent_path() / "absent.h").string());
  std::vector<std::byte> bytes = manifests.record(request.key, request.canonical, set, kiln::cache::hash128("result"));
  REQUIRE_FALSE(bytes.empty());
  return bytes;
}

StorageConfig node_config(const fs::path& root, const std::string& url) {
  StorageConfig config;
  config.local.root = root;
  config.remote_url = url;
  return config;
}

}  // namespace

TEST_CASE("a manifest travels through Redis: a node with the same tree hits without resolving", "[remote][manifest]") {
  const RedisServer server;
  const TempDir secret_dir;
  const std::string secret = secret_dir.write_file("secret", std::string(kSecret) + "\n");
  const ScopedEnv secret_file("KILN_REMOTE_SECRET_FILE", secret.c_str());
  manifest_travels(server.url());
}

TEST_CASE("a manifest travels over HTTP: a node with the same tree hits without resolving", "[remote][manifest]") {
  if (!NginxServer::find_binary()) {
    WARN("nginx not found: the HTTP half is not run");
    return;
  }
  const NginxServer server;
  manifest_travels(server.url());
}

TEST_CASE("planted, damaged and foreign manifests are refused, counted and never installed", "[remote][manifest][auth]") {
  const RedisServer server;
  const TempDir dir;
  const std::string secret = dir.write_file("secret", std::string(kSecret) + "\n");
  const ScopedEnv secret_file("KILN_REMOTE_SECRET_FILE", secret.c_str());
  write_file(dir / "tree" / "h.h", "#define H 1\n");
  const Request request("kernel"), other("another kernel");
  const kiln::cache::ManifestScope scope{{(dir / "tree").string()}, {}};
  const std::string bytes = text_of(recorded_manifest(dir / "recorder", dir / "tree" / "h.h", request));
  const Hash128 object = documented_object_key(request.key);
  const std::string name = "kiln:v1:" + object.hex();
  const std::string mac_name = "kiln:v1:mac:" + object.hex();
  const std::string valid_mac = documented_mac(kSecret, "kiln-remote-manifest/1", object, bytes);

  Storage node(node_config(dir / "node", server.url()));
  REQUIRE(node.remote() != nullptr);
  // The node's manifests (the include home's), which its storage's remotes carry as opaque records.
  kiln::cache::DependencyManifests node_manifests(kiln::cache::manifest_config_of(node.local()));
  const auto refused = [&](const std::string& value, const std::string* mac, std::uint64_t count) {
    server.set(name, value);
    if (mac != nullptr) server.set(mac_name, *mac);
    StderrCapture capture;
    CHECK_FALSE(node_manifests.fetch(node, request.key, request.canonical, scope));
    CHECK(node.remote()->remote_stats().manifest_refused == count);
    CHECK_FALSE(node_manifests.bytes(request.key));  // never installed
    CHECK_FALSE(server.exists(name));                   // deleted with its MAC
    CHECK_FALSE(server.exists(mac_name));
  };
  SECTION("without a MAC") { refused(bytes, nullptr, 1); }
  SECTION("with a MAC under another secret") {
    const std::string wrong = documented_mac("another-fleet-secret-9876543210", "kiln-remote-manifest/1", object, bytes);
    refused(bytes, &wrong, 1);
  }
  SECTION("with an entry's MAC over the same bytes") {
    const std::string entry_mac = documented_mac(kSecret, "kiln-remote-entry/1", object, bytes);
    refused(bytes, &entry_mac, 1);
  }
  SECTION("garbage with a valid MAC, then a truncated manifest") {
    const std::string garbage = "KILNMAN\x01 and then nothing a parser could take";
    const std::string garbage_mac = documented_mac(kSecret, "kiln-remote-manifest/1", object, garbage);
    refused(garbage, &garbage_mac, 1);
    const std::string truncated = bytes.substr(0, bytes.size() / 2);
    const std::string truncated_mac = documented_mac(kSecret, "kiln-remote-manifest/1", object, truncated);
    refused(truncated, &truncated_mac, 2);
  }
  SECTION("another request's manifest under this request's name, with a valid MAC") {
    const std::string foreign = text_of(recorded_manifest(dir / "recorder", dir / "tree" / "h.h", other));
    const std::string foreign_mac = documented_mac(kSecret, "kiln-remote-manifest/1", object, foreign);
    refused(foreign, &foreign_mac, 1);
  }
  SECTION("an authentic manifest is installed with the stats read here") {
    server.set(name, bytes);
    server.set(mac_name, valid_mac);
    REQUIRE(node_manifests.fetch(node, request.key, request.canonical, scope));
    CHECK(node.remote()->remote_stats().manifest_hits == 1);
    const auto installed = node_manifests.bytes(request.key);
    REQUIRE(installed);
    auto parsed = kiln::cache::parse_manifest(*installed);
    REQUIRE(std::holds_alternative<kiln::cache::Manifest>(parsed));
    const auto& manifest = std::get<kiln::cache::Manifest>(parsed);
    REQUIRE(manifest.files.size() == 1);
    // Read and hashed by the install: the stat it has here (the recorder's meant nothing).
    struct stat st {};
    REQUIRE(::stat((dir / "tree" / "h.h").c_str(), &st) == 0);
    CHECK(manifest.files[0].stat == kiln::cache::to_file_stat(st));
    // The lookup re-reads the header only while its stat is not trusted (written within the trust
    // window): the same bytes here, so a hit.
    kiln::cache::LookupStats looked;
    CHECK(node_manifests.lookup(request.key, request.canonical, &looked) == kiln::cache::hash128("result"));
    CHECK(looked.reads == (manifest.files[0].trusted_stat ? 0 : 1));
    // A second fetch finds the local one in the way: nothing is replaced.
    CHECK_FALSE(node_manifests.fetch(node, request.key, request.canonical, scope));
  }
  SECTION("a node whose manifests are read-only asks nothing (nothing could be installed)") {
    server.set(name, bytes);
    server.set(mac_name, valid_mac);
    StorageConfig config = node_config(dir / "node", server.url());
    config.local.read_only = true;
    Storage read_only(config);
    REQUIRE(read_only.remote() != nullptr);
    kiln::cache::DependencyManifests read_only_manifests(kiln::cache::manifest_config_of(read_only.local()));
    CHECK_FALSE(read_only_manifests.fetch(read_only, request.key, request.canonical, scope));
    const kiln::cache::RemoteStats stats = read_only.remote()->remote_stats();
    CHECK(stats.manifest_hits + stats.manifest_misses + stats.manifest_refused == 0);
  }
  SECTION("nothing there is a miss") {
    CHECK_FALSE(node_manifests.fetch(node, other.key, other.canonical, scope));
    CHECK(node.remote()->remote_stats().manifest_misses == 1);
  }
}

TEST_CASE("a forged manifest naming a file outside the include folders makes no request depend on its bytes",
          "[remote][manifest][auth]") {
  // No fleet secret: whoever can write to the server can plant a manifest (with one, a holder of it can).
  const RedisServer server;
  const TempDir dir;
  write_file(dir / "tree" / "lib" / "value.h", "#pragma once\n#define VALUE 1\n");
  const fs::path shadow = dir / "etc" / "shadow";
  const std::string secret_bytes = "root:$6$salt$hash:19000:0:99999:7:::\n";
  write_file(shadow, secret_bytes);
  const Request request("#include <lib/value.h>\n");
  const std::string source = "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n";
  const std::vector<fs::path> folders = {dir / "tree"};
  // The home's rule (entry_key_hash, as the engine keys): an entry key is the request keyed with a dependency part.
  const auto key_with = [&](const std::string& part) {
    return kiln::includes::entry_key_hash(request.canonical, part);
  };
  int nodes = 0;
  // What a fresh node settles the request to: the dependency part (it names the entry key the engine then
  // asks the remote for), whether a resolve made it, and how many fetched manifests the node refused.
  struct Outcome {
    std::string part;
    bool resolved = false;
    std::uint64_t refused = 0;
  };
  const auto settle = [&] {
    Storage node(node_config(dir / ("node" + std::to_string(nodes++)), server.url()));
    REQUIRE(node.remote() != nullptr);
    kiln::cache::AtomicCounters counters;
    kiln::cache::DependencyManifests node_manifests(kiln::cache::manifest_config_of(node.local()));
    kiln::cache::detail::IncludeFolders home(node_manifests, node, counters);
    kiln::cache::detail::SettleInput input;
    input.request_hash = request.key;
    input.request_canonical = request.canonical;
    input.source_name = "k.cu";
    input.source_text = source;
    input.folders = folders;
    input.compiler = "nvrtc 13.0";
    StderrCapture capture;
    const kiln::cache::detail::Settled settled = home.settle(input, true);
    return Outcome{settled.dependency_part, settled.includes != nullptr, node_manifests.installs_refused()};
  };
  const Outcome honest = settle();  // nothing on the server yet: a resolve
  REQUIRE(honest.resolved);
  CHECK(honest.part.find(shadow.string()) == std::string::npos);

  // The forger's manifest: the request's real header, plus the shadow file with a guessed digest, and the
  // result key this node would accept for that set. Unchecked, a node would ask the remote for that key
  // only when the guess is right: the file's bytes, one guess per manifest.
  const std::string object_name = "kiln:v1:" + documented_object_key(request.key).hex();
  for (const std::string& guess : {secret_bytes, std::string("root:$6$other$hash:19000:0:99999:7:::\n")}) {
    INFO("guess: " << guess);
    kiln::cache::DependencySet set;
    const std::string value = read_file(dir / "tree" / "lib" / "value.h");
    set.headers.push_back(
        {(dir / "tree" / "lib" / "value.h").string(), kiln::cache::FileStat{}, true, kiln::cache::hash128(value)});
    set.headers.push_back({shadow.string(), kiln::cache::FileStat{}, true, kiln::cache::hash128(guess)});
    const Hash128 forged = key_with(kiln::cache::canonical_dependencies(set));
    kiln::cache::DependencyManifests forger(dir / ("forger" + std::to_string(nodes)), false);
    const std::vector<std::byte> bytes = forger.record(request.key, request.canonical, set, forged);
    REQUIRE_FALSE(bytes.empty());
    server.set(object_name, text_of(bytes));
    const Outcome outcome = settle();
    CHECK(outcome.resolved);             // resolved here: the manifest's answer was not taken
    CHECK(outcome.part == honest.part);  // the same entry key, whatever the file holds
    CHECK(outcome.refused == 1);
  }
}

TEST_CASE("over HTTP a manifest planted without a MAC is refused and an authentic one installed", "[remote][manifest][auth]") {
  if (!NginxServer::find_binary()) {
    WARN("nginx not found: not run");
    return;
  }
  const NginxServer server;
  const TempDir dir;
  const std::string secret = dir.write_file("secret", std::string(kSecret) + "\n");
  const ScopedEnv secret_file("KILN_REMOTE_SECRET_FILE", secret.c_str());
  write_file(dir / "tree" / "h.h", "#define H 1\n");
  const Request request("kernel");
  const kiln::cache::ManifestScope scope{{(dir / "tree").string()}, {}};
  const std::string bytes = text_of(recorded_manifest(dir / "recorder", dir / "tree" / "h.h", request));
  const Hash128 object = documented_object_key(request.key);
  const fs::path file = server.root() / "kiln" / object.hex().substr(0, 2) / object.hex();
  const auto frame = [&](const std::string& mac) {
    char size[17];
    std::snprintf(size, sizeof size, "%016zx", bytes.size());
    return "KILNOBJ1" + std::string(size) + (mac.empty() ? std::string(64, '-') : mac) + bytes;
  };

  auto node = std::make_unique<Storage>(node_config(dir / "node", server.url()));
  REQUIRE(node->remote() != nullptr);
  kiln::cache::DependencyManifests node_manifests(kiln::cache::manifest_config_of(node->local()));
  write_file(file, frame({}));
  {
    StderrCapture capture;
    CHECK_FALSE(node_manifests.fetch(*node, request.key, request.canonical, scope));
  }
  CHECK(node->remote()->remote_stats().manifest_refused == 1);
  CHECK_FALSE(node_manifests.bytes(request.key));
  CHECK_FALSE(fs::exists(file));  // deleted (nginx takes DELETE)

  // Published by a node with the secret: the documented frame and MAC, and installed on another node->
  Storage publisher(node_config(dir / "publisher", server.url()));
  publisher.publish_manifest(request.key, std::as_bytes(std::span(bytes)));
  REQUIRE(publisher.remote()->flush(10s));
  CHECK(publisher.remote()->remote_stats().manifests_published == 1);
  CHECK(read_file(file) == frame(documented_mac(kSecret, "kiln-remote-manifest/1", object, bytes)));
  CHECK(node_manifests.fetch(*node, request.key, request.canonical, scope));
  CHECK(node->remote()->remote_stats().manifest_hits == 1);

  // The tier's lifetime counters (recorded when the node closes) and kiln cache stats.
  node.reset();
  const auto lifetime = kiln::cache::load_tier_stats(dir / "node");
  REQUIRE(lifetime.size() == 1);
  CHECK(lifetime[0].stats.manifest_hits == 1);
  CHECK(lifetime[0].stats.manifest_refused == 1);
#ifdef KILN_CLI_PATH
  const std::string command = "KILN_CACHE_DIR=" + (dir / "node").string() + " KILN_REMOTE_CACHE=" + server.url() +
                              " " + KILN_CLI_PATH + " cache stats 2>&1";
  const std::string output = kiln::test::shell_output(command);
  INFO(output);
  CHECK(output.find("dependency manifests: 1 hits, 0 misses, 1 refused, 0 published") != std::string::npos);
#endif
}

#ifdef KILN_CLI_PATH
TEST_CASE("kiln prewarm --remote writes the dependency manifests too", "[remote][manifest]") {
  const RedisServer server;
  const TempDir dir;
  write_file(dir / "k.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  write_file(dir / "inc/lib/value.h", "#pragma once\n#define VALUE 3\n");
  const auto kiln = [&](const std::string& cache, const std::string& remote, const std::string& args) {
    const std::string command = "KILN_CACHE_PACKS= KILN_CACHE_DIR=" + (dir / cache).string() +
                                " KILN_REMOTE_CACHE=" + remote + " " + KILN_CLI_PATH + " " + args + " 2>&1";
    int status = 0;
    std::string output = kiln::test::shell_output(command, &status);
    CHECK(status == 0);
    return output;
  };
  const std::string request =
      " --source " + (dir / "k.cu").string() + " --kernel k --target sm_90 -I " + (dir / "inc").string();
  // Compiled with no remote, then written by --remote alone (the second run is settled by the manifest,
  // so the engine records and publishes nothing itself).
  (void)kiln("a", "", "prewarm --json" + request);
  const std::string written = kiln("a", server.url(), "prewarm --remote --json" + request);
  INFO(written);
  CHECK(written.find("\"remote_manifests\":1") != std::string::npos);
  // A node with an empty cache and the same tree: no resolve.
  (void)kiln("b", server.url(), "prewarm --json" + request);
  const std::string stats = kiln("b", "", "cache stats --json");
  INFO(stats);
  CHECK(stats.find("\"include_resolves\":0") != std::string::npos);
  CHECK(stats.find("\"manifest_hits\":0") == std::string::npos);
  CHECK(stats.find("\"remote_hits\":1") != std::string::npos);
}
#endif
