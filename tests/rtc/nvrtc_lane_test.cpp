// The NVRTC lane through the engine's request path, on a machine with no GPU (Engine::prewarm).
// Needs NVRTC (the CUDA toolkit); skips with the reason when it is absent.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstring>
#include <string>

#include "cubin_params.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "ptx.hpp"
#include "test_support.hpp"

using namespace kiln;

namespace {

struct Compiled {
  cache::Entry entry;
  PrewarmResult result;
};

Compiled compile(Engine& engine, const Source& source, const std::vector<std::string>& names, const std::string& target,
                 const Options& options = {}) {
  PrewarmResult result = engine.prewarm(source, options, names, target);
  auto [hash, canonical] = engine.describe_key(source, options, names, target);
  REQUIRE(hash == result.key);
  cache::LookupResult found = engine.storage().local().get(hash, canonical);
  REQUIRE(found.outcome == cache::LookupOutcome::hit);
  return {std::move(*found.entry), result};
}

template <typename T>
T read_at(const std::vector<std::byte>& bytes, std::size_t offset) {
  T value{};
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

EngineConfig config_in(const test::TempDir& dir) {
  EngineConfig config;
  config.cache.root = dir.path();
  return config;
}

}  // namespace

TEST_CASE("every built-in kernel compiles to a CUBIN for sm_80, sm_90, sm_90a and sm_100", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  for (const std::string& name : Source::builtin_names()) {
    const Source source = Source::builtin(name);
    const std::vector<std::string> kernels = source.listed_kernels();
    REQUIRE_FALSE(kernels.empty());
    for (const std::string target : {"sm_80", "sm_90", "sm_90a", "sm_100"}) {
      INFO(name << " for " << target);
      const Compiled c = compile(engine, source, kernels, target);
      CHECK(c.result.origin == Origin::compiled);
      CHECK(c.entry.payload_kind == PayloadKind::cubin);
      CHECK(c.entry.target == target);
      // An ELF for EM_CUDA (190) whose e_flags carry the SM number in bits 8..15.
      const auto& cubin = c.entry.payload;
      REQUIRE(cubin.size() > 64);
      CHECK(std::memcmp(cubin.data(), "\x7f" "ELF", 4) == 0);
      CHECK(read_at<std::uint16_t>(cubin, 18) == 190);
      const int sm = std::stoi(target.substr(3, target.find_first_not_of("0123456789", 3) - 3));
      CHECK(((read_at<std::uint32_t>(cubin, 48) >> 8) & 0xff) == static_cast<std::uint32_t>(sm));
      // The PTX kept beside it names the exact target (sm_90a included: e_flags do not show the 'a').
      const std::string ptx(reinterpret_cast<const char*>(c.entry.aux.data()), c.entry.aux.size());
      CHECK(ptx.find(".target " + target) != std::string::npos);
      // Every requested kernel is in the binary: a name expression by its lowered symbol (the entry's names), an
      // extern "C" kernel by its own name, which is no name expression (engine/src/c_kernels.hpp).
      for (const std::string& kernel : kernels) {
        INFO(kernel);
        const auto named = std::find_if(c.entry.names.begin(), c.entry.names.end(),
                                        [&](const cache::LoweredName& n) { return n.expression == kernel; });
        if (is_name_expression(kernel)) {
          REQUIRE(named != c.entry.names.end());
          CHECK_FALSE(named->lowered.empty());
        } else {
          CHECK(named == c.entry.names.end());
          CHECK(ptx.find(".entry " + kernel + "(") != std::string::npos);
        }
      }
    }
  }
}

namespace {
/// Checks that the PTX kept beside `c`'s CUBIN declares, for every kernel of `kernels` (name expressions by their
/// lowered symbol, extern "C" kernels by their own), the parameter sizes the CUBIN's own records give (what the
/// driver loads). The CUDA block counts parameters from the PTX.
int check_ptx_params_match_cubin(const Compiled& c, const std::vector<std::string>& kernels) {
  const std::string_view ptx(reinterpret_cast<const char*>(c.entry.aux.data()), c.entry.aux.size());
  int checked = 0;
  std::vector<cache::LoweredName> names;
  for (const std::string& kernel : kernels) {
    const auto named = std::find_if(c.entry.names.begin(), c.entry.names.end(),
                                    [&](const cache::LoweredName& n) { return n.expression == kernel; });
    names.push_back(named != c.entry.names.end() ? *named : cache::LoweredName{kernel, kernel});
  }
  for (const cache::LoweredName& name : names) {
    INFO("kernel " << name.expression << " (" << name.lowered << ") for " << c.entry.target);
    const auto declared = ptx::entry_param_sizes(ptx, name.lowered);
    const auto cubin = test::cubin_params(c.entry.payload, name.lowered);
    REQUIRE(declared.has_value());
    REQUIRE(cubin.has_value());
    REQUIRE(declared->size() == cubin->size());
    for (std::size_t i = 0; i < cubin->size(); ++i) {
      INFO("parameter " << i);
      CHECK((*declared)[i] == (*cubin)[i].size);
    }
    ++checked;
  }
  return checked;
}
}  // namespace

TEST_CASE("the PTX beside each CUBIN declares every kernel's parameters as the CUBIN does", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  int checked = 0;
  for (const std::string target : {"sm_80", "sm_90", "sm_100"}) {
    for (const std::string& name : Source::builtin_names()) {
      const Source source = Source::builtin(name);
      checked += check_ptx_params_match_cubin(compile(engine, source, source.listed_kernels(), target),
                                              source.listed_kernels());
    }
    // Parameters of every kind kiln's users pass: structs by value (aligned and packed), scalars of
    // each width, pointers, a template instance, and a kernel with no parameters.
    const Source mixed = Source::from_text("mixed.cu", R"(#include <kiln/rtc.h>
struct Pair { double a; int b; };
struct Packed { char c[3]; };
struct alignas(16) Wide { float v[4]; };
KILN_KERNEL void structs(Pair p, Packed q, Wide w, float* out) { out[0] = p.a + p.b + q.c[1] + w.v[2]; }
KILN_KERNEL void scalars(char c, short s, long long l, double d, unsigned u, bool b, float* out) { out[0] = c + s + l + d + u + b; }
KILN_KERNEL void none() {}
namespace demo { template <typename T, int N> __global__ void scale(int n, T* p) { if (n > 0) p[0] *= T(N); } }
)");
    const std::vector<std::string> kernels{"structs", "scalars", "none", "demo::scale<double, 3>"};
    const Compiled c = compile(engine, mixed, kernels, target);
    checked += check_ptx_params_match_cubin(c, kernels);
    const std::string_view ptx(reinterpret_cast<const char*>(c.entry.aux.data()), c.entry.aux.size());
    CHECK(ptx::entry_param_sizes(ptx, "structs") == std::vector<std::size_t>{16, 3, 16, 8});
    CHECK(ptx::entry_param_sizes(ptx, "scalars") == std::vector<std::size_t>{1, 2, 8, 8, 4, 1, 8});
    CHECK(ptx::entry_param_sizes(ptx, "none") == std::vector<std::size_t>{});
  }
  CHECK(checked >= 3 * 18);
}

TEST_CASE("a second request is a disk hit with zero compiles", "[rtc][nvrtc]") {
  test::TempDir dir;
  {
    Engine first(config_in(dir));
    CHECK(first.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90").origin == Origin::compiled);
    CHECK(first.stats().compiles == 1);
  }
  Engine second(config_in(dir));
  CHECK(second.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90").origin == Origin::disk);
  CHECK(second.stats().compiles == 0);
  CHECK(second.stats().disk_hits == 1);
}

TEST_CASE("name expressions lower templated kernels", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  const Source source = Source::from_text("tmpl.cu", R"(#include <kiln/rtc.h>
namespace demo { template <typename T, int N> __global__ void scale(T* p) { p[threadIdx.x] *= T(N); } }
KILN_KERNEL void plain(float* p) { p[0] = 1.0f; }
)");
  const Compiled c = compile(engine, source, {"demo::scale<float, 4>", "plain"}, "sm_90");
  // The entry keeps the name expressions' lowered symbols; the extern "C" kernel "plain" is found by its own name,
  // no name expression (engine/src/c_kernels.hpp), and a compile-only binary reports it so.
  REQUIRE(c.entry.names.size() == 1);
  CHECK(c.entry.names[0].expression == "demo::scale<float, 4>");
  CHECK(c.entry.names[0].lowered == "_ZN4demo5scaleIfLi4EEEvPT_");
  const CompiledBinary binary = engine.compile(source, {}, {"demo::scale<float, 4>", "plain"}, "sm_90");
  REQUIRE(binary.lowered_name("plain") != nullptr);
  CHECK(*binary.lowered_name("plain") == "plain");
}

TEST_CASE("a syntax error is a CompileError naming the source and line, with the whole log", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  const Source broken = Source::from_text("broken_kernel.cu", "#include <kiln/rtc.h>\n\nKILN_KERNEL void k(float* p) {\n  p[0] = ;\n}\n");
  try {
    (void)engine.prewarm(broken, {}, {"k"}, "sm_90");
    FAIL("compiled");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("broken_kernel.cu(4)") != std::string::npos);
    CHECK(e.log().find("expected an expression") != std::string::npos);
    CHECK(e.source_name() == "broken_kernel.cu");
    CHECK(std::find(e.options().begin(), e.options().end(), "-arch=sm_90") != e.options().end());
  }
  CHECK(engine.stats().compile_failures == 1);
  // A failed compile leaves no entry.
  CHECK(engine.storage().local().list().empty());
}

TEST_CASE("an unknown target errors before the compiler is called", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  for (const char* target : {"sm_70", "sm_101", "sm_999", "gfx90a:bogus+", "banana", ""}) {
    INFO(target);
    CHECK_THROWS_AS(engine.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, target), ConfigError);
  }
  try {
    (void)engine.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_70");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("sm_90") != std::string::npos);  // lists what is supported
  }
  CHECK(engine.stats().compiles == 0);
  CHECK(engine.stats().compile_failures == 0);
}

TEST_CASE("a missing compiler library names every path searched", "[rtc][nvrtc]") {
  test::TempDir dir;
  const test::ScopedEnv cuda_path("KILN_CUDA_PATH", "/nonexistent/cuda");
  Engine engine(config_in(dir));
  try {
    (void)engine.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
    FAIL("compiled without NVRTC");
  } catch (const DeviceUnavailable& e) {
    const std::string what = e.what();
    CHECK(what.find("no NVRTC found") != std::string::npos);
    CHECK(what.find("/nonexistent/cuda/lib64/libnvrtc.so.") != std::string::npos);
    CHECK(what.find("/nonexistent/cuda/lib/libnvrtc.so.") != std::string::npos);
  }
}

TEST_CASE("bad requests are clear errors", "[rtc][nvrtc]") {
  test::TempDir dir;
  Engine engine(config_in(dir));
  CHECK_THROWS_AS(Source::from_text("empty.cu", ""), ConfigError);
  CHECK_THROWS_AS(engine.prewarm(Source::builtin("saxpy"), Options{"-O3"}, {"saxpy"}, "sm_90"), ConfigError);
  CHECK_THROWS_AS(engine.prewarm(Source::builtin("saxpy"), {}, {""}, "sm_90"), ConfigError);
  // A name expression that does not exist is the compiler's error, reported as a CompileError.
  CHECK_THROWS_AS(engine.prewarm(Source::builtin("saxpy"), {}, {"no_such_kernel<int>"}, "sm_90"), CompileError);
}

int main(int argc, char** argv) {
  try {
    EngineConfig config;
    config.cache.disabled = true;
    Engine probe(config);
    (void)probe.describe_key(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
  } catch (const DeviceUnavailable& e) {
    test::skip(std::string("NVRTC is not available: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
