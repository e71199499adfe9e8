// A process that asks an Engine for kernels (prewarm: compile into the disk cache, no GPU), for the
// cache tests that need several processes, another user, or resource limits.
//
//   cache_stress_worker once <root> <variant> <target> [<wait-for-path>]
//       One request; prints "origin=<disk|compiled|memory> stored=<0|1> corrupt=<n> compiles=<n>".
//       With a path, first waits until that file exists (a start line for racing processes).
//   cache_stress_worker stress <root> <seconds> <threads> <kernels> <log> <seed>
//       <threads> threads request random variants in [0, kernels) until <seconds> have passed. Every
//       compile appends "compiled <variant> <pid>" to <log>, every damaged entry seen appends
//       "corrupt <variant> <pid>" (O_APPEND: lines from killed workers are kept).
// Exit: 0 done, 1 error, 77 no NVRTC. The kernel of variant v is saxpy.cu with -DKILN_STRESS_VARIANT=v.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

kiln::Options variant_options(int variant) {
  kiln::Options options;
  options.define("KILN_STRESS_VARIANT", std::to_string(variant));
  return options;
}

kiln::Engine make_engine(const std::string& root) {
  kiln::EngineConfig config = kiln::EngineConfig::from_environment();
  config.cache.root = root;
  return kiln::Engine(config);
}

void append_line(int fd, const std::string& line) { (void)!::write(fd, line.data(), line.size()); }

const char* origin_name(kiln::Origin origin) {
  switch (origin) {
    case kiln::Origin::memory:
      return "memory";
    case kiln::Origin::disk:
      return "disk";
    case kiln::Origin::compiled:
      return "compiled";
    case kiln::Origin::pack:
      return "pack";
    case kiln::Origin::remote:
      return "remote";
  }
  return "?";
}

int run_once(const std::vector<std::string>& args) {
  if (args.size() < 3) return 1;
  if (args.size() >= 4) {
    while (::access(args[3].c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kiln::Engine engine = make_engine(args[0]);
  const kiln::PrewarmResult result =
      engine.prewarm(kiln::Source::builtin("saxpy"), variant_options(std::stoi(args[1])), {}, args[2]);
  const kiln::cache::Counters stats = engine.stats();
  std::printf("origin=%s stored=%d corrupt=%llu compiles=%llu\n", origin_name(result.origin), result.stored ? 1 : 0,
              static_cast<unsigned long long>(stats.corrupt_removed), static_cast<unsigned long long>(stats.compiles));
  return 0;
}

int run_stress(const std::vector<std::string>& args) {
  if (args.size() < 6) return 1;
  const auto duration = std::chrono::seconds(std::stoi(args[1]));
  const int threads = std::stoi(args[2]);
  const int kernels = std::stoi(args[3]);
  const int log = ::open(args[4].c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log < 0) return 1;
  const unsigned seed = static_cast<unsigned>(std::stoul(args[5]));
  kiln::Engine engine = make_engine(args[0]);
  const kiln::Source source = kiln::Source::builtin("saxpy");
  const auto deadline = std::chrono::steady_clock::now() + duration;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 random(seed * 31 + static_cast<unsigned>(t));
      while (std::chrono::steady_clock::now() < deadline) {
        const int variant = static_cast<int>(random() % static_cast<unsigned>(kernels));
        try {
          const std::uint64_t corrupt_before = engine.stats().corrupt_removed;
          const kiln::PrewarmResult result = engine.prewarm(source, variant_options(variant), {}, "sm_90");
          const pid_t pid = ::getpid();
          if (result.origin == kiln::Origin::compiled) {
            append_line(log, "compiled " + std::to_string(variant) + " " + std::to_string(pid) + "\n");
          }
          if (engine.stats().corrupt_removed != corrupt_before) {
            append_line(log, "corrupt " + std::to_string(variant) + " " + std::to_string(pid) + "\n");
          }
        } catch (const std::exception& error) {
          std::fprintf(stderr, "stress worker: request %d failed: %s\n", variant, error.what());
          ++failures;
        }
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  ::close(log);
  return failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "once") return run_once(args);
    if (mode == "stress") return run_stress(args);
  } catch (const kiln::DeviceUnavailable& error) {
    std::printf("SKIPPED: NVRTC not available: %s\n", error.what());
    return 77;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "cache_stress_worker: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: cache_stress_worker once|stress ... (see the source)\n");
  return 1;
}
