// The include resolver on header trees written to a temporary folder: search order, shadow probes,
// what is read (and what is not), the scan's lexing, the rewrite, and the errors. No compiler.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <ctime>
#include <thread>

#include "include_test_support.hpp"
#include "kiln/base/hash.hpp"
#include "stat_memo.hpp"

using kiln::Header;
using kiln::cache::detail::CompilerHeader;
using kiln::cache::detail::IncludeError;
using kiln::cache::detail::IncludeInput;
using kiln::cache::detail::ManifestsAccess;
using kiln::cache::detail::MemoryHeader;
using kiln::cache::detail::resolve_includes;
using kiln::cache::detail::ResolvedIncludes;
using kiln::cache::detail::StatMemo;
using kiln::test::compiler_header;
using kiln::test::has;
using kiln::test::memory_views;
using kiln::test::read_paths;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

ResolvedIncludes resolve(std::string_view source, std::vector<std::filesystem::path> folders,
                         std::span<const Header> memory = {}, kiln::Vendor vendor = kiln::Vendor::cuda) {
  const std::vector<MemoryHeader> views = memory_views(memory);
  IncludeInput input;
  input.source_name = "main.cu";
  input.source_text = source;
  input.memory_headers = views;
  input.folders = std::move(folders);
  input.traits = kiln::test::traits_of(vendor);
  return resolve_includes(input);
}

/// A file of `bytes` bytes that holds no data (sparse): larger than a header may be, so reading it is
/// an error. Where one lies in a folder, the resolution succeeding proves the resolver never opened it.
void plant_unreadable(const std::filesystem::path& path) {
  std::filesystem::create_directories(path.parent_path());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(kiln::cache::detail::kMaxHeaderBytes + 1)) == 0);
  ::close(fd);
}

/// A resolve of `source` (as main.cu) over `folder` that keeps the header files it reads in `cache`.
IncludeInput cached_input(std::string_view source, const std::string& folder,
                          kiln::cache::detail::HeaderFileCache& cache) {
  IncludeInput input;
  input.source_name = "main.cu";
  input.source_text = source;
  input.folders = {folder};
  input.file_cache = &cache;
  return input;
}

}  // namespace

TEST_CASE("a quoted include is found next to the header that includes it; '..' is folded", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string() + "/inc";
  write_file(f, "lib/a.h", "#pragma once\n#include \"detail/b.h\"\n");
  write_file(f, "lib/detail/b.h", "#pragma once\n#include \"../c.h\"\nint b;\n");
  write_file(f, "lib/c.h", "int c;\n");
  const ResolvedIncludes r = resolve("#include <lib/a.h>\n__global__ void k() {}\n", {f});
  CHECK(read_paths(r) == std::vector<std::string>{f + "/lib/a.h", f + "/lib/detail/b.h", f + "/lib/c.h"});
  CHECK(r.dependencies.absent.empty());  // each found in the first place searched
  CHECK(r.unresolved.empty());
  CHECK(r.compiler_source == "#include \"" + f + "/lib/a.h\"\n__global__ void k() {}\n");
  const CompilerHeader* a = compiler_header(r, f + "/lib/a.h");
  REQUIRE(a != nullptr);
  CHECK(a->text == "#pragma once\n#include \"" + f + "/lib/detail/b.h\"\n");
  const CompilerHeader* b = compiler_header(r, f + "/lib/detail/b.h");
  REQUIRE(b != nullptr);
  CHECK(b->text == "#pragma once\n#include \"" + f + "/lib/c.h\"\nint b;\n");
  REQUIRE(compiler_header(r, f + "/lib/c.h") != nullptr);
  CHECK(r.compiler_headers.size() == 3);
}

TEST_CASE("\"x\" looks next to its includer first, <x> does not; memory headers come before folders", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "inc/h.h", "#include \"x.h\"\n#include <x.h>\n");
  write_file(f, "inc/x.h", "// inc/x.h\n");
  write_file(f, "x.h", "// top x.h\n");
  SECTION("folders only") {
    const ResolvedIncludes r = resolve("#include <inc/h.h>\n", {f});
    CHECK(read_paths(r) == std::vector<std::string>{f + "/inc/h.h", f + "/inc/x.h", f + "/x.h"});
    const CompilerHeader* h = compiler_header(r, f + "/inc/h.h");
    REQUIRE(h != nullptr);
    CHECK(h->text == "#include \"" + f + "/inc/x.h\"\n#include \"" + f + "/x.h\"\n");
    CHECK(r.dependencies.absent.empty());
  }
  SECTION("an in-memory x.h: <x.h> takes it, \"x.h\" still finds the file beside its includer") {
    const std::vector<Header> memory = {{"x.h", "// memory x.h\n"}};
    const ResolvedIncludes r = resolve("#include <inc/h.h>\n#include \"x.h\"\n", {f}, memory);
    CHECK(read_paths(r) == std::vector<std::string>{f + "/inc/h.h", f + "/inc/x.h"});  // top x.h never read
    const CompilerHeader* h = compiler_header(r, f + "/inc/h.h");
    REQUIRE(h != nullptr);
    CHECK(h->text == "#include \"" + f + "/inc/x.h\"\n#include <x.h>\n");  // memory includes keep their name
    // The source's "x.h" is the memory header (the source has no folder on disk).
    CHECK(r.compiler_source == "#include \"" + f + "/inc/h.h\"\n#include \"x.h\"\n");
    REQUIRE(compiler_header(r, "x.h") != nullptr);
    CHECK(compiler_header(r, "x.h")->text == "// memory x.h\n");
  }
}

TEST_CASE("two folders with the same header: the first wins and the second is never opened", "[include]") {
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  const std::string b = dir.path().string() + "/b";
  write_file(a, "same.h", "int from_a;\n");
  plant_unreadable(b + "/same.h");  // opening it would be an error
  const ResolvedIncludes r = resolve("#include <same.h>\n", {a, b});
  CHECK(read_paths(r) == std::vector<std::string>{a + "/same.h"});
  CHECK(r.dependencies.absent.empty());  // found in the first folder: nothing searched before it
  // The other order reads b's: an unreadable header is an error that names it.
  try {
    (void)resolve("#include <same.h>\n", {b, a});
    FAIL("expected IncludeError");
  } catch (const IncludeError& e) {
    CHECK_THAT(e.what(), Catch::Contains(b + "/same.h"));
  }
}

