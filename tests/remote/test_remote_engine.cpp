// The remote tier through the engine (NVRTC compiles for sm_90, no GPU needed), against a real
// redis-server started here: two nodes sharing one Redis, a server that stops mid-run, a slow server,
// an unreachable one, planted bad values, a wrong password, a fleet secret (a planted kernel refused,
// the fleet sharing kernels) and unusable secret files. Every request must succeed; the tests print the
// latency the remote tier added.
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine_access.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/engine.hpp"
#include "http_server.hpp"
#include "redis_server.hpp"
#include "stderr_capture.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;
using kiln::test::count_occurrences;
using kiln::test::RedisServer;
using kiln::test::ScopedEnv;
using kiln::test::StderrCapture;
using kiln::test::TempDir;

namespace {

/// Runs kiln_remote_node with extra environment variables; returns its JSON line.
nlohmann::json run_node(const std::map<std::string, std::string>& environment, std::vector<std::string> args) {
  int out[2];
  REQUIRE(pipe(out) == 0);
  args.insert(args.begin(), KILN_REMOTE_NODE);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (!environment.contains(name)) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : environment) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, static_cast<std::size_t>(n));
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO("node output: " << output);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::printf("node: %s", output.c_str());
  return nlohmann::json::parse(output);
}

kiln::EngineConfig engine_config(const TempDir& dir, const std::string& remote) {
  kiln::EngineConfig config = kiln::EngineConfig::from_environment();
  config.cache = kiln::cache::StoreConfig{};
  config.cache.root = dir.path();
  config.remote = remote;
  return config;
}

const kiln::Source& saxpy() {
  static const kiln::Source source = kiln::Source::builtin("saxpy");
  return source;
}

kiln::Options variant(int v) {
  kiln::Options options;
  if (v > 0) options.define("KILN_VARIANT", std::to_string(v));
  return options;
}

kiln::PrewarmResult prewarm_saxpy(kiln::Engine& engine, int v) {
  return engine.prewarm(saxpy(), variant(v), saxpy().listed_kernels(), "sm_90");
}

std::string remote_key(kiln::Engine& engine, int v) {
  return "kiln:v1:" + engine.describe_key(saxpy(), variant(v), saxpy().listed_kernels(), "sm_90").first.hex();
}

double ms(std::uint64_t nanoseconds) { return static_cast<double>(nanoseconds) * 1e-6; }

/// Fills the remote with saxpy variants [0, count) through a node process with its own cache.
void prefill(const RedisServer& server, int count) {
  const TempDir dir;
  const auto node = run_node({{"KILN_CACHE_DIR", dir.path().string()}, {"KILN_REMOTE_CACHE", server.url()}},
                             {"--sources", "saxpy", "--variants", std::to_string(count)});
  REQUIRE(node["published"].get<int>() == count);
}

}  // namespace

TEST_CASE("two nodes share one Redis: the second compiles nothing", "[remote][engine]") {
  const RedisServer server;
  const TempDir dir_a;
  const TempDir dir_b;
  const auto node_a =
      run_node({{"KILN_CACHE_DIR", dir_a.path().string()}, {"KILN_REMOTE_CACHE", server.url()}}, {"--sources", "all"});
  const int requests = node_a["requests"].get<int>();
  REQUIRE(requests >= 6);
  CHECK(node_a["failed"].get<int>() == 0);
  CHECK(node_a["compiles"].get<int>() == requests);
  CHECK(node_a["remote_misses"].get<int>() == requests);
  CHECK(node_a["published"].get<int>() == requests);

  const auto node_b =
      run_node({{"KILN_CACHE_DIR", dir_b.path().string()}, {"KILN_REMOTE_CACHE", server.url()}}, {"--sources", "all"});
  CHECK(node_b["requests"].get<int>() == requests);
  CHECK(node_b["failed"].get<int>() == 0);
  CHECK(node_b["compiles"].get<int>() == 0);
  CHECK(node_b["remote_hits"].get<int>() == requests);
  CHECK(node_b["remote_errors"].get<int>() == 0);
  CHECK(node_b["published"].get<int>() == 0);

  // Node B copied every remote hit into its own cache: a third run there never asks the remote.
  const auto node_b_again =
      run_node({{"KILN_CACHE_DIR", dir_b.path().string()}, {"KILN_REMOTE_CACHE", server.url()}}, {"--sources", "all"});
  CHECK(node_b_again["compiles"].get<int>() == 0);
  CHECK(node_b_again["disk_hits"].get<int>() == requests);
  CHECK(node_b_again["remote_hits"].get<int>() == 0);
  CHECK(node_b_again["remote_misses"].get<int>() == 0);
}

