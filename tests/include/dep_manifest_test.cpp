// Dependency manifests (cache/include/kiln/cache/dep_manifest.hpp): record a compile's headers and absent
// probes under the request key, look the result key up by stat, re-hash only what changed, close the
// shadowing hole, and keep the entry store's contracts for damaged and unreadable files. No compiler, no GPU.
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "cache_test_support.hpp"
#include "dep_check.hpp"
#include "kiln/cache/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"

using namespace kiln_test;
using namespace std::chrono_literals;
using kiln::cache::ContentError;
using kiln::cache::DependencyChange;
using kiln::cache::DependencyManifests;
using kiln::cache::DependencySet;
using kiln::cache::FileStat;
using kiln::cache::HeaderRecord;
using kiln::cache::LookupStats;
using kiln::cache::Manifest;
using kiln::cache::ManifestConfig;
using kiln::cache::ManifestOutcome;
using kiln::cache::StoreMode;

namespace {

struct Request {
  std::string canonical;
  Hash128 key;
};

Request make_request(std::string_view source, std::string_view include_dirs = "/inc0\n/inc\n") {
  CanonicalKey key;
  key.add("format", "1");
  key.add("compiler", "nvrtc 13.0");
  key.add("target", "sm_90");
  key.add("include-dirs", include_dirs);
  key.add("source", source);
  return Request{key.bytes(), key.hash()};
}

Hash128 result_key(std::string_view name) { return kiln::cache::hash128(std::string("result:") + std::string(name)); }

/// A configuration whose stat trust window is `window` (0 by default: a file written or touched a moment ago
/// has a ctime of "now", which the real window would keep untrusted for two seconds).
ManifestConfig config_for(const fs::path& root, std::chrono::nanoseconds window = 0ns) {
  ManifestConfig config;
  config.root = root;
  config.trust_window = window;
  config.stat_memo = 0ns;  // every lookup stats (the memo has its own test case)
  return config;
}

void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  REQUIRE(out.good());
}

std::string read_text(const fs::path& path) {
  const std::vector<std::byte> bytes = read_bytes(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// The header as an include resolver records it (read long ago: trusted as far as the resolver knows).
HeaderRecord header_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return HeaderRecord{path.string(), kiln::cache::to_file_stat(st), true, kiln::cache::hash128(read_text(path))};
}

DependencySet deps(const std::vector<fs::path>& headers, const std::vector<fs::path>& absent = {}) {
  DependencySet set;
  for (const fs::path& header : headers) set.headers.push_back(header_of(header));
  for (const fs::path& path : absent) set.absent.push_back(path.string());
  std::sort(set.absent.begin(), set.absent.end());
  return set;
}

/// Moves a file's mtime (and atime) into the past; its ctime becomes "now".
void touch_past(const fs::path& path, std::chrono::seconds age) {
  const auto when = std::chrono::system_clock::now() - age;
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec =
      static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count());
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

/// A cache root and an include tree (inc0/ searched before inc/).
struct Fixture {
  TempDir tmp;
  fs::path root = tmp.path() / "cache";
  fs::path inc0 = tmp.path() / "inc0";
  fs::path inc = tmp.path() / "inc";
  Request request = make_request("#include <a.h>\n#include <b.h>\n");

  Fixture() {
    fs::create_directories(inc0);
    write_text(inc / "a.h", "#pragma once\nint a();\n");
    write_text(inc / "b.h", "#pragma once\n#include \"c/d.h\"\n");
    write_text(inc / "c" / "d.h", "#define D 1\n");
  }
  [[nodiscard]] DependencySet standard_deps() const {
    return deps({inc / "a.h", inc / "b.h", inc / "c" / "d.h"}, {inc0 / "a.h", inc0 / "b.h"});
  }
};

/// Stores a checksum (XXH3-128 with the manifest seed, high then low, little endian) of bytes [0, end) at `end`.
void seal(std::vector<std::byte>& bytes, std::size_t end) {
  const Hash128 sum = kiln::cache::hash128(std::span(bytes).first(end), kiln::cache::kManifestChecksumSeed);
  for (int i = 0; i < 8; ++i) {
    bytes[end + static_cast<std::size_t>(i)] = static_cast<std::byte>(sum.high >> (8 * i));
    bytes[end + 8 + static_cast<std::size_t>(i)] = static_cast<std::byte>(sum.low >> (8 * i));
  }
}

std::uint32_t u32_at(const std::vector<std::byte>& bytes, std::size_t offset) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::to_integer<std::uint32_t>(bytes[offset + static_cast<std::size_t>(i)]) << (8 * i);
  return value;
}

/// The head's size as the fixed part states it (canonical_len at 32, result_count at 48).
std::uint64_t head_size_of(const std::vector<std::byte>& bytes) {
  return kiln::cache::kManifestFixedBytes + std::uint64_t{u32_at(bytes, 32)} + 40 * std::uint64_t{u32_at(bytes, 48)} +
         16;
}

/// Re-seals both checksums (the head's, where the fixed part's counts place it inside the file, and the
/// file's), so that structure checks, not the checksums, see a change.
void reseal(std::vector<std::byte>& bytes) {
  if (bytes.size() < 64 + 32) return;
  if (const std::uint64_t head = head_size_of(bytes); head <= bytes.size() - 16) seal(bytes, head - 16);
  seal(bytes, bytes.size() - 16);
}

Manifest read_manifest(const DependencyManifests& manifests, const Hash128& key) {
  auto parsed = manifests.read_file(manifests.manifest_path(key));
  if (auto* error = std::get_if<ContentError>(&parsed)) FAIL("manifest does not parse: " << error->reason);
  return std::get<Manifest>(parsed);
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("manifest: record then lookup hits by stat alone, with zero header reads", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  REQUIRE(manifests.mode() == StoreMode::read_write);

  LookupStats stats;
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
  CHECK(stats.outcome == ManifestOutcome::no_manifest);

  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  const fs::path path = manifests.manifest_path(f.request.key);
  const std::string hex = f.request.key.hex();
  CHECK(path == f.root / "manifests" / hex.substr(0, 2) / (hex.substr(2) + ".kman"));
  REQUIRE(fs::is_regular_file(path));
  CHECK(mode_of(path) == 0600);
  CHECK(mode_of(path.parent_path()) == 0700);
  CHECK(mode_of(f.root / "manifests") == 0700);
  CHECK(temp_files(f.root).empty());

  const auto hit = manifests.lookup(f.request.key, f.request.canonical, &stats);
  REQUIRE(hit);
  CHECK(*hit == result_key("A"));
  CHECK(stats.outcome == ManifestOutcome::hit);
  CHECK(stats.reads == 0);
  CHECK(stats.bytes_hashed == 0);
  CHECK(stats.stats == 6);  // 3 headers + 2 absent paths, each once, and the absent paths' folder once
  CHECK(stats.inferred_absent == 0);
  CHECK(stats.refreshed == 0);
  CHECK_FALSE(stats.rewritten);

  // A fresh instance (a fresh process) finds the same answer.
  DependencyManifests again(config_for(f.root));
  CHECK(again.lookup(f.request.key, f.request.canonical) == result_key("A"));
  // Another request has no manifest.
  const Request other = make_request("int x;\n");
  CHECK_FALSE(again.lookup(other.key, other.canonical, &stats));
  CHECK(stats.outcome == ManifestOutcome::no_manifest);

  const Manifest manifest = read_manifest(manifests, f.request.key);
  CHECK(manifest.request_key == f.request.key);
  CHECK(manifest.request_canonical == f.request.canonical);
  CHECK(manifest.files.size() == 3);
  CHECK(manifest.absent.size() == 2);
  REQUIRE(manifest.results.size() == 1);
  CHECK(manifest.results[0].result_key == result_key("A"));
  CHECK(manifest.results[0].files == std::vector<std::uint32_t>{0, 1, 2});
  for (const HeaderRecord& header : manifest.files) CHECK(header.trusted_stat);
}

TEST_CASE("manifest: a touched but unchanged header is re-hashed once, then trusted again", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));

  touch_past(f.inc / "b.h", 3600s);  // new mtime and ctime, same bytes
  LookupStats stats;
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 1);
  CHECK(stats.bytes_hashed == read_text(f.inc / "b.h").size());
  CHECK(stats.refreshed == 1);
  CHECK(stats.rewritten);

  const Manifest manifest = read_manifest(manifests, f.request.key);
  struct stat st {};
  REQUIRE(::stat((f.inc / "b.h").c_str(), &st) == 0);
  CHECK(manifest.files[1].stat == kiln::cache::to_file_stat(st));
  CHECK(manifest.files[1].trusted_stat);

  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 0);
  CHECK(stats.refreshed == 0);
  CHECK_FALSE(stats.rewritten);
}

