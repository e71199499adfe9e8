// Lean header sets (includes/src/conditions.hpp, the lean walk in resolve.cpp): the compiler gets
// the headers a compile can read, not every branch's. What is proven: the evaluator's answers (known and
// unknown); the walk drops untaken includes (rewritten to untaken names), keeps every __has_include
// operand in taken and untaken branches, follows include guards; through the engine, the lean set gives
// the same binary as the full set (CCCL/libcu++ and CUB kernels, a hand-made tree) with fewer headers; a
// branch the walk judges wrongly costs one failed compile and a retry with every branch, once per prelude;
// a header missing indeed still gives the user's error; a header edited in a branch that was not taken
// and then becomes taken (by a -D change, by an edit of the macro's header) is never served stale;
// KILN_LEAN_HEADERS=0. Needs NVRTC (compile-only engines, sm_90); skips with the reason when absent.
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include <fmt/format.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "conditions.hpp"
#include "scan.hpp"
#include "include_test_support.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

using kiln::Engine;
using kiln::Origin;
using kiln::Source;
using kiln::Vendor;
using kiln::cache::detail::IncludeInput;
using kiln::cache::detail::MacroContext;
using kiln::cache::detail::MacroState;
using kiln::cache::detail::resolve_includes;
using kiln::cache::detail::ResolvedIncludes;
using kiln::cache::detail::Tri;
using kiln::test::compiler_header;
using kiln::test::has;
using kiln::test::read_paths;
using kiln::test::ScopedEnv;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

const std::vector<std::string> kFlags = {"-std=c++17", "-arch=sm_90", "-DKILN_WARP_SIZE=32"};

/// A compile-only engine over `root`, lean or not (KILN_LEAN_HEADERS is read when an engine is made).
std::unique_ptr<Engine> make_engine(const std::filesystem::path& root, bool lean) {
  const ScopedEnv env("KILN_LEAN_HEADERS", lean ? "1" : "0");
  const ScopedEnv pch("KILN_PCH", "0");
  kiln::EngineConfig config;
  config.runtime = false;
  config.cache.root = root;
  return std::make_unique<Engine>(config);
}

/// NVRTC 13 names internal-linkage entities `_INTERNAL_<8 hex>_<n>_<name>_<tag>_<pid>` with a tag drawn at
/// random in every compile: every `<tag>` is blanked so two compiles of one request compare equal
/// (bench/cold_bench does the same).
std::string blank_internal_tags(std::string bytes) {
  constexpr std::string_view kMark = "_INTERNAL_";
  const auto hex_at = [&](std::size_t at) {
    return at + 8 <= bytes.size() && bytes.find_first_not_of("0123456789abcdefABCDEF", at) >= at + 8;
  };
  std::vector<std::string> needles;
  for (std::size_t at = bytes.find(kMark); at != std::string::npos; at = bytes.find(kMark, at + 1)) {
    std::size_t p = at + kMark.size();
    if (!hex_at(p) || p + 8 >= bytes.size() || bytes[p + 8] != '_') continue;
    p += 9;
    std::size_t length = 0, digits = 0;
    for (; p < bytes.size() && digits < 6 && std::isdigit(static_cast<unsigned char>(bytes[p])) != 0; ++p, ++digits) {
      length = length * 10 + static_cast<std::size_t>(bytes[p] - '0');
    }
    if (digits == 0 || p >= bytes.size() || bytes[p] != '_') continue;
    p += 1 + length;
    if (p >= bytes.size() || bytes[p] != '_' || !hex_at(p + 1)) continue;
    std::string needle = bytes.substr(p + 1, 8);
    if (std::find(needles.begin(), needles.end(), needle) == needles.end()) needles.push_back(std::move(needle));
  }
  for (const std::string& needle : needles) {
    for (std::size_t at = bytes.find(needle); at != std::string::npos; at = bytes.find(needle, at + needle.size())) {
      bytes.replace(at, needle.size(), needle.size(), '0');
    }
  }
  return bytes;
}

std::string bytes_of(const kiln::CompiledBinary& binary) {
  return {reinterpret_cast<const char*>(binary.bytes().data()), binary.bytes().size()};
}

bool contains(const kiln::CompiledBinary& binary, std::string_view text) {
  return bytes_of(binary).find(text) != std::string::npos;
}

