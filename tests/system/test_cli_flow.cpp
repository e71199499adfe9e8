// The CLI end to end, as an operator uses it: prewarm the built-in set -> ls lists it -> a program
// requesting the same kernels compiles nothing -> a corrupted entry is reported, removed and
// recompiled -> prune trims -> export / import / a mounted pack serve hits -> why-miss names the
// differing key part -> a recorded manifest replays into an empty cache with the same entries.
// Needs NVRTC or HIPRTC (no GPU): sm_90 when NVRTC loads, gfx90a when HIPRTC loads.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "harness.hpp"
#include "kiln/cache/pack.hpp"
#include "kiln/engine.hpp"

namespace {

using namespace kiln::system_test;

std::vector<std::string> g_targets;  // the targets whose compiler loads here

/// Engine::kernel's rule: a name with any of these characters is a name expression.
bool is_name_expression(const std::string& name) { return name.find_first_of("<>:&( ") != std::string::npos; }

/// The requests `Engine::kernel(source, k)` makes for each listed kernel k of the chosen built-ins:
/// plain names share one program without expressions, each expression is a program of its own.
struct Request {
  kiln::Source source;
  std::vector<std::string> names;
};
std::vector<Request> builtin_requests(const std::vector<std::string>& only = {}) {
  std::vector<Request> requests;
  for (const std::string& name : kiln::Source::builtin_names()) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    const kiln::Source source = kiln::Source::builtin(name);
    bool plain_done = false;
    for (const std::string& kernel : source.listed_kernels()) {
      if (!is_name_expression(kernel)) {
        if (!plain_done) requests.push_back({source, {}});
        plain_done = true;
      } else {
        requests.push_back({source, {kernel}});
      }
    }
  }
  return requests;
}

/// A runtime source with a user header: one plain kernel and one name expression.
kiln::Source runtime_source() {
  return kiln::Source::from_text("user_scale.cu",
                                 "#include <kiln/rtc.h>\n#include \"user/scale.h\"\n"
                                 "KILN_KERNEL void user_scale(float* x, int n) {\n"
                                 "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= kUserFactor; }\n"
                                 "namespace user_ns { template <typename T> __global__ void twice(T* x, int n) {\n"
                                 "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += x[i]; } }\n",
                                 {{"user/scale.h", "#pragma once\n__device__ constexpr float kUserFactor = 3.0f;\n"}});
}

struct Outcome {
  std::size_t requests = 0;
  kiln::cache::Counters counters;
};

/// A program (this process, its own Engine) requesting kernels for every target: what it compiled.
Outcome run_program(const fs::path& cache_root, const std::vector<Request>& requests,
                    const std::vector<std::string>& packs = {}, const std::string& record = {}) {
  kiln::EngineConfig config;
  config.cache.root = cache_root;
  config.packs = packs;
  config.record_path = record;
  kiln::Engine engine(config);
  Outcome outcome;
  for (const std::string& target : g_targets) {
    for (const Request& request : requests) {
      (void)engine.prewarm(request.source, kiln::Options(), request.names, target);
      ++outcome.requests;
    }
  }
  outcome.counters = engine.stats();
  return outcome;
}

std::vector<std::string> prewarm_args(std::vector<std::string> args) {
  for (const std::string& target : g_targets) {
    args.push_back("--target");
    args.push_back(target);
  }
  return args;
}

}  // namespace

