// The first request of an engine whose compiler is not loaded yet (no compiler probe names it): the
// compiler loads on a helper thread while the request's includes are resolved for the identity the
// compiler's files announce (Requests::resolve_ahead, vendor::expected_identity). What is proven: the
// guess of the installed NVRTC is what it reports; the request takes that resolve (one resolve, and the key
// a later engine hits on disk); a dependency manifest still settles a request (the resolve made ahead is
// dropped and not counted); a wrong guess costs a resolve of the request's own, never another set or key.
// Needs NVRTC at a full path (CUDA_HOME, /usr/local/cuda); skips with the reason when absent.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "engine_access.hpp"
#include "include_test_support.hpp"
#include "kiln/base/log.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "lanes/lane.hpp"
#include "stderr_capture.hpp"

namespace fs = std::filesystem;
using kiln::Engine;
using kiln::Origin;
using kiln::Source;
using kiln::Vendor;
using kiln::test::StderrCapture;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

constexpr std::string_view kAhead = "while the compiler loads";
constexpr std::string_view kResolved = "resolved the includes in";

const Source& uses_value() {
  static const Source source = Source::from_text(
      "uses_value.cu",
      "#include <lib/value.h>\n#if LEVEL > 1\n#include <lib/never.h>\n#endif\n"
      "extern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  return source;
}

/// A folder tree and a cache root: each Engine stands for a process.
struct Fixture {
  TempDir dir{"kiln-resolve-ahead"};
  fs::path tree = dir.path() / "tree";
  fs::path root = dir.path() / "cache";

  Fixture() {
    write_file(tree, "lib/value.h", "#pragma once\n#include \"detail.h\"\n#define VALUE (DETAIL + 1)\n#define LEVEL 1\n");
    write_file(tree, "lib/detail.h", "#pragma once\n#define DETAIL 41\n");
  }
  [[nodiscard]] std::unique_ptr<Engine> engine() const {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = root;
    return std::make_unique<Engine>(config);
  }
  kiln::PrewarmResult prewarm(Engine& engine) const {
    return engine.prewarm(uses_value(), kiln::Options({"-I" + tree.string()}), {}, "sm_90");
  }
  /// Removes the compiler probes, so that the next engine must load NVRTC to key a request.
  void forget_probes() const { fs::remove_all(root / "compilers"); }
};

/// Debug lines on stderr for the scope, captured.
struct DebugLog {
  kiln::log::Level before = kiln::log::level();
  StderrCapture capture;
  DebugLog() { kiln::log::set_level(kiln::log::Level::debug); }
  ~DebugLog() { kiln::log::set_level(before); }
  [[nodiscard]] std::size_t count(std::string_view what) const {
    return kiln::test::count_occurrences(capture.text(), what);
  }
};

kiln::EngineConfig compile_only() {
  kiln::EngineConfig config;
  config.runtime = false;
  return config;
}

/// The NVRTC file the engine would load (the first existing path of its search list), or a skip.
fs::path nvrtc_file() {
  Engine engine(compile_only());
  const std::optional<fs::path> file = kiln::detail::EngineAccess::core(engine).compiler_file(Vendor::cuda);
  if (!file) kiln::test::skip("no NVRTC at a full path (CUDA_HOME, KILN_CUDA_PATH, /usr/local/cuda)");
  return *file;
}

}  // namespace

TEST_CASE("expected_identity reads NVRTC's version from the builtins library beside it") {
  using kiln::vendor::expected_identity;
  TempDir dir{"kiln-identity"};
  const fs::path lib = dir.path() / "lib64";
  write_file(lib, "libnvrtc.so.13", "");
  CHECK_FALSE(expected_identity(Vendor::cuda, lib / "libnvrtc.so.13"));  // nothing beside it says
  write_file(lib, "libnvrtc-builtins.alt.so.13.1", "");                    // another library's name
  write_file(lib, "libnvrtc-builtins.so.13.x", "");                        // no version
  write_file(lib, "libnvrtc-builtins.so", "");
  CHECK_FALSE(expected_identity(Vendor::cuda, lib / "libnvrtc.so.13"));
  write_file(lib, "libnvrtc-builtins.so.13.0", "");
  CHECK(expected_identity(Vendor::cuda, lib / "libnvrtc.so.13") == "nvrtc 13.0");
  write_file(lib, "libnvrtc-builtins.so.12.9", "");  // two versions: no guess
  CHECK_FALSE(expected_identity(Vendor::cuda, lib / "libnvrtc.so.13"));
  CHECK_FALSE(expected_identity(Vendor::cuda, dir.path() / "absent" / "libnvrtc.so.13"));
  CHECK_FALSE(expected_identity(Vendor::hip, lib / "libnvrtc.so.13"));  // HIPRTC: never a guess
}

