// CONTRACT tests of kiln's HIP block against a synthetic HIP runtime (fake_hip.cpp). They check what
// kiln asks of HIP (which library, which calls, in which thread, with which bytes) and how it reads
// HIP's answers (versions, devices, errors). They are NOT hardware validation: no AMD GPU ran anything.
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "amdgpu_metadata.hpp"
#include "elf_builder.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "stderr_capture.hpp"
#include "test_support.hpp"
#include "lanes/hip_symbols.hpp"
#include "lanes/lane.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using kiln::test::ScopedEnv;
using kiln::test::TempDir;

/// One synthetic library as the block will load it, plus its control functions.
struct Fake {
  void* handle = nullptr;
  void (*reset)() = nullptr;
  void (*set)(const char*, const char*) = nullptr;
  void (*set_code)(const void*, std::size_t) = nullptr;
  const char* (*calls_text)() = nullptr;
  std::size_t (*last_launch)(void*, std::size_t) = nullptr;

  explicit Fake(const fs::path& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(handle != nullptr);
    reset = reinterpret_cast<decltype(reset)>(dlsym(handle, "fake_hip_reset"));
    set = reinterpret_cast<decltype(set)>(dlsym(handle, "fake_hip_set"));
    set_code = reinterpret_cast<decltype(set_code)>(dlsym(handle, "fake_hip_set_code"));
    calls_text = reinterpret_cast<decltype(calls_text)>(dlsym(handle, "fake_hip_calls"));
    last_launch = reinterpret_cast<decltype(last_launch)>(dlsym(handle, "fake_hip_last_launch"));
    REQUIRE((reset && set && set_code && calls_text && last_launch));
  }
  void operator()(const std::string& key, const std::string& value) const { set(key.c_str(), value.c_str()); }
  [[nodiscard]] std::vector<std::string> calls() const {
    std::vector<std::string> lines;
    std::istringstream in(calls_text());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  /// Calls whose name (second word) is `name`.
  [[nodiscard]] std::vector<std::string> calls_to(const std::string& name) const {
    std::vector<std::string> out;
    for (const std::string& line : calls()) {
      const std::size_t begin = line.find(' ') + 1;
      if (line.compare(begin, line.find(' ', begin) - begin, name) == 0) out.push_back(line);
    }
    return out;
  }
};

/// A ROCm-like directory (<root>/lib) holding copies of the synthetic library under chosen names.
class FakeRocm {
 public:
  FakeRocm() : m_dir("kiln-fake-rocm") { fs::create_directories(lib()); }
  [[nodiscard]] fs::path lib() const { return m_dir.path() / "lib"; }
  [[nodiscard]] const fs::path& root() const { return m_dir.path(); }
  /// Copies `variant` to lib/<name> (a copy: each file is its own library with its own state).
  fs::path install(const char* variant, const std::string& name) {
    fs::copy_file(variant, lib() / name, fs::copy_options::overwrite_existing);
    return lib() / name;
  }
  void link(const std::string& name, const std::string& target) { fs::create_symlink(target, lib() / name); }

 private:
  TempDir m_dir;
};

std::vector<std::string> flags_for(const char* target) {
  return {"-std=c++17", std::string("--offload-arch=") + target};
}

/// A real code object from the real HIPRTC (found outside any fake ROCm directory).
std::vector<std::byte> real_code_object(const std::string& source, const std::vector<std::string>& names,
                                        const char* target = "gfx90a") {
  TempDir empty("kiln-no-rocm");
  ScopedEnv rocm("ROCM_PATH", empty.path().c_str());
  std::unique_ptr<kiln::vendor::Compiler> compiler;
  try {
    compiler = kiln::vendor::load_hiprtc();
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no HIPRTC to build code objects with: ") + e.what());
  }
  const auto flags = flags_for(target);
  return compiler->compile({"real.cu", source, {}, names, flags, target}).binary;
}

kiln::cache::Entry entry_for(std::vector<std::byte> payload, const char* target = "gfx90a") {
  kiln::cache::Entry e;
  e.vendor = kiln::Vendor::hip;
  e.payload_kind = kiln::PayloadKind::amdgpu_code_object;
  e.target = target;
  e.key_hash = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  e.payload = std::move(payload);
  return e;
}

const std::vector<kiln::test::KernelSpec> kSaxpySpec = {{"saxpy",
                                                         {{0, 4, "by_value"},
                                                          {4, 4, "by_value"},
                                                          {8, 8, "global_buffer"},
                                                          {16, 8, "global_buffer"},
                                                          {24, 8, "hidden_global_offset_x"},
                                                          {32, 8, "hidden_global_offset_y"},
                                                          {40, 8, "hidden_global_offset_z"}},
                                                         48,
                                                         64}};

#if KILN_HAVE_CUDA_LANE
/// NVRTC still compiles in this process (the CUDA lane does not depend on the AMD one).
void check_cuda_lane_works() {
  std::unique_ptr<kiln::vendor::Compiler> nvrtc;
  try {
    nvrtc = kiln::vendor::load_nvrtc();
  } catch (const kiln::Error& e) {
    FAIL("NVRTC unavailable, cannot show the CUDA lane still works: " << e.what());
  }
  const std::vector<std::string> flags = {"-arch=sm_90", "-default-device"};
  const std::vector<std::string> names = {"k"};
  const auto out =
      nvrtc->compile({"k.cu", "extern \"C\" __global__ void k(int* p) { p[0] = 1; }\n", {}, names, flags, "sm_90"});
  CHECK(out.kind == kiln::PayloadKind::cubin);
  CHECK_FALSE(out.binary.empty());
}
#else
void check_cuda_lane_works() { WARN("CUDA lane compiled out: nothing to check"); }
#endif

}  // namespace