TEST_CASE("prewarmed built-ins are listed, serve a program without compiling, survive corruption and prune") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};
  const std::vector<Request> requests = builtin_requests();
  const std::size_t expected = requests.size() * g_targets.size();

  // Prewarm (with -j 2 the compiles go to worker processes).
  const Result prewarm = run_kiln(prewarm_args({"prewarm", "--all-builtin", "-j", "2", "--json"}), env, dir.path());
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);
  const json summary = prewarm.parsed().at("summary");
  CHECK(summary.at("requests") == expected);
  CHECK(summary.at("compiled") == expected);
  CHECK(summary.at("failed") == 0);

  // ls lists every one of them, valid, for every built-in source and target.
  const Result ls = run_kiln({"cache", "ls", "--json"}, env, dir.path());
  REQUIRE(ls.rc == 0);
  const json listing = ls.parsed();
  REQUIRE(listing.size() == expected);
  std::set<std::pair<std::string, std::string>> seen;
  for (const json& item : listing) {
    CHECK(item.at("valid") == true);
    seen.insert({item.at("source").get<std::string>(), item.at("target").get<std::string>()});
  }
  for (const std::string& name : kiln::Source::builtin_names()) {
    for (const std::string& target : g_targets) CHECK(seen.count({name, target}) == 1);
  }
  const Result human_ls = run_kiln({"cache", "ls", "--sort", "size"}, env, dir.path());
  CHECK(human_ls.rc == 0);
  CHECK(human_ls.out.find(std::to_string(expected) + " entries") != std::string::npos);

  // A program requesting the same kernels compiles nothing; prewarm again finds everything cached.
  const Outcome warm = run_program(cache, requests);
  CHECK(warm.requests == expected);
  CHECK(warm.counters.compiles == 0);
  CHECK(warm.counters.disk_hits == expected);
  const Result again = run_kiln(prewarm_args({"prewarm", "--all-builtin", "--json"}), env, dir.path());
  REQUIRE(again.rc == 0);
  CHECK(again.parsed().at("summary").at("cached") == expected);
  CHECK(again.parsed().at("summary").at("compiled") == 0);

  // Corrupt one entry: verify reports it (exit 1), --fix removes it, the next request recompiles it.
  const json victim = listing.front();
  const fs::path victim_path = victim.at("path").get<std::string>();
  {
    std::fstream file(victim_path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(victim_path) / 2));
    file.write("\xde\xad\xbe\xef", 4);
  }
  const Result verify = run_kiln({"cache", "verify"}, env, dir.path());
  INFO(verify.describe());
  CHECK(verify.rc == 1);
  CHECK(verify.out.find(victim.at("key").get<std::string>()) != std::string::npos);
  CHECK(verify.out.find(std::to_string(expected - 1) + " ok, 1 bad") != std::string::npos);
  const Result fix = run_kiln({"cache", "verify", "--fix", "--json"}, env, dir.path());
  CHECK(fix.rc == 0);
  CHECK(fix.parsed().at("removed") == 1);
  CHECK_FALSE(fs::exists(victim_path));
  CHECK(run_kiln({"cache", "verify"}, env, dir.path()).rc == 0);
  const Outcome after_fix = run_program(cache, requests);
  CHECK(after_fix.counters.compiles == 1);
  CHECK(fs::exists(victim_path));

  // stats: entries and bytes per target, and the lifetime counters the engines persisted.
  const Result stats = run_kiln({"cache", "stats", "--json"}, env, dir.path());
  REQUIRE(stats.rc == 0);
  const json counts = stats.parsed();
  CHECK(counts.at("entries") == expected);
  CHECK(counts.at("by_target").size() == g_targets.size());
  CHECK(counts.at("lifetime").at("compiles").get<std::uint64_t>() >= 1);
  CHECK(counts.at("lifetime").at("disk_hits").get<std::uint64_t>() >= 2 * expected - 1);

  // prune: --dry-run and --older-than (everything is fresh) remove nothing; --max-size trims to size.
  const auto bytes = counts.at("bytes").get<std::uint64_t>();
  const Result dry = run_kiln({"cache", "prune", "--max-size", "0", "--dry-run"}, env, dir.path());
  CHECK(dry.rc == 0);
  CHECK(dry.out.find("would remove " + std::to_string(expected) + " entries") != std::string::npos);
  CHECK(run_kiln({"cache", "prune", "--older-than", "1d"}, env, dir.path()).rc == 0);
  CHECK(run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed().at("entries") == expected);
  const Result prune = run_kiln({"cache", "prune", "--max-size", std::to_string(bytes / 2)}, env, dir.path());
  INFO(prune.describe());
  REQUIRE(prune.rc == 0);
  const json pruned = run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed();
  CHECK(pruned.at("bytes").get<std::uint64_t>() <= bytes / 2);
  CHECK(pruned.at("entries").get<std::size_t>() < expected);
  CHECK(pruned.at("entries").get<std::size_t>() > 0);

  if (g_targets.size() > 1) {
    // --target prunes only that target's entries.
    CHECK(run_kiln({"cache", "prune", "--target", g_targets[1]}, env, dir.path()).rc == 0);
    for (const json& item : run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed()) {
      CHECK(item.at("target") != g_targets[1]);
    }
  }
  CHECK(run_kiln({"cache", "clear"}, env, dir.path()).rc == 0);
  CHECK(run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed().empty());
}

