// Every file a compiler can open is in the key: real compiles through the public API (a compile-only
// engine, NVRTC for sm_90, HIPRTC for gfx90a) against files the request does not hand over.
//  - NVRTC looks up a quoted include in the process's working directory (next to the source, whose
//    name has no folder): kiln turns that search off, so such a header is an error naming -I, with or
//    without include folders, and never a binary keyed without the header's bytes.
//  - An #include of an absolute path is opened by either compiler whatever its flags: kiln resolves
//    it itself (two-level key), so an edit of that file is a new key in a fresh engine.
//  - HIPRTC reads an absolute include from the disk even when an in-memory header has that name, and
//    searches /usr/include for <includes>: the first is refused, the second turned off.
//  - Raw compiler flags that make a compiler open files (-Xcuda=-I..., --pch-dir, -isysroot, ...) are
//    refused; a header that starts with a UTF-8 byte order mark compiles.
// Skips without NVRTC; the HIPRTC sections skip on their own when HIPRTC is missing.
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include <unistd.h>

#include <memory>
#include <string>

#include "include_test_support.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

using kiln::Engine;
using kiln::Options;
using kiln::Source;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

std::unique_ptr<Engine> engine_on(const std::filesystem::path& cache) {
  kiln::EngineConfig config;
  config.runtime = false;
  config.cache.root = cache;
  return std::make_unique<Engine>(config);
}

bool can_compile(const std::string& target) {
  static TempDir cache("kiln-reach-probe");
  try {
    (void)engine_on(cache.path())->compile(Source::from_text("probe.cu", "__global__ void k() {}"), Options(), {}, target);
    return true;
  } catch (const kiln::Error&) {
    return false;
  }
}

