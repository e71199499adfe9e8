// Who may write a store, and how it is configured: read-only by configuration, environment or
// permissions, write failures, hostile and symlinked roots, a disabled store, sizes from the
// environment. Part of cache_store_test. No compiler, no GPU.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache_test_support.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;

TEST_CASE("store: read-only by configuration and environment", "[cache]") {
  TempDir dir;
  const Entry cached = make_entry("cached", 3000);
  const Entry fresh = make_entry("fresh", 3000);
  {
    Store writer(store_config(dir.path()));
    REQUIRE(writer.put(cached));
    backdate(writer.entry_path(cached.key_hash), 72h);
  }
  const auto before = fs::last_write_time(Store(store_config(dir.path())).entry_path(cached.key_hash));

  StoreConfig config;
  SECTION("StoreConfig::read_only") {
    config = store_config(dir.path());
    config.read_only = true;
  }
  SECTION("KILN_CACHE_READONLY=1") {
    ::setenv("KILN_CACHE_DIR", dir.path().c_str(), 1);
    ::setenv("KILN_CACHE_READONLY", "1", 1);
    config = StoreConfig::from_environment();
    ::unsetenv("KILN_CACHE_READONLY");
    ::unsetenv("KILN_CACHE_DIR");
  }
  StderrCapture capture;
  Store store(config);
  REQUIRE(store.mode() == StoreMode::read_only);
  CHECK_FALSE(store.mode_reason().empty());
  const auto hit = store.get(cached.key_hash, cached.canonical_key);
  REQUIRE(hit.outcome == LookupOutcome::hit);
  CHECK(hit.entry->payload == cached.payload);
  CHECK(fs::last_write_time(store.entry_path(cached.key_hash)) == before);  // not even touched
  CHECK_FALSE(store.put(fresh));
  CHECK(store.get(fresh.key_hash, fresh.canonical_key).outcome == LookupOutcome::miss);
  CHECK_FALSE(store.acquire_lease(fresh.key_hash, 1s).owned());
  CHECK_FALSE(store.remove(cached.key_hash));
  CHECK(store.list().size() == 1);
  CHECK(temp_files(dir.path()).empty());
  CHECK(capture.warnings() == 0);

  // A damaged entry is a miss but is not deleted by a read-only store.
  const fs::path path = store.entry_path(cached.key_hash);
  auto bytes = read_bytes(path);
  bytes[bytes.size() / 2] ^= std::byte{1};
  ::chmod(path.c_str(), 0600);
  write_bytes(path, bytes);
  CHECK(store.get(cached.key_hash, cached.canonical_key).outcome == LookupOutcome::miss);
  CHECK(fs::exists(path));
}

TEST_CASE("store: a cache without write permission serves hits and writes nothing", "[cache]") {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0711);  // let `nobody` reach the cache root below
  const fs::path root = dir.path() / "cache";
  const auto [uid, gid] = nobody_ids();
  fs::create_directory(root);
  ::chmod(root.c_str(), 0700);
  if (::geteuid() == 0) REQUIRE(::chown(root.c_str(), uid, gid) == 0);
  const Entry cached = make_entry("perm-cached", 3000);
  const Entry fresh = make_entry("perm-fresh", 3000);
  // Fill the cache as its owner (nobody when we are root), then take write permission away.
  ChildResult filled = run_in_child(
      [&]() -> std::string {
        Store store(store_config(root));
        if (store.mode() != StoreMode::read_write) return "owner store is " + std::string(to_string(store.mode()));
        return store.put(cached) ? "" : "put failed";
      },
      RunAs::unprivileged);
  INFO(filled.failure << filled.stderr_text);
  REQUIRE(filled.failure.empty());
  for (const auto& item : fs::recursive_directory_iterator(root)) {
    if (item.is_directory()) ::chmod(item.path().c_str(), 0500);
  }
  ::chmod(root.c_str(), 0500);

  ChildResult result = run_in_child(
      [&]() -> std::string {
        Store store(store_config(root));
        if (store.mode() != StoreMode::read_only) return "mode is " + std::string(to_string(store.mode()));
        const auto hit = store.get(cached.key_hash, cached.canonical_key);
        if (hit.outcome != LookupOutcome::hit || hit.entry->payload != cached.payload) return "no hit: " + hit.detail;
        if (store.put(fresh)) return "put succeeded in a read-only cache";
        if (store.get(fresh.key_hash, fresh.canonical_key).outcome != LookupOutcome::miss) return "fresh entry found";
        return "";
      },
      RunAs::unprivileged);
  INFO(result.stderr_text);
  CHECK(result.failure.empty());
  CHECK(count_occurrences(result.stderr_text, "kiln: warning:") == 0);
  CHECK(temp_files(root).empty());
  CHECK(entry_files(root).size() == 1);
}