TEST_CASE("export, import into an empty cache, and a pack mounted read-only all serve hits") {
  TempDir dir;
  const fs::path first = dir / "first";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", first.string()}, {"KILN_CACHE_PACKS", ""}};
  const std::vector<Request> requests = builtin_requests({"saxpy.cu", "map.cu"});
  const std::size_t expected = requests.size() * g_targets.size();
  const Result prewarm =
      run_kiln(prewarm_args({"prewarm", "--builtin", "saxpy", "--builtin", "map", "-j", "2"}), env, dir.path());
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);

  const fs::path pack = dir / "app.kpack";
  const Result exported = run_kiln({"cache", "export", pack.string()}, env, dir.path());
  INFO(exported.describe());
  REQUIRE(exported.rc == 0);
  CHECK(exported.out.find("export: " + std::to_string(expected) + " entries") != std::string::npos);
  const std::string pack_bytes = read_all(pack);

  // A filtered export holds only that target's entries, each of which verifies.
  const fs::path one_target = dir / "one.kpack";
  REQUIRE(run_kiln({"cache", "export", one_target.string(), "--target", g_targets[0]}, env, dir.path()).rc == 0);
  const auto reader = kiln::cache::PackReader::open(one_target);
  CHECK(reader->records().size() == requests.size());
  for (const kiln::cache::PackRecord& record : reader->records()) {
    const auto entry = reader->read(record);
    REQUIRE(std::holds_alternative<kiln::cache::Entry>(entry));
    CHECK(std::get<kiln::cache::Entry>(entry).target == g_targets[0]);
  }

  // import into an empty cache: the same entries, and a program compiles nothing.
  const fs::path second = dir / "second";
  const std::map<std::string, std::string> env2{{"KILN_CACHE_DIR", second.string()}, {"KILN_CACHE_PACKS", ""}};
  const Result imported = run_kiln({"cache", "import", pack.string()}, env2, dir.path());
  INFO(imported.describe());
  REQUIRE(imported.rc == 0);
  CHECK(imported.out.find(std::to_string(expected) + " imported") != std::string::npos);
  CHECK(sorted_keys(run_kiln({"cache", "ls", "--json"}, env2, dir.path()).parsed()) ==
        sorted_keys(run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed()));
  CHECK(run_program(second, requests).counters.compiles == 0);
  const Result reimport = run_kiln({"cache", "import", pack.string()}, env2, dir.path());
  CHECK(reimport.out.find(std::to_string(expected) + " already present") != std::string::npos);

  // A pack mounted under an empty cache serves every request; the pack itself is never written.
  const fs::path third = dir / "third";
  const Outcome mounted = run_program(third, requests, {pack.string()});
  CHECK(mounted.counters.compiles == 0);
  CHECK(read_all(pack) == pack_bytes);
  const std::map<std::string, std::string> env3{{"KILN_CACHE_DIR", (dir / "fourth").string()},
                                                {"KILN_CACHE_PACKS", pack.string()}};
  const Result why = run_kiln(
      {"cache", "why-miss", "--builtin", "saxpy", "--kernel", "saxpy", "--target", g_targets[0]}, env3, dir.path());
  INFO(why.describe());
  CHECK(why.rc == 0);
  CHECK(why.out.find("pack " + pack.string()) != std::string::npos);

  // A damaged pack: import refuses it with one line; mounted, it never fails a request (it compiles).
  const fs::path damaged = dir / "damaged.kpack";
  {
    std::string bytes = pack_bytes;
    bytes[bytes.size() - 40] = static_cast<char>(bytes[bytes.size() - 40] ^ 0x5a);  // inside the index
    std::ofstream(damaged, std::ios::binary) << bytes;
  }
  const Result refused = run_kiln({"cache", "import", damaged.string()}, env2, dir.path());
  CHECK(refused.rc == 2);
  CHECK(count_lines(refused.err) == 1);
  CHECK(refused.err.find("index checksum mismatch") != std::string::npos);
  const Outcome despite = run_program(dir / "fifth", builtin_requests({"saxpy.cu"}), {damaged.string()});
  CHECK(despite.counters.compiles == g_targets.size());
}