TEST_CASE("Redis unreachable from the start: every request compiles", "[remote][engine]") {
  const TempDir dir;
  const std::string url = "redis://127.0.0.1:" + std::to_string(RedisServer::free_port());
  kiln::Engine engine(engine_config(dir, url));
  REQUIRE(kiln::detail::EngineAccess::core(engine).remote() != nullptr);
  for (int v = 0; v < 3; ++v) CHECK(prewarm_saxpy(engine, v).origin == kiln::Origin::compiled);
  const auto stats = engine.stats();
  CHECK(stats.compiles == 3);
  CHECK(stats.remote_errors == 3);
  CHECK(stats.remote_hits == 0);
  const auto remote = kiln::detail::EngineAccess::core(engine).remote()->remote_stats();
  CHECK(remote.failures == 1);
  std::printf("unreachable from the start: 3 requests compiled; remote tier added %.3f ms in total, %.3f ms at worst\n",
              ms(remote.get_nanoseconds), ms(remote.get_max_nanoseconds));
}

TEST_CASE("Redis stopped in the middle of a run: hits, then compiles", "[remote][engine]") {
  auto server = std::make_unique<RedisServer>();
  prefill(*server, 6);
  const TempDir dir;
  kiln::Engine engine(engine_config(dir, server->url()));
  for (int v = 0; v < 3; ++v) CHECK(prewarm_saxpy(engine, v).origin == kiln::Origin::disk);
  CHECK(engine.stats().remote_hits == 3);
  CHECK(engine.stats().compiles == 0);
  const auto before = kiln::detail::EngineAccess::core(engine).remote()->remote_stats();

  server->stop();
  for (int v = 3; v < 6; ++v) CHECK(prewarm_saxpy(engine, v).origin == kiln::Origin::compiled);
  const auto stats = engine.stats();
  CHECK(stats.compiles == 3);
  CHECK(stats.remote_errors == 3);
  const auto after = kiln::detail::EngineAccess::core(engine).remote()->remote_stats();
  CHECK(after.failures == 1);
  // What was fetched before the stop is served from the local cache now.
  for (int v = 0; v < 3; ++v) CHECK(prewarm_saxpy(engine, v).origin != kiln::Origin::compiled);
  CHECK(engine.stats().compiles == 3);
  std::printf(
      "redis stopped mid-run: 3 requests compiled; remote tier added %.3f ms to them in total (slowest remote "
      "lookup of the whole run: %.3f ms)\n",
      ms(after.get_nanoseconds - before.get_nanoseconds), ms(after.get_max_nanoseconds));
}

TEST_CASE("Redis made slow (DEBUG SLEEP): one operation timeout, then compiles", "[remote][engine]") {
  const RedisServer server;
  prefill(server, 4);
  const TempDir dir;
  kiln::Engine engine(engine_config(dir, server.url()));
  std::thread sleeper = server.debug_sleep(2);
  const auto start = std::chrono::steady_clock::now();
  for (int v = 0; v < 4; ++v) CHECK(prewarm_saxpy(engine, v).origin == kiln::Origin::compiled);
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  sleeper.join();
  const auto stats = engine.stats();
  CHECK(stats.compiles == 4);
  CHECK(stats.remote_errors == 4);
  CHECK(stats.remote_hits == 0);
  const auto remote = kiln::detail::EngineAccess::core(engine).remote()->remote_stats();
  CHECK(remote.failures == 1);
  std::printf(
      "redis slow (DEBUG SLEEP 2): 4 requests compiled in %.1f ms; remote tier added %.1f ms in total, "
      "%.1f ms at worst (operation timeout %lld ms)\n",
      total_ms, ms(remote.get_nanoseconds), ms(remote.get_max_nanoseconds),
      static_cast<long long>(kiln::detail::EngineAccess::core(engine).remote()->config().operation_timeout.count()));
}

