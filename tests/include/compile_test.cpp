// The include resolver on the toolkit's real header trees, and the proof that what it hands over
// compiles: the rewritten source and the in-memory headers alone (no include folder is given to the
// compiler) go through kiln's public API, Source::from_text + Engine::prewarm on a compile-only
// engine: CUB and libcu++ kernels with NVRTC for sm_90, a small -I tree with NVRTC and HIPRTC
// (gfx90a). Also the compilers' real wording for a missing header, and the retry of a computed include.
// Needs NVRTC; skips with the reason when it is absent (the HIPRTC cases skip on their own).
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "conditions.hpp"
#include "include_test_support.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

using kiln::Engine;
using kiln::Header;
using kiln::Source;
using kiln::Vendor;
using kiln::cache::detail::CompilerHeader;
using kiln::cache::detail::IncludeInput;
using kiln::cache::detail::missing_include_from_log;
using kiln::cache::detail::resolve_includes;
using kiln::cache::detail::ResolvedIncludes;
using kiln::test::ms_since;
using kiln::test::TempDir;
using kiln::test::write_file;

namespace {

Engine& compile_engine() {
  static TempDir cache("kiln-include-cache");
  static const std::unique_ptr<Engine> engine = [] {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = cache.path();
    return std::make_unique<Engine>(config);
  }();
  return *engine;
}

/// The path of the compiler library the engine loaded for a vendor ("" when it loaded none).
std::string compiler_library(Vendor vendor) {
  for (const kiln::LaneInfo& lane : compile_engine().lanes()) {
    if (lane.vendor != vendor || !lane.compiler_loaded) continue;
    for (const kiln::LibraryInfo& library : lane.libraries) {
      if (library.role == "nvrtc" || library.role == "hiprtc") return library.path;
    }
  }
  return {};
}

struct Timed {
  ResolvedIncludes resolved;
  double ms = 0;
  std::size_t bytes = 0;  ///< of the headers handed to the compiler
};

Timed resolve_timed(const std::string& name, std::string_view text, std::vector<std::filesystem::path> folders,
                    Vendor vendor, std::vector<std::string> retry_names = {}) {
  IncludeInput input;
  input.source_name = name;
  input.source_text = text;
  input.folders = std::move(folders);
  input.traits = kiln::test::traits_of(vendor);
  input.retry_names = std::move(retry_names);
  Timed out;
  const auto start = std::chrono::steady_clock::now();
  out.resolved = resolve_includes(input);
  out.ms = ms_since(start);
  for (const CompilerHeader& h : out.resolved.compiler_headers) out.bytes += h.text.size();
  return out;
}

/// Compiles the resolved set through the public API; returns the compile time in ms.
double compile(const std::string& name, const ResolvedIncludes& r, const std::vector<std::string>& kernels,
               const std::string& target) {
  std::vector<Header> headers;
  for (const CompilerHeader& h : r.compiler_headers) headers.push_back({h.name, std::string(h.text)});
  const Source source = Source::from_text(name, r.compiler_source, headers);
  const auto start = std::chrono::steady_clock::now();
  const kiln::PrewarmResult result = compile_engine().prewarm(source, kiln::Options{}, kernels, target);
  const double ms = ms_since(start);
  CHECK(result.origin == kiln::Origin::compiled);
  CHECK(result.binary_bytes > 0);
  return ms;
}

void report(const char* what, const Timed& t, double compile_ms) {
  std::printf(
      "%s: %zu headers read, %zu absent probes, %zu unresolved, %zu bytes handed over; resolve %.1f ms, "
      "compile %.0f ms\n",
      what, t.resolved.dependencies.headers.size(), t.resolved.dependencies.absent.size(), t.resolved.unresolved.size(),
      t.bytes, t.ms, compile_ms);
  std::fflush(stdout);
}

std::vector<std::filesystem::path> cuda_toolkit_folders() {
  const std::string library = compiler_library(Vendor::cuda);
  REQUIRE_FALSE(library.empty());
  return kiln::cache::detail::toolkit_include_dirs(library);
}

/// A small tree in two folders: the same written name ("config.h") means a different file in each,
/// a quoted include relative to its header, #include_next, __has_include.
struct SmallTree {
  TempDir dir{"kiln-include-tree"};
  std::filesystem::path a = dir.path() / "a";
  std::filesystem::path b = dir.path() / "b";
  SmallTree() {
    write_file(a, "lib/api.h",
               "#pragma once\n#include \"config.h\"\n#include <lib2/other.h>\n#include <lib/wrap.h>\n"
               "__device__ inline int api_value() { return CONFIG_A + other_value(); }\n");
    write_file(a, "lib/config.h", "#define CONFIG_A 3\n");
    write_file(a, "lib/wrap.h", "#pragma once\n#include_next <lib/wrap.h>\n#define WRAP_A 1\n");
    write_file(b, "lib/wrap.h", "#pragma once\n#define WRAP_B 1\n");
    write_file(b, "lib2/other.h",
               "#pragma once\n#include \"config.h\"\n__device__ inline int other_value() { return CONFIG_B; }\n");
    write_file(b, "lib2/config.h", "#define CONFIG_B 4\n");
  }
  static constexpr std::string_view kSource =
      "#include <lib/api.h>\n"
      "#if __has_include(<lib2/other.h>) && !__has_include(<lib2/none.h>)\n"
      "#define HAS_OTHER 1\n"
      "#endif\n"
      "static_assert(HAS_OTHER == 1 && CONFIG_A == 3 && CONFIG_B == 4 && WRAP_A + WRAP_B == 2, \"wrong headers\");\n"
      "extern \"C\" __global__ void api_kernel(int* out) { out[threadIdx.x] = api_value(); }\n";
};

}  // namespace

