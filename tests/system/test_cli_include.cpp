// The CLI with include folders, as an operator uses it: prewarm a source that includes headers from
// -I folders -> `cache show` lists the headers the entry was compiled from -> `why-miss` says hit, then,
// after an edit, names the header that changed (from the dependency manifest and in the nearest entry's
// key) -> `cache stats` counts the manifest -> `cache clear` removes it. Needs NVRTC (sm_90, no GPU).
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <fstream>

#include "harness.hpp"
#include "kiln/engine.hpp"

namespace {

using namespace kiln::system_test;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::size_t manifest_files(const fs::path& cache) {
  std::size_t count = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(cache / "manifests", ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    count += it->path().extension() == ".kman" ? 1 : 0;
  }
  return count;
}

}  // namespace

TEST_CASE("include folders through the CLI: show lists headers, why-miss names the changed one, stats, clear") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  const fs::path inc = dir / "inc";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};
  write(dir / "k.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  write(inc / "lib/value.h", "#pragma once\n#include \"detail.h\"\n#define VALUE (DETAIL + 1)\n");
  write(inc / "lib/detail.h", "#pragma once\n#define DETAIL 1\n");
  const std::vector<std::string> request{"--source", (dir / "k.cu").string(), "--kernel", "k",
                                         "--target", "sm_90", "-I", inc.string()};
  const auto kiln = [&](std::vector<std::string> head, bool with_request = true) {
    if (with_request) head.insert(head.end(), request.begin(), request.end());
    return run_kiln(head, env, dir.path());
  };

  const Result prewarm = kiln({"prewarm", "--json"});
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);
  const std::string key = prewarm.parsed().at("requests").at(0).at("key").get<std::string>();
  CHECK(manifest_files(cache) == 1);
  // Prewarm again: settled by the manifest (stat only), no header read, nothing compiled.
  const auto lifetime = [&] { return kiln({"cache", "stats", "--json"}, false).parsed().at("lifetime"); };
  const json before = lifetime();
  const Result again = kiln({"prewarm", "--json"});
  REQUIRE(again.rc == 0);
  CHECK(again.parsed().at("summary").at("cached") == 1);
  const json after = lifetime();
  CHECK(after.at("include_resolves") == before.at("include_resolves"));
  CHECK(after.at("manifest_hits").get<std::uint64_t>() > before.at("manifest_hits").get<std::uint64_t>());

  // A pack of this cache serves another machine with the same tree at the same paths: it has no
  // manifest, resolves once (same headers, same key) and hits the pack without compiling.
  const fs::path pack = dir / "include.kpack";
  REQUIRE(kiln({"cache", "export", pack.string()}, false).rc == 0);
  const std::map<std::string, std::string> packed{{"KILN_CACHE_DIR", (dir / "other").string()},
                                                  {"KILN_CACHE_PACKS", pack.string()}};
  std::vector<std::string> from_pack{"prewarm", "--json"};
  from_pack.insert(from_pack.end(), request.begin(), request.end());
  const Result served = run_kiln(from_pack, packed, dir.path());
  INFO(served.describe());
  REQUIRE(served.rc == 0);
  CHECK(served.parsed().at("summary").at("compiled") == 0);
  CHECK(served.parsed().at("requests").at(0).at("key") == key);

  // A cache that only imported the entry (no manifest of the request): show gives the count, and says
  // where the list lives.
  const std::map<std::string, std::string> third{{"KILN_CACHE_DIR", (dir / "third").string()}, {"KILN_CACHE_PACKS", ""}};
  REQUIRE(run_kiln({"cache", "import", pack.string()}, third, dir.path()).rc == 0);
  const Result bare_show = run_kiln({"cache", "show", key}, third, dir.path());
  INFO(bare_show.describe());
  CHECK(bare_show.rc == 0);
  // (1 place probed: kiln/rtc.h's <stdint.h>, in a branch the lean walk cannot decide; its includes of the
  // HIP and CUDA runtime headers are in branches it knows NVRTC does not take.)
  CHECK(bare_show.out.find("headers   2 read from include folders (1 path probed and found absent); the list is in "
                           "the request's dependency manifest, which this cache does not hold") != std::string::npos);
  const json bare_json = run_kiln({"cache", "show", key, "--json"}, third, dir.path()).parsed();
  CHECK(bare_json.at("headers_count") == 2);
  CHECK(bare_json.at("headers_listed") == false);
  CHECK(bare_json.at("headers").empty());

  // show: the headers the entry was compiled from, by path and digest.
  const Result show = kiln({"cache", "show", key}, false);
  INFO(show.describe());
  REQUIRE(show.rc == 0);
  CHECK(show.out.find("headers   2 read from include folders") != std::string::npos);
  CHECK(show.out.find((inc / "lib/value.h").string()) != std::string::npos);
  CHECK(show.out.find((inc / "lib/detail.h").string()) != std::string::npos);
  const json shown = kiln({"cache", "show", key, "--json"}, false).parsed();
  REQUIRE(shown.at("headers").size() == 2);
  CHECK(shown.at("headers").at(0).at("path") == (inc / "lib/value.h").string());
  CHECK(shown.at("headers").at(0).at("digest").get<std::string>().size() == 32);

  // why-miss: a hit, then an edit names the header, from the manifest and in the key difference.
  const Result hit = kiln({"cache", "why-miss"});
  INFO(hit.describe());
  CHECK(hit.rc == 0);
  CHECK(hit.out.rfind("hit:", 0) == 0);
  write(inc / "lib/detail.h", "#pragma once\n#define DETAIL 2\n");
  const Result miss = kiln({"cache", "why-miss"});
  INFO(miss.describe());
  CHECK(miss.rc == 1);
  CHECK(miss.out.find("dependency manifest: 1 recorded result(s)") != std::string::npos);
  CHECK(miss.out.find("changed " + (inc / "lib/detail.h").string()) != std::string::npos);
  CHECK(miss.out.find("dependencies: " + (inc / "lib/detail.h").string() + ": bytes differ") != std::string::npos);
  const json miss_json = kiln({"cache", "why-miss", "--json"}).parsed();
  CHECK(miss_json.at("manifest").at("results").at(0).at("change") == "changed");
  CHECK(miss_json.at("manifest").at("results").at(0).at("path") == (inc / "lib/detail.h").string());

  // A header appearing in an earlier folder: named as appeared.
  write(inc / "lib/detail.h", "#pragma once\n#define DETAIL 1\n");
  const fs::path earlier = dir / "earlier";
  write(earlier / "lib/value.h", "#define VALUE 5\n");
  std::vector<std::string> shadow_args{"cache", "why-miss", "-I", earlier.string()};
  shadow_args.insert(shadow_args.end(), request.begin(), request.end());
  const Result shadow = run_kiln(shadow_args, env, dir.path());
  INFO(shadow.describe());
  CHECK(shadow.rc == 1);
  CHECK(shadow.out.find("dependency manifest: none") != std::string::npos);  // another folder list: another request

  // stats counts the manifest and the engine's include counters; clear removes it.
  const Result stats = kiln({"cache", "stats"}, false);
  INFO(stats.describe());
  CHECK(stats.out.find("manifests         1 ") != std::string::npos);
  CHECK(kiln({"cache", "stats", "--json"}, false).parsed().at("manifests").at("count") == 1);
  const Result clear = kiln({"cache", "clear"}, false);
  INFO(clear.describe());
  CHECK(clear.rc == 0);
  CHECK(clear.out.find("and 1 dependency manifest ") != std::string::npos);
  CHECK(manifest_files(cache) == 0);

  // verify checks the manifests too: a damaged one is reported, and --fix removes it.
  REQUIRE(kiln({"prewarm"}).rc == 0);
  fs::path manifest;
  for (const auto& item : fs::recursive_directory_iterator(cache / "manifests")) {
    if (item.path().extension() == ".kman") manifest = item.path();
  }
  REQUIRE_FALSE(manifest.empty());
  CHECK(kiln({"cache", "verify"}, false).rc == 0);
  write(manifest, "not a manifest");
  const Result verify = kiln({"cache", "verify"}, false);
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  CHECK(verify.out.find("bad manifest: ") != std::string::npos);
  CHECK(verify.out.find(manifest.string()) != std::string::npos);
  CHECK(verify.out.find("1 dependency manifest: 0 ok, 1 bad") != std::string::npos);
  const json verified = kiln({"cache", "verify", "--json"}, false).parsed();
  CHECK(verified.at("manifests").at("bad") == 1);
  CHECK(verified.at("bad_manifests").at(0).at("path") == manifest.string());
  const Result fixed = kiln({"cache", "verify", "--fix"}, false);
  INFO(fixed.describe());
  CHECK(fixed.rc == 0);
  CHECK(fixed.out.find("(removed)") != std::string::npos);
  CHECK_FALSE(fs::exists(manifest));
  CHECK(kiln({"cache", "verify"}, false).rc == 0);
}

