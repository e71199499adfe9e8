// A fresh process for pch_store_test: compiles kernels of one header set through an engine over the cache
// given (KILN_PCH and the cache's variables from the environment), writes each binary, and reports what the
// compiles did with precompiled headers:
//   pch_child <cache-dir> <out-dir> <set> <kernel>...
//   -> "made=<n> used=<n> compiled=<n>" then "pch=<the lane's precompiled_headers() line>"
// <set> picks the header (another set: other bytes, so another PCH; from 40 on it names __BASE_FILE__); each
// <kernel> a body (another kernel, in a source named k<kernel>.cu, or $PCH_CHILD_NAME, over the same headers). Exit 0, or 1 with "error=<what>".
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

/// `count` function templates: over kiln's 256 KiB PCH threshold, under the 4 MiB of a heavy set.
std::string heavy_header(int count, int set) {
  std::string text = "#pragma once\n";
  for (int i = 0; i < count; ++i) {
    text += fmt::format("template <class T> __device__ T f{}(T x) {{ return x * {} + {}; }}\n", i, i, set);
  }
  text += fmt::format("#define FLAVOUR {}\n", set);
  // Sets 40 and above name the compile's main file in a header (__BASE_FILE__, baked into a PCH when it is made).
  if (set >= 40) text += "static __device__ const char kBase[] = __BASE_FILE__;\n#define BASE_CHAR kBase[1]\n";
  else text += "#define BASE_CHAR 0\n";
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  // PCH_CHILD_TAKE_HEAP_ADDRESS=1: something of the process holds the address kiln puts NVRTC's PCH heap at
  // (engine/src/lanes/nvrtc_heap.hpp) before the engine starts.
  if (const char* take = std::getenv("PCH_CHILD_TAKE_HEAP_ADDRESS"); take != nullptr && take[0] == '1') {
    void* wanted = reinterpret_cast<void*>(0x2b6900000000ULL);
    if (::mmap(wanted, 1 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != wanted) return 3;
  }
  try {
    kiln::EngineConfig config = kiln::EngineConfig::from_environment();
    config.runtime = false;
    config.cache.root = argv[1];
    const std::filesystem::path out = argv[2];
    const int set = std::atoi(argv[3]);
    std::filesystem::create_directories(out);
    kiln::Engine engine(config);
    const std::vector<kiln::Header> headers = {{"/abs/heavy.h", heavy_header(6000, set)}};
    int compiled = 0;
    for (int i = 4; i < argc; ++i) {
      const int body = std::atoi(argv[i]);
      const std::string text = fmt::format(
          "#include \"/abs/heavy.h\"\n__global__ void k{}(int* p) {{ p[0] = f{}(p[0]) + FLAVOUR + BASE_CHAR; }}\n", body,
          body);
      const char* fixed_name = std::getenv("PCH_CHILD_NAME");  // one name for every kernel
      const std::string name = fixed_name != nullptr ? std::string(fixed_name) : fmt::format("k{}.cu", body);
      const kiln::CompiledBinary binary = engine.compile(kiln::Source::from_text(name, text, headers),
                                                         kiln::Options(),
                                                         {}, "sm_90");
      compiled += binary.origin() == kiln::Origin::compiled ? 1 : 0;
      const auto bytes = binary.bytes();
      std::ofstream(out / fmt::format("{}-{}.bin", set, body), std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    const kiln::cache::Counters stats = engine.stats();
    std::printf("made=%llu used=%llu compiled=%d\n", static_cast<unsigned long long>(stats.pch_made),
                static_cast<unsigned long long>(stats.pch_used), compiled);
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.vendor == kiln::Vendor::cuda) std::printf("pch=%s\n", lane.precompiled_headers.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::printf("error=%s\n", e.what());
    return 1;
  }
}