TEST_CASE("shadow probes: every place searched before the match is recorded absent", "[include]") {
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  const std::string b = dir.path().string() + "/b";
  const std::string c = dir.path().string() + "/c";
  std::filesystem::create_directories(a);
  write_file(b, "sub/h.h", "#include \"y.h\"\n#include <z.h>\n");
  write_file(c, "y.h", "int y;\n");
  write_file(b, "z.h", "int z;\n");
  const ResolvedIncludes r = resolve("#include <sub/h.h>\n", {a, b, c});
  CHECK(read_paths(r) == std::vector<std::string>{b + "/sub/h.h", c + "/y.h", b + "/z.h"});
  // <sub/h.h>: a; "y.h": next to h.h, then a, b; <z.h>: a. Sorted, unique.
  const std::vector<std::string> expected = {a + "/sub/h.h", a + "/y.h", a + "/z.h", b + "/sub/y.h", b + "/y.h"};
  CHECK(r.dependencies.absent == expected);
  CHECK(std::is_sorted(r.dependencies.absent.begin(), r.dependencies.absent.end()));
}

TEST_CASE("an include that matches nothing is recorded, not an error; its probes are absent paths", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  const ResolvedIncludes r = resolve("#include <cstdint>\n#include \"nowhere.h\"\n#include <cstdint>\nint x;\n", {f});
  CHECK(r.unresolved == std::vector<std::string>{"cstdint", "nowhere.h"});
  CHECK(r.dependencies.headers.empty());
  // A header appearing there later would be found and change the compile.
  CHECK(r.dependencies.absent == std::vector<std::string>{f + "/cstdint", f + "/nowhere.h"});
  CHECK(r.compiler_source == "#include <cstdint>\n#include \"nowhere.h\"\n#include <cstdint>\nint x;\n");
}

TEST_CASE("a cycle and repeated includes: each file is read once", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "a.h", "#ifndef A_H\n#define A_H\n#include \"b.h\"\n#include \"common.h\"\n#endif\n");
  write_file(f, "b.h", "#pragma once\n#include \"a.h\"\n#include \"common.h\"\n#include <common.h>\n");
  write_file(f, "common.h", "#pragma once\nint common;\n");
  const ResolvedIncludes r = resolve("#include <a.h>\n#include <b.h>\n#include <a.h>\n#include \"common.h\"\n", {f});
  CHECK(read_paths(r) == std::vector<std::string>{f + "/a.h", f + "/b.h", f + "/common.h"});
  CHECK(r.compiler_headers.size() == 3);
  CHECK(r.unresolved.empty());
}

TEST_CASE("the scan reads every branch but not comments, strings or raw strings", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  for (const char* name :
       {"dead.h", "win.h", "spaced.h", "commented.h", "spliced.h", "after_string.h", "after_char.h", "after_number.h",
        "after_raw.h", "c1.h", "c2.h", "c3.h", "c4.h", "in_raw.h", "in_string.h", "odd.h", "in_raw2.h", "in_block.h",
        "after_code.h"}) {
    write_file(f, name, std::string("// ") + name + "\n");
  }
  const std::string source =
      "#if 0\n"
      "#include <dead.h>\n"
      "#endif\n"
      "#ifdef _WIN32\n"
      "#  include \"win.h\"\n"
      "#endif\n"
      "/* x */ #   /* y */ include <spaced.h>\n"
      "#inc\\\n"
      "lude <spl\\\n"
      "iced.h>\n"
      "// #include <c1.h>\n"
      "/* #include <c2.h>\n"
      "#include <c3.h> */\n"
      "// a comment that goes on \\\n"
      "#include <c4.h>\n"
      "const char* s = \"/*\";\n"
      "#include <after_string.h>\n"
      "const char* t = \"#include <in_string.h>\";\n"
      "char q = '\"';\n"
      "#include <after_char.h>\n"
      "int n = 1'000'000;\n"
      "#include <after_number.h>\n"
      "const char* raw = R\"kiln(\n"
      "#include <in_raw.h>\n"
      ")kiln\";\n"
      "#include <after_raw.h>\n"
      "#error don't stop here\n"
      "#include <odd.h>\n"
      // Literals and comments after plain code on the same line (the scan passes over plain code in stretches).
      "int a = n/2; const char* r2 = u8R\"k(\n"
      "#include <in_raw2.h>\n"
      ")k\"; auto c = u8'#'; int b = 2 * 3 /* a block\n"
      "#include <in_block.h>\n"
      "*/; int z = 1 + \\\n"
      "2;\n"
      "#include <after_code.h>\n";
  const ResolvedIncludes r = resolve(source, {f});
  const std::vector<std::string> read = read_paths(r);
  for (const char* name : {"dead.h", "win.h", "spaced.h", "spliced.h", "after_string.h", "after_char.h",
                           "after_number.h", "after_raw.h", "odd.h", "after_code.h"}) {
    INFO(name);
    CHECK(has(read, f + "/" + name));
  }
  for (const char* name : {"c1.h", "c2.h", "c3.h", "c4.h", "in_raw.h", "in_string.h", "in_raw2.h", "in_block.h"}) {
    INFO(name);
    CHECK_FALSE(has(read, f + "/" + name));
  }
  CHECK(read.size() == 10);
  // Every line stays where it was, the spliced include included.
  CHECK(kiln::test::line_count(r.compiler_source) == kiln::test::line_count(source));
  CHECK(r.compiler_source.find("#inc\\\nlude \"" + f + "/spliced.h\"\\\n\n") != std::string::npos);
  CHECK(r.compiler_source.find("/* x */ #   /* y */ include \"" + f + "/spaced.h\"\n") != std::string::npos);
}