TEST_CASE("a missing header's one-line prewarm failure says where kiln looked, with -I and without") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};
  write(dir / "k.cu", "#include \"my.h\"\nextern \"C\" __global__ void k(int* out) { *out = 1; }\n");
  fs::create_directories(dir / "empty");
  for (const bool with_folder : {false, true}) {
    INFO((with_folder ? "with -I" : "without -I"));
    std::vector<std::string> args{"prewarm", "--source", (dir / "k.cu").string(), "--kernel", "k", "--target", "sm_90"};
    if (with_folder) args.insert(args.end(), {"-I", (dir / "empty").string()});
    const Result run = run_kiln(args, env, dir.path());
    INFO(run.describe());
    CHECK(run.rc != 0);
    // The report's one line per failure, not only with --verbose.
    std::string line;
    for (std::size_t at = run.out.find("failed: "); at != std::string::npos;) {
      line = run.out.substr(at, run.out.find('\n', at) - at);
      break;
    }
    CHECK(line.find("my.h") != std::string::npos);
    CHECK(line.find(with_folder ? "include folders searched: " + (dir / "empty").string()
                                : std::string("no include folder was given")) != std::string::npos);
    CHECK(line.find("working directory") != std::string::npos);  // the explanation whole, not cut short
    CHECK(line.find("...") == std::string::npos);
  }
}