TEST_CASE("the synthetic runtime exports every symbol the block's lists name", "[hip][contract]") {
  void* full = dlopen(KILN_FAKE_HIP_FULL, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(full != nullptr);
  std::vector<std::string> names;
#define KILN_NAME(requirement, name, type) names.emplace_back(#name);
  KILN_HIP_RUNTIME_SYMBOLS(KILN_NAME)
  KILN_HIPRTC_SYMBOLS(KILN_NAME)
#undef KILN_NAME
  REQUIRE(names.size() > 30);
  for (const std::string& name : names) {
    if (name == "hipStreamGetDevice") continue;  // optional: its absence is a case the block handles
    INFO(name);
    CHECK(dlsym(full, name.c_str()) != nullptr);
  }
  // Nothing the block needs involves managed memory.
  CHECK(std::find(names.begin(), names.end(), "hipMallocManaged") == names.end());
}

TEST_CASE("probing: ROCM_PATH beats the system path; newest soname first; HIPRTC in libhiprtc first",
          "[hip][contract]") {
  SECTION("the runtime from ROCM_PATH, .so.6 before .so.5") {
    FakeRocm rocm;
    rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
    const fs::path six = rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.6");
    ScopedEnv env("ROCM_PATH", rocm.root().c_str());
    const auto runtime = kiln::vendor::load_hip_runtime();
    REQUIRE(runtime->libraries().size() == 1);
    CHECK(runtime->libraries()[0].role == "hip runtime");
    CHECK(runtime->libraries()[0].path == six.string());
  }
  SECTION("HIPRTC: libhiprtc.so.N before the symbols inside libamdhip64") {
    FakeRocm rocm;
    rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.6");
    const fs::path hiprtc = rocm.install(KILN_FAKE_HIP_FULL, "libhiprtc.so.5");
    ScopedEnv env("ROCM_PATH", rocm.root().c_str());
    CHECK(kiln::vendor::load_hiprtc()->libraries().at(0).path == hiprtc.string());
  }
  SECTION("HIP 7 layout: a libamdhip64 without HIPRTC is skipped for compiling, used for running") {
    FakeRocm rocm;
    const fs::path seven = rocm.install(KILN_FAKE_HIP_NO_RTC, "libamdhip64.so.7");
    const fs::path five = rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
    ScopedEnv env("ROCM_PATH", rocm.root().c_str());
    CHECK(kiln::vendor::load_hip_runtime()->libraries().at(0).path == seven.string());
    CHECK(kiln::vendor::load_hiprtc()->libraries().at(0).path == five.string());
  }
  SECTION("without ROCM_PATH (and no /opt/rocm), the loader's path: the system HIP, no device, no error") {
    if (dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL) == nullptr) {
      WARN("no system libamdhip64.so.5 here: the fallback to the loader's path is shown in the no-AMD child test only");
      return;
    }
    TempDir empty("kiln-empty-rocm");
    ScopedEnv env("ROCM_PATH", empty.path().c_str());
    const auto runtime = kiln::vendor::load_hip_runtime();
    CHECK(runtime->libraries().at(0).path.find(empty.path().string()) == std::string::npos);
    CHECK(runtime->devices().empty());  // the real HIP says hipErrorNoDevice on this GPU-less machine
  }
}

