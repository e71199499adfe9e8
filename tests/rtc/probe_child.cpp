// A fresh process for compiler_probe_test: prewarms one built-in request into the cache given, then
// reports how it was served and whether NVRTC was ever mapped into this process:
//   probe_child <cache-dir> <target>   ->   "origin=<compiled|disk|memory> nvrtc_loaded=<0|1>"
//   probe_child <cache-dir> lanes      ->   "nvrtc_loaded=<0|1> builtins_loaded=<0|1>" (compilers loaded, no compile)
#include <cstdio>
#include <fstream>
#include <string>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

const char* origin_name(kiln::Origin origin) {
  switch (origin) {
    case kiln::Origin::memory: return "memory";
    case kiln::Origin::disk: return "disk";
    case kiln::Origin::compiled: return "compiled";
    case kiln::Origin::pack: return "pack";
    case kiln::Origin::remote: return "remote";
  }
  return "?";
}

}  // namespace

/// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const char* name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  try {
    kiln::EngineConfig config;
    config.cache.root = argv[1];
    kiln::Engine engine(config);
    if (std::string(argv[2]) == "lanes") {
      // The compilers loaded (kiln devices does this), nothing compiled.
      (void)engine.lanes();
      std::printf("nvrtc_loaded=%d builtins_loaded=%d\n", mapped("libnvrtc.so") ? 1 : 0,
                  mapped("libnvrtc-builtins.so") ? 1 : 0);
      return 0;
    }
    const kiln::PrewarmResult result = engine.prewarm(kiln::Source::builtin("saxpy"), {}, {}, argv[2]);
    std::printf("origin=%s nvrtc_loaded=%d\n", origin_name(result.origin), mapped("libnvrtc.so") ? 1 : 0);
    return 0;
  } catch (const std::exception& e) {
    std::printf("error=%s\n", e.what());
    return 1;
  }
}