TEST_CASE("truncated, bit-flipped and foreign values under a kernel's key are rejected and recompiled",
          "[remote][engine]") {
  const RedisServer server;
  std::string good;
  std::string foreign;
  std::string key;
  {
    const TempDir dir;
    kiln::Engine engine(engine_config(dir, server.url()));
    REQUIRE(prewarm_saxpy(engine, 0).origin == kiln::Origin::compiled);
    REQUIRE(prewarm_saxpy(engine, 1).origin == kiln::Origin::compiled);
    REQUIRE(kiln::detail::EngineAccess::core(engine).remote()->flush(10s));
    key = remote_key(engine, 0);
    good = server.get(key).value_or("");
    foreign = server.get(remote_key(engine, 1)).value_or("");
    REQUIRE(!good.empty());
    REQUIRE(!foreign.empty());
  }
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x04);

  const std::vector<std::pair<std::string, std::string>> planted = {
      {"truncated", good.substr(0, good.size() / 3)},
      {"bit-flipped", flipped},
      {"foreign (another kernel's entry)", foreign},
      {"garbage", std::string(good.size(), '\x5a')},
  };
  for (const auto& [what, value] : planted) {
    DYNAMIC_SECTION(what) {
      server.set(key, value);
      const TempDir dir;
      kiln::Engine engine(engine_config(dir, server.url()));
      const kiln::PrewarmResult result = prewarm_saxpy(engine, 0);
      CHECK(result.origin == kiln::Origin::compiled);
      const auto stats = engine.stats();
      CHECK(stats.compiles == 1);
      CHECK(stats.remote_hits == 0);
      CHECK(stats.remote_errors == 1);
      CHECK(kiln::detail::EngineAccess::core(engine).remote()->remote_stats().rejected == 1);
      // The local entry is the fresh compile, and the remote holds a valid entry for the key again.
      const auto [hash, canonical] = engine.describe_key(saxpy(), variant(0), saxpy().listed_kernels(), "sm_90");
      const auto local = engine.storage().local().get(hash, canonical);
      CHECK(local.outcome == kiln::cache::LookupOutcome::hit);
      REQUIRE(kiln::detail::EngineAccess::core(engine).remote()->flush(10s));
      const std::string republished = server.get(key).value_or("");
      const auto parsed =
          kiln::cache::parse(std::span(reinterpret_cast<const std::byte*>(republished.data()), republished.size()));
      REQUIRE(std::holds_alternative<kiln::cache::Entry>(parsed));
      CHECK(std::get<kiln::cache::Entry>(parsed).canonical_key == canonical);
    }
  }
}

TEST_CASE("a wrong password: one clear warning, local operation continues", "[remote][engine]") {
  const RedisServer server(kiln::test::RedisServerOptions{"the-right-one", {}});
  const TempDir dir;
  const std::string secret = "not-the-password-42";
  const StderrCapture capture(StderrCapture::AtEnd::echo);
  {
    kiln::Engine engine(engine_config(dir, server.url("kiln:" + secret)));
    for (int v = 0; v < 3; ++v) CHECK(prewarm_saxpy(engine, v).origin == kiln::Origin::compiled);
    for (int v = 0; v < 3; ++v) CHECK(prewarm_saxpy(engine, v).origin != kiln::Origin::compiled);
    CHECK(engine.stats().compiles == 3);
    CHECK(engine.stats().remote_errors == 3);
  }
  const std::string text = capture.text();
  CHECK(count_occurrences(text, "authentication failed: WRONGPASS") == 1);
  CHECK(count_occurrences(text, "remote cache redis://kiln@127.0.0.1:") == 1);
  CHECK(text.find(secret) == std::string::npos);
}

TEST_CASE("a fleet secret: a kernel planted without its MAC is refused and recompiled; the fleet shares kernels",
          "[remote][engine][auth]") {
  const RedisServer server;
  const TempDir secrets;
  const std::string fleet = secrets.write_file("fleet", "fleet-secret-for-the-engine-test\n", 0600);
  const std::string other = secrets.write_file("other", "some-other-fleet-secret-entirely\n", 0600);

  // An entry with no MAC under the kernel's key: self-consistent (a node without the secret wrote it;
  // anyone who can write to the server could have). A node without the secret is served by it.
  std::string key;
  {
    const TempDir dir;
    kiln::Engine engine(engine_config(dir, server.url()));
    REQUIRE(prewarm_saxpy(engine, 0).origin == kiln::Origin::compiled);
    REQUIRE(kiln::detail::EngineAccess::core(engine).remote()->flush(10s));
    key = remote_key(engine, 0);
  }
  REQUIRE(server.exists(key));
  {
    const TempDir dir;
    kiln::Engine engine(engine_config(dir, server.url()));
    CHECK(prewarm_saxpy(engine, 0).origin != kiln::Origin::compiled);
    CHECK(engine.stats().remote_hits == 1);
  }

  // A node with the secret refuses it, counts it, compiles, and publishes the kernel with its MAC.
  const std::string mac_key = "kiln:v1:mac:" + key.substr(std::string("kiln:v1:").size());
  const TempDir refusing_dir;
  {
    // The engine reads KILN_REMOTE_SECRET_FILE when it opens the tier, so it is set while the engine is made.
    const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", fleet.c_str());
    kiln::Engine engine(engine_config(refusing_dir, server.url()));
    REQUIRE(kiln::detail::EngineAccess::core(engine).remote() != nullptr);
    CHECK(prewarm_saxpy(engine, 0).origin == kiln::Origin::compiled);
    const auto stats = engine.stats();
    CHECK(stats.compiles == 1);
    CHECK(stats.remote_hits == 0);
    CHECK(stats.remote_errors == 0);  // a refusal is counted once, as remote_unauthenticated
    CHECK(stats.remote_unauthenticated == 1);
    REQUIRE(kiln::detail::EngineAccess::core(engine).remote()->flush(10s));
    CHECK(server.exists(key));
    CHECK(server.exists(mac_key));
  }
  // The refusal is in the cache's lifetime counters (kiln cache stats).
  CHECK(kiln::cache::PersistentStats(refusing_dir.path()).load_total().remote_unauthenticated == 1);

  // Another node with the same secret compiles nothing.
  {
    const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", fleet.c_str());
    const TempDir dir;
    kiln::Engine engine(engine_config(dir, server.url()));
    CHECK(prewarm_saxpy(engine, 0).origin != kiln::Origin::compiled);
    CHECK(engine.stats().compiles == 0);
    CHECK(engine.stats().remote_hits == 1);
    CHECK(engine.stats().remote_unauthenticated == 0);
  }
  // A node with another secret refuses the fleet's entry.
  {
    const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", other.c_str());
    const TempDir dir;
    kiln::Engine engine(engine_config(dir, server.url()));
    CHECK(prewarm_saxpy(engine, 0).origin == kiln::Origin::compiled);
    CHECK(engine.stats().remote_unauthenticated == 1);
  }
}