TEST_CASE("versions: the runtime from hipRuntimeGetVersion, HIPRTC from its file name, else the runtime's",
          "[hip][contract]") {
  FakeRocm rocm;
  const fs::path file = rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5.9.4242");
  rocm.link("libamdhip64.so.5", "libamdhip64.so.5.9.4242");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("version", "60342134");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  CHECK(runtime->libraries().at(0).version == "6.3.42134");
  const auto compiler = kiln::vendor::load_hiprtc();
  CHECK(compiler->libraries().at(0).version == "5.9.4242");
  CHECK_THAT(compiler->identity(), Catch::StartsWith("hiprtc hip-5.9.4242"));

  FakeRocm plain;  // a file name without a version: the library's hipRuntimeGetVersion answers
  plain.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake plain_fake(plain.lib() / "libamdhip64.so.5");
  plain_fake("version", "70112345");
  ScopedEnv plain_env("ROCM_PATH", plain.root().c_str());
  CHECK_THAT(kiln::vendor::load_hiprtc()->identity(), Catch::StartsWith("hiprtc hip-7.1.12345"));
}

TEST_CASE("devices: full target id from gcnArchName, warp size, hipInit first, 5.x-layout properties",
          "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("devices", "2");
  fake("arch.1", "gfx1030");
  fake("warp.1", "32");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  REQUIRE(runtime->devices().size() == 2);
  CHECK(runtime->vendor() == kiln::Vendor::hip);
  CHECK(runtime->devices()[0].target == "gfx90a:sramecc+:xnack-");
  CHECK(runtime->devices()[0].warp_size == 64);
  CHECK(runtime->devices()[0].name == "Fake AMD GPU 0");
  CHECK(runtime->devices()[1].target == "gfx1030");
  CHECK(runtime->devices()[1].warp_size == 32);
  CHECK(runtime->devices()[1].vendor == kiln::Vendor::hip);
  const auto calls = fake.calls();
  REQUIRE_FALSE(calls.empty());
  const auto position = [&](const std::string& call) {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].find(' ' + call) != std::string::npos) return i;
    }
    return calls.size();
  };
  CHECK(position("hipInit") < position("hipGetDeviceCount"));
  // The explicitly versioned 5.x-layout symbol is preferred (HIP 6+ may repoint the plain name).
  CHECK(fake.calls_to("hipGetDevicePropertiesR0000").size() == 2);
  CHECK(fake.calls_to("hipGetDeviceProperties").empty());
}

TEST_CASE("no device is zero devices; a broken driver is DeviceUnavailable naming the call", "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  fake("fail.hipInit", "100");  // hipErrorNoDevice
  const auto deviceless = kiln::vendor::load_hip_runtime();
  CHECK(deviceless->devices().empty());
  CHECK_THROWS_AS(deviceless->load_module(0, entry_for(kiln::test::fake_code_object(kSaxpySpec))), kiln::ConfigError);
  CHECK_THROWS_AS(deviceless->allocate(0, 16), kiln::ConfigError);
  fake("fail.hipInit", "0");
  fake("fail.hipGetDeviceCount", "100");
  CHECK(kiln::vendor::load_hip_runtime()->devices().empty());
  fake("fail.hipGetDeviceCount", "0");
  fake("fail.hipInit", "35");  // hipErrorInsufficientDriver
  CHECK_THROWS_AS(kiln::vendor::load_hip_runtime(), kiln::DeviceUnavailable);
  CHECK_THROWS_WITH(kiln::vendor::load_hip_runtime(), Catch::StartsWith("hipInit failed"));
}

