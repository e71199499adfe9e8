// The cache against a hostile newcomer's probe: one canonical key limit for the writer and the readers,
// refused shard directories and entry files, the running size total, configuration errors, damage in
// a mounted pack, unreadable and odd files seen by scans, the reason a put failed. No compiler, no GPU.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "cache_test_support.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/pack.hpp"

using namespace kiln_test;

namespace {

StoreConfig config_for(const fs::path& root) {
  StoreConfig config;
  config.root = root;
  return config;
}

/// The reader's limit on a canonical key (the one definition the writer must share).
std::uint32_t key_limit() { return kiln::cache::Limits{}.max_canonical_bytes; }

/// An entry whose canonical key is exactly `bytes` long (one "source" part).
Entry entry_with_key_bytes(std::size_t bytes) {
  // "kiln-key/1\n" + "source " + <length in decimal> + "\n" + value + "\n"
  const std::size_t fixed = CanonicalKey().bytes().size() + std::string("source ").size() + 2;
  std::size_t value = 0;
  for (std::size_t digits = 1; digits < 12; ++digits) {
    value = bytes - fixed - digits;
    if (std::to_string(value).size() == digits) break;
  }
  CanonicalKey key;
  key.add("source", std::string(value, 'k'));
  Entry entry = make_entry("sized", 100);
  entry.canonical_key = key.bytes();
  entry.key_hash = key.hash();
  return entry;
}

/// Sets environment variables for a scope and restores them.
class EnvOverride {
 public:
  EnvOverride(std::initializer_list<std::pair<std::string, std::optional<std::string>>> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      m_saved.emplace(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ~EnvOverride() {
    for (const auto& [name, value] : m_saved) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> m_saved;
};

}  // namespace

// D1: a key the readers reject was compiled, written, listed as damaged and rewritten on every run.
TEST_CASE("hardening: put refuses a canonical key over the readers' limit and writes nothing", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry over = entry_with_key_bytes(std::size_t{key_limit()} + 1);
  REQUIRE(over.canonical_key.size() == std::size_t{key_limit()} + 1);
  {
    StderrCapture capture;
    CHECK_FALSE(store.put(over));
    INFO(capture.text());
    CHECK(capture.text().find("canonical key length " + std::to_string(over.canonical_key.size()) +
                              " exceeds the limit " + std::to_string(key_limit())) != std::string::npos);
  }
  CHECK(entry_files(dir.path()).empty());
  CHECK(temp_files(dir.path()).empty());
  CHECK(store.get(over.key_hash, over.canonical_key).outcome == LookupOutcome::miss);

  // A key of exactly the limit is written and read back.
  const Entry at_limit = entry_with_key_bytes(key_limit());
  REQUIRE(at_limit.canonical_key.size() == key_limit());
  REQUIRE(store.put(at_limit));
  const auto found = store.get(at_limit.key_hash, at_limit.canonical_key);
  CHECK(found.outcome == LookupOutcome::hit);
}

TEST_CASE("hardening: check_canonical_key, serialize, put and the reader give one reason", "[cache]") {
  using kiln::cache::canonical_key_too_long;
  using kiln::cache::check_canonical_key;
  CHECK(kiln::cache::kMaxCanonicalKeyBytes == key_limit());
  const std::string reason = canonical_key_too_long(std::uint64_t{key_limit()} + 1, key_limit());
  CHECK(reason.find("exceeds the limit") != std::string::npos);
  CHECK(reason.find("64 MiB") != std::string::npos);

  const std::string over(std::size_t{key_limit()} + 1, 'x');
  CHECK_NOTHROW(check_canonical_key(std::string_view(over).substr(1)));
  CHECK_THROWS_AS(check_canonical_key(over), std::length_error);
  CHECK_THROWS_WITH(check_canonical_key(over), reason);

  Entry entry = make_entry("over", 10);
  entry.canonical_key = over;
  CHECK_THROWS_WITH(kiln::cache::serialize(entry), reason);

  // The reader's reason for an entry whose header declares such a key.
  std::vector<std::byte> bytes = kiln::cache::serialize(make_entry("reader", 10));
  const std::uint32_t declared = key_limit() + 1;
  for (int i = 0; i < 4; ++i) bytes[48 + i] = static_cast<std::byte>((declared >> (8 * i)) & 0xFF);  // canonical_len
  const auto parsed = kiln::cache::parse(bytes);
  REQUIRE(std::holds_alternative<kiln::cache::ContentError>(parsed));
  CHECK(std::get<kiln::cache::ContentError>(parsed).reason == reason);

  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry too_long = entry_with_key_bytes(std::size_t{key_limit()} + 1);
  StderrCapture capture;
  CHECK_FALSE(store.put(too_long));
  CHECK(store.last_put_error().find(reason) != std::string::npos);

  SECTION("a store with a smaller limit refuses with its own limit") {
    StoreConfig config = config_for(dir.path() / "small");
    config.limits.max_canonical_bytes = 4096;
    Store small(config);
    const Entry five_k = entry_with_key_bytes(5000);
    CHECK_FALSE(small.put(five_k));
    CHECK(small.last_put_error().find(canonical_key_too_long(5000, 4096)) != std::string::npos);
    CHECK(entry_files(dir.path() / "small").empty());
  }
}

// R9: the reason a put failed, with the system's text, for callers to print.
TEST_CASE("hardening: last_put_error carries the system's reason", "[cache]") {
  TempDir dir;
  const Entry big = make_entry("too-big", 256 * 1024);
  const Entry small = make_entry("small", 100);
  const ChildResult result = run_in_child([&]() -> std::string {
    Store store(config_for(dir.path()));
    if (!store.last_put_error().empty()) return "a reason before any put";
    if (!store.put(small)) return "a small put failed";
    ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the process
    struct rlimit limit {};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 64 * 1024;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
    if (store.put(big)) return "put succeeded past RLIMIT_FSIZE";
    const std::string why = store.last_put_error();
    if (why.find("File too large") == std::string::npos) return "last_put_error: '" + why + "'";
    return "";
  });
  INFO(result.stderr_text);
  CHECK(result.failure.empty());

  Store read_only([&] {
    StoreConfig config = config_for(dir.path());
    config.read_only = true;
    return config;
  }());
  CHECK_FALSE(read_only.put(small));
  CHECK(read_only.last_put_error().find("read-only") != std::string::npos);
}

// R1: entries in a shard others may write, and entry files others may write, were served silently.
TEST_CASE("hardening: group/world-writable shard directories and entry files are refused, said once", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  const Entry a = make_entry("mode_a", 500);
  const Entry b = make_entry("mode_b", 500);
  {
    Store writer(config_for(root));
    REQUIRE(writer.put(a));
    REQUIRE(writer.put(b));
  }
  const fs::path a_path = Store(config_for(root)).entry_path(a.key_hash);
  const fs::path b_path = Store(config_for(root)).entry_path(b.key_hash);
  // Root and v1/ as a default umask leaves them (0755: trusted), as in the report.
  REQUIRE(::chmod(root.c_str(), 0755) == 0);
  REQUIRE(::chmod((root / "v1").c_str(), 0755) == 0);

  SECTION("an entry file at 0666") {
    REQUIRE(::chmod(a_path.c_str(), 0666) == 0);
    StderrCapture capture;
    Store store(config_for(root));
    REQUIRE(store.mode() == StoreMode::read_write);
    const auto first = store.get(a.key_hash, a.canonical_key);
    CHECK(first.outcome != LookupOutcome::hit);
    CHECK_FALSE(first.entry);
    CHECK(first.detail.find("world-writable") != std::string::npos);
    CHECK(store.get(a.key_hash, a.canonical_key).outcome != LookupOutcome::hit);
    INFO(capture.text());
    CHECK(capture.warnings() == 1);
    CHECK(capture.text().find("world-writable (mode 0666)") != std::string::npos);
    // The entry next to it is fine; a put replaces the refused one with a private file.
    CHECK(store.get(b.key_hash, b.canonical_key).outcome == LookupOutcome::hit);
    REQUIRE(store.put(a));
    struct stat st {};
    REQUIRE(::stat(a_path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(store.get(a.key_hash, a.canonical_key).outcome == LookupOutcome::hit);
  }
  SECTION("a shard directory at 0777 (and one at 0775)") {
    REQUIRE(::chmod(a_path.parent_path().c_str(), 0777) == 0);
    const bool same_shard = a_path.parent_path() == b_path.parent_path();
    if (!same_shard) REQUIRE(::chmod(b_path.parent_path().c_str(), 0775) == 0);
    StderrCapture capture;
    Store store(config_for(root));
    REQUIRE(store.mode() == StoreMode::read_write);
    for (int i = 0; i < 3; ++i) {
      CHECK(store.get(a.key_hash, a.canonical_key).outcome == LookupOutcome::miss);
      CHECK(store.get(b.key_hash, b.canonical_key).outcome == LookupOutcome::miss);
    }
    CHECK(fs::exists(a_path));  // refused, not removed: nothing in such a directory is touched
    CHECK_FALSE(store.put(a));  // nor written into it
    CHECK(store.last_put_error().find("refused") != std::string::npos);
    INFO(capture.text());
    CHECK(count_occurrences(capture.text(), "kiln: warning: disk cache refused") == 1);
    CHECK(capture.text().find("shard directory") != std::string::npos);
    CHECK(capture.text().find("world-writable (mode 0777)") != std::string::npos);
  }
  SECTION("scans say why an entry is refused") {
    REQUIRE(::chmod(a_path.c_str(), 0660) == 0);
    REQUIRE(::chmod(b_path.parent_path().c_str(), 0777) == 0);
    Store store(config_for(root));
    std::map<std::string, std::pair<std::string, bool>> refused;
    for (unsigned i = 0; i < Store::kShardCount; ++i) {
      store.scan_shard(i, kiln::cache::ScanDepth::entry, false, [&](const kiln::cache::ScannedEntry& e) {
        CHECK(e.error.empty());
        refused[std::string(e.path)] = {std::string(e.refused), e.shard_refused};
      });
    }
    REQUIRE(refused.size() == 2);
    CHECK(refused.at(b_path.string()).first.find("world-writable (mode 0777)") != std::string::npos);
    CHECK(refused.at(b_path.string()).second);
    if (a_path.parent_path() != b_path.parent_path()) {
      CHECK(refused.at(a_path.string()).first == "group-writable (mode 0660)");
      CHECK_FALSE(refused.at(a_path.string()).second);
    }
  }
}

// R6: the running total missed entries copied in from outside, so a cache over its cap was never trimmed.
TEST_CASE("hardening: entries copied in from outside are counted and trimmed", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  StoreConfig config = config_for(root);
  config.max_size = 200000;
  Store store(config);
  REQUIRE(store.put(make_entry("first", 1000)));
  // 30 entries of ~10 KB (300 KB) copied in by hand, past the store: the running total does not see them.
  {
    Store other(config_for(dir.path() / "elsewhere"));
    for (int i = 0; i < 30; ++i) {
      const Entry e = make_entry("copied" + std::to_string(i), 10000);
      const fs::path to = store.entry_path(e.key_hash);
      fs::create_directories(to.parent_path());
      ::chmod(to.parent_path().c_str(), 0700);
      write_bytes(to, kiln::cache::serialize(e));
      ::chmod(to.c_str(), 0600);
      backdate(to, std::chrono::hours(48));
    }
  }
  // The last measurement is old now (as after a day of use).
  const fs::path measured = root / "lock" / "measured";
  if (fs::exists(measured)) backdate(measured, std::chrono::hours(2));
  REQUIRE(store.put(make_entry("second", 1000)));
  std::uint64_t total = 0;
  for (const auto& file : store.list()) total += file.size;
  CHECK(total <= config.max_size);
  CHECK(store.size_estimate() == total);
  CHECK(store.evictions() > 0);
}

TEST_CASE("hardening: remeasure_size puts the running total right after files were removed by hand", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  std::vector<Entry> entries;
  for (int i = 0; i < 5; ++i) {
    entries.push_back(make_entry("counted" + std::to_string(i), 3000));
    REQUIRE(store.put(entries.back()));
  }
  fs::remove(store.entry_path(entries[0].key_hash));
  fs::remove(store.entry_path(entries[1].key_hash));
  std::uint64_t total = 0;
  for (const auto& file : store.list()) total += file.size;
  CHECK(store.size_estimate() != total);
  CHECK(store.remeasure_size() == total);
  CHECK(store.size_estimate() == total);
}

// R6: a cap below the working set evicted fresh entries without a word.
TEST_CASE("hardening: a cap that evicts fresh entries says so once", "[cache]") {
  TempDir dir;
  StoreConfig config = config_for(dir.path());
  config.max_size = 15 * 1024;
  Store store(config);
  StderrCapture capture;
  for (int i = 0; i < 8; ++i) REQUIRE(store.put(make_entry("fresh" + std::to_string(i), 3000)));
  REQUIRE(store.evictions() > 0);
  INFO(capture.text());
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find("KILN_CACHE_MAXSIZE") != std::string::npos);
}

// R4, R6, R11: configuration that was silently taken for something else.
TEST_CASE("hardening: an empty KILN_CACHE_DIR, a zero KILN_CACHE_MAXSIZE and a bogus KILN_LOG are errors", "[cache]") {
  {
    const EnvOverride env{{"KILN_CACHE_DIR", ""}, {"KILN_CACHE_MAXSIZE", std::nullopt}, {"KILN_LOG", std::nullopt}};
    CHECK_THROWS_AS(StoreConfig::from_environment(), std::invalid_argument);
    CHECK_THROWS_WITH(StoreConfig::from_environment(), Catch::Contains("KILN_CACHE_DIR is set but empty"));
  }
  {
    const EnvOverride env{{"KILN_CACHE_DIR", "/somewhere"}, {"KILN_CACHE_MAXSIZE", "0"}, {"KILN_LOG", std::nullopt}};
    CHECK_THROWS_AS(StoreConfig::from_environment(), std::invalid_argument);
    CHECK_THROWS_WITH(StoreConfig::from_environment(), Catch::Contains("KILN_CACHE_MAXSIZE"));
  }
  {
    const EnvOverride env{{"KILN_CACHE_DIR", "/somewhere"}, {"KILN_CACHE_MAXSIZE", "0K"}, {"KILN_LOG", std::nullopt}};
    CHECK_THROWS_AS(StoreConfig::from_environment(), std::invalid_argument);
  }
  {
    const EnvOverride env{{"KILN_CACHE_DIR", "/somewhere"}, {"KILN_CACHE_MAXSIZE", "1K"}, {"KILN_LOG", "bogus"}};
    CHECK_THROWS_AS(StoreConfig::from_environment(), std::invalid_argument);
    CHECK_THROWS_WITH(StoreConfig::from_environment(), Catch::Contains("KILN_LOG='bogus'"));
  }
  {
    const EnvOverride env{{"KILN_CACHE_DIR", "/somewhere"}, {"KILN_CACHE_MAXSIZE", "1K"}, {"KILN_LOG", "debug"}};
    const StoreConfig config = StoreConfig::from_environment();
    CHECK(config.root == fs::path("/somewhere"));
    CHECK(config.max_size == 1024u);
  }
}

// R7: a damaged entry inside a mounted pack was skipped without a word, even at KILN_LOG=info.
TEST_CASE("hardening: a damaged entry in a pack warns", "[cache]") {
  TempDir dir;
  const fs::path pack_path = dir.path() / "one.kpack";
  const Entry entry = make_entry("packed", 4000);
  {
    kiln::cache::PackWriter writer(pack_path);
    writer.add(entry);
    writer.commit();
  }
  std::vector<std::byte> bytes = read_bytes(pack_path);
  std::uint64_t offset = 0;
  {
    const auto reader = kiln::cache::PackReader::open(pack_path);
    REQUIRE(reader->records().size() == 1);
    offset = reader->records()[0].offset + reader->records()[0].length / 2;  // inside the payload
  }
  bytes[offset] ^= std::byte{0x5a};
  write_bytes(pack_path, bytes);
  const auto reader = kiln::cache::PackReader::open(pack_path);
  StderrCapture capture;
  const auto found = reader->get(entry.key_hash, entry.canonical_key);
  CHECK(found.outcome != LookupOutcome::hit);
  INFO(capture.text());
  CHECK(capture.warnings() == 1);
  CHECK(capture.text().find(pack_path.string()) != std::string::npos);
  CHECK(capture.text().find("checksum mismatch") != std::string::npos);
}

// D2 and R5, at the scan: an unreadable entry is an I/O error (never proof of damage), and what is not
// an entry file is reported rather than skipped.
TEST_CASE("hardening: scans mark I/O errors and report what is not an entry file", "[cache]") {
  using kiln::cache::ScanDepth;
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry good = make_entry("good", 300);
  const Entry hidden = make_entry("hidden", 300);
  REQUIRE(store.put(good));
  REQUIRE(store.put(hidden));
  const fs::path shard = store.entry_path(good.key_hash).parent_path();
  const fs::path link = shard / ("0123456789abcdef0123456789abcd" + std::string(".kiln"));
  fs::create_symlink(store.entry_path(good.key_hash), link);
  REQUIRE(::mkfifo((shard / "fedcba9876543210fedcba98765432.kiln").c_str(), 0600) == 0);
  write_bytes(shard / "README", kiln::cache::serialize(good));
  fs::create_directory(shard / "00000000000000000000000000000a.kiln");
  write_bytes(shard / ".0123456789abcdef0123456789abcd.kiln.tmp.1.x", kiln::cache::serialize(good));  // a temp

  std::map<std::string, std::string> strays;
  for (unsigned i = 0; i < Store::kShardCount; ++i) {
    store.scan_shard(
        i, ScanDepth::header, false, [](const kiln::cache::ScannedEntry&) {},
        [&](const kiln::cache::StrayFile& stray) {
          strays[fs::path(stray.path).filename().string()] =
              std::string(stray.kind) + (stray.file_hash ? " at an entry path" : "");
        });
  }
  CHECK(strays.size() == 4);
  CHECK(strays["0123456789abcdef0123456789abcd.kiln"] == "symbolic link at an entry path");
  CHECK(strays["fedcba9876543210fedcba98765432.kiln"] == "FIFO at an entry path");
  CHECK(strays["00000000000000000000000000000a.kiln"] == "directory at an entry path");
  CHECK(strays["README"] == "regular file");

  SECTION("an entry the user cannot open is an I/O error") {
    for (const fs::path& d : {dir.path(), dir.path() / "v1", store.entry_path(hidden.key_hash).parent_path()}) {
      REQUIRE(::chmod(d.c_str(), 0755) == 0);
    }
    const std::string path = store.entry_path(hidden.key_hash).string();
    const ChildResult child = run_in_child(
        [&]() -> std::string {
          if (::geteuid() == 0) return {};  // could not drop privileges: nothing to check
          std::string failure = "not seen";
          store.scan_shard(static_cast<unsigned>(hidden.key_hash.high >> 56), ScanDepth::entry, false,
                           [&](const kiln::cache::ScannedEntry& e) {
                             if (e.path != path) return;
                             failure.clear();
                             if (!e.io_error) failure = "not marked an I/O error: " + std::string(e.error);
                           });
          return failure;
        },
        RunAs::unprivileged);
    CHECK(child.failure.empty());
  }
}

namespace {

using namespace std::chrono_literals;

std::string read_all_text(const fs::path& path) {
  const std::vector<std::byte> bytes = read_bytes(path);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

/// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks since boot.
std::string start_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;  // fields 3 (state) .. 22 (starttime)
  return field;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string host_name() {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  std::string host(name);
  std::replace(host.begin(), host.end(), ' ', '_');
  return host;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// R3: a lease whose pid was reused by an unrelated live process (a container restarted with the same
// hostname) stalled every waiter for the whole wait, silently. R9b: a 0-byte lease left by a crash
// between create and write cost the next waiter 5 s.
TEST_CASE("hardening: compile leases record the holder's start time; stale holders are judged at once", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("leased", 1000);
  const fs::path lease_path = dir.path() / "lock" / (entry.key_hash.hex() + ".lease");
  const std::string me = std::to_string(::getpid());
  const std::string now = std::to_string(std::time(nullptr));
  const auto plant = [&](const std::string& text) {
    fs::create_directories(lease_path.parent_path());
    write_bytes(lease_path, std::as_bytes(std::span(text)));
  };
  REQUIRE_FALSE(start_ticks(::getpid()).empty());

  SECTION("a lease names its holder's start time and boot") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    std::istringstream in(read_all_text(lease_path));
    std::string pid, host, stamp, nonce, start, boot;
    in >> pid >> host >> stamp >> nonce >> start >> boot;
    CHECK(pid == me);
    CHECK(host == host_name());
    CHECK(start == start_ticks(::getpid()));
    CHECK(boot == boot_id());
  }

  SECTION("a live pid with another start time is a reused pid: stale at once") {
    plant(fmt::format("{} {} {} 00 {} {}\n", me, host_name(), now, std::stoull(start_ticks(::getpid())) + 1, boot_id()));
    const auto start = std::chrono::steady_clock::now();
    const auto lease = store.acquire_lease(entry.key_hash, 3s);
    CHECK(lease.owned());
    CHECK(seconds_since(start) < 1.0);
  }

  SECTION("a live pid from another boot is stale at once") {
    plant(fmt::format("{} {} {} 00 {} {}\n", me, host_name(), now, start_ticks(::getpid()),
                      "00000000-0000-4000-8000-000000000000"));
    const auto start = std::chrono::steady_clock::now();
    const auto lease = store.acquire_lease(entry.key_hash, 3s);
    CHECK(lease.owned());
    CHECK(seconds_since(start) < 1.0);
  }

  SECTION("the holder itself (same pid, start time and boot) is respected") {
    plant(fmt::format("{} {} {} 00 {} {}\n", me, host_name(), now, start_ticks(::getpid()), boot_id()));
    const auto lease = store.acquire_lease(entry.key_hash, 200ms);
    CHECK_FALSE(lease.owned());
    CHECK(fs::exists(lease_path));
  }

  SECTION("an old-format lease (no start time) is judged by its pid only") {
    plant(fmt::format("{} {} {} 00\n", me, host_name(), now));
    const auto lease = store.acquire_lease(entry.key_hash, 200ms);
    CHECK_FALSE(lease.owned());
    CHECK(fs::exists(lease_path));
  }

  SECTION("after a second of waiting, the waiter says once whom it waits for") {
    kiln::log::set_level(kiln::log::Level::warn);
    plant(fmt::format("{} {} {} 00 {} {}\n", me, host_name(), now, start_ticks(::getpid()), boot_id()));
    StderrCapture capture;
    const auto lease = store.acquire_lease(entry.key_hash, 1500ms);
    CHECK_FALSE(lease.owned());
    const std::string text = capture.text();
    INFO(text);
    CHECK(capture.warnings() == 1);
    CHECK(text.find("process " + me) != std::string::npos);
    CHECK(text.find(host_name()) != std::string::npos);
    CHECK(text.find(entry.key_hash.hex()) != std::string::npos);
    // When it was last refreshed, and how long until it is stale (not the whole wait: third probe).
    CHECK(text.find(" refreshed ") != std::string::npos);
    CHECK(text.find("broken if") != std::string::npos);
  }

  SECTION("an empty lease file past a short grace is stale at once; a fresh one is waited for briefly") {
    plant("");
    backdate(lease_path, 10s);
    auto start = std::chrono::steady_clock::now();
    auto lease = store.acquire_lease(entry.key_hash, 3s);
    CHECK(lease.owned());
    CHECK(seconds_since(start) < 1.0);
    lease.release();

    plant("");  // its writer may be between create and write
    const auto brief = store.acquire_lease(entry.key_hash, 100ms);
    CHECK_FALSE(brief.owned());
    start = std::chrono::steady_clock::now();
    const auto later = store.acquire_lease(entry.key_hash, 10s);
    CHECK(later.owned());
    CHECK(seconds_since(start) < 4.0);
  }
}
