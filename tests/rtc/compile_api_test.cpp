// Engine::compile, the compile-only API: the binary itself for a named target, with no GPU. Its kinds
// (CUBIN, PTX), its key (the one prewarm gives), its origins (compiled, memory, disk, pack), lowered
// names, the compiler log and its lifetime beyond the engine. Needs NVRTC; skips without it.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstring>
#include <string>
#include <string_view>

#include "kiln/cache/pack.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "test_support.hpp"

using namespace kiln;

namespace {

EngineConfig config_in(const std::filesystem::path& root) {
  EngineConfig config;
  config.cache.root = root;
  return config;
}

const Source& templated() {
  static const Source source = Source::from_text("compile_api.cu", R"(#include <kiln/rtc.h>
KILN_KERNEL void plain(float* x) { x[threadIdx.x] += 1.0f; }
namespace demo { template <typename T, int N> __global__ void scale(T* p) { p[threadIdx.x] *= T(N); } }
)");
  return source;
}

bool starts_with_elf(std::span<const std::byte> bytes) {
  return bytes.size() > 4 && std::memcmp(bytes.data(), "\177ELF", 4) == 0;
}

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

TEST_CASE("compile gives a CUBIN under prewarm's key; a second compile is a memory hit", "[rtc][compile]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const Options options{"-DCOMPILE_API=1"};
  const CompiledBinary first = engine.compile(templated(), options, {}, "sm_90");
  REQUIRE(first);
  CHECK(first.origin() == Origin::compiled);
  CHECK(first.kind() == BinaryKind::cubin);
  CHECK(first.target() == "sm_90");
  CHECK(starts_with_elf(first.bytes()));
  CHECK(first.seconds() > 0);
  CHECK(first.lowered_names().empty());
  CHECK(first.key() == engine.describe_key(templated(), options, {}, "sm_90").first);
  CHECK(engine.stats().compiles == 1);

  // prewarm finds what compile stored, under the same key.
  const PrewarmResult prewarmed = engine.prewarm(templated(), options, {}, "sm_90");
  CHECK(prewarmed.origin == Origin::disk);
  CHECK(prewarmed.key == first.key());
  CHECK(prewarmed.binary_bytes == first.bytes().size());

  // The same request: the engine's memory, the same bytes (not a copy), no log, no disk read.
  const cache::Counters before = engine.stats();
  const CompiledBinary second = engine.compile(templated(), options, {}, "sm_90");
  CHECK(second.origin() == Origin::memory);
  CHECK(second.bytes().data() == first.bytes().data());
  CHECK(second.key() == first.key());
  CHECK(second.log().empty());
  const cache::Counters after = engine.stats();
  CHECK(after.memory_hits == before.memory_hits + 1);
  CHECK(after.disk_hits == before.disk_hits);
  CHECK(after.bytes_read == before.bytes_read);
  CHECK(after.compiles == before.compiles);
  // The first result is immutable: it still says it was compiled.
  CHECK(first.origin() == Origin::compiled);

  // Other options, another target: other requests.
  CHECK(engine.compile(templated(), {}, {}, "sm_90").origin() == Origin::compiled);
  CHECK(engine.compile(templated(), options, {}, "sm_80").origin() == Origin::compiled);
  CHECK(engine.stats().compiles == 3);
}

TEST_CASE("a fresh engine finds the binary on disk, and a binary outlives its engine", "[rtc][compile]") {
  test::TempDir dir;
  CompiledBinary compiled;
  CompiledBinary kept;
  {
    Engine engine(config_in(dir.path()));
    compiled = engine.compile(templated(), {}, {}, "sm_90");
    REQUIRE(compiled.origin() == Origin::compiled);
  }
  {
    Engine engine(config_in(dir.path()));
    kept = engine.compile(templated(), {}, {}, "sm_90");
    CHECK(kept.origin() == Origin::disk);
    CHECK(kept.log().empty());
    CHECK(engine.stats().compiles == 0);
  }
  // Both engines are gone; the bytes are not.
  CHECK(kept.key() == compiled.key());
  REQUIRE(kept.bytes().size() == compiled.bytes().size());
  CHECK(std::memcmp(kept.bytes().data(), compiled.bytes().data(), kept.bytes().size()) == 0);
}

TEST_CASE("name expressions come with their lowered symbols", "[rtc][compile]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const CompiledBinary binary =
      engine.compile(templated(), {}, {"demo::scale<float, 2>", "plain", "demo::scale<double, 3>"}, "sm_90");
  const auto& names = binary.lowered_names();
  REQUIRE(names.size() == 3);
  // Sorted by expression.
  CHECK(names[0].first == "demo::scale<double, 3>");
  CHECK(names[1].first == "demo::scale<float, 2>");
  CHECK(names[2].first == "plain");
  CHECK(names[2].second == "plain");
  for (const auto& [expression, lowered] : names) {
    INFO(expression << " -> " << lowered);
    CHECK_FALSE(lowered.empty());
    CHECK(as_text(binary.bytes()).find(lowered) != std::string_view::npos);  // the symbol is in the ELF
  }
  CHECK(names[0].second.rfind("_Z", 0) == 0);
  REQUIRE(binary.lowered_name("demo::scale<float, 2>") != nullptr);
  CHECK(*binary.lowered_name("demo::scale<float, 2>") == names[1].second);
  CHECK(binary.lowered_name("demo::scale<int, 2>") == nullptr);
  CHECK(binary.lowered_name("") == nullptr);
  // The same names in another order are the same binary (the key sorts them).
  CHECK(engine.compile(templated(), {}, {"plain", "demo::scale<double, 3>", "demo::scale<float, 2>"}, "sm_90").key() ==
        binary.key());
}

TEST_CASE("a compute_XX target gives PTX text", "[rtc][compile]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const CompiledBinary ptx = engine.compile(templated(), {}, {"plain"}, "compute_90");
  CHECK(ptx.kind() == BinaryKind::ptx);
  CHECK(ptx.target() == "compute_90");
  CHECK(as_text(ptx.bytes()).find(".entry plain") != std::string_view::npos);
  CHECK(as_text(ptx.bytes()).find(".target sm_90") != std::string_view::npos);
}

TEST_CASE("a hit in a mounted pack reports origin pack; prewarm reports it as disk", "[rtc][compile]") {
  test::TempDir dir;
  const std::filesystem::path pack = dir.path() / "kernels.kpack";
  {
    Engine source_engine(config_in(dir.path() / "origin"));
    const CompiledBinary compiled = source_engine.compile(templated(), {}, {"plain"}, "sm_90");
    const auto [hash, canonical] = source_engine.describe_key(templated(), {}, {"plain"}, "sm_90");
    cache::LookupResult found = source_engine.storage().local().get(hash, canonical);
    REQUIRE(found.outcome == cache::LookupOutcome::hit);
    cache::PackWriter writer(pack);
    REQUIRE(writer.add(*found.entry));
    writer.commit();
  }
  EngineConfig with_pack = config_in(dir.path() / "fresh");
  with_pack.packs = {pack.string()};
  {
    Engine engine(with_pack);
    const CompiledBinary binary = engine.compile(templated(), {}, {"plain"}, "sm_90");
    CHECK(binary.origin() == Origin::pack);
    CHECK(binary.log().empty());
    CHECK(starts_with_elf(binary.bytes()));
    CHECK(engine.stats().compiles == 0);
  }
  with_pack.cache.root = dir.path() / "fresh2";
  Engine engine(with_pack);
  CHECK(engine.prewarm(templated(), {}, {"plain"}, "sm_90").origin == Origin::disk);
}

TEST_CASE("compile errors and bad requests", "[rtc][compile]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const Source broken =
      Source::from_text("broken.cu", "#include <kiln/rtc.h>\nKILN_KERNEL void k(float* x) { x[0] = nope; }\n");
  try {
    (void)engine.compile(broken, {}, {}, "sm_90");
    FAIL("a compile error was expected");
  } catch (const CompileError& e) {
    CHECK(e.log().find("nope") != std::string::npos);
  }
  CHECK_THROWS_AS(engine.compile(templated(), {}, {}, "sm_1"), ConfigError);
  CHECK_THROWS_AS(engine.compile(templated(), {}, {""}, "sm_90"), ConfigError);
  if (engine.devices().empty()) {
    CHECK_THROWS_AS(engine.compile(templated()), DeviceUnavailable);  // "native" needs a device
  }
  // A failed request leaves nothing in memory: the next one compiles again (and fails again).
  CHECK_THROWS_AS(engine.compile(broken, {}, {}, "sm_90"), CompileError);

  const CompiledBinary empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS(empty.bytes(), Error);
  CHECK_THROWS_AS(empty.origin(), Error);
}

TEST_CASE("--no-default-device compiles as NVRTC does by default: an unannotated function is a host function",
          "[rtc][compile]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  // kiln adds -default-device, so an unannotated helper is a device function; without it NVRTC refuses the call
  // from a kernel, as cuda.core's compile of this source does.
  const Source source = Source::from_text("default_device.cu", R"(int twice(int v) { return 2 * v; }
extern "C" __global__ void k(int* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
)");
  const CompiledBinary by_default = engine.compile(source, {}, {}, "sm_90");
  CHECK(by_default.origin() == Origin::compiled);
  const Options host_default{"--no-default-device"};
  CHECK(engine.describe_key(source, host_default, {}, "sm_90").first != by_default.key());
  try {
    (void)engine.compile(source, host_default, {}, "sm_90");
    FAIL("NVRTC without -default-device was expected to refuse the call of a host function");
  } catch (const CompileError& e) {
    CHECK(e.log().find("twice") != std::string::npos);
  }
  // Annotated code compiles either way, under two keys.
  const Source annotated = Source::from_text("annotated.cu", R"(__device__ int twice(int v) { return 2 * v; }
extern "C" __global__ void k(int* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
)");
  const CompiledBinary plain = engine.compile(annotated, host_default, {}, "sm_90");
  CHECK(plain.origin() == Origin::compiled);
  CHECK(plain.key() != engine.compile(annotated, {}, {}, "sm_90").key());
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