TEST_CASE("the CUDA toolkit's include folders: include/ then include/cccl", "[include][rtc]") {
  const std::vector<std::filesystem::path> folders = cuda_toolkit_folders();
  INFO("NVRTC at " << compiler_library(Vendor::cuda));
  REQUIRE_FALSE(folders.empty());
  CHECK(std::filesystem::exists(folders[0] / "cuda_runtime.h"));
  if (std::filesystem::exists("/usr/local/cuda/lib64/libnvrtc.so.13")) {
    const std::vector<std::filesystem::path> expected = {"/usr/local/cuda/include", "/usr/local/cuda/include/cccl"};
    CHECK(kiln::cache::detail::toolkit_include_dirs("/usr/local/cuda/lib64/libnvrtc.so.13") == expected);
  }
  // HIP's: the folder holding hip/hip_runtime.h (Debian: /usr/include, for the multiarch library).
  if (const std::string hip = compiler_library(Vendor::hip); !hip.empty()) {
    INFO("HIPRTC at " << hip);
    const std::vector<std::filesystem::path> hip_folders = kiln::cache::detail::toolkit_include_dirs(hip);
    REQUIRE(hip_folders.size() == 1);
    CHECK(std::filesystem::exists(hip_folders[0] / "hip" / "hip_runtime.h"));
    std::printf("toolkit include folders: NVRTC %s -> %s, %s; HIPRTC %s -> %s\n",
                compiler_library(Vendor::cuda).c_str(), folders[0].c_str(),
                folders.size() > 1 ? folders[1].c_str() : "-", hip.c_str(), hip_folders[0].c_str());
  }
}

