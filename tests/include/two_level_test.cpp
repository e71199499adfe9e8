// The two-level key through the engine: a request with include folders names a dependency manifest,
// which names the entry once the recorded headers are checked by stat. Each Engine here stands for a
// process (its own memory tier; only the cache root is shared). What is proven: a later engine is
// served by stat alone (no header read, no compile); edits, shadowing headers and vanished headers are
// never served a stale binary; one manifest holds several results; a lost entry or a damaged manifest
// costs a resolve, never a wrong binary; the same relative -I in two directories are two requests; a
// 2,000-header tree. Needs NVRTC (compile-only engines, sm_90); skips with the reason when absent.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <unistd.h>

#include <fstream>
#include <memory>

#include "include_test_support.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

using kiln::Engine;
using kiln::Origin;
using kiln::Source;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

const Source& uses_value() {
  static const Source source = Source::from_text(
      "uses_value.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  return source;
}

/// A folder tree and a cache root shared by the "processes" (engines) of one test.
struct Fixture {
  TempDir dir{"kiln-two-level"};
  std::filesystem::path first = dir.path() / "first";
  std::filesystem::path second = dir.path() / "second";
  std::filesystem::path root = dir.path() / "cache";

  Fixture() {
    std::filesystem::create_directories(first);
    write_file(second, "lib/value.h", "#pragma once\n#include \"detail.h\"\n#define VALUE (DETAIL + 1)\n");
    write_file(second, "lib/detail.h", "#pragma once\n#define DETAIL 1\n");
  }
  [[nodiscard]] std::unique_ptr<Engine> engine() const {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = root;
    return std::make_unique<Engine>(config);
  }
  [[nodiscard]] kiln::Options options() const {
    return kiln::Options({"-I" + first.string(), "--include-path=" + second.string()});
  }
  kiln::PrewarmResult prewarm(Engine& engine, const Source& source = uses_value()) const {
    return engine.prewarm(source, options(), {}, "sm_90");
  }
  [[nodiscard]] std::vector<std::filesystem::path> manifest_files() const {
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root / "manifests", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file() && it->path().extension() == ".kman") out.push_back(it->path());
    }
    return out;
  }
};

}  // namespace

TEST_CASE("a later process is served by stat alone: no header read, no compile", "[include]") {
  Fixture f;
  const auto one = f.engine();
  const kiln::PrewarmResult compiled = f.prewarm(*one);
  CHECK(compiled.origin == Origin::compiled);
  CHECK(one->stats().include_resolves == 1);
  CHECK(one->stats().manifest_hits == 0);
  REQUIRE(f.manifest_files().size() == 1);

  const auto two = f.engine();
  const kiln::PrewarmResult hit = f.prewarm(*two);
  CHECK(hit.key == compiled.key);
  CHECK(hit.origin == Origin::disk);
  CHECK(two->stats().manifest_hits == 1);
  CHECK(two->stats().include_resolves == 0);  // not one header byte read
  CHECK(two->stats().compiles == 0);
}

TEST_CASE("an edit between two processes: the later one never gets the earlier binary", "[include]") {
  Fixture f;
  const kiln::PrewarmResult v1 = f.prewarm(*f.engine());
  // Edited in place, keeping the size: only the bytes (and times) differ.
  write_file(f.second, "lib/detail.h", "#pragma once\n#define DETAIL 2\n");
  const auto two = f.engine();
  const kiln::PrewarmResult v2 = f.prewarm(*two);
  CHECK(v2.key != v1.key);
  CHECK(v2.origin == Origin::compiled);
  CHECK(two->stats().manifest_hits == 0);

  // Two results in one manifest: each version of the tree, written again, is served without a compile.
  REQUIRE(f.manifest_files().size() == 1);
  write_file(f.second, "lib/detail.h", "#pragma once\n#define DETAIL 1\n");
  const auto three = f.engine();
  const kiln::PrewarmResult back = f.prewarm(*three);
  CHECK(back.key == v1.key);
  CHECK(back.origin == Origin::disk);
  CHECK(three->stats().manifest_hits == 1);
  CHECK(three->stats().compiles == 0);
  write_file(f.second, "lib/detail.h", "#pragma once\n#define DETAIL 2\n");
  const auto four = f.engine();
  CHECK(f.prewarm(*four).key == v2.key);
  CHECK(four->stats().manifest_hits == 1);
  CHECK(four->stats().compiles == 0);
}