TEST_CASE("an unusable secret file: the engine leaves the remote tier out and names the file",
          "[remote][engine][auth]") {
  const RedisServer server;
  const TempDir dir;
  const std::string shared = dir.write_file("shared", "a-secret-others-can-read-0123\n", 0644);
  const std::string short_secret = dir.write_file("short", "too-short\n", 0600);
  const std::string missing = (dir.path() / "missing").string();
  for (const std::string& path : {shared, short_secret, missing}) {
    INFO(path);
    const ScopedEnv secret("KILN_REMOTE_SECRET_FILE", path.c_str());
    const StderrCapture capture(StderrCapture::AtEnd::echo);
    const TempDir cache;
    kiln::Engine engine(engine_config(cache, server.url()));
    // Never unauthenticated by accident: without a usable secret there is no remote tier at all.
    CHECK(kiln::detail::EngineAccess::core(engine).remote() == nullptr);
    const std::string text = capture.text();
    CHECK(text.find("KILN_REMOTE_SECRET_FILE=" + path) != std::string::npos);
    CHECK(text.find("continuing without it") != std::string::npos);
  }
}

TEST_CASE("engine nodes through an HTTP tier (nginx) and a chain Redis -> HTTP: compile once, then hits",
          "[remote][engine][http]") {
  if (!kiln::cache::http_remote_supported() || !kiln::test::NginxServer::find_binary()) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string_view(ci) == "true") FAIL("nginx or the HTTP tier is missing in CI");
    WARN("SKIPPED: needs the HTTP tier and nginx");
    return;
  }
  const RedisServer redis;
  const kiln::test::NginxServer nginx;
  const std::string http = nginx.url("/kiln");
  const TempDir dir_a;
  const TempDir dir_b;
  const TempDir dir_c;
  // Node A compiles and publishes to HTTP only.
  const auto node_a =
      run_node({{"KILN_CACHE_DIR", dir_a.path().string()}, {"KILN_REMOTE_CACHE", http}}, {"--sources", "all"});
  const int requests = node_a["requests"].get<int>();
  REQUIRE(requests >= 6);
  CHECK(node_a["compiles"].get<int>() == requests);
  CHECK(node_a["published"].get<int>() == requests);
  // Node B: a fresh cache directory, served by HTTP alone.
  const auto node_b =
      run_node({{"KILN_CACHE_DIR", dir_b.path().string()}, {"KILN_REMOTE_CACHE", http}}, {"--sources", "all"});
  CHECK(node_b["failed"].get<int>() == 0);
  CHECK(node_b["compiles"].get<int>() == 0);
  CHECK(node_b["remote_hits"].get<int>() == requests);
  // Node C: the chain, Redis empty: every request misses Redis, hits HTTP, and back-fills Redis.
  const auto node_c = run_node({{"KILN_CACHE_DIR", dir_c.path().string()}, {"KILN_REMOTE_CACHE", redis.url() + "," + http}},
                               {"--sources", "all"});
  CHECK(node_c["compiles"].get<int>() == 0);
  CHECK(node_c["remote_hits"].get<int>() == requests);    // engine total: the HTTP tier's hits
  CHECK(node_c["remote_misses"].get<int>() == requests);  // the Redis tier's misses
  CHECK(node_c["published"].get<int>() == requests);      // the first tier's (Redis) back-fills
  const auto keys = redis.command({"KEYS", "kiln:v1:*"});
  REQUIRE(keys);
  CHECK(static_cast<int>(keys->elements) == requests);
}
