// Many processes on one cache: the compile lease (one compile per key across processes), and a 20 s
// stress of 8 processes x 4 threads over 20 kernels with a worker SIGKILLed and restarted every few
// seconds. Every entry left must be byte-identical to a reference compile. Needs NVRTC, no GPU.
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "cache_test_support.hpp"
#include "catch_run.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;

namespace {

/// Starts a program with stdout and stderr going to `output`; returns its pid.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& output) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  return pid;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

kiln::Options variant(int v) {
  kiln::Options options;
  options.define("KILN_STRESS_VARIANT", std::to_string(v));
  return options;
}

}  // namespace

TEST_CASE("stress: processes racing for one uncached key compile it once", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  const fs::path start = dir.path() / "start";
  constexpr int kProcesses = 6;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i) {
    pids.push_back(spawn({KILN_STRESS_WORKER, "once", root.string(), "42", "sm_90", start.string()},
                         dir.path() / ("out" + std::to_string(i))));
  }
  std::this_thread::sleep_for(300ms);  // let them load NVRTC; then release them at once
  write_bytes(start, {});
  int compiled = 0;
  int from_disk = 0;
  for (int i = 0; i < kProcesses; ++i) {
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(i)], &status, 0);
    const std::string out = slurp(dir.path() / ("out" + std::to_string(i)));
    INFO(out);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    compiled += out.find("origin=compiled") != std::string::npos ? 1 : 0;
    from_disk += out.find("origin=disk") != std::string::npos ? 1 : 0;
  }
  std::printf("lease race: %d processes, %d compiled, %d read the entry from disk\n", kProcesses, compiled, from_disk);
  CHECK(compiled == 1);
  CHECK(from_disk == kProcesses - 1);
}

TEST_CASE("stress: 8 processes x 4 threads, 20 kernels, 20 s, workers SIGKILLed and restarted", "[cache]") {
  constexpr int kProcesses = 8;
  constexpr int kThreads = 4;
  constexpr int kKernels = 20;
  constexpr auto kDuration = 20s;
  constexpr auto kFirstKill = 700ms;  // while the first compiles are still running
  constexpr auto kKillEvery = 2500ms;
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  const fs::path log = dir.path() / "compiles.log";

  // Reference binaries from a separate cache.
  std::map<std::string, Entry> reference;  // key hex -> entry
  std::map<std::string, int> variant_of;   // key hex -> variant
  {
    kiln::EngineConfig config;
    config.cache.root = dir.path() / "reference";
    kiln::Engine engine(config);
    for (int v = 0; v < kKernels; ++v) {
      const kiln::PrewarmResult result = engine.prewarm(kiln::Source::builtin("saxpy"), variant(v), {}, "sm_90");
      auto parsed = engine.storage().local().read_file(engine.storage().local().entry_path(result.key));
      REQUIRE(std::holds_alternative<Entry>(parsed));
      reference.emplace(result.key.hex(), std::get<Entry>(std::move(parsed)));
      variant_of[result.key.hex()] = v;
    }
  }

  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + kDuration;
  auto start_worker = [&](int index) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(end - std::chrono::steady_clock::now());
    return spawn({KILN_STRESS_WORKER, "stress", root.string(), std::to_string(std::max<long>(1, left.count())),
                  std::to_string(kThreads), std::to_string(kKernels), log.string(), std::to_string(1000 + index)},
                 dir.path() / ("worker" + std::to_string(index) + ".out"));
  };
  std::vector<pid_t> workers;
  for (int i = 0; i < kProcesses; ++i) workers.push_back(start_worker(i));

  std::mt19937 random(7);
  int kills = 0;
  for (auto next_kill = begin + kFirstKill; next_kill + 1s < end; next_kill += kKillEvery) {
    std::this_thread::sleep_until(next_kill);
    const auto victim = static_cast<std::size_t>(random() % kProcesses);
    ::kill(workers[victim], SIGKILL);
    int status = 0;
    ::waitpid(workers[victim], &status, 0);
    if (WIFSIGNALED(status)) ++kills;
    workers[victim] = start_worker(static_cast<int>(victim));
  }
  int failed_workers = 0;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    int status = 0;
    ::waitpid(workers[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed_workers;
      UNSCOPED_INFO("worker " << i << " failed:\n" << slurp(dir.path() / ("worker" + std::to_string(i) + ".out")));
    }
  }
  CHECK(failed_workers == 0);

  // Compiles per key, and damaged entries any reader saw.
  std::map<int, int> compiles;
  int corrupt_seen = 0;
  std::istringstream lines(slurp(log));
  for (std::string kind; lines >> kind;) {
    int v = 0;
    long pid = 0;
    lines >> v >> pid;
    if (kind == "compiled") ++compiles[v];
    if (kind == "corrupt") ++corrupt_seen;
  }
  std::printf("stress: %d processes x %d threads, %d kernels, %lld s, %d workers SIGKILLed and restarted\n", kProcesses,
              kThreads, kKernels, static_cast<long long>(kDuration.count()), kills);
  std::printf("compiles per key (1 when the lease works; a kill during a compile can add one):\n");
  int max_compiles = 0;
  int total_compiles = 0;
  for (int v = 0; v < kKernels; ++v) {
    std::printf("  variant %2d: %d\n", v, compiles[v]);
    max_compiles = std::max(max_compiles, compiles[v]);
    total_compiles += compiles[v];
  }
  std::printf("total compiles %d, damaged entries seen by readers %d\n", total_compiles, corrupt_seen);
  CHECK(kills >= 5);
  CHECK(corrupt_seen == 0);
  CHECK(max_compiles <= 1 + kills);

  // Every entry left is valid and byte-identical to the reference compile of its key.
  kiln::cache::Store store(store_config(root));
  const auto files = store.list();
  CHECK(files.size() == static_cast<std::size_t>(kKernels));
  for (const auto& file : files) {
    INFO(file.path);
    auto parsed = store.read_file(file.path);
    REQUIRE(std::holds_alternative<Entry>(parsed));
    const Entry& entry = std::get<Entry>(parsed);
    const auto it = reference.find(entry.key_hash.hex());
    REQUIRE(it != reference.end());
    CHECK(entry.payload == it->second.payload);
    CHECK(entry.aux == it->second.aux);
    CHECK(entry.names == it->second.names);
    CHECK(entry.canonical_key == it->second.canonical_key);
  }
  // Temps of killed writers are swept (their pids are dead).
  const std::size_t temps = temp_files(root).size();
  CHECK(store.sweep_temps(0s) == temps);
  CHECK(temp_files(root).empty());
  std::printf("temp files left by killed writers, swept: %zu\n", temps);
}

int main(int argc, char** argv) {
  // Skip (77) with the worker's reason when there is no NVRTC.
  const std::string probe = std::string("KILN_CACHE_DISABLE=1 ") + KILN_STRESS_WORKER + " once /nonexistent 0 sm_90";
  FILE* pipe = ::popen(probe.c_str(), "r");
  std::string said;
  char buffer[512];
  while (pipe != nullptr && std::fgets(buffer, sizeof(buffer), pipe) != nullptr) said += buffer;
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    std::printf("%s", said.c_str());
    return 77;
  }
  return kiln_test::run_catch(argc, argv);
}