TEST_CASE("manifest: an edited, deleted or shadowed header is a miss, and why-miss names it", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  LookupStats stats;

  SECTION("edited") {
    write_text(f.inc / "c" / "d.h", "#define D 2\n");  // same size, other bytes
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::no_match);
    CHECK(stats.reads == 1);
    CHECK_THAT(stats.detail, Catch::Contains("changed") && Catch::Contains((f.inc / "c" / "d.h").string()));
    const auto why = manifests.explain(f.request.key, f.request.canonical);
    CHECK(why.outcome == ManifestOutcome::no_match);
    REQUIRE(why.results.size() == 1);
    CHECK(why.results[0].change == DependencyChange::changed);
    CHECK(why.results[0].path == (f.inc / "c" / "d.h").string());
    CHECK_THAT(why.results[0].detail, Catch::Contains("digest"));
    // The manifest is kept: putting the bytes back makes it hit again (after one re-hash).
    write_text(f.inc / "c" / "d.h", "#define D 1\n");
    CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
    CHECK(stats.reads == 1);
  }
  SECTION("deleted") {
    fs::remove(f.inc / "a.h");
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::no_match);
    CHECK(stats.reads == 0);
    const auto why = manifests.explain(f.request.key, f.request.canonical);
    REQUIRE(why.results.size() == 1);
    CHECK(why.results[0].change == DependencyChange::vanished);
    CHECK(why.results[0].path == (f.inc / "a.h").string());
  }
  SECTION("replaced by a directory") {
    fs::remove(f.inc / "a.h");
    fs::create_directory(f.inc / "a.h");
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    const auto why = manifests.explain(f.request.key, f.request.canonical);
    REQUIRE(why.results.size() == 1);
    CHECK(why.results[0].change == DependencyChange::changed);
  }
  SECTION("a new header at an absent path shadows a recorded one") {
    write_text(f.inc0 / "b.h", "#pragma once\n#include \"c/d.h\"\n");  // even with the same bytes
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::no_match);
    CHECK(stats.reads == 0);
    CHECK_THAT(stats.detail, Catch::Contains("appeared") && Catch::Contains((f.inc0 / "b.h").string()));
    const auto why = manifests.explain(f.request.key, f.request.canonical);
    REQUIRE(why.results.size() == 1);
    CHECK(why.results[0].change == DependencyChange::appeared);
    CHECK(why.results[0].path == (f.inc0 / "b.h").string());
    fs::remove(f.inc0 / "b.h");
    CHECK(manifests.lookup(f.request.key, f.request.canonical) == result_key("A"));
  }
  SECTION("an absent path whose folder became a file is still absent") {
    fs::remove_all(f.inc0);
    write_text(f.inc0, "not a folder\n");  // stat("inc0/a.h") now fails with ENOTDIR
    CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  }
}

TEST_CASE("manifest: several results (header version A, then B, then A again) all hit", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  const fs::path header = f.inc / "a.h";
  const auto set = [&] { return deps({header, f.inc / "b.h"}, {f.inc0 / "a.h"}); };

  write_text(header, "int version_a();\n");
  manifests.record(f.request.key, f.request.canonical, set(), result_key("A"));
  write_text(header, "int version_b(int);\n");
  LookupStats stats;
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));  // B not recorded yet
  manifests.record(f.request.key, f.request.canonical, set(), result_key("B"));
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("B"));
  CHECK(stats.reads == 0);
  CHECK(stats.results_checked == 1);

  write_text(header, "int version_a();\n");
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.results_checked == 2);
  CHECK(stats.reads == 1);  // read once, compared with both recorded digests
  CHECK(stats.stats == 4);  // a.h, b.h, inc0/a.h and its folder: each once for both results
  CHECK(stats.rewritten);
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 1);  // B is newest: its stale stat for a.h needs the bytes to rule it out
  write_text(header, "int version_b(int);\n");
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("B"));

  const Manifest manifest = read_manifest(manifests, f.request.key);
  REQUIRE(manifest.results.size() == 2);
  CHECK(manifest.results[0].result_key == result_key("B"));
  CHECK(manifest.results[1].result_key == result_key("A"));
  CHECK(manifest.files.size() == 3);  // a.h twice (two digests), b.h once: shared by path + digest
  CHECK(manifest.absent.size() == 1);

  // Recording a result key again replaces its older record (and moves it first).
  write_text(header, "int version_a();\n");
  manifests.record(f.request.key, f.request.canonical, set(), result_key("A"));
  const Manifest after = read_manifest(manifests, f.request.key);
  REQUIRE(after.results.size() == 2);
  CHECK(after.results[0].result_key == result_key("A"));
  CHECK(after.results[1].result_key == result_key("B"));
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 0);
}

TEST_CASE("manifest: at most max_results results, the oldest dropped", "[include]") {
  Fixture f;
  ManifestConfig config = config_for(f.root);
  config.max_results = 4;
  DependencyManifests manifests(config);
  for (int i = 0; i < 6; ++i) {
    write_text(f.inc / "a.h", fmt::format("int v{};\n", i));
    manifests.record(f.request.key, f.request.canonical, deps({f.inc / "a.h"}), result_key(std::to_string(i)));
  }
  const Manifest manifest = read_manifest(manifests, f.request.key);
  REQUIRE(manifest.results.size() == 4);
  for (int i = 0; i < 4; ++i)
    CHECK(manifest.results[static_cast<std::size_t>(i)].result_key == result_key(std::to_string(5 - i)));
  CHECK(manifest.files.size() == 4);  // the dropped results' header infos are gone too
  write_text(f.inc / "a.h", "int v0;\n");
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical));
  write_text(f.inc / "a.h", "int v2;\n");
  CHECK(manifests.lookup(f.request.key, f.request.canonical) == result_key("2"));
}

