// hello: saxpy from kiln's embedded kernel library. Compiles (or finds in the cache) saxpy for this
// GPU, runs y = a*x + y on 2^20 random floats, checks the result against the CPU, and says which
// device ran it and which vendor library files did the work.
// With no GPU it compiles saxpy for sm_90 into the cache instead (Engine::prewarm needs no device).
// Exit code 0 on success.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

void print_libraries(const kiln::Engine& engine) {
  for (const kiln::LaneInfo& lane : engine.lanes()) {
    std::printf("lane %s: %s\n", std::string(kiln::to_string(lane.vendor)).c_str(), lane.status.c_str());
    for (const kiln::LibraryInfo& library : lane.libraries) {
      std::printf("  %-12s %s (version %s)\n", library.role.c_str(), library.path.c_str(), library.version.c_str());
    }
  }
}

int prewarm_instead(kiln::Engine& engine) {
  const kiln::PrewarmResult result =
      engine.prewarm(kiln::Source::builtin("saxpy"), kiln::Options{}, {"saxpy"}, "sm_90");
  std::printf("no GPU: compiled saxpy for %s into the cache instead (%s, %zu bytes, %.3f s, key %s)\n",
              result.target.c_str(), result.origin == kiln::Origin::disk ? "already cached" : "compiled",
              result.binary_bytes, result.seconds, result.key.hex().c_str());
  print_libraries(engine);
  return 0;
}

}  // namespace

int main() {
  try {
    kiln::Engine engine;
    const std::vector<kiln::DeviceInfo> devices = engine.devices();
    if (devices.empty()) {
      return prewarm_instead(engine);
    }
    const int device = engine.default_device();
    kiln::DeviceInfo info = devices.front();
    for (const kiln::DeviceInfo& candidate : devices) {
      if (candidate.ordinal == device) {
        info = candidate;
      }
    }

    // The same request as `kiln prewarm --all-builtin` and the no-GPU path below make: saxpy is an extern "C"
    // kernel, found by its symbol, so naming it here or not is one request, and one cache entry serves all.
    const kiln::Kernel saxpy =
        engine.program(kiln::Source::builtin("saxpy"), kiln::Options{}, {"saxpy"}).kernel("saxpy");

    constexpr int kN = 1 << 20;
    std::mt19937 rng(20261129);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const float a = 2.5f;
    std::vector<float> x(kN), y(kN), result(kN);
    for (int i = 0; i < kN; ++i) {
      x[i] = uniform(rng);
      y[i] = uniform(rng);
    }
    const std::size_t bytes = kN * sizeof(float);
    void* dx = engine.allocate(bytes);
    void* dy = engine.allocate(bytes);
    engine.copy_to_device(dx, x.data(), bytes);
    engine.copy_to_device(dy, y.data(), bytes);

    kiln::LaunchConfig config;
    config.block = 256;
    config.grid = (kN + 255) / 256;
    saxpy.launch(config, kN, a, static_cast<const float*>(dx), static_cast<float*>(dy));
    engine.copy_to_host(result.data(), dy, bytes);
    engine.synchronize();
    engine.free(dx);
    engine.free(dy);

    int wrong = 0;
    for (int i = 0; i < kN; ++i) {
      const double expected = static_cast<double>(a) * x[i] + y[i];
      const double tolerance = 2.0 * 1.1920929e-7 * (std::fabs(double{a} * x[i]) + std::fabs(double{y[i]}));
      if (!(std::fabs(result[i] - expected) <= tolerance)) {
        if (wrong == 0) {
          std::fprintf(stderr, "mismatch at %d: got %.9g, expected %.9g\n", i, result[i], expected);
        }
        ++wrong;
      }
    }
    const kiln::cache::Counters stats = engine.stats();
    std::printf("saxpy on device %d: %s (%s), n=%d: %s\n", device, info.name.c_str(), info.target.c_str(), kN,
                wrong == 0 ? "correct" : "WRONG");
    std::printf("kernel %s from %s (compiles=%llu, disk hits=%llu)\n", saxpy.lowered_name().c_str(),
                stats.compiles > 0 ? "a fresh compile" : "the cache", static_cast<unsigned long long>(stats.compiles),
                static_cast<unsigned long long>(stats.disk_hits));
    print_libraries(engine);
    if (wrong != 0) {
      std::fprintf(stderr, "%d of %d results wrong\n", wrong, kN);
      return 1;
    }
    return 0;
  } catch (const kiln::DeviceUnavailable& error) {
    std::printf("no GPU and no compiler to prewarm with: %s\n", error.what());
    return 0;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "hello failed: %s\n", error.what());
    return 1;
  }
}