TEST_CASE("a KILN_RECORD with a relative -I replays from another directory into an empty cache, same key") {
  TempDir dir;
  write(dir / "inc/lib/value.h", "#define VALUE 3\n");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  kiln::PrewarmResult recorded;
  {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = dir / "first";
    config.record_path = (dir / "rec.jsonl").string();
    kiln::Engine engine(config);
    recorded = engine.prewarm(
        kiln::Source::from_text("k.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* o) { *o = VALUE; }\n"),
        kiln::Options({"-Iinc"}), {}, "sm_90");
  }
  fs::current_path(cwd);
  const std::string record = read_all(dir / "rec.jsonl");
  INFO(record);
  CHECK(record.find((dir / "inc").string()) != std::string::npos);  // written absolute
  const fs::path elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  const Result replay = run_kiln({"prewarm", "--manifest", (dir / "rec.jsonl").string(), "--json"},
                                 {{"KILN_CACHE_DIR", (dir / "second").string()}, {"KILN_CACHE_PACKS", ""}}, elsewhere);
  INFO(replay.describe());
  REQUIRE(replay.rc == 0);
  CHECK(replay.parsed().at("requests").at(0).at("key") == recorded.key.hex());
}

TEST_CASE("prewarm -j 2 with -I settles each request once: a miss resolved by the worker that compiles it") {
  // The command plans each request (its manifest by stat at most, no header read) and the process that
  // serves it settles it, once: over the command and its workers, one resolve per miss, none for a hit.
  TempDir dir;
  const fs::path cache = dir / "cache";
  // The lean walk on (the default): its macros include each option set's -D, so no request's resolve is one
  // a worker kept from another's, and each miss counts one resolve.
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()},
                                               {"KILN_CACHE_PACKS", ""},
                                               {"KILN_REMOTE_CACHE", ""},
                                               {"KILN_LEAN_HEADERS", "1"}};
  write(dir / "k.cu", "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  write(dir / "inc/lib/value.h", "#pragma once\n#define VALUE 3\n");
  std::vector<std::string> args{"prewarm", "--source", (dir / "k.cu").string(), "--kernel", "k", "--target", "sm_90"};
  args.insert(args.end(), {"-I", (dir / "inc").string(), "--option-set=-DA=1", "--option-set=-DA=2",
                           "--option-set=-DA=3", "-j", "2", "--json"});
  const auto lifetime = [&] { return run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed().at("lifetime"); };

  const Result first = run_kiln(args, env, dir.path());
  INFO(first.describe());
  REQUIRE(first.rc == 0);
  CHECK(first.parsed().at("summary").at("compiled") == 3);
  const json compiled = lifetime();
  CHECK(compiled.at("include_resolves") == 3);  // one per miss (the command resolved none)
  CHECK(compiled.at("compiles") == 3);

  // Again: every request settled by its manifest, once, and served from the cache; nothing resolved.
  const Result again = run_kiln(args, env, dir.path());
  INFO(again.describe());
  REQUIRE(again.rc == 0);
  CHECK(again.parsed().at("summary").at("cached") == 3);
  const json cached = lifetime();
  CHECK(cached.at("include_resolves") == 3);
  CHECK(cached.at("manifest_hits").get<std::uint64_t>() == compiled.at("manifest_hits").get<std::uint64_t>() + 3);
}

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    kiln::Engine engine(config);
    bool nvrtc = false;
    for (const kiln::LaneInfo& lane : engine.lanes()) nvrtc = nvrtc || (lane.vendor == kiln::Vendor::cuda && lane.compiler_loaded);
    if (!nvrtc) {
      std::printf("SKIPPED: NVRTC does not load\n");
      return 77;
    }
  }
  return kiln_test::run_catch(argc, argv);
}
