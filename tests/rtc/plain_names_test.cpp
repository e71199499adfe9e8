// Plain names of extern "C" kernels are found by symbol: they are not name expressions for the compiler and
// not in the key (engine/src/c_kernels.hpp), so `kiln prewarm` (no names), `engine.kernel(src, "k")` and
// `engine.program(src, {}, {"k"})` meet one entry. What holds that safe, against the bare NVRTC:
//  - for an extern "C" kernel, NVRTC's bytes with the name expression are the bytes without it;
//  - a template's name expression instantiates (other bytes) and a C++ name lowers to a mangled symbol: both
//    stay in the key and go to the compiler;
//  - a source whose text misleads the guess (a declaration in #if 0) is compiled again with the names.
// Needs NVRTC (skips without it); HIPRTC parts run where it loads.
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include "key_part.hpp"

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bare_rtc.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/engine.hpp"
#include "test_support.hpp"

using namespace kiln;

namespace {

EngineConfig config_in(const std::filesystem::path& root) {
  EngineConfig config;
  config.cache.root = root;
  config.runtime = false;
  return config;
}

EngineConfig memory_only() {
  EngineConfig config;
  config.cache.disabled = true;
  config.runtime = false;
  return config;
}

const char* kMixed = R"(extern "C" __global__ void c_kernel(int* p) { p[0] = 1; }
extern "C" {
__global__ void c_block(int* p) { p[0] = 2; }
static __global__ void c_static(int* p) { p[0] = 3; }
}
__global__ void cxx_kernel(int* p) { p[0] = 4; }
template <typename T> __global__ void templated(T* p) { p[0] = T(5); }
)";

Source mixed() { return Source::from_text("mixed.cu", kMixed); }

cache::Hash128 key_of(Engine& e, const Source& s, const std::vector<std::string>& names, const char* target = "sm_90") {
  return e.describe_key(s, {}, names, target).first;
}

std::string part(const std::string& canonical, const std::string& name) { return kiln::test::key_part(canonical, name); }

/// The library kiln loaded for `vendor`, or "" when its lane has none.
std::string compiler_path(Vendor vendor) {
  Engine engine(memory_only());
  for (const LaneInfo& lane : engine.lanes()) {
    if (lane.vendor != vendor) continue;
    for (const LibraryInfo& library : lane.libraries) {
      if ((library.role == "nvrtc" || library.role == "hiprtc") && lane.compiler_loaded) return library.path;
    }
  }
  return {};
}

std::string blanked(std::span<const std::byte> bytes) { return test::blank_internal_tags(bytes); }

}  // namespace

TEST_CASE("a plain extern \"C\" kernel name is not in the key; name expressions and C++ names are", "[names]") {
  Engine e(memory_only());
  const Source s = mixed();
  const cache::Hash128 none = key_of(e, s, {});
  CHECK(key_of(e, s, {"c_kernel"}) == none);
  CHECK(key_of(e, s, {"c_block", "c_kernel"}) == none);
  CHECK(part(e.describe_key(s, {}, {"c_kernel"}, "sm_90").second, "names").empty());
  // What NVRTC lowers to another symbol, or instantiates, stays.
  CHECK(key_of(e, s, {"cxx_kernel"}) != none);
  CHECK(key_of(e, s, {"c_static"}) != none);
  CHECK(key_of(e, s, {"templated<int>"}) != none);
  CHECK(key_of(e, s, {"templated<int>"}) != key_of(e, s, {"templated<float>"}));
  CHECK(key_of(e, s, {"c_kernel", "cxx_kernel"}) == key_of(e, s, {"cxx_kernel"}));
  CHECK(part(e.describe_key(s, {}, {"c_kernel", "templated<int>"}, "sm_90").second, "names") == "templated<int>");
  // A name the source does not declare stays (the compiler says what it makes of it).
  CHECK(key_of(e, s, {"not_there"}) != none);
  // LTO-IR's kernels are not read: its names stay.
  CHECK(key_of(e, s, {"c_kernel"}, "lto_90") != key_of(e, s, {}, "lto_90"));
  // The built-ins' KILN_KERNEL (kiln/rtc.h) is extern "C" __global__.
  CHECK(key_of(e, Source::builtin("saxpy"), {"saxpy"}) == key_of(e, Source::builtin("saxpy"), {}));
  CHECK(key_of(e, Source::builtin("map"), {"kiln::map<float, 4>"}) != key_of(e, Source::builtin("map"), {}));
}

