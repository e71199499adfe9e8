// 16 threads x 100 launches of mixed built-in kernels through one Engine (fresh cache, so the first
// requests race to compile), each thread on its own stream, every result checked.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "kiln/error.hpp"

TEST_CASE("16 threads x 100 launches of mixed kernels through one engine", "[gpu][threads]") {
  constexpr int kThreads = 16;
  constexpr int kLaunchesPerThread = 100;
  // Cases used, by file: saxpy.cu, map.cu (<float, 4>), reduce.cu, histogram.cu (256), matmul.cu.
  const auto& cases = kiln_test::kernel_cases();
  std::vector<const kiln_test::KernelCase*> mix;
  for (const kiln_test::KernelCase& kernel_case : cases) {
    const std::string& first = kernel_case.expressions.front();
    if (first == "saxpy" || first == "kiln::map<float, 4>" || first == "reduce_sum_f32" || first == "histogram256_u8" ||
        first == "sgemm") {
      mix.push_back(&kernel_case);
    }
  }
  REQUIRE(mix.size() == 5);

  kiln_test::TempDir cache_dir("kiln-gpu-threads");
  kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
  const int device = engine.default_device();

  std::mutex mutex;
  std::vector<std::string> failures;
  std::atomic<int> launches_checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      kiln::StreamHandle stream = nullptr;
      try {
        stream = engine.create_stream(device);
        for (int i = 0; i < kLaunchesPerThread; ++i) {
          const kiln_test::KernelCase& kernel_case = *mix[static_cast<std::size_t>(t + i) % mix.size()];
          const std::size_t n = 1000 + 17 * static_cast<std::size_t>(t) + static_cast<std::size_t>(i);
          const std::uint64_t seed =
              kiln_test::run_seed() + 1000003ULL * static_cast<std::uint64_t>(t) + static_cast<std::uint64_t>(i);
          kiln_test::CaseResult result;
          kernel_case.run(engine, device, n, seed, stream, result);
          if (!result.ok()) {
            const std::lock_guard lock(mutex);
            for (const std::string& failure : result.failures) {
              failures.push_back("thread " + std::to_string(t) + " launch " + std::to_string(i) + ": " + failure);
            }
          }
          launches_checked.fetch_add(1);
        }
      } catch (const std::exception& error) {
        const std::lock_guard lock(mutex);
        failures.push_back("thread " + std::to_string(t) + " threw: " + error.what());
      }
      if (stream != nullptr) {
        engine.destroy_stream(stream, device);
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  INFO("seed " << kiln_test::run_seed());
  for (std::size_t i = 0; i < failures.size() && i < 20; ++i) {
    FAIL_CHECK(failures[i]);
  }
  CHECK(failures.empty());
  CHECK(launches_checked.load() == kThreads * kLaunchesPerThread);
  // One compile per program in a process, however many threads asked at once (single flight).
  const kiln::cache::Counters stats = engine.stats();
  CHECK(stats.compiles == mix.size());
  CHECK(stats.compile_failures == 0);
}
