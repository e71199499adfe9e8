// Precompiled headers in the store (kiln/cache/pch_store.hpp), with files written as a compiler would write them:
// the trailer and its checks (damaged, cut short, foreign, another key's), the held descriptor, the records, the
// PCH share of the size cap, one LRU trim over entries and PCHs, a dead maker's temp, read-only stores, the lease.
// No compiler, no GPU.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <locale>

#include "cache_test_support.hpp"
#include "kiln/cache/pch_store.hpp"

using namespace kiln_test;
using kiln::cache::PchFile;
using kiln::cache::PchMiss;
using kiln::cache::PchRecord;

namespace {

Hash128 key_of(int i) { return kiln::cache::hash128(fmt::format("pch key {}", i)); }

std::string pch_bytes(std::size_t size, char fill) {
  std::string bytes = "EDG C/C++ version 6.6\n";
  bytes.resize(size, fill);
  return bytes;
}

/// Makes `key`'s PCH as the lane does: a draft, the compiler's bytes written into its temp file, published.
bool make_pch(Store& store, const Hash128& key, const std::string& bytes, std::string* why_out = nullptr,
              bool* too_large = nullptr) {
  std::string why;
  std::optional<kiln::cache::PchDraft> draft = store.begin_pch(key, why);
  REQUIRE(draft);
  std::ofstream(draft->temp_path(), std::ios::binary | std::ios::trunc) << bytes;
  const bool published = store.publish_pch(std::move(*draft), "made for k.cu", why, too_large);
  if (why_out != nullptr) *why_out = why;
  return published;
}

fs::path pch_path(const fs::path& root, const Hash128& key) {
  const std::string hex = key.hex();
  return root / "pch" / hex.substr(0, 2) / (hex.substr(2) + ".pch");
}

std::string read_text(const fs::path& path) {
  const std::vector<std::byte> bytes = read_bytes(path);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

TEST_CASE("pch store: published, opened and checked whole; the compiler reads the checked file", "[cache][pch]") {
  TempDir dir;
  Store store(store_config(dir.path()));
  const std::string bytes = pch_bytes(100000, 'a');
  REQUIRE(make_pch(store, key_of(1), bytes));
  const fs::path path = pch_path(dir.path(), key_of(1));
  REQUIRE(fs::exists(path));
  CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(fs::file_size(path) == bytes.size() + std::string("made for k.cu").size() + kiln::cache::kPchTrailerBytes);
  CHECK(temp_files(dir.path()).empty());
  CHECK(store.size_estimate() == fs::file_size(path));  // counted in the cache's size

  std::variant<PchFile, PchMiss> opened = store.open_pch(key_of(1));
  REQUIRE(std::holds_alternative<PchFile>(opened));
  const PchFile& file = std::get<PchFile>(opened);
  CHECK(file.pch_bytes() == bytes.size());
  CHECK(file.label() == "made for k.cu");
  CHECK(file.unchanged());
  // What the compiler opens: the checked file, even once another is renamed over its name or it is removed.
  CHECK(read_text(file.compiler_path()).substr(0, bytes.size()) == bytes);
  REQUIRE(make_pch(store, key_of(1), pch_bytes(100000, 'b')));
  CHECK(read_text(file.compiler_path()).substr(0, bytes.size()) == bytes);
  CHECK_FALSE(file.unchanged());  // no longer the file at its name (unlinked by the rename)
  CHECK(std::get<PchMiss>(store.open_pch(key_of(2))).reason == "none");
}

TEST_CASE("pch store: a damaged, cut short, foreign or another key's file is a miss and is removed", "[cache][pch]") {
  TempDir dir;
  Store store(store_config(dir.path()));
  const fs::path path = pch_path(dir.path(), key_of(1));
  for (const std::string damage : {"flipped", "cut short", "foreign", "another key", "empty", "grown"}) {
    INFO(damage);
    REQUIRE(make_pch(store, key_of(1), pch_bytes(50000, 'a')));
    const auto size = fs::file_size(path);
    if (damage == "flipped") {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(1000);
      f.write("zz", 2);
    } else if (damage == "cut short") {
      fs::resize_file(path, size - 100);
    } else if (damage == "foreign") {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(size, 'x');
    } else if (damage == "another key") {
      REQUIRE(make_pch(store, key_of(2), pch_bytes(50000, 'a')));
      fs::copy_file(pch_path(dir.path(), key_of(2)), path, fs::copy_options::overwrite_existing);
    } else if (damage == "empty") {
      fs::resize_file(path, 0);
    } else {
      std::ofstream(path, std::ios::binary | std::ios::app) << "more";
    }
    std::variant<PchFile, PchMiss> opened = store.open_pch(key_of(1));
    REQUIRE(std::holds_alternative<PchMiss>(opened));
    CHECK(std::get<PchMiss>(opened).removed);
    CHECK_FALSE(fs::exists(path));
  }
  CHECK(store.check_pch_file(pch_path(dir.path(), key_of(2))).empty());
  CHECK(store.check_pch_file(path).starts_with("cannot open"));
  // The running total follows the removals.
  CHECK(store.size_estimate() == store.remeasure_size());
}

TEST_CASE("pch store: a file changed in place after it was checked is no longer unchanged()", "[cache][pch]") {
  TempDir dir;
  Store store(store_config(dir.path()));
  REQUIRE(make_pch(store, key_of(1), pch_bytes(20000, 'a')));
  std::variant<PchFile, PchMiss> opened = store.open_pch(key_of(1));
  REQUIRE(std::holds_alternative<PchFile>(opened));
  const PchFile& file = std::get<PchFile>(opened);
  CHECK(file.unchanged());
  {
    std::fstream f(pch_path(dir.path(), key_of(1)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("zz", 2);
  }
  CHECK_FALSE(file.unchanged());  // ctime moved (a write in place that keeps the size and mtime shows there)
}

TEST_CASE("pch store: records round-trip; a record that does not parse is none", "[cache][pch]") {
  TempDir dir;
  Store store(store_config(dir.path()));
  PchRecord r;
  r.verdict = PchRecord::Verdict::does_not_pay;
  r.without_ms = {60.5, 61.25};
  r.with_ms = {154, 150};
  r.make_ms = 300;
  r.pch_bytes = 1234;
  r.why = "line one\nline two";
  REQUIRE(store.write_pch_record(key_of(1), r));
  const std::optional<PchRecord> back = store.read_pch_record(key_of(1));
  REQUIRE(back);
  CHECK(back->verdict == PchRecord::Verdict::does_not_pay);
  CHECK(back->without_ms == std::vector<double>{60.5, 61.25});
  CHECK(back->with_ms == std::vector<double>{154, 150});
  CHECK(back->make_ms == 300);
  CHECK(back->pch_bytes == 1234);
  CHECK(back->why == "line one line two");
  CHECK_FALSE(PchRecord::parse("verdict pays\n"));
  CHECK_FALSE(PchRecord::parse("kiln-pch-record 1\nverdict sometimes\n"));
  CHECK_FALSE(store.read_pch_record(key_of(2)));
}

TEST_CASE("pch store: a record's times read the same under any global locale; hostile numbers stop the list",
          "[cache][pch]") {
  // A host may set a global locale with a decimal comma; the record is kiln's own format, always with a point.
  struct Comma : std::numpunct<char> {
    char do_decimal_point() const override { return ','; }
  };
  const std::locale before = std::locale::global(std::locale(std::locale::classic(), new Comma));
  const std::optional<PchRecord> r =
      PchRecord::parse("kiln-pch-record 1\nverdict pays\nwithout_ms 60.500 61.250\n"
                       "with_ms  12.000\tx 3\nmake_ms 300.125\n");
  std::locale::global(before);
  REQUIRE(r);
  CHECK(r->without_ms == std::vector<double>{60.5, 61.25});
  CHECK(r->with_ms == std::vector<double>{12});  // stops at the first word that is no number
  CHECK(r->make_ms == 300.125);
  const std::optional<PchRecord> hostile =
      PchRecord::parse("kiln-pch-record 1\nverdict pays\nwithout_ms 1.5 nan 2\nwith_ms -4 1\nmake_ms inf\n");
  REQUIRE(hostile);
  CHECK(hostile->without_ms == std::vector<double>{1.5});
  CHECK(hostile->with_ms.empty());
  CHECK(hostile->make_ms == 0);
}

TEST_CASE("pch store: PCH files keep to their share of the cap, oldest first; one above it is not kept",
          "[cache][pch]") {
  TempDir dir;
  StoreConfig config = store_config(dir.path());
  config.max_size = 1 << 20;
  config.pch_max_size = 35000;
  Store store(config);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(make_pch(store, key_of(i), pch_bytes(10000, 'a')));
    backdate(pch_path(dir.path(), key_of(i)), std::chrono::hours(24) * (10 - i));  // 0 is the oldest
  }
  REQUIRE(make_pch(store, key_of(3), pch_bytes(10000, 'a')));
  CHECK_FALSE(fs::exists(pch_path(dir.path(), key_of(0))));
  CHECK(fs::exists(pch_path(dir.path(), key_of(2))));
  CHECK(fs::exists(pch_path(dir.path(), key_of(3))));
  std::uint64_t total = 0;
  for (const auto& item : store.list_pch()) total += item.size;
  CHECK(total <= config.pch_limit());

  bool too_large = false;
  std::string why;
  CHECK_FALSE(make_pch(store, key_of(9), pch_bytes(40000, 'a'), &why, &too_large));
  CHECK(too_large);
  CHECK(why.find("KILN_PCH_MAXSIZE") != std::string::npos);
  CHECK_FALSE(fs::exists(pch_path(dir.path(), key_of(9))));
  CHECK(temp_files(dir.path()).empty());

  StoreConfig defaults;
  defaults.max_size = 1000;
  CHECK(defaults.pch_limit() == 500);
  defaults.pch_max_size = 5000;
  CHECK(defaults.pch_limit() == 1000);  // never above the cache's own cap
}

fs::path record_path(const fs::path& root, const Hash128& key) {
  fs::path path = pch_path(root, key);
  return path.replace_extension(".pchv");
}

TEST_CASE("pch store: a use marks the record, and both trims go by last use, not by when a PCH was made",
          "[cache][pch]") {
  // The CuPy program of 2026-12-07: its CUB PCH, made first and used all along, went first when later sets
  // filled the share (the trim went by the .pch's mtime), and the next program made it again.
  TempDir dir;
  StoreConfig config = store_config(dir.path());
  config.max_size = 1 << 20;
  config.pch_max_size = 35000;
  Store store(config);
  PchRecord record;
  record.with_ms = {10.0};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(make_pch(store, key_of(i), pch_bytes(10000, 'a')));
    REQUIRE(store.write_pch_record(key_of(i), record));
    backdate(pch_path(dir.path(), key_of(i)), std::chrono::hours(24) * (10 - i));  // 0 was made first
    backdate(record_path(dir.path(), key_of(i)), std::chrono::hours(24) * (10 - i));
  }
  CHECK(store.touch_pch_record(key_of(0)));  // 0 used just now
  CHECK_FALSE(store.touch_pch_record(key_of(7)));  // no record: nothing made
  CHECK_FALSE(fs::exists(record_path(dir.path(), key_of(7))));
  for (const auto& item : store.list_pch()) {
    if (item.key != key_of(0) || item.record) continue;
    CHECK(item.used() > item.mtime);  // ls and prune show and order by the last use
    CHECK(std::chrono::system_clock::now() - item.used() < std::chrono::minutes(5));
  }
  {
    StderrCapture capture;
    REQUIRE(make_pch(store, key_of(3), pch_bytes(10000, 'a')));  // 40 KB: the share's trim to 31.5 KB
    CHECK(capture.text().find("smaller than the header sets in use") == std::string::npos);  // 1 went: 9 days idle
  }
  CHECK(fs::exists(pch_path(dir.path(), key_of(0))));
  CHECK_FALSE(fs::exists(pch_path(dir.path(), key_of(1))));
  CHECK(fs::exists(pch_path(dir.path(), key_of(2))));
  CHECK(fs::exists(pch_path(dir.path(), key_of(3))));

  // A trim that removes a PCH used within the last hour says the share is too small, once.
  CHECK(store.touch_pch_record(key_of(2)));
  CHECK(store.touch_pch_record(key_of(0)));
  {
    StderrCapture capture;
    REQUIRE(make_pch(store, key_of(4), pch_bytes(10000, 'a')));
    INFO(capture.text());
    CHECK(capture.text().find("smaller than the header sets in use") != std::string::npos);
  }
  CHECK(fs::exists(pch_path(dir.path(), key_of(4))));
  // 3 has no record: its own mtime (just made) is its last use; 2 and 0 were touched after it was made.
  CHECK(fs::exists(pch_path(dir.path(), key_of(0))));
  CHECK(fs::exists(pch_path(dir.path(), key_of(2))) != fs::exists(pch_path(dir.path(), key_of(3))));

  // The cache's own trim: a PCH made five days ago but used now outlives entries used hours ago.
  TempDir other;
  StoreConfig whole = store_config(other.path());
  whole.max_size = 200000;
  whole.pch_max_size = 200000;
  Store cache(whole);
  REQUIRE(make_pch(cache, key_of(1), pch_bytes(60000, 'a')));
  REQUIRE(cache.write_pch_record(key_of(1), record));
  backdate(pch_path(other.path(), key_of(1)), std::chrono::hours(24) * 5);
  for (int i = 0; i < 12; ++i) {
    const Entry entry = make_entry("used" + std::to_string(i), 10000);
    REQUIRE(cache.put(entry));
    backdate(cache.entry_path(entry.key_hash), std::chrono::hours(1) * (12 - i));
  }
  CHECK(cache.touch_pch_record(key_of(1)));
  const auto result = cache.trim(whole.max_size / 10 * 9);
  REQUIRE(result);
  CHECK(result->removed > 0);
  CHECK(fs::exists(pch_path(other.path(), key_of(1))));
}

TEST_CASE("pch store: the cache's trim takes entries and PCHs least recently used first, one LRU", "[cache][pch]") {
  TempDir dir;
  StoreConfig config = store_config(dir.path());
  config.max_size = 200000;
  config.pch_max_size = 200000;
  Store store(config);
  REQUIRE(make_pch(store, key_of(1), pch_bytes(60000, 'a')));
  backdate(pch_path(dir.path(), key_of(1)), std::chrono::hours(24) * 5);  // the oldest thing in the cache
  std::vector<Entry> entries;
  for (int i = 0; i < 12; ++i) {
    entries.push_back(make_entry("lru" + std::to_string(i), 10000));
    REQUIRE(store.put(entries.back()));
    backdate(store.entry_path(entries.back().key_hash), std::chrono::hours(1) * (12 - i));
  }
  // 60 KB of PCH and 12 x ~10 KB of entries pass the 200 KB cap: the trim to 180 KB takes the PCH first.
  const auto result = store.trim(config.max_size / 10 * 9);
  REQUIRE(result);
  CHECK_FALSE(fs::exists(pch_path(dir.path(), key_of(1))));
  CHECK(fs::exists(store.entry_path(entries.front().key_hash)));
  CHECK(result->bytes_after <= config.max_size / 10 * 9);
  CHECK(store.size_estimate() == result->bytes_after);
}

TEST_CASE("pch store: a maker that died leaves a temp the sweep removes; read-only stores read but make none",
          "[cache][pch]") {
  TempDir dir;
  {
    Store store(store_config(dir.path()));
    std::string why;
    const pid_t child = ::fork();
    if (child == 0) {
      std::optional<kiln::cache::PchDraft> draft = store.begin_pch(key_of(1), why);
      if (draft) std::ofstream(draft->temp_path()) << "half a PCH";
      ::_exit(draft ? 0 : 1);  // no destructor runs: the temp stays, as after a crash
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(temp_files(dir.path()).size() == 1);
    for (const fs::path& temp : temp_files(dir.path())) backdate(temp, std::chrono::hours(2));
    CHECK(store.sweep_temps(std::chrono::seconds(60)) == 1);
    CHECK(temp_files(dir.path()).empty());
    REQUIRE(make_pch(store, key_of(2), pch_bytes(1000, 'a')));
    // One maker per key across processes: the lease, taken and then refused while held.
    kiln::cache::CompileLease held = store.acquire_pch_lease(key_of(3), std::chrono::milliseconds(0));
    CHECK(held.owned());
    CHECK_FALSE(store.acquire_pch_lease(key_of(3), std::chrono::milliseconds(0)).owned());
    // Not owned once the PCH exists: nothing to make.
    CHECK_FALSE(store.acquire_pch_lease(key_of(2), std::chrono::milliseconds(0)).owned());
  }
  StoreConfig read_only = store_config(dir.path());
  read_only.read_only = true;
  Store store(read_only);
  CHECK(std::holds_alternative<PchFile>(store.open_pch(key_of(2))));
  std::string why;
  CHECK_FALSE(store.begin_pch(key_of(4), why));
  CHECK(why.find("read-only") != std::string::npos);
  CHECK_FALSE(store.write_pch_record(key_of(2), PchRecord{}));
}
