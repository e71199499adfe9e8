// The compiler probe (engine/src/compiler_probe.hpp): a process whose request is a disk hit does not
// load NVRTC once a probe describes it; a probe that lies (identity, targets, file stamp), is damaged,
// or sits in a directory the user does not alone control never changes what is served: the engine
// loads the compiler, keys the request with the compiler's real identity, and rewrites the probe.
// Each step runs in a fresh process (tests/rtc/probe_child.cpp), since "was NVRTC loaded" is a
// property of a process. Needs NVRTC at a full path (CUDA_HOME, /usr/local/cuda); skips otherwise.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_support.hpp"

namespace fs = std::filesystem;
using kiln::test::TempDir;

namespace {

/// The child's stdout; its stderr (kiln's warnings) goes to <cache>.stderr.
std::string run_child(const fs::path& cache, const std::string& target = "sm_90") {
  const std::string command =
      std::string(KILN_PROBE_CHILD) + " '" + cache.string() + "' " + target + " 2>'" + cache.string() + ".stderr'";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  ::pclose(pipe);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

fs::path probe_file(const fs::path& cache) {
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(cache / "compilers", ec)) {
    if (item.path().extension() == ".probe") return item.path();
  }
  return {};
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& path, const std::string& text) {
  fs::remove(path);
  std::ofstream(path, std::ios::binary) << text;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
}

/// The probe text with the line starting with `prefix` replaced by `line`.
std::string with_line(const std::string& text, const std::string& prefix, const std::string& line) {
  std::istringstream in(text);
  std::string out;
  for (std::string l; std::getline(in, l);) out += (l.starts_with(prefix) ? line : l) + "\n";
  return out;
}

/// The library path the probe records first.
std::string first_path(const std::string& text) {
  const std::size_t file = text.find("\nfile ");
  const std::size_t tab = text.find('\t', file);
  return text.substr(tab + 1, text.find('\n', tab) - tab - 1);
}

}  // namespace

TEST_CASE("a disk hit in a fresh process does not load NVRTC once a probe describes it") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const std::string first = run_child(cache);
  if (first.find("error=") != std::string::npos) kiln::test::skip("NVRTC is not available: " + first);
  REQUIRE(first == "origin=compiled nvrtc_loaded=1");
  const fs::path probe = probe_file(cache);
  if (probe.empty()) kiln::test::skip("NVRTC is found through the dynamic loader's path only; probes need a full path");
  const std::string good = read(probe);
  INFO(good);
  CHECK(good.find("\nidentity nvrtc ") != std::string::npos);
  CHECK(good.find(" sm_90 ") != std::string::npos);
  CHECK((fs::status(probe).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));

  CHECK(run_child(cache) == "origin=disk nvrtc_loaded=0");

  SECTION("a probe naming another identity: the real key is used, the probe is rewritten") {
    write(probe, with_line(good, "identity ", "identity nvrtc 0.1-planted"));
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
    CHECK(read(fs::path(cache.string() + ".stderr")).find("the compiler probe said 'nvrtc 0.1-planted'") != std::string::npos);
    CHECK(read(probe) == good);
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=0");
  }
  SECTION("a probe whose file stamp no longer matches the library is ignored and rewritten") {
    write(probe, with_line(good, "file ", "file 1 2 3 4.000000000 5.000000000\t" + first_path(good)));
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
    CHECK(read(probe) == good);
  }
  SECTION("a probe lacking the requested target does not refuse the request") {
    write(probe, with_line(good, "targets ", "targets sm_75"));
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
    CHECK(read(probe) == good);
  }
  SECTION("a damaged probe is ignored") {
    write(probe, good.substr(0, good.size() / 2) + std::string("\x00\xff garbage", 10));
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=0");
  }
  SECTION("a probe in a directory others can write is not trusted") {
    fs::permissions(cache / "compilers", fs::perms::group_write | fs::perms::others_write, fs::perm_options::add);
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
    fs::permissions(cache / "compilers", fs::perms::group_write | fs::perms::others_write, fs::perm_options::remove);
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=0");
  }
  SECTION("a symlinked probe directory is not followed") {
    const fs::path elsewhere = dir.path() / "elsewhere";
    fs::rename(cache / "compilers", elsewhere);
    fs::create_directory_symlink(elsewhere, cache / "compilers");
    CHECK(run_child(cache) == "origin=disk nvrtc_loaded=1");
  }
  SECTION("an unsupported target is still refused, on the loaded compiler's word") {
    const std::string out = run_child(cache, "sm_12");
    CHECK(out.find("error=target 'sm_12' is not supported by nvrtc") != std::string::npos);
  }
}

TEST_CASE("loading NVRTC loads its builtins library too, before any compile") {
  TempDir dir;
  const std::string out = run_child(dir.path() / "cache", "lanes");
  if (out.find("nvrtc_loaded=1") == std::string::npos) kiln::test::skip("NVRTC is not available: " + out);
  // libnvrtc-builtins.so.<major>.<minor> beside NVRTC (a toolkit's layout), which NVRTC would load at its first
  // compile: loaded with NVRTC, the first compile does not wait for it.
  bool beside = false;
  for (const char* root : {"/usr/local/cuda/lib64"}) {
    std::error_code ec;
    for (const auto& item : fs::directory_iterator(root, ec)) {
      beside = beside || item.path().filename().string().starts_with("libnvrtc-builtins.so.");
    }
  }
  if (!beside) kiln::test::skip("no libnvrtc-builtins beside NVRTC in /usr/local/cuda/lib64");
  CHECK(out == "nvrtc_loaded=1 builtins_loaded=1");
}