TEST_CASE("launch: the packed buffer matches the metadata offsets and goes only through `extra`", "[hip][contract]") {
  // A real code object: (char, struct{char; double}, short, double*, unsigned long long) exercises
  // padding and 16-byte by-value structs.
  const std::string source =
      "struct S { char c; double d; };\n"
      "extern \"C\" __global__ void mixed(char c, S s, short h, double* p, unsigned long long q) {\n"
      "  p[0] = c + s.d + h + q;\n}\n";
  const auto code = real_code_object(source, {"mixed"});
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  const kiln::cache::Entry entry = entry_for(code);
  void* module = runtime->load_module(0, entry);
  REQUIRE(module != nullptr);
  CHECK(runtime->get_function(module, "no_such_kernel") == nullptr);  // hipErrorNotFound is "absent"
  void* function = runtime->get_function(module, "mixed");
  REQUIRE(function != nullptr);
  const kiln::vendor::FunctionInfo info = runtime->function_info(function, entry, "mixed");
  REQUIRE(info.params.has_value());
  REQUIRE(info.params->size() == 5);

  struct S {
    char c;
    double d;
  };
  double* p = reinterpret_cast<double*>(0x7f0000001000ULL);
  kiln::ArgPack pack;
  pack.push(char{7});
  pack.push(S{3, 2.5});
  pack.push(short{-2});
  pack.push(p);
  pack.push(0x1122334455667788ULL);
  // kiln's natural-alignment packing agrees with what the compiler declared, argument by argument.
  REQUIRE(pack.count() == info.params->size());
  for (std::size_t i = 0; i < pack.count(); ++i) {
    INFO("argument " << i);
    CHECK(pack.arg_offset(i) == (*info.params)[i].offset);
    CHECK(pack.arg_size(i) == (*info.params)[i].size);
  }
  kiln::LaunchConfig config;
  config.grid = {3, 2, 1};
  config.block = {64, 1, 1};
  config.shared_bytes = 128;
  runtime->launch(0, function, config, pack, true);

  const auto launches = fake.calls_to("hipModuleLaunchKernel");
  REQUIRE(launches.size() == 1);
  INFO(launches[0]);
  CHECK_THAT(launches[0], Catch::Contains("mixed grid=3x2x1 block=64x1x1 shared=128") &&
                              Catch::Contains("kernelParams=null extra=buffer size=" + std::to_string(pack.size())));
  std::vector<std::byte> sent(fake.last_launch(nullptr, 0));
  fake.last_launch(sent.data(), sent.size());
  REQUIRE(sent.size() == pack.size());
  const auto at = [&](std::size_t i) { return sent.data() + (*info.params)[i].offset; };
  CHECK(std::to_integer<char>(*at(0)) == 7);
  S s{};
  std::memcpy(&s, at(1), sizeof s);
  CHECK(s.c == 3);
  CHECK(s.d == 2.5);
  short h = 0;
  std::memcpy(&h, at(2), sizeof h);
  CHECK(h == -2);
  double* sent_p = nullptr;
  std::memcpy(&sent_p, at(3), sizeof sent_p);
  CHECK(sent_p == p);
  unsigned long long q = 0;
  std::memcpy(&q, at(4), sizeof q);
  CHECK(q == 0x1122334455667788ULL);
  runtime->unload_module(0, module);
  CHECK(fake.calls_to("hipModuleUnload").size() == 1);
}

TEST_CASE("function info: parameters from metadata without hidden ones; attributes from HIP", "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("max_threads", "256");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  const kiln::cache::Entry entry = entry_for(kiln::test::fake_code_object(kSaxpySpec));
  void* function = runtime->get_function(runtime->load_module(0, entry), "saxpy");
  REQUIRE(function != nullptr);
  const auto info = runtime->function_info(function, entry, "saxpy");
  CHECK(info.max_threads_per_block == 256);
  CHECK(info.num_regs == 12);
  REQUIRE(info.params.has_value());
  REQUIRE(info.params->size() == 4);
  CHECK((*info.params)[3].offset == 16);
  CHECK((*info.params)[3].size == 8);
}

