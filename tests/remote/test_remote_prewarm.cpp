// `kiln prewarm` ends in _exit() (no teardown: bench/RESULTS.md, section 11), it and its workers alike.
// What the storage's destructor would have done for the remote tiers must happen before: the background
// publishes written, the fleet compile leases released, each tier's counters recorded. Against a real
// redis-server and nginx (the HTTP half is left out, with a warning, without nginx) and the kiln CLI;
// needs NVRTC (sm_90 compiles, no GPU).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "http_server.hpp"
#include "kiln/cache/remote.hpp"
#include "redis_server.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using kiln::test::FaultServer;
using kiln::test::NginxServer;
using kiln::test::RedisServer;
using kiln::test::TempDir;

namespace {

struct Run {
  int status = -1;
  std::string output;
  double seconds = 0;
};

Run kiln_cli(const fs::path& cache, const std::string& remote, const std::string& args,
             const std::string& extra_env = {}) {
  const std::string command = "KILN_CACHE_PACKS= KILN_CACHE_DIR=" + cache.string() + " KILN_REMOTE_CACHE='" + remote +
                              "' " + extra_env + " " + KILN_CLI_PATH + " " + args + " 2>&1";
  Run run;
  const auto start = std::chrono::steady_clock::now();
  run.output = kiln::test::shell_output(command, &run.status);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

/// The entry keys a `prewarm --json` report names.
std::set<std::string> keys_of(const std::string& json) {
  std::set<std::string> keys;
  const std::regex key("\"key\":\"([0-9a-f]{32})\"");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), key); it != std::sregex_iterator(); ++it) {
    keys.insert((*it)[1].str());
  }
  return keys;
}

/// Prewarms `args` against Redis (and nginx when there is one), then checks what the exit must leave:
/// every entry on each server, no lease on Redis, each tier's counters recorded and shown.
void prewarm_and_check(const std::string& args, std::size_t requests) {
  const RedisServer redis;
  std::unique_ptr<NginxServer> nginx;
  if (NginxServer::find_binary()) {
    nginx = std::make_unique<NginxServer>();
  } else {
    WARN("nginx not found: only the Redis tier is checked");
  }
  const std::string chain = redis.url() + (nginx ? "," + nginx->url() : "");
  const TempDir dir("kiln-prewarm-remote");
  const Run run = kiln_cli(dir.path(), chain, "prewarm --json --target sm_90 " + args);
  INFO(run.output);
  REQUIRE(run.status == 0);
  const std::set<std::string> keys = keys_of(run.output);
  REQUIRE(keys.size() == requests);

  // Right after the command returned: nothing may still be on its way.
  for (const std::string& key : keys) {
    CHECK(redis.exists("kiln:v1:" + key));
    if (nginx) CHECK(fs::exists(nginx->root() / "kiln" / key.substr(0, 2) / key));
  }
  const auto leases = redis.command({"KEYS", "kiln:v1:lease:*"});
  REQUIRE(leases);
  CHECK(leases->elements == 0);

  // Each tier's lifetime counters: every compile published once to each, by whichever process compiled it.
  const auto lifetime = kiln::cache::load_tier_stats(dir.path());
  REQUIRE(lifetime.size() == (nginx ? 2U : 1U));
  for (const auto& tier : lifetime) {
    INFO(tier.url);
    CHECK(tier.stats.published == requests);
    CHECK(tier.stats.misses >= requests);
  }
  const Run stats = kiln_cli(dir.path(), chain, "cache stats");
  INFO(stats.output);
  CHECK(stats.output.find("nothing recorded yet") == std::string::npos);
  CHECK(stats.output.find(std::to_string(requests) + " published (0 not)") != std::string::npos);
}

}  // namespace

TEST_CASE("kiln prewarm of one kernel (this process) leaves its entry on every tier, no lease, and counters",
          "[remote][prewarm]") {
  prewarm_and_check("--builtin saxpy -j 1", 1);
}

TEST_CASE("kiln prewarm in worker processes leaves every entry on every tier, no lease, and counters",
          "[remote][prewarm]") {
  // Three uncached requests at -j 3: each compiles in a worker process, which ends in _exit too.
  prewarm_and_check("--builtin saxpy --builtin reduce --builtin scan -j 3 --workers process", 3);
}

TEST_CASE("a stalled server does not hold kiln prewarm's exit", "[remote][prewarm]") {
  const FaultServer server("stall");
  const TempDir dir("kiln-prewarm-stall");
  // The breaker asks every time (its retry 0), so the queued publish meets the stall too; its write and
  // the lookup each give up at the operation time-out, and the close waits at most close_flush (2 s).
  const Run run = kiln_cli(dir.path(), server.url(), "prewarm --json --target sm_90 --builtin saxpy -j 1",
                           "KILN_REMOTE_RETRY_S=0 KILN_REMOTE_TIMEOUT_MS=1500");
  INFO(run.output);
  CHECK(run.status == 0);
  CHECK(run.seconds < 20);
  CHECK(keys_of(run.output).size() == 1);
  CHECK(server.requests().find("HEAD /kiln/") != std::string::npos);  // the publish was tried
}
