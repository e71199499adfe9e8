// kiln prewarm and the engine against a hostile newcomer's third probe (round two of the hardening):
// a replayed manifest line that cannot be made here aborted the whole replay; `prewarm --remote` with an
// unusable secret compiled everything first; "compiled, but the cache did not store it" gave no cause;
// a wait for another process's compile was reported as compile time; a damaged dependency manifest was
// replaced without a word, and an unreadable one's warning said "the request recompiles" on a disk hit.
// Needs NVRTC (no GPU); skips without it.
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "harness.hpp"
#include "test_support.hpp"
#include "kiln/cache/lease.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

using namespace kiln::system_test;

constexpr const char* kKernel = "extern \"C\" __global__ void k(int* out) { *out = VALUE; }\n";

/// A KILN_RECORD line for a runtime source with one -I folder.
std::string record_line(const std::string& name, const std::string& folder, int value) {
  const std::string text = "#include <v.h>\\n" + std::string("extern \\\"C\\\" __global__ void k(int* out) { *out = VALUE + ") +
                           std::to_string(value) + "; }\\n";
  return R"({"v":1,"source":")" + name + R"(","builtin":false,"source_hash":"0123456789abcdef0123456789abcdef","text":")" +
         text + R"(","names":[],"options":["-I)" + folder + R"("],"target":"sm_90"})";
}

std::string only_entry_key(const fs::path& root) {
  kiln::cache::StoreConfig config;
  config.root = root;
  const kiln::cache::Store store(config);
  const auto files = store.list();
  REQUIRE(files.size() == 1);
  return files.front().file_hash.hex();
}

}  // namespace

TEST_CASE("prewarm --manifest: a line whose include folder is missing fails alone; the other lines compile") {
  TempDir dir;
  const fs::path folder = dir / "inc";
  fs::create_directories(folder);
  std::ofstream(folder / "v.h") << "#define VALUE 1\n";
  const fs::path manifest = dir / "app.jsonl";
  std::ofstream(manifest) << record_line("good.cu", folder.string(), 1) << "\n"
                          << record_line("gone.cu", (dir / "no-such-folder").string(), 2) << "\n"
                          << record_line("also.cu", folder.string(), 3) << "\n";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()}, {"KILN_CACHE_PACKS", ""}};
  const Result run = run_kiln({"prewarm", "-q", "--json", "--manifest", manifest.string()}, env, dir.path());
  INFO(run.describe());
  CHECK(run.rc == 2);  // a request's own bad input
  const json report = run.parsed();
  CHECK(report.at("summary").at("compiled") == 2);
  CHECK(report.at("summary").at("failed") == 1);
  bool named = false;
  for (const json& request : report.at("requests")) {
    if (request.at("status") != "failed") continue;
    const std::string error = request.at("error");
    named = error.find("manifest " + manifest.string() + " line 2: ") != std::string::npos &&
            error.find("no-such-folder") != std::string::npos;
  }
  CHECK(named);
}

TEST_CASE("prewarm --remote with an unusable secret file is refused before anything compiles") {
  TempDir dir;
  const fs::path secret = dir / "secret";
  std::ofstream(secret) << "too short";
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  const fs::path source = dir / "f.cu";
  std::ofstream(source) << "#define VALUE 1\n" << kKernel;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", (dir / "cache").string()},
                                               {"KILN_CACHE_PACKS", ""},
                                               {"KILN_REMOTE_CACHE", "redis://127.0.0.1:1"},
                                               {"KILN_REMOTE_SECRET_FILE", secret.string()}};
  const Result run = run_kiln({"prewarm", "--remote", "--source", source.string(), "--kernel", "k", "--target", "sm_90"},
                              env, dir.path());
  INFO(run.describe());
  CHECK(run.rc == 2);
  CHECK(count_lines(run.err) == 1);
  CHECK(run.err.find("--remote") != std::string::npos);
  CHECK(run.err.find(secret.string()) != std::string::npos);
  CHECK(run.err.find("continuing without it") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "cache" / "v1"));  // nothing was compiled or stored
}

TEST_CASE("prewarm: a compile the cache did not store names the cause (a world-writable shard directory)") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const fs::path source = dir / "f.cu";
  std::ofstream(source) << "#define VALUE 1\n" << kKernel;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", root.string()}, {"KILN_CACHE_PACKS", ""}};
  const std::vector<std::string> args{"prewarm", "-q", "--source", source.string(), "--kernel", "k", "--target", "sm_90"};
  const Result first = run_kiln(args, env, dir.path());
  INFO(first.describe());
  REQUIRE(first.rc == 0);
  const std::string key = only_entry_key(root);
  const fs::path shard = root / "v1" / key.substr(0, 2);
  fs::remove(shard / (key.substr(2) + ".kiln"));
  REQUIRE(::chmod(shard.c_str(), 0777) == 0);
  const Result second = run_kiln(args, env, dir.path());
  INFO(second.describe());
  CHECK(second.rc == 1);
  const std::size_t failed = second.out.find("failed: ");  // the report's line for the request
  REQUIRE(failed != std::string::npos);
  const std::string line = second.out.substr(failed, second.out.find("\nprewarm:", failed) - failed);
  CHECK(line.find("did not store it: ") != std::string::npos);
  CHECK(line.find(shard.string()) != std::string::npos);
  CHECK(line.find("refused") != std::string::npos);
  REQUIRE(::chmod(shard.c_str(), 0700) == 0);
}

