// Compile in this process, then a NEW process loads every built-in kernel from the disk cache with
// zero compiles and computes the same results.
#include <catch2/catch.hpp>

#include <cstdio>
#include <sstream>
#include <string>

#include "gpu_support.hpp"
#include "kiln/error.hpp"

namespace {

const std::vector<std::size_t> kDiskSizes = {1000, 65537};

/// Runs every case at kDiskSizes; returns the combined digest of the deterministic outputs and
/// appends failures.
std::uint64_t run_everything(kiln::Engine& engine, std::uint64_t seed, std::vector<std::string>& failures) {
  std::uint64_t digest = 0xcbf29ce484222325ULL;
  const auto& cases = kiln_test::kernel_cases();
  for (std::size_t index = 0; index < cases.size(); ++index) {
    for (const std::size_t n : kDiskSizes) {
      kiln_test::CaseResult result;
      try {
        cases[index].run(engine, engine.default_device(), n, seed + 7919 * index + n, nullptr, result);
      } catch (const kiln::Error& error) {
        result.fail(std::string("kiln::Error: ") + error.what());
      }
      for (const std::string& failure : result.failures) {
        failures.push_back(cases[index].expressions.front() + ": " + failure);
      }
      digest = kiln_test::fnv1a(digest, &result.digest, sizeof(result.digest));
    }
  }
  return digest;
}

/// The child: argv = <cache dir> <seed>. Prints "DIGEST <hex>" and "STATS compiles=<n> disk_hits=<n>";
/// exits 0 when every result matched its CPU reference.
int disk_child(const std::vector<std::string>& args) {
  if (args.size() != 2) {
    std::printf("usage: --kiln-child disk-load <cache dir> <seed>\n");
    return 2;
  }
  kiln::Engine engine(kiln_test::config_with_cache(args[0]));
  if (engine.devices().empty()) {
    std::printf("child: no device\n");
    return 3;
  }
  std::vector<std::string> failures;
  const std::uint64_t digest = run_everything(engine, std::stoull(args[1]), failures);
  for (const std::string& failure : failures) {
    std::printf("FAILURE %s\n", failure.c_str());
  }
  const kiln::cache::Counters stats = engine.stats();
  std::printf("DIGEST %016llx\n", static_cast<unsigned long long>(digest));
  std::printf("STATS compiles=%llu disk_hits=%llu\n", static_cast<unsigned long long>(stats.compiles),
              static_cast<unsigned long long>(stats.disk_hits));
  return failures.empty() ? 0 : 1;
}

const bool kDiskChildRegistered = kiln_test::register_child_mode("disk-load", disk_child);

/// The value of "key=<number>" in text; -1 when absent.
long long find_number(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key + "=");
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + key.size() + 1));
}

}  // namespace

TEST_CASE("a new process loads every built-in kernel from disk with zero compiles", "[gpu][disk]") {
  REQUIRE(kDiskChildRegistered);
  kiln_test::TempDir cache_dir("kiln-gpu-disk");
  const std::uint64_t seed = kiln_test::run_seed();
  INFO("seed " << seed << ", cache " << cache_dir.path());

  std::uint64_t parent_digest = 0;
  {
    kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
    std::vector<std::string> failures;
    parent_digest = run_everything(engine, seed, failures);
    for (const std::string& failure : failures) {
      FAIL_CHECK(failure);
    }
    REQUIRE(failures.empty());
    const kiln::cache::Counters stats = engine.stats();
    CHECK(stats.compiles == kiln::Source::builtin_names().size());
    CHECK(stats.bytes_written > 0);
  }

  const kiln_test::ChildResult child = kiln_test::run_child(
      "disk-load", {cache_dir.path().string(), std::to_string(seed)}, {{"KILN_CACHE_DIR", cache_dir.path().string()}});
  INFO("child output:\n" << child.output);
  REQUIRE(child.exit_code == 0);
  CHECK(find_number(child.output, "compiles") == 0);
  CHECK(find_number(child.output, "disk_hits") > 0);
  char expected[32];
  std::snprintf(expected, sizeof(expected), "DIGEST %016llx", static_cast<unsigned long long>(parent_digest));
  CHECK(child.output.find(expected) != std::string::npos);
}