TEST_CASE("a header appearing in an earlier folder shadows the recorded one: a miss, then its own key",
          "[include]") {
  Fixture f;
  const kiln::PrewarmResult before = f.prewarm(*f.engine());
  write_file(f.first, "lib/value.h", "#define VALUE 7\n");  // found first now
  const auto two = f.engine();
  const kiln::PrewarmResult shadowed = f.prewarm(*two);
  CHECK(shadowed.key != before.key);
  CHECK(shadowed.origin == Origin::compiled);
  CHECK(two->stats().manifest_hits == 0);
  // Removed again: the first result is still in the manifest and still matches.
  std::filesystem::remove(f.first / "lib/value.h");
  const auto three = f.engine();
  CHECK(f.prewarm(*three).key == before.key);
  CHECK(three->stats().manifest_hits == 1);
}

TEST_CASE("a vanished header is a CompileError naming it, never the recorded binary", "[include]") {
  Fixture f;
  (void)f.prewarm(*f.engine());
  std::filesystem::remove(f.second / "lib/detail.h");
  const auto two = f.engine();
  std::string message;
  try {
    (void)f.prewarm(*two);
    FAIL("a request whose header vanished must not be served");
  } catch (const kiln::CompileError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("detail.h") != std::string::npos);
  CHECK(two->stats().manifest_hits == 0);
}

TEST_CASE("a lost entry behind a matching manifest is compiled again under the same key", "[include]") {
  Fixture f;
  const auto one = f.engine();
  const kiln::PrewarmResult compiled = f.prewarm(*one);
  REQUIRE(one->storage().local().remove(compiled.key));
  const auto two = f.engine();
  const kiln::PrewarmResult again = f.prewarm(*two);
  CHECK(again.key == compiled.key);
  CHECK(again.origin == Origin::compiled);
  CHECK(two->stats().manifest_hits == 1);     // the manifest named the key...
  CHECK(two->stats().include_resolves == 1);  // ...and the compile read the headers
  CHECK(two->stats().compiles == 1);
}