TEST_CASE("HIP errors become kiln errors with the HIP name, string and context", "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("arch.0", "gfx1030");
  fake("warp.0", "32");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  const kiln::cache::Entry entry = entry_for(kiln::test::fake_code_object(kSaxpySpec));

  SECTION("hipErrorNoBinaryForGpu -> LoadError naming the entry, its target and the device's") {
    fake("fail.hipModuleLoadData", "209");
    try {
      (void)runtime->load_module(0, entry);
      FAIL("loaded");
    } catch (const kiln::LoadError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("hipModuleLoadData failed: hipErrorNoBinaryForGpu (no kernel image is "
                                             "available for execution on the device)") &&
                               Catch::Contains(entry.key_hash.hex()) && Catch::Contains("gfx90a code object") &&
                               Catch::Contains("device 0, gfx1030"));
    }
  }
  SECTION("hipErrorOutOfMemory -> OutOfMemory (a LaunchError) naming the size and device") {
    fake("fail.hipMalloc", "2");
    CHECK_THROWS_AS(runtime->allocate(0, 1 << 20), kiln::OutOfMemory);
    CHECK_THROWS_AS(runtime->allocate(0, 1 << 20), kiln::LaunchError);
    CHECK_THROWS_WITH(
        runtime->allocate(0, 1 << 20),
        Catch::StartsWith(
            "hipMalloc failed: hipErrorOutOfMemory (out of memory) allocating 1048576 bytes on device 0"));
  }
  SECTION("hipErrorInvalidConfiguration -> LaunchError naming the configuration") {
    fake("fail.hipModuleLaunchKernel", "9");
    void* function = runtime->get_function(runtime->load_module(0, entry), "saxpy");
    REQUIRE(function != nullptr);
    kiln::ArgPack pack;
    pack.push(1);
    kiln::LaunchConfig config;
    config.block = {2048, 1, 1};
    CHECK_THROWS_AS(runtime->launch(0, function, config, pack, true), kiln::LaunchError);
    CHECK_THROWS_WITH(
        runtime->launch(0, function, config, pack, true),
        Catch::StartsWith("hipModuleLaunchKernel failed: hipErrorInvalidConfiguration (invalid configuration "
                          "argument)") &&
            Catch::Contains("block 2048x1x1"));
  }
  SECTION("a CUBIN is refused before HIP sees it") {
    kiln::cache::Entry cubin = entry;
    cubin.payload_kind = kiln::PayloadKind::cubin;
    cubin.target = "sm_90";
    CHECK_THROWS_WITH(runtime->load_module(0, cubin), Catch::Contains("not an AMDGPU code object"));
    CHECK(fake.calls_to("hipModuleLoadData").empty());
  }
  SECTION("a device that does not exist is a ConfigError before HIP is called") {
    CHECK_THROWS_AS(runtime->allocate(3, 16), kiln::ConfigError);
    CHECK(fake.calls_to("hipSetDevice").empty());
  }
}

TEST_CASE("hipSetDevice on each calling thread before its work on a device", "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("devices", "2");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  const kiln::cache::Entry entry = entry_for(kiln::test::fake_code_object(kSaxpySpec));
  void* module = runtime->load_module(1, entry);
  void* function = runtime->get_function(module, "saxpy");
  REQUIRE(function != nullptr);
  kiln::ArgPack pack;
  pack.push(1);
  pack.push(1.0f);
  pack.push(static_cast<float*>(nullptr));
  pack.push(static_cast<float*>(nullptr));
  const auto launch_twice = [&] {
    runtime->launch(1, function, {}, pack, true);  // the module's device
    runtime->launch(1, function, {}, pack, true);
  };
  std::thread a(launch_twice), b(launch_twice);
  a.join();
  b.join();

  // Per thread: one hipSetDevice(1) before its first launch, none for the second; launches on device 1.
  const auto launches = fake.calls_to("hipModuleLaunchKernel");
  REQUIRE(launches.size() == 4);
  std::set<std::string> threads;
  for (const std::string& l : launches) {
    CHECK_THAT(l, Catch::Contains("device=1"));
    threads.insert(l.substr(0, l.find(' ')));
  }
  REQUIRE(threads.size() == 2);  // two threads launched, each named by the fake
  for (const std::string& t : threads) {
    INFO("thread " << t);
    std::vector<std::string> mine;
    for (const std::string& line : fake.calls()) {
      if (line.starts_with(t + ' ')) mine.push_back(line.substr(t.size() + 1));
    }
    REQUIRE(mine.size() == 3);
    CHECK(mine[0] == "hipSetDevice 1");
    CHECK_THAT(mine[1], Catch::StartsWith("hipModuleLaunchKernel saxpy"));
    CHECK_THAT(mine[2], Catch::StartsWith("hipModuleLaunchKernel saxpy"));
  }
}