TEST_CASE("__has_include operands are includes too, and are rewritten", "[include]") {
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  const std::string b = dir.path().string() + "/b";
  write_file(a, "opt.h", "#if __has_include_next(<opt.h>)\n#include_next <opt.h>\n#endif\n");
  write_file(b, "opt.h", "int opt;\n");
  write_file(a, "q.h", "int q;\n");
  const std::string source =
      "#if defined(__has_include)\n"
      "#  if __has_include(<opt.h>) && __has_include ( \"q.h\" ) && !__has_include(<missing.h>)\n"
      "#    include <opt.h>\n"
      "#  endif\n"
      "#endif\n";
  const ResolvedIncludes r = resolve(source, {a, b});
  CHECK(read_paths(r) == std::vector<std::string>{a + "/opt.h", a + "/q.h", b + "/opt.h"});
  CHECK(r.unresolved == std::vector<std::string>{"missing.h"});
  CHECK(r.compiler_source ==
        "#if defined(__has_include)\n"
        "#  if __has_include(\"" +
            a + "/opt.h\") && __has_include ( \"" + a +
            "/q.h\" ) && !__has_include(<missing.h>)\n"
            "#    include \"" +
            a +
            "/opt.h\"\n"
            "#  endif\n"
            "#endif\n");
  const CompilerHeader* opt = compiler_header(r, a + "/opt.h");
  REQUIRE(opt != nullptr);
  CHECK(opt->text == "#if __has_include(\"" + b + "/opt.h\")\n#include \"" + b + "/opt.h\"\n#endif\n");
}

TEST_CASE("a macro wrapping __has_include: its header-name arguments are probed like __has_include's", "[include]") {
  // CCCL decides its half/bfloat16 support with `#if _CCCL_HAS_INCLUDE(<cuda_fp16.h>)` through
  // `#define _CCCL_HAS_INCLUDE(_X) __has_include(_X)`: a header the compiler probes that way but was not
  // handed would silently turn the feature off.
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  write_file(a, "wrap.h", "#pragma once\n#define HAS_INCLUDE(_X) __has_include(_X)\n");
  write_file(a, "fp.h", "int fp;\n");
  write_file(a, "q.h", "int q;\n");
  write_file(a, "def.h", "int def;\n");
  write_file(a, "str.h", "int str;\n");
  const std::string source =
      "#include <wrap.h>\n"
      "#define HAS_DEF HAS_INCLUDE(<def.h>)\n"
      "#define SAYS(x) _Pragma(\"message(\\\"x\\\")\") puts(\"str.h\")\n"
      "#if HAS_INCLUDE(<fp.h>) && HAS_INCLUDE ( \"q.h\" ) && !HAS_INCLUDE(<gone.h>) && HAS_DEF\n"
      "int all;\n"
      "#elif defined(X) && (1 < 2)\n"
      "#endif\n"
      "int f() { return g(\"str.h\") + h(1 < 2); }\n";
  const ResolvedIncludes r = resolve(source, {a});
  // A string in code or in a #define body is no probe (str.h stays unread); gone.h is a negative probe.
  CHECK(read_paths(r) == std::vector<std::string>{a + "/wrap.h", a + "/def.h", a + "/fp.h", a + "/q.h"});
  CHECK(r.unresolved == std::vector<std::string>{"gone.h"});
  CHECK(r.compiler_source.find("#if HAS_INCLUDE(\"" + a + "/fp.h\") && HAS_INCLUDE ( \"" + a +
                               "/q.h\" ) && !HAS_INCLUDE(<gone.h>) && HAS_DEF\n") != std::string::npos);
  CHECK(r.compiler_source.find("#define HAS_DEF HAS_INCLUDE(\"" + a + "/def.h\")\n") != std::string::npos);
  CHECK(r.compiler_source.find("g(\"str.h\")") != std::string::npos);
}

TEST_CASE("#include_next searches the folders after the includer's", "[include]") {
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  const std::string m = dir.path().string() + "/m";
  const std::string b = dir.path().string() + "/b";
  std::filesystem::create_directories(m);
  write_file(a, "n.h", "#pragma once\n#include_next <n.h>\nint from_a;\n");
  write_file(b, "n.h", "#pragma once\n#include_next \"n.h\"\nint from_b;\n");  // nothing after b
  const ResolvedIncludes r = resolve("#include <n.h>\n", {a, m, b});
  CHECK(read_paths(r) == std::vector<std::string>{a + "/n.h", b + "/n.h"});
  // a's include_next searched m then b; b's searched nothing. a/n.h itself is not re-probed.
  CHECK(r.dependencies.absent == std::vector<std::string>{m + "/n.h"});
  CHECK(r.unresolved == std::vector<std::string>{"n.h"});  // b's include_next found nothing
  const CompilerHeader* na = compiler_header(r, a + "/n.h");
  REQUIRE(na != nullptr);
  CHECK(na->text == "#pragma once\n#include \"" + b + "/n.h\"\nint from_a;\n");
  const CompilerHeader* nb = compiler_header(r, b + "/n.h");
  REQUIRE(nb != nullptr);
  CHECK(nb->text == "#pragma once\n#include_next \"n.h\"\nint from_b;\n");  // unresolved: left as written
}