TEST_CASE("a damaged manifest costs a resolve, never a wrong binary", "[include]") {
  Fixture f;
  const kiln::PrewarmResult compiled = f.prewarm(*f.engine());
  const std::vector<std::filesystem::path> manifests = f.manifest_files();
  REQUIRE(manifests.size() == 1);
  {
    std::fstream file(manifests.front(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }
  const auto two = f.engine();
  const kiln::PrewarmResult again = f.prewarm(*two);
  CHECK(again.key == compiled.key);
  CHECK(again.origin == Origin::disk);  // resolved: same headers, same key, the entry is there
  CHECK(two->stats().manifest_hits == 0);
  CHECK(two->stats().include_resolves == 1);
  CHECK(two->stats().compiles == 0);
  // Recorded again: the next process is served by stat.
  const auto three = f.engine();
  CHECK(f.prewarm(*three).key == compiled.key);
  CHECK(three->stats().manifest_hits == 1);
}

TEST_CASE("the same relative -I in two directories is two requests", "[include]") {
  Fixture f;
  const std::filesystem::path a = f.dir.path() / "a";
  const std::filesystem::path b = f.dir.path() / "b";
  write_file(a, "inc/lib/value.h", "#define VALUE 1\n");
  write_file(b, "inc/lib/value.h", "#define VALUE 2\n");
  const std::filesystem::path cwd = std::filesystem::current_path();
  const kiln::Options relative({"-Iinc"});
  std::filesystem::current_path(a);
  const kiln::PrewarmResult in_a = f.engine()->prewarm(uses_value(), relative, {}, "sm_90");
  std::filesystem::current_path(b);
  const auto two = f.engine();
  const kiln::PrewarmResult in_b = two->prewarm(uses_value(), relative, {}, "sm_90");
  std::filesystem::current_path(a);
  const auto three = f.engine();
  const kiln::PrewarmResult a_again = three->prewarm(uses_value(), relative, {}, "sm_90");
  std::filesystem::current_path(cwd);
  CHECK(in_b.key != in_a.key);
  CHECK(in_b.origin == Origin::compiled);
  CHECK(two->stats().manifest_hits == 0);
  CHECK(a_again.key == in_a.key);
  CHECK(three->stats().manifest_hits == 1);
}

TEST_CASE("an include through a function-like macro: expanded by kiln, compiled at once, then served by stat; an "
          "edit of that header recompiles",
          "[include]") {
  Fixture f;
  const Source computed = Source::from_text(
      "computed.cu",
      "#define LIB_HEADER(name) <lib/name.h>\n#include LIB_HEADER(value)\n"
      "extern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  const auto one = f.engine();
  const kiln::PrewarmResult compiled = f.prewarm(*one, computed);
  CHECK(compiled.origin == Origin::compiled);
  CHECK(one->stats().compile_failures == 0);  // kiln expanded the macro: lib/value.h was handed over at once
  CHECK(one->stats().compiles == 1);
  const auto two = f.engine();
  const kiln::PrewarmResult hit = f.prewarm(*two, computed);
  CHECK(hit.key == compiled.key);
  CHECK(hit.origin == Origin::disk);
  CHECK(two->stats().manifest_hits == 1);
  write_file(f.second, "lib/value.h", "#pragma once\n#define VALUE 42\n");
  const auto three = f.engine();
  const kiln::PrewarmResult edited = f.prewarm(*three, computed);
  CHECK(edited.key != compiled.key);
  CHECK(edited.origin == Origin::compiled);
  // A name no folder has: the compiler's error, after one compiler run (no retry can find it).
  const auto four = f.engine();
  const Source missing = Source::from_text(
      "missing.cu", "#define LIB_HEADER(name) <lib/name.h>\n#include LIB_HEADER(absent)\n"
                    "extern \"C\" __global__ void k(int* out) { *out = 1; }\n");
  CHECK_THROWS_AS(f.prewarm(*four, missing), kiln::CompileError);
  CHECK(four->stats().compile_failures == 1);
}

TEST_CASE("a 2,000-header generated tree: compiled once, then served by stat; one deep edit recompiles",
          "[include]") {
  Fixture f;
  constexpr int kHeaders = 2000;
  // A chain of 40 headers, each including 50 leaves: every file is reached, none twice.
  std::string top;
  for (int group = 0; group < kHeaders / 50; ++group) {
    std::string text = "#pragma once\n";
    for (int leaf = 0; leaf < 49; ++leaf) {
      const int n = group * 50 + leaf;
      text += "#include \"leaf_" + std::to_string(n) + ".h\"\n";
      write_file(f.second, "gen/leaf_" + std::to_string(n) + ".h",
                 "#ifndef LEAF_" + std::to_string(n) + "\n#define LEAF_" + std::to_string(n) + " " +
                     std::to_string(n % 7) + "\n#endif\n");
    }
    write_file(f.second, "gen/group_" + std::to_string(group) + ".h", text);
    top += "#include <gen/group_" + std::to_string(group) + ".h>\n";
  }
  const Source source = Source::from_text(
      "generated.cu", top + "extern \"C\" __global__ void k(int* out) { *out = LEAF_1958 + LEAF_3; }\n");
  const auto one = f.engine();
  const kiln::PrewarmResult compiled = f.prewarm(*one, source);
  CHECK(compiled.origin == Origin::compiled);
  const auto two = f.engine();
  const kiln::PrewarmResult hit = f.prewarm(*two, source);
  CHECK(hit.key == compiled.key);
  CHECK(hit.origin == Origin::disk);
  CHECK(two->stats().manifest_hits == 1);
  CHECK(two->stats().include_resolves == 0);
  write_file(f.second, "gen/leaf_1958.h", "#ifndef LEAF_1958\n#define LEAF_1958 9\n#endif\n");
  const auto three = f.engine();
  const kiln::PrewarmResult edited = f.prewarm(*three, source);
  CHECK(edited.key != compiled.key);
  CHECK(edited.origin == Origin::compiled);
}

int main(int argc, char** argv) {
  try {
    kiln::EngineConfig config;
    config.runtime = false;
    TempDir probe("kiln-two-level-probe");
    config.cache.root = probe.path();
    Engine engine(config);
    bool nvrtc = false;
    for (const kiln::LaneInfo& lane : engine.lanes()) nvrtc = nvrtc || (lane.vendor == kiln::Vendor::cuda && lane.compiler_loaded);
    if (!nvrtc) kiln::test::skip("NVRTC is not available");
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no compile-only engine: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
