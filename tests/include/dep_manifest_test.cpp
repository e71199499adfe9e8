// Dependency manifests (includes/include/kiln/includes/dep_manifest.hpp): record a compile's headers and absent
// probes under the request key, look the result key up by stat, re-hash only what changed, close the
// shadowing hole; the stat memo and the sets checked moments ago. The files' contracts (damaged and
// unreadable files, limits, modes) are in dep_manifest_files_test.cpp. No compiler, no GPU.
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
#include "stat_memo.hpp"

using namespace dep_manifest_test;

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
  StatMemo memo(1s);
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
  const auto owned = memo.find("/inc/owned.h", 200);
  REQUIRE(owned.has_value());
  CHECK(owned->present);
  CHECK(owned->stat.size == 7);
  CHECK_FALSE(memo.find("/inc/owned.h", 100 + std::chrono::nanoseconds(1s).count()).has_value());  // too old

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
  memo.find_each(asked, 400, [&](std::size_t k, const StatMemo::Seen& seen) {
    const std::size_t i = n - 60 + k;
    CHECK(seen.present == (i % 3 == 0));
    if (seen.present) CHECK(seen.stat.size == i);
    ++found;
  });
  CHECK(found == asked.size());
  CHECK_FALSE(memo.find("/inc/owned.h", 400).has_value());  // cleared with the rest
  CHECK_FALSE(memo.find("/p/7.h", 400).has_value());
  // And a path remembered after the clearing is its own copy again.
  memo.remember(std::string("/inc/late.h"), StatMemo::Seen{false, {}, 400});
  REQUIRE(memo.find("/inc/late.h", 401).has_value());
  CHECK(memo.find("/p/" + std::to_string(n - 1) + ".h", 401).has_value());
}
