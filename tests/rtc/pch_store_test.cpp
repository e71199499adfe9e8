// Precompiled headers kept in the cache and used by other processes (engine/src/lanes/nvrtc_pch_store.hpp), on a
// machine with no GPU: every step is a fresh process (pch_child) over one cache, as the acceptance of issue 48 asks:
// a second process compiling another kernel over the same headers uses the first's PCH with the bytes of
// KILN_PCH=0; makers at once; a damaged, cut short or foreign file; a full disk; the PCH share of the cache's limit;
// the "does not pay" verdict and its persistence. Needs NVRTC 12.8 or later; skips with the reason otherwise.
#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

struct Child {
  int made = -1, used = -1, compiled = -1;
  std::string pch;     ///< the lane's precompiled_headers() line
  std::string output;  ///< everything it printed (stderr too), for failure messages
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Runs pch_child over `cache` with `env` ("NAME=value ..."), compiling `kernels` of header set `set` into `out`.
Child run_child(const fs::path& cache, const fs::path& out, int set, const std::vector<int>& kernels,
                const std::string& env = "KILN_PCH=auto") {
  fs::create_directories(out);
  std::string command = fmt::format("env KILN_LOG=info {} {} {} {} {}", env, KILN_PCH_CHILD, cache.string(), out.string(), set);
  for (const int k : kernels) command += fmt::format(" {}", k);
  Child child;
  child.output = kiln::test::shell_output(command + " 2>&1");
  std::smatch m;
  if (std::regex_search(child.output, m, std::regex(R"(made=(\d+) used=(\d+) compiled=(\d+))"))) {
    child.made = std::stoi(m[1]);
    child.used = std::stoi(m[2]);
    child.compiled = std::stoi(m[3]);
  }
  if (std::regex_search(child.output, m, std::regex(R"(pch=([^\n]*))"))) child.pch = m[1];
  return child;
}

/// The files of <cache>/pch with `suffix` (".pch", ".pchv"; temps when `temps`).
std::vector<fs::path> pch_files(const fs::path& cache, const std::string& suffix, bool temps = false) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(cache / "pch", ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file()) continue;
    if (temps ? name.find(".tmp.") != std::string::npos : (name[0] != '.' && name.ends_with(suffix))) out.push_back(e.path());
  }
  return out;
}

/// Skips (passes with a warning) where NVRTC has no PCH or kiln cannot share it in this process kind.
bool stored_pch_available(const fs::path& scratch) {
  const Child probe = run_child(scratch / "probe-cache", scratch / "probe-out", 99, {1});
  if (probe.made < 0) {
    WARN("skipped: " << probe.output);
    return false;
  }
  if (!probe.pch.starts_with("on")) {
    WARN("skipped: precompiled headers " << probe.pch);
    return false;
  }
  if (probe.pch.find("stored PCHs shared") == std::string::npos) {
    WARN("skipped: stored precompiled headers are not shared here: " << probe.pch);
    return false;
  }
  return true;
}

/// The bytes each kernel of `set` gets with KILN_PCH=0 in a cache of its own.
void reference(const fs::path& scratch, int set, const std::vector<int>& kernels) {
  const Child plain = run_child(scratch / fmt::format("ref-cache-{}", set), scratch / "ref", set, kernels, "KILN_PCH=0");
  REQUIRE(plain.compiled == static_cast<int>(kernels.size()));
  REQUIRE(plain.made == 0);
}

void same_bytes(const fs::path& scratch, const fs::path& out, int set, const std::vector<int>& kernels) {
  for (const int k : kernels) {
    INFO("set " << set << " kernel " << k);
    const std::string name = fmt::format("{}-{}.bin", set, k);
    const std::string bytes = read_file(out / name);
    CHECK(!bytes.empty());
    CHECK(bytes == read_file(scratch / "ref" / name));
  }
}

}  // namespace

