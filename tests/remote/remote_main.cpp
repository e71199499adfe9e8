// Catch2 runner for the tests that need a real redis-server: skips (exit 77) with the reason when this
// build has no Redis client, the machine has no redis-server, or (engine tests) NVRTC is missing.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstdio>

#include "kiln/cache/remote.hpp"
#include "redis_server.hpp"
#ifdef KILN_REMOTE_NEEDS_NVRTC
#include "kiln/engine.hpp"
#endif

int main(int argc, char** argv) {
  if (!kiln::cache::remote_supported()) {
    std::printf("SKIPPED: this kiln was built without hiredis (KILN_HAVE_HIREDIS=0)\n");
    return 77;
  }
  if (!kiln::test::RedisServer::find_binary()) {
    std::printf("SKIPPED: redis-server not found (PATH, /usr/bin/redis-server, or REDIS_SERVER=...)\n");
    return 77;
  }
#ifdef KILN_REMOTE_NEEDS_NVRTC
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    const kiln::Engine engine(config);
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.vendor == kiln::Vendor::cuda && !lane.compiler_loaded) {
        std::printf("SKIPPED: the CUDA compiler (NVRTC) is not available: %s\n", lane.status.c_str());
        return 77;
      }
    }
  }
#endif
  return kiln_test::run_catch(argc, argv);
}
