// `kiln prewarm -j 2` for an NVRTC target: compiles run in worker processes (at most 2 at a time),
// every request is compiled exactly once into the cache, a request that fails to compile is reported
// with its reason and a non-zero exit while the others succeed (the same report as with
// --workers thread), a killed worker fails only the request it held, and nothing hangs.
// Needs NVRTC (no GPU); skips (exit 77) naming why when it does not load.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include <fmt/format.h>

#include "harness.hpp"
#include "test_support.hpp"
#include "kiln/engine.hpp"

namespace {

using namespace kiln::system_test;

constexpr const char* kTarget = "sm_90";
constexpr double kTimeout = 300;  // seconds for one kiln run; past it the run counts as hung

const char* const kGood =
    "//! kiln-kernels: user_scale\n"
    "#include <kiln/rtc.h>\n#include \"user/scale.h\"\n"
    "KILN_KERNEL void user_scale(float* x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= kUserFactor; }\n";
const char* const kHeader = "#pragma once\n__device__ constexpr float kUserFactor = 3.0f;\n";
const char* const kBad =
    "//! kiln-kernels: broken\n"
    "#include <kiln/rtc.h>\n"
    "KILN_KERNEL void broken(float* x) { x[0] = kiln_no_such_symbol; }\n";

bool g_nvrtc = false;

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::map<std::string, std::string> cache_env(const fs::path& cache) {
  return {{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}, {"KILN_REMOTE_CACHE", ""}};
}

/// A kiln run and the most worker processes (children) seen alive at once while it ran.
struct Watched {
  Result result;
  std::size_t max_children = 0;
};

Watched run_watched(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                    const fs::path& scratch) {
  const pid_t kiln = start_program(KILN_CLI_PATH, args, env, scratch);
  Watched watched;
  auto result = finish_within(kiln, scratch, kTimeout,
                              [&] { watched.max_children = std::max(watched.max_children, children_of(kiln).size()); });
  if (!result) FAIL("kiln prewarm did not finish within " << kTimeout << " s (hung); killed");
  watched.result = std::move(*result);
  return watched;
}

}  // namespace

