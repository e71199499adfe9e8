// Several devices in one engine. Registered with --min-devices=2: on a machine with one GPU the whole
// binary reports "Skipped" with the device count (gpu_main.cpp), never a pass.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "kiln/error.hpp"

namespace {

const kiln_test::KernelCase& case_named(const std::string& expression) {
  const auto& cases = kiln_test::kernel_cases();
  const auto it = std::find_if(cases.begin(), cases.end(),
                               [&](const kiln_test::KernelCase& c) { return c.expressions.front() == expression; });
  if (it == cases.end()) {
    throw std::logic_error("no kernel case " + expression);
  }
  return *it;
}

/// Runs saxpy (n = 65537) on `device` and reports every mismatch as a Catch2 failure.
void check_saxpy_on(kiln::Engine& engine, int device) {
  kiln_test::CaseResult result;
  case_named("saxpy").run(engine, device, 65537, kiln_test::run_seed() + static_cast<std::uint64_t>(device), nullptr,
                          result);
  INFO("device " << device);
  for (const std::string& failure : result.failures) {
    FAIL_CHECK(failure);
  }
  CHECK(result.ok());
}

/// The child: argv = <expected default device>. Uses an engine from the environment (KILN_DEVICE).
int default_device_child(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::printf("usage: --kiln-child default-device <expected>\n");
    return 2;
  }
  const int expected = std::stoi(args[0]);
  kiln::Engine engine;
  const int got = engine.default_device();
  std::printf("DEFAULT_DEVICE %d\n", got);
  if (got != expected) {
    std::printf("FAILURE default_device() is %d, expected %d (KILN_DEVICE=%s)\n", got, expected,
                std::getenv("KILN_DEVICE") != nullptr ? std::getenv("KILN_DEVICE") : "<unset>");
    return 1;
  }
  const kiln::Program program = kiln_test::builtin_program(engine, "saxpy.cu");
  if (program.device() != expected) {
    std::printf("FAILURE a program for the default device landed on device %d\n", program.device());
    return 1;
  }
  kiln_test::CaseResult result;
  case_named("saxpy").run(engine, -1, 65537, 12345, nullptr, result);
  for (const std::string& failure : result.failures) {
    std::printf("FAILURE %s\n", failure.c_str());
  }
  return result.ok() ? 0 : 1;
}

const bool kChildRegistered = kiln_test::register_child_mode("default-device", default_device_child);

}  // namespace

TEST_CASE("one compile serves every device of the same target; each device loads it once", "[gpu][multi_device]") {
  kiln_test::TempDir cache_dir("kiln-gpu-multi");
  kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
  const auto devices = engine.devices();
  REQUIRE(devices.size() >= 2);

  const kiln::Program first = kiln_test::builtin_program(engine, "saxpy.cu", 0);
  CHECK(first.device() == 0);
  CHECK(first.origin() == kiln::Origin::compiled);
  check_saxpy_on(engine, 0);
  // A second request on the same device is a memory hit: no compile, no load.
  const std::uint64_t memory_hits = engine.stats().memory_hits;
  const kiln::Program again = kiln_test::builtin_program(engine, "saxpy.cu", 0);
  CHECK(again.key() == first.key());
  CHECK(engine.stats().memory_hits > memory_hits);
  CHECK(engine.stats().compiles == 1);

  const kiln::Program second = kiln_test::builtin_program(engine, "saxpy.cu", 1);
  CHECK(second.device() == 1);
  check_saxpy_on(engine, 1);
  if (devices[0].target != devices[1].target) {
    WARN("devices 0 and 1 have different targets (" << devices[0].target << ", " << devices[1].target
                                                    << "): each needs its own compile");
    CHECK(engine.stats().compiles == 2);
    return;
  }
  CHECK(second.key() == first.key());
  CHECK(second.origin() != kiln::Origin::compiled);
  CHECK(engine.stats().compiles == 1);
  const std::uint64_t hits_before = engine.stats().memory_hits;
  const kiln::Program second_again = kiln_test::builtin_program(engine, "saxpy.cu", 1);
  CHECK(second_again.device() == 1);
  CHECK(engine.stats().memory_hits > hits_before);
  CHECK(engine.stats().compiles == 1);
}

TEST_CASE("launches on every device from several threads are correct", "[gpu][multi_device][threads]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const int device_count = static_cast<int>(engine.devices().size());
  REQUIRE(device_count >= 2);
  constexpr int kThreads = 8;
  constexpr int kIterations = 20;
  const std::vector<std::string> mix = {"saxpy", "kiln::map<float, 4>", "reduce_sum_f32", "histogram256_u8"};
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int device = t % device_count;
      try {
        for (int i = 0; i < kIterations; ++i) {
          kiln_test::CaseResult result;
          case_named(mix[static_cast<std::size_t>(t + i) % mix.size()])
              .run(engine, device, 3000 + static_cast<std::size_t>(31 * t + i),
                   kiln_test::run_seed() + static_cast<std::uint64_t>(100 * t + i), nullptr, result);
          const std::lock_guard lock(mutex);
          for (const std::string& failure : result.failures) {
            failures.push_back("thread " + std::to_string(t) + " device " + std::to_string(device) + ": " + failure);
          }
        }
      } catch (const std::exception& error) {
        const std::lock_guard lock(mutex);
        failures.push_back("thread " + std::to_string(t) + " device " + std::to_string(device) +
                           " threw: " + error.what());
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
}

TEST_CASE("KILN_DEVICE selects the default device", "[gpu][multi_device]") {
  REQUIRE(kChildRegistered);
  REQUIRE(kiln_test::shared_engine().devices().size() >= 2);
  const int wanted = 1;
  kiln_test::TempDir cache_dir("kiln-gpu-kiln-device");
  const kiln_test::ChildResult child =
      kiln_test::run_child("default-device", {std::to_string(wanted)},
                           {{"KILN_DEVICE", std::to_string(wanted)}, {"KILN_CACHE_DIR", cache_dir.path().string()}});
  INFO("child output:\n" << child.output);
  CHECK(child.exit_code == 0);
  CHECK(child.output.find("DEFAULT_DEVICE " + std::to_string(wanted)) != std::string::npos);
}

TEST_CASE("a stream of device 0 with a kernel of device 1 is a LaunchError", "[gpu][multi_device][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  REQUIRE(engine.devices().size() >= 2);
  const kiln::Kernel saxpy_on_1 = kiln_test::builtin_program(engine, "saxpy.cu", 1).kernel("saxpy");
  CHECK(saxpy_on_1.device() == 1);
  kiln_test::DeviceBuffer x(engine, 1024 * sizeof(float), 1);
  kiln_test::DeviceBuffer y(engine, 1024 * sizeof(float), 1);
  kiln::StreamHandle stream_on_0 = engine.create_stream(0);
  kiln::LaunchConfig config;
  config.grid = 4;
  config.block = 256;
  config.stream = stream_on_0;
  std::string message;
  try {
    saxpy_on_1.launch(config, 1024, 2.0f, x.as<const float>(), y.as<float>());
  } catch (const kiln::LaunchError& error) {
    message = error.what();
  }
  INFO("message: " << message);
  CHECK_FALSE(message.empty());
  engine.synchronize(stream_on_0, 0);
  engine.destroy_stream(stream_on_0, 0);
  check_saxpy_on(engine, 1);
  check_saxpy_on(engine, 0);
}