TEST_CASE("manifest: a header changed within the trust window is re-hashed on every lookup", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root, kiln::cache::kStatTrustWindow));  // the real window
  CHECK(kiln::cache::kStatTrustWindow == 2s);
  write_text(f.inc / "a.h", "int fresh();\n");  // mtime and ctime: now
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  const auto recorded_at = std::chrono::steady_clock::now();
  {
    const Manifest manifest = read_manifest(manifests, f.request.key);
    REQUIRE(manifest.files[0].path == (f.inc / "a.h").string());
    CHECK_FALSE(manifest.files[0].trusted_stat);
  }
  LookupStats stats;
  for (int i = 0; i < 3; ++i) {
    CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
    CHECK(stats.reads >= 1);      // a.h at least; the fixture's other headers are as fresh
    CHECK(stats.refreshed == 0);  // same stat, still inside the window: nothing to write
    CHECK_FALSE(stats.rewritten);
  }
  // A header the resolver did not trust is stored untrusted whatever its age.
  {
    DependencyManifests plain(config_for(f.root / "other"));
    DependencySet set = f.standard_deps();
    for (HeaderRecord& header : set.headers) header.trusted_stat = false;
    plain.record(f.request.key, f.request.canonical, set, result_key("A"));
    for (const HeaderRecord& header : read_manifest(plain, f.request.key).files) CHECK_FALSE(header.trusted_stat);
    CHECK(plain.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
    CHECK(stats.reads == 3);
    CHECK(stats.refreshed == 3);  // outside the (zero) window now: trusted from here on
    CHECK(plain.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
    CHECK(stats.reads == 0);
  }
  // Once the window has passed, one more re-hash makes it trusted, and then nothing is read.
  std::this_thread::sleep_until(recorded_at + kiln::cache::kStatTrustWindow + 300ms);
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads >= 1);
  CHECK(stats.refreshed >= 1);
  CHECK(stats.rewritten);
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 0);
}

TEST_CASE("manifest: a damaged manifest is a miss and is removed", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  const fs::path path = manifests.manifest_path(f.request.key);
  const auto record = [&] {
    manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    REQUIRE(fs::is_regular_file(path));
    return read_bytes(path);
  };
  const std::vector<std::byte> good = record();

  const auto expect_removed = [&](std::string_view reason) {
    LookupStats stats;
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::corrupt_removed);
    CHECK_THAT(stats.detail, Catch::Contains(std::string(reason)));
    CHECK_FALSE(fs::exists(fs::symlink_status(path)));
    // Recording again over it works, and hits.
    record();
    CHECK(manifests.lookup(f.request.key, f.request.canonical) == result_key("A"));
  };

  SECTION("a flipped byte") {
    std::vector<std::byte> bad = good;
    bad[bad.size() / 2] ^= std::byte{0x40};
    write_bytes(path, bad);
    expect_removed("checksum mismatch");
  }
  SECTION("truncated") {
    write_bytes(path, std::span(good).first(good.size() / 2));
    expect_removed("total_len");
  }
  SECTION("cut inside the fixed part") {
    write_bytes(path, std::span(good).first(40));
    expect_removed("truncated");
  }
  SECTION("empty") {
    write_bytes(path, std::span<const std::byte>());
    expect_removed("empty");
  }
  SECTION("garbage") {
    std::vector<std::byte> garbage(good.size());
    std::mt19937 random(7);
    for (std::byte& b : garbage) b = static_cast<std::byte>(random());
    write_bytes(path, garbage);
    expect_removed("bad magic");
  }
  SECTION("an entry file where a manifest should be") {
    write_bytes(path, kiln::cache::serialize(make_entry("k", 100)));
    expect_removed("bad magic");
  }
  SECTION("another format version") {
    std::vector<std::byte> bad = good;
    bad[8] = static_cast<std::byte>(kiln::cache::kManifestFormatVersion + 1);
    write_bytes(path, bad);
    expect_removed(fmt::format("format version {}", kiln::cache::kManifestFormatVersion + 1));
  }
  SECTION("a symbolic link") {
    fs::remove(path);
    fs::create_symlink(f.inc / "a.h", path);
    expect_removed("symbolic link");
    CHECK(fs::exists(f.inc / "a.h"));  // the target is untouched
  }
  SECTION("a FIFO") {
    fs::remove(path);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    expect_removed("not a regular file");
  }
  SECTION("the request's canonical key differs (same key: a collision)") {
    LookupStats stats;
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical + "x", &stats));
    CHECK(stats.outcome == ManifestOutcome::corrupt_removed);
    CHECK_THAT(stats.detail, Catch::Contains("key mismatch"));
    CHECK_FALSE(fs::exists(path));
  }
  SECTION("another request's manifest under this name") {
    const Request other = make_request("int other;\n");
    manifests.record(other.key, other.canonical, f.standard_deps(), result_key("O"));
    fs::rename(manifests.manifest_path(other.key), path);
    expect_removed("key mismatch");
  }
  SECTION("read-only: a miss, not removed") {
    std::vector<std::byte> bad = good;
    bad[bad.size() - 1] ^= std::byte{1};
    write_bytes(path, bad);
    ManifestConfig config = config_for(f.root);
    config.read_only = true;
    DependencyManifests reader(config);
    REQUIRE(reader.mode() == StoreMode::read_only);
    LookupStats stats;
    CHECK_FALSE(reader.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::corrupt);
    CHECK(fs::exists(path));
    // explain() never deletes either.
    CHECK(manifests.explain(f.request.key, f.request.canonical).outcome == ManifestOutcome::corrupt);
    CHECK(fs::exists(path));
  }
  SECTION("recording over a damaged manifest replaces it") {
    write_bytes(path, std::span(good).first(good.size() - 3));
    manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));
    CHECK(manifests.lookup(f.request.key, f.request.canonical) == result_key("B"));
    CHECK(read_manifest(manifests, f.request.key).results.size() == 1);
  }
}

TEST_CASE("manifest: an unreadable manifest is a miss and is not removed", "[include]") {
  Fixture f;
  {
    DependencyManifests manifests(config_for(f.root));
    manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  }
  const fs::path path = DependencyManifests(config_for(f.root)).manifest_path(f.request.key);
  REQUIRE(fs::exists(path));
  // Root reads any file whatever its mode: the lookup then runs as `nobody`, who owns the whole cache
  // tree (so it trusts it) but whose manifest has mode 000.
  if (::geteuid() == 0) {
    const auto [uid, gid] = nobody_ids();
    REQUIRE(::chmod(f.tmp.path().c_str(), 0711) == 0);  // nobody may pass through the test folder
    REQUIRE(::lchown(f.root.c_str(), uid, gid) == 0);
    for (const auto& item : fs::recursive_directory_iterator(f.root)) {
      REQUIRE(::lchown(item.path().c_str(), uid, gid) == 0);
    }
  }
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  const ChildResult child = run_in_child(
      [&]() -> std::string {
        DependencyManifests manifests(config_for(f.root));
        if (manifests.mode() != StoreMode::read_write) return "mode " + manifests.mode_reason();
        LookupStats stats;
        if (manifests.lookup(f.request.key, f.request.canonical, &stats)) return "a hit";
        if (stats.outcome != ManifestOutcome::io_error) return "outcome " + std::string(to_string(stats.outcome));
        if (stats.detail.find("Permission denied") == std::string::npos) return "detail " + stats.detail;
        if (manifests.explain(f.request.key, f.request.canonical).outcome != ManifestOutcome::io_error) {
          return "explain";
        }
        // Recording over a manifest that cannot be read would throw its results away: it is left alone.
        manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));
        return {};
      },
      RunAs::unprivileged);
  CHECK(child.failure.empty());
  INFO(child.stderr_text);
  CHECK(fs::exists(path));
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  // Still the original manifest, intact. (As root, a fresh instance distrusts the nobody-owned tree, so read
  // the bytes directly.)
  auto parsed = kiln::cache::parse_manifest(read_bytes(path));
  REQUIRE(std::holds_alternative<Manifest>(parsed));
  REQUIRE(std::get<Manifest>(parsed).results.size() == 1);
  CHECK(std::get<Manifest>(parsed).results[0].result_key == result_key("A"));
}

