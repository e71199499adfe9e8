// launch_bench (needs an NVIDIA GPU): each number against its floor, measured in the same run.
//  1. launch overhead: Kernel::launch vs a raw cuLaunchKernel of the same CUfunction, same loop shape;
//  2. memory-tier lookup: Engine::kernel(source, name) when the kernel is already loaded;
//  3. disk hit in a fresh process, request -> launchable kernel, vs a bare read of the same CUBIN +
//     cuModuleLoadData + cuModuleGetFunction (CUDA_MODULE_LOADING=EAGER for both; driver init and
//     context creation reported separately). Child processes alternate which side goes first.
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
#include <string>
#include <tuple>
#include <vector>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Driver {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  template <typename F>
  F get(const char* name) {
    void* p = dlsym(lib, name);
    if (p == nullptr) {
      fmt::print(stderr, "missing {}\n", name);
      std::exit(2);
    }
    return reinterpret_cast<F>(p);
  }
};

const char* kEmpty = "#include <kiln/rtc.h>\nKILN_KERNEL void empty(int n, float* p) { if (n < 0) p[0] = 1.0f; }\n";
/// A second cached kernel: the child's second request, to separate a process's first-request costs
/// (cold code, first module load) from the work every disk hit does.
const char* kEmpty2 = "#include <kiln/rtc.h>\nKILN_KERNEL void empty2(int n, float* p) { if (n < 0) p[0] = 2.0f; }\n";