TEST_CASE("a second process compiles another kernel over the same headers with the first's stored PCH: the bytes of "
          "KILN_PCH=0",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path cache = scratch.path() / "cache", out = scratch.path() / "out";
  reference(scratch.path(), 1, {1, 2, 3, 4});
  // The first process: the set's first compile goes without (the record's first sample), its second makes the PCH.
  const Child first = run_child(cache, out, 1, {1, 2});
  INFO(first.output);
  CHECK(first.made == 1);
  CHECK(pch_files(cache, ".pch").size() == 1);
  CHECK(pch_files(cache, "", /*temps=*/true).empty());
  // A second process, other kernels: it uses the stored PCH from its first compile.
  const Child second = run_child(cache, out, 1, {3, 4});
  INFO(second.output);
  CHECK(second.made == 0);
  CHECK(second.used == 2);
  CHECK(second.pch.find("1 checked, 2 used, 0 made") != std::string::npos);
  same_bytes(scratch.path(), out, 1, {1, 2, 3, 4});
}

TEST_CASE("processes making one header set's PCH at once: one makes it, the others compile without and never wait",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path cache = scratch.path() / "cache", out = scratch.path() / "out";
  reference(scratch.path(), 2, {1, 11, 12, 13, 14, 15});
  REQUIRE(run_child(cache, out, 2, {1}).made == 0);  // the record's sample without: the next compile makes
  std::string command = "(";
  for (int k = 11; k <= 14; ++k) {
    command += fmt::format("env KILN_LOG=info KILN_PCH=auto {} {} {} 2 {} > {}/child-{}.txt 2>&1 & ", KILN_PCH_CHILD, cache.string(),
                           out.string(), k, scratch.path().string(), k);
  }
  (void)kiln::test::shell_output(command + "wait)");
  int made = 0;
  for (int k = 11; k <= 14; ++k) {
    const std::string report = read_file(scratch.path() / fmt::format("child-{}.txt", k));
    INFO(report);
    std::smatch m;
    REQUIRE(std::regex_search(report, m, std::regex(R"(made=(\d+))")));
    made += std::stoi(m[1]);
  }
  CHECK(made == 1);
  CHECK(pch_files(cache, ".pch").size() == 1);
  CHECK(pch_files(cache, "", /*temps=*/true).empty());
  CHECK(run_child(cache, out, 2, {15}).used == 1);
  same_bytes(scratch.path(), out, 2, {1, 11, 12, 13, 14, 15});
}

TEST_CASE("a damaged, cut short or foreign PCH file is never handed to NVRTC: removed, made again, the same bytes",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  reference(scratch.path(), 3, {1, 2, 3, 4});
  for (const std::string damage : {"flipped", "cut short", "foreign", "another key"}) {
    INFO(damage);
    std::string folder = damage;
    std::replace(folder.begin(), folder.end(), ' ', '-');
    const fs::path cache = scratch.path() / ("cache-" + folder), out = scratch.path() / ("out-" + folder);
    REQUIRE(run_child(cache, out, 3, {1, 2}).made == 1);
    const std::vector<fs::path> stored = pch_files(cache, ".pch");
    REQUIRE(stored.size() == 1);
    const fs::path file = stored.front();
    const auto size = fs::file_size(file);
    if (damage == "flipped") {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(size / 2));
      f.write("\x5a\xa5\x5a\xa5", 4);
    } else if (damage == "cut short") {
      fs::resize_file(file, size / 2);
    } else if (damage == "foreign") {
      std::ofstream(file, std::ios::binary | std::ios::trunc) << std::string(size, 'x');
    } else {
      // A sound file of another key under this one's name.
      REQUIRE(run_child(cache, out, 30, {1, 2}).made == 1);
      for (const fs::path& other : pch_files(cache, ".pch")) {
        if (other != file) fs::copy_file(other, file, fs::copy_options::overwrite_existing);
      }
    }
    // The next process checks it before its first use: it is removed (never given to NVRTC), that compile makes
    // the set's PCH again, and the one after uses the new one.
    const Child after = run_child(cache, out, 3, {3, 4});
    INFO(after.output);
    CHECK(after.made == 1);
    CHECK(after.used == 1);
    CHECK(after.output.find("stored precompiled header removed") != std::string::npos);
    same_bytes(scratch.path(), out, 3, {1, 2, 3, 4});
  }
}

