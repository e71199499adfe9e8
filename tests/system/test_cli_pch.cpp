// The precompiled headers kept in the cache (kiln/cache/pch_store.hpp) as the `kiln` CLI shows and manages them:
// `stats` (their count, bytes and verdicts), `ls --pch`, `verify` (a damaged one found, `--fix` removes it),
// `prune --pch`, `prune --max-size` (with entries, least recently used first) and `clear`. The files are made
// through the store as the NVRTC lane makes them; no GPU, no compiler.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "harness.hpp"
#include "kiln/cache/store.hpp"
#include "synthetic_entry.hpp"

namespace {

using namespace kiln::system_test;
using kiln::cache::Hash128;

Hash128 key_of(int i) { return kiln::cache::hash128(fmt::format("cli pch {}", i)); }

/// Stores `count` PCHs of `bytes` bytes (keys 0..count-1) and a record for each, then `entries` entries.
void fill(const fs::path& root, int count, std::size_t bytes, int entries) {
  kiln::cache::StoreConfig config;
  config.root = root;
  kiln::cache::Store store(config);
  for (int i = 0; i < count; ++i) {
    std::string why;
    std::optional<kiln::cache::PchDraft> draft = store.begin_pch(key_of(i), why);
    REQUIRE(draft);
    std::ofstream(draft->temp_path(), std::ios::binary) << std::string(bytes, static_cast<char>('a' + i));
    REQUIRE(store.publish_pch(std::move(*draft), fmt::format("made for k{}.cu", i), why));
    kiln::cache::PchRecord record;
    record.verdict = i == 0 ? kiln::cache::PchRecord::Verdict::pays : kiln::cache::PchRecord::Verdict::learning;
    record.without_ms = {100};
    REQUIRE(store.write_pch_record(key_of(i), record));
  }
  for (int i = 0; i < entries; ++i) REQUIRE(store.put(kiln::test::make_entry("cli-pch-entry" + std::to_string(i), 2000)));
}

fs::path pch_path(const fs::path& root, const Hash128& key) {
  const std::string hex = key.hex();
  return root / "pch" / hex.substr(0, 2) / (hex.substr(2) + ".pch");
}

}  // namespace

TEST_CASE("stats, ls --pch and verify show the stored precompiled headers; verify --fix removes a damaged one") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  fill(cache, 2, 50000, 1);
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};

  const Result stats = run_kiln({"cache", "stats", "--json"}, env, dir.path());
  INFO(stats.describe());
  REQUIRE(stats.rc == 0);
  const json pch = stats.parsed().at("pch");
  CHECK(pch.at("count") == 2);
  CHECK(pch.at("bytes") == fs::file_size(pch_path(cache, key_of(0))) + fs::file_size(pch_path(cache, key_of(1))));
  CHECK(pch.at("pays") == 1);
  CHECK(pch.at("learning") == 1);
  const Result text = run_kiln({"cache", "stats"}, env, dir.path());
  CHECK(text.out.find("precompiled hdrs  2") != std::string::npos);

  const Result ls = run_kiln({"cache", "ls", "--pch"}, env, dir.path());
  INFO(ls.describe());
  REQUIRE(ls.rc == 0);
  CHECK(ls.out.find(key_of(0).hex()) != std::string::npos);
  CHECK(ls.out.find("made for k1.cu") != std::string::npos);
  const Result listed = run_kiln({"cache", "ls", "--pch", "--json"}, env, dir.path());
  REQUIRE(listed.rc == 0);
  CHECK(listed.parsed().at("pch").size() == 2);

  CHECK(run_kiln({"cache", "verify"}, env, dir.path()).rc == 0);
  {
    std::fstream f(pch_path(cache, key_of(1)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("zz", 2);
  }
  const Result bad = run_kiln({"cache", "verify"}, env, dir.path());
  INFO(bad.describe());
  CHECK(bad.rc == 1);
  CHECK(bad.out.find("checksum mismatch") != std::string::npos);
  const Result fixed = run_kiln({"cache", "verify", "--fix"}, env, dir.path());
  CHECK(fixed.out.find("(removed)") != std::string::npos);
  CHECK_FALSE(fs::exists(pch_path(cache, key_of(1))));
  CHECK(fs::exists(pch_path(cache, key_of(0))));
  CHECK(run_kiln({"cache", "verify"}, env, dir.path()).rc == 0);
}

TEST_CASE("prune takes precompiled headers with entries, least recently used first; --pch and clear remove them") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  fill(cache, 2, 50000, 5);
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""}};
  // The PCH of key 0 is the least recently used thing in the cache: a prune to just under the total takes it.
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(48);
  fs::last_write_time(pch_path(cache, key_of(0)), old);
  std::uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".kiln") || name.ends_with(".pch") || name.ends_with(".pchv"))) {
      total += e.file_size();
    }
  }
  const Result pruned = run_kiln({"cache", "prune", "--max-size", std::to_string(total - 1000)}, env, dir.path());
  INFO(pruned.describe());
  REQUIRE(pruned.rc == 0);
  CHECK_FALSE(fs::exists(pch_path(cache, key_of(0))));
  CHECK(fs::exists(pch_path(cache, key_of(1))));

  const Result only = run_kiln({"cache", "prune", "--pch"}, env, dir.path());
  INFO(only.describe());
  REQUIRE(only.rc == 0);
  CHECK_FALSE(fs::exists(pch_path(cache, key_of(1))));
  const json after = run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed();
  CHECK(after.at("pch").at("count") == 0);
  CHECK(after.at("pch").at("records") == 0);
  CHECK(after.at("entries") == 5);  // --pch leaves the entries

  fill(cache, 1, 1000, 0);
  const Result cleared = run_kiln({"cache", "clear"}, env, dir.path());
  INFO(cleared.describe());
  REQUIRE(cleared.rc == 0);
  CHECK(cleared.out.find("precompiled header files") != std::string::npos);
  const json empty = run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed();
  CHECK(empty.at("pch").at("count") == 0);
  CHECK(empty.at("entries") == 0);
}