/// The working directory for one scope.
class InDirectory {
 public:
  explicit InDirectory(const std::filesystem::path& dir) : m_old(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~InDirectory() { std::filesystem::current_path(m_old); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  std::filesystem::path m_old;
};

std::string bytes_of(const kiln::CompiledBinary& binary) {
  return {reinterpret_cast<const char*>(binary.bytes().data()), binary.bytes().size()};
}

/// A kernel that writes VALUE from the header; the value lands in the binary as an immediate.
const char* const kValueKernel = "extern \"C\" __global__ void k(int* out) { *out = VALUE; }\n";

}  // namespace

TEST_CASE("a quoted include found only in the working directory is an error naming -I, never an unkeyed read") {
  TempDir work("kiln-reach-cwd");
  TempDir cache("kiln-reach-cache");
  TempDir empty("kiln-reach-empty");
  write_file(work.path(), "cwd.h", "#define VALUE 7\n");
  const InDirectory here(work.path());
  const Source source = Source::from_text("k.cu", std::string("#include \"cwd.h\"\n") + kValueKernel);
  auto engine = engine_on(cache.path());
  for (const std::vector<std::string>& options : {std::vector<std::string>{}, {"-I" + empty.path().string()}}) {
    INFO("options: " << (options.empty() ? "none" : options.front()));
    try {
      (void)engine->compile(source, Options(options), {}, "sm_90");
      FAIL("the compile read cwd.h from the working directory");
    } catch (const kiln::CompileError& e) {
      const std::string what = e.what();
      CHECK(what.find("cwd.h") != std::string::npos);
      CHECK(what.find("-I") != std::string::npos);
    }
  }
  // With the folder given, the header is read by kiln and keyed: an edit is another binary.
  const Options with_folder({"-I" + work.path().string()});
  const kiln::CompiledBinary seven = engine->compile(source, with_folder, {}, "sm_90");
  write_file(work.path(), "cwd.h", "#define VALUE 8\n");
  const kiln::CompiledBinary eight = engine_on(cache.path())->compile(source, with_folder, {}, "sm_90");
  CHECK(seven.key() != eight.key());
  CHECK(bytes_of(seven) != bytes_of(eight));
}

TEST_CASE("an absolute #include is read by kiln and keyed: an edit is a new key in a fresh engine") {
  TempDir dir("kiln-reach-abs");
  TempDir cache("kiln-reach-cache");
  const std::filesystem::path header = write_file(dir.path(), "abs.h", "#define VALUE 7\n");
  const std::string text = "#include \"" + header.string() + "\"\n" + kValueKernel;
  std::vector<std::string> targets{"sm_90"};
  if (can_compile("gfx90a")) targets.emplace_back("gfx90a");
  for (const std::string& target : targets) {
    DYNAMIC_SECTION("target " << target) {
      write_file(dir.path(), "abs.h", "#define VALUE 7\n");
      const Source source = Source::from_text("abs.cu", text);
      const kiln::CompiledBinary seven = engine_on(cache.path())->compile(source, Options(), {}, target);
      const kiln::CompiledBinary again = engine_on(cache.path())->compile(source, Options(), {}, target);
      CHECK(again.key() == seven.key());
      CHECK(again.origin() == kiln::Origin::disk);
      write_file(dir.path(), "abs.h", "#define VALUE 8\n");
      const kiln::CompiledBinary eight = engine_on(cache.path())->compile(source, Options(), {}, target);
      CHECK(eight.key() != seven.key());
      CHECK(eight.origin() == kiln::Origin::compiled);
      CHECK(bytes_of(seven) != bytes_of(eight));
      // __has_include of an absolute path is keyed too: the file's disappearance is another key.
      const Source probe = Source::from_text(
          "probe.cu", "#if __has_include(\"" + header.string() + "\")\n#define VALUE 1\n#else\n#define VALUE 2\n#endif\n" +
                          kValueKernel);
      const kiln::CompiledBinary present = engine_on(cache.path())->compile(probe, Options(), {}, target);
      std::filesystem::remove(header);
      const kiln::CompiledBinary absent = engine_on(cache.path())->compile(probe, Options(), {}, target);
      CHECK(present.key() != absent.key());
      CHECK(bytes_of(present) != bytes_of(absent));
    }
  }
}

TEST_CASE("an absolute include spelled another way (digraph, line splice, stringizing macro, -D macro) is read by "
          "kiln and keyed, or refused: never the old binary after an edit") {
  TempDir dir("kiln-reach-spell");
  TempDir folder("kiln-reach-folder");
  const std::filesystem::path header = write_file(dir.path(), "v.h", "#define VALUE 7\n");
  const std::string abs = header.string();
  struct Spelling {
    const char* what;
    std::string text;
    std::vector<std::string> options;
    bool computed;  ///< the name comes out of a macro (HIPRTC cannot be handed it in memory: refused)
  };
  const std::vector<Spelling> spellings = {
      {"the digraph %:", "%:include \"" + abs + "\"\n", {}, false},
      {"a line splice in the directive's name", "#inc\\\nlude \"" + abs + "\"\n", {}, false},
      {"a line splice in the operand", "#include \"" + abs.substr(0, 3) + "\\\n" + abs.substr(3) + "\"\n", {}, false},
      {"a stringizing macro", "#define S(x) #x\n#define X(x) S(x)\n#include X(" + abs + ")\n", {}, true},
      {"a stringizing macro over an object-like one",
       "#define PATH " + abs + "\n#define S(x) #x\n#define X(x) S(x)\n#include X(PATH)\n", {}, true},
      {"a pasting macro", "#define CAT(a, b) a ## b\n#define S(x) #x\n#define X(x) S(x)\n#include X(CAT(" +
                              abs.substr(0, abs.size() - 2) + ", .h))\n", {}, true},
      {"a -D macro", "#include HEADER\n", {"-DHEADER=\"" + abs + "\""}, true},
      // Before C++17 NVRTC replaces trigraphs first: ??= is #, and ??/ a backslash (so a line splice). kiln's own
      // -std starts at c++17; a raw flag can still ask for c++14.
      {"the trigraph ?\?=", "?\?=include \"" + abs + "\"\n", {"-Xcuda=-std=c++14"}, false},
      {"a line splice spelled ?\?/", "#inc?\?/\nlude \"" + abs + "\"\n", {"-Xcuda=-std=c++14"}, false},
  };
  std::vector<std::string> targets{"sm_90"};
  if (can_compile("gfx90a")) targets.emplace_back("gfx90a");
  for (const std::string& target : targets) {
    for (const Spelling& spelling : spellings) {
      for (const bool with_folder : {false, true}) {
        INFO(target << ", " << spelling.what << (with_folder ? ", with -I" : ", without -I"));
        if (target != "sm_90" && !spelling.options.empty() && spelling.options.front().starts_with("-Xcuda")) continue;
        TempDir cache("kiln-reach-cache");
        std::vector<std::string> options = spelling.options;
        if (with_folder) options.push_back("-I" + folder.path().string());
        const Source source = Source::from_text("spelled.cu", spelling.text + kValueKernel);
        write_file(dir.path(), "v.h", "#define VALUE 7\n");
        if (spelling.computed && target != "sm_90") {
          // The compiler would read the path from the disk whatever kiln hands it.
          CHECK_THROWS_WITH(engine_on(cache.path())->compile(source, Options(options), {}, target),
                            Catch::Contains("absolute path") && Catch::Contains(abs));
          continue;
        }
        const kiln::CompiledBinary seven = engine_on(cache.path())->compile(source, Options(options), {}, target);
        const kiln::CompiledBinary again = engine_on(cache.path())->compile(source, Options(options), {}, target);
        CHECK(again.key() == seven.key());
        CHECK(again.origin() == kiln::Origin::disk);
        write_file(dir.path(), "v.h", "#define VALUE 8\n");
        const kiln::CompiledBinary eight = engine_on(cache.path())->compile(source, Options(options), {}, target);
        CHECK(eight.key() != seven.key());
        CHECK(eight.origin() == kiln::Origin::compiled);
        CHECK(bytes_of(seven) != bytes_of(eight));
        // A fresh cache compiles the edited header's bytes: the binary a warm cache gives must be that one.
        TempDir fresh("kiln-reach-cache");
        CHECK(bytes_of(engine_on(fresh.path())->compile(source, Options(options), {}, target)) == bytes_of(eight));
      }
    }
  }
}

TEST_CASE("an include whose operand kiln cannot expand to a name is refused with the reason, never left to the "
          "compiler to open") {
  TempDir cache("kiln-reach-cache");
  auto engine = engine_on(cache.path());
  // NOWHERE is defined nowhere kiln can see: the compiler would be left to make a name of it.
  const Source source = Source::from_text("nowhere.cu", "#include NOWHERE(v)\n" + std::string(kValueKernel));
  try {
    (void)engine->compile(source, Options(), {}, "sm_90");
    FAIL("compiled an include kiln could not name");
  } catch (const kiln::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("cannot tell which header") != std::string::npos);
    CHECK(what.find("NOWHERE(v)") != std::string::npos);
    CHECK(what.find("nowhere.cu") != std::string::npos);
  }
}