TEST_CASE("manifest: limits are enforced when reading and when recording", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  const fs::path path = manifests.manifest_path(f.request.key);
  const std::vector<std::byte> good = read_bytes(path);

  // Patches a u32 of the fixed part and re-seals the checksum (a hostile but well-sealed file).
  const auto patched = [&](std::size_t offset, std::uint32_t value) {
    std::vector<std::byte> bytes = good;
    for (int i = 0; i < 4; ++i) bytes[offset + static_cast<std::size_t>(i)] = static_cast<std::byte>(value >> (8 * i));
    reseal(bytes);
    return bytes;
  };
  const auto reason = [](const std::vector<std::byte>& bytes, const kiln::cache::ManifestLimits& limits = {}) {
    auto parsed = kiln::cache::parse_manifest(bytes, limits);
    return std::holds_alternative<ContentError>(parsed) ? std::get<ContentError>(parsed).reason : std::string("parsed");
  };
  CHECK(reason(good) == "parsed");
  CHECK(reason(patched(40, 0xFFFFFFFFu)) == "file count 4294967295 exceeds the limit 65536");
  CHECK_THAT(reason(patched(36, 1000)), Catch::Contains("the counts need at least"));  // allowed, but not in this file
  CHECK_THAT(reason(patched(32, 0xFFFFFFF0u)), Catch::Contains("canonical key length"));
  CHECK_THAT(reason(patched(48, 65)), Catch::Contains("result count 65 exceeds"));
  CHECK_THAT(reason(patched(52, 0)), Catch::Contains("indices do not fit"));
  CHECK_THAT(reason(patched(12, 1)), Catch::Contains("reserved"));
  // The first path's length (right after the head) set past the end of the file.
  CHECK_THAT(reason(patched(head_size_of(good), 0x7FFFFFFF)), Catch::Contains("cut off"));
  // A head whose checksum does not match, and a summary that is not its result's (well sealed).
  {
    std::vector<std::byte> bytes = good;
    bytes[head_size_of(good) - 20] ^= std::byte{1};  // the last summary's absent count
    seal(bytes, bytes.size() - 16);
    CHECK(reason(bytes) == "head checksum mismatch");
    reseal(bytes);
    CHECK_THAT(reason(bytes), Catch::Contains("the head's summary is not the result's"));
  }
  // A header info naming a path out of range.
  {
    Manifest manifest = read_manifest(manifests, f.request.key);
    const std::vector<std::byte> bytes = kiln::cache::serialize_manifest(manifest);
    CHECK(bytes == good);  // one serializer: what record() wrote is what serialize_manifest() writes
    manifest.results[0].files.push_back(99);
    CHECK_THROWS_AS(kiln::cache::serialize_manifest(manifest), std::length_error);
  }
  kiln::cache::ManifestLimits small;
  small.max_files = 2;
  CHECK(reason(good, small) == "file count 3 exceeds the limit 2");
  small = {};
  small.max_path_bytes = 8;
  CHECK_THAT(reason(good, small), Catch::Contains("exceeds the limit 8"));
  small = {};
  small.max_file_bytes = good.size() - 1;
  CHECK_THAT(reason(good, small), Catch::Contains("file length"));

  SECTION("a reader with smaller limits removes the manifest") {
    ManifestConfig config = config_for(f.root);
    config.limits.max_absent = 1;
    DependencyManifests strict(config);
    LookupStats stats;
    CHECK_FALSE(strict.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::corrupt_removed);
    CHECK_THAT(stats.detail, Catch::Contains("absent path count 2 exceeds the limit 1"));
  }
  SECTION("recording more than the limits allow is refused, with one warning") {
    ManifestConfig config = config_for(f.root / "small");
    config.limits.max_files = 2;
    DependencyManifests strict(config);
    StderrCapture capture;
    strict.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    strict.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    CHECK_FALSE(fs::exists(strict.manifest_path(f.request.key)));
    CHECK(capture.warnings() == 1);
    CHECK_THAT(capture.text(), Catch::Contains("3 headers (limit 2)"));
  }
  SECTION("old results that no longer fit are dropped") {
    ManifestConfig config = config_for(f.root / "small");
    config.limits.max_files = 3;
    DependencyManifests strict(config);
    strict.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    write_text(f.inc / "a.h", "int changed();\n");
    strict.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));  // 4 infos with A
    const Manifest manifest = read_manifest(strict, f.request.key);
    REQUIRE(manifest.results.size() == 1);
    CHECK(manifest.results[0].result_key == result_key("B"));
  }
  SECTION("bad paths and keys are refused") {
    StderrCapture capture;
    DependencySet relative = f.standard_deps();
    relative.headers[0].path = "inc/a.h";
    DependencyManifests fresh(config_for(f.root / "refusals"));
    fresh.record(f.request.key, f.request.canonical, relative, result_key("A"));
    DependencySet long_path = f.standard_deps();
    long_path.absent.push_back("/" + std::string(5000, 'x'));
    fresh.record(f.request.key, f.request.canonical, long_path, result_key("A"));
    fresh.record(f.request.key, f.request.canonical + "x", f.standard_deps(), result_key("A"));  // key != hash
    CHECK_FALSE(fs::exists(fresh.manifest_path(f.request.key)));
    CHECK(capture.warnings() == 1);
    CHECK_THAT(capture.text(), Catch::Contains("relative path"));
  }
}

TEST_CASE("manifest: hostile bytes never crash the parser", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  write_text(f.inc / "a.h", "int changed();\n");
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));
  const std::vector<std::byte> good = read_bytes(manifests.manifest_path(f.request.key));
  std::mt19937 random(12345);
  std::size_t parsed = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::byte> bytes = good;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) bytes[random() % bytes.size()] = static_cast<std::byte>(random());
    if (random() % 4 == 0) bytes.resize(random() % bytes.size());
    if (random() % 2 == 0) reseal(bytes);  // so the structure checks (not just the checksums) see the damage
    auto result = kiln::cache::parse_manifest(bytes);
    if (std::holds_alternative<Manifest>(result)) {
      ++parsed;
      // Whatever parses survives a round trip.
      const Manifest& manifest = std::get<Manifest>(result);
      auto again = kiln::cache::parse_manifest(kiln::cache::serialize_manifest(manifest));
      REQUIRE(std::holds_alternative<Manifest>(again));
      CHECK(std::get<Manifest>(again) == manifest);
    }
  }
  INFO("mutations that still parsed: " << parsed);
  SUCCEED();
}