TEST_CASE("why-miss names the key part that differs: an option, a target") {
  TempDir dir;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  REQUIRE(run_kiln(prewarm_args({"prewarm", "--builtin", "saxpy", "-q"}), env, dir.path()).rc == 0);
  const std::string target = g_targets[0];
  const std::vector<std::string> base{"cache", "why-miss", "--builtin", "saxpy", "--kernel", "saxpy"};
  const auto why = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kiln(args, env, dir.path());
  };

  const Result hit = why({"--target", target});
  INFO(hit.describe());
  CHECK(hit.rc == 0);
  CHECK(hit.out.rfind("hit:", 0) == 0);

  // A changed option: exactly the options part differs.
  const Result option = why({"--target", target, "--option=--fast-math", "--json"});
  INFO(option.describe());
  REQUIRE(option.rc == 1);
  const json option_diff = option.parsed().at("nearest").at("differences");
  REQUIRE(option_diff.size() == 1);
  CHECK(option_diff[0].at("part") == "options");
  const Result option_text = why({"--target", target, "--option=--fast-math"});
  CHECK(option_text.out.find("1 key part differs") != std::string::npos);
  CHECK(option_text.out.find("  options: ") != std::string::npos);

  // A changed target: the target part differs and names both targets.
  const std::string other = target.starts_with("sm_") ? "sm_80" : "gfx1030";
  const Result moved = why({"--target", other, "--json"});
  INFO(moved.describe());
  REQUIRE(moved.rc == 1);
  bool named = false;
  const json moved_json = moved.parsed();
  for (const json& difference : moved_json.at("nearest").at("differences")) {
    if (difference.at("part") != "target") continue;
    const auto text = difference.at("description").get<std::string>();
    named = text.find(target) != std::string::npos && text.find(other) != std::string::npos;
  }
  CHECK(named);
  CHECK(why({"--target", other}).out.find("  target: " + target + " -> " + other) != std::string::npos);
}

TEST_CASE("prewarm --target lto_90 stores LTO-IR; ls, show, verify and prune name and keep the kind") {
  if (std::find(g_targets.begin(), g_targets.end(), "sm_90") == g_targets.end()) {
    WARN("no NVRTC here: lto_90 (NVIDIA LTO-IR) is not tried");
    return;
  }
  TempDir dir;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  const Result prewarm = run_kiln(
      {"prewarm", "--builtin", "saxpy", "--target", "lto_90", "--target", "sm_90", "--json"}, env, dir.path());
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);
  CHECK(prewarm.parsed().at("summary").at("compiled") == 2);

  const Result ls = run_kiln({"cache", "ls", "--json"}, env, dir.path());
  REQUIRE(ls.rc == 0);
  std::map<std::string, std::string> kind_of;  // target -> payload kind
  std::string lto_key;
  for (const json& item : ls.parsed()) {
    CHECK(item.at("valid") == true);
    kind_of[item.at("target").get<std::string>()] = item.at("payload_kind").get<std::string>();
    if (item.at("target") == "lto_90") lto_key = item.at("key").get<std::string>();
  }
  CHECK(kind_of == std::map<std::string, std::string>{{"lto_90", "ltoir"}, {"sm_90", "cubin"}});
  REQUIRE(lto_key.size() == 32);

  // The table has a KIND column: the LTO-IR entry's line names it.
  const Result human = run_kiln({"cache", "ls"}, env, dir.path());
  REQUIRE(human.rc == 0);
  CHECK(human.out.find("KIND") != std::string::npos);
  bool lto_line = false;
  std::istringstream lines(human.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("lto_90") != std::string::npos) lto_line = line.find(" ltoir ") != std::string::npos;
  }
  CHECK(lto_line);

  const Result show = run_kiln({"cache", "show", lto_key.substr(0, 12)}, env, dir.path());
  INFO(show.describe());
  CHECK(show.rc == 0);
  CHECK(show.out.find("payload   ltoir") != std::string::npos);
  CHECK(run_kiln({"cache", "verify"}, env, dir.path()).rc == 0);

  // prune --target takes the lto_ form and removes that entry only.
  const Result pruned = run_kiln({"cache", "prune", "--target", "lto_90"}, env, dir.path());
  INFO(pruned.describe());
  CHECK(pruned.rc == 0);
  const json left = run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed();
  REQUIRE(left.size() == 1);
  CHECK(left[0].at("target") == "sm_90");
}