TEST_CASE("a compile error quotes the includes as the files have them, not as kiln rewrote them") {
  TempDir dir("kiln-reach-quote");
  TempDir cache("kiln-reach-cache");
  // A header that includes itself without a guard: the compiler's error echoes that directive.
  write_file(dir.path(), "self.h", "#include \"self.h\"\n");
  const Source source = Source::from_text("quote.cu", "#include <self.h>\n" + std::string(kValueKernel));
  try {
    (void)engine_on(cache.path())->compile(source, Options({"-I" + dir.path().string()}), {}, "sm_90");
    FAIL("compiled a header that includes itself forever");
  } catch (const kiln::CompileError& e) {
    for (const std::string& text : {std::string(e.what()), e.log()}) {
      INFO(text);
      CHECK(text.find("#include \"self.h\"") != std::string::npos);
      CHECK(text.find("#include \"" + dir.path().string()) == std::string::npos);
    }
  }
}

TEST_CASE("a source without an include by path keeps its one-level key and reads no file") {
  TempDir cache("kiln-reach-cache");
  auto engine = engine_on(cache.path());
  const Source source = Source::from_text("plain.cu", "#include \"v.h\"\n" + std::string(kValueKernel),
                                          {{"v.h", "#define VALUE 3\n"}});
  const kiln::CompiledBinary binary = engine->compile(source, Options(), {}, "sm_90");
  CHECK(binary.origin() == kiln::Origin::compiled);
  CHECK(engine->stats().include_resolves == 0);
}

