// Dependency manifest files (includes/include/kiln/includes/dep_manifest.hpp) keep the entry store's contracts:
// a damaged manifest is a miss and is removed, an unreadable one is a miss and stays, limits hold when
// reading and recording, hostile bytes never crash the parser, concurrent recorders never leave a damaged
// file; scan, render, remove and clear; memory-only, read-only and refused roots; write failures. No
// compiler, no GPU.
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

#include "dep_manifest_test_support.hpp"

using namespace dep_manifest_test;

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
