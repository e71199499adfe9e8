// Dependency manifests from another machine (DependencyManifests::install with the request's ManifestScope,
// dep_manifest.hpp): such a manifest is untrusted input. One that names a file outside the request's include
// folders (a ".." escape, a link out of a folder, an absent path outside, a sibling of an absolute include)
// is refused whole, counted, warned of once, and the file is never opened (watched with inotify: an atime
// would not tell on a noatime or relatime mount). One within the scope is installed with the stats read
// here, so the lookup that follows reads nothing. Checking one is bounded: 1,000 names of one large file
// stop at the byte budget, too many records or too little time refuse it before any file is opened.
// No compiler, no GPU.
#include <sys/inotify.h>
#include <unistd.h>

#include <fmt/format.h>

#include <string>

#include "dep_manifest_test_support.hpp"

using namespace dep_manifest_test;
using kiln::cache::ManifestScope;

namespace {

/// Tells whether anything opened or read a watched file since the last ask (inotify IN_OPEN, IN_ACCESS:
/// queued by the kernel at the call itself; a stat, lstat or realpath raises neither).
class OpenWatch {
 public:
  OpenWatch() : m_fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) { REQUIRE(m_fd >= 0); }
  ~OpenWatch() { ::close(m_fd); }
  OpenWatch(const OpenWatch&) = delete;
  OpenWatch& operator=(const OpenWatch&) = delete;