TEST_CASE("manifest: concurrent recorders (processes) never produce a damaged manifest", "[include]") {
  Fixture f;
  write_text(f.inc / "p0.h", "int p0;\n");
  write_text(f.inc / "p1.h", "int p1;\n");
  const DependencySet sets[2] = {deps({f.inc / "a.h", f.inc / "p0.h"}, {f.inc0 / "a.h"}),
                                 deps({f.inc / "a.h", f.inc / "p1.h"}, {f.inc0 / "a.h", f.inc0 / "p1.h"})};
  constexpr int kRounds = 150;
  std::vector<pid_t> children;
  for (int id = 0; id < 2; ++id) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int failures = 0;
      DependencyManifests manifests(config_for(f.root));
      for (int round = 0; round < kRounds; ++round) {
        manifests.record(f.request.key, f.request.canonical, sets[id], result_key(id == 0 ? "P0" : "P1"));
        LookupStats stats;
        const auto hit = manifests.lookup(f.request.key, f.request.canonical, &stats);
        if (stats.outcome != ManifestOutcome::hit || !hit) ++failures;  // both results always match
      }
      ::_exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  // Meanwhile this process reads (as a read-only instance, which never rewrites): never a damaged manifest.
  DependencyManifests reader(config_for(f.root));
  ManifestConfig read_only = config_for(f.root);
  read_only.read_only = true;
  DependencyManifests observer(read_only);
  std::size_t corrupt = 0;
  std::size_t hits = 0;
  std::string last_problem;
  int statuses[2] = {0, 0};
  bool done[2] = {false, false};
  while (!(done[0] && done[1])) {
    LookupStats stats;
    if (observer.lookup(f.request.key, f.request.canonical, &stats)) ++hits;
    if (stats.outcome == ManifestOutcome::corrupt || stats.outcome == ManifestOutcome::corrupt_removed ||
        stats.outcome == ManifestOutcome::io_error) {
      ++corrupt;
      last_problem = stats.detail;
    }
    for (int i = 0; i < 2; ++i) {
      if (!done[i] && ::waitpid(children[static_cast<std::size_t>(i)], &statuses[i], WNOHANG) > 0) done[i] = true;
    }
  }
  for (const int status : statuses) CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  INFO(last_problem);
  CHECK(corrupt == 0);
  INFO("hits seen by the observer: " << hits);
  const Manifest manifest = read_manifest(reader, f.request.key);
  CHECK_FALSE(manifest.results.empty());
  CHECK(manifest.results.size() <= 2);
  const auto final_hit = reader.lookup(f.request.key, f.request.canonical);
  REQUIRE(final_hit);
  CHECK((*final_hit == result_key("P0") || *final_hit == result_key("P1")));
  CHECK(temp_files(f.root).empty());
}

TEST_CASE("manifest: scan, render, remove, clear", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  const Request second = make_request("int second;\n");
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  manifests.record(second.key, second.canonical, deps({f.inc / "a.h"}), result_key("S"));

  auto scanned = manifests.scan();
  REQUIRE(scanned.size() == 2);
  std::sort(scanned.begin(), scanned.end(), [](const auto& a, const auto& b) { return a.files > b.files; });
  CHECK(scanned[0].request_key == f.request.key);
  CHECK(scanned[0].files == 3);
  CHECK(scanned[0].absent == 2);
  CHECK(scanned[0].results == 1);
  CHECK(scanned[0].size == fs::file_size(scanned[0].path));
  CHECK(scanned[0].error.empty());
  CHECK(scanned[1].request_key == second.key);
  CHECK(scanned[1].files == 1);

  // A damaged one is listed with its error (scan deletes nothing); temps and strays are not listed.
  write_bytes(manifests.manifest_path(second.key), std::vector<std::byte>(10, std::byte{0}));
  write_text(f.root / "manifests" / "00" / "stray.txt", "x");
  write_text(manifests.manifest_path(f.request.key).parent_path() / ".x.kman.tmp.1.2", "x");
  scanned = manifests.scan();
  REQUIRE(scanned.size() == 2);
  const auto damaged =
      std::find_if(scanned.begin(), scanned.end(), [&](const auto& s) { return s.request_key == second.key; });
  REQUIRE(damaged != scanned.end());
  CHECK_THAT(damaged->error, Catch::Contains("truncated"));
  CHECK(fs::exists(manifests.manifest_path(second.key)));

  const std::string text = kiln::cache::render_manifest(read_manifest(manifests, f.request.key));
  CHECK_THAT(text, Catch::Contains(f.request.key.hex()));
  CHECK_THAT(text, Catch::Contains((f.inc / "c" / "d.h").string()));
  CHECK_THAT(text, Catch::Contains(kiln::cache::hash128(read_text(f.inc / "a.h")).hex()));
  CHECK_THAT(text, Catch::Contains("absent [1] " + (f.inc0 / "b.h").string()));
  CHECK_THAT(text, Catch::Contains(result_key("A").hex()));

  CHECK(manifests.remove(f.request.key));
  CHECK_FALSE(manifests.remove(f.request.key));
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  CHECK(manifests.clear() == 2);
  CHECK(manifests.scan().empty());
  CHECK(temp_files(f.root).empty());
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical));
  // Recording after a clear recreates the directories.
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  CHECK(manifests.lookup(f.request.key, f.request.canonical) == result_key("A"));
}

TEST_CASE("manifest: memory-only, read-only and refused roots", "[include]") {
  Fixture f;
  SECTION("no root: memory-only, nothing happens") {
    DependencyManifests none(std::filesystem::path(), false);
    CHECK(none.mode() == StoreMode::memory_only);
    none.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    LookupStats stats;
    CHECK_FALSE(none.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.outcome == ManifestOutcome::disabled);
    CHECK(none.explain(f.request.key, f.request.canonical).outcome == ManifestOutcome::disabled);
    CHECK(none.scan().empty());
    CHECK(none.manifest_path(f.request.key).empty());
  }
  SECTION("disabled by configuration") {
    ManifestConfig config = config_for(f.root);
    config.disabled = true;
    DependencyManifests off(config);
    CHECK(off.mode() == StoreMode::memory_only);
    off.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    CHECK_FALSE(fs::exists(f.root));
  }
  SECTION("read-only serves hits but writes, refreshes and removes nothing") {
    DependencyManifests writer(f.root, false);
    writer.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    const auto before = read_bytes(writer.manifest_path(f.request.key));
    DependencyManifests reader(f.root, true);
    CHECK(reader.mode() == StoreMode::read_only);
    touch_past(f.inc / "a.h", 3600s);
    LookupStats stats;
    CHECK(reader.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
    CHECK(stats.reads >= 1);  // a.h (the others too while they are inside the real trust window)
    CHECK_FALSE(stats.rewritten);
    CHECK(read_bytes(writer.manifest_path(f.request.key)) == before);
    const Request other = make_request("int other;\n");
    reader.record(other.key, other.canonical, f.standard_deps(), result_key("B"));
    CHECK_FALSE(fs::exists(reader.manifest_path(other.key)));
    CHECK_FALSE(reader.remove(f.request.key));
    CHECK(reader.clear() == 0);
    CHECK(fs::exists(writer.manifest_path(f.request.key)));
  }
  SECTION("a group- or world-writable root is refused") {
    fs::create_directories(f.root);
    REQUIRE(::chmod(f.root.c_str(), 0777) == 0);
    StderrCapture capture;
    DependencyManifests refused(config_for(f.root));
    CHECK(refused.mode() == StoreMode::memory_only);
    CHECK_THAT(refused.mode_reason(), Catch::Contains("world-writable"));
    CHECK(capture.warnings() == 1);
    refused.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
    CHECK_FALSE(fs::exists(f.root / "manifests"));
  }
  SECTION("a planted manifests/ link is refused") {
    fs::create_directories(f.root);
    REQUIRE(::chmod(f.root.c_str(), 0700) == 0);
    fs::create_directory_symlink(f.inc, f.root / "manifests");
    DependencyManifests refused(config_for(f.root));
    CHECK(refused.mode() == StoreMode::memory_only);
    CHECK_THAT(refused.mode_reason(), Catch::Contains("not a directory"));
  }
}

TEST_CASE("manifest: a write failure warns once and never throws", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  REQUIRE(manifests.mode() == StoreMode::read_write);
  // A file where the manifest's shard directory should be: the write fails (root ignores modes).
  write_text(manifests.manifest_path(f.request.key).parent_path(), "not a directory\n");
  StderrCapture capture;
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));
  CHECK(capture.warnings() == 1);
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical));
}