TEST_CASE("store: a failed write leaves no temp file and warns once", "[cache]") {
  TempDir dir;
  const Entry big = make_entry("too-big", 256 * 1024);
  const Entry big2 = make_entry("too-big-2", 256 * 1024);
  const Entry small = make_entry("small", 100);
  const ChildResult result = run_in_child([&]() -> std::string {
    Store store(store_config(dir.path()));
    if (!store.put(small)) return "a small put failed before the limit";  // also creates lock/size
    ::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of killing the process
    struct rlimit limit {};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 64 * 1024;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
    if (store.put(big)) return "put succeeded past RLIMIT_FSIZE";
    if (store.put(big2)) return "second put succeeded past RLIMIT_FSIZE";
    if (store.get(big.key_hash, big.canonical_key).outcome != LookupOutcome::miss) return "a failed put left an entry";
    if (store.mode() != StoreMode::read_write) return "a full disk must not change the mode";
    return "";
  });
  INFO(result.stderr_text);
  CHECK(result.failure.empty());
  CHECK(count_occurrences(result.stderr_text, "kiln: warning:") == 1);
  CHECK(result.stderr_text.find("File too large") != std::string::npos);
  CHECK(temp_files(dir.path()).empty());
}

TEST_CASE("store: hostile roots are refused (memory-only, one warning)", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  const Entry entry = make_entry("hostile", 1000);
  std::string expected_reason;
  SECTION("world-writable root (0777)") {
    fs::create_directories(root);
    ::chmod(root.c_str(), 0777);
    expected_reason = "world-writable";
  }
  SECTION("group-writable root (0770)") {
    fs::create_directories(root);
    ::chmod(root.c_str(), 0770);
    expected_reason = "group-writable";
  }
  SECTION("root owned by another user") {
    fs::create_directories(root);
    ::chmod(root.c_str(), 0700);
    if (::geteuid() == 0) {
      REQUIRE(::chown(root.c_str(), nobody_ids().first, nobody_ids().second) == 0);
    } else {
      fs::remove(root);
      fs::create_directory_symlink("/", root);  // "/" belongs to root, not to us
    }
    expected_reason = "owned by uid";
  }
  SECTION("group-writable v1/ below a good root") {
    fs::create_directories(root / "v1");
    ::chmod(root.c_str(), 0700);
    ::chmod((root / "v1").c_str(), 0775);
    expected_reason = "group-writable";
  }
  StderrCapture capture;
  Store store(store_config(root));
  CHECK(store.mode() == StoreMode::memory_only);
  INFO(store.mode_reason());
  CHECK(store.mode_reason().find(expected_reason) != std::string::npos);
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::disabled);
  CHECK_FALSE(store.put(entry));
  CHECK_FALSE(store.acquire_lease(entry.key_hash, 1s).owned());
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find(expected_reason) != std::string::npos);
  if (root != fs::path("/") && !fs::is_symlink(root)) CHECK_FALSE(fs::exists(root / "CACHEDIR.TAG"));
}

TEST_CASE("store: a symlink planted at an entry path is never followed", "[cache]") {
  TempDir dir;
  Store store(store_config(dir.path() / "cache"));
  const Entry victim = make_entry("victim", 1000);
  const Entry planted = make_entry("planted", 1000);
  // A valid entry for `victim` kept outside the cache, and a link to it at victim's entry path.
  const fs::path outside = dir.path() / "elsewhere.kiln";
  write_bytes(outside, kiln::cache::serialize(victim));
  const fs::path path = store.entry_path(victim.key_hash);
  fs::create_directories(path.parent_path());
  fs::create_symlink(outside, path);
  StderrCapture capture;
  const auto found = store.get(victim.key_hash, victim.canonical_key);
  CHECK(found.outcome != LookupOutcome::hit);
  CHECK_FALSE(found.entry);
  CHECK(found.detail.find("symbolic link") != std::string::npos);
  CHECK(capture.warnings() == 1);
  CHECK_FALSE(fs::exists(fs::symlink_status(path)));  // the link is gone
  CHECK(fs::exists(outside));                         // what it pointed at is untouched
  REQUIRE(store.put(victim));
  CHECK_FALSE(fs::is_symlink(path));
  CHECK(store.get(victim.key_hash, victim.canonical_key).outcome == LookupOutcome::hit);
  (void)planted;
}

