// Entries under a caller's key (blobs: kiln/cache/blob.hpp, kiln_blob_* in the C API) as the `kiln` CLI
// shows and manages them: `ls` (KIND blob, the namespace as the source), `show` (the namespace), `stats`
// (one `blob` group), `verify` (a damaged blob found, `--fix` removes it) and `prune`. No GPU, no compiler.
#include <catch2/catch.hpp>

#include <sstream>

#include "harness.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/cache/storage.hpp"

namespace {

using namespace kiln::system_test;

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text)); }

/// Writes blobs into the cache at `root` as a caller of the C API would.
void put_blobs(const fs::path& root, std::string_view name_space, int count) {
  kiln::cache::StorageConfig config;
  config.local.root = root;
  kiln::cache::Storage storage(config);
  for (int i = 0; i < count; ++i) {
    const std::string key = "key" + std::to_string(i);
    REQUIRE(kiln::cache::blob_put(storage, name_space, bytes_of(key), bytes_of(std::string(3000, 'v'))));
  }
}

}  // namespace

TEST_CASE("ls, show, stats, verify and prune show and manage blobs") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  put_blobs(cache, "cuda.core", 2);
  put_blobs(cache, "my-app", 1);
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};

  const Result ls = run_kiln({"cache", "ls"}, env, dir.path());
  INFO(ls.describe());
  REQUIRE(ls.rc == 0);
  std::size_t blob_lines = 0;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" blob ") == std::string::npos) continue;
    ++blob_lines;
    CHECK((line.find("namespace cuda.core") != std::string::npos || line.find("namespace my-app") != std::string::npos));
  }
  CHECK(blob_lines == 3);

  const Result listed = run_kiln({"cache", "ls", "--json"}, env, dir.path());
  REQUIRE(listed.rc == 0);
  std::string key;
  for (const json& item : listed.parsed()) {
    CHECK(item.at("payload_kind") == "blob");
    CHECK(item.at("vendor") == "none");
    if (item.at("source") == "namespace my-app") key = item.at("key").get<std::string>();
  }
  REQUIRE(key.size() == 32);

  const Result show = run_kiln({"cache", "show", key.substr(0, 12)}, env, dir.path());
  INFO(show.describe());
  CHECK(show.rc == 0);
  CHECK(show.out.find("payload   blob") != std::string::npos);
  CHECK(show.out.find("namespace my-app") != std::string::npos);
  CHECK(show.out.find("kernels") == std::string::npos);  // a blob has none
  const Result shown = run_kiln({"cache", "show", key.substr(0, 12), "--json"}, env, dir.path());
  REQUIRE(shown.rc == 0);
  CHECK(shown.parsed().at("namespace") == "my-app");
  CHECK(shown.parsed().at("payload_bytes") == 3000);

  const Result stats = run_kiln({"cache", "stats", "--json"}, env, dir.path());
  INFO(stats.describe());
  REQUIRE(stats.rc == 0);
  const json groups = stats.parsed().at("by_target");
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].at("kind") == "blob");
  CHECK(groups[0].at("entries") == 3);
  const Result stats_text = run_kiln({"cache", "stats"}, env, dir.path());
  CHECK(stats_text.out.find("  blob ") != std::string::npos);

  CHECK(run_kiln({"cache", "verify"}, env, dir.path()).rc == 0);
  // A damaged blob is found by verify and removed by --fix, as any entry.
  const fs::path path = cache / "v1" / key.substr(0, 2) / (key.substr(2) + ".kiln");
  REQUIRE(fs::exists(path));
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('#');
  }
  const Result verify = run_kiln({"cache", "verify"}, env, dir.path());
  CHECK(verify.rc == 1);
  CHECK(verify.out.find("checksum mismatch") != std::string::npos);
  CHECK(run_kiln({"cache", "verify", "--fix"}, env, dir.path()).rc == 0);
  CHECK_FALSE(fs::exists(path));

  // prune takes blobs as it takes any entry.
  const Result pruned = run_kiln({"cache", "prune", "--max-size", "1"}, env, dir.path());
  INFO(pruned.describe());
  CHECK(pruned.rc == 0);
  CHECK(run_kiln({"cache", "ls", "--json"}, env, dir.path()).parsed().empty());
}
