// The on-disk store with synthetic entries: layout, integrity, atomic publish, leases, eviction,
// read-only and refused roots, write failures. No compiler, no GPU.
#include <sys/file.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "atomic_file.hpp"
#include "cache_test_support.hpp"
#include "test_support.hpp"
#include "kiln/cache/stats.hpp"
#include "store_hooks.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;
using kiln::cache::LookupOutcome;
using kiln::cache::Store;
using kiln::cache::StoreConfig;
using kiln::cache::StoreMode;

namespace {

StoreConfig config_for(const fs::path& root) {
  StoreConfig config;
  config.root = root;
  return config;
}

bool same_entry(const Entry& a, const Entry& b) {
  return a.vendor == b.vendor && a.payload_kind == b.payload_kind && a.target == b.target && a.compiler == b.compiler &&
         a.created_unix == b.created_unix && a.key_hash == b.key_hash && a.canonical_key == b.canonical_key &&
         a.names == b.names && a.payload == b.payload && a.aux == b.aux;
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("store: layout, modes, round trip", "[cache]") {
  TempDir dir;
  const fs::path root = dir.path() / "cache";
  Store store(config_for(root));
  REQUIRE(store.mode() == StoreMode::read_write);
  CHECK(store.mode_reason().empty());

  const Entry entry = make_entry("saxpy", 5000);
  REQUIRE(store.put(entry));
  const std::string hex = entry.key_hash.hex();
  const fs::path expected = root / "v1" / hex.substr(0, 2) / (hex.substr(2) + ".kiln");
  CHECK(store.entry_path(entry.key_hash) == expected);
  REQUIRE(fs::is_regular_file(expected));
  CHECK(mode_of(expected) == 0600);
  CHECK(mode_of(root) == 0700);
  CHECK(mode_of(root / "v1") == 0700);
  CHECK(mode_of(expected.parent_path()) == 0700);
  CHECK(mode_of(root / "lock") == 0700);
  std::ifstream tag(root / "CACHEDIR.TAG");
  std::string first_line;
  std::getline(tag, first_line);
  CHECK(first_line == "Signature: 8a477f597d28d172789f06886806bc55");

  auto found = store.get(entry.key_hash, entry.canonical_key);
  REQUIRE(found.outcome == LookupOutcome::hit);
  REQUIRE(found.entry);
  CHECK(same_entry(*found.entry, entry));

  const auto files = store.list();
  REQUIRE(files.size() == 1);
  CHECK(files[0].file_hash == entry.key_hash);
  CHECK(files[0].path == expected);
  CHECK(files[0].size == fs::file_size(expected));
  CHECK(store.size_estimate() == fs::file_size(expected));
  CHECK(temp_files(root).empty());

  CHECK(store.remove(entry.key_hash));
  CHECK_FALSE(fs::exists(expected));
  CHECK(store.size_estimate() == 0u);
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  CHECK_FALSE(store.remove(entry.key_hash));
}

TEST_CASE("store: a damaged entry is removed and can be rewritten", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("damaged", 4096);
  const fs::path path = store.entry_path(entry.key_hash);
  const std::vector<std::byte> good = kiln::cache::serialize(entry);
  const std::size_t payload_at =
      good.size() - kiln::cache::kEntryEpilogueBytes - entry.aux.size() - entry.payload.size();

  struct Damage {
    std::string what;
    std::function<void(std::vector<std::byte>&)> apply;
  };
  auto flip = [](std::size_t offset) { return [offset](std::vector<std::byte>& b) { b[offset] ^= std::byte{0x5a}; }; };
  const std::vector<Damage> damages = {
      {"magic (header offset 0)", flip(0)},
      {"format version (header offset 8)", flip(8)},
      {"key hash (header offset 30)", flip(30)},
      {"payload length (header offset 66)", flip(66)},
      {"target text (offset 97)", flip(kiln::cache::kEntryFixedBytes + 1)},
      {"canonical key (offset 150)", flip(150)},
      {"payload, middle", flip(payload_at + entry.payload.size() / 2)},
      {"aux (PTX)", flip(good.size() - kiln::cache::kEntryEpilogueBytes - 3)},
      {"checksum (epilogue)", flip(good.size() - kiln::cache::kEntryEpilogueBytes + 5)},
      {"end magic (last byte)", flip(good.size() - 1)},
      {"zero-length", [](std::vector<std::byte>& b) { b.clear(); }},
      {"truncated to 50 bytes", [](std::vector<std::byte>& b) { b.resize(50); }},
      {"truncated to half", [](std::vector<std::byte>& b) { b.resize(b.size() / 2); }},
      {"truncated by one byte", [](std::vector<std::byte>& b) { b.pop_back(); }},
      {"trailing garbage", [](std::vector<std::byte>& b) { b.push_back(std::byte{0}); }},
  };
  for (const Damage& damage : damages) {
    DYNAMIC_SECTION(damage.what) {
      REQUIRE(store.put(entry));
      std::vector<std::byte> bytes = good;
      damage.apply(bytes);
      write_bytes(path, bytes);
      const auto first = store.get(entry.key_hash, entry.canonical_key);
      INFO(first.detail);
      CHECK(first.outcome == LookupOutcome::corrupt_removed);
      CHECK_FALSE(first.entry);
      CHECK_FALSE(fs::exists(path));
      REQUIRE(store.put(entry));  // what the engine does after recompiling
      const auto second = store.get(entry.key_hash, entry.canonical_key);
      REQUIRE(second.outcome == LookupOutcome::hit);
      CHECK(second.entry->payload == entry.payload);
    }
  }
}

TEST_CASE("store: odd files at an entry path", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("odd", 100);
  const fs::path path = store.entry_path(entry.key_hash);
  fs::create_directories(path.parent_path());
  SECTION("a FIFO is rejected without blocking") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const auto found = store.get(entry.key_hash, entry.canonical_key);
    CHECK(found.outcome == LookupOutcome::corrupt_removed);
    CHECK_FALSE(fs::exists(fs::symlink_status(path)));
  }
  SECTION("a directory is a miss, not a crash, and is left alone") {
    fs::create_directory(path);
    const auto found = store.get(entry.key_hash, entry.canonical_key);
    CHECK(found.outcome != LookupOutcome::hit);
    CHECK(fs::is_directory(path));
  }
}

TEST_CASE("store: a forced file-name collision is a miss, never the other entry", "[cache]") {
  TempDir dir;
  StoreConfig config = config_for(dir.path());
  const Hash128 shared{0x1234, 0x5678};
  const kiln::cache::detail::StoreHooksScope hooks(
      kiln::cache::detail::file_name_hook([shared](const Hash128&) { return shared; }));
  Store store(config);
  const Entry a = make_entry("kernel_a", 2000);
  const Entry b = make_entry("kernel_b", 3000);
  REQUIRE(a.key_hash != b.key_hash);
  REQUIRE(store.entry_path(a.key_hash) == store.entry_path(b.key_hash));

  REQUIRE(store.put(a));
  const auto as_b = store.get(b.key_hash, b.canonical_key);
  INFO(as_b.detail);
  CHECK(as_b.outcome != LookupOutcome::hit);
  CHECK_FALSE(as_b.entry);
  CHECK(as_b.detail.find("key mismatch") != std::string::npos);

  REQUIRE(store.put(b));
  const auto b_again = store.get(b.key_hash, b.canonical_key);
  REQUIRE(b_again.outcome == LookupOutcome::hit);
  CHECK(b_again.entry->payload == b.payload);
  const auto as_a = store.get(a.key_hash, a.canonical_key);
  CHECK(as_a.outcome != LookupOutcome::hit);
  CHECK_FALSE(as_a.entry);

  SECTION("same key hash, different canonical key (a true collision)") {
    Store plain(config_for(dir.path() / "plain"));
    Entry forged = make_entry("kernel_c", 100);
    REQUIRE(plain.put(forged));
    // Ask for forged's hash with another canonical key: the stored key is compared, so no hit.
    const auto found = plain.get(forged.key_hash, a.canonical_key);
    CHECK(found.outcome != LookupOutcome::hit);
    CHECK_FALSE(found.entry);
  }
}

TEST_CASE("store: an sm_80 entry never serves sm_90; another compiler version misses", "[cache]") {
  TempDir dir;
  StoreConfig config = config_for(dir.path());
  const Entry sm80 = make_entry("k", 1000, "sm_80");
  const Entry sm90 = make_entry("k", 1000, "sm_90");
  const Entry older_compiler = make_entry("k", 1000, "sm_90", "nvrtc 12.4");
  REQUIRE(sm80.key_hash != sm90.key_hash);
  REQUIRE(sm90.key_hash != older_compiler.key_hash);
  {
    Store store(config);
    REQUIRE(store.put(sm80));
    CHECK(store.get(sm90.key_hash, sm90.canonical_key).outcome == LookupOutcome::miss);
    REQUIRE(store.put(older_compiler));
    CHECK(store.get(sm90.key_hash, sm90.canonical_key).outcome == LookupOutcome::miss);
    CHECK(store.get(sm80.key_hash, sm80.canonical_key).outcome == LookupOutcome::hit);
  }
  // Even forced onto one file name, the stored canonical key keeps them apart.
  const kiln::cache::detail::StoreHooksScope hooks(kiln::cache::detail::file_name_hook([](const Hash128&) {
    return Hash128{1, 2};
  }));
  Store forced(config);
  REQUIRE(forced.put(sm80));
  CHECK_FALSE(forced.get(sm90.key_hash, sm90.canonical_key).entry);
  REQUIRE(forced.put(older_compiler));
  CHECK_FALSE(forced.get(sm90.key_hash, sm90.canonical_key).entry);

  const auto differences = kiln::cache::diff_keys(*CanonicalKey::parse(sm80.canonical_key),
                                                  *CanonicalKey::parse(older_compiler.canonical_key));
  REQUIRE(differences.size() == 2);
  CHECK(differences[0].name == "compiler");
  CHECK(differences[0].description == "nvrtc 13.0 -> nvrtc 12.4");
  CHECK(differences[1].description == "sm_80 -> sm_90");
}

TEST_CASE("store: a writer destroyed before commit leaves nothing", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("uncommitted", 10000);
  const fs::path path = store.entry_path(entry.key_hash);
  fs::create_directories(path.parent_path());
  const std::vector<std::byte> bytes = kiln::cache::serialize(entry);
  {
    kiln::cache::detail::AtomicFile file(path.string());
    REQUIRE(file.error() == 0);
    REQUIRE(file.write(std::span(bytes).first(bytes.size() / 2)));
    CHECK(fs::exists(file.temp_path()));
    CHECK(mode_of(file.temp_path()) == 0600);
    CHECK(file.temp_path().find(".tmp.") != std::string::npos);
  }
  CHECK(temp_files(dir.path()).empty());
  CHECK_FALSE(fs::exists(path));
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);