Tri eval(const MacroState& state, std::string_view expression) { return state.evaluate(expression); }

ResolvedIncludes resolve(const std::string& name, const std::string& text, const std::filesystem::path& folder,
                         bool lean, const std::vector<std::string>& flags = kFlags) {
  const MacroContext macros = MacroContext::from_flags(flags, kiln::test::traits_of(Vendor::cuda), "nvrtc 13.0");
  IncludeInput input;
  input.source_name = name;
  input.source_text = text;
  input.folders = {folder};
  input.traits = kiln::test::traits_of(Vendor::cuda);
  input.lean = lean;
  input.macros = &macros;
  return resolve_includes(input);
}

}  // namespace

TEST_CASE("the evaluator: what it knows, and what it leaves unknown", "[include][lean]") {
  const MacroContext context =
      MacroContext::from_flags(std::vector<std::string>{"-std=c++20", "-arch=sm_80", "-DGIVEN=3", "-UGONE", "-DFLAG"},
                               kiln::test::traits_of(Vendor::cuda), "nvrtc 13.0");
  MacroState state(context);
  state.define("ONE", "1", false, true);
  state.define("TWICE", "(x) ((x) * 2)", true, true);
  state.define("CAT", "(a, b) a##b", true, true);
  state.define("VERSION", "(...) VERSION_##__VA_ARGS__()", true, true);
  state.define("VERSION_NVRTC", "() (13, 0)", true, true);
  state.define("PICK_FIRST", "(a, ...) a", true, true);
  state.define("MAJOR", "(pair) PICK_FIRST pair", true, true);
  state.define("MAYBE", "1", false, /*certain=*/false);
  state.define("FN", "(x) x", true, true);

  // Integer arithmetic, comparisons, logic, the conditional operator, object-like expansion.
  CHECK(eval(state, "ONE + 2 * 3 == 7") == Tri::yes);
  CHECK(eval(state, "(ONE << 4) >= 16 && !(5 % 3 != 2)") == Tri::yes);
  CHECK(eval(state, "-1 < 0u") == Tri::no);  // unsigned comparison
  CHECK(eval(state, "0x10 == 16 && 010 == 8 && 0b11 == 3 && 1'000 == 1000") == Tri::yes);
  CHECK(eval(state, "ONE ? 2 : 0") == Tri::yes);
  CHECK(eval(state, "GIVEN == 3 && defined(FLAG) && FLAG == 1 && !defined GONE") == Tri::yes);
  CHECK(eval(state, "true && !false") == Tri::yes);
  // Function-like macros, ## and __VA_ARGS__ (CCCL's compiler checks are written this way).
  CHECK(eval(state, "TWICE(ONE + 1) == 4") == Tri::yes);
  CHECK(eval(state, "CAT(O, NE) == 1") == Tri::yes);
  CHECK(eval(state, "PICK_FIRST(7, 8, 9) == 7") == Tri::yes);
  CHECK(eval(state, "MAJOR(VERSION(NVRTC)) == 13") == Tri::yes);
  CHECK(eval(state, "PICK_FIRST VERSION(NVRTC) == 13") == Tri::unknown);  // not a call: the name came first
  // NVRTC's predefined macros for this target, standard and version.
  CHECK(eval(state, "__CUDA_ARCH__ == 800 && __cplusplus == 202002L") == Tri::yes);
  CHECK(eval(state, "__cpp_concepts >= 201907L && !defined(__cpp_explicit_this_parameter)") == Tri::yes);
  CHECK(eval(state, "defined(__CUDA_ARCH_FEAT_SM80_ALL) || defined(__CUDA_ARCH_SPECIFIC__)") == Tri::no);
  CHECK(eval(state, "defined(__CUDACC_RTC__) && defined(__CUDACC__) && __CUDACC_VER_MAJOR__ == 13") == Tri::yes);
  CHECK(eval(state, "defined(_MSC_VER) || defined(__clang__) || defined(__GNUC__) || defined(__NVCC__)") == Tri::no);
  // An ordinary name nothing defined is 0; a name a compiler may predefine is unknown.
  CHECK(eval(state, "NEVER_DEFINED") == Tri::no);
  CHECK(eval(state, "defined(NEVER_DEFINED)") == Tri::no);
  CHECK(eval(state, "defined(__SOMETHING_PREDEFINED__)") == Tri::unknown);
  CHECK(eval(state, "__CUDACC_VER_BUILD__ > 0") == Tri::unknown);
  CHECK(eval(state, "defined(_CCCL_LIBRARY_OWN_NAME)") == Tri::no);  // a library's own reserved name
  // Unknown: a definition in a branch that may not be taken, __has_include and its kind, a call of a
  // macro whose replacement is not known, character literals, malformed expressions.
  CHECK(eval(state, "MAYBE") == Tri::unknown);
  CHECK(eval(state, "defined(MAYBE)") == Tri::unknown);
  CHECK(eval(state, "__has_include(<x.h>)") == Tri::unknown);
  CHECK(eval(state, "__has_builtin(__builtin_expect)") == Tri::unknown);
  CHECK(eval(state, "UNKNOWN_FN(1)") == Tri::unknown);
  CHECK(eval(state, "'a' == 97") == Tri::unknown);
  CHECK(eval(state, "1 +") == Tri::unknown);
  CHECK(eval(state, "1 / 0") == Tri::unknown);
  // Short-circuits make an unknown operand irrelevant.
  CHECK(eval(state, "0 && __has_include(<x.h>)") == Tri::no);
  CHECK(eval(state, "1 || MAYBE") == Tri::yes);
  CHECK(eval(state, "NEVER_DEFINED ? MAYBE : 5") == Tri::yes);
  // #undef, certain and not.
  state.undefine("ONE", true);
  CHECK(eval(state, "defined(ONE)") == Tri::no);
  state.undefine("GIVEN", false);
  CHECK(eval(state, "defined(GIVEN)") == Tri::unknown);
  // A flag that may define macros kiln does not read: no ordinary name is known undefined.
  const MacroContext opaque =
      MacroContext::from_flags(std::vector<std::string>{"-D", "X"}, kiln::test::traits_of(Vendor::cuda));
  CHECK(MacroState(opaque).evaluate("defined(NEVER_DEFINED)") == Tri::unknown);
}

