// include_bench: kernels that include header trees from folders (issue: include directories).
//  1. miss: a CUB kernel compiled through kiln into an empty cache (resolve every #include, compile
//     from memory, write the entry and the dependency manifest) vs a bare NVRTC compile of the same
//     source with the same flags and the same folders as -I (NVRTC reads the headers itself). Runs
//     alternate; medians of N.
//  2. fresh-process disk hit of the same kind of kernel, one side per child process, alternating:
//     kiln (Engine constructed outside the clock; the request: key, manifest, stat every recorded
//     header and probed path, read + verify the entry, and with a GPU load the module and find the
//     kernel) vs the floor (stat the same paths, read the binary, and with a GPU cuModuleLoadData +
//     cuModuleGetFunction). Without a GPU both sides stop before the load (kiln: Engine::prewarm).
//  3. memory-tier hit (GPU only): Engine::kernel for the loaded kernel, ns per call.
//   include_bench [--runs N] [--children N] [--source FILE --kernel NAME] [-I DIR]... [--toolkit-includes]
// Default kernel: CUB's BlockReduce + libcu++'s tuple with --toolkit-includes. With --source, the given
// file and folders are used for 2. and 3. (e.g. a CuPy-style kernel with CuPy's include folders).
#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "../support/fresh_process.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::bench::Clock;
using kiln::bench::Driver;
using kiln::bench::median;
using kiln::bench::ns_since;
using kiln::bench::quantile;
std::string quartiles(const std::vector<double>& ns, double unit, const char* fmt_unit) {
  return fmt::format("{:.2f} / **{:.2f}** / {:.2f} {}", quantile(ns, 0.25) / unit, quantile(ns, 0.5) / unit,
                     quantile(ns, 0.75) / unit, fmt_unit);
}

const char* kDefaultSource =
    "#include <cub/block/block_reduce.cuh>\n"
    "#include <cuda/std/tuple>\n"
    "extern \"C\" __global__ void k(const int* in, int* out) {\n"
    "  using R = cub::BlockReduce<int, 128>;\n"
    "  __shared__ typename R::TempStorage t;\n"
    "  cuda::std::tuple<int, int> p{in[threadIdx.x], 1};\n"
    "  int v = R(t).Sum(cuda::std::get<0>(p) * cuda::std::get<1>(p));\n"
    "  if (threadIdx.x == 0) *out = v;\n}\n";