  // A committed one is complete under its final name and leaves no temp.
  {
    kiln::cache::detail::AtomicFile file(path.string());
    REQUIRE(file.write(bytes));
    REQUIRE(file.commit());
  }
  CHECK(temp_files(dir.path()).empty());
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);
}

TEST_CASE("store: a writer killed mid-write leaves no entry; its temp is swept later", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("killed", 200000);
  const fs::path path = store.entry_path(entry.key_hash);
  fs::create_directories(path.parent_path());
  const std::vector<std::byte> bytes = kiln::cache::serialize(entry);

  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t writer = ::fork();
  if (writer == 0) {
    kiln::cache::detail::AtomicFile file(path.string());
    (void)file.write(std::span(bytes).first(bytes.size() / 3));
    (void)!::write(ready[1], "w", 1);
    for (;;) ::pause();  // killed here, mid-write
  }
  REQUIRE(writer > 0);
  char signal_byte = 0;
  REQUIRE(::read(ready[0], &signal_byte, 1) == 1);
  ::kill(writer, SIGKILL);
  int status = 0;
  ::waitpid(writer, &status, 0);
  REQUIRE(WIFSIGNALED(status));

  const auto temps = temp_files(dir.path());
  REQUIRE(temps.size() == 1);
  CHECK_FALSE(fs::exists(path));
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  CHECK(store.list().empty());
  CHECK(store.sweep_temps(3600s) == 0);  // too young to judge
  backdate(temps[0], 7200s);
  CHECK(store.sweep_temps(3600s) == 1);
  CHECK(temp_files(dir.path()).empty());

  SECTION("a live writer's old temp is kept") {
    const pid_t sleeper = ::fork();
    if (sleeper == 0) {
      for (;;) ::pause();
    }
    REQUIRE(sleeper > 0);
    const fs::path live = path.parent_path() / (".x.kiln.tmp." + std::to_string(sleeper) + ".00ff");
    write_bytes(live, std::span(bytes).first(10));
    backdate(live, 7200s);
    CHECK(store.sweep_temps(60s) == 0);
    CHECK(fs::exists(live));
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, &status, 0);
    CHECK(store.sweep_temps(60s) == 1);
    CHECK_FALSE(fs::exists(live));
  }
}