TEST_CASE("prewarm -j 2 compiles NVRTC requests in worker processes, each once; a bad request fails alone") {
  if (!g_nvrtc) {
    WARN("NVRTC does not load here: the NVRTC worker-process path is not exercised");
    return;
  }
  TempDir dir;
  write_file(dir / "good.cu", kGood);
  write_file(dir / "scale.h", kHeader);
  write_file(dir / "bad.cu", kBad);
  // saxpy (1 request) + map (3 name expressions) + good.cu + bad.cu, for two option sets: 12 requests,
  // 2 of which (bad.cu) cannot compile.
  const std::vector<std::string> args{"prewarm",       "--builtin",  "saxpy",
                                      "--builtin",     "map",        "--source",
                                      (dir / "good.cu").string(),    "--source",
                                      (dir / "bad.cu").string(),     "--header",
                                      "user/scale.h=" + (dir / "scale.h").string(),
                                      "--target",      kTarget,      "--option-set=-DKILN_TEST_VARIANT=1",
                                      "--option-set=-DKILN_TEST_VARIANT=2",
                                      "-j",            "2"};
  constexpr std::size_t kRequests = 12;
  constexpr std::size_t kBadRequests = 2;

  std::vector<std::string> json_args = args;
  json_args.insert(json_args.end(), {"--json", "--verbose"});
  const fs::path cache = dir / "cache";
  const Watched processes = run_watched(json_args, cache_env(cache), dir.path());
  INFO(processes.result.describe());
  REQUIRE(processes.result.rc == 1);
  const json report = processes.result.parsed();
  const json& summary = report.at("summary");
  CHECK(summary.at("requests") == kRequests);
  CHECK(summary.at("compiled") == kRequests - kBadRequests);
  CHECK(summary.at("cached") == 0);
  CHECK(summary.at("failed") == kBadRequests);
  CHECK(summary.at("jobs") == 2);
  // The compiles ran in worker processes, never more than -j of them at once.
  CHECK(processes.max_children >= 1);
  CHECK(processes.max_children <= 2);

  json compiled = json::array();
  for (const json& item : report.at("requests")) {
    if (item.at("source") == "bad.cu") {
      CHECK(item.at("status") == "failed");
      const auto error = item.at("error").get<std::string>();
      CHECK_THAT(error, Catch::Contains("bad.cu"));
      CHECK_THAT(item.at("log").get<std::string>(), Catch::Contains("kiln_no_such_symbol"));
    } else {
      CHECK(item.at("status") == "compiled");
      CHECK(item.at("seconds").get<double>() > 0);
      CHECK(item.at("bytes").get<std::uint64_t>() > 0);
      compiled.push_back(item);
    }
  }
  REQUIRE(compiled.size() == kRequests - kBadRequests);

  // Each request compiled exactly once into the cache: one entry per compiled request, no other entry,
  // and the engines (one per worker) counted one compile per request.
  const std::vector<std::string> keys = sorted_keys(compiled);
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
  const Result listing = run_kiln({"cache", "ls", "--json"}, cache_env(cache), dir.path());
  REQUIRE(listing.rc == 0);
  CHECK(sorted_keys(listing.parsed()) == keys);
  const Result stats = run_kiln({"cache", "stats", "--json"}, cache_env(cache), dir.path());
  REQUIRE(stats.rc == 0);
  CHECK(stats.parsed().at("lifetime").at("compiles") == kRequests - kBadRequests);

  // --workers thread (this process's threads) reports the same, request by request.
  const fs::path thread_cache = dir / "threads";
  std::vector<std::string> thread_args = json_args;
  thread_args.emplace_back("--workers=thread");
  const Watched threads = run_watched(thread_args, cache_env(thread_cache), dir.path());
  INFO(threads.result.describe());
  REQUIRE(threads.result.rc == 1);
  CHECK(threads.max_children == 0);
  const json thread_report = threads.result.parsed();
  REQUIRE(thread_report.at("requests").size() == kRequests);
  for (std::size_t i = 0; i < kRequests; ++i) {
    const json& a = report.at("requests")[i];
    const json& b = thread_report.at("requests")[i];
    for (const char* field : {"source", "kernels", "names", "options", "target", "status", "key", "error"}) {
      CHECK(a.value(field, json()) == b.value(field, json()));
    }
  }
  for (const char* field : {"requests", "compiled", "cached", "failed", "targets", "jobs"}) {
    CHECK(summary.at(field) == thread_report.at("summary").at(field));
  }

  // Again, as text: every good request is already cached, the bad ones fail again with their reason.
  const Watched again = run_watched(args, cache_env(cache), dir.path());
  INFO(again.result.describe());
  CHECK(again.result.rc == 1);
  CHECK_THAT(again.result.out, Catch::Contains(fmt::format("prewarm: {} requests for {}: 0 compiled, {} already cached, "
                                                           "{} failed",
                                                           kRequests, kTarget, kRequests - kBadRequests, kBadRequests)));
  CHECK_THAT(again.result.out, Catch::Contains("bad.cu [broken] sm_90"));
  CHECK_THAT(again.result.out, Catch::Contains("(--verbose prints the compiler logs)"));
  CHECK(run_kiln({"cache", "stats", "--json"}, cache_env(cache), dir.path()).parsed().at("lifetime").at("compiles") ==
        kRequests - kBadRequests);
}