TEST_CASE("memory and streams: plain hipMalloc (no managed memory), copies, sync, stream ownership",
          "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  fake("devices", "2");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto runtime = kiln::vendor::load_hip_runtime();
  void* buffer = runtime->allocate(1, 64);
  const std::vector<int> in = {1, 2, 3, 4};
  std::vector<int> out(4);
  runtime->copy_to_device(1, buffer, in.data(), 16, nullptr);
  runtime->copy_to_host(1, out.data(), buffer, 16, nullptr);
  CHECK(out == in);
  kiln::StreamHandle stream = runtime->create_stream(1);
  CHECK(runtime->stream_device(stream) == std::optional<int>(1));
  CHECK_FALSE(runtime->stream_device(nullptr).has_value());
  runtime->memset(1, buffer, 0, 16, stream);
  runtime->copy_to_host(1, out.data(), buffer, 16, stream);
  runtime->synchronize(1, stream);
  runtime->synchronize(1, nullptr);
  CHECK(out == std::vector<int>(4, 0));
  runtime->destroy_stream(1, stream);
  runtime->free(1, buffer);
  for (const char* call : {"hipMemcpyHtoD", "hipMemcpyDtoH", "hipMemsetD8Async", "hipMemcpyDtoHAsync",
                           "hipStreamSynchronize", "hipDeviceSynchronize", "hipStreamDestroy", "hipFree"}) {
    INFO(call);
    CHECK(fake.calls_to(call).size() == 1);
  }
  REQUIRE(fake.calls_to("hipMalloc").size() == 1);
  CHECK_THAT(fake.calls_to("hipMalloc")[0], Catch::Contains("64 device=1"));
}

TEST_CASE("a library missing a required symbol is refused, naming symbol and library; CUDA still works",
          "[hip][contract]") {
  FakeRocm rocm;
  const fs::path broken = rocm.install(KILN_FAKE_HIP_NO_LAUNCH, "libamdhip64.so.5");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  CHECK_THROWS_AS(kiln::vendor::load_hip_runtime(), kiln::DeviceUnavailable);
  CHECK_THROWS_WITH(kiln::vendor::load_hip_runtime(),
                    Catch::Contains("lacks required symbol hipModuleLaunchKernel") && Catch::Contains(broken.string()));
  CHECK_THROWS_AS(kiln::vendor::load_hiprtc(), kiln::DeviceUnavailable);
  CHECK_THROWS_WITH(kiln::vendor::load_hiprtc(),
                    Catch::Contains("lacks required symbol hiprtcGetLoweredName") && Catch::Contains(broken.string()));
  check_cuda_lane_works();
}

TEST_CASE("a HIPRTC that fails: CompileError with the log (source named), the program destroyed; CUDA still works",
          "[hip][contract]") {
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_FULL, "libamdhip64.so.5");
  Fake fake(rocm.lib() / "libamdhip64.so.5");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  const auto compiler = kiln::vendor::load_hiprtc();
  const std::vector<std::string> flags = {"-std=c++17"};  // no arch: the block adds --offload-arch
  const std::vector<std::string> names = {"k"};
  const kiln::vendor::CompileInput input{"k.cu", "extern \"C\" __global__ void k() {}\n", {}, names, flags, "gfx90a"};

  SECTION("success: the code, the lowered names, --offload-arch added, one destroy") {
    const auto code = kiln::test::fake_code_object(kSaxpySpec);
    fake.set_code(code.data(), code.size());
    const auto out = compiler->compile(input);
    CHECK(out.binary == code);
    REQUIRE(out.lowered.size() == 1);
    CHECK(out.lowered[0].lowered == "k");
    REQUIRE(fake.calls_to("hiprtcCompileProgram").size() == 1);
    CHECK_THAT(fake.calls_to("hiprtcCompileProgram")[0], Catch::EndsWith("-std=c++17 --offload-arch=gfx90a"));
    CHECK(fake.calls_to("hiprtcDestroyProgram").size() == 1);
  }
  SECTION("compilation fails: the message names the source and line, the log is whole") {
    fake("fail.hiprtcCompileProgram", "6");
    fake("rtc_log", "/tmp/comgr-a1b2c3/input/CompileSource:7:3: error: boom\n1 error generated.");
    try {
      (void)compiler->compile(input);
      FAIL("compiled");
    } catch (const kiln::CompileError& e) {
      CHECK_THAT(e.what(), Catch::Contains("HIPRTC_ERROR_COMPILATION") && Catch::Contains("k.cu:7:3: error: boom"));
      CHECK(e.log() == "/tmp/comgr-a1b2c3/input/CompileSource:7:3: error: boom\n1 error generated.");
      CHECK(e.source_name() == "k.cu");
      CHECK(e.options() == flags);
    }
    CHECK(fake.calls_to("hiprtcDestroyProgram").size() == 1);
    CHECK(fake.calls_to("hiprtcGetLoweredName").empty());
  }
  SECTION("the program cannot even be created") {
    fake("fail.hiprtcCreateProgram", "2");
    CHECK_THROWS_WITH(compiler->compile(input), Catch::StartsWith("hiprtcCreateProgram failed"));
  }
  check_cuda_lane_works();
}