TEST_CASE("store: compile leases", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("leased", 1000);
  const fs::path lease_path = dir.path() / "lock" / (entry.key_hash.hex() + ".lease");

  SECTION("owned, then released; a second waiter in a live owner's shadow times out") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    REQUIRE(fs::exists(lease_path));
    std::ifstream in(lease_path);
    long pid = 0;
    std::string host;
    long long stamp = 0;
    in >> pid >> host >> stamp;
    CHECK(pid == ::getpid());
    CHECK_FALSE(host.empty());
    CHECK(stamp > 1700000000);
    const auto other = store.acquire_lease(entry.key_hash, 50ms);  // the owner (this process) is alive
    CHECK_FALSE(other.owned());
    CHECK(fs::exists(lease_path));
    lease.release();
    CHECK_FALSE(fs::exists(lease_path));
  }

  SECTION("a lease whose owner died is broken") {
    const ChildResult child = run_in_child([&]() -> std::string {
      Store child_store(config_for(dir.path()));
      auto lease = child_store.acquire_lease(entry.key_hash, 1s);
      if (!lease.owned()) return "child did not get the lease";
      std::fflush(stderr);
      ::_exit(0);  // dies holding it: no destructor runs
    });
    REQUIRE(child.failure.empty());
    REQUIRE(fs::exists(lease_path));
    const auto start = std::chrono::steady_clock::now();
    auto lease = store.acquire_lease(entry.key_hash, 20s);
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(lease.owned());
    UNSCOPED_INFO("broke a dead owner's lease after "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  }

  SECTION("a live owner in another process is respected until it finishes") {
    int ready[2];
    int go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    const pid_t owner = ::fork();
    if (owner == 0) {
      Store child_store(config_for(dir.path()));
      auto lease = child_store.acquire_lease(entry.key_hash, 1s);
      (void)!::write(ready[1], lease.owned() ? "y" : "n", 1);
      char c = 0;
      (void)!::read(go[0], &c, 1);
      (void)child_store.put(entry);  // the compile finishes and is published
      lease.release();
      ::_exit(0);
    }
    REQUIRE(owner > 0);
    char answer = 0;
    REQUIRE(::read(ready[0], &answer, 1) == 1);
    REQUIRE(answer == 'y');
    const auto timed_out = store.acquire_lease(entry.key_hash, 200ms);
    CHECK_FALSE(timed_out.owned());
    CHECK(fs::exists(lease_path));
    std::thread finish([&] {
      std::this_thread::sleep_for(100ms);
      (void)!::write(go[1], "g", 1);
    });
    const auto after = store.acquire_lease(entry.key_hash, 20s);
    finish.join();
    CHECK_FALSE(after.owned());  // the owner finished: read the store
    CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);
    int status = 0;
    ::waitpid(owner, &status, 0);
  }

  SECTION("a stale lease from another host is broken by age; a fresh one is respected") {
    fs::create_directories(lease_path.parent_path());
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view("1 other-host 1700000000 00\n"))));
    const auto respected = store.acquire_lease(entry.key_hash, 100ms);
    CHECK_FALSE(respected.owned());
    backdate(lease_path, Store::kLeaseStaleAge + 30s);
    const auto broken = store.acquire_lease(entry.key_hash, 2s);
    CHECK(broken.owned());
  }

  // Third probe: a lease left by a live process that is not compiling stalled a waiter for 60 s, while
  // the warning promised "up to 119 s more". A holder now refreshes its lease while it works, so one
  // that stopped refreshing is broken once it is kLeaseStaleAge old.
  SECTION("a live holder that stopped refreshing its lease is waited for until it is stale, not the whole wait") {
    const kiln::test::LiveChild holder;
    fs::create_directories(lease_path.parent_path());
    const std::string text = holder.lease_text();
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view(text))));
    backdate(lease_path, Store::kLeaseStaleAge - 2s);
    const auto started = std::chrono::steady_clock::now();
    const auto lease = store.acquire_lease(entry.key_hash, 40s);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    CHECK(lease.owned());
    CHECK(waited < 10.0);
  }

  SECTION("a lease is refreshed while its holder holds it") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    backdate(lease_path, 10s);
    std::this_thread::sleep_for(Store::kLeaseRefresh + 1500ms);
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(lease_path);
    CHECK(age < std::chrono::duration_cast<fs::file_time_type::duration>(Store::kLeaseRefresh + 1s));
    lease.release();
    CHECK_FALSE(fs::exists(lease_path));
  }

  SECTION("release leaves a lease that is no longer ours") {
    auto lease = store.acquire_lease(entry.key_hash, 1s);
    REQUIRE(lease.owned());
    write_bytes(lease_path, std::as_bytes(std::span(std::string_view("1 other-host 1700000000 01\n"))));
    lease.release();
    CHECK(fs::exists(lease_path));
  }

  SECTION("an existing entry means nothing to compile") {
    REQUIRE(store.put(entry));
    const auto lease = store.acquire_lease(entry.key_hash, 1s);
    CHECK_FALSE(lease.owned());
    CHECK_FALSE(fs::exists(lease_path));
  }
}

