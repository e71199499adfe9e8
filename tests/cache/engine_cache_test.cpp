// The cache end to end through the Engine with real NVRTC compiles (no GPU needed: prewarm for a
// named target). Each case is one item of issue 3's must-show list. Skips (77) without NVRTC.
#include <sys/resource.h>

#include <thread>

#include "cache_test_support.hpp"
#include "catch_run.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "store_hooks.hpp"
#include "test_support.hpp"

using namespace kiln_test;
using kiln::Origin;

namespace {

kiln::Options variant(int v) {
  kiln::Options options;
  options.define("KILN_STRESS_VARIANT", std::to_string(v));
  return options;
}

kiln::EngineConfig config_for(const fs::path& root) {
  kiln::EngineConfig config;
  config.cache.root = root;
  return config;
}

kiln::PrewarmResult request(kiln::Engine& engine, int v, const std::string& target = "sm_90") {
  return engine.prewarm(kiln::Source::builtin("saxpy"), variant(v), {}, target);
}

Entry read_entry(kiln::cache::Store& store, const fs::path& path) {
  auto parsed = store.read_file(path);
  REQUIRE(std::holds_alternative<Entry>(parsed));
  return std::get<Entry>(std::move(parsed));
}

/// `cache_stress_worker once <root> <variant> <target>` in a child, with `before_exec` run first.
ProcessResult worker_once(const fs::path& root, int v, const std::function<void()>& before_exec = {},
                          const std::vector<std::string>& env = {}) {
  return run_process({KILN_STRESS_WORKER, "once", root.string(), std::to_string(v), "sm_90"}, env, before_exec);
}

}  // namespace

TEST_CASE("engine cache: a damaged entry is recompiled, rewritten, then hit", "[cache]") {
  TempDir dir;
  kiln::Engine engine(config_for(dir.path()));
  const kiln::PrewarmResult first = request(engine, 1);
  REQUIRE(first.origin == Origin::compiled);
  REQUIRE(first.stored);
  const fs::path path = engine.storage().local().entry_path(first.key);
  const std::vector<std::byte> good = read_bytes(path);
  const Entry good_entry = read_entry(engine.storage().local(), path);
  REQUIRE(request(engine, 1).origin == Origin::disk);

  const std::size_t key_at = kiln::cache::kEntryFixedBytes + good_entry.target.size() + good_entry.compiler.size();
  const std::size_t payload_at =
      good.size() - kiln::cache::kEntryEpilogueBytes - good_entry.aux.size() - good_entry.payload.size();
  struct Damage {
    std::string what;
    std::function<void(std::vector<std::byte>&)> apply;
  };
  auto flip = [](std::size_t at) { return [at](std::vector<std::byte>& b) { b[at] ^= std::byte{0xff}; }; };
  const std::vector<Damage> damages = {
      {"header: magic", flip(3)},
      {"header: key hash", flip(33)},
      {"canonical key", flip(key_at + good_entry.canonical_key.size() / 2)},
      {"payload", flip(payload_at + good_entry.payload.size() / 2)},
      {"epilogue: checksum", flip(good.size() - kiln::cache::kEntryEpilogueBytes + 2)},
      {"zero-length", [](std::vector<std::byte>& b) { b.clear(); }},
      {"truncated to half", [](std::vector<std::byte>& b) { b.resize(b.size() / 2); }},
      {"truncated inside the header", [](std::vector<std::byte>& b) { b.resize(40); }},
  };
  for (const Damage& damage : damages) {
    DYNAMIC_SECTION(damage.what) {
      std::vector<std::byte> bytes = good;
      damage.apply(bytes);
      write_bytes(path, bytes);
      const std::uint64_t corrupt_before = engine.stats().corrupt_removed;
      const std::uint64_t compiles_before = engine.stats().compiles;
      const kiln::PrewarmResult again = request(engine, 1);
      CHECK(again.origin == Origin::compiled);
      CHECK(again.stored);
      CHECK(engine.stats().corrupt_removed == corrupt_before + 1);
      CHECK(engine.stats().compiles == compiles_before + 1);
      // Rewritten: a valid entry with the same binary (NVRTC output is deterministic).
      const Entry rewritten = read_entry(engine.storage().local(), path);
      CHECK(rewritten.payload == good_entry.payload);
      CHECK(rewritten.canonical_key == good_entry.canonical_key);
      CHECK(request(engine, 1).origin == Origin::disk);
    }
  }
}

