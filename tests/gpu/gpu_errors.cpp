// Errors on a device: each is a clear kiln::Error, and the process (and the engine) goes on.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <algorithm>
#include <cfloat>
#include <string>
#include <variant>

#include "gpu_support.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/error.hpp"

namespace {

/// saxpy at n = 4097 through `engine`, checked against the CPU: proof that the engine still works.
void check_engine_still_works(kiln::Engine& engine) {
  kiln_test::CaseResult result;
  const auto& cases = kiln_test::kernel_cases();
  const auto saxpy = std::find_if(cases.begin(), cases.end(),
                                  [](const kiln_test::KernelCase& c) { return c.expressions.front() == "saxpy"; });
  REQUIRE(saxpy != cases.end());
  saxpy->run(engine, engine.default_device(), 4097, kiln_test::run_seed(), nullptr, result);
  for (const std::string& failure : result.failures) {
    FAIL_CHECK(failure);
  }
  CHECK(result.ok());
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const kiln::Error& error) {
    return error.what();
  }
  return {};
}

}  // namespace

TEST_CASE("an unknown kernel name is a LoadError that lists the module's kernels", "[gpu][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const kiln::Program program = kiln_test::builtin_program(engine, "saxpy.cu");
  REQUIRE_THROWS_AS(program.kernel("no_such_kernel"), kiln::LoadError);
  const std::string message = message_of([&] { (void)program.kernel("no_such_kernel"); });
  INFO(message);
  CHECK(message.find("no_such_kernel") != std::string::npos);
  CHECK(message.find("saxpy") != std::string::npos);

  const kiln::Program map = kiln_test::builtin_program(engine, "map.cu");
  const std::string map_message = message_of([&] { (void)map.kernel("kiln::map<int, 3>"); });
  INFO(map_message);
  // The module's kernels, by expression or by lowered name.
  CHECK((map_message.find("map<float") != std::string::npos || map_message.find("_ZN4kiln3map") != std::string::npos));
  check_engine_still_works(engine);
}

TEST_CASE("wrong argument count and size are LaunchErrors, checked before the driver runs anything", "[gpu][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const kiln::Kernel saxpy = kiln_test::builtin_program(engine, "saxpy.cu").kernel("saxpy");
  if (!saxpy.params()) {
    WARN("the driver does not report saxpy's parameters: kiln cannot check argument count and size here");
    return;
  }
  CHECK(saxpy.params()->size() == 4);
  kiln_test::DeviceBuffer x(engine, 1024 * sizeof(float), engine.default_device());
  kiln_test::DeviceBuffer y(engine, 1024 * sizeof(float), engine.default_device());
  kiln::LaunchConfig config;
  config.grid = 4;
  config.block = 256;

  SECTION("too few arguments") {
    CHECK_THROWS_AS(saxpy.launch(config, 1024, 2.0f, x.as<const float>()), kiln::LaunchError);
    INFO(message_of([&] { saxpy.launch(config, 1024, 2.0f, x.as<const float>()); }));
    CHECK_FALSE(message_of([&] { saxpy.launch(config, 1024, 2.0f, x.as<const float>()); }).empty());
  }
  SECTION("too many arguments") {
    CHECK_THROWS_AS(saxpy.launch(config, 1024, 2.0f, x.as<const float>(), y.as<float>(), 7), kiln::LaunchError);
  }
  SECTION("a double where the kernel takes a float") {
    const std::string message =
        message_of([&] { saxpy.launch(config, 1024, 2.0, x.as<const float>(), y.as<float>()); });
    INFO(message);
    CHECK_FALSE(message.empty());
    CHECK_THROWS_AS(saxpy.launch(config, 1024, 2.0, x.as<const float>(), y.as<float>()), kiln::LaunchError);
  }
  check_engine_still_works(engine);
}

