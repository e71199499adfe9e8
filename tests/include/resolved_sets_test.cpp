// Resolves reused inside a process (includes/src/resolved_sets.hpp), through the include home's
// facade (IncludeFolders::settle): a request whose source has the includes of an earlier one takes that
// resolve, checked by stat, and gets its own source rewritten; any change a resolve would see (a header
// edited, added in a place probed empty, removed; other includes, folders, in-memory headers, macro
// definitions, retry names) resolves again. No compiler.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "include_folders.hpp"
#include "include_test_support.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/includes/include_home.hpp"
#include "scan.hpp"

using kiln::Header;
using kiln::cache::AtomicCounters;
using kiln::cache::DependencyManifests;
using kiln::cache::ManifestConfig;
using kiln::cache::detail::IncludeFolders;
using kiln::cache::detail::MemoryHeader;
using kiln::cache::detail::SettleInput;
using kiln::cache::detail::Settled;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

/// An include home over a tree (inc/ searched first, then lib/), memory-only manifests, and a trust window
/// of zero (the files are written moments before they are read).
struct Home {
  TempDir dir{"kiln-resolved-sets"};
  std::string inc = (dir.path() / "inc").string();
  std::string lib = (dir.path() / "lib").string();
  AtomicCounters counters;
  std::unique_ptr<DependencyManifests> manifests;
  std::unique_ptr<IncludeFolders> home;

  explicit Home(std::chrono::nanoseconds stat_memo = std::chrono::nanoseconds(0),
                std::chrono::nanoseconds trust_window = std::chrono::nanoseconds(0)) {
    std::filesystem::create_directories(inc);
    write_file(lib, "pre/a.h", "#pragma once\n#include \"b.h\"\n#include <pre/c.h>\n");
    write_file(lib, "pre/b.h", "#pragma once\nint b;\n");
    write_file(lib, "pre/c.h", "#pragma once\nint c;\n");
    ManifestConfig config;
    config.disabled = true;
    config.stat_memo = stat_memo;
    config.trust_window = trust_window;
    manifests = std::make_unique<DependencyManifests>(config);
    home = std::make_unique<IncludeFolders>(*manifests, counters);
  }

  std::vector<std::filesystem::path> folders = {inc, lib};

  Settled settle(const std::string& text, std::span<const MemoryHeader> memory = {},
                 std::span<const std::string> retry = {}) {
    SettleInput input;
    input.source_name = "kernel.cu";
    input.source_text = text;
    input.memory_headers = memory;
    input.folders = folders;
    input.retry_names = retry;
    return home->settle(input, false);
  }
  [[nodiscard]] std::uint64_t resolves() const { return counters.include_resolves.load(); }
};

std::string kernel(const std::string& body, const std::string& includes = "#include <pre/a.h>\n") {
  return includes + "__global__ void k(int* o) { " + body + " }\n";
}

}  // namespace

TEST_CASE("a source with the includes of an earlier request takes its resolve, rewritten for itself", "[include]") {
  Home h;
  const Settled one = h.settle(kernel("*o = b;"));
  REQUIRE(one.includes);
  CHECK(h.resolves() == 1);
  const std::string second_text = "// another kernel, one line longer\n" + kernel("*o = c + b;");
  const Settled two = h.settle(second_text);
  REQUIRE(two.includes);
  CHECK(h.resolves() == 1);  // taken, not resolved: no header read
  CHECK(two.dependency_part == one.dependency_part);
  CHECK(two.includes->dependencies == one.includes->dependencies);
  CHECK(two.includes->compiler_headers.size() == one.includes->compiler_headers.size());
  CHECK(two.includes->work.reads == 0);
  // The second source as the compiler gets it: its own text, its include rewritten to the file's name.
  const std::string a = h.lib + "/pre/a.h";
  CHECK(two.includes->compiler_source ==
        "// another kernel, one line longer\n#include \"" + a + "\"\n__global__ void k(int* o) { *o = c + b; }\n");

  // What a resolve of the second source from scratch gives, in a fresh home: the same in every part.
  Home fresh;
  fresh.folders = {h.inc, h.lib};
  const Settled direct = fresh.settle(second_text);
  CHECK(direct.dependency_part == two.dependency_part);
  CHECK(direct.includes->compiler_source == two.includes->compiler_source);
  REQUIRE(direct.includes->compiler_headers.size() == two.includes->compiler_headers.size());
  for (std::size_t i = 0; i < direct.includes->compiler_headers.size(); ++i) {
    CHECK(direct.includes->compiler_headers[i].name == two.includes->compiler_headers[i].name);
    CHECK(direct.includes->compiler_headers[i].text == two.includes->compiler_headers[i].text);
  }
}