TEST_CASE("store: a symlinked root of our own is followed", "[cache]") {
  TempDir dir;
  fs::create_directories(dir.path() / "real");
  ::chmod((dir.path() / "real").c_str(), 0700);
  fs::create_directory_symlink(dir.path() / "real", dir.path() / "link");
  Store store(store_config(dir.path() / "link"));
  CHECK(store.mode() == StoreMode::read_write);
  const Entry entry = make_entry("linked", 100);
  REQUIRE(store.put(entry));
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);
}

TEST_CASE("store: disabled store", "[cache]") {
  StoreConfig config;
  config.root = "/nonexistent/kiln";
  config.disabled = true;
  StderrCapture capture;
  Store store(config);
  CHECK(store.mode() == StoreMode::memory_only);
  const Entry entry = make_entry("disabled", 10);
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::disabled);
  CHECK_FALSE(store.put(entry));
  CHECK(store.list().empty());
  CHECK(capture.warnings() == 0);
}

TEST_CASE("store: sizes and the environment", "[cache]") {
  using kiln::cache::parse_size;
  CHECK(parse_size("12345") == 12345u);
  CHECK(parse_size("100k") == 100u * 1024);
  CHECK(parse_size("512M") == 512ull << 20);
  CHECK(parse_size("1G") == 1ull << 30);
  CHECK(parse_size("2GiB") == 2ull << 30);
  CHECK(parse_size("3gb") == 3ull << 30);
  CHECK(parse_size("1T") == 1ull << 40);
  CHECK(parse_size("0") == 0u);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("G"));
  CHECK_FALSE(parse_size("-1"));
  CHECK_FALSE(parse_size("1.5G"));
  CHECK_FALSE(parse_size("12 M"));
  CHECK_FALSE(parse_size("1X"));
  CHECK_FALSE(parse_size("99999999999999999999"));
  CHECK_FALSE(parse_size("99999999999T"));

  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  ::unsetenv("KILN_CACHE_DIR");
  ::unsetenv("KILN_CACHE_DISABLE");
  ::unsetenv("KILN_CACHE_READONLY");
  ::unsetenv("KILN_CACHE_MAXSIZE");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  CHECK(StoreConfig::from_environment().root == fs::path("/xdg/kiln"));
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // not absolute: ignored, per the XDG spec
  ::setenv("HOME", "/home/someone", 1);
  CHECK(StoreConfig::from_environment().root == fs::path("/home/someone/.cache/kiln"));
  ::setenv("KILN_CACHE_DIR", "/explicit", 1);
  ::setenv("KILN_CACHE_DISABLE", "1", 1);
  ::setenv("KILN_CACHE_MAXSIZE", "64M", 1);
  const StoreConfig config = StoreConfig::from_environment();
  CHECK(config.root == fs::path("/explicit"));
  CHECK(config.disabled);
  CHECK_FALSE(config.read_only);
  CHECK(config.max_size == 64ull << 20);
  ::setenv("KILN_CACHE_DISABLE", "0", 1);
  CHECK_FALSE(StoreConfig::from_environment().disabled);
  ::setenv("KILN_CACHE_MAXSIZE", "lots", 1);
  CHECK_THROWS_WITH(StoreConfig::from_environment(), Catch::Contains("KILN_CACHE_MAXSIZE"));
  for (const char* name : {"KILN_CACHE_DIR", "KILN_CACHE_DISABLE", "KILN_CACHE_MAXSIZE", "XDG_CACHE_HOME"}) {
    ::unsetenv(name);
  }
  ::setenv("HOME", saved_home.c_str(), 1);
}