TEST_CASE("computed includes: object-like macros are expanded over every definition and handed by name", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  // Thrust's pattern: the system is picked by a macro defined in several branches, and the header
  // name is built from it.
  write_file(f, "sys/config.h",
             "#if defined(USE_OMP)\n#define SYS omp\n#else\n#define SYS cuda /* default */\n#endif\n"
             "#define SYS_ROOT sys/SYS\n");
  write_file(f, "sys/tag.h",
             "#include <sys/config.h>\n#define TAG_HEADER <SYS_ROOT/tag_impl.h>\n#include TAG_HEADER\n");
  write_file(f, "sys/cuda/tag_impl.h", "#include \"detail.h\"\n");
  write_file(f, "sys/cuda/detail.h", "int cuda_detail;\n");
  write_file(f, "sys/omp/tag_impl.h", "int omp_tag;\n");
  // The cuda variant is also included directly: it must reach the compiler under one name only.
  const ResolvedIncludes r = resolve("#include <sys/tag.h>\n#include <sys/cuda/tag_impl.h>\n", {f});
  CHECK(r.computed == std::vector<std::string>{"TAG_HEADER"});
  CHECK(r.unresolved.empty());
  CHECK(read_paths(r) == std::vector<std::string>{f + "/sys/tag.h", f + "/sys/cuda/tag_impl.h", f + "/sys/config.h",
                                                  f + "/sys/cuda/detail.h", f + "/sys/omp/tag_impl.h"});
  // The include cannot be rewritten, so each file it may name goes to the compiler under the name the
  // compiler will ask for, and every rewritten include of that file uses the same name.
  const CompilerHeader* cuda = compiler_header(r, "sys/cuda/tag_impl.h");
  REQUIRE(cuda != nullptr);
  CHECK(cuda->text == "#include \"" + f + "/sys/cuda/detail.h\"\n");
  CHECK(compiler_header(r, f + "/sys/cuda/tag_impl.h") == nullptr);
  CHECK(r.compiler_source == "#include \"" + f + "/sys/tag.h\"\n#include \"sys/cuda/tag_impl.h\"\n");
  CHECK(compiler_header(r, "sys/omp/tag_impl.h") != nullptr);
  CHECK(compiler_header(r, f + "/sys/tag.h")->text ==
        "#include \"" + f + "/sys/config.h\"\n#define TAG_HEADER <SYS_ROOT/tag_impl.h>\n#include TAG_HEADER\n");
  CHECK(r.compiler_headers.size() == 5);
}

TEST_CASE(
    "a computed include through a function-like macro is expanded and handed by name; a retry name is handed "
    "under that name",
    "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "impl/config_a.h", "#include \"detail.h\"\n");
  write_file(f, "impl/detail.h", "int detail;\n");
  // A function-like macro is expanded as the preprocessor does.
  const std::string source = "#define PICK(x) <impl/x.h>\n#include PICK(config_a) // picked by a macro\nint x;\n";
  const ResolvedIncludes first = resolve(source, {f});
  CHECK(read_paths(first) == std::vector<std::string>{f + "/impl/config_a.h", f + "/impl/detail.h"});
  CHECK(compiler_header(first, "impl/config_a.h") != nullptr);
  CHECK(first.computed == std::vector<std::string>{"PICK(config_a)"});
  CHECK(first.compiler_source == source);
  // The engine learns the name from the failed compile's log and resolves again with it.
  IncludeInput input;
  input.source_name = "main.cu";
  input.source_text = source;
  input.folders = {f};
  input.retry_names = {"impl/config_a.h", "impl/not_there.h"};
  const ResolvedIncludes retry = resolve_includes(input);
  CHECK(read_paths(retry) == std::vector<std::string>{f + "/impl/config_a.h", f + "/impl/detail.h"});
  const CompilerHeader* alias = compiler_header(retry, "impl/config_a.h");
  REQUIRE(alias != nullptr);
  CHECK(alias->text == "#include \"" + f + "/impl/detail.h\"\n");
  CHECK(compiler_header(retry, f + "/impl/config_a.h") == nullptr);  // one file, one name
  CHECK(retry.compiler_headers.size() == 2);
  CHECK(retry.unresolved == std::vector<std::string>{"impl/not_there.h"});
}

TEST_CASE("guess_computed expands macros as the preprocessor does: function-like, #, ##, arguments first",
          "[include]") {
  using kiln::cache::detail::Defines;
  using kiln::cache::detail::Guess;
  using kiln::cache::detail::guess_computed;
  const auto names = [](std::string_view operand, const Defines& defines) {
    std::vector<std::string> out;
    for (const Guess& g : guess_computed(operand, defines)) out.push_back((g.angled ? "<" : "\"") + g.name);
    return out;
  };
  Defines d;
  d["S"] = {{"(x) #x", true}};
  d["X"] = {{"(x) S(x)", true}};
  d["PATH"] = {{"/abs/v.h", false}};
  d["CAT"] = {{"(a, b) a ## b", true}};
  d["ROOT"] = {{"lib", false}, {"other", false}};  // two definitions (two branches): both names
  d["HDR"] = {{"(name) <ROOT/name.h>", true}};
  d["VA"] = {{"(...) S(__VA_ARGS__)", true}};
  d["SELF"] = {{"SELF", false}};
  CHECK(names("X(/abs/v.h)", d) == std::vector<std::string>{"\"/abs/v.h"});
  CHECK(names("S(PATH)", d) == std::vector<std::string>{"\"PATH"});        // '#' takes the argument as written
  CHECK(names("X(PATH)", d) == std::vector<std::string>{"\"/abs/v.h"});    // X's argument is expanded first
  CHECK(names("X(CAT(v, .h))", d) == std::vector<std::string>{"\"v.h"});
  CHECK(names("HDR(config)", d) == std::vector<std::string>{"<lib/config.h", "<other/config.h"});
  CHECK(names("VA(a/b.h)", d) == std::vector<std::string>{"\"a/b.h"});
  CHECK(names("S(  a   b  )", d) == std::vector<std::string>{"\"a b"});
  CHECK(names("S(\"q.h\")", d).empty());  // a string with quotes inside is no header name
  CHECK(names("SELF", d).empty());         // no name, and the expansion stops
  CHECK(names("NOWHERE(x)", d).empty());
  CHECK(names("X", d).empty());            // a function-like macro without arguments is no call
}