TEST_CASE("the engine refuses a wrong argument count or size before any HIP call (synthetic runtime)",
          "[hip][contract][engine]") {
  // HIP 7 layout: the runtime is the synthetic one (libamdhip64.so.7 without HIPRTC), so kiln compiles
  // with the real HIPRTC found on the loader's path and loads into the synthetic runtime.
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_NO_RTC, "libamdhip64.so.7");
  Fake fake(rocm.lib() / "libamdhip64.so.7");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  try {
    (void)kiln::vendor::load_hiprtc();
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no real HIPRTC on the loader's path: ") + e.what());
  }
  TempDir cache("kiln-hip-engine");
  ScopedEnv vendor("KILN_VENDOR", "hip");
  ScopedEnv cache_dir("KILN_CACHE_DIR", cache.path().c_str());
  kiln::Engine engine;  // from the environment, as an application would
  REQUIRE(engine.vendor() == kiln::Vendor::hip);
  REQUIRE(engine.devices().size() == 1);
  const kiln::Kernel saxpy = engine.kernel(kiln::Source::builtin("saxpy"), "saxpy");
  REQUIRE(saxpy.params().has_value());
  REQUIRE(saxpy.params()->size() == 4);

  float* x = reinterpret_cast<float*>(0x1000);
  float* y = reinterpret_cast<float*>(0x2000);
  const kiln::LaunchConfig config1{kiln::Dim3(4), kiln::Dim3(256), 0, nullptr};
  saxpy.launch(config1, 1024, 2.0f, static_cast<const float*>(x), y);
  REQUIRE(fake.calls_to("hipModuleLaunchKernel").size() == 1);

  const std::size_t before = fake.calls().size();
  CHECK_THROWS_WITH(saxpy.launch(config1, 1024, 2.0f, static_cast<const float*>(x)),
                    Catch::Contains("takes 4 argument(s), 3 given"));
  CHECK_THROWS_WITH(saxpy.launch(config1, 1024, 2.0, static_cast<const float*>(x), y),  // double for float
                    Catch::Contains("argument 1") && Catch::Contains("declares 4 bytes"));
  CHECK_THROWS_WITH(saxpy.launch(config1, std::int64_t{1024}, 2.0f, static_cast<const float*>(x), y),
                    Catch::Contains("argument 0"));
  CHECK(fake.calls().size() == before);  // not one HIP call for the refused launches
}

TEST_CASE("an LTO-IR entry is never handed to a runtime: refused, removed and compiled again (synthetic runtime)",
          "[hip][contract][engine][ltoir]") {
  // The one way LTO-IR can meet a load: an entry planted under a loadable request's key (its checksum and
  // key are honest; only its kind is wrong). The engine refuses it before any runtime call, saying it
  // needs a link step, and the request is served by a fresh compile, as for any entry that cannot load.
  FakeRocm rocm;
  rocm.install(KILN_FAKE_HIP_NO_RTC, "libamdhip64.so.7");
  Fake fake(rocm.lib() / "libamdhip64.so.7");
  ScopedEnv env("ROCM_PATH", rocm.root().c_str());
  try {
    (void)kiln::vendor::load_hiprtc();
  } catch (const kiln::Error& e) {
    kiln::test::skip(std::string("no real HIPRTC on the loader's path: ") + e.what());
  }
  TempDir cache("kiln-hip-ltoir");
  ScopedEnv vendor("KILN_VENDOR", "hip");
  ScopedEnv cache_dir("KILN_CACHE_DIR", cache.path().c_str());
  kiln::Engine engine;
  REQUIRE(engine.vendor() == kiln::Vendor::hip);
  const kiln::Source saxpy = kiln::Source::builtin("saxpy");
  const auto [hash, canonical] = engine.describe_key(saxpy, {}, {}, "native");
  kiln::cache::Entry planted;
  planted.vendor = kiln::Vendor::cuda;
  planted.payload_kind = kiln::PayloadKind::ltoir;
  planted.target = "lto_90";
  planted.compiler = "nvrtc 13.0";
  planted.key_hash = hash;
  planted.canonical_key = canonical;
  planted.payload.assign(64, std::byte{0x5a});
  std::memcpy(planted.payload.data(), kiln::cache::kLtoIrMagic, sizeof(kiln::cache::kLtoIrMagic));
  REQUIRE(engine.storage().local().put(planted));
  const std::size_t loads_before = fake.calls_to("hipModuleLoadData").size();

  std::string warned;
  {
    kiln::test::StderrCapture capture;
    const kiln::Kernel kernel = engine.kernel(saxpy, "saxpy");
    CHECK(kernel);
    warned = capture.text();
  }
  INFO(warned);
  CHECK_THAT(warned, Catch::Contains("holds LTO-IR") && Catch::Contains("nvJitLink") &&
                         Catch::Contains("recompiling"));
  CHECK(engine.stats().compiles == 1);
  // One load: the code object compiled in the planted entry's place; the LTO-IR never reached HIP.
  CHECK(fake.calls_to("hipModuleLoadData").size() == loads_before + 1);
  const kiln::cache::LookupResult now = engine.storage().local().get(hash, canonical);
  REQUIRE(now.outcome == kiln::cache::LookupOutcome::hit);
  CHECK(now.entry->payload_kind == kiln::PayloadKind::amdgpu_code_object);
}