TEST_CASE("a manifest recorded with KILN_RECORD replays into an empty cache with the same entries") {
  TempDir dir;
  const fs::path recorded_cache = dir / "recorded";
  const fs::path manifest = dir / "app.jsonl";
  std::vector<Request> requests = builtin_requests({"saxpy.cu", "map.cu", "reduce.cu"});
  const kiln::Source user = runtime_source();
  requests.push_back({user, {}});
  requests.push_back({user, {"user_ns::twice<float>"}});
  const Outcome recorded = run_program(recorded_cache, requests, {}, manifest.string());
  CHECK(recorded.counters.compiles == requests.size() * g_targets.size());
  CHECK(count_lines(read_all(manifest)) == requests.size() * g_targets.size());

  // Replay (-j 1: in-process, unlike the -j 2 runs above) into an empty cache: the same keys.
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "replayed").string()},
                                               {"KILN_CACHE_PACKS", ""}};
  const Result replay = run_kiln({"prewarm", "--manifest", manifest.string(), "-j", "1", "--json"}, env, dir.path());
  INFO(replay.describe());
  REQUIRE(replay.rc == 0);
  CHECK(replay.parsed().at("summary").at("compiled") == requests.size() * g_targets.size());
  const std::map<std::string, std::string> recorded_env{{"KILN_CACHE_DIR", recorded_cache.string()}};
  CHECK(sorted_keys(run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed()) ==
        sorted_keys(run_kiln({"cache", "ls", "--json"}, recorded_env, dir.path()).parsed()));

  // Replayed for a new target (a new GPU): every request is compiled for it.
  const std::string next = g_targets[0].starts_with("sm_") ? "sm_80" : "gfx1030";
  const Result moved =
      run_kiln({"prewarm", "--manifest", manifest.string(), "--target", next, "--json"}, env, dir.path());
  INFO(moved.describe());
  REQUIRE(moved.rc == 0);
  CHECK(moved.parsed().at("summary").at("compiled") == requests.size());
  const json moved_json = moved.parsed();
  for (const json& item : moved_json.at("requests")) CHECK(item.at("target") == next);
}

TEST_CASE("a HIP worker process that dies fails only its request; the others complete") {
  if (std::find(g_targets.begin(), g_targets.end(), "gfx90a") == g_targets.end()) {
    WARN("HIPRTC does not load here: the worker-process path is not exercised");
    return;
  }
  TempDir dir;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  const pid_t kiln = start_program(
      KILN_CLI_PATH, {"prewarm", "--all-builtin", "--target", "gfx90a", "-j", "2", "--json", "-q"}, env, dir.path());
  // Kill the first worker once it has had time to take a request.
  bool killed = false;
  for (int attempt = 0; attempt < 600 && !killed; ++attempt) {
    const std::vector<pid_t> workers = children_of(kiln);
    if (!workers.empty()) {
      ::usleep(300 * 1000);
      killed = ::kill(workers.front(), SIGKILL) == 0;
    } else {
      ::usleep(50 * 1000);
    }
  }
  const Result result = finish(kiln, dir.path());
  INFO(result.describe());
  REQUIRE(killed);
  REQUIRE((result.rc == 0 || result.rc == 1));
  const json report = result.parsed();
  const std::size_t expected = builtin_requests().size();
  REQUIRE(report.at("requests").size() == expected);
  std::size_t died = 0;
  for (const json& item : report.at("requests")) {
    if (item.at("status") == "failed") {
      CHECK_THAT(item.at("error").get<std::string>(),
                 Catch::Contains("worker process died while compiling: killed by signal 9"));
      ++died;
    } else {
      CHECK(item.at("status") == "compiled");
    }
  }
  // The worker held at most one request when it died (none if it was between two).
  CHECK(died <= 1);
  CHECK(result.rc == (died == 0 ? 0 : 1));
}

#ifdef KILN_HELLO_PATH
// The README's path: `kiln prewarm` (which names no kernel), then examples/hello, which asks for saxpy by name
// (Engine::program with {"saxpy"}, or Engine::prewarm without a GPU). saxpy is extern "C": one request, one entry,
// and hello compiles nothing. It used to compile saxpy again, under a key with the name in it.
TEST_CASE("examples/hello after kiln prewarm compiles nothing") {
  if (std::find(g_targets.begin(), g_targets.end(), "sm_90") == g_targets.end()) {
    WARN("hello compiles with NVRTC, which does not load here");
    return;
  }
  TempDir dir;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  const Result prewarm = run_kiln({"prewarm", "--builtin", "saxpy"}, env, dir.path());  // the default targets
  INFO(prewarm.describe());
  REQUIRE(prewarm.rc == 0);
  const Result hello = run_program(KILN_HELLO_PATH, {}, env, dir.path());
  INFO(hello.describe());
  CHECK(hello.rc == 0);
  const bool gpu = hello.out.find("no GPU") == std::string::npos;
  CHECK(hello.out.find(gpu ? "from the cache (compiles=0" : "(already cached,") != std::string::npos);
}
#endif

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
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