TEST_CASE("missing_include_from_log reads NVRTC's and clang's wording", "[include]") {
  using kiln::cache::detail::missing_include_from_log;
  CHECK(missing_include_from_log("main.cu(1): catastrophic error: cannot open source file \"cub/x.cuh\"\n"
                                 "  #include \"cub/x.cuh\"\n") == std::optional<std::string>("cub/x.cuh"));
  CHECK(missing_include_from_log("main.cu(1): catastrophic error: could not open source file \"dir/y.h\" (no "
                                 "directories in search list)\n") == std::optional<std::string>("dir/y.h"));
  CHECK(missing_include_from_log("/tmp/comgr-1/input/CompileSource:1:10: fatal error: 'a/b.h' file not found\n") ==
        std::optional<std::string>("a/b.h"));
  CHECK(missing_include_from_log("x:1:10: error: '/p/q.h' file not found, did you mean 'p/q.h'?\n") ==
        std::optional<std::string>("/p/q.h"));
  CHECK_FALSE(missing_include_from_log("main.cu(3): error: identifier \"x\" is undefined\n").has_value());
  CHECK_FALSE(missing_include_from_log("").has_value());
}

TEST_CASE("describe_missing_include names the folders searched", "[include]") {
  using kiln::cache::detail::describe_missing_include;
  const std::vector<std::filesystem::path> folders = {"/opt/a/include", "/opt/b/include"};
  const std::string text = describe_missing_include("cub/cub.cuh", folders);
  CHECK_THAT(text, Catch::Contains("cub/cub.cuh") && Catch::Contains("/opt/a/include, /opt/b/include"));
  CHECK_THAT(describe_missing_include("x.h", {}), Catch::Contains("-I") && Catch::Contains("--toolkit-includes"));
}

TEST_CASE("a generated tree of 2,000 headers resolves fast and reads each file once", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  constexpr int kCount = 2000;
  for (int i = 0; i < kCount; ++i) {
    std::string text = fmt::format("#ifndef H{0}\n#define H{0}\n", i);
    // Each header includes the next (so all are reached), one further away, and one folder up and back.
    text += fmt::format("#include \"../d{}/h{}.h\"\n", (i + 1) % kCount / 100, (i + 1) % kCount);
    text += fmt::format("#include <d{}/h{}.h>\n", (i * 7 + 3) % kCount / 100, (i * 7 + 3) % kCount);
    text += "/* #include <never.h> */\n#endif\n";
    write_file(f, fmt::format("d{}/h{}.h", i / 100, i), text);
  }
  // CPU time is what the check bounds: wall time on a loaded machine says little about the resolver.
  const std::clock_t cpu_start = std::clock();
  const auto start = std::chrono::steady_clock::now();
  const ResolvedIncludes r = resolve("#include <d0/h0.h>\n", {f});
  const double ms = kiln::test::ms_since(start);
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  std::size_t bytes = 0;
  for (const CompilerHeader& h : r.compiler_headers) bytes += h.text.size();
  WARN("2,000 generated headers: " << r.dependencies.headers.size() << " read, " << bytes << " bytes, " << cpu_ms
                                   << " ms CPU, " << ms << " ms wall");
  CHECK(r.dependencies.headers.size() == kCount);
  std::vector<std::string> paths = read_paths(r);
  std::sort(paths.begin(), paths.end());
  CHECK(std::adjacent_find(paths.begin(), paths.end()) == paths.end());  // each file once
  CHECK(r.unresolved.empty());
  CHECK(r.dependencies.absent.empty());
  CHECK(cpu_ms < 1000.0);
}

TEST_CASE("an include folder that does not exist is an IncludeError naming it", "[include]") {
  TempDir dir;
  const std::string missing = dir.path().string() + "/no-such-folder";
  try {
    (void)resolve("int x;\n", {missing});
    FAIL("expected IncludeError");
  } catch (const IncludeError& e) {
    CHECK_THAT(e.what(), Catch::Contains(missing) && Catch::Contains("does not exist"));
  }
  const std::string file = write_file(dir.path(), "plain", "").string();
  CHECK_THROWS_WITH(resolve("int x;\n", {file}), Catch::Contains(file) && Catch::Contains("not a folder"));
}

TEST_CASE("header records: absolute normal path, fstat identity, digest, recent files not trusted", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  const std::string text = "#pragma once\nint fresh;\n";
  write_file(f, "sub/fresh.h", text);
  // A relative folder with ".." is made absolute and normal.
  const std::filesystem::path relative =
      std::filesystem::relative(dir.path() / "sub" / ".." / "sub", std::filesystem::current_path());
  const ResolvedIncludes r = resolve("#include \"fresh.h\"\n", {relative});
  REQUIRE(r.dependencies.headers.size() == 1);
  const auto& record = r.dependencies.headers[0];
  CHECK(record.path == f + "/sub/fresh.h");
  CHECK(record.digest == kiln::cache::hash128(text));
  struct stat st {};
  REQUIRE(::stat(record.path.c_str(), &st) == 0);
  CHECK(record.stat.size == text.size());
  CHECK(record.stat.inode == static_cast<std::uint64_t>(st.st_ino));
  CHECK(record.stat.device == static_cast<std::uint64_t>(st.st_dev));
  CHECK(record.stat.mtime_ns == st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec);
  CHECK_FALSE(record.trusted_stat);  // written just now: may still be being edited
  // A file untouched for long is trusted by its stat (any system header will do).
  if (std::filesystem::is_regular_file("/usr/include/stdio.h")) {
    const ResolvedIncludes old = resolve("#include <stdio.h>\n", {"/usr/include"});
    REQUIRE_FALSE(old.dependencies.headers.empty());
    CHECK(old.dependencies.headers[0].path == "/usr/include/stdio.h");
    CHECK(old.dependencies.headers[0].trusted_stat);
  }
}