TEST_CASE("the evaluator after a macro changes: never the old value (its tokens are kept per value)", "[include][lean]") {
  const MacroContext context = MacroContext::from_flags(std::vector<std::string>{"-std=c++17", "-arch=sm_90"},
                                                        kiln::test::traits_of(Vendor::cuda), "nvrtc 13.0");
  MacroState state(context);
  state.define("X", "1", false, true);
  state.define("FN", "(a) a + 1", true, true);
  CHECK(eval(state, "X == 1 && FN(X) == 2") == Tri::yes);  // X's and FN's tokens made here
  state.define("X", "2", false, true);
  CHECK(eval(state, "X == 1") == Tri::no);
  CHECK(eval(state, "X == 2 && FN(X) == 3") == Tri::yes);
  state.define("FN", "(a) a * 10", true, true);
  CHECK(eval(state, "FN(X) == 20") == Tri::yes);
  state.define("X", "(", false, true);  // what the evaluator does not lex as a value: unknown, then known again
  CHECK(eval(state, "X == 2") == Tri::unknown);
  state.define("X", "3", false, true);
  CHECK(eval(state, "X == 3") == Tri::yes);
  state.undefine("X", true);
  CHECK(eval(state, "defined(X) || X") == Tri::no);
  state.define("X", "4", false, /*certain=*/false);
  CHECK(eval(state, "X == 4") == Tri::unknown);
  // An expansion far larger than the evaluator's scratch memory (A11: 2048 ones, 4095 expansions).
  state.define("A0", "1", false, true);
  for (int i = 1; i <= 11; ++i) state.define(fmt::format("A{}", i), fmt::format("A{0} + A{0}", i - 1), false, true);
  CHECK(eval(state, "A11 == 2048") == Tri::yes);
  CHECK(eval(state, "A10 == 1024") == Tri::yes);
}

