// kiln prewarm against a hostile newcomer's second probe (issue 20): a kernel name the binary does
// not define passed as "compiled" or "cached"; a compile error was printed twice; why-miss called an entry the engine refuses a hit.
// Needs NVRTC or HIPRTC (no GPU): sm_90 when NVRTC loads, gfx90a when HIPRTC loads.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "harness.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

using namespace kiln::system_test;

std::vector<std::string> g_targets;  // the targets whose compiler loads here

constexpr const char* kSource =
    "extern \"C\" __global__ void real_k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
    "__device__ float helper(float v) { return v + 1.0f; }\n"
    "extern \"C\" __global__ void uses_helper(float* x) { x[0] = helper(x[0]); }\n"
    "__global__ void cpp_k(float* x) { x[0] = 0.0f; }\n";

/// How often `needle` occurs in `text`.
std::size_t occurrences(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

}  // namespace

// R2: `kiln prewarm --source f.cu --kernel k` on a file without k said "compiled"; `--builtin saxpy
// --kernel nosuch` said "cached".
TEST_CASE("prewarm: a kernel the binary does not define is bad input, naming the kernels it has") {
  TempDir dir;
  const fs::path source = dir / "f.cu";
  std::ofstream(source) << kSource;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};

  for (const std::string& target : g_targets) {
    INFO("target " << target);
    const Result missing =
        run_kiln({"prewarm", "--source", source.string(), "--kernel", "nosuch", "--target", target}, env, dir.path());
    INFO(missing.describe());
    CHECK(missing.rc == 2);
    CHECK(occurrences(missing.out + missing.err, "no kernel 'nosuch'") == 1);
    CHECK(missing.out.find("real_k") != std::string::npos);
    CHECK(missing.out.find("uses_helper") != std::string::npos);

    // The binary is valid for its key (plain names are not part of it): it stays, and serves the
    // request that names a kernel it has.
    const Result right =
        run_kiln({"prewarm", "--source", source.string(), "--kernel", "real_k", "--target", target, "--json"}, env,
                 dir.path());
    INFO(right.describe());
    CHECK(right.rc == 0);
    CHECK(right.parsed().at("summary").at("cached") == 1);

    // A wrong name among right ones, at -j 2 in worker processes (two option sets: two compiles).
    const Result workers = run_kiln({"prewarm", "--source", source.string(), "--kernel", "real_k", "--kernel",
                                     "also_missing", "--option-set", "-DA=1", "--option-set", "-DA=2", "-j", "2",
                                     "--target", target, "--json"},
                                    env, dir.path());
    INFO(workers.describe());
    CHECK(workers.rc == 2);
    const json report = workers.parsed();
    CHECK(report.at("summary").at("failed") == 2);
    for (const json& item : report.at("requests")) {
      CHECK_THAT(item.at("error").get<std::string>(), Catch::Contains("no kernel 'also_missing'"));
    }

    // A C++ kernel (not extern "C") has a mangled symbol: its plain name finds nothing; the error says
    // to ask for it by a name expression (a device function as a name expression is the compiler's
    // own error).
    const Result mangled =
        run_kiln({"prewarm", "--source", source.string(), "--kernel", "cpp_k", "--target", target}, env, dir.path());
    INFO(mangled.describe());
    CHECK(mangled.rc == 2);
    CHECK(mangled.out.find("no kernel 'cpp_k'") != std::string::npos);
    CHECK(mangled.out.find("name expression") != std::string::npos);
    if (target == "sm_90") {  // (HIPRTC 5.2 takes no "::name" expression for a function that is no template)
      const Result expression = run_kiln(
          {"prewarm", "--source", source.string(), "--kernel", "::cpp_k", "--target", target}, env, dir.path());
      INFO(expression.describe());
      CHECK(expression.rc == 0);
    }

    // A built-in: cached or not, a kernel it lacks is named.
    for (int round = 0; round < 2; ++round) {
      const Result builtin =
          run_kiln({"prewarm", "--builtin", "saxpy", "--kernel", "nosuch", "--target", target}, env, dir.path());
      INFO(builtin.describe());
      CHECK(builtin.rc == 2);
      CHECK(builtin.out.find("no kernel 'nosuch'") != std::string::npos);
      CHECK(builtin.out.find("saxpy") != std::string::npos);
    }
  }
  if (std::find(g_targets.begin(), g_targets.end(), "sm_90") != g_targets.end()) {
    // PTX (a compute_ target): its `.entry` lines are the kernels.
    const Result ptx =
        run_kiln({"prewarm", "--source", source.string(), "--kernel", "nosuch", "--target", "compute_90"}, env,
                 dir.path());
    INFO(ptx.describe());
    CHECK(ptx.rc == 2);
    CHECK(ptx.out.find("no kernel 'nosuch'") != std::string::npos);
    CHECK(ptx.out.find("real_k") != std::string::npos);
    const Result ptx_right =
        run_kiln({"prewarm", "--source", source.string(), "--kernel", "real_k", "--target", "compute_90"}, env,
                 dir.path());
    INFO(ptx_right.describe());
    CHECK(ptx_right.rc == 0);
  }
}

