// `kiln prewarm`'s rough edges that need a real compile (NVRTC, no GPU): the compile time of a request
// whose store failed, one warning per command (not per worker process) for a cache that refuses its
// stores, worker processes that die with a killed command instead of writing into the cache after it,
// and the summary's wording. Skips (exit 77) naming why when NVRTC does not load.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "harness.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
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

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

std::size_t entry_files(const fs::path& root) {
  std::size_t count = 0;
  std::error_code ec;
  if (!fs::exists(root / "v1", ec)) return 0;
  for (const auto& item : fs::recursive_directory_iterator(root / "v1", ec)) {
    if (item.is_regular_file() && item.path().extension() == ".kiln") ++count;
  }
  return count;
}

bool alive(pid_t pid) {
  const std::string stat = read_all("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
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

// Hardening issue, 16: each worker process said the cache's refusal once, so -j 2 said it twice.
TEST_CASE("prewarm -j 2 into a cache that refuses its writes warns once per command, not once per worker") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  make_refusing_cache(cache);
  // saxpy and map's three name expressions: 4 requests over 2 workers, each of which stores.
  const Result run = run_bounded({"prewarm", "--builtin", "saxpy", "--builtin", "map", "--target", "sm_90", "-j", "2"},
                                 cache_env(cache), dir.path());
  INFO(run.describe());
  CHECK(run.rc == 1);
  CHECK(run.out.find("4 failed") != std::string::npos);
  CHECK(count_of(run.err, "further refusals") == 1);
  CHECK(count_of(run.err, "disk cache write failed") == 1);
  // What the workers say still arrives whole, one line at a time.
  for (std::size_t start = 0; start < run.err.size();) {
    const std::size_t end = run.err.find('\n', start);
    REQUIRE(end != std::string::npos);
    const std::string line = run.err.substr(start, end - start);
    CHECK((line.starts_with("kiln: ") || line.starts_with("[")));
    start = end + 1;
  }
}

// Hardening issue, 13: worker processes outlived a command that was killed, went on compiling and wrote
// their entries into the cache after it was gone.
TEST_CASE("the worker processes of a killed prewarm die with it and write nothing into the cache") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  { std::ofstream(dir / "slow.cu") << kSlow; }
  const pid_t kiln = start_program(KILN_CLI_PATH,
                                   {"prewarm", "--source", (dir / "slow.cu").string(), "--target", "sm_90",
                                    "--option-set=-DSLOW_VARIANT=1", "--option-set=-DSLOW_VARIANT=2", "-j", "2"},
                                   cache_env(cache), dir.path());
  std::vector<pid_t> workers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (workers.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    workers = children_of(kiln);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(workers.size() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into their compiles (seconds each)
  REQUIRE(entry_files(cache) == 0);
  ::kill(kiln, SIGKILL);
  const Result killed = finish(kiln, dir.path());
  CHECK(killed.rc == 128 + SIGKILL);
  // Orphans would finish their compiles (a few seconds) and store them: wait well past that.
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool any_alive = true;
  while (any_alive && std::chrono::steady_clock::now() < gone_by) {
    any_alive = std::any_of(workers.begin(), workers.end(), alive);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_FALSE(any_alive);
  CHECK(entry_files(cache) == 0);
}

// Hardening issue, rough edge 8: a HIP prewarm worker killed mid-compile left HIPRTC's /tmp/comgr-XXXXXX
// folder behind. Each worker now has a TMPDIR of its own, which the command removes when the worker ends.
TEST_CASE("a prewarm worker killed mid-compile leaves nothing in TMPDIR (HIPRTC's comgr folders)") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  const fs::path tmp = dir / "tmp";
  fs::create_directories(tmp);
  // Thousands of instantiations: a compile of a few seconds, long enough to be caught in it.
  std::string source = "#include <kiln/rtc.h>\ntemplate <int N> __device__ int f(int x) { return x * N + (N ^ 7); }\n";
  source += "KILN_KERNEL void busy(int* out) {\n  int s = 0;\n";
  for (int i = 0; i < 4000; ++i) source += "  s += f<" + std::to_string(i) + ">(out[" + std::to_string(i % 64) + "]);\n";
  source += "  out[0] = s + BUSY;\n}\n";
  { std::ofstream(dir / "busy.cu") << source; }
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    config.runtime = false;
    try {
      (void)kiln::Engine(config).compile(kiln::Source::from_text("probe.cu", "__global__ void k() {}"), {}, {}, "gfx90a");
    } catch (const kiln::Error& e) {
      WARN("skipped: HIPRTC cannot compile for gfx90a here: " << e.what());
      return;
    }
  }
  auto env = cache_env(cache);
  env["TMPDIR"] = tmp.string();
  const pid_t kiln = start_program(KILN_CLI_PATH,
                                   {"prewarm", "--source", (dir / "busy.cu").string(), "--kernel", "busy", "--target", "gfx90a",
                                    "--option-set=-DBUSY=1", "--option-set=-DBUSY=2", "-j", "2"},
                                   env, dir.path());
  const auto has_comgr = [&] {
    std::error_code ec;
    for (const auto& item : fs::recursive_directory_iterator(tmp, ec)) {
      if (item.path().filename().string().starts_with("comgr-")) return true;
    }
    return false;
  };
  std::vector<pid_t> workers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((workers.size() < 2 || !has_comgr()) && std::chrono::steady_clock::now() < deadline) {
    workers = children_of(kiln);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(workers.size() == 2);
  REQUIRE(has_comgr());  // a compile is under way
  for (const pid_t worker : workers) ::kill(worker, SIGKILL);
  const auto finished = finish_within(kiln, dir.path(), kTimeout, [] {});
  REQUIRE(finished.has_value());
  INFO(finished->describe());
  std::vector<std::string> left;
  for (const auto& item : fs::directory_iterator(tmp)) left.push_back(item.path().filename().string());
  CHECK(left.empty());
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
      if (lane.compiler_loaded) return kiln_test::run_catch(argc, argv);
      why = lane.status;
    }
    std::printf("SKIPPED: NVRTC does not load: %s\n", why.c_str());
    return 77;
  }
}