TEST_CASE("CUB's BlockReduce: the real CCCL tree resolves and the in-memory set compiles for sm_90",
          "[include][rtc][cccl]") {
  const std::string source =
      "#include <cub/block/block_reduce.cuh>\n"
      "extern \"C\" __global__ void block_sum(const float* in, float* out) {\n"
      "  using Reduce = cub::BlockReduce<float, 128>;\n"
      "  __shared__ typename Reduce::TempStorage storage;\n"
      "  const float sum = Reduce(storage).Sum(in[blockIdx.x * 128 + threadIdx.x]);\n"
      "  if (threadIdx.x == 0) out[blockIdx.x] = sum;\n"
      "}\n";
  const Timed t = resolve_timed("block_sum.cu", source, cuda_toolkit_folders(), Vendor::cuda);
  CHECK(t.resolved.dependencies.headers.size() > 50);
  CHECK(kiln::test::line_count(t.resolved.compiler_source) == kiln::test::line_count(source));
  for (const auto& h : t.resolved.dependencies.headers) CHECK(h.trusted_stat);  // toolkit files are old
  report("CUB BlockReduce (sm_90)", t, compile("block_sum.cu", t.resolved, {"block_sum"}, "sm_90"));

  // Its hundreds of files are read on several threads once where each include leads is settled by stat:
  // the set, its order and every text handed over are the same on every resolve, with the header files
  // read afresh or taken from a HeaderFileCache.
  const Timed again = resolve_timed("block_sum.cu", source, cuda_toolkit_folders(), Vendor::cuda);
  kiln::cache::detail::HeaderFileCache files;
  IncludeInput cached;
  cached.source_name = "block_sum.cu";
  cached.source_text = source;
  cached.folders = cuda_toolkit_folders();
  cached.file_cache = &files;
  const ResolvedIncludes warm_up = resolve_includes(cached);
  const ResolvedIncludes from_cache = resolve_includes(cached);
  CHECK(from_cache.work.reads == 0);
  for (const ResolvedIncludes* other : {&again.resolved, &warm_up, &from_cache}) {
    CHECK(other->dependencies == t.resolved.dependencies);
    CHECK(other->compiler_source == t.resolved.compiler_source);
    REQUIRE(other->compiler_headers.size() == t.resolved.compiler_headers.size());
    for (std::size_t i = 0; i < other->compiler_headers.size(); ++i) {
      CHECK(other->compiler_headers[i].name == t.resolved.compiler_headers[i].name);
      CHECK(other->compiler_headers[i].text == t.resolved.compiler_headers[i].text);
    }
  }
}

TEST_CASE("the lean walk reads ahead on helper threads and gives the set it gives alone", "[include][lean][cccl]") {
  // With a HeaderFileCache the lean walk reads ahead (header_files.hpp, HeaderReadAhead): the files a header it enters
  // may include, on helper threads, into the cache. Without one it reads alone. Both give one set.
  const std::string source =
      "#include <cub/block/block_reduce.cuh>\n#include <cuda/std/tuple>\n"
      "extern \"C\" __global__ void k(float* out) { *out = 1.0f; }\n";
  const std::vector<std::string> flags = {"-std=c++17", "-arch=sm_90", "-DKILN_WARP_SIZE=32"};
  const kiln::cache::detail::MacroContext macros =
      kiln::cache::detail::MacroContext::from_flags(flags, kiln::test::traits_of(Vendor::cuda), "nvrtc 13.0");
  IncludeInput alone;
  alone.source_name = "ahead.cu";
  alone.source_text = source;
  alone.folders = cuda_toolkit_folders();
  alone.lean = true;
  alone.macros = &macros;
  IncludeInput ahead = alone;
  kiln::cache::detail::HeaderFileCache files;
  ahead.file_cache = &files;
  const ResolvedIncludes reference = resolve_includes(alone);
  const ResolvedIncludes read_ahead = resolve_includes(ahead);
  const ResolvedIncludes from_cache = resolve_includes(ahead);
  REQUIRE(reference.lean);
  CHECK(reference.dependencies.headers.size() > 100);
  CHECK(files.usage().files >= reference.dependencies.headers.size());  // toolkit files are old: all kept
  CHECK(from_cache.work.reads == 0);
  for (const ResolvedIncludes* other : {&read_ahead, &from_cache}) {
    CHECK(other->lean);
    CHECK(other->untaken == reference.untaken);
    CHECK(other->dependencies == reference.dependencies);
    CHECK(other->compiler_source == reference.compiler_source);
    REQUIRE(other->compiler_headers.size() == reference.compiler_headers.size());
    for (std::size_t i = 0; i < other->compiler_headers.size(); ++i) {
      CHECK(other->compiler_headers[i].name == reference.compiler_headers[i].name);
      CHECK(other->compiler_headers[i].text == reference.compiler_headers[i].text);
    }
  }
}

TEST_CASE("libcu++'s cuda::std::tuple: resolves and compiles for sm_90", "[include][rtc][cccl]") {
  const std::string source =
      "#include <cuda/std/tuple>\n"
      "extern \"C\" __global__ void tuple_sum(int* out) {\n"
      "  const cuda::std::tuple<int, float> t{static_cast<int>(threadIdx.x), 2.0f};\n"
      "  out[threadIdx.x] = cuda::std::get<0>(t) + static_cast<int>(cuda::std::get<1>(t));\n"
      "}\n";
  const Timed t = resolve_timed("tuple_sum.cu", source, cuda_toolkit_folders(), Vendor::cuda);
  CHECK(t.resolved.dependencies.headers.size() > 20);
  report("libcu++ tuple (sm_90)", t, compile("tuple_sum.cu", t.resolved, {"tuple_sum"}, "sm_90"));
}