TEST_CASE("an NVRTC worker process killed while compiling fails only its request; the others complete") {
  if (!g_nvrtc) {
    WARN("NVRTC does not load here: the NVRTC worker-process path is not exercised");
    return;
  }
  TempDir dir;
  write_file(dir / "slow.cu", kSlow);
  const fs::path cache = dir / "cache";
  constexpr std::size_t kRequests = 4;
  const pid_t kiln = start_program(KILN_CLI_PATH,
                                   {"prewarm", "--source", (dir / "slow.cu").string(), "--target", kTarget,
                                    "--option-set=-DSLOW_VARIANT=1", "--option-set=-DSLOW_VARIANT=2",
                                    "--option-set=-DSLOW_VARIANT=3", "--option-set=-DSLOW_VARIANT=4", "-j", "2",
                                    "--json", "-q"},
                                   cache_env(cache), dir.path());
  // Both workers hold a request (each takes seconds) half a second after they appear: kill one.
  pid_t victim = -1;
  std::optional<std::chrono::steady_clock::time_point> seen;
  auto result = finish_within(kiln, dir.path(), kTimeout, [&] {
    if (victim > 0) return;
    const std::vector<pid_t> workers = children_of(kiln);
    if (workers.size() < 2) return;
    if (!seen) seen = std::chrono::steady_clock::now();
    if (std::chrono::steady_clock::now() - *seen < std::chrono::milliseconds(500)) return;
    if (::kill(workers.front(), SIGKILL) == 0) victim = workers.front();
  });
  REQUIRE(result.has_value());  // else it hung (and was killed)
  INFO(result->describe());
  REQUIRE(victim > 0);
  CHECK(result->rc == 1);
  const json report = result->parsed();
  REQUIRE(report.at("requests").size() == kRequests);
  std::size_t died = 0;
  for (const json& item : report.at("requests")) {
    if (item.at("status") == "failed") {
      CHECK(item.at("error") == "worker process died while compiling: killed by signal 9 (Killed)");
      ++died;
    } else {
      CHECK(item.at("status") == "compiled");
    }
  }
  CHECK(died == 1);
  CHECK(report.at("summary").at("failed") == 1);
  CHECK(report.at("summary").at("compiled") == kRequests - 1);
  const Result listing = run_kiln({"cache", "ls", "--json"}, cache_env(cache), dir.path());
  REQUIRE(listing.rc == 0);
  CHECK(listing.parsed().size() == kRequests - 1);
}

TEST_CASE("prewarm -j 4 where no worker process can start compiles in this process and says so") {
  // A process limit (a container's pids limit, RLIMIT_NPROC) refuses the workers' fork: the requests are
  // compiled by this process instead of failing. Run under prlimit --nproc=1 (as nobody when root, whom
  // the limit does not hold).
  if (!g_nvrtc) {
    WARN("NVRTC does not load here: the NVRTC worker-process path is not exercised");
    return;
  }
  const bool root = ::geteuid() == 0;
  for (const char* tool : {"/usr/bin/prlimit", "/usr/bin/setpriv"}) {
    if (::access(tool, X_OK) != 0) {
      WARN("left out: " << tool << " is not here");
      return;
    }
  }
  if (const std::optional<std::string> closed = kiln::test::closed_to_others(KILN_CLI_PATH); root && closed) {
    WARN("left out: nobody cannot run " << KILN_CLI_PATH << " (" << *closed << " lets no others in)");
    return;
  }
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all);  // nobody makes the cache in it
  std::vector<std::string> args{"--nproc=1:1"};
  if (root) args.insert(args.end(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"});
  args.insert(args.end(), {KILN_CLI_PATH, "prewarm", "--builtin", "saxpy", "--builtin", "map", "--target", kTarget, "-j",
                           "4", "--json"});
  const pid_t run = start_program("/usr/bin/prlimit", args, cache_env(dir / "cache"), dir.path());
  auto result = finish_within(run, dir.path(), kTimeout, [] {});
  REQUIRE(result.has_value());  // else it hung (and was killed)
  INFO(result->describe());
  constexpr std::size_t kRequests = 4;  // saxpy, and map's three name expressions
  if (result->err.find("no worker process could start") == std::string::npos && result->rc == 0) {
    WARN("left out: a process limit of one did not stop a worker from starting here");
    return;
  }
  CHECK_THAT(result->err, Catch::Contains("no worker process could start (fork failed: ") &&
                              Catch::Contains("4 request(s) compile in this process"));
  REQUIRE(result->rc == 0);
  const json summary = result->parsed().at("summary");
  CHECK(summary.at("requests") == kRequests);
  CHECK(summary.at("compiled") == kRequests);
  CHECK(summary.at("failed") == 0);
}

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    kiln::Engine engine(config);
    std::string why;
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.vendor != kiln::Vendor::cuda) continue;
      g_nvrtc = lane.compiler_loaded;
      why = lane.status;
    }
    if (!g_nvrtc) {
      std::printf("SKIPPED: NVRTC does not load: %s\n", why.c_str());
      return 77;
    }
  }
  return kiln_test::run_catch(argc, argv);
}