TEST_CASE("manifest: an empty header and a header larger than one read chunk", "[include]") {
  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  write_text(f.inc / "empty.h", "");
  std::string big;
  for (int i = 0; big.size() < 300 * 1024; ++i) big += fmt::format("#define BIG_{} {}\n", i, i);
  write_text(f.inc / "big.h", big);
  manifests.record(f.request.key, f.request.canonical, deps({f.inc / "empty.h", f.inc / "big.h"}), result_key("A"));
  touch_past(f.inc / "empty.h", 100s);
  touch_past(f.inc / "big.h", 100s);
  LookupStats stats;
  CHECK(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.reads == 2);
  CHECK(stats.bytes_hashed == big.size());
  big[big.size() / 2] = '#';
  write_text(f.inc / "big.h", big);
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
  CHECK_THAT(stats.detail, Catch::Contains("big.h"));
  ManifestConfig capped = config_for(f.root);
  capped.limits.max_header_bytes = 1024;
  DependencyManifests small(capped);
  const auto why = small.explain(f.request.key, f.request.canonical);
  REQUIRE(why.results.size() == 1);
  CHECK(why.results[0].change == DependencyChange::changed);
  CHECK_THAT(why.results[0].detail, Catch::Contains("re-hash limit"));
}

TEST_CASE("manifest: lookup time for 2,000 headers and 2,000 absent paths (printed, not asserted)", "[include]") {
  Fixture f;
  constexpr int kHeaders = 2000;
  std::vector<fs::path> headers;
  std::vector<fs::path> absent;
  for (int i = 0; i < kHeaders; ++i) {
    const fs::path dir = f.inc / fmt::format("lib{:02}", i % 40) / "detail";
    headers.push_back(dir / fmt::format("header_{:04}.hpp", i));
    absent.push_back(f.inc0 / fmt::format("lib{:02}", i % 40) / "detail" / fmt::format("header_{:04}.hpp", i));
    std::string text = fmt::format("#pragma once\n// header {}\n", i);
    text.append(2000, 'x');
    write_text(headers.back(), text);
  }
  const DependencySet set = deps(headers, absent);
  DependencyManifests manifests(config_for(f.root));
  auto start = std::chrono::steady_clock::now();
  manifests.record(f.request.key, f.request.canonical, set, result_key("A"));
  const double record_s = seconds_since(start);
  const auto size = fs::file_size(manifests.manifest_path(f.request.key));

  std::vector<double> lookups;
  std::vector<double> floors;
  LookupStats stats;
  for (int round = 0; round < 15; ++round) {
    DependencyManifests fresh(config_for(f.root));  // as a fresh process would
    start = std::chrono::steady_clock::now();
    const auto hit = fresh.lookup(f.request.key, f.request.canonical, &stats);
    lookups.push_back(seconds_since(start));
    REQUIRE(hit == result_key("A"));
    REQUIRE(stats.reads == 0);
    // The floor: stat every recorded path and read the manifest's bytes, nothing else.
    start = std::chrono::steady_clock::now();
    struct stat st {};
    for (const HeaderRecord& header : set.headers) (void)::stat(header.path.c_str(), &st);
    for (const std::string& path : set.absent) (void)::stat(path.c_str(), &st);
    const auto bytes = read_bytes(manifests.manifest_path(f.request.key));
    floors.push_back(seconds_since(start));
    REQUIRE(bytes.size() == size);
  }
  std::sort(lookups.begin(), lookups.end());
  std::sort(floors.begin(), floors.end());
  const double lookup = lookups[lookups.size() / 2];
  const double floor = floors[floors.size() / 2];
  std::printf(
      "dependency manifest, %d headers + %d absent paths (%llu bytes): record %.2f ms; lookup median %.3f ms "
      "(min %.3f), floor (stat all + read manifest) median %.3f ms: %.2fx\n",
      kHeaders, kHeaders, static_cast<unsigned long long>(size), record_s * 1e3, lookup * 1e3, lookups.front() * 1e3,
      floor * 1e3, lookup / floor);
  std::fflush(stdout);
  // Each header, and per absent library folder (inc0/libNN/detail, 40 of them, none there) its first
  // path, detail/ and libNN/, and inc0: at most that once per run of absent paths (up to 8 side by side).
  CHECK(stats.stats >= kHeaders + 3 * 40 + 1);
  CHECK(stats.stats <= kHeaders + 8 * (3 * 40 + 1));
  CHECK(stats.inferred_absent >= kHeaders - 8 * 40);
  // On one thread, exactly once: the other absent paths lie under a folder found absent.
  ManifestConfig one_thread = config_for(f.root);
  one_thread.stat_threads = 1;
  DependencyManifests serial(one_thread);
  REQUIRE(serial.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.stats == kHeaders + 3 * 40 + 1);
  CHECK(stats.inferred_absent == kHeaders - 40);
}

TEST_CASE("the stat memo: a burst of lookups stats each path once; a shadowing header is seen once the memo's "
          "time has passed, and at once by another instance",
          "[include]") {
  Fixture f;
  ManifestConfig config = config_for(f.root);
  config.stat_memo = std::chrono::milliseconds(300);
  DependencyManifests manifests(config);
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  LookupStats first;
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &first) == result_key("A"));
  CHECK(first.stats == 6);
  LookupStats second;
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &second) == result_key("A"));
  CHECK(second.stats == 0);
  CHECK(second.validated_hits == 1);  // the set the first lookup checked: no path looked at
  CHECK(second.memo_hits == 0);
  // Another request that read the very same set (another kernel over the same headers): taken as the
  // set checked a moment ago, with no path looked at.
  const Request sibling = make_request("#include <a.h>\n#include <b.h>\nint sibling;\n");
  manifests.record(sibling.key, sibling.canonical, f.standard_deps(), result_key("S"));
  LookupStats by_set;
  REQUIRE(manifests.lookup(sibling.key, sibling.canonical, &by_set) == result_key("S"));
  CHECK(by_set.validated_hits == 1);
  CHECK(by_set.stats == 0);
  CHECK(by_set.memo_hits == 0);
  // Another set over some of the same paths is checked path by path, each path from the stat memo.
  const Request cousin = make_request("#include <a.h>\nint cousin;\n");
  manifests.record(cousin.key, cousin.canonical, deps({f.inc / "a.h"}, {f.inc0 / "a.h"}), result_key("C"));
  LookupStats by_paths;
  REQUIRE(manifests.lookup(cousin.key, cousin.canonical, &by_paths) == result_key("C"));
  CHECK(by_paths.validated_hits == 0);
  CHECK(by_paths.memo_hits == 2);
  CHECK(by_paths.stats == 0);
  write_text(f.inc0 / "b.h", "#pragma once\n#include \"c/d.h\"\n");
  DependencyManifests other(config_for(f.root));  // another process: no memo
  CHECK_FALSE(other.lookup(f.request.key, f.request.canonical));
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  LookupStats third;
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &third));
  CHECK(third.outcome == ManifestOutcome::no_match);
  CHECK_FALSE(manifests.lookup(sibling.key, sibling.canonical));  // the checked set is too old to be taken

  // Headers changed moments ago are not trusted by stat: re-hashed on every lookup, and their set is
  // never taken whole.
  Fixture g;
  ManifestConfig recent = config_for(g.root, std::chrono::hours(1));
  recent.stat_memo = std::chrono::milliseconds(300);
  DependencyManifests fresh_edits(recent);
  fresh_edits.record(g.request.key, g.request.canonical, g.standard_deps(), result_key("R"));
  for (int i = 0; i < 2; ++i) {
    LookupStats untrusted;
    REQUIRE(fresh_edits.lookup(g.request.key, g.request.canonical, &untrusted) == result_key("R"));
    CHECK(untrusted.validated_hits == 0);
    CHECK(untrusted.reads == 3);
  }
}