TEST_CASE("a small -I tree compiles from memory alone with NVRTC and HIPRTC", "[include][rtc]") {
  SmallTree tree;
  const Timed cuda = resolve_timed("api.cu", SmallTree::kSource, {tree.a, tree.b}, Vendor::cuda);
  const Timed hip = resolve_timed("api.cu", SmallTree::kSource, {tree.a, tree.b}, Vendor::hip);
  CHECK(cuda.resolved.dependencies == hip.resolved.dependencies);  // the names differ, the files do not
  CHECK(cuda.resolved.dependencies.headers.size() == 6);
  CHECK(cuda.resolved.unresolved == std::vector<std::string>{"lib2/none.h"});
  // The compilers get only the memory copies: the files on disk are now broken, and that must not matter.
  for (const auto& h : cuda.resolved.dependencies.headers) {
    write_file("/", h.path.substr(1), "#error the compiler read the file on disk\n");
  }
  report("small -I tree (sm_90)", cuda, compile("api.cu", cuda.resolved, {"api_kernel"}, "sm_90"));
  if (compiler_library(Vendor::hip).empty()) {
    WARN("HIPRTC is not available here: the gfx90a half is skipped");
    return;
  }
  report("small -I tree (gfx90a)", hip, compile("api.cu", hip.resolved, {"api_kernel"}, "gfx90a"));
}

TEST_CASE("computed includes: expanded from function-like and object-like #defines, compiled at once",
          "[include][rtc]") {
  SmallTree tree;
  // A function-like macro: kiln expands it as the preprocessor does and hands lib2/config.h over.
  const std::string source =
      "#define HEADER(name) <lib2/name.h>\n#include HEADER(config)\nstatic_assert(CONFIG_B == 4, \"\");\n"
      "extern \"C\" __global__ void k(int* out) { *out = CONFIG_B; }\n";
  // An object-like one. other.h (#pragma once only, defines a function) is included both ways: it must be
  // one header to the compiler.
  const std::string guessed =
      "#define OTHER <lib2/other.h>\n#include OTHER\n#include <lib2/other.h>\nstatic_assert(CONFIG_B == 4, \"\");\n"
      "extern \"C\" __global__ void k(int* out) { *out = other_value(); }\n";
  std::vector<std::string> targets = {"sm_90"};
  if (!compiler_library(Vendor::hip).empty()) targets.emplace_back("gfx90a");
  for (const std::string& target : targets) {
    INFO(target);
    const Vendor vendor = target.starts_with("sm_") ? Vendor::cuda : Vendor::hip;
    const Timed first = resolve_timed("computed.cu", source, {tree.a, tree.b}, vendor);
    CHECK(first.resolved.computed == std::vector<std::string>{"HEADER(config)"});
    CHECK(first.resolved.dependencies.headers.size() == 1);
    report(("computed include, function-like (" + target + ")").c_str(), first,
           compile("computed.cu", first.resolved, {"k"}, target));

    const Timed guess = resolve_timed("guessed.cu", guessed, {tree.a, tree.b}, vendor);
    CHECK(guess.resolved.dependencies.headers.size() == 2);
    report(("computed include, guessed (" + target + ")").c_str(), guess,
           compile("guessed.cu", guess.resolved, {"k"}, target));

    // A quoted include that exists nowhere: the wording of a plain missing header.
    const std::string plain = "#include \"kiln_no_such_header.h\"\nextern \"C\" __global__ void k(int* out) {}\n";
    const Timed none = resolve_timed("plain.cu", plain, {tree.a}, vendor);
    CHECK(none.resolved.unresolved == std::vector<std::string>{"kiln_no_such_header.h"});
    try {
      (void)compile("plain.cu", none.resolved, {"k"}, target);
      FAIL("expected a CompileError");
    } catch (const kiln::CompileError& e) {
      CHECK(missing_include_from_log(e.log()) == std::optional<std::string>("kiln_no_such_header.h"));
    }
  }
}

// ---- -I through the engine: the key names what the compile read -------------------------------------