TEST_CASE("store: eviction trims the oldest entries to the target", "[cache]") {
  TempDir dir;
  StoreConfig config = config_for(dir.path());
  Store* self = nullptr;
  std::function<void(const std::vector<kiln::cache::EntryFile>&)> on_scan;
  const kiln::cache::detail::StoreHooksScope hooks(
      kiln::cache::detail::trim_scan_hook([&on_scan](const std::vector<kiln::cache::EntryFile>& files) {
        if (on_scan) on_scan(files);
      }));
  Store store(config);
  self = &store;
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  for (int i = 0; i < 20; ++i) {
    entries.push_back(make_entry("evict" + std::to_string(i), 10000));
    REQUIRE(store.put(entries.back()));
    // entry i was last used i days ago (entry 0 is the newest)
    backdate(store.entry_path(entries.back().key_hash), std::chrono::hours(24) * (i + 2));
    total += fs::file_size(store.entry_path(entries.back().key_hash));
  }
  const std::uint64_t cap = total / 2;
  const std::uint64_t target = cap / 10 * 9;

  SECTION("oldest removed first, newest kept, total <= 90% of the cap") {
    const auto result = store.trim(target);
    REQUIRE(result);
    CHECK(result->bytes_before == total);
    CHECK(result->bytes_after <= target);
    CHECK(result->removed > 0);
    std::uint64_t remaining = 0;
    for (const auto& file : store.list()) remaining += file.size;
    CHECK(remaining == result->bytes_after);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const bool kept = fs::exists(store.entry_path(entries[i].key_hash));
      // Kept exactly the newest ones: everything younger than a kept entry is kept too.
      CHECK(kept == (i < entries.size() - result->removed));
    }
    CHECK(store.evictions() == result->removed);
    CHECK(store.size_estimate() == remaining);
  }

  SECTION("an entry used between the scan and the delete survives") {
    const Entry& oldest = entries.back();
    on_scan = [&](const std::vector<kiln::cache::EntryFile>& files) {
      REQUIRE(files.front().file_hash == oldest.key_hash);  // sorted oldest first
      // A hit on a day-old entry touches it (its LRU age).
      REQUIRE(self->get(oldest.key_hash, oldest.canonical_key).outcome == LookupOutcome::hit);
    };
    const auto result = store.trim(target);
    REQUIRE(result);
    CHECK(fs::exists(store.entry_path(oldest.key_hash)));
    CHECK(result->bytes_after <= target);
    CHECK_FALSE(fs::exists(store.entry_path(entries[entries.size() - 2].key_hash)));
  }

  SECTION("one process trims at a time") {
    const int held = ::open((dir.path() / "lock" / "trim").c_str(), O_RDWR | O_CREAT, 0600);
    REQUIRE(held >= 0);
    REQUIRE(::flock(held, LOCK_EX) == 0);
    CHECK_FALSE(store.trim(target));
    ::close(held);
    CHECK(store.trim(target));
  }
}