TEST_CASE("the scan marks conditional groups that change nothing; the walk passes over them", "[include][lean]") {
  const std::string text =
      "#if A\n"          // 0: holds a #define (3)
      "#  if B\n"        // 1: code only: inert until 2
      "int x;\n"
      "#  endif\n"       // 2
      "#  define C 1\n"  // 3
      "#endif\n"         // 4
      "#ifdef D\n"       // 5: branches without effects: inert until 7
      "#else\n"          // 6
      "#endif\n"         // 7
      "#ifndef E\n"      // 8: an include
      "#include \"e.h\"\n"
      "#endif\n"         // 10
      "#if F\n"          // 11: a nested group with an include
      "#if G\n"          // 12
      "#include \"g.h\"\n"
      "#endif\n"         // 14
      "#endif\n"         // 15
      "#if H\n"          // 16: no #endif: never inert
      "#undef C\n";       // 17
  kiln::cache::detail::ScanResult scan;
  kiln::cache::detail::scan_includes(text, scan);
  REQUIRE(scan.directives.size() == 18);
  const std::vector<std::uint32_t> expected = {0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(scan.inert_until == expected);

  // A walk that passes over an inert group whose condition it could not evaluate, and one that cannot
  // pass over it (an include inside), take the same includes around it.
  TempDir dir("kiln-lean-inert");
  const std::filesystem::path inc = dir.path() / "inc";
  for (const char* name : {"a.h", "b.h", "c.h"}) write_file(inc, name, fmt::format("// {}\n", name));
  const ResolvedIncludes inert = resolve(
      "inert.cu", "#include <a.h>\n#if __has_builtin(__x)\nint y;\n#else\nint z;\n#endif\n#include <b.h>\n", inc, true);
  CHECK(inert.lean);
  CHECK(inert.untaken == 0);
  CHECK(read_paths(inert) == std::vector<std::string>{(inc / "a.h").string(), (inc / "b.h").string()});
  const ResolvedIncludes both = resolve(
      "both.cu", "#include <a.h>\n#if __has_builtin(__x)\n#include <c.h>\n#endif\n#include <b.h>\n", inc, true);
  CHECK(has(read_paths(both), (inc / "c.h").string()));  // unknown: taken as maybe
}

TEST_CASE("the lean walk: untaken includes dropped and renamed, __has_include kept, include guards",
          "[include][lean]") {
  TempDir dir("kiln-lean-walk");
  const std::filesystem::path inc = dir.path() / "inc";
  write_file(inc, "mode.h", "#pragma once\n#define USE_B 1\n");
  write_file(inc, "lib.h",
             "#ifndef LIB_H\n#define LIB_H\n#include \"mode.h\"\n"
             "#if USE_B\n#  include \"b.h\"\n#else\n#  include \"c.h\"\n#endif\n"
             "#if defined(FOO) && FOO > 2\n#include \"foo.h\"\n#endif\n"
             "#if 0\n#  if __has_include(\"probe_untaken.h\")\n#  endif\n#  include \"never.h\"\n#endif\n"
             "#if __has_include(\"probe_taken.h\")\n#  include \"probe_taken.h\"\n#endif\n"
             "#ifdef _MSC_VER\n#  include \"msvc.h\"\n#endif\n"
             "#endif\n");
  write_file(inc, "guarded.h", "#ifndef GUARDED_H\n#define GUARDED_H\n#include \"b.h\"\n#endif\n");
  for (const char* name : {"b.h", "c.h", "foo.h", "never.h", "probe_untaken.h", "probe_taken.h", "msvc.h"}) {
    write_file(inc, name, fmt::format("// {}\n", name));
  }
  const std::string source = "#include <lib.h>\n#include <lib.h>\n#include <guarded.h>\n#include <guarded.h>\n";
  const auto path = [&](const char* name) { return (inc / name).string(); };

  const ResolvedIncludes lean = resolve("walk.cu", source, inc, true);
  CHECK(lean.lean);
  const std::vector<std::string> read = read_paths(lean);
  for (const char* name : {"lib.h", "mode.h", "b.h", "probe_untaken.h", "probe_taken.h", "guarded.h"}) {
    CHECK(has(read, path(name)));
  }
  for (const char* name : {"c.h", "foo.h", "never.h", "msvc.h"}) CHECK_FALSE(has(read, path(name)));
  CHECK(lean.untaken == 4);
  const auto* lib = compiler_header(lean, path("lib.h"));
  REQUIRE(lib != nullptr);
  CHECK(lib->text.find("#  include \"kiln-untaken/c.h\"") != std::string_view::npos);
  CHECK(lib->text.find("#include \"kiln-untaken/foo.h\"") != std::string_view::npos);
  CHECK(lib->text.find(fmt::format("__has_include(\"{}\")", path("probe_untaken.h"))) != std::string_view::npos);
  CHECK(lib->text.find(fmt::format("#  include \"{}\"", path("b.h"))) != std::string_view::npos);
  // Lines keep their numbers.
  CHECK(kiln::test::line_count(lib->text) == 23);

  // -DFOO=3 takes the FOO branch; the full resolve takes every branch.
  const std::vector<std::string> foo_flags = {"-std=c++17", "-arch=sm_90", "-DFOO=3"};
  CHECK(has(read_paths(resolve("walk.cu", source, inc, true, foo_flags)), path("foo.h")));
  const ResolvedIncludes full = resolve("walk.cu", source, inc, false);
  CHECK_FALSE(full.lean);
  CHECK(full.untaken == 0);
  for (const char* name : {"c.h", "foo.h", "never.h", "msvc.h"}) CHECK(has(read_paths(full), path(name)));
  CHECK(lean.dependencies.headers.size() + 4 == full.dependencies.headers.size());

  // An #undef of the guard lets the compiler enter the file again: the walk does too.
  write_file(inc, "again.h", "#ifndef AGAIN_H\n#define AGAIN_H\n#ifdef SECOND\n#include \"foo.h\"\n#endif\n#endif\n");
  const ResolvedIncludes again =
      resolve("again.cu", "#include <again.h>\n#undef AGAIN_H\n#define SECOND\n#include <again.h>\n", inc, true);
  CHECK(has(read_paths(again), path("foo.h")));
  const ResolvedIncludes once =
      resolve("once.cu", "#include <again.h>\n#define SECOND\n#include <again.h>\n", inc, true);
  CHECK_FALSE(has(read_paths(once), path("foo.h")));  // the guard is defined: the second include adds nothing
}

TEST_CASE("the lean set compiles to the same binary as the full set, with fewer headers", "[include][lean]") {
  TempDir dir("kiln-lean-same");
  const std::filesystem::path inc = dir.path() / "inc";
  write_file(inc, "tree/config.h",
             "#pragma once\n#define TREE_MODE 2\n#define TREE_HAS(x) ((x) < TREE_MODE)\n");
  write_file(inc, "tree/all.h",
             "#pragma once\n#include \"config.h\"\n#if TREE_HAS(1)\n#include \"one.h\"\n#endif\n"
             "#if TREE_HAS(5)\n#include \"five.h\"\n#elif __has_include(<tree/probe.h>)\n#define PROBED 1\n#else\n"
             "#define PROBED 0\n#endif\n#ifdef _WIN32\n#include <windows.h>\n#endif\n");
  write_file(inc, "tree/one.h", "#pragma once\n__device__ inline int one() { return 1; }\n");
  write_file(inc, "tree/five.h", "#error five is not for this compile\n");
  write_file(inc, "tree/probe.h", "// probed only\n");
  struct Kernel {
    std::string name, text;
    std::vector<std::string> options;
  };
  const std::string cub_prelude = "#include <cub/block/block_reduce.cuh>\n#include <cub/block/block_scan.cuh>\n";
  const std::string std_prelude =
      "#include <cuda/std/type_traits>\n#include <cuda/std/cmath>\n#include <cuda/std/complex>\n";
  const std::vector<Kernel> kernels = {
      {"tree.cu",
       "#include <tree/all.h>\nextern \"C\" __global__ void tree_k(int* o) { *o = one() + PROBED; }\n",
       {"-I" + inc.string()}},
      {"std_a.cu",
       std_prelude + "extern \"C\" __global__ void std_a(float* o, const float* a) { o[0] = cuda::std::sqrt(a[0]); }\n",
       {"--toolkit-includes"}},
      {"std_b.cu",
       std_prelude + "extern \"C\" __global__ void std_b(double* o, const double* a) { "
                     "o[0] = cuda::std::abs(cuda::std::complex<double>(a[0], a[1])); }\n",
       {"--toolkit-includes", "-std=c++20"}},
      {"cub_a.cu",
       cub_prelude + "extern \"C\" __global__ void cub_a(const float* in, float* out) { using R = "
                     "cub::BlockReduce<float, 128>; __shared__ R::TempStorage s; float t = R(s).Sum(in[threadIdx.x]); "
                     "if (threadIdx.x == 0) *out = t; }\n",
       {"--toolkit-includes"}},
      {"cub_b.cu",
       cub_prelude + "extern \"C\" __global__ void cub_b(int* io) { using S = cub::BlockScan<int, 64>; "
                     "__shared__ S::TempStorage s; int v = io[threadIdx.x]; S(s).ExclusiveSum(v, v); "
                     "io[threadIdx.x] = v; }\n",
       {"--toolkit-includes", "-DNDEBUG"}},
  };
  const auto lean = make_engine(dir.path() / "lean-cache", true);
  const auto full = make_engine(dir.path() / "full-cache", false);
  for (const Kernel& k : kernels) {
    INFO(k.name);
    const Source source = Source::from_text(k.name, k.text);
    const kiln::Options options(k.options);
    const kiln::CompiledBinary a = lean->compile(source, options, {}, "sm_90");
    const kiln::CompiledBinary b = full->compile(source, options, {}, "sm_90");
    CHECK(a.origin() == Origin::compiled);
    CHECK(b.origin() == Origin::compiled);
    CHECK(blank_internal_tags(bytes_of(a)) == blank_internal_tags(bytes_of(b)));
    kiln::cache::DependencySet lean_set, full_set;
    (void)lean->describe_key(source, options, {}, "sm_90", &lean_set);
    (void)full->describe_key(source, options, {}, "sm_90", &full_set);
    CHECK(lean_set.headers.size() < full_set.headers.size());
    CHECK(lean_set.headers.size() > 0);
  }
  // No compile failed: the walk judged every branch these kernels take.
  CHECK(lean->stats().compile_failures == 0);
  CHECK(lean->stats().compiles == kernels.size());

  // HIPRTC (gfx90a), where present: the same tree, the same binary both ways.
  const Source tree = Source::from_text(kernels[0].name, kernels[0].text);
  const kiln::Options tree_options(kernels[0].options);
  kiln::CompiledBinary hip_lean;
  try {
    hip_lean = lean->compile(tree, tree_options, {}, "gfx90a");
  } catch (const kiln::Error& e) {
    WARN("HIPRTC is not available here: the gfx90a half is skipped (" << e.what() << ")");
    return;
  }
  const kiln::CompiledBinary hip_full = full->compile(tree, tree_options, {}, "gfx90a");
  CHECK(bytes_of(hip_lean) == bytes_of(hip_full));
  CHECK(lean->stats().compile_failures == 0);
}

TEST_CASE("a branch the walk judges wrongly costs one retry with every branch, once per prelude; a missing header "
          "still gives the user's error",
          "[include][lean]") {
  TempDir dir("kiln-lean-retry");
  const std::filesystem::path inc = dir.path() / "inc";
  // The walk first enters h.h where it cannot tell whether the compiler does (NVRTC defines
  // __CUDACC_VER_BUILD__; the walk does not know it), with MODE undefined: it takes x.h. The second include
  // of h.h it skips (the guard may be defined), but the compiler enters h.h only there, with MODE 1, and
  // takes y.h: an include the walk left behind.
  write_file(inc, "h.h",
             "#ifndef H_H\n#define H_H\n#if MODE\n#include \"y.h\"\n#else\n#include \"x.h\"\n#endif\n#endif\n");
  write_file(inc, "x.h", "#define PICKED picked_x\n");
  write_file(inc, "y.h", "#define PICKED picked_y\n");
  const std::string prelude =
      "#if !defined(__CUDACC_VER_BUILD__)\n#include <h.h>\n#endif\n#define MODE 1\n"
      "#if defined(__CUDACC_VER_BUILD__)\n#include <h.h>\n#endif\n";
  const kiln::Options options({"-I" + inc.string()});
  const auto engine = make_engine(dir.path() / "cache", true);
  const kiln::CompiledBinary first = engine->compile(
      Source::from_text("wrong1.cu", prelude + "extern \"C\" __global__ void PICKED(int* o) { *o = 1; }\n"), options,
      {}, "sm_90");
  CHECK(contains(first, "picked_y"));
  CHECK(engine->stats().compile_failures == 1);  // the lean set's compile, asking for kiln-untaken/y.h
  CHECK(engine->stats().compiles == 1);          // the retry with every branch
  // The next kernel after the same prelude goes to the full set at once: no failed compile.
  const kiln::CompiledBinary second = engine->compile(
      Source::from_text("wrong2.cu", prelude + "extern \"C\" __global__ void PICKED(int* o) { *o = 2; }\n"), options,
      {}, "sm_90");
  CHECK(contains(second, "picked_y"));
  CHECK(engine->stats().compile_failures == 1);
  CHECK(engine->stats().compiles == 2);
  // The same binary as a full engine's.
  const auto full = make_engine(dir.path() / "full-cache", false);
  const kiln::CompiledBinary reference = full->compile(
      Source::from_text("wrong1.cu", prelude + "extern \"C\" __global__ void PICKED(int* o) { *o = 1; }\n"), options,
      {}, "sm_90");
  CHECK(blank_internal_tags(bytes_of(first)) == blank_internal_tags(bytes_of(reference)));
  CHECK(full->stats().compile_failures == 0);

  // A header missing from every folder: the lean compile fails on it, and no folder has it for a retry
  // either: the user's error at once, naming the header the user wrote (never an untaken name).
  const auto user = make_engine(dir.path() / "user-cache", true);
  try {
    (void)user->compile(Source::from_text("missing.cu", "#include <h.h>\n#include <not_there.h>\n"
                                                        "extern \"C\" __global__ void k(int* o) { *o = 1; }\n"),
                        options, {}, "sm_90");
    FAIL("a missing header compiled");
  } catch (const kiln::CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("not_there.h") != std::string::npos);
    CHECK(what.find("kiln-untaken") == std::string::npos);
  }
  CHECK(user->stats().compile_failures == 1);
  CHECK(user->stats().compiles == 0);
  // A missing header the walk left behind (it judged the branch untaken): one retry with every branch,
  // which fails on the header the user wrote: two compiler runs, the user's error.
  try {
    (void)user->compile(Source::from_text("missing2.cu", prelude + "#if MODE\n#include <not_there.h>\n#endif\n"
                                                         "extern \"C\" __global__ void k(int* o) { *o = 1; }\n"),
                        options, {}, "sm_90");
    FAIL("a missing header compiled");
  } catch (const kiln::CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("not_there.h") != std::string::npos);
    CHECK(what.find("kiln-untaken") == std::string::npos);
  }
  CHECK(user->stats().compile_failures == 3);
  CHECK(user->stats().compiles == 0);

  // HIPRTC, where present: clang's words for the untaken name are recognised the same way (the walk has
  // no list of HIPRTC's predefined macros: __HIPCC__ is unknown to it, defined for the compiler).
  const std::string hip_prelude =
      "#if !defined(__HIPCC__)\n#include <h.h>\n#endif\n#define MODE 1\n#if defined(__HIPCC__)\n#include <h.h>\n#endif\n";
  const auto hip = make_engine(dir.path() / "hip-cache", true);
  kiln::CompiledBinary hip_binary;
  try {
    hip_binary = hip->compile(
        Source::from_text("wrong_hip.cu", hip_prelude + "extern \"C\" __global__ void PICKED(int* o) { *o = 1; }\n"),
        options, {}, "gfx90a");
  } catch (const kiln::CompileError&) {
    throw;
  } catch (const kiln::Error& e) {
    WARN("HIPRTC is not available here: the gfx90a half is skipped (" << e.what() << ")");
    return;
  }
  CHECK(contains(hip_binary, "picked_y"));
  CHECK(hip->stats().compile_failures == 1);
  CHECK(hip->stats().compiles == 1);
}

