// Every built-in kernel of device_src/ against a CPU reference, on random inputs at several sizes
// (including sizes that are not multiples of any block) and several launch shapes, outputs poisoned
// before each launch and checked for writes past their end.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "gpu_support.hpp"
#include "kiln/error.hpp"

namespace {

std::uint64_t case_seed(std::size_t case_index, std::size_t n) {
  return kiln_test::run_seed() ^ (0x9E3779B97F4A7C15ULL * (case_index + 1)) ^ (n * 0xC2B2AE3D27D4EB4FULL);
}

void run_all_cases(kiln::Engine& engine, int device, kiln::StreamHandle stream) {
  const auto& cases = kiln_test::kernel_cases();
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const kiln_test::KernelCase& kernel_case = cases[index];
    for (const std::size_t n : kiln_test::kSizes) {
      INFO(kernel_case.file << " [" << kernel_case.expressions.front() << "] n=" << n
                            << " seed=" << kiln_test::run_seed());
      kiln_test::CaseResult result;
      try {
        kernel_case.run(engine, device, n, case_seed(index, n), stream, result);
      } catch (const kiln::Error& error) {
        result.fail(std::string("kiln::Error: ") + error.what());
      }
      for (const std::string& failure : result.failures) {
        FAIL_CHECK(failure);
      }
      CHECK(result.ok());
    }
  }
}

}  // namespace

TEST_CASE("every kernel a built-in source lists has a CPU reference in these tests", "[gpu]") {
  std::set<std::pair<std::string, std::string>> covered;
  for (const kiln_test::KernelCase& kernel_case : kiln_test::kernel_cases()) {
    for (const std::string& expression : kernel_case.expressions) {
      covered.emplace(kernel_case.file, kiln_test::without_spaces(expression));
    }
  }
  std::set<std::pair<std::string, std::string>> listed;
  const std::vector<std::string> names = kiln::Source::builtin_names();
  REQUIRE_FALSE(names.empty());
  for (const std::string& file : names) {
    const auto kernels = kiln_test::listed_kernels(kiln::Source::builtin(file).text());
    INFO(file);
    CHECK_FALSE(kernels.empty());
    for (const std::string& expression : kernels) {
      listed.emplace(file, kiln_test::without_spaces(expression));
      INFO("kernel " << expression << " of " << file << " needs a runner in tests/gpu/gpu_support.cpp");
      CHECK(covered.count({file, kiln_test::without_spaces(expression)}) == 1);
    }
  }
  for (const auto& [file, expression] : covered) {
    INFO("tests/gpu checks " << expression << " of " << file << ", which that source does not list");
    CHECK(listed.count({file, expression}) == 1);
  }
}

TEST_CASE("built-in kernels match their CPU references on the default stream", "[gpu]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  run_all_cases(engine, engine.default_device(), nullptr);
}

TEST_CASE("built-in kernels match their CPU references on a stream the engine created", "[gpu]") {
  kiln::Engine& engine = kiln_test::shared_engine();
  const int device = engine.default_device();
  kiln::StreamHandle stream = engine.create_stream(device);
  REQUIRE(stream != nullptr);
  run_all_cases(engine, device, stream);
  engine.destroy_stream(stream, device);
}