TEST_CASE("NVRTC's bytes for an extern \"C\" kernel are the same with its name expression and without", "[names]") {
  const std::string nvrtc = compiler_path(Vendor::cuda);
  REQUIRE_FALSE(nvrtc.empty());
  const auto bare = test::BareCompiler::nvrtc(nvrtc);
  Engine e(memory_only());
  for (const char* target : {"sm_90", "compute_90"}) {
    INFO(target);
    const auto [hash, canonical] = e.describe_key(mixed(), {}, {}, target);
    std::vector<std::string> flags;  // the compiler's flags as kiln gives them (the key's options part)
    std::istringstream options(part(canonical, "options"));
    for (std::string flag; std::getline(options, flag);) flags.push_back(flag);
    const test::BareOutput without = bare->compile("mixed.cu", kMixed, flags);
    const test::BareOutput with_c = bare->compile("mixed.cu", kMixed, flags, {}, {"c_kernel", "c_block"});
    const test::BareOutput with_cxx = bare->compile("mixed.cu", kMixed, flags, {}, {"cxx_kernel"});
    const test::BareOutput with_template = bare->compile("mixed.cu", kMixed, flags, {}, {"templated<int>"});
    REQUIRE(without.ok);
    REQUIRE(with_c.ok);
    REQUIRE(with_cxx.ok);
    REQUIRE(with_template.ok);
    CHECK(blanked(with_c.code) == blanked(without.code));
    CHECK(with_c.lowered == std::vector<std::pair<std::string, std::string>>{{"c_kernel", "c_kernel"},
                                                                              {"c_block", "c_block"}});
    // A C++ kernel's name lowers to its mangled symbol (same bytes, but the name is the caller's handle on it).
    REQUIRE(with_cxx.lowered.size() == 1);
    CHECK(with_cxx.lowered[0].second.rfind("_Z", 0) == 0);
    // A template's name expression instantiates it: other bytes.
    CHECK(blanked(with_template.code) != blanked(without.code));

    // kiln's binary for the request by plain name is NVRTC's for the request as asked.
    const CompiledBinary binary = e.compile(mixed(), {}, {"c_kernel"}, target);
    CHECK(binary.key() == hash);
    CHECK(blanked(binary.bytes()) == blanked(with_c.code));
    REQUIRE(binary.lowered_name("c_kernel") != nullptr);
    CHECK(*binary.lowered_name("c_kernel") == "c_kernel");
    const CompiledBinary cxx = e.compile(mixed(), {}, {"cxx_kernel"}, target);
    REQUIRE(cxx.lowered_name("cxx_kernel") != nullptr);
    CHECK(*cxx.lowered_name("cxx_kernel") == with_cxx.lowered[0].second);
  }
}

TEST_CASE("a prewarm without names serves the requests that name extern \"C\" kernels", "[names]") {
  test::TempDir dir;
  {
    Engine warm(config_in(dir.path()));
    CHECK(warm.prewarm(Source::builtin("saxpy"), {}, {}, "sm_90").origin == Origin::compiled);
  }
  Engine e(config_in(dir.path()));
  const PrewarmResult named = e.prewarm(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
  CHECK(named.origin == Origin::disk);  // what examples/hello asks without a GPU
  const CompiledBinary binary = e.compile(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
  CHECK(binary.origin() == Origin::disk);
  CHECK(binary.key() == named.key);
  CHECK(e.stats().compiles == 0);
  // A kernel the source does not have is still reported by name.
  CHECK_THROWS_WITH(e.prewarm(Source::builtin("reduce"), {}, {"reduce_sum_f32", "no_such_kernel"}, "sm_90"),
                    Catch::Contains("no_such_kernel"));
}

TEST_CASE("a text that misleads the guess is compiled with its names, under their key", "[names]") {
  // The #if 0 declaration reads as extern "C"; the kernel compiled is C++, with a mangled symbol.
  const Source s = Source::from_text("misled.cu", "#if 0\nextern \"C\" __global__ void k(int* p);\n#endif\n"
                                                  "__global__ void k(int* p) { p[0] = 1; }\n");
  test::TempDir dir;
  cache::Hash128 first_key;
  {
    Engine e(config_in(dir.path()));
    CHECK(e.describe_key(s, {}, {"k"}, "sm_90").first == e.describe_key(s, {}, {}, "sm_90").first);  // the guess
    const CompiledBinary binary = e.compile(s, {}, {"k"}, "sm_90");
    REQUIRE(binary.lowered_name("k") != nullptr);
    CHECK(binary.lowered_name("k")->rfind("_Z", 0) == 0);
    CHECK(binary.key() != e.describe_key(s, {}, {}, "sm_90").first);  // the names' own key
    first_key = binary.key();
    const PrewarmResult prewarmed = e.prewarm(s, {}, {"k"}, "sm_90");
    CHECK(prewarmed.key == first_key);
  }
  Engine again(config_in(dir.path()));
  const CompiledBinary hit = again.compile(s, {}, {"k"}, "sm_90");
  CHECK(hit.origin() == Origin::disk);
  CHECK(hit.key() == first_key);
  CHECK(again.stats().compiles == 0);
}

TEST_CASE("HIPRTC: a plain extern \"C\" kernel name is found by symbol too", "[names][hip]") {
  Engine e(memory_only());
  CompiledBinary without;
  try {
    without = e.compile(Source::builtin("saxpy"), {}, {}, "gfx90a");
  } catch (const DeviceUnavailable& error) {
    WARN("no HIPRTC here: " << error.what());
    return;
  }
  const CompiledBinary named = e.compile(Source::builtin("saxpy"), {}, {"saxpy"}, "gfx90a");
  CHECK(named.key() == without.key());
  REQUIRE(named.lowered_name("saxpy") != nullptr);
  CHECK(*named.lowered_name("saxpy") == "saxpy");
  CHECK(e.describe_key(Source::builtin("map"), {}, {"kiln::map<float, 4>"}, "gfx90a").first !=
        e.describe_key(Source::builtin("map"), {}, {}, "gfx90a").first);
}

int main(int argc, char** argv) {
  try {
    Engine probe(memory_only());
    (void)probe.describe_key(Source::builtin("saxpy"), {}, {}, "sm_90");
  } catch (const DeviceUnavailable& e) {
    test::skip(std::string("NVRTC is not available: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
