// Bad input to every kiln subcommand is one clear line on stderr ("kiln: error: ...") and exit 2;
// stdout stays empty. Needs no GPU and no compiler (the one case that needs NVRTC checks for it).
#include <catch2/catch.hpp>

#include "harness.hpp"
#include "kiln/engine.hpp"

namespace {

using namespace kiln::system_test;

struct Case {
  std::vector<std::string> args;
  std::string says;  ///< a fragment the error line must contain
  std::map<std::string, std::string> env = {};
};

bool nvrtc_loads() {
  kiln::EngineConfig config;
  config.cache.disabled = true;
  kiln::Engine engine(config);
  for (const kiln::LaneInfo& lane : engine.lanes()) {
    if (lane.vendor == kiln::Vendor::cuda && lane.compiler_loaded) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("bad input to every subcommand is a one-line error and exit status 2") {
  TempDir dir;
  const std::string missing = (dir / "missing.file").string();
  const fs::path not_a_pack = dir / "not-a-pack.kpack";
  std::ofstream(not_a_pack) << "hello, I am not a pack\n";
  const fs::path truncated_pack = dir / "truncated.kpack";
  std::ofstream(truncated_pack, std::ios::binary) << std::string("KILNPAK\x01", 8) << std::string(20, '\0');
  const fs::path bad_manifest = dir / "bad.jsonl";
  std::ofstream(bad_manifest) << "\n{\"v\":1,\"source\":\"saxpy.cu\",\"builtin\":true}\n";
  const fs::path garbage_manifest = dir / "garbage.jsonl";
  std::ofstream(garbage_manifest) << "this is not json\n";

  std::vector<Case> cases = {
      {{"bogus"}, "unknown or missing command"},
      {{}, "unknown or missing command"},
      {{"cache"}, "unknown or missing command after 'kiln cache'"},
      {{"cache", "bogus"}, "commands: path, ls"},
      {{"devices", "--bogus"}, "--bogus"},
      {{"devices"}, "KILN_VENDOR", {{"KILN_VENDOR", "banana"}}},
      {{"prewarm"}, "nothing to prewarm"},
      {{"prewarm", "--all-builtin", "--target", "foo"}, "unknown target 'foo'"},
      {{"prewarm", "--all-builtin", "--target", "sm_90", "--option=--no-such-option"}, "--no-such-option"},
      {{"prewarm", "--source", missing, "--kernel", "k", "--target", "sm_90"}, "cannot read"},
      {{"prewarm", "--source", dir.path().string(), "--kernel", "k", "--target", "sm_90"}, "is a directory"},
      {{"prewarm", "--builtin", "no_such_kernel_file", "--target", "sm_90"}, "no built-in source named"},
      {{"prewarm", "--kernel", "k", "--target", "sm_90"}, "--kernel needs --source"},
      {{"prewarm", "--manifest", missing}, "cannot open"},
      {{"prewarm", "--manifest", bad_manifest.string()}, "line 2: missing \"source_hash\""},
      {{"prewarm", "--manifest", garbage_manifest.string()}, "line 1: not valid JSON"},
      {{"prewarm", "--all-builtin", "-j", "0"}, "--jobs"},
      {{"prewarm", "--all-builtin", "-j", "many"}, "--jobs"},
      {{"prewarm", "--all-builtin", "--workers", "fibers"}, "--workers"},
      {{"cache", "ls", "--sort", "banana"}, "--sort"},
      {{"cache", "ls", "extra"}, "extra"},
      {{"cache", "show"}, "key is required"},
      {{"cache", "show", "xyz"}, "not a key prefix"},
      {{"cache", "show", "ffff"}, "no entry with key prefix ffff"},
      {{"cache", "stats", "--bogus"}, "--bogus"},
      {{"cache", "stats"}, "KILN_CACHE_MAXSIZE", {{"KILN_CACHE_MAXSIZE", "banana"}}},
      {{"cache", "verify", "--bogus"}, "--bogus"},
      {{"cache", "prune"}, "prune needs"},
      {{"cache", "prune", "--max-size", "banana"}, "invalid size 'banana' for --max-size"},
      {{"cache", "prune", "--max-size", "-5"}, "--max-size"},
      {{"cache", "prune", "--older-than", "3x"}, "invalid age '3x'"},
      {{"cache", "prune", "--target", "foo"}, "not a target id"},
      {{"cache", "clear", "extra"}, "extra"},
      {{"cache", "why-miss", "--kernel", "saxpy", "--target", "sm_90"}, "exactly one of --source FILE or --builtin"},
      {{"cache", "why-miss", "--builtin", "saxpy", "--kernel", "saxpy"}, "--target is required"},
      {{"cache", "why-miss", "--builtin", "nope", "--kernel", "saxpy", "--target", "sm_90"}, "no built-in source"},
      {{"cache", "why-miss", "--source", missing, "--kernel", "k", "--target", "sm_90"}, "cannot read"},
      {{"cache", "why-miss", "--builtin", "saxpy", "--kernel", "saxpy", "--target", "foo"}, "unknown target 'foo'"},
      {{"cache", "export"}, "file is required"},
      {{"cache", "export", (dir / "no" / "such" / "dir.kpack").string()}, "cannot create"},
      {{"cache", "import"}, "file is required"},
      {{"cache", "import", missing}, "cannot open"},
      {{"cache", "import", not_a_pack.string()}, "not a kiln pack"},
      {{"cache", "import", truncated_pack.string()}, "truncated"},
  };
  if (nvrtc_loads()) {
    cases.push_back({{"prewarm", "--all-builtin", "--target", "sm_10"}, "not supported by nvrtc"});
    cases.push_back({{"prewarm", "--all-builtin", "--target", "sm_90", "--option=-O3"}, "-Xhip=-O3"});
  }

  for (const Case& c : cases) {
    std::map<std::string, std::string> env = c.env;
    env.emplace("KILN_CACHE_DIR", (dir / "cache").string());
    env.emplace("KILN_CACHE_PACKS", "");
    const Result result = run_kiln(c.args, env, dir.path());
    std::string command = "kiln";
    for (const std::string& arg : c.args) command += " " + arg;
    INFO(command << "\n" << result.describe());
    CHECK(result.rc == 2);
    CHECK(count_lines(result.err) == 1);
    CHECK(result.err.rfind("kiln: error: ", 0) == 0);
    CHECK(result.err.find(c.says) != std::string::npos);
    CHECK(result.out.empty());
  }
}

TEST_CASE("--help documents every subcommand and exits 0") {
  TempDir dir;
  const Result top = run_kiln({"--help"}, {}, dir.path());
  CHECK(top.rc == 0);
  for (const char* command : {"devices", "prewarm", "cache"}) CHECK(top.out.find(command) != std::string::npos);
  const Result cache = run_kiln({"cache", "--help"}, {}, dir.path());
  CHECK(cache.rc == 0);
  for (const char* command :
       {"path", "ls", "show", "stats", "verify", "prune", "clear", "why-miss", "export", "import"}) {
    CHECK(cache.out.find(command) != std::string::npos);
  }
  const Result prewarm = run_kiln({"prewarm", "--help"}, {}, dir.path());
  CHECK(prewarm.rc == 0);
  for (const char* flag :
       {"--target", "--all-builtin", "--source", "--kernel", "--option", "--manifest", "--jobs", "--json"}) {
    CHECK(prewarm.out.find(flag) != std::string::npos);
  }
}