TEST_CASE("a change a resolve would see resolves again: edited, shadowed, removed headers", "[include]") {
  Home h;  // no stat memo: every check stats every path
  const Settled one = h.settle(kernel("*o = b;"));
  CHECK(h.resolves() == 1);

  SECTION("a header edited (another size)") {
    write_file(h.lib, "pre/b.h", "#pragma once\nint b = 2;\n");
    const Settled two = h.settle(kernel("*o = b + 1;"));
    CHECK(h.resolves() == 2);
    CHECK(two.dependency_part != one.dependency_part);
  }
  SECTION("a header planted in a place probed empty, searched before the one found") {
    write_file(h.inc, "pre/c.h", "#pragma once\nint c = 3;\n");
    const Settled two = h.settle(kernel("*o = b + 1;"));
    CHECK(h.resolves() == 2);
    CHECK(two.dependency_part != one.dependency_part);
    const auto& headers = two.includes->dependencies.headers;
    CHECK(std::any_of(headers.begin(), headers.end(),
                      [&](const auto& record) { return record.path == h.inc + "/pre/c.h"; }));
  }
  SECTION("a header removed") {
    std::filesystem::remove(h.lib + "/pre/c.h");
    const Settled two = h.settle(kernel("*o = b + 1;"));
    CHECK(h.resolves() == 2);
    CHECK(two.dependency_part != one.dependency_part);
  }
  SECTION("unchanged: taken again, and again") {
    (void)h.settle(kernel("*o = b + 2;"));
    (void)h.settle(kernel("*o = b + 3;"));
    CHECK(h.resolves() == 1);
  }
}

TEST_CASE("other includes, folders, in-memory headers, definitions or retry names are another resolve",
          "[include]") {
  Home h;
  (void)h.settle(kernel("*o = b;"));
  REQUIRE(h.resolves() == 1);

  (void)h.settle(kernel("*o = b;", "#include <pre/a.h>\n#include <pre/b.h>\n"));  // one include more
  CHECK(h.resolves() == 2);
  (void)h.settle(kernel("*o = b;", "#include \"pre/a.h\"\n"));  // quoted instead of angled
  CHECK(h.resolves() == 3);
  (void)h.settle(kernel("*o = b;", "#define PRE <pre/a.h>\n#include <pre/a.h>\n"));  // a definition
  CHECK(h.resolves() == 4);

  const std::vector<Header> memory = {{"extra.h", "int extra;\n"}};
  const std::vector<MemoryHeader> views = kiln::test::memory_views(memory);
  (void)h.settle(kernel("*o = b;"), views);
  CHECK(h.resolves() == 5);
  const std::vector<Header> edited = {{"extra.h", "int extra = 1;\n"}};
  const std::vector<MemoryHeader> edited_views = kiln::test::memory_views(edited);
  (void)h.settle(kernel("*o = b;"), edited_views);  // the same name, other bytes
  CHECK(h.resolves() == 6);

  const std::vector<std::string> retry = {"pre/b.h"};
  (void)h.settle(kernel("*o = b;"), {}, retry);
  CHECK(h.resolves() == 7);

  h.folders = {h.lib, h.inc};  // the same folders, searched in another order
  (void)h.settle(kernel("*o = b;"));
  CHECK(h.resolves() == 8);

  // Each of those is held now: the same request again takes its own.
  h.folders = {h.inc, h.lib};
  (void)h.settle(kernel("*o = 7;", "#include \"pre/a.h\"\n"));
  (void)h.settle(kernel("*o = 8;"), edited_views);
  CHECK(h.resolves() == 8);
}

