// LTO-IR (lto_XY targets) and relocatable device code (--relocatable-device-code) through the engine,
// with NVRTC and no GPU: the kind, LTO-IR's signature, lowered names, the key, disk hits across engines,
// a damaged LTO-IR entry refused and compiled again, the AMD refusals, and a relocatable CUBIN's ELF
// type. Needs NVRTC; skips without it. Nothing here is loaded on a GPU.
#include <catch2/catch.hpp>

#include "catch_run.hpp"

#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <variant>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "test_support.hpp"

using namespace kiln;

namespace {

EngineConfig config_in(const std::filesystem::path& root) {
  EngineConfig config;
  config.cache.root = root;
  config.runtime = false;  // compile-only: the same on a machine with a GPU
  return config;
}

const Source& templated() {
  static const Source source = Source::from_text("ltoir.cu", R"(#include <kiln/rtc.h>
KILN_KERNEL void plain(float* x) { x[threadIdx.x] += 1.0f; }
namespace demo { template <typename T, int N> __global__ void scale(T* p) { p[threadIdx.x] *= T(N); } }
)");
  return source;
}

/// A kernel that calls a device function defined in another translation unit: only relocatable code
/// (or LTO-IR) can leave it unresolved for a link step.
const Source& calls_extern() {
  static const Source source = Source::from_text("extern_call.cu", R"(#include <kiln/rtc.h>
__device__ float elsewhere(float x);
KILN_KERNEL void uses_elsewhere(float* x) { x[threadIdx.x] = elsewhere(x[threadIdx.x]); }
)");
  return source;
}

bool has_ltoir_magic(std::span<const std::byte> bytes) {
  return bytes.size() >= 32 && std::memcmp(bytes.data(), "\xED\x43\x4E\x7F", 4) == 0;
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

/// ELF e_type (u16 at offset 16 of an ELF64 header): 1 ET_REL (relocatable), 2 ET_EXEC.
int elf_type(std::span<const std::byte> bytes) {
  REQUIRE(bytes.size() > 18);
  REQUIRE(std::memcmp(bytes.data(), "\177ELF", 4) == 0);
  return static_cast<int>(bytes[16]) | (static_cast<int>(bytes[17]) << 8);
}

const std::vector<std::string> kNames = {"demo::scale<float, 2>", "plain", "demo::scale<double, 3>"};

}  // namespace

TEST_CASE("an lto_90 target gives LTO-IR with lowered names, under its own key", "[rtc][ltoir]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const CompiledBinary lto = engine.compile(templated(), {}, kNames, "lto_90");
  CHECK(lto.origin() == Origin::compiled);
  CHECK(lto.kind() == BinaryKind::ltoir);
  CHECK(lto.target() == "lto_90");
  CHECK(has_ltoir_magic(lto.bytes()));
  CHECK(lto.bytes().size() > 256);
  CHECK(lto.key() == engine.describe_key(templated(), {}, kNames, "lto_90").first);

  // Name expressions lower as for a CUBIN of the same source.
  const CompiledBinary cubin = engine.compile(templated(), {}, kNames, "sm_90");
  CHECK(cubin.kind() == BinaryKind::cubin);
  REQUIRE(lto.lowered_names().size() == 3);
  CHECK(lto.lowered_names() == cubin.lowered_names());
  CHECK(lto.lowered_name("demo::scale<float, 2>")->starts_with("_Z"));
  CHECK(*lto.lowered_name("plain") == "plain");
  CHECK(lto.key() != cubin.key());
  CHECK(lto.key() != engine.compile(templated(), {}, kNames, "compute_90").key());

  // lto_90a is another target, another binary; prewarm finds what compile stored.
  const CompiledBinary lto_a = engine.compile(templated(), {}, kNames, "lto_90a");
  CHECK(lto_a.kind() == BinaryKind::ltoir);
  CHECK(lto_a.key() != lto.key());
  const PrewarmResult prewarmed = engine.prewarm(templated(), {}, kNames, "lto_90");
  CHECK(prewarmed.origin == Origin::disk);
  CHECK(prewarmed.key == lto.key());
  CHECK(prewarmed.binary_bytes == lto.bytes().size());

  // The stored entry says what it is.
  const auto [hash, canonical] = engine.describe_key(templated(), {}, kNames, "lto_90");
  const cache::LookupResult found = engine.storage().local().get(hash, canonical);
  REQUIRE(found.outcome == cache::LookupOutcome::hit);
  CHECK(found.entry->payload_kind == PayloadKind::ltoir);
  CHECK(found.entry->vendor == Vendor::cuda);
  CHECK(found.entry->target == "lto_90");
  CHECK(found.entry->aux.empty());
  CHECK(found.entry->canonical_key.find("-dlto") != std::string::npos);
  CHECK(found.entry->canonical_key.find("-arch=compute_90") != std::string::npos);
}

TEST_CASE("LTO-IR leaves an extern device function for the link step", "[rtc][ltoir]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  // A whole-program CUBIN cannot be made: ptxas finds the function unresolved.
  CHECK_THROWS_AS(engine.compile(calls_extern(), {}, {}, "sm_90"), CompileError);
  const CompiledBinary lto = engine.compile(calls_extern(), {}, {}, "lto_90");
  CHECK(lto.kind() == BinaryKind::ltoir);
  CHECK(has_ltoir_magic(lto.bytes()));
  // LTO-IR is relocatable by nature: --relocatable-device-code changes neither its key nor its bytes.
  const CompiledBinary with_rdc = engine.compile(calls_extern(), {"--relocatable-device-code"}, {}, "lto_90");
  CHECK(with_rdc.key() == lto.key());
  CHECK(same_bytes(with_rdc.bytes(), lto.bytes()));
}

TEST_CASE("a second engine on the same cache gets LTO-IR from disk, byte for byte", "[rtc][ltoir]") {
  test::TempDir dir;
  CompiledBinary compiled;
  {
    Engine engine(config_in(dir.path()));
    compiled = engine.compile(templated(), {}, kNames, "lto_90");
    REQUIRE(compiled.origin() == Origin::compiled);
  }
  Engine engine(config_in(dir.path()));
  const CompiledBinary again = engine.compile(templated(), {}, kNames, "lto_90");
  CHECK(again.origin() == Origin::disk);
  CHECK(again.kind() == BinaryKind::ltoir);
  CHECK(again.key() == compiled.key());
  CHECK(same_bytes(again.bytes(), compiled.bytes()));
  CHECK(again.lowered_names() == compiled.lowered_names());
  CHECK(engine.stats().compiles == 0);
  CHECK(engine.stats().disk_hits == 1);

  // NVRTC 13.0's LTO-IR is deterministic: a compile into another cache gives the same bytes.
  test::TempDir other;
  Engine fresh(config_in(other.path()));
  const CompiledBinary recompiled = fresh.compile(templated(), {}, kNames, "lto_90");
  CHECK(recompiled.origin() == Origin::compiled);
  CHECK(same_bytes(recompiled.bytes(), compiled.bytes()));
}

TEST_CASE("an LTO-IR entry without LTO-IR's signature is refused, removed and compiled again", "[rtc][ltoir]") {
  test::TempDir dir;
  CompiledBinary good;
  std::filesystem::path file;
  cache::Entry damaged;
  {
    Engine engine(config_in(dir.path()));
    good = engine.compile(templated(), {"-DDAMAGED=1"}, {}, "lto_90");
    const std::vector<cache::EntryFile> files = engine.storage().local().list();
    REQUIRE(files.size() == 1);
    file = files[0].path;
    auto read = engine.storage().local().read_file(file);
    REQUIRE(std::holds_alternative<cache::Entry>(read));
    damaged = std::get<cache::Entry>(read);
    REQUIRE(damaged.payload_kind == PayloadKind::ltoir);
    damaged.payload[1] = static_cast<std::byte>(0x00);  // the magic's second byte; checksum and key stay valid
    // The store refuses to write it, naming why...
    CHECK_FALSE(engine.storage().local().put(damaged));
    CHECK_THAT(engine.storage().local().last_put_error(), Catch::Contains("LTO-IR's signature"));
  }
  // ...and the parser refuses it however it got there.
  const std::vector<std::byte> bytes = cache::serialize(damaged);
  const auto parsed = cache::parse(bytes);
  REQUIRE(std::holds_alternative<cache::ContentError>(parsed));
  CHECK_THAT(std::get<cache::ContentError>(parsed).reason, Catch::Contains("LTO-IR's signature"));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  // A planted entry with an honest checksum but the wrong kind of bytes for its kind: the same.
  Engine engine(config_in(dir.path()));
  const CompiledBinary again = engine.compile(templated(), {"-DDAMAGED=1"}, {}, "lto_90");
  CHECK(again.origin() == Origin::compiled);
  CHECK(has_ltoir_magic(again.bytes()));
  CHECK(same_bytes(again.bytes(), good.bytes()));
  CHECK(engine.stats().corrupt_removed == 1);
  CHECK(engine.stats().compiles == 1);
  // The entry written in its place reads back.
  auto reread = engine.storage().local().read_file(file);
  REQUIRE(std::holds_alternative<cache::Entry>(reread));
  CHECK(has_ltoir_magic(std::get<cache::Entry>(reread).payload));

  // Other kinds' payloads are not judged by the entry format (their driver checks them at load), under
  // their own targets; under lto_90 a CUBIN is an entry relabelled, refused.
  cache::Entry cubin = damaged;
  cubin.payload_kind = PayloadKind::cubin;
  CHECK(std::holds_alternative<cache::ContentError>(cache::parse(cache::serialize(cubin))));
  cubin.target = "sm_90";
  CHECK(std::holds_alternative<cache::Entry>(cache::parse(cache::serialize(cubin))));
  // An LTO-IR entry under the HIP vendor, or with aux bytes, is refused too.
  cache::Entry hip = std::get<cache::Entry>(reread);
  hip.vendor = Vendor::hip;
  CHECK(std::holds_alternative<cache::ContentError>(cache::parse(cache::serialize(hip))));
  cache::Entry with_aux = std::get<cache::Entry>(reread);
  with_aux.aux = {std::byte{0}};
  CHECK(std::holds_alternative<cache::ContentError>(cache::parse(cache::serialize(with_aux))));
}

TEST_CASE("AMD targets: LTO and relocatable code are refused, naming the HIP equivalent", "[rtc][ltoir][hip]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  // Both are refused before any compiler is needed (this machine's HIPRTC is not asked).
  for (const auto& [options, target] : std::vector<std::pair<Options, std::string>>{
           {Options{"--relocatable-device-code"}, "gfx90a"}, {Options{}, "lto_gfx90a"}}) {
    INFO(target);
    try {
      (void)engine.compile(templated(), options, {}, target);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find("-fgpu-rdc") != std::string::npos);
      CHECK(what.find("clang offload bitcode") != std::string::npos);
      CHECK(what.find("kiln does not produce") != std::string::npos);
    }
  }
  CHECK(engine.stats().compiles == 0);
  // The raw flags that would ask either compiler for it are refused when the options are made.
  CHECK_THROWS_AS(Options{"-Xhip=-fgpu-rdc"}, ConfigError);
  CHECK_THROWS_AS(Options{"-Xcuda=-dlto"}, ConfigError);
}