namespace {

/// A CUB kernel (about 6 MB of toolkit headers: a set heavy enough to make its PCH in its first compile).
std::string cub_kernel(const std::string& name, const std::string& value) {
  return fmt::format(R"(#include <cub/block/block_reduce.cuh>
extern "C" __global__ void {}(const float* in, float* out) {{
  using Reduce = cub::BlockReduce<float, 128>;
  __shared__ typename Reduce::TempStorage storage;
  const float sum = Reduce(storage).Sum({});
  if (threadIdx.x == 0) out[0] = sum;
}}
)",
                     name, value);
}

/// The text after "precompiled header: " in why-miss's output (one line).
std::string pch_line(const Result& result) {
  const std::string marker = "precompiled header: ";
  const std::size_t at = result.out.find(marker);
  if (at == std::string::npos) return {};
  const std::size_t start = at + marker.size();
  return result.out.substr(start, result.out.find('\n', start) - start);
}

}  // namespace

TEST_CASE("why-miss says what the compile would do with a precompiled header: none yet, the stored one, damaged, off, "
          "private, too small, does not pay") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  (void)dir.write_file("first.cu", cub_kernel("first", "in[threadIdx.x]"));
  (void)dir.write_file("second.cu", cub_kernel("second", "in[threadIdx.x] * 2.0f"));
  std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""},
                                         {"KILN_PCH", "auto"}};
  const auto why_miss = [&](const std::string& source, const std::string& kernel, bool json = false) {
    std::vector<std::string> args{"cache", "why-miss", "--source", (dir / source).string(), "-k", kernel,
                                  "--toolkit-includes", "-t", "sm_90"};
    if (json) args.emplace_back("--json");
    return run_kiln(args, env, dir.path());
  };

  const Result before = why_miss("first.cu", "first");
  INFO(before.describe());
  REQUIRE(before.rc == 1);
  const std::string none = pch_line(before);
  if (none.find("no precompiled headers") != std::string::npos || none.find("cannot be loaded") != std::string::npos) {
    WARN("skipped: " << none);
    return;
  }
  CHECK(none.find("none stored yet (") != std::string::npos);
  CHECK(none.find("next compile makes it") != std::string::npos);  // a heavy set: its first compile makes it
  CHECK(why_miss("first.cu", "first", true).parsed().at("precompiled_header") == none);

  const Result made = run_kiln({"prewarm", "--source", (dir / "first.cu").string(), "-k", "first", "--toolkit-includes",
                                "-t", "sm_90", "-j", "1"},
                               env, dir.path());
  INFO(made.describe());
  REQUIRE(made.rc == 0);
  const json stats = run_kiln({"cache", "stats", "--json"}, env, dir.path()).parsed();
  REQUIRE(stats.at("pch").at("count") == 1);

  // Another kernel over the same headers: the stored PCH, under the key the first line named.
  const std::string key = none.substr(none.find('(') + 1, 32);
  const Result stored = why_miss("second.cu", "second");
  const std::string uses = pch_line(stored);
  INFO(stored.describe());
  CHECK(uses.find("a stored precompiled header (" + key) != std::string::npos);
  CHECK(uses.find("a compile uses it") != std::string::npos);

  // A verdict that it does not pay: auto neither uses it nor, once it is gone, makes it; KILN_PCH=1 would.
  {
    kiln::cache::StoreConfig config;
    config.root = cache;
    kiln::cache::Store store(config);
    kiln::cache::PchRecord record;
    record.verdict = kiln::cache::PchRecord::Verdict::does_not_pay;
    record.why = "measured slower";
    REQUIRE(store.write_pch_record(Hash128::from_hex(key).value(), record));
  }
  const std::string unpaid = pch_line(why_miss("second.cu", "second"));
  CHECK(unpaid.find("not used: it does not pay here (measured slower)") != std::string::npos);

  // A damaged file: said, and left where it is (why-miss changes nothing; the next compile removes it).
  const fs::path file = pch_path(cache, Hash128::from_hex(key).value());
  REQUIRE(fs::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f.write("zz", 2);
  }
  const std::string damaged = pch_line(why_miss("second.cu", "second"));
  CHECK(damaged.find("is damaged (") != std::string::npos);
  CHECK(fs::exists(file));

  env["KILN_PCH"] = "private";
  CHECK(pch_line(why_miss("second.cu", "second")).starts_with("private to each process (KILN_PCH=private"));
  env["KILN_PCH"] = "0";
  CHECK(pch_line(why_miss("second.cu", "second")) == "off: KILN_PCH=0");
  env["KILN_PCH"] = "auto";
  const Result small = run_kiln({"cache", "why-miss", "--builtin", "saxpy", "-k", "saxpy", "-t", "sm_90"}, env, dir.path());
  CHECK(pch_line(small).starts_with("none: "));
  CHECK(pch_line(small).find("KiB of headers reach NVRTC") != std::string::npos);
}