TEST_CASE("a resolve that read a header too recent to trust by its stat is never taken again", "[include]") {
  Home h(std::chrono::nanoseconds(0), std::chrono::hours(1));  // every file is "recent"
  (void)h.settle(kernel("*o = b;"));
  (void)h.settle(kernel("*o = c;"));
  CHECK(h.resolves() == 2);
}

TEST_CASE("with the stat memo, a burst of requests stats each path at most once in its time", "[include]") {
  Home h(std::chrono::hours(1));
  const Settled one = h.settle(kernel("*o = b;"));
  const Settled two = h.settle(kernel("*o = c;"));
  CHECK(h.resolves() == 1);
  CHECK(two.includes->work.stats == 0);  // every path answered by the memo
  CHECK(two.includes->work.memo_hits ==
        one.includes->dependencies.headers.size() + one.includes->dependencies.absent.size());
}

TEST_CASE("a settle scans its source once, and the compiler's prelude needs no scan of its own", "[include]") {
  using kiln::cache::detail::scan_includes;
  using kiln::cache::detail::scans_made;
  using kiln::cache::detail::ScanResult;
  using kiln::includes::IncludeHome;
  Home h;
  (void)h.settle(kernel("*o = b;"));  // the tree's headers are read and scanned once, then kept
  // Code before the last include: a prelude the NVRTC lane hoists. A new resolve (other includes), with every
  // header kept: the source is the one text scanned, and the prelude comes from that scan.
  // (A line splice inside an operand: its rewrite keeps the line, so the prelude moves by more than the name.)
  const std::string text = "typedef int T;\n#include <pre/b.h>\n#include <pre/\\\nc.h>\n" + kernel("*o = b + c;");
  std::uint64_t before = scans_made();
  const Settled fresh = h.settle(text);
  REQUIRE(fresh.includes);
  CHECK(h.resolves() == 2);
  const kiln::includes::CompilerView view = IncludeHome::compiler_view(*fresh.includes);
  CHECK(scans_made() - before == 1);
  // What a scan of the rewritten text (the lane's, before) finds.
  ScanResult rescanned;
  scan_includes(view.source, rescanned);
  CHECK(rescanned.prelude_end != 0);
  CHECK(view.prelude_end == rescanned.prelude_end);
  CHECK(view.source != text);  // the includes were rewritten (their operands moved the prelude's end)

  // Taken from the held set for another source with those includes: one scan, the same rule.
  const std::string other = "// one more line\n" + text;
  before = scans_made();
  const Settled taken = h.settle(other);
  REQUIRE(taken.includes);
  CHECK(h.resolves() == 2);
  const kiln::includes::CompilerView taken_view = IncludeHome::compiler_view(*taken.includes);
  CHECK(scans_made() - before == 1);
  ScanResult taken_scan;
  scan_includes(taken_view.source, taken_scan);
  CHECK(taken_view.prelude_end == taken_scan.prelude_end);

  // A retry after a lean set's compile asked for a header it left out: one scan for the retry's resolve.
  SettleInput input;
  input.source_name = "kernel.cu";
  input.source_text = text;
  input.folders = h.folders;
  if (fresh.includes->lean) {
    before = scans_made();
    const auto retry = h.home->retry(input, *fresh.includes,
                                     "kernel.cu(2): catastrophic error: cannot open source file \"kiln-untaken/x.h\"\n");
    REQUIRE(retry);
    CHECK(retry->full);
    CHECK(scans_made() - before == 1);
  }
}