TEST_CASE("manifest: a set checked moments ago is answered from the head alone; damage past the head is found "
          "by the next lookup that reads the whole file",
          "[include]") {
  Fixture f;
  ManifestConfig config = config_for(f.root);
  config.stat_memo = std::chrono::seconds(30);
  DependencyManifests manifests(config);
  DependencySet big = f.standard_deps();  // a manifest well over the first read (16 KiB)
  for (int i = 0; i < 2500; ++i) big.absent.push_back((f.inc0 / fmt::format("absent/{:04}/a-long-header-name.cuh", i)).string());
  std::sort(big.absent.begin(), big.absent.end());
  const Request sibling = make_request("#include <a.h>\n#include <b.h>\nint sibling;\n");
  manifests.record(f.request.key, f.request.canonical, big, result_key("A"));
  manifests.record(sibling.key, sibling.canonical, big, result_key("S"));
  const fs::path sibling_path = manifests.manifest_path(sibling.key);
  const std::vector<std::byte> good = read_bytes(sibling_path);
  REQUIRE(good.size() > 128 * 1024);

  LookupStats first;
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &first) == result_key("A"));
  CHECK(first.validated_hits == 0);
  CHECK(first.bytes_read == first.manifest_bytes);  // nothing checked yet: read whole
  LookupStats by_head;
  std::string matched;
  REQUIRE(manifests.lookup(sibling.key, sibling.canonical, &by_head, &matched) == result_key("S"));
  CHECK(by_head.validated_hits == 1);
  CHECK(by_head.stats == 0);
  CHECK(by_head.manifest_bytes == good.size());
  CHECK(by_head.bytes_read < good.size() / 4);  // the head (and what the first read took with it)
  CHECK(matched == kiln::cache::canonical_dependencies(big));

  SECTION("damage past the head") {
    std::vector<std::byte> bad = good;
    bad[bad.size() / 2] ^= std::byte{0x40};
    write_bytes(sibling_path, bad);
    LookupStats same;
    CHECK(manifests.lookup(sibling.key, sibling.canonical, &same) == result_key("S"));  // the head is intact
    CHECK(same.bytes_read < good.size() / 4);
    DependencyManifests other(config);  // another process reads the whole file
    LookupStats whole;
    CHECK_FALSE(other.lookup(sibling.key, sibling.canonical, &whole));
    CHECK(whole.outcome == ManifestOutcome::corrupt_removed);
    CHECK_THAT(whole.detail, Catch::Contains("checksum mismatch"));
  }
  SECTION("damage in the head") {
    std::vector<std::byte> bad = good;
    bad[head_size_of(good) - 30] ^= std::byte{0x01};  // inside the summary's set digest
    write_bytes(sibling_path, bad);
    LookupStats same;
    CHECK_FALSE(manifests.lookup(sibling.key, sibling.canonical, &same));
    CHECK(same.outcome == ManifestOutcome::corrupt_removed);
    CHECK_THAT(same.detail, Catch::Contains("head checksum mismatch"));
  }
  SECTION("a head that names a set checked moments ago but a result that is not its request's") {
    // Sealed well, the head of another request under this name: the request check refuses it.
    std::vector<std::byte> other = read_bytes(manifests.manifest_path(f.request.key));
    write_bytes(sibling_path, other);
    LookupStats same;
    CHECK_FALSE(manifests.lookup(sibling.key, sibling.canonical, &same));
    CHECK_THAT(same.detail, Catch::Contains("key mismatch"));
  }
  SECTION("a head longer than the first read") {
    const Request long_source = make_request(std::string(100 * 1024, '/') + "\n#include <a.h>\n");
    manifests.record(long_source.key, long_source.canonical, big, result_key("L"));
    LookupStats head_only;
    CHECK(manifests.lookup(long_source.key, long_source.canonical, &head_only) == result_key("L"));
    CHECK(head_only.validated_hits == 1);
    CHECK(head_only.bytes_read > 100 * 1024);
    CHECK(head_only.bytes_read < head_only.manifest_bytes);
  }
  SECTION("a set no longer fresh is checked path by path, from the whole file") {
    ManifestConfig short_memo = config;
    short_memo.stat_memo = std::chrono::milliseconds(1);
    DependencyManifests brief(short_memo);
    REQUIRE(brief.lookup(f.request.key, f.request.canonical) == result_key("A"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    LookupStats later;
    CHECK(brief.lookup(sibling.key, sibling.canonical, &later) == result_key("S"));
    CHECK(later.validated_hits == 0);
    CHECK(later.bytes_read == later.manifest_bytes);
  }
}

TEST_CASE("the dependencies key part: counts and a digest that tells every set apart; the lookup gives the "
          "matched result's, recorded() its list",
          "[include]") {
  using kiln::cache::canonical_dependencies;
  using kiln::cache::parse_canonical_dependencies;
  const auto header = [](std::string path, std::string_view bytes) {
    return HeaderRecord{std::move(path), FileStat{}, true, kiln::cache::hash128(bytes)};
  };
  DependencySet base;
  base.headers = {header("/inc/a.h", "a"), header("/inc/b.h", "b")};
  base.absent = {"/inc0/a.h", "/inc0/b.h"};
  const std::string text = canonical_dependencies(base);
  CHECK(text.starts_with("dependencies/2 headers=2 absent=2 xxh3="));
  CHECK(text.size() < 100);  // however many headers: the list lives in the manifest
  const auto summary = parse_canonical_dependencies(text);
  REQUIRE(summary);
  CHECK(summary->headers == 2);
  CHECK(summary->absent == 2);

  DependencySet same = base;
  same.headers[0].stat.size = 99;  // stats are not part of it
  same.headers[1].trusted_stat = false;
  CHECK(canonical_dependencies(same) == text);
  std::vector<DependencySet> others(6, base);
  others[0].headers[1] = header("/inc/b.h", "B");               // other bytes
  others[1].headers[1] = header("/inc/c.h", "b");               // another path, same bytes
  std::swap(others[2].headers[0], others[2].headers[1]);        // another order
  others[3].absent = {"/inc0/a.h"};                              // one absence less
  others[4].absent = {"/inc0/a.h/inc0", "/b.h"};                // the same characters, other paths
  others[5].absent.push_back("/inc/a.h");                        // a path both read and absent
  for (const DependencySet& other : others) CHECK(canonical_dependencies(other) != text);

  CHECK_FALSE(parse_canonical_dependencies("dependencies/1\nh 0 1 x\n"));
  CHECK_FALSE(parse_canonical_dependencies("dependencies/2 headers=x absent=0 xxh3=0"));
  CHECK_FALSE(parse_canonical_dependencies(text + " "));
  CHECK_FALSE(parse_canonical_dependencies(text.substr(0, text.size() - 1)));

  Fixture f;
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("A"));
  manifests.record(f.request.key, f.request.canonical, f.standard_deps(), result_key("B"));
  std::string matched;
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, nullptr, &matched) == result_key("B"));
  CHECK(matched == canonical_dependencies(f.standard_deps()));
  const auto recorded = manifests.recorded(f.request.key, f.request.canonical, result_key("A"));
  REQUIRE(recorded);
  CHECK(canonical_dependencies(*recorded) == matched);
  REQUIRE(recorded->headers.size() == f.standard_deps().headers.size());
  for (std::size_t i = 0; i < recorded->headers.size(); ++i) {
    CHECK(recorded->headers[i].path == f.standard_deps().headers[i].path);
    CHECK(recorded->headers[i].digest == f.standard_deps().headers[i].digest);
  }
  CHECK(recorded->absent == f.standard_deps().absent);
  CHECK_FALSE(manifests.recorded(f.request.key, f.request.canonical, result_key("C")));  // no such result
  const Request other = make_request("int other;\n");
  CHECK_FALSE(manifests.recorded(other.key, other.canonical, result_key("A")));  // no such manifest
}

