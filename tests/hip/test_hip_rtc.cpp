// The AMD compile lane with the real HIPRTC (no GPU needed): every built-in kernel compiled through
// the engine for gfx90a (wave 64), gfx1030 (wave 32) and gfx908 (wave 64); each code object's ELF
// header, e_flags and metadata checked; each kernel's argument list compared with the parameters NVRTC
// declares for the same kernel (count, sizes, offsets); lowered names compared with NVRTC's.
// Plus the compile lane's error paths, called directly through the vendor interface.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

#include "amdgpu_metadata.hpp"
#include "cubin_params.hpp"
#include "elf.hpp"
#include "engine_internal.hpp"
#include "kiln/embedded.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "test_support.hpp"
#include "lanes/lane.hpp"

namespace {

struct Builtin {
  std::string file;
  std::vector<std::string> names;  ///< from the "//! kiln-kernels: a; b<...>" line
};

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

std::vector<Builtin> builtins() {
  std::vector<Builtin> out;
  for (const kiln::EmbeddedFile& f : kiln::embedded_files()) {
    if (!f.name.ends_with(".cu")) continue;
    Builtin b{std::string(f.name), {}};
    constexpr std::string_view kTag = "//! kiln-kernels:";
    const std::size_t at = f.text.find(kTag);
    if (at != std::string_view::npos) {
      std::string_view list = f.text.substr(at + kTag.size());
      list = list.substr(0, list.find('\n'));
      while (!list.empty()) {
        const std::size_t semicolon = list.find(';');
        std::string name = trim(list.substr(0, semicolon));
        if (!name.empty()) b.names.push_back(std::move(name));
        if (semicolon == std::string_view::npos) break;
        list.remove_prefix(semicolon + 1);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::unique_ptr<kiln::vendor::Compiler> hiprtc_or_skip() {
  try {
    return kiln::vendor::load_hiprtc();
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no HIPRTC: ") + e.what());
  }
}

/// The parameters a CUBIN declares for a kernel (its .nv.info records; see cubin_params.hpp).
std::vector<kiln::ParamInfo> cubin_params(std::span<const std::byte> cubin, const std::string& kernel) {
  auto params = kiln::test::cubin_params(cubin, kernel);
  REQUIRE(params.has_value());
  return std::move(*params);
}

kiln::cache::Entry prewarmed_entry(kiln::Engine& engine, const Builtin& b, const std::string& target) {
  const kiln::Source source = kiln::Source::builtin(b.file);
  const kiln::PrewarmResult r = engine.prewarm(source, kiln::Options{}, b.names, target);
  CHECK(r.binary_bytes > 0);
  const auto [hash, canonical] = engine.describe_key(source, kiln::Options{}, b.names, target);
  REQUIRE(hash == r.key);
  auto found = engine.storage().local().get(hash, canonical);
  REQUIRE(found.entry.has_value());
  return std::move(*found.entry);
}

/// The symbol a kernel is found by: a name expression's lowered name, from the entry; an extern "C" kernel's
/// plain name is its own symbol, and no name expression (engine/src/c_kernels.hpp).
std::string lowered(const kiln::cache::Entry& entry, const std::string& expression) {
  for (const auto& n : entry.names) {
    if (n.expression == expression) return n.lowered;
  }
  if (!kiln::is_name_expression(expression)) return expression;
  FAIL("no lowered name for " << expression << " in the entry for " << entry.target);
  return {};
}

const kiln::vendor::CompileInput input_for(std::string_view source, std::string_view target,
                                           std::span<const std::string> flags,
                                           std::span<const std::string> names = {}) {
  return kiln::vendor::CompileInput{"bad.cu", source, {}, names, flags, target};
}

}  // namespace

TEST_CASE("HIPRTC loads: identity with HIP and comgr versions, libraries, known targets", "[hip][rtc]") {
  const auto compiler = hiprtc_or_skip();
  CHECK(compiler->vendor() == kiln::Vendor::hip);
  INFO("identity: " << compiler->identity());
  CHECK_THAT(compiler->identity(), Catch::StartsWith("hiprtc hip-") && Catch::Contains(" comgr-"));
  const auto libraries = compiler->libraries();
  REQUIRE(libraries.size() == 2);
  CHECK(libraries[0].role == "hiprtc");
  CHECK(std::filesystem::exists(libraries[0].path));
  CHECK(libraries[1].role == "comgr");
  CHECK(std::filesystem::exists(libraries[1].path));
  const auto targets = compiler->supported_targets();
  for (const char* t : {"gfx90a", "gfx908", "gfx1030"}) CHECK(std::count(targets.begin(), targets.end(), t) == 1);
  if (compiler->identity().starts_with("hiprtc hip-5.")) {
    // comgr 2.4 (HIP 5.2) aborts the process on these: they must not be offered.
    for (const char* t : {"gfx940", "gfx942", "gfx950", "gfx1100"})
      CHECK(std::count(targets.begin(), targets.end(), t) == 0);
  }
}

TEST_CASE("every built-in kernel: HIPRTC code objects for gfx90a, gfx1030, gfx908 match what NVRTC declares",
          "[hip][rtc][builtin]") {
  (void)hiprtc_or_skip();
  const std::vector<Builtin> sources = builtins();
  REQUIRE(sources.size() >= 6);  // saxpy, map, reduce, scan, matmul, histogram
  kiln::test::TempDir cache("kiln-hip-rtc");
  kiln::EngineConfig config;
  config.cache.root = cache.path();
  kiln::Engine engine(config);

  struct Target {
    std::string name;
    std::uint32_t mach;
    std::uint32_t wave;
  };
  const Target targets[] = {{"gfx90a", 0x3f, 64}, {"gfx1030", 0x36, 32}, {"gfx908", 0x30, 64}};
  std::size_t kernels_checked = 0;
  for (const Builtin& b : sources) {
    INFO("source " << b.file);
    REQUIRE_FALSE(b.names.empty());  // every kernel source lists its kernels
    const kiln::cache::Entry cuda = prewarmed_entry(engine, b, "sm_90");
    REQUIRE(cuda.payload_kind == kiln::PayloadKind::cubin);
    const auto cuda_kernels = kiln::elf::kernel_names(kiln::PayloadKind::cubin, cuda.payload);
    for (const Target& t : targets) {
      INFO("target " << t.name);
      const kiln::cache::Entry hip = prewarmed_entry(engine, b, t.name);
      CHECK(hip.vendor == kiln::Vendor::hip);
      REQUIRE(hip.payload_kind == kiln::PayloadKind::amdgpu_code_object);
      auto parsed = kiln::elf::parse(hip.payload);
      REQUIRE(std::holds_alternative<kiln::elf::Image>(parsed));
      const auto& image = std::get<kiln::elf::Image>(parsed);
      CHECK(image.machine == 0xe0);  // EM_AMDGPU
      CHECK((image.flags & 0xffu) == t.mach);
      CHECK(kiln::amdgpu::target_from_flags(image.flags) == t.name);  // features "any": no suffix
      CHECK((image.abi_version == 2 || image.abi_version == 3));      // code object v4 or v5

      auto metadata = kiln::amdgpu::read_metadata(hip.payload);
      REQUIRE(std::holds_alternative<kiln::amdgpu::CodeObjectMetadata>(metadata));
      const auto& md = std::get<kiln::amdgpu::CodeObjectMetadata>(metadata);
      CHECK_THAT(md.target, Catch::EndsWith(t.name));
      const auto hip_kernels = kiln::elf::kernel_names(kiln::PayloadKind::amdgpu_code_object, hip.payload);

      for (const std::string& expression : b.names) {
        INFO("kernel " << expression);
        const std::string name = lowered(hip, expression);
        CHECK(name == lowered(cuda, expression));  // one lowered name, both compilers
        CHECK(std::count(hip_kernels.begin(), hip_kernels.end(), name) == 1);
        CHECK(std::count(cuda_kernels.begin(), cuda_kernels.end(), name) == 1);
        const kiln::amdgpu::KernelMetadata* k = kiln::amdgpu::find_kernel(md, name);
        REQUIRE(k != nullptr);
        CHECK(k->wavefront_size == t.wave);
        CHECK(k->kernarg_segment_size >= (k->args.empty() ? 0 : k->args.back().offset));
        const auto params = kiln::amdgpu::amdgpu_params(hip.payload, name);
        REQUIRE(params.has_value());
        const auto declared = cubin_params(cuda.payload, name);
        REQUIRE(params->size() == declared.size());
        REQUIRE_FALSE(declared.empty());
        for (std::size_t i = 0; i < declared.size(); ++i) {
          INFO("parameter " << i);
          CHECK((*params)[i].size == declared[i].size);
          CHECK((*params)[i].offset == declared[i].offset);
        }
        ++kernels_checked;
      }
    }
  }
  CHECK(kernels_checked >= 3 * 14);
}

TEST_CASE("saxpy(int, float, const float*, float*) has 4 arguments: sizes 4, 4, 8, 8 at 0, 4, 8, 16", "[hip][rtc]") {
  const auto compiler = hiprtc_or_skip();
  const kiln::Source saxpy = kiln::Source::builtin("saxpy");
  const std::vector<std::string> flags = {"-std=c++17", "--offload-arch=gfx90a", "-DKILN_WARP_SIZE=64"};
  const std::vector<std::string> names = {"saxpy"};
  const auto out = compiler->compile({saxpy.name(), saxpy.text(), kiln::vendor::header_texts(saxpy.headers()), names, flags, "gfx90a"});
  REQUIRE(out.kind == kiln::PayloadKind::amdgpu_code_object);
  REQUIRE(out.lowered.size() == 1);
  CHECK(out.lowered[0].lowered == "saxpy");
  CHECK(out.ptx.empty());
  const auto params = kiln::amdgpu::amdgpu_params(out.binary, "saxpy");
  REQUIRE(params.has_value());
  REQUIRE(params->size() == 4);
  const std::size_t sizes[] = {4, 4, 8, 8}, offsets[] = {0, 4, 8, 16};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK((*params)[i].size == sizes[i]);
    CHECK((*params)[i].offset == offsets[i]);
  }
}

TEST_CASE("a syntax error is a CompileError naming the source and line, with the whole log and options",
          "[hip][rtc][errors]") {
  const auto compiler = hiprtc_or_skip();
  const std::vector<std::string> flags = {"-std=c++17", "--offload-arch=gfx1030"};
  const std::string source = "extern \"C\" __global__ void k(int* p) {\n  p[0] = 1;\n  p[1] = undefined_thing;\n}\n";
  try {
    (void)compiler->compile(input_for(source, "gfx1030", flags));
    FAIL("compiled a source with an error");
  } catch (const kiln::CompileError& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains("bad.cu:3:") && Catch::Contains("undefined_thing") &&
                             Catch::Contains("HIPRTC_ERROR_COMPILATION") && Catch::Contains("gfx1030"));
    CHECK_THAT(e.log(), Catch::Contains("undefined_thing"));
    CHECK(e.source_name() == "bad.cu");
    CHECK(e.options() == flags);
  }
}

TEST_CASE("an unknown target is refused before HIPRTC runs (it would abort the process)", "[hip][rtc][errors]") {
  const auto compiler = hiprtc_or_skip();
  const std::vector<std::string> flags = {"--offload-arch=gfx942"};
  const std::string source = "extern \"C\" __global__ void k() {}\n";
  CHECK_THROWS_AS(compiler->compile(input_for(source, "gfx9999", flags)), kiln::ConfigError);
  if (compiler->identity().starts_with("hiprtc hip-5.")) {
    CHECK_THROWS_WITH(compiler->compile(input_for(source, "gfx942", flags)),
                      Catch::Contains("not supported by hiprtc"));
  }
  // Through the engine too: a ConfigError, and this process is still alive to say so.
  kiln::test::TempDir cache("kiln-hip-rtc");
  kiln::EngineConfig config;
  config.cache.root = cache.path();
  kiln::Engine engine(config);
  CHECK_THROWS_AS(engine.prewarm(kiln::Source::builtin("saxpy"), {}, {"saxpy"}, "gfx9999"), kiln::ConfigError);
}

TEST_CASE("an empty source and an unknown name expression are errors, not crashes", "[hip][rtc][errors]") {
  const auto compiler = hiprtc_or_skip();
  const std::vector<std::string> flags = {"--offload-arch=gfx90a"};
  CHECK_THROWS_WITH(compiler->compile(input_for("", "gfx90a", flags)), Catch::Contains("empty"));
  const std::vector<std::string> names = {"no_such_kernel<int>"};
  CHECK_THROWS_AS(compiler->compile(input_for("extern \"C\" __global__ void k() {}\n", "gfx90a", flags, names)),
                  kiln::CompileError);
}

TEST_CASE("threads compiling at once get the same code objects as one thread", "[hip][rtc]") {
  // Unserialized, HIPRTC 5.2 gave a different code object (extra device-library functions) about once
  // in 75 concurrent pairs; the block serializes compiles, so every pair must match.
  const auto compiler = hiprtc_or_skip();
  const kiln::Source saxpy = kiln::Source::builtin("saxpy");
  const std::vector<std::string> names = {"saxpy"};
  const std::vector<std::string> flags90a = {"-std=c++17", "--offload-arch=gfx90a", "-DKILN_WARP_SIZE=64"};
  const std::vector<std::string> flags1030 = {"-std=c++17", "--offload-arch=gfx1030", "-DKILN_WARP_SIZE=32"};
  const auto compile = [&](const std::vector<std::string>& flags, const char* target) {
    return compiler->compile({saxpy.name(), saxpy.text(), kiln::vendor::header_texts(saxpy.headers()), names, flags, target}).binary;
  };
  const auto sequential_a = compile(flags90a, "gfx90a");
  const auto sequential_b = compile(flags1030, "gfx1030");
  CHECK(sequential_a != sequential_b);
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    std::vector<std::byte> parallel_a, parallel_b;
    std::thread ta([&] { parallel_a = compile(flags90a, "gfx90a"); });
    std::thread tb([&] { parallel_b = compile(flags1030, "gfx1030"); });
    ta.join();
    tb.join();
    CHECK(parallel_a == sequential_a);
    CHECK(parallel_b == sequential_b);
  }
}

TEST_CASE("the HIPRTC lane refuses LTO-IR, naming clang offload bitcode and -fgpu-rdc", "[hip][rtc][ltoir]") {
  const auto compiler = hiprtc_or_skip();
  const kiln::Source saxpy = kiln::Source::builtin("saxpy");
  const std::vector<std::string> flags = {"-std=c++17", "--offload-arch=gfx90a", "-DKILN_WARP_SIZE=64"};
  const std::vector<std::string> names = {"saxpy"};
  const auto headers = kiln::vendor::header_texts(saxpy.headers());
  kiln::vendor::CompileInput input{saxpy.name(), saxpy.text(), headers, names, flags, "gfx90a"};
  input.lto_ir = true;
  try {
    (void)compiler->compile(input);
    FAIL("HIPRTC was asked for LTO-IR and answered");
  } catch (const kiln::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("gfx90a") != std::string::npos);
    CHECK(what.find("-fgpu-rdc") != std::string::npos);
    CHECK(what.find("clang offload bitcode") != std::string::npos);
    CHECK(what.find("kiln does not produce") != std::string::npos);
  }
  // The same input without the request compiles: the refusal is the LTO-IR request's alone.
  input.lto_ir = false;
  CHECK(compiler->compile(input).kind == kiln::PayloadKind::amdgpu_code_object);
}