TEST_CASE("[child] no AMD library anywhere", "[.no_amd_child]") {
  TempDir empty("kiln-no-rocm");
  ScopedEnv rocm("ROCM_PATH", empty.path().c_str());
  const std::string dir = empty.path().string() + "/lib/";
  try {
    (void)kiln::vendor::load_hip_runtime();
    FAIL("a HIP runtime loaded although none can be found");
  } catch (const kiln::DeviceUnavailable& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("no HIP runtime found (searched: "));
    for (const char* name : {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}) {
      CHECK_THAT(e.what(), Catch::Contains(dir + name + " (not found)") && Catch::Contains(std::string("; ") + name));
    }
  }
  CHECK_THROWS_WITH(kiln::vendor::load_hiprtc(), Catch::StartsWith("no HIPRTC found (searched: ") &&
                                                     Catch::Contains(dir + "libhiprtc.so.7") &&
                                                     Catch::Contains("libamdhip64.so.5 (not found)"));
  // The engine, asked for HIP explicitly: a compile-only engine (as without a vendor), whose device
  // operations give the same clear error, not a crash.
  TempDir cache("kiln-no-amd-cache");
  kiln::EngineConfig config;
  config.vendor = kiln::Vendor::hip;
  config.cache.root = cache.path();
  {
    kiln::Engine explicit_hip(config);
    CHECK(explicit_hip.devices().empty());
    CHECK_THROWS_WITH(explicit_hip.allocate(16), Catch::Contains("no HIP runtime found (searched: "));
  }
  {
    ScopedEnv vendor("KILN_VENDOR", "hip");
    ScopedEnv cache_dir("KILN_CACHE_DIR", cache.path().c_str());
    kiln::Engine from_environment;
    CHECK_THROWS_AS(from_environment.allocate(16), kiln::DeviceUnavailable);
  }
  // Auto: compile-only engine; a gfx prewarm says why, an sm_ prewarm works (the CUDA lane is intact).
  config.vendor = kiln::Vendor::none;
  kiln::Engine engine(config);
  CHECK_THROWS_WITH(engine.prewarm(kiln::Source::builtin("saxpy"), {}, {"saxpy"}, "gfx90a"),
                    Catch::Contains("no HIPRTC found"));
#if KILN_HAVE_CUDA_LANE
  CHECK(engine.prewarm(kiln::Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90").binary_bytes > 0);
#endif
  check_cuda_lane_works();
}

TEST_CASE("KILN_VENDOR=hip on a machine with no AMD runtime: a clear error naming every path, not a crash",
          "[hip][contract]") {
  // A child process whose dynamic loader finds no AMD library (LD_PRELOAD fault injection, see
  // no_amd_preload.c) runs the test above.
  TempDir out_dir("kiln-no-amd-out");
  const std::string out_file = (out_dir.path() / "out.txt").string();
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("LD_PRELOAD=")) env_strings.emplace_back(*e);
  }
  env_strings.push_back(std::string("LD_PRELOAD=") + KILN_NO_AMD_PRELOAD);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string tag = "[.no_amd_child]";
  std::string out_flag = "--out";
  std::string out_path = out_file;
  char* argv[] = {self.data(), tag.data(), out_flag.data(), out_path.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  std::ifstream in(out_file);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string output = text.str();
  INFO(output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(output, Catch::Contains("All tests passed"));
}