TEST_CASE("absolute include paths, symlinks kept as spelled, FIFOs and folders are not headers", "[include]") {
  TempDir dir;
  const std::string a = dir.path().string() + "/a";
  const std::string b = dir.path().string() + "/b";
  write_file(a, "real/target.h", "int target;\n");
  std::filesystem::create_symlink(a + "/real/target.h", a + "/link.h");
  REQUIRE(::mkfifo((a + "/pipe.h").c_str(), 0644) == 0);
  std::filesystem::create_directories(a + "/folder.h");
  write_file(b, "pipe.h", "int pipe_b;\n");
  write_file(b, "folder.h", "int folder_b;\n");
  write_file(b, "abs.h", "int abs;\n");
  const std::string source =
      "#include <link.h>\n#include <pipe.h>\n#include <folder.h>\n#include \"" + b + "/./x/../abs.h\"\n";
  const ResolvedIncludes r = resolve(source, {a, b});
  CHECK(read_paths(r) == std::vector<std::string>{a + "/link.h", b + "/pipe.h", b + "/folder.h", b + "/abs.h"});
  CHECK(r.dependencies.absent == std::vector<std::string>{a + "/folder.h", a + "/pipe.h"});
  CHECK(r.compiler_source.find("#include \"" + b + "/abs.h\"\n") != std::string::npos);
}

TEST_CASE("memory headers: quoted includes relative to their name, their own disk includes rewritten", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "util.h", "int disk_util;\n");
  write_file(f, "extra.h", "int extra;\n");
  const std::vector<Header> memory = {{"kernels/util.h", "#include <extra.h>\nint memory_util;\n"}};
  const std::vector<MemoryHeader> views = memory_views(memory);
  IncludeInput input;
  input.source_name = "kernels/main.cu";
  const std::string source = "#include \"util.h\"\n";
  input.source_text = source;
  input.memory_headers = views;
  input.folders = {f};
  const ResolvedIncludes r = resolve_includes(input);
  CHECK(read_paths(r) == std::vector<std::string>{f + "/extra.h"});  // util.h is the memory one
  CHECK(r.compiler_source == source);
  const CompilerHeader* util = compiler_header(r, "kernels/util.h");
  REQUIRE(util != nullptr);
  CHECK(util->text == "#include \"" + f + "/extra.h\"\nint memory_util;\n");
}

TEST_CASE("HIPRTC names disk headers by their path without the leading '/'", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "h.h", "#include \"g.h\"\n");
  write_file(f, "g.h", "int g;\n");
  const ResolvedIncludes r = resolve("#include <h.h>\n", {f}, {}, kiln::Vendor::hip);
  const std::string h = f.substr(1) + "/h.h";
  CHECK(r.compiler_source == "#include \"" + h + "\"\n");
  REQUIRE(compiler_header(r, h) != nullptr);
  CHECK(compiler_header(r, h)->text == "#include \"" + f.substr(1) + "/g.h\"\n");
  CHECK(read_paths(r) == std::vector<std::string>{f + "/h.h", f + "/g.h"});  // records keep the real path
}

TEST_CASE("a memory header named like a disk header's compiler name is an IncludeError", "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "h.h", "int h;\n");
  const std::vector<Header> memory = {{f + "/h.h", "int clash;\n"}, {"other.h", "#include <h.h>\n"}};
  // The absolute include finds the memory header first; the folder search finds the file, whose
  // compiler name the memory header already has.
  CHECK_THROWS_WITH(resolve("#include \"" + f + "/h.h\"\n#include <other.h>\n", {f}, memory),
                    Catch::Contains("rename the in-memory header"));
}

TEST_CASE("toolkit include folders: CUDA lib64, lib, targets/<triple>/lib; HIP multiarch; clear errors", "[include]") {
  using kiln::cache::detail::toolkit_include_dirs;
  TempDir dir;
  const std::filesystem::path cuda = dir.path() / "cuda";
  write_file(cuda, "include/cuda_runtime.h", "");
  write_file(cuda, "include/cccl/cuda/std/tuple", "");
  write_file(cuda, "lib64/libnvrtc.so.13", "");
  write_file(cuda, "targets/x86_64-linux/lib/libnvrtc.so.13", "");
  const std::vector<std::filesystem::path> expected = {cuda / "include", cuda / "include/cccl"};
  CHECK(toolkit_include_dirs(cuda / "lib64/libnvrtc.so.13") == expected);
  CHECK(toolkit_include_dirs(cuda / "targets/x86_64-linux/lib/libnvrtc.so.13") == expected);
  const std::filesystem::path hip = dir.path() / "usr";
  write_file(hip, "include/hip/hip_runtime.h", "");
  write_file(hip, "lib/x86_64-linux-gnu/libamdhip64.so.5", "");
  write_file(hip, "lib/libhiprtc.so.6", "");
  CHECK(toolkit_include_dirs(hip / "lib/x86_64-linux-gnu/libamdhip64.so.5") ==
        std::vector<std::filesystem::path>{hip / "include"});
  CHECK(toolkit_include_dirs(hip / "lib/libhiprtc.so.6") == std::vector<std::filesystem::path>{hip / "include"});
  // A toolkit folder without the toolkit's headers names the folder it looked in.
  const std::filesystem::path bare = dir.path() / "bare";
  write_file(bare, "lib64/libnvrtc.so.13", "");
  CHECK_THROWS_WITH(toolkit_include_dirs(bare / "lib64/libnvrtc.so.13"),
                    Catch::Contains((bare / "include").string()) && Catch::Contains("cuda_runtime.h"));
  CHECK_THROWS_AS(toolkit_include_dirs(dir.path() / "libfoo.so"), IncludeError);
}