TEST_CASE("engine cache: a forced file-name collision never serves the other kernel", "[cache]") {
  TempDir dir;
  kiln::EngineConfig config = config_for(dir.path());
  const kiln::cache::detail::StoreHooksScope hooks(kiln::cache::detail::file_name_hook([](const Hash128&) {
    return Hash128{0xabc, 0xdef};
  }));
  kiln::Engine engine(config);
  const kiln::PrewarmResult a = request(engine, 1);
  REQUIRE(a.origin == Origin::compiled);
  const kiln::PrewarmResult b = request(engine, 2);
  CHECK(b.origin == Origin::compiled);  // same file, other key: a miss
  CHECK(a.key != b.key);
  const fs::path shared = engine.storage().local().entry_path(a.key);
  REQUIRE(shared == engine.storage().local().entry_path(b.key));
  CHECK(read_entry(engine.storage().local(), shared).key_hash == b.key);
  const kiln::PrewarmResult a_again = request(engine, 1);
  CHECK(a_again.origin == Origin::compiled);  // never b's binary
  CHECK(read_entry(engine.storage().local(), shared).key_hash == a.key);
  CHECK(request(engine, 1).origin == Origin::disk);
  CHECK(engine.stats().compiles == 3);
}

TEST_CASE("engine cache: an sm_80 entry never serves sm_90; another compiler version misses", "[cache]") {
  TempDir dir;
  kiln::Engine engine(config_for(dir.path()));
  const kiln::PrewarmResult sm80 = request(engine, 1, "sm_80");
  REQUIRE(sm80.origin == Origin::compiled);
  const kiln::PrewarmResult sm90 = request(engine, 1, "sm_90");
  CHECK(sm90.origin == Origin::compiled);
  CHECK(sm80.key != sm90.key);
  const Entry e80 = read_entry(engine.storage().local(), engine.storage().local().entry_path(sm80.key));
  const Entry e90 = read_entry(engine.storage().local(), engine.storage().local().entry_path(sm90.key));
  CHECK(e80.target == "sm_80");
  CHECK(e90.target == "sm_90");
  CHECK(e80.payload != e90.payload);

  SECTION("the sm_80 entry placed at the sm_90 entry's path is refused") {
    write_bytes(engine.storage().local().entry_path(sm90.key), read_bytes(engine.storage().local().entry_path(sm80.key)));
    const kiln::PrewarmResult again = request(engine, 1, "sm_90");
    CHECK(again.origin == Origin::compiled);
    CHECK(read_entry(engine.storage().local(), engine.storage().local().entry_path(sm90.key)).target == "sm_90");
  }

  SECTION("an entry written by another compiler version is refused") {
    // The same request as compiled by "nvrtc 12.4": same source, target and options.
    auto parts = CanonicalKey::parse(e90.canonical_key);
    REQUIRE(parts);
    CanonicalKey other_key;
    bool replaced = false;
    for (const auto& part : *parts) {
      if (part.name == "compiler") {
        CHECK(part.value.starts_with("nvrtc "));
        other_key.add(part.name, "nvrtc 12.4");
        replaced = true;
      } else {
        other_key.add(part.name, part.value);
      }
    }
    REQUIRE(replaced);
    CHECK(other_key.hash() != sm90.key);  // a different compiler is a different key: a plain miss
    CHECK(engine.storage().local().get(other_key.hash(), other_key.bytes()).outcome == LookupOutcome::miss);
    Entry old = e90;
    old.compiler = "nvrtc 12.4";
    old.canonical_key = other_key.bytes();
    old.key_hash = other_key.hash();
    // Even under this compiler's file name, its stored key differs: not served.
    write_bytes(engine.storage().local().entry_path(sm90.key), kiln::cache::serialize(old));
    const kiln::PrewarmResult again = request(engine, 1, "sm_90");
    CHECK(again.origin == Origin::compiled);
    CHECK(read_entry(engine.storage().local(), engine.storage().local().entry_path(sm90.key)).compiler == e90.compiler);
    const auto differences = kiln::cache::diff_keys(*CanonicalKey::parse(old.canonical_key), *parts);
    REQUIRE(differences.size() == 1);
    CHECK(differences[0].description == "nvrtc 12.4 -> " + e90.compiler);
  }
}