TEST_CASE("the guess for the installed NVRTC is the identity it reports once loaded") {
  const fs::path file = nvrtc_file();
  Engine engine(compile_only());
  std::string loaded;
  for (const kiln::LaneInfo& lane : engine.lanes()) {
    for (const kiln::LibraryInfo& library : lane.libraries) {
      if (library.role == "nvrtc") loaded = "nvrtc " + library.version;
    }
  }
  INFO(file.string());
  REQUIRE_FALSE(loaded.empty());
  CHECK(kiln::vendor::expected_identity(Vendor::cuda, file) == loaded);
}

TEST_CASE("a fresh engine resolves while NVRTC loads, and its first request takes that resolve") {
  (void)nvrtc_file();
  Fixture f;
  kiln::PrewarmResult first;
  {
    auto a = f.engine();
    DebugLog log;
    first = f.prewarm(*a);
    INFO(log.capture.text());
    CHECK(first.origin == Origin::compiled);
    CHECK(log.count(kAhead) == 1);
    CHECK(log.count(kResolved) == 1);  // the request's settle made no resolve of its own
    CHECK(a->stats().include_resolves == 1);
    // The engine's next request knows the compiler: nothing is resolved ahead again.
    CHECK(f.prewarm(*a).origin == Origin::disk);
    CHECK(log.count(kAhead) == 1);
  }
  // A later process with the probe written by the first: no load, no resolve ahead, and the same key
  // (its disk hit proves it), settled by the manifest.
  auto b = f.engine();
  DebugLog log;
  const kiln::PrewarmResult again = f.prewarm(*b);
  CHECK(again.origin == Origin::disk);
  CHECK(again.key == first.key);
  CHECK(log.count(kAhead) == 0);
  CHECK(b->stats().include_resolves == 0);
  CHECK(b->stats().manifest_hits == 1);
}

TEST_CASE("a dependency manifest settles a request even when a resolve was made ahead") {
  (void)nvrtc_file();
  Fixture f;
  const kiln::PrewarmResult first = f.prewarm(*f.engine());
  f.forget_probes();
  auto b = f.engine();
  DebugLog log;
  const kiln::PrewarmResult again = f.prewarm(*b);
  INFO(log.capture.text());
  CHECK(log.count(kAhead) == 1);
  CHECK(again.origin == Origin::disk);
  CHECK(again.key == first.key);
  CHECK(b->stats().manifest_hits == 1);
  CHECK(b->stats().include_resolves == 0);  // the resolve made ahead was dropped, and is not counted
}

TEST_CASE("a wrong guess costs the request a resolve of its own, never another set") {
  const fs::path real = nvrtc_file();
  Fixture f;
  const kiln::PrewarmResult expected = f.prewarm(*f.engine());
  // A copy of NVRTC whose folder names another version: the guess says 12.9, the library says 13.0.
  const fs::path toolkit = f.dir.path() / "toolkit";
  fs::create_directories(toolkit / "lib64");
  fs::copy_file(real, toolkit / "lib64" / real.filename());
  write_file(toolkit / "lib64", "libnvrtc-builtins.so.12.9", "");
  REQUIRE(kiln::vendor::expected_identity(Vendor::cuda, toolkit / "lib64" / real.filename()) == "nvrtc 12.9");
  const kiln::test::ScopedEnv path("KILN_CUDA_PATH", toolkit.string().c_str());
  kiln::EngineConfig config;
  config.runtime = false;
  config.cache.root = f.dir.path() / "other-cache";  // no manifest, no probe: the request resolves
  Engine engine(config);
  DebugLog log;
  kiln::PrewarmResult result;
  try {
    result = f.prewarm(engine);
  } catch (const kiln::Error& e) {
    // NVRTC finds its builtins library by name (the dynamic loader's search), not beside the copy.
    WARN(std::string("not checked: the copied NVRTC does not compile here: ") + e.what());
    return;
  }
  INFO(log.capture.text());
  CHECK(log.count("resolving the includes for 'nvrtc 12.9'") == 1);
  CHECK(log.count(kResolved) == 2);  // ahead (dropped), then the request's own
  CHECK(engine.stats().include_resolves == 1);
  CHECK(result.origin == Origin::compiled);
  CHECK(result.key == expected.key);  // the key of the same request through the installed NVRTC
}