namespace {

kiln::PrewarmResult prewarm_with(Engine& engine, const std::filesystem::path& first, const std::filesystem::path& second) {
  const Source source = Source::from_text("uses_header.cu",
                                          "#include <lib/value.h>\nextern \"C\" __global__ void k(int* out) { *out = VALUE; }\n");
  return engine.prewarm(source, kiln::Options({"-I" + first.string(), "--include-path=" + second.string()}), {}, "sm_90");
}

}  // namespace

TEST_CASE("engine -I: an edited header recompiles, an unchanged one hits, a shadowing one misses", "[include]") {
  TempDir dir("kiln-engine-include");
  const std::filesystem::path first = dir.path() / "first";
  const std::filesystem::path second = dir.path() / "second";
  std::filesystem::create_directories(first);
  write_file(second, "lib/value.h", "#define VALUE 1\n");
  kiln::EngineConfig config;
  config.runtime = false;
  config.cache.root = dir.path() / "cache";
  // One engine per step: inside one process a path's stat is reused for up to a second (the manifests'
  // stat memo), so each edit below is looked at as the next process would.
  const auto step = [&](std::uint64_t* compiles = nullptr) {
    Engine engine(config);
    const kiln::PrewarmResult result = prewarm_with(engine, first, second);
    if (compiles != nullptr) *compiles = engine.stats().compiles;
    return result;
  };
  std::uint64_t compiles = 0;
  const kiln::PrewarmResult compiled = step(&compiles);
  CHECK(compiled.origin == kiln::Origin::compiled);
  // Same bytes (rewritten in place): the same key, served from the cache with no compile.
  write_file(second, "lib/value.h", "#define VALUE 1\n");
  const kiln::PrewarmResult again = step(&compiles);
  CHECK(again.key == compiled.key);
  CHECK(again.origin == kiln::Origin::disk);
  CHECK(compiles == 0);
  // Edited: another key, compiled.
  write_file(second, "lib/value.h", "#define VALUE 2\n");
  const kiln::PrewarmResult edited = step();
  CHECK(edited.key != compiled.key);
  CHECK(edited.origin == kiln::Origin::compiled);
  // A header appearing in the earlier folder shadows the recorded one: another key.
  write_file(first, "lib/value.h", "#define VALUE 2\n");
  const kiln::PrewarmResult shadowed = step(&compiles);
  CHECK(shadowed.key != edited.key);
  CHECK(shadowed.origin == kiln::Origin::compiled);
  CHECK(compiles == 1);
  // Deleted everywhere: a CompileError that names the header and the folders searched.
  std::filesystem::remove(first / "lib/value.h");
  std::filesystem::remove(second / "lib/value.h");
  std::string message;
  try {
    (void)step();
  } catch (const kiln::CompileError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("lib/value.h") != std::string::npos);
  CHECK(message.find(first.string()) != std::string::npos);
  CHECK(message.find(second.string()) != std::string::npos);
  // A folder that does not exist is a ConfigError naming it.
  Engine engine(config);
  CHECK_THROWS_AS(prewarm_with(engine, dir.path() / "nowhere", second), kiln::ConfigError);
}

TEST_CASE("engine --toolkit-includes: a CUB and a libcu++ kernel compile for sm_90", "[include]") {
  Engine& engine = compile_engine();
  const Source cub = Source::from_text("cub_reduce.cu",
                                       "#include <cub/block/block_reduce.cuh>\n"
                                       "extern \"C\" __global__ void sum(const int* in, int* out) {\n"
                                       "  using R = cub::BlockReduce<int, 128>;\n"
                                       "  __shared__ typename R::TempStorage t;\n"
                                       "  int v = R(t).Sum(in[threadIdx.x]);\n"
                                       "  if (threadIdx.x == 0) *out = v;\n}\n");
  const kiln::PrewarmResult first = engine.prewarm(cub, kiln::Options({"--toolkit-includes"}), {}, "sm_90");
  CHECK(first.binary_bytes > 0);
  const Source tuple = Source::from_text("tuple.cu",
                                         "#include <cuda/std/tuple>\n"
                                         "extern \"C\" __global__ void t(int* out) {\n"
                                         "  cuda::std::tuple<int, int> p{1, 2};\n"
                                         "  *out = cuda::std::get<0>(p) + cuda::std::get<1>(p);\n}\n");
  CHECK(engine.prewarm(tuple, kiln::Options({"--toolkit-includes"}), {}, "sm_90").binary_bytes > 0);
  // The second request of the same kernel is served from the cache.
  CHECK(engine.prewarm(cub, kiln::Options({"--toolkit-includes"}), {}, "sm_90").origin != kiln::Origin::compiled);
}