TEST_CASE("a cache on a file system too small for a PCH: compiles go without one, never a SIGBUS or a failure",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  // A tmpfs of 48 MiB (root only): NVRTC's PCH heap is 256 MiB, so no PCH may be made there.
  const fs::path cache = scratch.path() / "small";
  fs::create_directories(cache);
  if (::geteuid() != 0 || ::mount("kiln-pch-test", cache.c_str(), "tmpfs", 0, "size=48m,mode=0700") != 0) {
    WARN("skipped: mounting a small tmpfs needs root and a system that allows it");
    return;
  }
  struct Unmount {
    fs::path at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{cache};
  reference(scratch.path(), 4, {1, 2, 3});
  const Child child = run_child(cache, scratch.path() / "out", 4, {1, 2, 3});
  INFO(child.output);
  CHECK(child.compiled == 3);
  CHECK(child.made == 0);
  CHECK(child.output.find("precompiled headers not made: the cache's file system") != std::string::npos);
  CHECK(pch_files(cache, ".pch").empty());
  same_bytes(scratch.path(), scratch.path() / "out", 4, {1, 2, 3});
}

TEST_CASE("PCH files stay within their share of the cache's limit: the least recently used goes, one too large is not "
          "kept and not made again",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path out = scratch.path() / "out";
  {
    // Measure one: the share is set to hold one and a half of them.
    const fs::path probe = scratch.path() / "probe-size";
    REQUIRE(run_child(probe, out, 5, {1, 2}).made == 1);
    const auto one = fs::file_size(pch_files(probe, ".pch").front());
    const fs::path cache = scratch.path() / "cache";
    const std::string env = fmt::format("KILN_PCH=auto KILN_PCH_MAXSIZE={}", one * 3 / 2);
    REQUIRE(run_child(cache, out, 5, {1, 2}, env).made == 1);
    ::sleep(1);  // file times: the second is the more recently used
    REQUIRE(run_child(cache, out, 6, {1, 2}, env).made == 1);
    CHECK(pch_files(cache, ".pch").size() == 1);
    CHECK(run_child(cache, out, 6, {3}, env).used == 1);  // the newer stays
    CHECK(run_child(cache, out, 5, {3}, env).used == 0);  // the older went
    CHECK(pch_files(cache, ".pchv").size() == 2);          // what was learnt of both stays

    // Least recently used, not first made: 5 made, then 6, then a process uses 5; 7's PCH takes 6's place. (Until
    // 2026-12-07 the trim went by when a PCH was made, and 5 went: a CuPy program's CUB PCH, used all along.)
    const fs::path lru = scratch.path() / "lru";
    const std::string room = fmt::format("KILN_PCH=1 KILN_PCH_MAXSIZE={}", one * 5 / 2);  // 1: whether it pays aside
    REQUIRE(run_child(lru, out, 5, {1, 2}, room).made == 1);
    ::sleep(1);
    REQUIRE(run_child(lru, out, 6, {1, 2}, room).made == 1);
    ::sleep(1);
    REQUIRE(run_child(lru, out, 5, {3}, room).used == 1);
    ::sleep(1);
    REQUIRE(run_child(lru, out, 7, {1, 2}, room).made == 1);
    CHECK(pch_files(lru, ".pch").size() == 2);
    CHECK(run_child(lru, out, 5, {4}, room).used == 1);  // made first, used since: kept
    CHECK(run_child(lru, out, 6, {3}, room).used == 0);  // the least recently used went
  }
  {
    const fs::path cache = scratch.path() / "tiny-share";
    const std::string env = "KILN_PCH=auto KILN_PCH_MAXSIZE=1M";
    const Child first = run_child(cache, out, 7, {1, 2}, env);
    INFO(first.output);
    CHECK(first.made == 1);  // NVRTC made it; the store did not keep it
    CHECK(pch_files(cache, ".pch").empty());
    const std::vector<fs::path> records = pch_files(cache, ".pchv");
    REQUIRE(records.size() == 1);
    CHECK(read_file(records.front()).find("verdict too-large") != std::string::npos);
    const Child next = run_child(cache, out, 7, {3}, env);
    CHECK(next.made == 0);  // not tried again while the share is that small
    CHECK(next.used == 0);
  }
}

TEST_CASE("a PCH that does not pay is removed, and the next process neither makes nor uses one; KILN_PCH=1 still does",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path cache = scratch.path() / "cache", out = scratch.path() / "out";
  reference(scratch.path(), 8, {1, 2, 3, 4, 5, 6, 7});
  REQUIRE(run_child(cache, out, 8, {1, 2}).made == 1);
  const std::vector<fs::path> records = pch_files(cache, ".pchv");
  REQUIRE(records.size() == 1);
  // This machine's compiles without a PCH, as the record has them, made 1 us: no compile with one can beat that.
  std::string record = read_file(records.front());
  record = std::regex_replace(record, std::regex("without_ms[^\n]*"), "without_ms 0.001");
  std::ofstream(records.front(), std::ios::trunc) << record;
  const Child judged = run_child(cache, out, 8, {3, 4});
  INFO(judged.output);
  CHECK(judged.used == 2);  // kVerdictUses uses, then the verdict
  CHECK(read_file(records.front()).find("verdict does-not-pay") != std::string::npos);
  CHECK(pch_files(cache, ".pch").empty());
  const Child next = run_child(cache, out, 8, {5});
  CHECK(next.made == 0);
  CHECK(next.used == 0);
  const Child forced = run_child(cache, out, 8, {6, 7}, "KILN_PCH=1");
  INFO(forced.output);
  CHECK(forced.made == 1);
  CHECK(forced.used == 1);
  same_bytes(scratch.path(), out, 8, {1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("a header set that names __BASE_FILE__ shares its PCH only among sources of one name", "[rtc][pch][stored]") {
  // The macro is the compile's main file: a PCH made for same.cu would give other.cu's binary the string "same.cu".
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path cache = scratch.path() / "cache", out = scratch.path() / "out";
  const std::string same = "PCH_CHILD_NAME=same.cu KILN_PCH=auto", other = "PCH_CHILD_NAME=other.cu KILN_PCH=auto";
  REQUIRE(run_child(scratch.path() / "ref-cache", scratch.path() / "ref", 40, {1, 2, 4}, same + " KILN_PCH=0").made == 0);
  REQUIRE(run_child(scratch.path() / "ref-cache", scratch.path() / "ref", 40, {3}, other + " KILN_PCH=0").made == 0);
  REQUIRE(run_child(cache, out, 40, {1, 2}, same).made == 1);
  const Child named_otherwise = run_child(cache, out, 40, {3}, other);
  INFO(named_otherwise.output);
  CHECK(named_otherwise.used == 0);
  CHECK(run_child(cache, out, 40, {4}, same).used == 1);
  same_bytes(scratch.path(), out, 40, {1, 2, 3, 4});
}

TEST_CASE("a process whose PCH heap address is taken keeps its PCHs private: the same bytes, no stored PCH used or made",
          "[rtc][pch][stored]") {
  kiln::test::TempDir scratch;
  if (!stored_pch_available(scratch.path())) return;
  const fs::path cache = scratch.path() / "cache", out = scratch.path() / "out";
  reference(scratch.path(), 9, {1, 2, 3, 4});
  REQUIRE(run_child(cache, out, 9, {1, 2}).made == 1);  // a stored PCH it could have used
  const Child taken = run_child(cache, out, 9, {3, 4}, "KILN_PCH=auto PCH_CHILD_TAKE_HEAP_ADDRESS=1");
  INFO(taken.output);
  CHECK(taken.compiled == 2);
  CHECK(taken.pch.find("stored PCHs not shared") != std::string::npos);
  CHECK(pch_files(cache, ".pch").size() == 1);  // nothing it made was stored
  same_bytes(scratch.path(), out, 9, {1, 2, 3, 4});
}