TEST_CASE("HIPRTC: an in-memory header with an absolute name is refused; <system> headers are not searched") {
  if (!can_compile("gfx90a")) {
    WARN("HIPRTC cannot compile for gfx90a here: skipped");
    return;
  }
  TempDir dir("kiln-reach-hip");
  TempDir cache("kiln-reach-cache");
  auto engine = engine_on(cache.path());
  const std::filesystem::path header = write_file(dir.path(), "x.h", "#define VALUE 2\n");
  const Source named = Source::from_text("k.cu", "#include \"" + header.string() + "\"\n" + kValueKernel,
                                         {{header.string(), "#define VALUE 1\n"}});
  CHECK_THROWS_WITH(engine->compile(named, Options(), {}, "gfx90a"), Catch::Contains("absolute name"));
  // HIPRTC's clang would otherwise read /usr/include/zlib.h (or any header there) unkeyed.
  const Source system = Source::from_text("sys.cu", "#include <zlib.h>\n__global__ void k() {}\n");
  CHECK_THROWS_AS(engine->compile(system, Options(), {}, "gfx90a"), kiln::CompileError);
}

TEST_CASE("raw flags that would make a compiler open files are refused") {
  for (const std::string option : {"-Xcuda=-I/tmp", "-Xcuda=--include-path=/tmp", "-Xcuda=-pre-include=/tmp/x.h",
                                   "-Xhip=-isysroot/tmp", "-Xhip=--sysroot=/tmp", "-Xhip=-imacros/tmp/x.h",
                                   "-Xhip=-Xclang", "-Xhip=--rocm-path=/x", "-Xhip=-resource-dir=/tmp"}) {
    INFO(option);
    CHECK_THROWS_WITH(Options({option}), Catch::Contains("open no file of its own"));
  }
  // NVRTC checks a precompiled header against flags and leading directives, not against the bytes of
  // in-memory headers: kiln runs PCH itself (one folder per header set), and a request's own PCH flags
  // are refused, automatic mode included.
  for (const std::string option : {"-Xcuda=-pch", "-Xcuda=--pch", "-Xcuda=--pch-dir=/tmp", "-Xcuda=--use-pch=/tmp/x.pch",
                                   "-Xcuda=--create-pch=x.pch", "-Xcuda=--instantiate-templates-in-pch=true",
                                   "-Xcuda=--pch-messages=false"}) {
    INFO(option);
    CHECK_THROWS_WITH(Options({option}), Catch::Contains("runs NVRTC's precompiled headers itself"));
  }
}

TEST_CASE("a header or source that starts with a UTF-8 byte order mark compiles, keyed on its bytes as read") {
  TempDir dir("kiln-reach-bom");
  TempDir cache("kiln-reach-cache");
  auto engine = engine_on(cache.path());
  const std::string bom = "\xEF\xBB\xBF";
  write_file(dir.path(), "bom.h", bom + "#define VALUE 5\n");
  const Options folder({"-I" + dir.path().string()});
  const kiln::CompiledBinary from_disk =
      engine->compile(Source::from_text("k.cu", "#include <bom.h>\n" + std::string(kValueKernel)), folder, {}, "sm_90");
  const kiln::CompiledBinary from_memory = engine->compile(
      Source::from_text("k.cu", "#include \"m.h\"\n" + std::string(kValueKernel), {{"m.h", bom + "#define VALUE 5\n"}}),
      Options(), {}, "sm_90");
  const kiln::CompiledBinary plain = engine->compile(
      Source::from_text("k.cu", "#include \"m.h\"\n" + std::string(kValueKernel), {{"m.h", "#define VALUE 5\n"}}),
      Options(), {}, "sm_90");
  CHECK(from_memory.key() != plain.key());  // the key holds the bytes as given, mark and all
  CHECK(bytes_of(from_memory) == bytes_of(plain));
  CHECK(!from_disk.bytes().empty());
  // A source that starts with one, and a first-line #include after it that kiln must still see.
  write_file(dir.path(), "first.h", "#define VALUE 6\n");
  const kiln::CompiledBinary marked =
      engine->compile(Source::from_text("bom.cu", bom + "#include <first.h>\n" + kValueKernel), folder, {}, "sm_90");
  CHECK(!marked.bytes().empty());
}

int main(int argc, char* argv[]) {
  if (!can_compile("sm_90")) kiln::test::skip("NVRTC cannot compile for sm_90 here");
  return kiln_test::run_catch(argc, argv);
}