TEST_CASE("the header file cache: a file read once is not read again while its stat holds; an edit is seen",
          "[include]") {
  // Files written just now are never kept (their stat is not trusted yet): the first resolve of a fresh
  // tree reads everything, and so does the second.
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "lib/a.h", "#pragma once\n#include \"b.h\"\nint a;\n");
  write_file(f, "lib/b.h", "#pragma once\nint b;\n");
  kiln::cache::detail::HeaderFileCache cache;
  const std::string source = "#include <lib/a.h>\n#include <lib/missing.h>\n";
  IncludeInput input = cached_input(source, f, cache);
  const ResolvedIncludes fresh = resolve_includes(input);
  CHECK(read_paths(fresh) == std::vector<std::string>{f + "/lib/a.h", f + "/lib/b.h"});
  CHECK(cache.usage().files == 0);

  // Once the files are older than the trust window they are kept, and a later resolve takes them from
  // the cache: the same result, byte for byte, with no file read.
  std::this_thread::sleep_for(kiln::cache::kStatTrustWindow + std::chrono::milliseconds(200));
  const ResolvedIncludes first = resolve_includes(input);
  CHECK(cache.usage().files == 2);
  CHECK(cache.usage().hits == 0);
  const ResolvedIncludes second = resolve_includes(input);
  CHECK(cache.usage().hits == 2);
  CHECK(second.dependencies == first.dependencies);
  CHECK(second.compiler_source == first.compiler_source);
  REQUIRE(second.compiler_headers.size() == first.compiler_headers.size());
  for (std::size_t i = 0; i < first.compiler_headers.size(); ++i) {
    CHECK(second.compiler_headers[i].name == first.compiler_headers[i].name);
    CHECK(second.compiler_headers[i].text == first.compiler_headers[i].text);
  }
  CHECK(second.dependencies == resolve(source, {f}).dependencies);  // as without the cache
  // The rewritten texts are shared with the cached files, not built again.
  for (std::size_t i = 0; i < first.compiler_headers.size(); ++i) {
    CHECK(second.compiler_headers[i].storage == first.compiler_headers[i].storage);
    CHECK(second.compiler_headers[i].text.data() == second.compiler_headers[i].storage->data());
  }
  // Rewritten to other names (HIPRTC's: no leading '/'), a.h gets its own text; back with NVRTC's names,
  // the text is NVRTC's again, never the other's.
  input.traits = kiln::test::traits_of(kiln::Vendor::hip);
  const ResolvedIncludes hip = resolve_includes(input);
  const CompilerHeader* hip_a = compiler_header(hip, f.substr(1) + "/lib/a.h");
  REQUIRE(hip_a != nullptr);
  CHECK(hip_a->text == "#pragma once\n#include \"" + f.substr(1) + "/lib/b.h\"\nint a;\n");
  input.traits = kiln::test::traits_of(kiln::Vendor::cuda);
  const ResolvedIncludes again = resolve_includes(input);
  const CompilerHeader* cuda_a = compiler_header(again, f + "/lib/a.h");
  REQUIRE(cuda_a != nullptr);
  CHECK(cuda_a->text == "#pragma once\n#include \"" + f + "/lib/b.h\"\nint a;\n");
  CHECK(cuda_a->text == compiler_header(first, f + "/lib/a.h")->text);

  // An edit changes the file's stat: it is read again, and what it includes now is followed.
  const std::uint64_t hits_before = cache.usage().hits;
  write_file(f, "lib/b.h", "#pragma once\n#include \"c.h\"\nint b2;\n");
  write_file(f, "lib/c.h", "int c;\n");
  const ResolvedIncludes edited = resolve_includes(input);
  CHECK(read_paths(edited) == std::vector<std::string>{f + "/lib/a.h", f + "/lib/b.h", f + "/lib/c.h"});
  CHECK(edited.dependencies.headers[1].digest == kiln::cache::hash128(std::string("#pragma once\n#include \"c.h\"\nint b2;\n")));
  CHECK(cache.usage().hits == hits_before + 1);  // a.h alone came from the cache
  // A vanished header is absent again, not served from the cache.
  std::filesystem::remove(f + "/lib/a.h");
  const ResolvedIncludes vanished = resolve_includes(input);
  CHECK(vanished.dependencies.headers.empty());
  CHECK(has(vanished.dependencies.absent, f + "/lib/a.h"));
}