TEST_CASE("engine cache: the same text under another source name is another binary (__FILE__ names it)", "[cache]") {
  TempDir dir;
  const std::string text = "extern \"C\" __global__ void where(const char** out) { *out = __FILE__; }\n";
  const auto contains = [](std::span<const std::byte> bytes, std::string_view what) {
    const std::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return view.find(what) != std::string_view::npos;
  };
  {
    kiln::Engine engine(config_for(dir.path()));
    const kiln::CompiledBinary first = engine.compile(kiln::Source::from_text("first_name.cu", text), {}, {}, "sm_90");
    const kiln::CompiledBinary second = engine.compile(kiln::Source::from_text("second_name.cu", text), {}, {}, "sm_90");
    CHECK(first.origin() == Origin::compiled);
    CHECK(second.origin() == Origin::compiled);  // neither engine memory nor the disk entry of the first
    CHECK(first.key() != second.key());
    CHECK(contains(first.bytes(), "first_name.cu"));
    CHECK(contains(second.bytes(), "second_name.cu"));
    CHECK_FALSE(contains(second.bytes(), "first_name.cu"));
    CHECK(kiln::Source::from_text("a.cu", text).content_hash() != kiln::Source::from_text("b.cu", text).content_hash());
  }
  // A new engine (another process) finds each on disk under its own name.
  kiln::Engine engine(config_for(dir.path()));
  const kiln::CompiledBinary again = engine.compile(kiln::Source::from_text("second_name.cu", text), {}, {}, "sm_90");
  CHECK(again.origin() == Origin::disk);
  CHECK(contains(again.bytes(), "second_name.cu"));
}

TEST_CASE("engine cache: read-only caches serve hits, compile misses and store nothing", "[cache]") {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0711);
  const fs::path root = dir.path() / "cache";

  SECTION("KILN_CACHE_READONLY=1") {
    {
      kiln::Engine writer(config_for(root));
      REQUIRE(request(writer, 1).origin == Origin::compiled);
    }
    const ProcessResult hit = worker_once(root, 1, {}, {"KILN_CACHE_READONLY=1"});
    INFO(hit.out << hit.err);
    REQUIRE(hit.exit_code == 0);
    CHECK(hit.out.find("origin=disk") != std::string::npos);
    const ProcessResult miss = worker_once(root, 2, {}, {"KILN_CACHE_READONLY=1"});
    INFO(miss.out << miss.err);
    REQUIRE(miss.exit_code == 0);
    CHECK(miss.out.find("origin=compiled stored=0") != std::string::npos);
    CHECK(count_occurrences(hit.err + miss.err, "kiln: warning:") == 0);
  }
  SECTION("no write permission on the cache") {
    if (const auto closed = kiln::test::closed_to_others(KILN_STRESS_WORKER); closed && ::geteuid() == 0) {
      WARN("left out: nobody cannot run " << KILN_STRESS_WORKER << " (" << *closed
                                          << " lets no others in); clone into a folder others can enter");
      return;
    }
    // Owned and filled by `nobody` (when we are root), then made read-only for its owner.
    fs::create_directory(root);
    ::chmod(root.c_str(), 0700);
    if (::geteuid() == 0) REQUIRE(::chown(root.c_str(), nobody_ids().first, nobody_ids().second) == 0);
    const ProcessResult fill = worker_once(root, 1, become_unprivileged);
    INFO(fill.out << fill.err);
    REQUIRE(fill.exit_code == 0);
    REQUIRE(fill.out.find("origin=compiled stored=1") != std::string::npos);
    for (const auto& item : fs::recursive_directory_iterator(root)) {
      if (item.is_directory()) ::chmod(item.path().c_str(), 0500);
    }
    ::chmod(root.c_str(), 0500);
    const ProcessResult hit = worker_once(root, 1, become_unprivileged);
    INFO(hit.out << hit.err);
    REQUIRE(hit.exit_code == 0);
    CHECK(hit.out.find("origin=disk") != std::string::npos);
    const ProcessResult miss = worker_once(root, 2, become_unprivileged);
    INFO(miss.out << miss.err);
    REQUIRE(miss.exit_code == 0);
    CHECK(miss.out.find("origin=compiled stored=0") != std::string::npos);
  }
  CHECK(entry_files(root).size() == 1);
  CHECK(temp_files(root).empty());
}