TEST_CASE("store: put keeps the cache under its size cap", "[cache]") {
  TempDir dir;
  StoreConfig config = config_for(dir.path());
  config.max_size = 100000;
  Store store(config);
  Entry last;
  for (int i = 0; i < 30; ++i) {
    last = make_entry("capped" + std::to_string(i), 9000);
    REQUIRE(store.put(last));
    std::uint64_t total = 0;
    for (const auto& file : store.list()) total += file.size;
    CHECK(total <= config.max_size);
    CHECK(store.size_estimate() == total);
  }
  CHECK(store.get(last.key_hash, last.canonical_key).outcome == LookupOutcome::hit);
  CHECK(store.evictions() > 0);

  SECTION("a lost size file is measured again") {
    fs::remove(dir.path() / "lock" / "size");
    const Entry extra = make_entry("after-loss", 100);
    REQUIRE(store.put(extra));
    std::uint64_t total = 0;
    for (const auto& file : store.list()) total += file.size;
    CHECK(store.size_estimate() == total);
  }
}

TEST_CASE("store: read-only by configuration and environment", "[cache]") {
  TempDir dir;
  const Entry cached = make_entry("cached", 3000);
  const Entry fresh = make_entry("fresh", 3000);
  {
    Store writer(config_for(dir.path()));
    REQUIRE(writer.put(cached));
    backdate(writer.entry_path(cached.key_hash), 72h);
  }
  const auto before = fs::last_write_time(Store(config_for(dir.path())).entry_path(cached.key_hash));

  StoreConfig config;
  SECTION("StoreConfig::read_only") {
    config = config_for(dir.path());
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
        Store store(config_for(root));
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
        Store store(config_for(root));
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
  CHECK(count_lines_with(result.stderr_text, "kiln: warning:") == 0);
  CHECK(temp_files(root).empty());
  CHECK(entry_files(root).size() == 1);
}

TEST_CASE("store: a failed write leaves no temp file and warns once", "[cache]") {
  TempDir dir;
  const Entry big = make_entry("too-big", 256 * 1024);
  const Entry big2 = make_entry("too-big-2", 256 * 1024);
  const Entry small = make_entry("small", 100);
  const ChildResult result = run_in_child([&]() -> std::string {
    Store store(config_for(dir.path()));
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
  CHECK(count_lines_with(result.stderr_text, "kiln: warning:") == 1);
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
  Store store(config_for(root));
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
  Store store(config_for(dir.path() / "cache"));
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
  Store store(config_for(dir.path() / "link"));
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

TEST_CASE("stats: counters and persistent shards", "[cache]") {
  using kiln::cache::Counters;
  Counters a{.memory_hits = 3, .disk_hits = 1, .misses = 4, .compiles = 4};
  const Counters b{.memory_hits = 1, .misses = 1, .corrupt_removed = 2};
  a += b;
  CHECK(a.memory_hits == 4);
  CHECK(a.corrupt_removed == 2);
  CHECK(a.hit_ratio() == Approx(5.0 / 10.0));
  CHECK(Counters{}.hit_ratio() == 0.0);

  kiln::cache::AtomicCounters atomic;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&atomic] {
      for (int i = 0; i < 1000; ++i) atomic.add({.disk_hits = 1, .bytes_read = 10});
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(atomic.snapshot().disk_hits == 4000);
  CHECK(atomic.snapshot().bytes_read == 40000);
  atomic.reset();
  CHECK(atomic.snapshot().disk_hits == 0);

  TempDir dir;
  kiln::cache::PersistentStats stats(dir.path());
  stats.add({.compiles = 2, .compile_nanoseconds = 500});
  // Other processes land in other shards (pid % 16); several children make sure shards are summed.
  for (int child = 0; child < 5; ++child) {
    REQUIRE(run_in_child([&]() -> std::string {
              kiln::cache::PersistentStats(dir.path()).add({.disk_hits = 10, .compiles = 1});
              return "";
            }).failure.empty());
  }
  const Counters total = stats.load_total();
  CHECK(total.compiles == 7);
  CHECK(total.disk_hits == 50);
  CHECK(total.compile_nanoseconds == 500);
  stats.zero();
  CHECK(stats.load_total().compiles == 0);
  // A root that does not exist: ignored, never an error.
  kiln::cache::PersistentStats missing(dir.path() / "absent" / "deeper");
  missing.add({.compiles = 1});
  CHECK(missing.load_total().compiles == 0);
}

TEST_CASE("store: a damaged large entry (read with readv) is removed like a small one", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("large", 400000);  // over kWholeReadBytes: fixed part, then one readv
  const fs::path path = store.entry_path(entry.key_hash);
  const std::vector<std::byte> good = kiln::cache::serialize(entry);
  const std::size_t payload_at =
      good.size() - kiln::cache::kEntryEpilogueBytes - entry.aux.size() - entry.payload.size();
  REQUIRE(store.put(entry));
  const auto hit = store.get(entry.key_hash, entry.canonical_key);
  REQUIRE(hit.outcome == LookupOutcome::hit);
  CHECK(same_entry(*hit.entry, entry));
  const std::vector<std::pair<std::string, std::function<void(std::vector<std::byte>&)>>> damages = {
      {"magic", [](auto& b) { b[0] ^= std::byte{1}; }},
      {"payload length", [](auto& b) { b[66] ^= std::byte{1}; }},
      {"canonical key", [](auto& b) { b[150] ^= std::byte{1}; }},
      {"payload start", [payload_at](auto& b) { b[payload_at] ^= std::byte{1}; }},
      {"payload end", [payload_at, &entry](auto& b) { b[payload_at + entry.payload.size() - 1] ^= std::byte{1}; }},
      {"checksum", [](auto& b) { b[b.size() - 20] ^= std::byte{1}; }},
      {"end magic", [](auto& b) { b.back() ^= std::byte{1}; }},
      {"truncated in the payload", [payload_at](auto& b) { b.resize(payload_at + 1000); }},
      {"truncated by one byte", [](auto& b) { b.pop_back(); }},
      {"trailing byte", [](auto& b) { b.push_back(std::byte{0}); }},
  };
  for (const auto& [what, apply] : damages) {
    DYNAMIC_SECTION(what) {
      std::vector<std::byte> bytes = good;
      apply(bytes);
      write_bytes(path, bytes);
      const auto found = store.get(entry.key_hash, entry.canonical_key);
      INFO(found.detail);
      CHECK(found.outcome == LookupOutcome::corrupt_removed);
      CHECK_FALSE(fs::exists(path));
    }
  }
  SECTION("another key at the path (a collision) is a miss, never the other entry") {
    const Entry other = make_entry("large-other", 400000);
    const auto found = store.get(entry.key_hash, other.canonical_key);
    CHECK(found.outcome == LookupOutcome::corrupt_removed);
    CHECK(found.detail.find("key mismatch") != std::string::npos);
  }
}

TEST_CASE("store: scan_shard reads headers or whole entries and lists what list() lists", "[cache]") {
  using kiln::cache::ScanDepth;
  using kiln::cache::ScannedEntry;
  TempDir dir;
  Store store(config_for(dir.path()));
  // A small entry, a large one (over kWholeReadBytes), one whose header is longer than the first read
  // (a 40 KB canonical key), one whose payload is damaged, one truncated, one holding another key.
  Entry small = make_entry("small", 700);
  Entry large = make_entry("large", 300000);
  Entry long_key = make_entry("long_key", 500);
  {
    CanonicalKey key;
    key.add("source", std::string(40000, 's'));
    long_key.canonical_key = key.bytes();
    long_key.key_hash = key.hash();
  }
  const Entry damaged = make_entry("damaged", 2000);
  const Entry truncated = make_entry("truncated", 2000);
  const Entry misplaced = make_entry("misplaced", 2000);
  const Entry holder = make_entry("holder", 100);
  for (const Entry* e : std::initializer_list<const Entry*>{&small, &large, &long_key, &damaged, &truncated, &holder}) {
    REQUIRE(store.put(*e));
  }
  {
    std::vector<std::byte> bytes = kiln::cache::serialize(damaged);
    bytes[bytes.size() - kiln::cache::kEntryEpilogueBytes - 100] ^= std::byte{1};
    write_bytes(store.entry_path(damaged.key_hash), bytes);
    bytes = kiln::cache::serialize(truncated);
    bytes.resize(bytes.size() - 10);
    write_bytes(store.entry_path(truncated.key_hash), bytes);
    // The holder's bytes at the misplaced key's path: the file name names another key.
    fs::create_directories(store.entry_path(misplaced.key_hash).parent_path());
    fs::copy_file(store.entry_path(holder.key_hash), store.entry_path(misplaced.key_hash));
  }
  // What list() skips, scan_shard skips: a symbolic link, a FIFO, a temp file, stray names.
  const fs::path shard = store.entry_path(small.key_hash).parent_path();
  fs::create_symlink(store.entry_path(small.key_hash),
                     shard / ("0123456789abcdef0123456789abcd" + std::string(".kiln")));
  REQUIRE(::mkfifo((shard / "fedcba9876543210fedcba98765432.kiln").c_str(), 0600) == 0);
  write_bytes(shard / ".0123456789abcdef0123456789abcd.kiln.tmp.1.x", kiln::cache::serialize(small));
  write_bytes(shard / "README", kiln::cache::serialize(small));
  write_bytes(shard / "0123456789ABCDEF0123456789ABCD.kiln", kiln::cache::serialize(small));

  std::set<std::string> listed;
  for (const auto& file : store.list()) listed.insert(file.path.string());
  REQUIRE(listed.size() == 7);

  struct Seen {
    std::uint64_t size = 0;
    bool has_header = false;
    bool has_entry = false;
    Hash128 held;
    std::string target;
    std::string error;
    std::chrono::system_clock::time_point mtime;
  };
  const auto scan = [&](ScanDepth depth, bool with_mtime) {
    std::map<std::string, Seen> seen;
    for (unsigned i = 0; i < Store::kShardCount; ++i) {
      store.scan_shard(i, depth, with_mtime, [&](const ScannedEntry& e) {
        CHECK(e.path == store.entry_path(e.file_hash).string());
        Seen s;
        s.size = e.size;
        s.mtime = e.mtime;
        s.error = std::string(e.error);
        s.has_header = e.header != nullptr;
        s.has_entry = e.entry != nullptr;
        if (e.header != nullptr) {
          s.held = e.header->key_hash;
          s.target = std::string(e.header->target);
        }
        if (e.entry != nullptr) {
          s.held = e.entry->key_hash;
          s.target = e.entry->target;
        }
        CHECK(seen.emplace(std::string(e.path), s).second);
      });
    }
    return seen;
  };
  const auto path_of = [&](const Entry& e) { return store.entry_path(e.key_hash).string(); };

  for (const ScanDepth depth : {ScanDepth::lane, ScanDepth::header, ScanDepth::entry}) {
    for (const bool with_mtime : {false, true}) {
      DYNAMIC_SECTION("depth " << static_cast<int>(depth) << (with_mtime ? " with mtime" : "")) {
        const auto seen = scan(depth, with_mtime);
        std::set<std::string> paths;
        for (const auto& [path, s] : seen) paths.insert(path);
        CHECK(paths == listed);
        for (const auto& [path, s] : seen) {
          INFO(path << ": " << s.error);
          CHECK(s.size == fs::file_size(path));  // from fstat, or from a read that reached the end
          if (with_mtime || depth == ScanDepth::entry) {
            struct stat st {};
            REQUIRE(::stat(path.c_str(), &st) == 0);
            CHECK(std::chrono::duration_cast<std::chrono::seconds>(s.mtime.time_since_epoch()).count() == st.st_mtime);
          }
        }
        for (const Entry* e : std::initializer_list<const Entry*>{&small, &large, &long_key}) {
          const Seen& s = seen.at(path_of(*e));
          INFO(path_of(*e) << ": " << s.error);
          CHECK(s.error.empty());
          CHECK(s.held == e->key_hash);
          CHECK(s.target == e->target);
          CHECK(s.has_entry == (depth == ScanDepth::entry));
          CHECK(s.has_header == (depth != ScanDepth::entry));
        }
        // A damaged payload is found only by reading the whole entry.
        const Seen& d = seen.at(path_of(damaged));
        if (depth == ScanDepth::entry) {
          CHECK(d.error == "checksum mismatch");
        } else {
          CHECK(d.error.empty());
        }
        CHECK(seen.at(path_of(truncated)).error.starts_with("truncated: "));
        // The misplaced file parses (it is a good entry) and holds the other key: callers compare.
        CHECK(seen.at(path_of(misplaced)).error.empty());
        CHECK(seen.at(path_of(misplaced)).held == holder.key_hash);
      }
    }
  }
  SECTION("scanning deletes nothing") {
    (void)scan(ScanDepth::entry, true);
    CHECK(fs::exists(path_of(damaged)));
    CHECK(fs::exists(path_of(truncated)));
    CHECK(fs::exists(path_of(misplaced)));
  }
  SECTION("an unreadable entry is reported with list()'s size, not skipped") {
    // Directories others may search and read, entry files (0600) they may not open.
    for (const fs::path& d : {dir.path(), dir.path() / "v1", shard}) REQUIRE(::chmod(d.c_str(), 0755) == 0);
    const std::string path = path_of(small);
    const std::uint64_t size = fs::file_size(path);
    const ChildResult child = run_in_child(
        [&]() -> std::string {
          if (::geteuid() == 0) return {};  // could not drop privileges: nothing to check
          std::string failure = "not seen";
          store.scan_shard(static_cast<unsigned>(small.key_hash.high >> 56), ScanDepth::header, false,
                           [&](const ScannedEntry& e) {
                             if (e.path != path) return;
                             failure.clear();
                             if (!e.error.starts_with("cannot open")) failure = "error: " + std::string(e.error);
                             if (e.size != size) failure += " size differs";
                           });
          return failure;
        },
        RunAs::unprivileged);
    CHECK(child.failure.empty());
  }
}

TEST_CASE("store: lookups follow v1/ when it is removed and made again", "[cache]") {
  TempDir dir;
  Store store(config_for(dir.path()));
  const Entry entry = make_entry("again", 3000);
  REQUIRE(store.put(entry));
  REQUIRE(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);  // v1/ is held open now
  fs::remove_all(dir.path() / "v1");
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  SECTION("this store writes it again") { REQUIRE(store.put(entry)); }
  SECTION("another store (another process) writes it again") {
    Store other(config_for(dir.path()));
    REQUIRE(other.put(entry));
  }
  const auto found = store.get(entry.key_hash, entry.canonical_key);
  REQUIRE(found.outcome == LookupOutcome::hit);
  CHECK(found.entry->payload == entry.payload);
  // A damaged entry in the new v1/ is removed from there.
  std::vector<std::byte> bytes = kiln::cache::serialize(entry);
  bytes[200] ^= std::byte{1};
  write_bytes(store.entry_path(entry.key_hash), bytes);
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::corrupt_removed);
  CHECK_FALSE(fs::exists(store.entry_path(entry.key_hash)));
}