  void watch(const fs::path& path) const { REQUIRE(::inotify_add_watch(m_fd, path.c_str(), IN_OPEN | IN_ACCESS) >= 0); }
  /// Opens and reads since the last call.
  [[nodiscard]] int events() const {
    alignas(inotify_event) char buffer[4096];
    int count = 0;
    for (;;) {
      const ssize_t got = ::read(m_fd, buffer, sizeof buffer);
      if (got <= 0) return count;
      for (ssize_t at = 0; at < got;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        if ((event->mask & (IN_OPEN | IN_ACCESS)) != 0) ++count;
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
  }

 private:
  int m_fd;
};

/// A node (its cache root), another machine that records manifests for the same request, and a file
/// outside the include folders standing for /etc/shadow.
struct Fetched : Fixture {
  fs::path etc = tmp.path() / "etc";
  fs::path shadow = etc / "shadow";
  ManifestScope scope{{inc0.string(), inc.string()}, {}};

  Fetched() { write_text(shadow, "root:$6$salt$hash:19000:0:99999:7:::\n"); }

  /// The bytes another machine would publish for the request with `set` (its own cache root each time).
  std::vector<std::byte> from_elsewhere(const DependencySet& set, const Hash128& result = result_key("r")) {
    DependencyManifests elsewhere(config_for(tmp.path() / ("elsewhere" + std::to_string(m_recorders++))));
    std::vector<std::byte> bytes = elsewhere.record(request.key, request.canonical, set, result);
    REQUIRE_FALSE(bytes.empty());
    return bytes;
  }

 private:
  int m_recorders = 0;
};

}  // namespace

TEST_CASE("manifest from elsewhere: naming a file outside the include folders refuses it whole, unopened",
          "[include]") {
  Fetched f;
  DependencyManifests node(config_for(f.root));
  OpenWatch watch;
  watch.watch(f.shadow);
  DependencySet set = f.standard_deps();
  const auto refused = [&](const DependencySet& forged, std::string_view names) {
    const std::vector<std::byte> bytes = f.from_elsewhere(forged);
    (void)watch.events();  // (the recorder's own stat is no open; start clean anyway)
    StderrCapture capture;
    const std::string why = node.install(f.request.key, f.request.canonical, bytes, f.scope);
    CHECK_THAT(why, Catch::Contains(std::string(names)));
    CHECK(node.installs_refused() == 1);
    CHECK(capture.warnings() == 1);  // one warning for the manifest, not one per record
    CHECK_FALSE(node.bytes(f.request.key));
    LookupStats looked;
    CHECK_FALSE(node.lookup(f.request.key, f.request.canonical, &looked));
    CHECK(looked.outcome == ManifestOutcome::no_manifest);
    CHECK(watch.events() == 0);  // never opened, never read
    // The watch does see an open: this test could have failed.
    (void)read_text(f.shadow);
    CHECK(watch.events() > 0);
  };
  SECTION("by its own path, with the digest its bytes have (the guess is right)") {
    set.headers.push_back(header_of(f.shadow));
    refused(set, f.shadow.string());
  }
  SECTION("through \"..\" out of an include folder") {
    HeaderRecord header = header_of(f.shadow);
    header.path = (f.inc / ".." / "etc" / "shadow").string();
    set.headers.push_back(header);
    refused(set, "not a normal path");
  }
  SECTION("through a link in an include folder to a folder outside") {
    fs::create_directory_symlink(f.etc, f.inc / "sys");
    HeaderRecord header = header_of(f.shadow);
    header.path = (f.inc / "sys" / "shadow").string();
    set.headers.push_back(header);
    refused(set, "leads outside the request's include folders");
  }
  SECTION("through a link in an include folder to the file") {
    fs::create_symlink(f.shadow, f.inc / "shadow.h");
    set.headers.push_back(header_of(f.inc / "shadow.h"));
    refused(set, "leads outside the request's include folders");
  }
  SECTION("as a path probed absent (a stat tells whether a file exists)") {
    set.absent.push_back((f.etc / "gshadow").string());
    refused(set, (f.etc / "gshadow").string());
  }
  SECTION("beside an absolute include of the request") {
    write_text(f.etc / "ok.h", "#define OK 1\n");
    f.scope.files.push_back((f.etc / "ok.h").string());
    set.headers.push_back(header_of(f.etc / "ok.h"));
    set.headers.push_back(header_of(f.shadow));
    refused(set, f.shadow.string());
  }
  SECTION("a second refusal is counted and said at debug level only") {
    set.headers.push_back(header_of(f.shadow));
    refused(set, f.shadow.string());
    StderrCapture capture;
    CHECK_FALSE(node.install(f.request.key, f.request.canonical, f.from_elsewhere(set), f.scope).empty());
    CHECK(node.installs_refused() == 2);
    CHECK(capture.warnings() == 0);
    CHECK(watch.events() == 0);
  }
}

TEST_CASE("manifest from elsewhere: within the scope it is installed with the stats read here", "[include]") {
  Fetched f;
  DependencyManifests node(config_for(f.root));
  DependencySet set = f.standard_deps();
  SECTION("the include folders, and an absolute include of the request") {
    write_text(f.etc / "ok.h", "#define OK 1\n");
    f.scope.files.push_back((f.etc / "ok.h").string());
    set.headers.push_back(header_of(f.etc / "ok.h"));
  }
  SECTION("an include folder named through a link (as toolkits are), and links inside it") {
    fs::create_directory_symlink(f.inc, f.tmp.path() / "cuda-include");
    fs::create_symlink(f.inc / "a.h", f.inc / "a-link.h");
    f.scope.folders = {f.inc0.string(), (f.tmp.path() / "cuda-include").string()};
    set = deps({f.tmp.path() / "cuda-include" / "a.h", f.tmp.path() / "cuda-include" / "a-link.h"}, {f.inc0 / "a.h"});
  }
  REQUIRE(node.install(f.request.key, f.request.canonical, f.from_elsewhere(set), f.scope).empty());
  CHECK(node.installs_refused() == 0);
  const Manifest installed = read_manifest(node, f.request.key);
  REQUIRE(installed.files.size() == set.headers.size());
  for (const HeaderRecord& header : installed.files) {
    struct stat st {};
    REQUIRE(::stat(header.path.c_str(), &st) == 0);
    CHECK(header.stat == kiln::cache::to_file_stat(st));  // read here, not the other machine's
    CHECK(header.trusted_stat);                           // (no trust window in these tests)
  }
  // Each header was read and hashed by the install: the lookup stats them and reads none.
  LookupStats looked;
  CHECK(node.lookup(f.request.key, f.request.canonical, &looked) == result_key("r"));
  CHECK(looked.reads == 0);
}

TEST_CASE("manifest from elsewhere: a header whose bytes differ here keeps no stat and does not match", "[include]") {
  Fetched f;
  DependencyManifests node(config_for(f.root));
  const std::vector<std::byte> bytes = f.from_elsewhere(f.standard_deps());
  write_text(f.inc / "a.h", "#pragma once\nint a(int);\n");
  REQUIRE(node.install(f.request.key, f.request.canonical, bytes, f.scope).empty());
  const Manifest installed = read_manifest(node, f.request.key);
  for (const HeaderRecord& header : installed.files) {
    const bool edited = header.path == (f.inc / "a.h").string();
    CHECK(header.trusted_stat != edited);
    CHECK((header.stat == FileStat{}) == edited);
  }
  LookupStats looked;
  CHECK_FALSE(node.lookup(f.request.key, f.request.canonical, &looked));
  CHECK(looked.outcome == ManifestOutcome::no_match);
  CHECK(looked.reads == 1);  // the edited header only
}

TEST_CASE("manifest from elsewhere: checking it is bounded in records, bytes and time", "[include]") {
  Fetched f;
  // 1,000 names (links inside an include folder) of one 1 MiB header: 1 GiB to hash unbounded.
  constexpr std::uint64_t kBig = 1ULL << 20;
  write_text(f.inc / "big.h", std::string(kBig, 'x'));
  fs::create_directories(f.inc / "names");
  const HeaderRecord big = header_of(f.inc / "big.h");
  DependencySet set;
  for (int i = 0; i < 1000; ++i) {
    HeaderRecord name = big;
    name.path = (f.inc / "names" / fmt::format("n{}.h", i)).string();
    fs::create_symlink(f.inc / "big.h", name.path);
    set.headers.push_back(std::move(name));
  }
  const std::vector<std::byte> bytes = f.from_elsewhere(set);
  ManifestConfig config = config_for(f.root);
  config.fetched.max_bytes = 8 * kBig;
  OpenWatch watch;
  watch.watch(f.inc / "big.h");
  const auto refused = [&](const ManifestConfig& with, std::string_view why, int opens_at_most) {
    DependencyManifests node(with);
    StderrCapture capture;
    const auto started = std::chrono::steady_clock::now();
    CHECK_THAT(node.install(f.request.key, f.request.canonical, bytes, f.scope), Catch::Contains(std::string(why)));
    LookupStats looked;
    CHECK_FALSE(node.lookup(f.request.key, f.request.canonical, &looked));
    CHECK(looked.bytes_hashed == 0);
    CHECK(seconds_since(started) < 5.0);  // (bounded: unbounded, the lookup would hash 1 GiB)
    CHECK(node.installs_refused() == 1);
    CHECK(capture.warnings() == 1);
    CHECK(watch.events() <= 2 * opens_at_most);  // an open and a read per header read
  };
  SECTION("the byte budget stops it after the budget's worth of reads") {
    refused(config, "more than 8388608 bytes", 9);
  }
  SECTION("more records than a manifest from elsewhere may hold: nothing is opened") {
    config.fetched.max_files = 999;
    refused(config, "1000 headers", 0);
  }
  SECTION("the time bound: nothing is opened past it") {
    config.fetched.max_time = std::chrono::milliseconds(0);
    refused(config, "longer than 0 ms", 0);
  }
}