int child_disk_hit(const std::string& cache_dir, const std::string& cubin_path, bool kiln_first) {
  Driver d;
  auto cuInit_ = d.get<decltype(&cuInit)>("cuInit");
  auto cuDeviceGet_ = d.get<decltype(&cuDeviceGet)>("cuDeviceGet");
  auto cuRetain = d.get<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  auto cuSetCurrent = d.get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  auto cuLoad = d.get<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  auto cuGetFunction = d.get<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");

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

  const auto run_kiln = [&](const char* text, const char* name) {
    const auto t = Clock::now();
    kiln::Kernel k = engine.kernel(kiln::Source::from_text(std::string(name) + ".cu", text), name);
    const double ns = ns_since(t);
    if (engine.stats().compiles != 0) {
      fmt::print(stderr, "child compiled: the disk tier missed\n");
      std::exit(3);
    }
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
    return ns_since(t);
  };
  // First requests of the process (the measure), then a second cached kernel each (same order).
  double kiln_ns = 0, bare_ns = 0, kiln2_ns = 0, bare2_ns = 0;
  if (kiln_first) {
    kiln_ns = run_kiln(kEmpty, "empty");
    bare_ns = run_bare(cubin_path, "empty");
    kiln2_ns = run_kiln(kEmpty2, "empty2");
    bare2_ns = run_bare(cubin_path + "2", "empty2");
  } else {
    bare_ns = run_bare(cubin_path, "empty");
    kiln_ns = run_kiln(kEmpty, "empty");
    bare2_ns = run_bare(cubin_path + "2", "empty2");
    kiln2_ns = run_kiln(kEmpty2, "empty2");
  }
  fmt::print("{} {} {} {} {} {}\n", engine_ns, context_ns, kiln_ns, bare_ns, kiln2_ns, bare2_ns);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child-disk") {
    return child_disk_hit(argv[2], argv[3], std::string(argv[4]) == "1");
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

  // 1. Launch overhead.
  Driver d;
  auto cuLaunch = d.get<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  auto cuSync = d.get<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");
  auto function = static_cast<CUfunction>(kernel.native_handle());
  const int kLaunches = 20000, kRounds = 11;
  int n = 1;
  void* params[] = {&n, &buffer};
  std::vector<double> kiln_launch, raw_launch;
  for (int round = 0; round < kRounds; ++round) {
    const auto time_kiln = [&] {
      engine.synchronize();
      const auto t0 = Clock::now();
      for (int i = 0; i < kLaunches; ++i) kernel.launch({{1}, {32}}, n, buffer);
      engine.synchronize();
      kiln_launch.push_back(ns_since(t0) / kLaunches);
    };
    const auto time_raw = [&] {
      cuSync();
      const auto t0 = Clock::now();
      for (int i = 0; i < kLaunches; ++i) cuLaunch(function, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
      cuSync();
      raw_launch.push_back(ns_since(t0) / kLaunches);
    };
    if (round % 2 == 0) {
      time_kiln();
      time_raw();
    } else {
      time_raw();
      time_kiln();
    }
  }
  const double kl = median(kiln_launch), rl = median(raw_launch);
  fmt::print("| measure | kiln | floor | ratio | goal |\n|---|---|---|---|---|\n");
  fmt::print("| launch, empty kernel (ns/launch, {} launches x {} rounds, median) | {:.0f} | {:.0f} (raw cuLaunchKernel) | {:.3f} | <= 1.05 |\n",
             kLaunches, kRounds, kl, rl, kl / rl);

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
      auto found = warm.store().get(hash, canonical);
      if (!found.entry) {
        fmt::print("disk entry missing\n");
        return 6;
      }
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(found.entry->payload.data()), static_cast<std::streamsize>(found.entry->payload.size()));
    }
  }
  std::vector<double> kiln_second_request, bare_second_request;
  std::vector<double> engine_init, context_init, kiln_disk, bare_disk;
  std::vector<double> kiln_when_first, kiln_when_second, bare_when_first, bare_when_second;
  constexpr int kChildren = 20;
  for (int child = 0; child < kChildren; ++child) {
    int fds[2];
    if (pipe(fds) != 0) return 7;
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
      execl("/proc/self/exe", argv[0], "--child-disk", (dir / "cache").c_str(), cubin_path.c_str(), child % 2 ? "1" : "0",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[256];
    for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(r));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    double e = 0, c = 0, k = 0, b = 0, k2 = 0, b2 = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        std::sscanf(out.c_str(), "%lf %lf %lf %lf %lf %lf", &e, &c, &k, &b, &k2, &b2) != 6) {
      fmt::print("child {} failed (status {}): {}\n", child, status, out);
      return 8;
    }
    engine_init.push_back(e);
    context_init.push_back(c);
    kiln_disk.push_back(k);
    bare_disk.push_back(b);
    kiln_second_request.push_back(k2);
    bare_second_request.push_back(b2);
    (child % 2 ? kiln_when_first : kiln_when_second).push_back(k);
    (child % 2 ? bare_when_second : bare_when_first).push_back(b);
  }
  const double kd = median(kiln_disk), bd = median(bare_disk);
  fmt::print("| disk hit, fresh process, request -> launchable (us, median of {} children) | {:.1f} | {:.1f} (read + cuModuleLoadData + cuModuleGetFunction) | {:.3f} | <= 1.3 |\n",
             kChildren, kd / 1e3, bd / 1e3, kd / bd);
  fmt::print("| by order: kiln first / bare first (us, medians of {}) | {:.1f} / {:.1f} | {:.1f} / {:.1f} | {:.3f} / {:.3f} | |\n",
             kChildren / 2, median(kiln_when_first) / 1e3, median(kiln_when_second) / 1e3, median(bare_when_second) / 1e3,
             median(bare_when_first) / 1e3, median(kiln_when_first) / median(bare_when_second),
             median(kiln_when_second) / median(bare_when_first));
  fmt::print("| the process's second request (another cached kernel), kiln vs bare (us) | {:.1f} | {:.1f} | {:.3f} | |\n",
             median(kiln_second_request) / 1e3, median(bare_second_request) / 1e3,
             median(kiln_second_request) / median(bare_second_request));
  fmt::print("| separately: Engine construction incl. cuInit + device query (ms) | {:.1f} | | | |\n", median(engine_init) / 1e6);
  fmt::print("| separately: primary context retain + set current (ms) | {:.1f} | | | |\n", median(context_init) / 1e6);
  std::filesystem::remove_all(dir);
  return 0;
}