TEST_CASE("--relocatable-device-code gives a relocatable CUBIN under another key", "[rtc][rdc]") {
  test::TempDir dir;
  Engine engine(config_in(dir.path()));
  const CompiledBinary whole = engine.compile(templated(), {}, {"plain"}, "sm_90");
  const CompiledBinary rdc = engine.compile(templated(), {"--relocatable-device-code"}, {"plain"}, "sm_90");
  CHECK(rdc.origin() == Origin::compiled);
  CHECK(rdc.kind() == BinaryKind::cubin);
  CHECK(rdc.key() != whole.key());
  CHECK(elf_type(whole.bytes()) == 2);  // ET_EXEC
  CHECK(elf_type(rdc.bytes()) == 1);    // ET_REL: for a link step
  CHECK(rdc.lowered_names() == whole.lowered_names());
  // The spellings are one option (the same canonical options: this engine's memory answers), one key.
  CHECK(engine.compile(templated(), {"-rdc=true"}, {"plain"}, "sm_90").key() == rdc.key());
  CHECK(engine.compile(templated(), {"-rdc"}, {"plain"}, "sm_90").origin() == Origin::memory);
  {
    Engine other(config_in(dir.path()));
    CHECK(other.compile(templated(), {"-rdc"}, {"plain"}, "sm_90").origin() == Origin::disk);
  }
  // An extern device function stays unresolved in relocatable code.
  const CompiledBinary linked_later = engine.compile(calls_extern(), {"--relocatable-device-code"}, {}, "sm_90");
  CHECK(elf_type(linked_later.bytes()) == 1);
  const auto [hash, canonical] = engine.describe_key(templated(), {"-rdc"}, {"plain"}, "sm_90");
  CHECK(hash == rdc.key());
  CHECK(canonical.find("-rdc=true") != std::string::npos);
}

int main(int argc, char** argv) {
  try {
    EngineConfig config;
    config.cache.disabled = true;
    config.runtime = false;
    Engine probe(config);
    (void)probe.describe_key(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
  } catch (const DeviceUnavailable& e) {
    test::skip(std::string("NVRTC is not available: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