// R2, through the library: Engine::prewarm checks the plain names it is given (the names of its program
// are checked the same way; a name that is no __global__ function is already the compiler's error).
TEST_CASE("prewarm: Engine::prewarm refuses a kernel the binary does not define; the entry stays") {
  TempDir dir;
  kiln::EngineConfig config;
  config.cache.root = dir / "cache";
  config.runtime = false;
  kiln::Engine engine(config);
  const kiln::Source source = kiln::Source::from_text("f.cu", kSource);
  for (const std::string& target : g_targets) {
    INFO("target " << target);
    CHECK_THROWS_AS(engine.prewarm(source, {}, {}, target, {"nosuch"}), kiln::ConfigError);
    CHECK_THROWS_WITH(engine.prewarm(source, {}, {}, target, {"real_k", "nosuch"}),
                      Catch::Contains("no kernel 'nosuch'") && Catch::Contains("real_k, uses_helper"));
    CHECK(engine.prewarm(source, {}, {}, target, {"real_k", "uses_helper"}).origin == kiln::Origin::disk);
    CHECK(engine.prewarm(source, {}, {"real_k"}, target).binary_bytes > 0);
  }
}

// R11b: the first compile error was printed twice (the progress line and the report).
TEST_CASE("prewarm: a compile error is printed once, and the compiler log once with --verbose") {
  TempDir dir;
  const fs::path source = dir / "bad.cu";
  std::ofstream(source) << "extern \"C\" __global__ void k(float* x) { x[0] = undefined_thing_here; }\n";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  const std::string target = g_targets.front();
  const Result plain = run_kiln({"prewarm", "--source", source.string(), "--kernel", "k", "--target", target}, env,
                                dir.path());
  INFO(plain.describe());
  CHECK(plain.rc == 1);
  CHECK(occurrences(plain.out + plain.err, "undefined_thing_here") == 1);

  const Result verbose = run_kiln(
      {"prewarm", "--source", source.string(), "--kernel", "k", "--target", target, "--verbose"}, env, dir.path());
  INFO(verbose.describe());
  CHECK(verbose.rc == 1);
  // The one-line reason once, the log once (each names the identifier on its error line).
  CHECK(occurrences(verbose.out + verbose.err, "--- log of") == 1);
  CHECK(occurrences(verbose.out + verbose.err, "undefined_thing_here") <= 3);
}

// Second probe: why-miss said "hit: ... is in the local cache" for an entry the engine refuses (the
// cache root, or the entry file, group/world-writable), and exited 0.
TEST_CASE("why-miss: an entry the engine refuses is a miss, and says why") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", root.string()}, {"KILN_CACHE_PACKS", ""}};
  const std::string target = g_targets.front();
  const Result prewarm = run_kiln({"prewarm", "--builtin", "saxpy", "--target", target, "--json"}, env, dir.path());
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);
  const std::string key = prewarm.parsed().at("requests").at(0).at("key").get<std::string>();
  const fs::path entry = root / "v1" / key.substr(0, 2) / (key.substr(2) + ".kiln");
  REQUIRE(fs::exists(entry));
  const std::vector<std::string> args{"cache", "why-miss", "--builtin", "saxpy", "--kernel", "saxpy", "--target", target};
  const Result hit = run_kiln(args, env, dir.path());
  INFO(hit.describe());
  CHECK(hit.rc == 0);

  REQUIRE(::chmod(entry.c_str(), 0666) == 0);
  const Result refused_entry = run_kiln(args, env, dir.path());
  INFO(refused_entry.describe());
  CHECK(refused_entry.rc == 1);
  CHECK(refused_entry.out.find("miss:") != std::string::npos);
  CHECK(refused_entry.out.find("world-writable") != std::string::npos);
  REQUIRE(::chmod(entry.c_str(), 0600) == 0);

  REQUIRE(::chmod(root.c_str(), 0777) == 0);
  const Result refused_root = run_kiln(args, env, dir.path());
  INFO(refused_root.describe());
  CHECK(refused_root.rc == 1);
  CHECK(refused_root.out.find("memory-only") != std::string::npos);
  REQUIRE(::chmod(root.c_str(), 0700) == 0);
}

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    config.runtime = false;
    kiln::Engine engine(config);
    std::string why;
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.compiler_loaded) {
        g_targets.push_back(lane.vendor == kiln::Vendor::cuda ? "sm_90" : "gfx90a");
      } else {
        why += std::string(why.empty() ? "" : "; ") + std::string(kiln::to_string(lane.vendor)) + ": " + lane.status;
      }
    }
    if (g_targets.empty()) {
      std::printf("SKIPPED: no run-time compiler (NVRTC or HIPRTC) loads: %s\n", why.c_str());
      return 77;
    }
    if (!why.empty()) std::printf("note: running with %s only (%s)\n", g_targets[0].c_str(), why.c_str());
  }
  return kiln_test::run_catch(argc, argv);
}