TEST_CASE("each kernel's parameter list is the driver's own, up to the index the driver refuses", "[gpu][errors]") {
  // kiln takes the parameter count from the PTX beside the CUBIN and asks the driver only for indices
  // that exist; here the driver itself is asked for every index until it refuses, and both must agree.
  using ParamInfoFn = int (*)(void* function, std::size_t index, std::size_t* offset, std::size_t* size);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(driver != nullptr);
  const auto param_info = reinterpret_cast<ParamInfoFn>(dlsym(driver, "cuFuncGetParamInfo"));
  if (param_info == nullptr) {
    WARN("this driver has no cuFuncGetParamInfo: launches go unchecked and there is nothing to compare");
    return;
  }
  kiln::Engine& engine = kiln_test::shared_engine();
  std::vector<kiln::Kernel> kernels;
  for (const std::string& file : kiln::Source::builtin_names()) {
    const kiln::Program program = kiln_test::builtin_program(engine, file);
    for (const std::string& name : kiln::Source::builtin(file).listed_kernels()) kernels.push_back(program.kernel(name));
  }
  const kiln::Source mixed = kiln::Source::from_text("mixed_params.cu", R"(#include <kiln/rtc.h>
struct Pair { double a; int b; };
struct Packed { char c[3]; };
KILN_KERNEL void structs(Pair p, Packed q, float* out) { out[0] = p.a + p.b + q.c[1]; }
KILN_KERNEL void scalars(char c, short s, long long l, double d, bool b, float* out) { out[0] = c + s + l + d + b; }
KILN_KERNEL void none() {}
)");
  for (const char* name : {"structs", "scalars", "none"}) kernels.push_back(engine.kernel(mixed, name));
  REQUIRE(kernels.size() >= 17);
  for (const kiln::Kernel& kernel : kernels) {
    INFO("kernel " << kernel.name());
    REQUIRE(kernel.params().has_value());
    std::vector<kiln::ParamInfo> driver_params;
    for (std::size_t i = 0;; ++i) {
      std::size_t offset = 0, size = 0;
      const int result = param_info(kernel.native_handle(), i, &offset, &size);
      if (result != 0) {
        CHECK(result == 1);  // CUDA_ERROR_INVALID_VALUE: past the last parameter
        break;
      }
      driver_params.push_back({offset, size});
    }
    const std::vector<kiln::ParamInfo>& params = *kernel.params();
    REQUIRE(params.size() == driver_params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO("parameter " << i);
      CHECK(params[i].offset == driver_params[i].offset);
      CHECK(params[i].size == driver_params[i].size);
    }
  }
  // And a launch is checked against that list: one argument too many for the struct kernel.
  kiln_test::DeviceBuffer out(engine, sizeof(float), engine.default_device());
  struct Pair { double a; int b; };
  struct Packed { char c[3]; };
  kiln::LaunchConfig one;
  CHECK_NOTHROW(kernels[kernels.size() - 3].launch(one, Pair{1.0, 2}, Packed{{1, 2, 3}}, out.as<float>()));
  CHECK_THROWS_AS(kernels[kernels.size() - 3].launch(one, Pair{1.0, 2}, Packed{{1, 2, 3}}, out.as<float>(), 1),
                  kiln::LaunchError);
  engine.synchronize();
  dlclose(driver);
  check_engine_still_works(engine);
}

TEST_CASE("a block of 2048 threads is a LaunchError", "[gpu][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const kiln::Kernel saxpy = kiln_test::builtin_program(engine, "saxpy.cu").kernel("saxpy");
  CHECK(saxpy.max_threads_per_block() > 0);
  CHECK(saxpy.max_threads_per_block() <= 1024);
  kiln_test::DeviceBuffer x(engine, 4096 * sizeof(float), engine.default_device());
  kiln_test::DeviceBuffer y(engine, 4096 * sizeof(float), engine.default_device());
  kiln::LaunchConfig config;
  config.grid = 2;
  config.block = 2048;
  const std::string message = message_of([&] { saxpy.launch(config, 4096, 2.0f, x.as<const float>(), y.as<float>()); });
  INFO(message);
  CHECK_THROWS_AS(saxpy.launch(config, 4096, 2.0f, x.as<const float>(), y.as<float>()), kiln::LaunchError);
  CHECK(message.find("2048") != std::string::npos);
  check_engine_still_works(engine);
}

TEST_CASE("a launch after unload_all is a clear kiln::Error; the engine loads again afterwards", "[gpu][errors]") {
  kiln_test::TempDir cache_dir("kiln-gpu-unload");
  kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
  const kiln::Kernel saxpy = kiln_test::builtin_program(engine, "saxpy.cu").kernel("saxpy");
  kiln_test::DeviceBuffer x(engine, 1024 * sizeof(float), engine.default_device());
  kiln_test::DeviceBuffer y(engine, 1024 * sizeof(float), engine.default_device());
  kiln::LaunchConfig config;
  config.grid = 4;
  config.block = 256;
  saxpy.launch(config, 1024, 2.0f, x.as<const float>(), y.as<float>());
  engine.synchronize();
  engine.unload_all();
  const std::string message = message_of([&] { saxpy.launch(config, 1024, 2.0f, x.as<const float>(), y.as<float>()); });
  INFO(message);
  CHECK_THROWS_AS(saxpy.launch(config, 1024, 2.0f, x.as<const float>(), y.as<float>()), kiln::Error);
  CHECK_FALSE(message.empty());
  check_engine_still_works(engine);
}