TEST_CASE("manifest: a large result's paths are stat'ed on several threads, and a change among them is still found",
          "[include]") {
  Fixture f;
  std::vector<fs::path> headers, absent;
  for (int i = 0; i < 300; ++i) {
    headers.push_back(f.inc / fmt::format("many/h{}.h", i));
    write_text(headers.back(), fmt::format("int h{};\n", i));
    absent.push_back(f.inc0 / fmt::format("many/h{}.h", i));
  }
  for (const unsigned threads : {1u, 8u}) {
    ManifestConfig config = config_for(f.root);
    config.stat_threads = threads;
    DependencyManifests manifests(config);
    manifests.record(f.request.key, f.request.canonical, deps(headers, absent), result_key("many"));
    LookupStats stats;
    REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("many"));
    // Each header once, whichever thread stat'ed it; of the absent paths (all under inc0/many/, which
    // does not exist) the first one, its folder and inc0.
    CHECK(stats.stats == 300 + 3);
    CHECK(stats.inferred_absent == 299);
    CHECK(stats.reads == 0);
    // A header appears in the earlier folder (it would shadow one), in a folder that was not there: a
    // miss that names it.
    write_text(absent[150], "int shadow;\n");
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.detail.find(absent[150].string()) != std::string::npos);
    CHECK(stats.detail.find("appeared") != std::string::npos);
    fs::remove(absent[150]);
    fs::remove(absent[150].parent_path());
    // A header vanishes.
    fs::rename(headers[200], f.inc / "moved.h");
    CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
    CHECK(stats.detail.find(headers[200].string() + " no longer exists") != std::string::npos);
    fs::rename(f.inc / "moved.h", headers[200]);
  }
}

TEST_CASE("manifest: absent paths under a folder found absent take no stat; a folder or a header that appears "
          "there is seen", "[include]") {
  Fixture f;
  std::vector<fs::path> absent;
  for (int i = 0; i < 50; ++i) absent.push_back(f.inc0 / "x" / "y" / fmt::format("h{}.h", i));
  DependencyManifests manifests(config_for(f.root));
  manifests.record(f.request.key, f.request.canonical, deps({f.inc / "a.h"}, absent), result_key("A"));
  LookupStats stats;
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.stats == 1 + 1 + 3);  // a.h; the first absent path; inc0/x/y and inc0/x (absent), inc0
  CHECK(stats.inferred_absent == 49);

  // The folder appears, empty: every path is stat'ed again, and all are still absent.
  fs::create_directories(f.inc0 / "x" / "y");
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.stats == 1 + 50 + 1);
  CHECK(stats.inferred_absent == 0);

  // A header appears in it: named.
  write_text(absent[37], "int shadow;\n");
  CHECK_FALSE(manifests.lookup(f.request.key, f.request.canonical, &stats));
  CHECK(stats.detail.find(absent[37].string() + " was absent and exists now") != std::string::npos);

  // A file where the folder was: the paths under it cannot exist (ENOTDIR), so the set holds again.
  fs::remove_all(f.inc0 / "x");
  write_text(f.inc0 / "x", "not a folder\n");
  REQUIRE(manifests.lookup(f.request.key, f.request.canonical, &stats) == result_key("A"));
  CHECK(stats.inferred_absent == 49);  // inc0/x/y cannot exist under a file: it settles the rest
}

TEST_CASE("the stat memo keeps the bytes its keys point into, also when a full memo is cleared", "[include]") {
  using kiln::cache::detail::PathProbe;
  using kiln::cache::detail::StatMemo;
  StatMemo memo;
  REQUIRE(memo.first_lookup());
  REQUIRE_FALSE(memo.first_lookup());
  {
    // A remembered path is copied: the caller's string may change or go away.
    std::string path = "/inc/owned.h";
    FileStat stat;
    stat.size = 7;
    memo.remember(path, StatMemo::Seen{true, stat, 100});
    path.assign(path.size(), 'x');
  }
  const auto owned = memo.find("/inc/owned.h", 200, 1s);
  REQUIRE(owned.has_value());
  CHECK(owned->present);
  CHECK(owned->stat.size == 7);
  CHECK_FALSE(memo.find("/inc/owned.h", 100 + std::chrono::nanoseconds(1s).count(), 1s).has_value());  // too old

  // A first lookup's probes, more paths than the memo holds: it is cleared part way through taking them
  // over, and the paths taken after that still point into bytes the memo keeps.
  const std::size_t n = StatMemo::kMaxPaths + 100;
  std::string text;
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < n; ++i) {
    offsets.push_back(text.size());
    text += fmt::format("/p/{}.h", i);
  }
  auto bytes = std::make_unique<std::byte[]>(text.size());
  std::memcpy(bytes.get(), text.data(), text.size());
  const char* base = reinterpret_cast<const char*>(bytes.get());
  std::vector<std::string_view> paths;
  std::vector<PathProbe> probes(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t end = i + 1 < n ? offsets[i + 1] : text.size();
    paths.emplace_back(base + offsets[i], end - offsets[i]);
    probes[i].stat_state = i % 3 == 0 ? PathProbe::Stat::present : PathProbe::Stat::absent;
    probes[i].stat.size = i;
  }
  memo.defer(std::move(bytes), std::move(paths), std::move(probes), 300);
  std::vector<std::string_view> asked;
  std::vector<std::string> names;
  for (std::size_t i = n - 60; i < n; ++i) names.push_back(fmt::format("/p/{}.h", i));
  for (const std::string& name : names) asked.push_back(name);
  std::size_t found = 0;
  memo.find_each(asked, 400, 1s, [&](std::size_t k, const StatMemo::Seen& seen) {
    const std::size_t i = n - 60 + k;
    CHECK(seen.present == (i % 3 == 0));
    if (seen.present) CHECK(seen.stat.size == i);
    ++found;
  });
  CHECK(found == asked.size());
  CHECK_FALSE(memo.find("/inc/owned.h", 400, 1s).has_value());  // cleared with the rest
  CHECK_FALSE(memo.find("/p/7.h", 400, 1s).has_value());
  // And a path remembered after the clearing is its own copy again.
  memo.remember(std::string("/inc/late.h"), StatMemo::Seen{false, {}, 400});
  REQUIRE(memo.find("/inc/late.h", 401, 1s).has_value());
  CHECK(memo.find("/p/" + std::to_string(n - 1) + ".h", 401, 1s).has_value());
}
