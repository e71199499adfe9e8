// The on-disk store with synthetic entries: layout, integrity, atomic publish, eviction, stats, scans.
// The compile lease is in store_lease_test.cpp; read-only and refused roots, write failures and the
// configuration in store_access_test.cpp (the same test binary). No compiler, no GPU.
#include <sys/file.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "atomic_file.hpp"
#include "cache_test_support.hpp"
#include "kiln/cache/stats.hpp"
#include "store_hooks.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;

namespace {

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
  Store store(store_config(root));
  REQUIRE(store.mode() == StoreMode::read_write);
  CHECK(store.mode_reason().empty());

  const Entry entry = make_entry("saxpy", 5000);
  REQUIRE(store.put(entry));
  const std::string hex = entry.key_hash.hex();
  const fs::path expected = root / "v1" / hex.substr(0, 2) / (hex.substr(2) + ".kiln");
  CHECK(store.entry_path(entry.key_hash) == expected);
  REQUIRE(fs::is_regular_file(expected));
  // What the CLI asks by key: there is an entry file for it, and it reads back whole.
  CHECK(store.contains(entry.key_hash));
  CHECK_FALSE(store.contains(make_entry("absent", 16).key_hash));
  const auto read = store.read_entry(entry.key_hash);
  REQUIRE(std::holds_alternative<Entry>(read));
  CHECK(std::get<Entry>(read).payload == entry.payload);
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
  Store store(store_config(dir.path()));
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
  Store store(store_config(dir.path()));
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
  StoreConfig config = store_config(dir.path());
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
    Store plain(store_config(dir.path() / "plain"));
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
  StoreConfig config = store_config(dir.path());
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
  Store store(store_config(dir.path()));
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
  Store store(store_config(dir.path()));
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

TEST_CASE("store: eviction trims the oldest entries to the target", "[cache]") {
  TempDir dir;
  StoreConfig config = store_config(dir.path());
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
  StoreConfig config = store_config(dir.path());
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
  Store store(store_config(dir.path()));
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
  Store store(store_config(dir.path()));
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
  Store store(store_config(dir.path()));
  const Entry entry = make_entry("again", 3000);
  REQUIRE(store.put(entry));
  REQUIRE(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::hit);  // v1/ is held open now
  fs::remove_all(dir.path() / "v1");
  CHECK(store.get(entry.key_hash, entry.canonical_key).outcome == LookupOutcome::miss);
  SECTION("this store writes it again") { REQUIRE(store.put(entry)); }
  SECTION("another store (another process) writes it again") {
    Store other(store_config(dir.path()));
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
