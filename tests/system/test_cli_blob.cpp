// Entries under a caller's key (blobs: kiln/cache/blob.hpp, kiln_blob_* in the C API) as the `kiln` CLI
// shows and manages them: `ls` (KIND blob, the namespace as the source), `show` (the namespace), `stats`
// (a `blob` group per namespace and target), `verify` (a damaged blob found, `--fix` removes it) and `prune`; labeled
// blobs as kiln.triton writes them (a kernel's name and target: `ls`, `show`, `stats`, and `--target` of
// ls, prune and export). No GPU, no compiler.
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

/// Writes a Triton kernel's group and a launcher as kiln.triton does: the group labeled with the kernel's
/// name, target and file, the launcher with its file only.
void put_triton(const fs::path& root, const std::string& kernel, const std::string& target) {
  kiln::cache::StorageConfig config;
  config.local.root = root;
  kiln::cache::Storage storage(config);
  const std::string group = "__grp__" + kernel + ".json";
  const std::vector<kiln::cache::BlobLabel> labels = {{"kernel", kernel}, {"target", target}, {"file", group}};
  REQUIRE(kiln::cache::blob_put(storage, "triton", bytes_of("KEY" + kernel + "/" + group),
                                bytes_of(std::string(2000, 'g')), labels));
  const std::vector<kiln::cache::BlobLabel> file = {{"file", "launcher.so"}};
  REQUIRE(kiln::cache::blob_put(storage, "triton", bytes_of("KEY" + kernel + "/launcher.so"),
                                bytes_of(std::string(1000, 's')), file));
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
    CHECK(
        (line.find("namespace cuda.core") != std::string::npos || line.find("namespace my-app") != std::string::npos));
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
  REQUIRE(groups.size() == 2);  // one group per namespace
  for (const json& group : groups) {
    CHECK(group.at("kind") == "blob");
    CHECK(group.at("entries") == (group.at("namespace") == "cuda.core" ? 2 : 1));
  }
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

TEST_CASE("labeled blobs: a Triton kernel's name and target in ls, show, stats, and --target") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  put_triton(cache, "triton_poi_fused_add_0", "sm_90");
  put_triton(cache, "triton_red_fused_sum_1", "sm_80");
  put_blobs(cache, "cuda.core", 1);
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};

  const Result ls = run_kiln({"cache", "ls"}, env, dir.path());
  INFO(ls.describe());
  REQUIRE(ls.rc == 0);
  bool saw_group = false;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("triton __grp__triton_poi_fused_add_0.json") == std::string::npos) continue;
    saw_group = true;
    CHECK(line.find(" sm_90 ") != std::string::npos);
    CHECK(line.find("triton_poi_fused_add_0", line.find(".json") + 5) != std::string::npos);  // KERNELS
  }
  CHECK(saw_group);
  CHECK(ls.out.find("triton launcher.so") != std::string::npos);
  CHECK(ls.out.find("namespace cuda.core") != std::string::npos);  // unlabeled blobs as before

  const Result listed = run_kiln({"cache", "ls", "--json", "--target", "sm_90"}, env, dir.path());
  INFO(listed.describe());
  REQUIRE(listed.rc == 0);
  REQUIRE(listed.parsed().size() == 1);
  const json item = listed.parsed()[0];
  CHECK(item.at("target") == "sm_90");
  CHECK(item.at("labels").at("kernel") == "triton_poi_fused_add_0");
  CHECK(item.at("names").empty());
  CHECK(item.at("source") == "triton __grp__triton_poi_fused_add_0.json");
  const std::string key = item.at("key").get<std::string>();

  const Result show = run_kiln({"cache", "show", key.substr(0, 12)}, env, dir.path());
  INFO(show.describe());
  CHECK(show.rc == 0);
  CHECK(show.out.find("namespace triton") != std::string::npos);
  CHECK(show.out.find("labels    kernel = triton_poi_fused_add_0") != std::string::npos);
  CHECK(show.out.find("          target = sm_90") != std::string::npos);
  CHECK(run_kiln({"cache", "show", key.substr(0, 12), "--json"}, env, dir.path()).parsed().at("labels").at("target") ==
        "sm_90");

  const Result stats = run_kiln({"cache", "stats", "--json"}, env, dir.path());
  INFO(stats.describe());
  REQUIRE(stats.rc == 0);
  std::map<std::string, int> groups;
  const json by_target = stats.parsed().at("by_target");
  for (const json& group : by_target) {
    CHECK(group.at("kind") == "blob");
    groups[group.at("namespace").get<std::string>() + "/" + group.at("target").get<std::string>()] =
        group.at("entries").get<int>();
  }
  CHECK(groups ==
        std::map<std::string, int>{{"cuda.core/", 1}, {"triton/", 2}, {"triton/sm_80", 1}, {"triton/sm_90", 1}});
  const Result stats_text = run_kiln({"cache", "stats"}, env, dir.path());
  CHECK(stats_text.out.find("  blob triton sm_90 ") != std::string::npos);

  // export --target takes the groups of that target; import brings them into another cache.
  const fs::path pack = dir / "triton.kpack";
  const Result exported = run_kiln({"cache", "export", pack.string(), "--target", "sm_90"}, env, dir.path());
  INFO(exported.describe());
  REQUIRE(exported.rc == 0);
  const std::map<std::string, std::string> other{{"KILN_CACHE_DIR", (dir / "other").string()},
                                                 {"KILN_CACHE_PACKS", ""}};
  REQUIRE(run_kiln({"cache", "import", pack.string()}, other, dir.path()).rc == 0);
  const Result imported = run_kiln({"cache", "ls", "--json"}, other, dir.path());
  REQUIRE(imported.parsed().size() == 1);
  CHECK(imported.parsed()[0].at("labels").at("kernel") == "triton_poi_fused_add_0");

  // prune --target removes the groups of that target only.
  const Result pruned = run_kiln({"cache", "prune", "--target", "sm_80"}, env, dir.path());
  INFO(pruned.describe());
  CHECK(pruned.rc == 0);
  const Result after = run_kiln({"cache", "ls", "--json"}, env, dir.path());
  CHECK(after.parsed().size() == 4);
  for (const json& entry : after.parsed()) CHECK(entry.at("target") != "sm_80");
}