TEST_CASE("a probe through a macro wrapping __has_include sees the header, as NVRTC with -I does", "[include][rtc]") {
  TempDir dir("kiln-wrapped-probe");
  write_file(dir.path(), "wrap.h", "#pragma once\n#define HAS_INCLUDE(_X) __has_include(_X)\n");
  write_file(dir.path(), "feature.h", "#define FEATURE 7\n");
  Engine& engine = compile_engine();
  const kiln::Options folder({"-I" + dir.path().string()});
  const Source wrapped = Source::from_text("wrapped_probe.cu",
                                           "#include <wrap.h>\n"
                                           "#if HAS_INCLUDE(<feature.h>)\n#define HAVE_FEATURE 1\n#else\n"
                                           "#define HAVE_FEATURE 0\n#endif\n"
                                           "static_assert(HAVE_FEATURE == 1, \"feature.h was not handed to the compiler\");\n"
                                           "extern \"C\" __global__ void k(int* out) { *out = HAVE_FEATURE; }\n");
  CHECK(engine.prewarm(wrapped, folder, {}, "sm_90").binary_bytes > 0);
  // CCCL decides its __half / __nv_bfloat16 / fp8 support that way (_CCCL_HAS_INCLUDE(<cuda_fp16.h>)):
  // with the toolkit's folders, as NVRTC given them with -I, the support is on.
  const Source cccl = Source::from_text("cccl_fp16.cu",
                                        "#include <cub/block/block_reduce.cuh>\n"
                                        "static_assert(_CCCL_HAS_NVFP16() && _CCCL_HAS_NVBF16() && _CCCL_HAS_NVFP8(), "
                                        "\"CCCL's probes of cuda_fp16.h, cuda_bf16.h, cuda_fp8.h failed\");\n"
                                        "extern \"C\" __global__ void k(int* out) { *out = 1; }\n");
  CHECK(engine.prewarm(cccl, kiln::Options({"--toolkit-includes"}), {}, "sm_90").binary_bytes > 0);
}

TEST_CASE("kernels over one prelude: one resolve per engine, and the key a fresh engine gives", "[include]") {
  // A runtime's kernels: distinct sources after the same includes (CuPy's shape). The toolkit's files are
  // old enough to be trusted by their stat, so the first resolve is taken by the later requests.
  const auto kernel = [](int n) {
    return Source::from_text("elementwise.cu",
                             fmt::format("#include <cuda/std/type_traits>\n#include <cuda/std/limits>\n"
                                         "extern \"C\" __global__ void k{}(float* out) {{\n"
                                         "  out[threadIdx.x] = cuda::std::numeric_limits<float>::max() * {};\n}}\n",
                                         n, n));
  };
  const auto engine = [](const TempDir& root) {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.root = root.path();
    return std::make_unique<Engine>(config);
  };
  const kiln::Options options({"--toolkit-includes", "-std=c++17"});
  TempDir one_root("kiln-prelude-one"), two_root("kiln-prelude-two");
  const auto one = engine(one_root);
  std::vector<kiln::PrewarmResult> results;
  for (int n = 1; n <= 3; ++n) results.push_back(one->prewarm(kernel(n), options, {}, "sm_90"));
  CHECK(one->stats().include_resolves == 1);
  CHECK(one->stats().compiles == 3);
  // A fresh engine (its own cache) resolves the third kernel itself: the same key, so the same inputs.
  const auto two = engine(two_root);
  const kiln::PrewarmResult fresh = two->prewarm(kernel(3), options, {}, "sm_90");
  CHECK(two->stats().include_resolves == 1);
  CHECK(fresh.origin == kiln::Origin::compiled);
  CHECK(fresh.key == results.back().key);
  CHECK(results[0].key != results[1].key);
}

int main(int argc, char** argv) {
  try {
    if (compiler_library(Vendor::cuda).empty()) kiln::test::skip("NVRTC is not available");
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no compile-only engine: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