struct Setup {
  std::string source_name = "cub_tuple.cu";
  std::string source_text = kDefaultSource;
  std::string kernel = "k";
  std::vector<std::string> options{"--toolkit-includes"};
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < s.size()) {
    const std::size_t end = std::min(s.find('\n', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

kiln::EngineConfig config_for(const fs::path& root, bool runtime) {
  kiln::EngineConfig config;
  config.cache.root = root;
  config.runtime = runtime;
  return config;
}

bool has_gpu() {
  try {
    kiln::Engine engine(config_for(fs::temp_directory_path() / "kiln-include-bench-probe", true));
    return !engine.devices().empty();
  } catch (const kiln::Error&) {
    return false;
  }
}

/// The bare NVRTC side of 1.: the source as written, the request's own flags plus -I per folder.
struct BareNvrtc {
  void* library = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile_program = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) get_cubin = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) get_log = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;

  template <typename F>
  F sym(const char* name) {
    void* p = dlsym(library, name);
    if (p == nullptr) throw std::runtime_error(fmt::format("libnvrtc: no {}", name));
    return reinterpret_cast<F>(p);
  }
  explicit BareNvrtc(const std::string& path) {
    library = dlopen(path.c_str(), RTLD_NOW);
    if (library == nullptr) throw std::runtime_error(fmt::format("cannot open {}", path));
    create = sym<decltype(create)>("nvrtcCreateProgram");
    compile_program = sym<decltype(compile_program)>("nvrtcCompileProgram");
    cubin_size = sym<decltype(cubin_size)>("nvrtcGetCUBINSize");
    get_cubin = sym<decltype(get_cubin)>("nvrtcGetCUBIN");
    log_size = sym<decltype(log_size)>("nvrtcGetProgramLogSize");
    get_log = sym<decltype(get_log)>("nvrtcGetProgramLog");
    destroy = sym<decltype(destroy)>("nvrtcDestroyProgram");
  }
  std::size_t compile(const Setup& s, const std::vector<std::string>& flags) const {
    std::vector<const char*> argv;
    for (const std::string& f : flags) argv.push_back(f.c_str());
    nvrtcProgram p = nullptr;
    create(&p, s.source_text.c_str(), s.source_name.c_str(), 0, nullptr, nullptr);
    if (compile_program(p, static_cast<int>(argv.size()), argv.data()) != NVRTC_SUCCESS) {
      std::size_t size = 0;
      log_size(p, &size);
      std::string log(size, '\0');
      get_log(p, log.data());
      throw std::runtime_error(fmt::format("bare NVRTC compile failed:\n{}", log));
    }
    std::size_t size = 0;
    cubin_size(p, &size);
    std::vector<char> cubin(size);
    get_cubin(p, cubin.data());
    destroy(&p);
    return size;
  }
};

/// The nvrtc library kiln loaded, and the folders the request searches (from its key).
struct Facts {
  std::string nvrtc;
  std::vector<std::string> flags;    ///< the request's compiler flags (the key's options part)
  std::vector<std::string> folders;  ///< the include folders (the key's include-folders part)
  kiln::cache::DependencySet dependencies;
  std::string cubin_path;            ///< the entry's binary, written out for the floor
};

std::vector<std::string> key_part_lines(const std::string& canonical, const std::string& name) {
  const auto parts = kiln::cache::CanonicalKey::parse(canonical);
  if (!parts) throw std::runtime_error("a key that does not parse");
  for (const auto& part : *parts) {
    if (part.name == name) return split_lines(part.value);
  }
  return {};
}

// ---- 2. the children ----------------------------------------------------------------------------------

/// One fresh process, one side. Prints "<request ns> <minor page faults during the request>".
int child(const fs::path& dir, bool kiln_side, bool gpu) {
  Setup s;
  s.source_name = read_file(dir / "name");
  s.source_text = read_file(dir / "source.cu");
  s.kernel = read_file(dir / "kernel");
  s.options = split_lines(read_file(dir / "options"));
  const std::vector<std::string> paths = split_lines(read_file(dir / "paths"));
  const std::string cubin_path = (dir / "binary.cubin").string();

  CUfunction (*load)(const std::vector<char>&, const std::string&) = nullptr;
  static decltype(&cuModuleLoadData) cu_load = nullptr;
  static decltype(&cuModuleGetFunction) cu_function = nullptr;
  std::optional<kiln::Engine> engine;
  if (gpu) {
    Driver d;
    auto cu_init = d.get<decltype(&cuInit)>("cuInit");
    auto cu_device = d.get<decltype(&cuDeviceGet)>("cuDeviceGet");
    auto cu_retain = d.get<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
    auto cu_current = d.get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
    cu_load = d.get<decltype(&cuModuleLoadData)>("cuModuleLoadData");
    cu_function = d.get<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
    cu_init(0);
    CUdevice device = 0;
    cu_device(&device, 0);
    CUcontext context = nullptr;
    cu_retain(&context, device);
    cu_current(context);
    load = [](const std::vector<char>& bytes, const std::string& name) {
      CUmodule module = nullptr;
      CUfunction function = nullptr;
      if (cu_load(&module, bytes.data()) != CUDA_SUCCESS || cu_function(&function, module, name.c_str()) != CUDA_SUCCESS) {
        std::exit(4);
      }
      return function;
    };
  }
  if (kiln_side) engine.emplace(config_for(dir / "cache", gpu));
  const kiln::Source source = kiln::Source::from_text(s.source_name, s.source_text);
  const kiln::Options options(s.options);

  struct rusage usage_before {};
  ::getrusage(RUSAGE_SELF, &usage_before);
  const auto t0 = Clock::now();
  if (kiln_side) {
    if (gpu) {
      if (!engine->kernel(source, s.kernel, options)) std::exit(3);
    } else {
      (void)engine->prewarm(source, options, {}, "sm_90");
    }
  } else {
    struct stat st {};
    unsigned found = 0;
    for (const std::string& path : paths) found += ::stat(path.c_str(), &st) == 0 ? 1 : 0;
    std::ifstream in(cubin_path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty() || found == 0) std::exit(4);
    if (gpu) (void)load(bytes, s.kernel);
  }
  const double ns = ns_since(t0);
  struct rusage usage_after {};
  ::getrusage(RUSAGE_SELF, &usage_after);
  const long faults = usage_after.ru_minflt - usage_before.ru_minflt;
  if (kiln_side) {
    const kiln::cache::Counters c = engine->stats();
    if (c.compiles != 0 || c.manifest_hits != 1 || c.include_resolves != 0) {
      fmt::print(stderr, "child: not a hit by stat (compiles {}, manifest hits {}, resolves {})\n", c.compiles,
                 c.manifest_hits, c.include_resolves);
      return 3;
    }
  }
  fmt::print("{} {}\n", ns, faults);
  return 0;
}

struct ChildResult {
  double ns = 0;
  double page_faults = 0;  ///< minor faults in the timed part (fresh memory touched: costly on some VMs)
};

std::optional<ChildResult> run_child(const fs::path& dir, bool kiln_side, bool gpu) {
  const std::optional<std::string> out = kiln::bench::run_self(
      {"--child", dir.string(), kiln_side ? "kiln" : "floor", gpu ? "gpu" : "cpu"}, {{"CUDA_MODULE_LOADING", "EAGER"}});
  if (!out) return std::nullopt;
  std::istringstream in(*out);
  ChildResult result;
  if (!(in >> result.ns >> result.page_faults)) return std::nullopt;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child") {
    return child(argv[2], std::string(argv[3]) == "kiln", std::string(argv[4]) == "gpu");
  }
  int runs = 5;
  int children = 30;
  Setup custom;
  bool custom_source = false;
  std::vector<std::string> folders;
  bool toolkit = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "include_bench: {} needs a value\n", arg);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--runs") runs = std::atoi(value().c_str());
    else if (arg == "--children") children = std::atoi(value().c_str());
    else if (arg == "--source") {
      const fs::path path = value();
      custom.source_name = path.filename().string();
      custom.source_text = read_file(path);
      custom_source = true;
    } else if (arg == "--kernel") custom.kernel = value();
    else if (arg == "-I") folders.push_back(value());
    else if (arg == "--toolkit-includes") toolkit = true;
    else {
      fmt::print(stderr,
                 "usage: include_bench [--runs N] [--children N] [--source FILE --kernel NAME] [-I DIR]... "
                 "[--toolkit-includes]\n");
      return 2;
    }
  }
  if (runs < 1 || children < 2) {
    fmt::print(stderr, "include_bench: --runs >= 1, --children >= 2\n");
    return 2;
  }
  if (custom_source) {
    custom.options.clear();
    for (const std::string& f : folders) custom.options.push_back("-I" + fs::absolute(f).string());
    if (toolkit) custom.options.emplace_back("--toolkit-includes");
  }
  const bool gpu = has_gpu();
  const fs::path scratch = fs::temp_directory_path() / fmt::format("kiln-include-bench-{}", getpid());
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  fmt::print("include_bench: {} (GPU: {})\n", gpu ? "with a device" : "compile-only machine", gpu ? "yes" : "no");

  try {
    // ---- 1. miss: kiln into an empty cache vs bare NVRTC with -I ------------------------------------
    const Setup cub;  // the default CUB + libcu++ kernel with the toolkit's folders
    Facts facts;
    {
      kiln::Engine probe(config_for(scratch / "probe", false));
      const kiln::Source source = kiln::Source::from_text(cub.source_name, cub.source_text);
      (void)probe.prewarm(source, kiln::Options(cub.options), {}, "sm_90");
      for (const kiln::LaneInfo& lane : probe.lanes()) {
        for (const kiln::LibraryInfo& library : lane.libraries) {
          if (library.role == "nvrtc") facts.nvrtc = library.path;
        }
      }
      const auto [hash, canonical] = probe.describe_key(source, kiln::Options(cub.options), {}, "sm_90");
      facts.flags = key_part_lines(canonical, "options");
      facts.folders = key_part_lines(canonical, "include-folders");
    }
    std::vector<std::string> bare_flags = facts.flags;
    for (const std::string& folder : facts.folders) bare_flags.push_back("-I" + folder);
    const BareNvrtc bare(facts.nvrtc);
    std::vector<double> kiln_ms, bare_ms;
    for (int run = 0; run < runs; ++run) {
      for (int side = 0; side < 2; ++side) {
        const bool kiln_first = run % 2 == 0;
        if ((side == 0) == kiln_first) {
          const fs::path root = scratch / fmt::format("miss-{}", run);
          kiln::Engine engine(config_for(root, false));
          const auto t0 = Clock::now();
          const kiln::PrewarmResult r = engine.prewarm(kiln::Source::from_text(cub.source_name, cub.source_text),
                                                       kiln::Options(cub.options), {}, "sm_90");
          kiln_ms.push_back(ns_since(t0) / 1e6);
          if (r.origin != kiln::Origin::compiled) throw std::runtime_error("the miss run did not compile");
        } else {
          const auto t0 = Clock::now();
          (void)bare.compile(cub, bare_flags);
          bare_ms.push_back(ns_since(t0) / 1e6);
        }
      }
    }
    fmt::print("\n## 1. miss: CUB BlockReduce + cuda::std::tuple, sm_90, {} runs each (alternating)\n\n", runs);
    fmt::print("| side | p25 / **median** / p75 |\n|---|---|\n");
    fmt::print("| kiln (resolve + compile from memory + write entry and manifest) | {} |\n", quartiles(kiln_ms, 1, "ms"));
    fmt::print("| bare NVRTC with the same flags and -I folders | {} |\n", quartiles(bare_ms, 1, "ms"));
    fmt::print("\nratio of medians kiln / bare: **{:.3f}x**\n", median(kiln_ms) / median(bare_ms));

    // ---- 2. fresh-process disk hit ----------------------------------------------------------------
    const Setup& hit = custom_source ? custom : cub;
    const fs::path dir = scratch / "hit";
    fs::create_directories(dir);
    std::ofstream(dir / "name") << hit.source_name;
    std::ofstream(dir / "source.cu") << hit.source_text;
    std::ofstream(dir / "kernel") << hit.kernel;
    {
      std::ofstream options(dir / "options");
      for (const std::string& o : hit.options) options << o << '\n';
    }
    std::size_t headers = 0, absent = 0, header_bytes = 0;
    {
      kiln::Engine engine(config_for(dir / "cache", gpu));
      const kiln::Source source = kiln::Source::from_text(hit.source_name, hit.source_text);
      const kiln::PrewarmResult r = engine.prewarm(source, kiln::Options(hit.options), {}, gpu ? "native" : "sm_90");
      kiln::cache::DependencySet dependencies;  // as the manifest recorded them
      const auto key = engine.describe_key(source, kiln::Options(hit.options), {}, gpu ? "native" : "sm_90", &dependencies);
      const auto found = engine.storage().local().get(r.key, key.second);
      if (!found.entry) throw std::runtime_error("the prewarmed entry is not in the store");
      if (dependencies.headers.empty()) throw std::runtime_error("the entry names no dependencies");
      const kiln::cache::DependencySet* deps = &dependencies;
      std::ofstream paths(dir / "paths");
      for (const auto& h : deps->headers) {
        paths << h.path << '\n';
        std::error_code ec;
        header_bytes += static_cast<std::size_t>(fs::file_size(h.path, ec));
      }
      for (const auto& a : deps->absent) paths << a << '\n';
      headers = deps->headers.size();
      absent = deps->absent.size();
      std::ofstream(dir / "binary.cubin", std::ios::binary)
          .write(reinterpret_cast<const char*>(found.entry->payload.data()),
                 static_cast<std::streamsize>(found.entry->payload.size()));
    }
    // A first kiln child records nothing new (the manifest exists); warm the page cache for both sides.
    (void)run_child(dir, true, gpu);
    (void)run_child(dir, false, gpu);
    std::vector<double> kiln_us, floor_us, kiln_faults, floor_faults;
    for (int i = 0; i < 2 * children; ++i) {
      const bool kiln_side = i % 2 == 0;
      const std::optional<ChildResult> child = run_child(dir, kiln_side, gpu);
      if (!child) return 1;
      (kiln_side ? kiln_us : floor_us).push_back(child->ns / 1e3);
      (kiln_side ? kiln_faults : floor_faults).push_back(child->page_faults);
    }
    fmt::print("\n## 2. fresh-process disk hit: {} ({} headers, {} KB; {} paths probed absent), {} children per side\n\n",
               hit.source_name, headers, header_bytes / 1024, absent, children);
    fmt::print("| side | p25 / **median** / p75 |\n|---|---|\n");
    fmt::print("| kiln: {} | {} |\n",
               gpu ? "Engine::kernel (key, manifest by stat, read + verify, load, function)"
                   : "Engine::prewarm (key, manifest by stat, read + verify)",
               quartiles(kiln_us, 1, "us"));
    fmt::print("| floor: stat {} paths + read the binary{} | {} |\n", headers + absent,
               gpu ? " + cuModuleLoadData + cuModuleGetFunction" : "", quartiles(floor_us, 1, "us"));
    fmt::print("\nratio of medians kiln / floor: **{:.3f}x** (page faults in the timed part, median: kiln {:.0f}, "
               "floor {:.0f})\n",
               median(kiln_us) / median(floor_us), median(kiln_faults), median(floor_faults));

    // ---- 3. memory-tier hit -------------------------------------------------------------------------
    if (gpu) {
      kiln::Engine engine(config_for(dir / "cache", true));
      const kiln::Source source = kiln::Source::from_text(hit.source_name, hit.source_text);
      const kiln::Options options(hit.options);
      (void)engine.kernel(source, hit.kernel, options);
      constexpr int kCalls = 1'000'000;
      std::vector<double> per_call;
      for (int round = 0; round < 5; ++round) {
        const auto t0 = Clock::now();
        for (int i = 0; i < kCalls; ++i) {
          if (!engine.kernel(source, hit.kernel, options)) return 1;
        }
        per_call.push_back(ns_since(t0) / kCalls);
      }
      fmt::print("\n## 3. memory-tier hit (Engine::kernel, loaded kernel with include folders): median of 5 x {} calls: "
                 "**{:.1f} ns**\n",
                 kCalls, median(per_call));
    } else {
      fmt::print("\n## 3. memory-tier hit: needs a GPU (skipped)\n");
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "include_bench: {}\n", e.what());
    fs::remove_all(scratch);
    return 1;
  }
  fs::remove_all(scratch);
  return 0;
}
