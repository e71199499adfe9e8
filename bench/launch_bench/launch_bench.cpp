// launch_bench (needs an NVIDIA GPU): each number against its floor, measured in the same run.
//  1. launch overhead: the host time of Kernel::launch vs a raw cuLaunchKernel of the same CUfunction,
//     same loop shape, in batches short enough that the GPU's queue never fills (a saturated loop,
//     which runs at the GPU's pace, is printed for reference);
//  2. memory-tier lookup: Engine::kernel(source, name) when the kernel is already loaded;
//  3. disk hit in a fresh process, request -> launchable kernel, vs a bare read of the same CUBIN +
//     cuModuleLoadData + cuModuleGetFunction (CUDA_MODULE_LOADING=EAGER for both; driver init and
//     context creation reported separately). Each child process runs one side only, alternating, so
//     both pay a fresh process's first-request costs (the driver's first module load included).
//     Reported as medians with quartiles and a bootstrap 95% interval of the ratio of medians, and
//     end to end: the same request plus the kernel's first launch, synchronized.
//   launch_bench [--children N]   (N fresh processes per side for 3., default 50)
// Cold compiles (kiln vs bare NVRTC) are measured by compile_bench (run it with CUDA_CACHE_DISABLE=1).
#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "../support/fresh_process.hpp"