TEST_CASE("engine cache: a failed write still returns the kernel, leaves no temp, warns once", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  { kiln::cache::Store create(store_config(root)); }  // the directories exist
  auto limit_file_size = [] {
    ::signal(SIGXFSZ, SIG_IGN);  // inherited across exec: writes fail with EFBIG instead
    struct rlimit limit {};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  };
  const ProcessResult result = worker_once(root, 1, limit_file_size);
  INFO(result.out << result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("origin=compiled stored=0") != std::string::npos);
  CHECK(count_occurrences(result.err, "kiln: warning:") == 1);
  CHECK(result.err.find("File too large") != std::string::npos);
  CHECK(temp_files(root).empty());
  kiln::cache::Store store(store_config(root));
  CHECK(store.list().empty());
}

TEST_CASE("engine cache: hostile roots are refused and requests still compile", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  fs::create_directories(root);
  fs::path used = root;
  std::string why;
  SECTION("0777 root") {
    ::chmod(root.c_str(), 0777);
    why = "world-writable";
  }
  SECTION("root owned by another user") {
    ::chmod(root.c_str(), 0700);
    if (::geteuid() == 0) {
      REQUIRE(::chown(root.c_str(), nobody_ids().first, nobody_ids().second) == 0);
    } else {
      used = "/";  // owned by root, not by us
    }
    why = "owned by uid";
  }
  StderrCapture capture;
  kiln::Engine engine(config_for(used));
  CHECK(engine.storage().local().mode() == StoreMode::memory_only);
  const kiln::PrewarmResult result = request(engine, 1);
  CHECK(result.origin == Origin::compiled);
  CHECK_FALSE(result.stored);
  CHECK(fs::is_empty(root));
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find(why) != std::string::npos);
}

TEST_CASE("engine cache: a symlink planted at an entry path is never followed", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  kiln::Engine engine(config_for(root));
  const kiln::PrewarmResult first = request(engine, 1);
  const fs::path path = engine.storage().local().entry_path(first.key);
  const fs::path outside = dir.path() / "planted.kiln";
  fs::rename(path, outside);
  fs::create_symlink(outside, path);
  StderrCapture capture;
  const kiln::PrewarmResult again = request(engine, 1);
  CHECK(again.origin == Origin::compiled);  // a valid entry behind a link is still refused
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(fs::is_regular_file(path));
  CHECK(fs::exists(outside));
  CHECK(capture.warnings() >= 1);
}

TEST_CASE("engine cache: threads asking for one key cause one compile", "[cache]") {
  TempDir dir;
  kiln::Engine engine(config_for(dir.path()));
  std::vector<std::thread> threads;
  std::atomic<int> compiled{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      if (request(engine, 7).origin == Origin::compiled) ++compiled;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(engine.stats().compiles == 1);
  CHECK(compiled == 1);
}

int main(int argc, char** argv) {
  try {
    kiln::EngineConfig config;
    config.cache.disabled = true;
    kiln::Engine probe(config);
    (void)probe.prewarm(kiln::Source::builtin("saxpy"), {}, {}, "sm_90");
  } catch (const kiln::DeviceUnavailable& error) {
    std::printf("SKIPPED: NVRTC not available: %s\n", error.what());
    return 77;
  }
  return kiln_test::run_catch(argc, argv);
}

TEST_CASE("engine cache: a source whose key passes the readers' limit is refused before compiling", "[cache]") {
  TempDir dir;
  kiln::Engine engine(config_for(dir.path()));
  // A source just over the canonical key limit: a comment, so it would compile.
  std::string text = "extern \"C\" __global__ void big() {}\n//";
  text.append(static_cast<std::size_t>(kiln::cache::kMaxCanonicalKeyBytes), 'x');
  text += '\n';
  const kiln::Source source = kiln::Source::from_text("big.cu", std::move(text));
  std::string message;
  try {
    (void)engine.prewarm(source, {}, {}, "sm_90");
  } catch (const kiln::ConfigError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("exceeds the limit") != std::string::npos);
  CHECK(message.find("big.cu") != std::string::npos);
  CHECK(engine.stats().compiles == 0);   // refused before the compiler ran
  CHECK(engine.storage().local().list().empty());  // and nothing written that no reader could read
}
