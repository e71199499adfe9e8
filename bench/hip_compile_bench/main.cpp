// hip_compile_bench: what kiln's AMD compile lane costs, and what worker processes buy.
//
//  1. Each built-in kernel source compiled by HIPRTC through kiln's Compiler (vendor::load_hiprtc) and
//     by a bare HIPRTC call sequence (create, add names, compile, get code, get lowered names, destroy)
//     with the same source, headers, options and target, in the same process, alternating which goes
//     first; median of --runs runs each. Goal: kiln within 3% of bare.
//  2. The whole built-in set prewarmed (Engine::prewarm into a fresh cache) for three gfx targets by 1
//     and by 2 worker processes (fork; tasks handed out longest first through a shared counter). HIPRTC serializes
//     inside a process, so processes are how prewarm scales. Goal on 2 cores: >= 1.7x.
//
// Usage: hip_compile_bench [--runs N] [--repeats N] [--target gfx90a]
// Part 2 runs first: the parent must not have loaded HIPRTC when it forks.
#include <dlfcn.h>
#include <fmt/format.h>
#include <hip/hiprtc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/embedded.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/options.hpp"
#include "kiln/source.hpp"
#include "lanes/lane.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Builtin {
  std::string file;
  std::vector<std::string> names;
};

std::vector<Builtin> builtins() {
  std::vector<Builtin> out;
  for (const kiln::EmbeddedFile& f : kiln::embedded_files()) {
    if (!f.name.ends_with(".cu")) continue;
    Builtin b{std::string(f.name), {}};
    constexpr std::string_view kTag = "//! kiln-kernels:";
    if (const std::size_t at = f.text.find(kTag); at != std::string_view::npos) {
      std::string_view list = f.text.substr(at + kTag.size());
      list = list.substr(0, list.find('\n'));
      while (!list.empty()) {
        const std::size_t semicolon = list.find(';');
        std::string_view name = list.substr(0, semicolon);
        while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
        while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.remove_suffix(1);
        if (!name.empty()) b.names.emplace_back(name);
        if (semicolon == std::string_view::npos) break;
        list.remove_prefix(semicolon + 1);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// CPU seconds (user + system) this process has used: unlike wall time, barely moved by other
/// processes competing for the cores.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// ---- part 2: prewarm with worker processes ---------------------------------------------------------

struct Timing {
  double wall = 0;
  double cpu = 0;  ///< user + system seconds of all workers
};

/// Time to prewarm every (source, target) pair with `workers` forked processes.
Timing prewarm_with_workers(const std::vector<Builtin>& sources, const std::vector<std::string>& targets, int workers) {
  struct Task {
    std::size_t source, target;
  };
  std::vector<Task> tasks;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    for (std::size_t s = 0; s < sources.size(); ++s) tasks.push_back({s, t});
  }
  // Longest first (source size as the estimate), so the last task handed out is a short one and the
  // workers finish together.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return kiln::Source::builtin(sources[a.source].file).text().size() >
           kiln::Source::builtin(sources[b.source].file).text().size();
  });
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / fmt::format("kiln-hip-bench-{}-{}", getpid(), workers);
  std::filesystem::remove_all(cache);
  auto* next = static_cast<std::atomic<std::size_t>*>(
      mmap(nullptr, sizeof(std::atomic<std::size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (next == MAP_FAILED) throw std::runtime_error("mmap failed");
  new (next) std::atomic<std::size_t>(0);

  const auto start = Clock::now();
  std::vector<pid_t> children;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int status = 0;
      try {
        // The HIP lane (no GPU needed to compile): a CUDA driver on the host is not initialised.
        kiln::EngineConfig config;
        config.vendor = kiln::Vendor::hip;
        config.cache.root = cache;
        std::unique_ptr<kiln::Engine> engine_holder;
        try {
          engine_holder = std::make_unique<kiln::Engine>(config);
        } catch (const kiln::DeviceUnavailable&) {
          config.vendor = kiln::Vendor::none;  // no HIP runtime: a compile-only engine still prewarms
          engine_holder = std::make_unique<kiln::Engine>(config);
        }
        kiln::Engine& engine = *engine_holder;
        for (std::size_t i = next->fetch_add(1); i < tasks.size(); i = next->fetch_add(1)) {
          const Builtin& b = sources[tasks[i].source];
          const auto r =
              engine.prewarm(kiln::Source::builtin(b.file), kiln::Options{}, b.names, targets[tasks[i].target]);
          if (r.origin != kiln::Origin::compiled) status = 3;  // a fresh cache: everything must compile
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %d: %s\n", w, e.what());
        status = 2;
      }
      std::_Exit(status);
    }
    children.push_back(pid);
  }
  bool ok = true;
  double cpu = 0;
  for (pid_t pid : children) {
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    cpu += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  const double wall = seconds_since(start);
  munmap(next, sizeof(std::atomic<std::size_t>));
  std::filesystem::remove_all(cache);
  if (!ok) throw std::runtime_error(fmt::format("a prewarm worker failed ({} workers)", workers));
  return {wall, cpu};
}

// ---- part 1: kiln vs bare HIPRTC ----------------------------------------------------------------------

struct BareHiprtc {
#define KILN_BARE(name) decltype(&::name) name = nullptr;
  KILN_BARE(hiprtcCreateProgram)
  KILN_BARE(hiprtcAddNameExpression)
  KILN_BARE(hiprtcCompileProgram)
  KILN_BARE(hiprtcGetProgramLogSize)
  KILN_BARE(hiprtcGetProgramLog)
  KILN_BARE(hiprtcGetCodeSize)
  KILN_BARE(hiprtcGetCode)
  KILN_BARE(hiprtcGetLoweredName)
  KILN_BARE(hiprtcDestroyProgram)
#undef KILN_BARE

  explicit BareHiprtc(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) throw std::runtime_error("cannot dlopen " + path);
#define KILN_BARE(name) name = reinterpret_cast<decltype(name)>(dlsym(h, #name));
    KILN_BARE(hiprtcCreateProgram)
    KILN_BARE(hiprtcAddNameExpression)
    KILN_BARE(hiprtcCompileProgram)
    KILN_BARE(hiprtcGetProgramLogSize)
    KILN_BARE(hiprtcGetProgramLog)
    KILN_BARE(hiprtcGetCodeSize)
    KILN_BARE(hiprtcGetCode)
    KILN_BARE(hiprtcGetLoweredName)
    KILN_BARE(hiprtcDestroyProgram)
#undef KILN_BARE
  }

  /// What a careful hand-written caller does; returns the code size.
  std::size_t compile(const kiln::Source& source, const std::vector<std::string>& names,
                      const std::vector<std::string>& flags) const {
    std::vector<const char*> texts, includes, options;
    for (const kiln::Header& h : source.headers()) {
      texts.push_back(h.text.c_str());
      includes.push_back(h.name.c_str());
    }
    for (const std::string& f : flags) options.push_back(f.c_str());
    const std::string text(source.text());
    hiprtcProgram program = nullptr;
    if (hiprtcCreateProgram(&program, text.c_str(), source.name().c_str(), static_cast<int>(texts.size()), texts.data(),
                            includes.data()) != HIPRTC_SUCCESS) {
      throw std::runtime_error("hiprtcCreateProgram failed");
    }
    for (const std::string& n : names) hiprtcAddNameExpression(program, n.c_str());
    const hiprtcResult result = hiprtcCompileProgram(program, static_cast<int>(options.size()), options.data());
    std::size_t log_size = 0;
    hiprtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) hiprtcGetProgramLog(program, log.data());
    std::size_t size = 0;
    if (result == HIPRTC_SUCCESS) {
      hiprtcGetCodeSize(program, &size);
      std::vector<char> code(size);
      hiprtcGetCode(program, code.data());
      std::vector<std::string> lowered_names;
      for (const std::string& n : names) {
        const char* lowered = nullptr;
        hiprtcGetLoweredName(program, n.c_str(), &lowered);
        lowered_names.emplace_back(lowered != nullptr ? lowered : "");  // copied before destroy
      }
    }
    hiprtcDestroyProgram(&program);
    if (result != HIPRTC_SUCCESS) throw std::runtime_error("bare compile failed: " + log);
    return size;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  int repeats = 3;
  std::string target = "gfx90a";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--target")
      target = argv[i + 1];
  }
  const std::vector<Builtin> sources = builtins();
  std::size_t kernel_count = 0;
  for (const Builtin& b : sources) kernel_count += b.names.size();
  std::printf("# hip_compile_bench\n\nhost: %ld cores online, load average at start %s\n\n",
              sysconf(_SC_NPROCESSORS_ONLN), load_average().c_str());

  // Part 2 first (the parent has not touched HIPRTC yet).
  const std::vector<std::string> targets = {"gfx90a", "gfx1030", "gfx908"};
  std::vector<Timing> one, two;
  try {
    for (int r = 0; r < repeats; ++r) {  // alternate the order: 1,2 then 2,1
      if (r % 2 == 0) {
        one.push_back(prewarm_with_workers(sources, targets, 1));
        two.push_back(prewarm_with_workers(sources, targets, 2));
      } else {
        two.push_back(prewarm_with_workers(sources, targets, 2));
        one.push_back(prewarm_with_workers(sources, targets, 1));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prewarm benchmark failed: %s\n", e.what());
    return 1;
  }
  std::printf("## Prewarm: %zu sources (%zu kernels) x %zu targets (%s), fresh cache, worker processes\n\n",
              sources.size(), kernel_count, targets.size(), "gfx90a, gfx1030, gfx908");
  const auto walls = [](const std::vector<Timing>& v) {
    std::vector<double> w;
    for (const Timing& t : v) w.push_back(t.wall);
    return w;
  };
  const auto cpus = [](const std::vector<Timing>& v) {
    std::vector<double> c;
    for (const Timing& t : v) c.push_back(t.cpu);
    return c;
  };
  const auto runs_text = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) s += fmt::format("{}{:.1f}", s.empty() ? "" : ", ", x);
    return s;
  };
  std::printf(
      "| workers | wall runs (s) | wall median (s) | wall speed-up | worker CPU median (s) | CPU / wall |\n"
      "|---|---|---|---|---|---|\n");
  for (const auto* v : {&one, &two}) {
    const double wall = median(walls(*v)), cpu = median(cpus(*v));
    std::printf("| %d | %s | %.1f | %.2fx | %.1f | %.2f |\n", v == &one ? 1 : 2, runs_text(walls(*v)).c_str(), wall,
                median(walls(one)) / wall, cpu, cpu / wall);
  }
  std::printf("\n");

  // Part 1.
  std::unique_ptr<kiln::vendor::Compiler> compiler;
  try {
    compiler = kiln::vendor::load_hiprtc();
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "no HIPRTC: %s\n", e.what());
    return 1;
  }
  const BareHiprtc bare(compiler->libraries().at(0).path);
  const int warp = target.size() >= 7 ? 32 : 64;  // gfx1xxx: wave32
  std::vector<std::string> flags = kiln::Options{}.vendor_flags(kiln::Vendor::hip);
  flags.push_back("--offload-arch=" + target);
  flags.push_back(fmt::format("-DKILN_WARP_SIZE={}", warp));

  std::printf("## HIPRTC compile: kiln Compiler vs bare hiprtc (%s, %s, median of %d, alternating order)\n\n",
              compiler->identity().c_str(), target.c_str(), runs);
  std::printf("flags: %s\n\n", fmt::format("{}", fmt::join(flags, " ")).c_str());
  std::printf(
      "| source | kernels | bare wall (ms) | kiln wall (ms) | wall: kiln vs bare | bare CPU (ms) | kiln CPU (ms) "
      "| CPU: kiln vs bare | fastest run: kiln vs bare |\n|---|---|---|---|---|---|---|---|---|\n");
  double total_bare = 0, total_kiln = 0, total_bare_cpu = 0, total_kiln_cpu = 0, total_bare_min = 0, total_kiln_min = 0;
  for (const Builtin& b : sources) {
    const kiln::Source source = kiln::Source::builtin(b.file);
    const std::vector<kiln::vendor::HeaderText> headers = kiln::vendor::header_texts(source.headers());
    const kiln::vendor::CompileInput input{source.name(), source.text(), headers, b.names, flags, target};
    (void)compiler->compile(input);  // warm-up: the first compile in a process loads comgr
    std::vector<double> kiln_ms, bare_ms, kiln_cpu, bare_cpu;
    for (int r = 0; r < runs; ++r) {
      const auto time_kiln = [&] {
        const auto t = Clock::now();
        const double c = process_cpu_seconds();
        (void)compiler->compile(input);
        kiln_cpu.push_back((process_cpu_seconds() - c) * 1e3);
        kiln_ms.push_back(seconds_since(t) * 1e3);
      };
      const auto time_bare = [&] {
        const auto t = Clock::now();
        const double c = process_cpu_seconds();
        (void)bare.compile(source, b.names, flags);
        bare_cpu.push_back((process_cpu_seconds() - c) * 1e3);
        bare_ms.push_back(seconds_since(t) * 1e3);
      };
      if (r % 2 == 0) {
        time_kiln();
        time_bare();
      } else {
        time_bare();
        time_kiln();
      }
    }
    const double k = median(kiln_ms), m = median(bare_ms), kc = median(kiln_cpu), mc = median(bare_cpu);
    total_kiln += k;
    total_bare += m;
    total_kiln_cpu += kc;
    total_bare_cpu += mc;
    const double kmin = *std::min_element(kiln_ms.begin(), kiln_ms.end());
    const double mmin = *std::min_element(bare_ms.begin(), bare_ms.end());
    total_kiln_min += kmin;
    total_bare_min += mmin;
    std::printf("| %s | %zu | %.1f | %.1f | %+.1f%% | %.1f | %.1f | %+.1f%% | %.1f vs %.1f (%+.1f%%) |\n",
                b.file.c_str(), b.names.size(), m, k, (k / m - 1) * 100, mc, kc, (kc / mc - 1) * 100, kmin, mmin,
                (kmin / mmin - 1) * 100);
    std::fflush(stdout);
  }
  std::printf("| **all** | %zu | %.1f | %.1f | %+.1f%% | %.1f | %.1f | %+.1f%% | %.1f vs %.1f (%+.1f%%) |\n\n",
              kernel_count, total_bare, total_kiln, (total_kiln / total_bare - 1) * 100, total_bare_cpu, total_kiln_cpu,
              (total_kiln_cpu / total_bare_cpu - 1) * 100, total_kiln_min, total_bare_min,
              (total_kiln_min / total_bare_min - 1) * 100);
  std::printf("load average at end: %s\n", load_average().c_str());
  return 0;
}