namespace {

using kiln::bench::Clock;
using kiln::bench::Driver;
using kiln::bench::median;
using kiln::bench::ns_since;
using kiln::bench::quantile;
/// "p25 / p50 / p75" in microseconds.
std::string quartiles_us(const std::vector<double>& ns) {
  return fmt::format("{:.1f} / **{:.1f}** / {:.1f}", quantile(ns, 0.25) / 1e3, quantile(ns, 0.5) / 1e3, quantile(ns, 0.75) / 1e3);
}
/// A percentile bootstrap 95% interval of median(a) / median(b): both samples resampled with
/// replacement 2,000 times (fixed seed, so a run's interval is reproducible from its samples).
std::pair<double, double> ratio_interval(const std::vector<double>& a, const std::vector<double>& b) {
  std::mt19937_64 rng(20261130);
  const auto resample = [&rng](const std::vector<double>& v) {
    std::uniform_int_distribution<std::size_t> pick(0, v.size() - 1);
    std::vector<double> out(v.size());
    for (double& x : out) x = v[pick(rng)];
    return median(std::move(out));
  };
  std::vector<double> ratios;
  for (int i = 0; i < 2000; ++i) ratios.push_back(resample(a) / resample(b));
  return {quantile(ratios, 0.025), quantile(ratios, 0.975)};
}

const char* kEmpty = "#include <kiln/rtc.h>\nKILN_KERNEL void empty(int n, float* p) { if (n < 0) p[0] = 1.0f; }\n";
/// A second cached kernel: the child's second request, to separate a process's first-request costs
/// (cold code, first module load) from the work every disk hit does.
const char* kEmpty2 = "#include <kiln/rtc.h>\nKILN_KERNEL void empty2(int n, float* p) { if (n < 0) p[0] = 2.0f; }\n";

/// One fresh process: the engine and the primary context first (reported separately), then two
/// requests of ONE side only (kiln, or the bare driver calls), so each side pays a fresh process's
/// first-request costs (the driver's first module load included) itself. Between the two requests
/// it launches the first kernel once and synchronizes (timed: the request plus this is the end-to-end
/// time to a first result). Prints
/// "<engine ns> <context ns> <first request ns> <first launch + synchronize ns> <second request ns>".
int child_disk_hit(const std::string& cache_dir, const std::string& cubin_path, bool kiln_side) {
  Driver d;
  auto cuInit_ = d.get<decltype(&cuInit)>("cuInit");
  auto cuDeviceGet_ = d.get<decltype(&cuDeviceGet)>("cuDeviceGet");
  auto cuRetain = d.get<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  auto cuSetCurrent = d.get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  auto cuLoad = d.get<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  auto cuGetFunction = d.get<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
  auto cuLaunch = d.get<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  auto cuSync = d.get<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");

  auto t0 = Clock::now();
  kiln::EngineConfig config;
  config.cache.root = cache_dir;
  kiln::Engine engine(config);
  const double engine_ns = ns_since(t0);
  t0 = Clock::now();
  cuInit_(0);
  CUdevice dev = 0;
  cuDeviceGet_(&dev, 0);
  CUcontext ctx = nullptr;
  cuRetain(&ctx, dev);
  cuSetCurrent(ctx);
  const double context_ns = ns_since(t0);

  // The empty kernels never dereference their pointer (n >= 0).
  int n = 1;
  float* nowhere = nullptr;
  void* params[] = {&n, &nowhere};
  kiln::Kernel kiln_first;
  CUfunction bare_first = nullptr;
  const auto run_kiln = [&](const char* text, const char* name) {
    const auto t = Clock::now();
    kiln::Kernel k = engine.kernel(kiln::Source::from_text(std::string(name) + ".cu", text), name);
    const double ns = ns_since(t);
    if (!k || engine.stats().compiles != 0) {
      fmt::print(stderr, "child compiled: the disk tier missed\n");
      std::exit(3);
    }
    if (!kiln_first) kiln_first = k;
    return ns;
  };
  const auto run_bare = [&](const std::string& path, const char* name) {
    const auto t = Clock::now();
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    if (cuLoad(&module, bytes.data()) != CUDA_SUCCESS || cuGetFunction(&function, module, name) != CUDA_SUCCESS) {
      std::exit(4);
    }
    const double ns = ns_since(t);
    if (bare_first == nullptr) bare_first = function;
    return ns;
  };
  const auto first_launch = [&] {
    const auto t = Clock::now();
    if (kiln_side) {
      kiln_first.launch({{1}, {32}}, n, nowhere);
    } else if (cuLaunch(bare_first, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) != CUDA_SUCCESS) {
      std::exit(4);
    }
    if (cuSync() != CUDA_SUCCESS) std::exit(4);
    return ns_since(t);
  };
  if (std::getenv("KILN_BENCH_PHASES") != nullptr) {
    // Diagnostic: the first request's parts, each timed on first use in this process, then the whole
    // request (whose key and read are then warm): what the first execution of each part costs.
    auto t = Clock::now();
    const kiln::Source source = kiln::Source::from_text("empty.cu", kEmpty);
    const double source_ns = ns_since(t);
    t = Clock::now();
    const auto [hash, canonical] = engine.describe_key(source, {}, {}, engine.devices()[0].target);
    const double key_ns = ns_since(t);
    t = Clock::now();
    const auto found = engine.storage().local().get(hash, canonical);
    const double read_ns = ns_since(t);
    t = Clock::now();
    kiln::Kernel k = engine.kernel(source, "empty");
    const double kernel_ns = ns_since(t);
    t = Clock::now();
    const auto [hash2, canonical2] = engine.describe_key(source, {}, {}, engine.devices()[0].target);
    const double key2_ns = ns_since(t);
    t = Clock::now();
    const auto found2 = engine.storage().local().get(hash2, canonical2);
    const double read2_ns = ns_since(t);
    if (!found.entry || !found2.entry || !k) std::exit(5);
    fmt::print("{} {} {} {} {} {} {}\n", engine_ns, source_ns, key_ns, read_ns, kernel_ns, key2_ns, read2_ns);
    return 0;
  }
  double first_ns = 0, launch_ns = 0, second_ns = 0;
  if (kiln_side) {
    first_ns = run_kiln(kEmpty, "empty");
    launch_ns = first_launch();
    second_ns = run_kiln(kEmpty2, "empty2");
  } else {
    first_ns = run_bare(cubin_path, "empty");
    launch_ns = first_launch();
    second_ns = run_bare(cubin_path + "2", "empty2");
  }
  fmt::print("{} {} {} {} {}\n", engine_ns, context_ns, first_ns, launch_ns, second_ns);
  return 0;
}

/// Runs `self --child-disk <cache> <cubin> <side>` in a fresh process (CUDA_MODULE_LOADING=EAGER,
/// plus KILN_BENCH_PHASES when `phases`) and returns its stdout; nullopt when it failed.
std::optional<std::string> run_child(const char* /*self*/, const std::string& cache, const std::string& cubin,
                                     const char* side, bool phases) {
  std::vector<std::pair<std::string, std::string>> env{{"CUDA_MODULE_LOADING", "EAGER"}};
  if (phases) env.emplace_back("KILN_BENCH_PHASES", "1");
  return kiln::bench::run_self({"--child-disk", cache, cubin, side}, env);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child-disk") {
    return child_disk_hit(argv[2], argv[3], std::string(argv[4]) == "kiln");
  }
  int children_per_side = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--children" && i + 1 < argc) {
      children_per_side = std::atoi(argv[++i]);
    } else {
      fmt::print(stderr, "usage: launch_bench [--children N]  (fresh processes per side, default 50)\n");
      return 2;
    }
  }
  if (children_per_side < 2 || children_per_side > 10000) {
    fmt::print(stderr, "launch_bench: --children must be 2..10000\n");
    return 2;
  }
  kiln::Engine engine;
  if (engine.devices().empty()) {
    fmt::print("launch_bench: no GPU ({}); nothing measured\n", "see `kiln devices`");
    return 0;
  }
  const kiln::DeviceInfo device = engine.devices()[0];  // a copy: devices() returns by value
  fmt::print("launch_bench on {} ({}), libkiln lanes:", device.name, device.target);
  for (const auto& lane : engine.lanes()) {
    for (const auto& lib : lane.libraries) fmt::print(" {}={} ({})", lib.role, lib.path, lib.version);
  }
  fmt::print("\n\n");

  const kiln::Source source = kiln::Source::from_text("empty.cu", kEmpty);
  kiln::Kernel kernel = engine.kernel(source, "empty");
  float* buffer = static_cast<float*>(engine.allocate(1024));

  // 1. Launch overhead: the host-side cost of one launch call. Batches of kBatch launches are timed
  // from before the first call to after the last one returns, then synchronized outside the clock:
  // the GPU's queue never fills, so each call returns once its launch is queued, and the time is the
  // call's own (what kiln adds on top of the driver). The sides alternate batch by batch in ABBA order,
  // so drift in clocks or driver state reaches both alike.
  Driver d;
  auto cuLaunch = d.get<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  auto cuSync = d.get<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");
  auto function = static_cast<CUfunction>(kernel.native_handle());
  int n = 1;
  void* params[] = {&n, &buffer};
  const auto kiln_batch = [&](int count) {
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) kernel.launch({{1}, {32}}, n, buffer);
    const double ns = ns_since(t0) / count;
    cuSync();
    return ns;
  };
  const auto raw_batch = [&](int count) {
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) cuLaunch(function, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
    const double ns = ns_since(t0) / count;
    cuSync();
    return ns;
  };
  constexpr int kBatch = 64, kBatches = 1000;
  for (int warm = 0; warm < 20; ++warm) kiln_batch(kBatch), raw_batch(kBatch);
  std::vector<double> kiln_launch, raw_launch;
  for (int b = 0; b < kBatches; ++b) {
    if (b % 4 == 0 || b % 4 == 3) {
      kiln_launch.push_back(kiln_batch(kBatch));
      raw_launch.push_back(raw_batch(kBatch));
    } else {
      raw_launch.push_back(raw_batch(kBatch));
      kiln_launch.push_back(kiln_batch(kBatch));
    }
  }
  const double kl = median(kiln_launch), rl = median(raw_launch);
  fmt::print("| measure | kiln | floor | ratio | goal |\n|---|---|---|---|---|\n");
  fmt::print("| launch overhead, empty kernel: host time per launch call (ns, median of {} batches of {} per side, ABBA) | {:.0f} | {:.0f} (raw cuLaunchKernel) | {:.3f} | <= 1.05 |\n",
             kBatches, kBatch, kl, rl, kl / rl);
  // For reference: a saturated loop (20,000 launches, then one synchronize), where the GPU's queue
  // fills and both sides run at the GPU's pace.
  {
    const int kLaunches = 20000, kRounds = 11;
    std::vector<double> kiln_loop, raw_loop;
    for (int round = 0; round < kRounds; ++round) {
      const bool kiln_first = round % 2 == 0;
      for (int side = 0; side < 2; ++side) {
        const bool kiln_side = (side == 0) == kiln_first;
        cuSync();
        const auto t0 = Clock::now();
        if (kiln_side) {
          for (int i = 0; i < kLaunches; ++i) kernel.launch({{1}, {32}}, n, buffer);
        } else {
          for (int i = 0; i < kLaunches; ++i) cuLaunch(function, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
        }
        cuSync();
        (kiln_side ? kiln_loop : raw_loop).push_back(ns_since(t0) / kLaunches);
      }
    }
    fmt::print("| reference: saturated loop, {} launches then synchronize (ns per launch, median of {} rounds; GPU-bound) | {:.0f} | {:.0f} | {:.3f} | |\n",
               kLaunches, kRounds, median(kiln_loop), median(raw_loop), median(kiln_loop) / median(raw_loop));
  }

  // 2. Memory-tier lookup.
  std::vector<double> lookups;
  for (int round = 0; round < 7; ++round) {
    const int kLookups = 1000000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kLookups; ++i) {
      kiln::Kernel k = engine.kernel(source, "empty");
      if (!k) return 5;
    }
    lookups.push_back(ns_since(t0) / kLookups);
  }
  fmt::print("| memory-tier lookup Engine::kernel (ns, median of 7 x 1M) | {:.1f} | - | - | < 100 ns |\n", median(lookups));
  engine.free(buffer);

  // 3. Disk hit in fresh processes.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("kiln-launch-bench-{}", getpid());
  std::filesystem::remove_all(dir);
  std::string cubin_path = (dir / "empty.cubin").string();
  {
    kiln::EngineConfig config;
    config.cache.root = dir / "cache";
    kiln::Engine warm(config);
    for (const auto& [text, name, path] : {std::tuple{kEmpty, "empty", cubin_path}, std::tuple{kEmpty2, "empty2", cubin_path + "2"}}) {
      const kiln::Source s = kiln::Source::from_text(std::string(name) + ".cu", text);
      (void)warm.kernel(s, name);
      auto [hash, canonical] = warm.describe_key(s, {}, {}, device.target);
      auto found = warm.storage().local().get(hash, canonical);
      if (!found.entry) {
        fmt::print("disk entry missing\n");
        return 6;
      }
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(found.entry->payload.data()), static_cast<std::streamsize>(found.entry->payload.size()));
    }
  }
  // Children alternate kiln, bare, kiln, ...: each runs one side only, in the same process state (a
  // kiln Engine and the primary context exist in both before the clock starts).
  std::vector<double> engine_init, context_init, kiln_disk, bare_disk, kiln_to_result, bare_to_result,
      kiln_second_request, bare_second_request;
  for (int child = 0; child < 2 * children_per_side; ++child) {
    const bool kiln_side = child % 2 == 0;
    const auto out = run_child(argv[0], (dir / "cache").string(), cubin_path, kiln_side ? "kiln" : "bare", false);
    double e = 0, c = 0, first = 0, launch = 0, second = 0;
    if (!out || std::sscanf(out->c_str(), "%lf %lf %lf %lf %lf", &e, &c, &first, &launch, &second) != 5) return 8;
    engine_init.push_back(e);
    context_init.push_back(c);
    (kiln_side ? kiln_disk : bare_disk).push_back(first);
    (kiln_side ? kiln_to_result : bare_to_result).push_back(first + launch);
    (kiln_side ? kiln_second_request : bare_second_request).push_back(second);
  }
  // Each row: the sides' quartiles (p25 / median / p75, us), the ratio of the medians and its bootstrap
  // 95% interval.
  const auto row = [](const char* what, const std::vector<double>& kiln_ns, const std::vector<double>& bare_ns,
                      const char* goal) {
    const auto [low, high] = ratio_interval(kiln_ns, bare_ns);
    fmt::print("| {} | {} | {} | {:.3f} ({:.3f}-{:.3f}) | {} |\n", what, quartiles_us(kiln_ns), quartiles_us(bare_ns),
               median(kiln_ns) / median(bare_ns), low, high, goal);
  };
  fmt::print("\nFresh processes, {} per side, alternating (us: p25 / median / p75; ratio of medians with its bootstrap 95% interval):\n\n"
             "| measure | kiln | bare | ratio | goal |\n|---|---|---|---|---|\n",
             children_per_side);
  row("disk hit, request -> launchable kernel (bare: read + cuModuleLoadData + cuModuleGetFunction)", kiln_disk,
      bare_disk, "<= 1.3");
  row("end to end: the same request, then the first launch + synchronize", kiln_to_result, bare_to_result, "");
  row("the same process's second request (another cached kernel)", kiln_second_request, bare_second_request, "");
  // Diagnostic: where a fresh process's first kiln request goes (parts on first use).
  {
    std::vector<double> parts[7];
    for (int child = 0; child < 10; ++child) {
      const auto out = run_child(argv[0], (dir / "cache").string(), cubin_path, "kiln", true);
      double v[7] = {};
      if (!out || std::sscanf(out->c_str(), "%lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                              &v[6]) != 7) {
        return 8;
      }
      for (int i = 0; i < 7; ++i) parts[i].push_back(v[i]);
    }
    fmt::print("| diagnostic, first use in a fresh process (us, median of 10): Source::from_text {:.1f}, describe_key {:.1f} "
               "(again {:.1f}), Store::get {:.1f} (again {:.1f}), then Engine::kernel {:.1f} | | | | |\n",
               median(parts[1]) / 1e3, median(parts[2]) / 1e3, median(parts[5]) / 1e3, median(parts[3]) / 1e3,
               median(parts[6]) / 1e3, median(parts[4]) / 1e3);
  }
  fmt::print("| separately: Engine construction incl. cuInit + device query (ms) | {:.1f} | | | |\n", median(engine_init) / 1e6);
  fmt::print("| separately: primary context retain + set current (ms) | {:.1f} | | | |\n", median(context_init) / 1e6);
  std::filesystem::remove_all(dir);
  return 0;
}