TEST_CASE("why-miss on a lighter header set: its next compile goes without a PCH first; a read-only cache makes none; "
          "one too large for the PCH share is named") {
  TempDir dir;
  const fs::path cache = dir / "cache";
  (void)dir.write_file("light.cu", "#include <cuda/std/complex>\n"
                                   "extern \"C\" __global__ void k(float* p) {\n"
                                   "  p[0] = cuda::std::abs(cuda::std::complex<float>(p[0], 1.0f));\n}\n");
  std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.string()}, {"KILN_CACHE_PACKS", ""},
                                         {"KILN_PCH", "auto"}};
  const auto why_miss = [&] {
    return pch_line(run_kiln({"cache", "why-miss", "--source", (dir / "light.cu").string(), "-k", "k",
                              "--toolkit-includes", "-t", "sm_90"},
                             env, dir.path()));
  };
  const std::string first = why_miss();
  INFO(first);
  if (first.find("no precompiled headers") != std::string::npos || first.find("cannot be loaded") != std::string::npos) {
    WARN("skipped: " << first);
    return;
  }
  // libcu++'s complex: over the 256 KiB a PCH is made for, under the 4 MiB that makes one at once.
  CHECK(first.find("next compile goes without one (measured), the one after makes it") != std::string::npos);
  const std::string key = first.substr(first.find('(') + 1, 32);

  env["KILN_CACHE_READONLY"] = "1";
  CHECK(why_miss().find("none is made where the cache is read-only") != std::string::npos);
  env.erase("KILN_CACHE_READONLY");

  {
    kiln::cache::StoreConfig config;
    config.root = cache;
    kiln::cache::Store store(config);
    kiln::cache::PchRecord record;
    record.verdict = kiln::cache::PchRecord::Verdict::too_large;
    record.pch_bytes = std::uint64_t{4} << 30;  // above the default share (2 GiB of the 4 GiB cap)
    REQUIRE(store.write_pch_record(Hash128::from_hex(key).value(), record));
  }
  CHECK(why_miss().find("is larger than the cache's share for them") != std::string::npos);
}