TEST_CASE("a header edited in an untaken branch that becomes taken is never served stale", "[include][lean]") {
  TempDir dir("kiln-lean-stale");
  const std::filesystem::path inc = dir.path() / "inc";
  const std::filesystem::path root = dir.path() / "cache";
  write_file(inc, "mode.h", "#pragma once\n#define MODE 1\n");
  write_file(inc, "cfg.h",
             "#pragma once\n#include \"mode.h\"\n#if MODE == 2\n#include \"two.h\"\n#else\n#include \"one.h\"\n#endif\n");
  write_file(inc, "one.h", "#define KNAME k_one\n");
  write_file(inc, "two.h", "#define KNAME k_two\n");
  const Source source =
      Source::from_text("stale.cu", "#include <cfg.h>\nextern \"C\" __global__ void KNAME(int* o) { *o = 1; }\n");
  const kiln::Options plain({"-I" + inc.string()});
  const kiln::Options mode2({"-I" + inc.string(), "-DMODE_OVERRIDE"});

  {
    const auto engine = make_engine(root, true);
    const kiln::CompiledBinary b = engine->compile(source, plain, {}, "sm_90");
    CHECK(b.origin() == Origin::compiled);
    CHECK(contains(b, "k_one"));
    kiln::cache::DependencySet set;
    (void)engine->describe_key(source, plain, {}, "sm_90", &set);
    const bool two_in_set = std::any_of(set.headers.begin(), set.headers.end(),
                                        [&](const auto& h) { return h.path == (inc / "two.h").string(); });
    CHECK_FALSE(two_in_set);  // the untaken branch's header is not in the key
  }
  // An edit of the untaken branch's header: not in the set, so a later process is served by stat, rightly.
  write_file(inc, "two.h", "#define KNAME k_two_edited\n");
  {
    const auto engine = make_engine(root, true);
    const kiln::CompiledBinary b = engine->compile(source, plain, {}, "sm_90");
    CHECK(b.origin() == Origin::disk);
    CHECK(engine->stats().manifest_hits == 1);
    CHECK(contains(b, "k_one"));
  }
  // The branch becomes taken by a -D: another request key, the edited header compiled.
  write_file(inc, "cfg2.h",
             "#pragma once\n#include \"mode.h\"\n#if MODE == 2 || defined(MODE_OVERRIDE)\n#include \"two.h\"\n#else\n"
             "#include \"one.h\"\n#endif\n");
  const Source source2 =
      Source::from_text("stale2.cu", "#include <cfg2.h>\nextern \"C\" __global__ void KNAME(int* o) { *o = 1; }\n");
  {
    const auto engine = make_engine(root, true);
    const kiln::CompiledBinary a = engine->compile(source2, plain, {}, "sm_90");
    CHECK(contains(a, "k_one"));
    const kiln::CompiledBinary b = engine->compile(source2, mode2, {}, "sm_90");
    CHECK(b.origin() == Origin::compiled);
    CHECK(contains(b, "k_two_edited"));
  }
  // The branch becomes taken by an edit of the macro's header (in the set): the manifest no longer
  // matches, the walk takes two.h, its edited text is compiled.
  write_file(inc, "mode.h", "#pragma once\n#define MODE 2\n");
  {
    const auto engine = make_engine(root, true);
    const kiln::CompiledBinary b = engine->compile(source, plain, {}, "sm_90");
    CHECK(b.origin() == Origin::compiled);
    CHECK(engine->stats().manifest_hits == 0);
    CHECK(contains(b, "k_two_edited"));
    CHECK_FALSE(contains(b, "k_one"));
  }
  // And back: the first binary again, from the cache (its set matches the tree again).
  write_file(inc, "mode.h", "#pragma once\n#define MODE 1\n");
  {
    const auto engine = make_engine(root, true);
    const kiln::CompiledBinary b = engine->compile(source, plain, {}, "sm_90");
    CHECK(contains(b, "k_one"));
    CHECK_FALSE(contains(b, "k_two"));
  }
}