TEST_CASE("the stat memo: a burst of resolves stats each path once; what appears is seen once its time has passed",
          "[include]") {
  TempDir dir;
  const std::string f = dir.path().string();
  write_file(f, "lib/a.h", "#pragma once\n#include \"b.h\"\n#include <lib/later.h>\nint a;\n");
  write_file(f, "lib/b.h", "#pragma once\nint b;\n");
  kiln::cache::detail::HeaderFileCache cache;
  kiln::cache::ManifestConfig config;  // no root: memory-only, the memo works all the same
  config.stat_memo = std::chrono::seconds(30);
  const kiln::cache::DependencyManifests manifests(config);
  StatMemo& memo = ManifestsAccess::stat_memo(manifests);  // the one its lookups use
  const std::string source = "#include <lib/a.h>\n";
  IncludeInput input = cached_input(source, f, cache);
  input.stat_memo = &memo;
  input.trust_window = std::chrono::nanoseconds(0);  // files written just now are kept by the HeaderFileCache

  const ResolvedIncludes first = resolve_includes(input);
  CHECK(first.work.stats >= 3);  // a.h, b.h, the absent later.h
  CHECK(first.work.memo_hits == 0);
  CHECK(has(first.dependencies.absent, f + "/lib/later.h"));
  const ResolvedIncludes second = resolve_includes(input);
  CHECK(second.work.stats == 0);
  CHECK(second.work.memo_hits == first.work.stats);
  CHECK(second.dependencies == first.dependencies);
  // What a resolve found is there for the manifests' lookups too.
  const auto seen = memo.find(f + "/lib/later.h", kiln::cache::realtime_now_ns());
  REQUIRE(seen.has_value());
  CHECK_FALSE(seen->present);

  // A header appears at a probed place: within the memo's time this instance does not look again
  // (the memo's promise: an edit goes unseen at most that long) ...
  write_file(f, "lib/later.h", "int later;\n");
  CHECK(resolve_includes(input).dependencies == first.dependencies);
  // ... a resolve without the memo sees it at once ...
  input.stat_memo = nullptr;
  const ResolvedIncludes plain = resolve_includes(input);
  CHECK(read_paths(plain) == std::vector<std::string>{f + "/lib/a.h", f + "/lib/b.h", f + "/lib/later.h"});
  CHECK(plain.work.memo_hits == 0);
  // ... and so does one whose memo's time has passed since its stat.
  kiln::cache::ManifestConfig short_config;
  short_config.stat_memo = std::chrono::milliseconds(50);
  const kiln::cache::DependencyManifests short_manifests(short_config);
  input.stat_memo = &ManifestsAccess::stat_memo(short_manifests);
  std::filesystem::remove(f + "/lib/later.h");
  CHECK(has(resolve_includes(input).dependencies.absent, f + "/lib/later.h"));
  write_file(f, "lib/later.h", "int later;\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  const ResolvedIncludes expired = resolve_includes(input);
  CHECK(read_paths(expired) == read_paths(plain));
  CHECK(expired.work.memo_hits == 0);
  // A memo of zero time is never asked.
  kiln::cache::ManifestConfig off_config;
  off_config.stat_memo = std::chrono::nanoseconds(0);
  const kiln::cache::DependencyManifests off(off_config);
  input.stat_memo = &ManifestsAccess::stat_memo(off);
  (void)resolve_includes(input);
  CHECK(resolve_includes(input).work.memo_hits == 0);
}

TEST_CASE("one rule reads a header: digest, stat, and trust by the window given (the manifests')", "[include]") {
  using kiln::cache::detail::HeaderRead;
  using kiln::cache::detail::read_header_file;
  TempDir dir;
  const std::string f = dir.path().string();
  const std::string text = "#pragma once\nint a;\n";
  write_file(f, "lib/a.h", text);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the file's times lie before the reads' clock
  std::string bytes;
  const std::int64_t now = kiln::cache::realtime_now_ns();
  const HeaderRead fresh = read_header_file((f + "/lib/a.h").c_str(), bytes, 1024, now, kiln::cache::kStatTrustWindow);
  REQUIRE(fresh.status == HeaderRead::Status::ok);
  CHECK(bytes == text);
  CHECK(fresh.digest == kiln::cache::hash128(text));
  CHECK(fresh.stat.size == text.size());
  CHECK(fresh.steady);
  CHECK_FALSE(fresh.trusted);  // written within the window
  CHECK(read_header_file((f + "/lib/a.h").c_str(), bytes, 1024, now, std::chrono::nanoseconds(0)).trusted);
  CHECK(read_header_file((f + "/lib/a.h").c_str(), bytes, 4, now, std::chrono::nanoseconds(0)).status ==
        HeaderRead::Status::too_large);
  CHECK(read_header_file((f + "/lib").c_str(), bytes, 1024, now, std::chrono::nanoseconds(0)).status ==
        HeaderRead::Status::not_regular);
  const HeaderRead missing =
      read_header_file((f + "/lib/none.h").c_str(), bytes, 1024, now, std::chrono::nanoseconds(0));
  CHECK(missing.status == HeaderRead::Status::failed);
  CHECK(std::string_view(missing.what) == "open");
  CHECK(missing.error == ENOENT);

  // A resolve keeps a header in the HeaderFileCache only when it is trusted, by the window it is given.
  kiln::cache::detail::HeaderFileCache cache;
  const std::string source = "#include <lib/a.h>\n";
  IncludeInput input = cached_input(source, f, cache);
  (void)resolve_includes(input);  // the default window: written a moment ago, not kept
  CHECK(cache.usage().files == 0);
  input.trust_window = std::chrono::nanoseconds(0);
  (void)resolve_includes(input);
  CHECK(cache.usage().files == 1);
}

TEST_CASE("prelude_end: past the last include outside every group that follows code, or 0", "[include]") {
  using kiln::cache::detail::ScanResult;
  using kiln::cache::detail::scan_includes;
  const auto end_of = [](const std::string& text) {
    ScanResult found;
    scan_includes(text, found);
    return found.prelude_end;
  };
  // Includes that all come first: NVRTC's PCH covers them already.
  CHECK(end_of("#include <a.h>\n// c\n#include \"b.h\"\n#define X 1\nint x;\n") == 0);
  CHECK(end_of("int x;\n") == 0);
  // Code, then includes: up to and with the newline of the last one.
  const std::string scipy = "#include <a.h>\ntypedef float W;\n#include <b.h>  // why\n#include <c.h>\nint x;\n";
  CHECK(end_of(scipy) == scipy.find("int x;"));
  // Code inside a group the compiler may skip counts as code.
  const std::string grouped = "#if 0\nint y;\n#endif\n#include <a.h>\nint x;\n";
  CHECK(end_of(grouped) == grouped.find("int x;"));
  // An include inside a group is no cut; the one before the group is.
  const std::string nested = "int a;\n#include <a.h>\n#ifdef X\n#include <b.h>\n#endif\nint x;\n";
  CHECK(end_of(nested) == nested.find("#ifdef"));
  // Comments and strings are not code; a block comment that ends on a later line extends the include's line.
  CHECK(end_of("/* int a; */ // int b;\n#include <a.h>\nint x;\n") == 0);
  const std::string comment = "int a;\n#include <a.h> /* one\ntwo */\nint x;\n";
  CHECK(end_of(comment) == comment.find("int x;"));
  // A spliced include line ends at its last physical newline.
  const std::string spliced = "int a;\n#include \\\n<a.h>\nint x;\n";
  CHECK(end_of(spliced) == spliced.find("int x;"));
  // An include on the last line without a newline: no cut there (the one before stays).
  const std::string last = "int a;\n#include <a.h>\n#include <b.h>";
  CHECK(end_of(last) == last.find("#include <b.h>"));
  // Text that would mean another thing inside a header: no cut from there on.
  CHECK(end_of("int a;\n#line 40\n#include <a.h>\nint x;\n") == 0);
  CHECK(end_of("int a;\n#include_next <a.h>\n#include <b.h>\nint x;\n") == 0);
  CHECK(end_of("int a = __INCLUDE_LEVEL__;\n#include <a.h>\nint x;\n") == 0);
  const std::string before = "int a;\n#include <a.h>\n#line 40\n#include <b.h>\nint x;\n";
  CHECK(end_of(before) == before.find("#line"));
  // A computed include is no cut.
  CHECK(end_of("int a;\n#include HEADER\nint x;\n") == 0);
}