TEST_CASE("Engine::prewarm reports a wait for another process's compile apart from the compile") {
  TempDir dir;
  kiln::EngineConfig config;
  config.runtime = false;
  config.cache.root = dir / "cache";
  kiln::Engine engine(config);
  const kiln::Source source = kiln::Source::from_text("wait.cu", "#define VALUE 4\n" + std::string(kKernel));
  const auto [key, canonical] = engine.describe_key(source, kiln::Options(), {}, "sm_90");
  // A live process's lease that it no longer refreshes: broken once stale, about 3 s from now.
  const kiln::test::LiveChild holder;
  const fs::path lease = dir / "cache" / "lock" / (key.hex() + ".lease");
  fs::create_directories(lease.parent_path());
  std::ofstream(lease) << holder.lease_text();
  fs::last_write_time(lease, fs::file_time_type::clock::now() - (kiln::cache::kLeaseStaleAge - std::chrono::seconds(3)));
  const kiln::PrewarmResult result = engine.prewarm(source, kiln::Options(), {}, "sm_90");
  CHECK(result.origin == kiln::Origin::compiled);
  CHECK(result.wait_seconds >= 2.0);
  CHECK(result.wait_seconds < 10.0);
  CHECK(result.seconds < result.wait_seconds);  // the compile of a one-line kernel, not the wait
}

TEST_CASE("a damaged dependency manifest is replaced with a warning; an unreadable one's warning tells the truth") {
  TempDir dir;
  const fs::path folder = dir / "inc";
  fs::create_directories(folder);
  std::ofstream(folder / "v.h") << "#define VALUE 1\n";
  const fs::path source = dir / "f.cu";
  std::ofstream(source) << "#include <v.h>\n" << kKernel;
  const fs::path root = dir / "cache";
  const std::map<std::string, std::string> env{
      {"KILN_CACHE_DIR", root.string()}, {"KILN_CACHE_PACKS", ""}, {"KILN_LOG", "warn"}};
  const std::vector<std::string> args{"prewarm", "-q",         "--source", source.string(), "--kernel",
                                      "k",       "--target",   "sm_90",    "-I",            folder.string()};
  const Result first = run_kiln(args, env, dir.path());
  INFO(first.describe());
  REQUIRE(first.rc == 0);
  fs::path manifest;
  for (const auto& item : fs::recursive_directory_iterator(root / "manifests")) {
    if (item.is_regular_file() && item.path().extension() == ".kman") manifest = item.path();
  }
  REQUIRE(!manifest.empty());
  std::ofstream(manifest, std::ios::trunc) << "damaged";
  const Result damaged = run_kiln(args, env, dir.path());
  INFO(damaged.describe());
  CHECK(damaged.rc == 0);
  CHECK(damaged.err.find("damaged dependency manifest") != std::string::npos);
  // A manifest that cannot be read (here: a folder in its place) is left alone; the request is a disk
  // hit, so the warning must not say it recompiles.
  fs::remove(manifest);
  fs::create_directory(manifest);
  const Result unreadable = run_kiln(args, env, dir.path());
  INFO(unreadable.describe());
  CHECK(unreadable.rc == 0);
  CHECK(unreadable.err.find("dependency manifest not written") != std::string::npos);
  CHECK(unreadable.err.find("recompiles") == std::string::npos);
}

// Third probe, cosmetics: why-miss wrapped a reason that has parentheses of its own in parentheses.
TEST_CASE("why-miss gives a damaged entry's reason after a colon, not in nested parentheses") {
  TempDir dir;
  const fs::path root = dir / "cache";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", root.string()}, {"KILN_CACHE_PACKS", ""}};
  const std::vector<std::string> request{"--builtin", "saxpy", "--kernel", "saxpy", "--target", "sm_90"};
  std::vector<std::string> prewarm{"prewarm", "-q"};
  prewarm.insert(prewarm.end(), request.begin(), request.end());
  REQUIRE(run_kiln(prewarm, env, dir.path()).rc == 0);
  const std::string key = only_entry_key(root);
  const fs::path entry = root / "v1" / key.substr(0, 2) / (key.substr(2) + ".kiln");
  std::ofstream(entry, std::ios::trunc) << "not an entry (truncated)";
  std::vector<std::string> why{"cache", "why-miss"};
  why.insert(why.end(), request.begin(), request.end());
  const Result run = run_kiln(why, env, dir.path());
  INFO(run.describe());
  CHECK(run.rc == 1);
  CHECK(run.out.find("the entry file is damaged, so the engine deletes it and recompiles: ") != std::string::npos);
  CHECK(run.out.find("damaged (") == std::string::npos);
}

int main(int argc, char** argv) {
  {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    config.runtime = false;
    kiln::Engine engine(config);
    try {
      (void)engine.compile(kiln::Source::from_text("probe.cu", "__global__ void k() {}"), kiln::Options(), {}, "sm_90");
    } catch (const kiln::Error& e) {
      std::printf("SKIPPED: NVRTC cannot compile for sm_90 here: %s\n", e.what());
      return 77;
    }
  }
  return kiln_test::run_catch(argc, argv);
}