TEST_CASE("KILN_LEAN_HEADERS=0 hands every branch's headers", "[include][lean]") {
  TempDir dir("kiln-lean-off");
  const std::filesystem::path inc = dir.path() / "inc";
  write_file(inc, "a.h", "#if 0\n#include \"b.h\"\n#endif\n#define A 1\n");
  write_file(inc, "b.h", "#define B 1\n");
  const Source source = Source::from_text("off.cu", "#include <a.h>\nextern \"C\" __global__ void k(int* o) { *o = A; }\n");
  const kiln::Options options({"-I" + inc.string()});
  kiln::cache::DependencySet on_set, off_set;
  (void)make_engine(dir.path() / "on", true)->describe_key(source, options, {}, "sm_90", &on_set);
  (void)make_engine(dir.path() / "off", false)->describe_key(source, options, {}, "sm_90", &off_set);
  CHECK(on_set.headers.size() == 1);
  CHECK(off_set.headers.size() == 2);
}

int main(int argc, char** argv) {
  try {
    const TempDir dir("kiln-lean-probe");
    const auto engine = make_engine(dir.path(), true);
    (void)engine->compile(Source::from_text("probe.cu", "extern \"C\" __global__ void k() {}\n"), {}, {}, "sm_90");
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no compile-only engine: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
