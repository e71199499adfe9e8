#pragma once
// Shared by the gpu tests (label gpu): the device check every binary makes before Catch2 runs, a
// temporary cache root, device buffers, child processes, and one runner + CPU reference per built-in
// kernel of device_src/.
//
// Every gpu test binary links gpu_main.cpp, whose main() prints "SKIPPED: <reason>" and exits 77 when
// there is no device, and otherwise runs Catch2. A binary may register child modes (a test spawns the
// same binary with `--kiln-child <mode> args...`), see register_child_mode().
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/engine.hpp"
#include "temp_dir.hpp"

namespace kiln_test {

// ---- The run-wide state main() sets up --------------------------------------------------------------

/// The seed of this run: KILN_TEST_SEED when set, else random. Printed once by main().
std::uint64_t run_seed();

/// A fresh directory removed with everything in it when destroyed (the test support library's).
using kiln::test::TempDir;

/// An engine configuration from the environment with the disk cache at `cache_root` (read-write).
kiln::EngineConfig config_with_cache(const std::filesystem::path& cache_root);

/// The engine shared by the tests of one binary, on a cache root private to this run.
kiln::Engine& shared_engine();

/// Registers `--kiln-child <mode>`: main() calls `handler(args after the mode)` and exits with its
/// result instead of running Catch2 (and before the device check).
using ChildHandler = std::function<int(const std::vector<std::string>&)>;
bool register_child_mode(const std::string& mode, ChildHandler handler);

struct ChildResult {
  int exit_code = -1;  ///< -1 when it did not exit normally
  std::string output;  ///< stdout and stderr together
};
/// Runs this same executable with `--kiln-child <mode> args...` and `env` set on top of this
/// process's environment; waits and returns its exit code and output.
ChildResult run_child(const std::string& mode, const std::vector<std::string>& args,
                      const std::vector<std::pair<std::string, std::string>>& env);

// ---- Device memory ----------------------------------------------------------------------------------

/// Device memory from Engine::allocate, freed when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer(kiln::Engine& engine, std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(m_pointer);
  }
  [[nodiscard]] void* get() const noexcept { return m_pointer; }
  [[nodiscard]] std::size_t bytes() const noexcept { return m_bytes; }

 private:
  kiln::Engine& m_engine;
  void* m_pointer = nullptr;
  std::size_t m_bytes = 0;
  int m_device = 0;
};

// ---- Built-in kernels -------------------------------------------------------------------------------

/// The entries of a source's first line `//! kiln-kernels: a; b<c, d>` (trimmed, in order).
std::vector<std::string> listed_kernels(std::string_view source_text);

/// Removes every space: name expressions compare equal however they were spaced.
std::string without_spaces(std::string_view text);

/// The program of a built-in source on `device` with every kernel its kiln-kernels line lists, with no
/// options: the same request in every test and in every process, so they share one cache key.
kiln::Program builtin_program(kiln::Engine& engine, const std::string& file, int device = -1);

/// Where one run of a kernel went and what it produced.
struct CaseResult {
  std::vector<std::string> failures;             ///< empty when every output matched its CPU reference
  std::uint64_t digest = 0xcbf29ce484222325ULL;  ///< FNV-1a over the deterministic outputs
  void fail(std::string message) { failures.push_back(std::move(message)); }
  [[nodiscard]] bool ok() const noexcept { return failures.empty(); }
};

/// Runs one kernel at problem size `n` (for sgemm: a shape derived from n) with several launch
/// shapes, poisoning outputs before each launch and checking every output and a poisoned guard
/// region behind it against a CPU reference. Inputs are random (never zero) from `seed`.
using CaseRunner = std::function<void(kiln::Engine&, int device, std::size_t n, std::uint64_t seed,
                                      kiln::StreamHandle stream, CaseResult&)>;

struct KernelCase {
  std::string file;                      ///< "scan.cu"
  std::vector<std::string> expressions;  ///< the listed kernels this case checks
  CaseRunner run;
};

/// One case per group of built-in kernels. Every kernel listed by a built-in source must be covered
/// (a test checks that).
const std::vector<KernelCase>& kernel_cases();

/// The problem sizes each case runs at: includes 1 and sizes that are not multiples of any block.
inline const std::vector<std::size_t> kSizes = {1, 255, 1000, 65537, std::size_t{1} << 20};

/// FNV-1a, continuing from `digest`.
std::uint64_t fnv1a(std::uint64_t digest, const void* data, std::size_t bytes);

}  // namespace kiln_test