TEST_CASE("an allocation larger than the GPU's memory is a LaunchError", "[gpu][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const int device = engine.default_device();
  const auto devices = engine.devices();
  const auto info =
      std::find_if(devices.begin(), devices.end(), [&](const kiln::DeviceInfo& d) { return d.ordinal == device; });
  REQUIRE(info != devices.end());
  const std::uint64_t too_much = std::max<std::uint64_t>(info->total_memory * 2, std::uint64_t{1} << 44);
  void* pointer = nullptr;
  const std::string message = message_of([&] { pointer = engine.allocate(too_much, device); });
  INFO(message);
  CHECK(pointer == nullptr);
  CHECK_FALSE(message.empty());
  CHECK_THROWS_AS(engine.allocate(too_much, device), kiln::LaunchError);
  check_engine_still_works(engine);
}

TEST_CASE("a source that does not compile is a CompileError carrying the log", "[gpu][errors]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const kiln::Source broken = kiln::Source::from_text(
      "broken.cu", "#include <kiln/rtc.h>\nKILN_KERNEL void broken(int* p) { *p = undeclared_name; }\n");
  try {
    (void)engine.program(broken, kiln::Options{}, {"broken"});
    FAIL("compiling broken.cu succeeded");
  } catch (const kiln::CompileError& error) {
    INFO(error.what() << "\nlog:\n" << error.log());
    CHECK(error.log().find("undeclared_name") != std::string::npos);
    CHECK(error.source_name() == "broken.cu");
  }
  check_engine_still_works(engine);
}

TEST_CASE("a cached binary for another target is never a failure: PTX fallback or recompile", "[gpu][errors][cache]") {
  kiln_test::TempDir cache_dir("kiln-gpu-forged");
  const kiln::Source source = kiln::Source::builtin("saxpy.cu");
  const std::vector<std::string> names = kiln_test::listed_kernels(source.text());

  // The honest entry for this device, and a binary for another target of the same vendor.
  kiln::cache::Hash128 key;
  kiln::cache::Entry honest;
  std::string other_target;
  kiln::cache::Entry other;
  {
    kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
    const kiln::Program program = engine.program(source, kiln::Options{}, names);
    key = program.key();
    auto read = engine.storage().local().read_file(engine.storage().local().entry_path(key));
    REQUIRE(std::holds_alternative<kiln::cache::Entry>(read));
    honest = std::get<kiln::cache::Entry>(std::move(read));
    if (honest.vendor == kiln::Vendor::cuda) {
      other_target = honest.target.rfind("sm_80", 0) == 0 ? "sm_90" : "sm_80";
    } else {
      other_target = honest.target.rfind("gfx1030", 0) == 0 ? "gfx90a" : "gfx1030";
    }
    const kiln::PrewarmResult prewarmed = engine.prewarm(source, kiln::Options{}, names, other_target);
    auto other_read = engine.storage().local().read_file(engine.storage().local().entry_path(prewarmed.key));
    REQUIRE(std::holds_alternative<kiln::cache::Entry>(other_read));
    other = std::get<kiln::cache::Entry>(std::move(other_read));
  }
  INFO("device target " << honest.target << ", planted binary for " << other_target);
  REQUIRE(honest.payload != other.payload);
  REQUIRE_FALSE(other.payload.empty());

  // plant(keep_ptx): the honest key and canonical key with the other target's binary.
  const auto plant = [&](bool keep_ptx) {
    kiln::cache::Entry forged = honest;
    forged.payload = other.payload;
    if (!keep_ptx) {
      forged.aux.clear();
    }
    kiln::cache::Store store(kiln_test::config_with_cache(cache_dir.path()).cache);
    REQUIRE(store.put(forged));
    auto check = store.read_file(store.entry_path(key));
    REQUIRE(std::holds_alternative<kiln::cache::Entry>(check));
    REQUIRE(std::get<kiln::cache::Entry>(check).payload == other.payload);
  };
  const auto run_from_planted_cache = [&] {
    kiln::Engine engine(kiln_test::config_with_cache(cache_dir.path()));
    const kiln::Program program = engine.program(source, kiln::Options{}, names);
    CHECK(program.key() == key);
    check_engine_still_works(engine);
    const kiln::cache::Counters stats = engine.stats();
    INFO("compiles=" << stats.compiles << " disk_hits=" << stats.disk_hits
                     << " corrupt_removed=" << stats.corrupt_removed);
    CHECK(stats.compile_failures == 0);
  };

  if (honest.vendor == kiln::Vendor::cuda && !honest.aux.empty()) {
    SECTION("the entry keeps its PTX: the engine falls back to it (or recompiles)") {
      plant(true);
      run_from_planted_cache();
    }
  }
  SECTION("no PTX beside the wrong binary: the engine recompiles") {
    plant(false);
    run_from_planted_cache();
  }
}
