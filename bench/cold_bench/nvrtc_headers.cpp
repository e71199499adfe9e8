// nvrtc_headers: does NVRTC compile slower when it gets kiln's in-memory header set (every header kiln's
// scan reaches, ~250 over CCCL for a libcu++ kernel, ~800-1,000 over CuPy's tree) than when it reads the
// same include folders itself? One process, one source, the two ways alternating for --rounds rounds:
//   memory   kiln's resolve of the source (includes/src/resolve.hpp): the rewritten source and every
//            header handed in memory, with --no-source-include, as kiln's NVRTC lane compiles it;
//   folders  the source as written with the folders as -I flags, as bare NVRTC compiles it.
// Both with -arch=<target> -std=c++17 -default-device. NVRTC is the library kiln loads (dlopen).
//   build/bench/cold_bench/nvrtc_headers [--rounds 5] [--target sm_90] [--source FILE] [FOLDER...]
// Default source: a small libcu++ kernel over the toolkit's folders (include/, include/cccl). With FOLDERs
// given, those are the folders (e.g. CuPy's five). Prints each round's times and the medians.
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "resolve.hpp"

namespace {

constexpr const char* kDefaultSource =
    "#include <cuda/std/type_traits>\n#include <cuda/std/limits>\n#include <cuda/std/cmath>\n"
    "extern \"C\" __global__ void k(float* o) {\n"
    "  o[threadIdx.x] = cuda::std::numeric_limits<float>::max() * cuda::std::sqrt(2.0f);\n}\n";

struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;

  bool load(const std::string& path) {
    void* library = dlopen(path.c_str(), RTLD_NOW);
    if (library == nullptr) return false;
    const auto sym = [library](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(library, name));
      return f != nullptr;
    };
    return sym(create, "nvrtcCreateProgram") && sym(compile, "nvrtcCompileProgram") &&
           sym(destroy, "nvrtcDestroyProgram") && sym(log_size, "nvrtcGetProgramLogSize") &&
           sym(log, "nvrtcGetProgramLog");
  }

  /// Milliseconds for create + compile; throws with the log's start when the compile fails.
  double time(const std::string& source, const std::vector<const char*>& names, const std::vector<const char*>& texts,
              const std::vector<std::string>& flags) const {
    std::vector<const char*> options;
    for (const std::string& flag : flags) options.push_back(flag.c_str());
    nvrtcProgram program = nullptr;
    const auto start = std::chrono::steady_clock::now();
    create(&program, source.c_str(), "kernel.cu", static_cast<int>(names.size()), texts.data(), names.data());
    const nvrtcResult result = compile(program, static_cast<int>(options.size()), options.data());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::string text;
    if (result != NVRTC_SUCCESS) {
      std::size_t size = 0;
      log_size(program, &size);
      text.resize(size);
      log(program, text.data());
    }
    destroy(&program);
    if (result != NVRTC_SUCCESS) throw std::runtime_error("compile failed: " + text.substr(0, 600));
    return ms;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  std::string target = "sm_90", source = kDefaultSource;
  std::vector<std::filesystem::path> folders;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--target" && i + 1 < argc) {
      target = argv[++i];
    } else if (arg == "--source" && i + 1 < argc) {
      std::ifstream in(argv[++i], std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      source = text.str();
    } else if (!arg.empty() && arg[0] != '-') {
      folders.emplace_back(arg);
    } else {
      fmt::print(stderr, "usage: nvrtc_headers [--rounds 5] [--target sm_90] [--source FILE] [FOLDER...]\n");
      return 2;
    }
  }
  try {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.disabled = true;
    const kiln::Engine engine(config);
    std::string nvrtc_path;
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      for (const kiln::LibraryInfo& library : lane.libraries) {
        if (library.role == "nvrtc") nvrtc_path = library.path;
      }
    }
    Nvrtc nvrtc;
    if (nvrtc_path.empty() || !nvrtc.load(nvrtc_path)) {
      fmt::print(stderr, "nvrtc_headers: no NVRTC ({})\n", nvrtc_path.empty() ? "kiln loaded none" : nvrtc_path);
      return 2;
    }
    if (folders.empty()) {
      const std::filesystem::path root = std::filesystem::path(nvrtc_path).parent_path().parent_path();
      folders = {root / "include", root / "include" / "cccl"};
    }
    kiln::cache::detail::IncludeInput input;
    input.source_name = "kernel.cu";
    input.source_text = source;
    input.folders = folders;
    const kiln::cache::detail::ResolvedIncludes resolved = kiln::cache::detail::resolve_includes(input);
    std::vector<const char*> names, texts;
    std::size_t bytes = 0;
    for (const auto& header : resolved.compiler_headers) {
      names.push_back(header.name.c_str());
      texts.push_back(header.text.data());
      bytes += header.text.size();
    }
    const std::vector<std::string> common = {"-arch=" + target, "-std=c++17", "-default-device"};
    std::vector<std::string> memory_flags = common, folder_flags = common;
    memory_flags.emplace_back("--no-source-include");
    for (const auto& folder : folders) folder_flags.push_back("-I" + folder.string());
    fmt::print("NVRTC {}; {} header(s) in memory ({:.1f} MB); {} folder(s); target {}\n", nvrtc_path, names.size(),
               static_cast<double>(bytes) / 1e6, folders.size(), target);
    std::vector<double> memory, folder;
    for (int round = 0; round < rounds; ++round) {
      // Alternate which goes first, so neither always follows the other.
      if (round % 2 == 0) {
        memory.push_back(nvrtc.time(resolved.compiler_source, names, texts, memory_flags));
        folder.push_back(nvrtc.time(source, {}, {}, folder_flags));
      } else {
        folder.push_back(nvrtc.time(source, {}, {}, folder_flags));
        memory.push_back(nvrtc.time(resolved.compiler_source, names, texts, memory_flags));
      }
      fmt::print("round {}: in memory {:.1f} ms, -I folders {:.1f} ms\n", round, memory.back(), folder.back());
    }
    fmt::print("median: in memory {:.1f} ms, -I folders {:.1f} ms ({:.2f}x)\n", median(memory), median(folder),
               median(memory) / median(folder));
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "nvrtc_headers: {}\n", e.what());
    return 1;
  }
}
