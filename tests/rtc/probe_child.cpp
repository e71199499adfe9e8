// A fresh process for compiler_probe_test: prewarms one built-in request into the cache given, then
// reports how it was served and whether NVRTC was ever mapped into this process:
//   probe_child <cache-dir> <target>   ->   "origin=<compiled|disk|memory> nvrtc_loaded=<0|1>"
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

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  try {
    kiln::EngineConfig config;
    config.cache.root = argv[1];
    kiln::Engine engine(config);
    const kiln::PrewarmResult result = engine.prewarm(kiln::Source::builtin("saxpy"), {}, {}, argv[2]);
    std::ifstream maps("/proc/self/maps");
    bool loaded = false;
    for (std::string line; std::getline(maps, line);) loaded = loaded || line.find("libnvrtc.so") != std::string::npos;
    std::printf("origin=%s nvrtc_loaded=%d\n", origin_name(result.origin), loaded ? 1 : 0);
    return 0;
  } catch (const std::exception& e) {
    std::printf("error=%s\n", e.what());
    return 1;
  }
}
