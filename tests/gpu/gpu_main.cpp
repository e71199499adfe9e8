// main() of every gpu test binary: child modes first, then the device check (exit 77 with
// "SKIPPED: <reason>" when there is none, or fewer than `--min-devices=N` asks for), then Catch2.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "gpu_internal.hpp"
#include "gpu_support.hpp"

int main(int argc, char** argv) {
  if (const auto child_exit = kiln_test::detail::run_child_mode(argc, argv)) {
    return *child_exit;
  }
  // --min-devices=N (taken out of argv before Catch2 sees it): the binary needs N devices.
  std::size_t min_devices = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--min-devices=", 14) == 0) {
      min_devices = static_cast<std::size_t>(std::strtoul(argv[i] + 14, nullptr, 10));
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  }
  std::string skip_reason;
  try {
    if (!kiln_test::detail::start_shared_engine(skip_reason)) {
      std::printf("SKIPPED: %s\n", skip_reason.c_str());
      std::fflush(stdout);
      kiln_test::detail::stop_shared_engine();
      return 77;
    }
  } catch (const std::exception& error) {
    std::printf("FAILED: creating the engine threw: %s\n", error.what());
    kiln_test::detail::stop_shared_engine();
    return 1;
  }
  const kiln::Engine& engine = kiln_test::shared_engine();
  if (engine.devices().size() < min_devices) {
    std::printf("SKIPPED: needs %zu devices; this machine has %zu (%s)\n", min_devices, engine.devices().size(),
                engine.devices().front().name.c_str());
    std::fflush(stdout);
    kiln_test::detail::stop_shared_engine();
    return 77;
  }
  std::printf("seed: %llu (set KILN_TEST_SEED to repeat)\n", static_cast<unsigned long long>(kiln_test::run_seed()));
  for (const kiln::DeviceInfo& device : engine.devices()) {
    std::printf("device %d: %s (%s, warp %d)%s\n", device.ordinal, device.name.c_str(), device.target.c_str(),
                device.warp_size, device.ordinal == engine.default_device() ? " [default]" : "");
  }
  std::fflush(stdout);
  int result = 0;
  {
    result = kiln_test::run_catch(argc, argv);
  }
  kiln_test::detail::stop_shared_engine();
  return result;
}
