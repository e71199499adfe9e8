#pragma once
// Helpers of the dependency manifest tests (dep_manifest_test.cpp, dep_manifest_files_test.cpp): requests,
// header trees under a temporary folder, and the bytes of a manifest file.
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "cache_test_support.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"

namespace dep_manifest_test {

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

struct Request {
  std::string canonical;
  Hash128 key;
};

inline Request make_request(std::string_view source, std::string_view include_dirs = "/inc0\n/inc\n") {
  CanonicalKey key;
  key.add("format", "1");
  key.add("compiler", "nvrtc 13.0");
  key.add("target", "sm_90");
  key.add("include-dirs", include_dirs);
  key.add("source", source);
  return Request{key.bytes(), key.hash()};
}

inline Hash128 result_key(std::string_view name) {
  return kiln::cache::hash128(std::string("result:") + std::string(name));
}

/// A configuration whose stat trust window is `window` (0 by default: a file written or touched a moment ago
/// has a ctime of "now", which the real window would keep untrusted for two seconds).
inline ManifestConfig config_for(const fs::path& root, std::chrono::nanoseconds window = 0ns) {
  ManifestConfig config;
  config.root = root;
  config.trust_window = window;
  config.stat_memo = 0ns;  // every lookup stats (the memo has its own test case)
  return config;
}

inline void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  REQUIRE(out.good());
}

inline std::string read_text(const fs::path& path) {
  const std::vector<std::byte> bytes = read_bytes(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// The header as an include resolver records it (read long ago: trusted as far as the resolver knows).
inline HeaderRecord header_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return HeaderRecord{path.string(), kiln::cache::to_file_stat(st), true, kiln::cache::hash128(read_text(path))};
}

inline DependencySet deps(const std::vector<fs::path>& headers, const std::vector<fs::path>& absent = {}) {
  DependencySet set;
  for (const fs::path& header : headers) set.headers.push_back(header_of(header));
  for (const fs::path& path : absent) set.absent.push_back(path.string());
  std::sort(set.absent.begin(), set.absent.end());
  return set;
}

/// Moves a file's mtime (and atime) into the past; its ctime becomes "now".
inline void touch_past(const fs::path& path, std::chrono::seconds age) {
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
inline void seal(std::vector<std::byte>& bytes, std::size_t end) {
  const Hash128 sum = kiln::cache::hash128(std::span(bytes).first(end), kiln::cache::kManifestChecksumSeed);
  for (int i = 0; i < 8; ++i) {
    bytes[end + static_cast<std::size_t>(i)] = static_cast<std::byte>(sum.high >> (8 * i));
    bytes[end + 8 + static_cast<std::size_t>(i)] = static_cast<std::byte>(sum.low >> (8 * i));
  }
}

inline std::uint32_t u32_at(const std::vector<std::byte>& bytes, std::size_t offset) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= std::to_integer<std::uint32_t>(bytes[offset + static_cast<std::size_t>(i)]) << (8 * i);
  }
  return value;
}

/// The head's size as the fixed part states it (canonical_len at 32, result_count at 48).
inline std::uint64_t head_size_of(const std::vector<std::byte>& bytes) {
  return kiln::cache::kManifestFixedBytes + std::uint64_t{u32_at(bytes, 32)} + 40 * std::uint64_t{u32_at(bytes, 48)} +
         16;
}

/// Re-seals both checksums (the head's, where the fixed part's counts place it inside the file, and the
/// file's), so that structure checks, not the checksums, see a change.
inline void reseal(std::vector<std::byte>& bytes) {
  if (bytes.size() < 64 + 32) return;
  if (const std::uint64_t head = head_size_of(bytes); head <= bytes.size() - 16) seal(bytes, head - 16);
  seal(bytes, bytes.size() - 16);
}

inline Manifest read_manifest(const DependencyManifests& manifests, const Hash128& key) {
  auto parsed = manifests.read_file(manifests.manifest_path(key));
  if (auto* error = std::get_if<ContentError>(&parsed)) FAIL("manifest does not parse: " << error->reason);
  return std::get<Manifest>(parsed);
}

inline mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dep_manifest_test
