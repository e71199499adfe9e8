// `kiln prewarm`'s rough edges that need a real compile (NVRTC, no GPU): the compile time of a request
// whose store failed, and the summary's wording. Skips (exit 77) naming why when NVRTC does not load.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "harness.hpp"
#include "kiln/engine.hpp"
#include "test_support.hpp"

namespace {

using namespace kiln::system_test;

constexpr double kTimeout = 300;  // seconds for one kiln run; past it the run counts as hung

std::map<std::string, std::string> cache_env(const fs::path& cache) {
  return {{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}, {"KILN_REMOTE_CACHE", ""}};
}

Result run_bounded(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                   const fs::path& scratch) {
  auto result = finish_within(start_program(KILN_CLI_PATH, args, env, scratch), scratch, kTimeout, [] {});
  if (!result) FAIL("kiln did not finish within " << kTimeout << " s (hung); killed");
  return *result;
}

/// A cache whose 256 shard directories are all group-writable: the store refuses every write into them.
void make_refusing_cache(const fs::path& root) {
  fs::create_directories(root / "v1");
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
  fs::permissions(root / "v1", fs::perms::owner_all, fs::perm_options::replace);
  for (int shard = 0; shard < 256; ++shard) {
    char name[3];
    std::snprintf(name, sizeof name, "%02x", shard);
    const fs::path dir = root / "v1" / name;
    fs::create_directory(dir);
    REQUIRE(::chmod(dir.c_str(), 0770) == 0);
  }
}

}  // namespace

// Hardening issue, 12: a request that compiled but could not be stored reported "0.00 s compiling".
TEST_CASE("a request that compiled but could not be stored counts its compile time") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  make_refusing_cache(cache);
  const Result run =
      run_bounded({"prewarm", "--builtin", "saxpy", "--target", "sm_90", "--json"}, cache_env(cache), dir.path());
  INFO(run.describe());
  REQUIRE(run.rc == 1);
  const json report = run.parsed();
  const json& request = report.at("requests").at(0);
  CHECK(request.at("status") == "failed");
  CHECK_THAT(request.at("error").get<std::string>(), Catch::Contains("compiled, but the cache did not store it"));
  CHECK(request.at("seconds").get<double>() > 0);
  CHECK(report.at("summary").at("compile_seconds").get<double>() == request.at("seconds").get<double>());
}

TEST_CASE("the prewarm summary counts one request in the singular") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  const Result run = run_bounded({"prewarm", "--builtin", "saxpy", "--target", "sm_90"}, cache_env(cache), dir.path());
  INFO(run.describe());
  CHECK(run.rc == 0);
  CHECK(run.out.find("prewarm: 1 request for sm_90: 1 compiled") != std::string::npos);
}

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    kiln::Engine engine(config);
    std::string why;
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.vendor != kiln::Vendor::cuda) continue;
      if (lane.compiler_loaded) return Catch::Session().run(argc, argv);
      why = lane.status;
    }
    std::printf("SKIPPED: NVRTC does not load: %s\n", why.c_str());
    return 77;
  }
}
