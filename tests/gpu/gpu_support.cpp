// The gpu tests' shared pieces: see gpu_support.hpp.
#include "gpu_support.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "gpu_internal.hpp"
#include "kiln/error.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace kiln_test {

// ---- Run-wide state ---------------------------------------------------------------------------------

namespace {

std::uint64_t make_seed() {
  if (const char* text = std::getenv("KILN_TEST_SEED"); text != nullptr && *text != '\0') {
    return std::strtoull(text, nullptr, 0);
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

struct SharedState {
  std::unique_ptr<TempDir> cache_dir;
  std::unique_ptr<kiln::Engine> engine;
};

SharedState& shared_state() {
  static SharedState state;
  return state;
}

std::map<std::string, ChildHandler>& child_modes() {
  static std::map<std::string, ChildHandler> modes;
  return modes;
}

}  // namespace

std::uint64_t run_seed() {
  static const std::uint64_t seed = make_seed();
  return seed;
}

kiln::EngineConfig config_with_cache(const std::filesystem::path& cache_root) {
  kiln::EngineConfig config = kiln::EngineConfig::from_environment();
  config.cache.root = cache_root;
  config.cache.disabled = false;
  config.cache.read_only = false;
  config.packs.clear();
  config.remote.clear();
  config.record_path.clear();
  return config;
}

kiln::Engine& shared_engine() {
  SharedState& state = shared_state();
  if (!state.engine) {
    throw std::logic_error("kiln_test::shared_engine() before main() created it");
  }
  return *state.engine;
}

bool register_child_mode(const std::string& mode, ChildHandler handler) {
  child_modes()[mode] = std::move(handler);
  return true;
}

namespace detail {

bool start_shared_engine(std::string& skip_reason) {
  SharedState& state = shared_state();
  state.cache_dir = std::make_unique<TempDir>("kiln-gpu-cache");
  try {
    state.engine = std::make_unique<kiln::Engine>(config_with_cache(state.cache_dir->path()));
  } catch (const kiln::DeviceUnavailable& error) {
    skip_reason = std::string("no GPU device: ") + error.what();
    return false;
  }
  if (state.engine->devices().empty()) {
    std::string lanes;
    for (const kiln::LaneInfo& lane : state.engine->lanes()) {
      lanes += std::string(lanes.empty() ? "" : "; ") + std::string(kiln::to_string(lane.vendor)) + ": " + lane.status;
    }
    skip_reason = "no GPU device (" + (lanes.empty() ? std::string("no vendor lane") : lanes) + ")";
    return false;
  }
  return true;
}

void stop_shared_engine() noexcept {
  SharedState& state = shared_state();
  state.engine.reset();
  state.cache_dir.reset();
}

std::optional<int> run_child_mode(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) != kChildFlag) {
    return std::nullopt;
  }
  const auto it = child_modes().find(argv[2]);
  if (it == child_modes().end()) {
    std::fprintf(stderr, "child: unknown mode '%s'\n", argv[2]);
    return 2;
  }
  std::vector<std::string> args(argv + 3, argv + argc);
  try {
    return it->second(args);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "child %s: %s\n", argv[2], error.what());
    return 1;
  }
}

}  // namespace detail

ChildResult run_child(const std::string& mode, const std::vector<std::string>& args,
                      const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> argv_storage = {"/proc/self/exe", std::string(detail::kChildFlag), mode};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) {
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);

  std::vector<std::string> env_storage;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const bool overridden = std::any_of(env.begin(), env.end(), [&](const auto& pair) {
      return text.size() > pair.first.size() && text.substr(0, pair.first.size()) == pair.first &&
             text[pair.first.size()] == '=';
    });
    if (!overridden) {
      env_storage.emplace_back(text);
    }
  }
  for (const auto& [name, value] : env) {
    env_storage.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& entry : env_storage) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);

  std::array<int, 2> pipe_fds{};
  if (::pipe2(pipe_fds.data(), O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  // The executable's real path: /proc/self/exe of the child would be the child itself, which is fine,
  // but resolve it here so the error message names a file.
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  argv_storage[0] = exe;
  argv[0] = argv_storage[0].data();
  pid_t pid = 0;
  const int spawn_error = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawn_error != 0) {
    ::close(pipe_fds[0]);
    throw std::system_error(spawn_error, std::generic_category(), "posix_spawn " + exe);
  }
  ChildResult result;
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t got = ::read(pipe_fds[0], buffer.data(), buffer.size());
    if (got > 0) {
      result.output.append(buffer.data(), static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// ---- Device memory ----------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(kiln::Engine& engine, std::size_t bytes, int device)
    : m_engine(engine), m_bytes(bytes), m_device(device) {
  m_pointer = m_engine.allocate(std::max<std::size_t>(bytes, 1), device);
}

DeviceBuffer::~DeviceBuffer() { m_engine.free(m_pointer, m_device); }

// ---- Built-in kernels -------------------------------------------------------------------------------

std::vector<std::string> listed_kernels(std::string_view source_text) {
  constexpr std::string_view kTag = "//! kiln-kernels: ";
  std::vector<std::string> names;
  if (source_text.substr(0, kTag.size()) != kTag) {
    return names;
  }
  std::string_view line = source_text.substr(kTag.size());
  line = line.substr(0, line.find('\n'));
  while (!line.empty()) {
    const std::size_t end = std::min(line.find(';'), line.size());
    std::string_view item = line.substr(0, end);
    const std::size_t first = item.find_first_not_of(" \t\r");
    if (first != std::string_view::npos) {
      item = item.substr(first, item.find_last_not_of(" \t\r") - first + 1);
      names.emplace_back(item);
    }
    line = end < line.size() ? line.substr(end + 1) : std::string_view{};
  }
  return names;
}

std::string without_spaces(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c != ' ' && c != '\t') {
      out.push_back(c);
    }
  }
  return out;
}

kiln::Program builtin_program(kiln::Engine& engine, const std::string& file, int device) {
  const kiln::Source source = kiln::Source::builtin(file);
  return engine.program(source, kiln::Options{}, listed_kernels(source.text()), device);
}

std::uint64_t fnv1a(std::uint64_t digest, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    digest = (digest ^ p[i]) * 0x100000001b3ULL;
  }
  return digest;
}

namespace {

constexpr std::size_t kGuard = 64;  // poisoned elements behind every output; a kernel must not touch them

std::uint32_t blocks_for(std::size_t n, std::uint32_t per_block) {
  return static_cast<std::uint32_t>(std::max<std::size_t>(1, (n + per_block - 1) / per_block));
}

kiln::LaunchConfig launch_config(kiln::Dim3 grid, kiln::Dim3 block, kiln::StreamHandle stream,
                                 std::uint32_t shared_bytes = 0) {
  kiln::LaunchConfig config;
  config.grid = grid;
  config.block = block;
  config.shared_bytes = shared_bytes;
  config.stream = stream;
  return config;
}

/// A random real in +-[0.1, 1): never zero, never tiny.
template <typename T>
T nonzero_real(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> magnitude(0.1, 1.0);
  const double value = magnitude(rng);
  return static_cast<T>((rng() & 1U) != 0 ? value : -value);
}

/// A random integer in [1, 8] as T: sums of up to 2^20 of them stay exact in float.
template <typename T>
T small_integer(std::mt19937_64& rng) {
  return static_cast<T>(1 + rng() % 8);
}

std::string describe_launch(std::string_view kernel, std::size_t n, const kiln::LaunchConfig& config) {
  std::ostringstream out;
  out << kernel << " n=" << n << " grid=(" << config.grid.x << "," << config.grid.y << ") block=(" << config.block.x
      << "," << config.block.y << ")";
  if (config.shared_bytes != 0) {
    out << " shared=" << config.shared_bytes;
  }
  return out.str();
}

/// Copies n + kGuard elements back from `device_output` (after the stream's work) into `host`.
template <typename T>
void fetch(kiln::Engine& engine, int device, kiln::StreamHandle stream, const DeviceBuffer& device_output,
           std::size_t n, std::vector<T>& host) {
  host.assign(n + kGuard, T{});
  engine.copy_to_host(host.data(), device_output.get(), (n + kGuard) * sizeof(T), stream, device);
  engine.synchronize(stream, device);
}

/// Poisons an output buffer (0xFF bytes: NaN for floats, all ones for integers).
void poison(kiln::Engine& engine, int device, kiln::StreamHandle stream, const DeviceBuffer& buffer) {
  engine.memset(buffer.get(), 0xFF, buffer.bytes(), stream, device);
}

template <typename T>
void check_guard(CaseResult& result, const std::string& what, const std::vector<T>& host, std::size_t n) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(host.data() + n);
  for (std::size_t i = 0; i < kGuard * sizeof(T); ++i) {
    if (bytes[i] != 0xFF) {
      result.fail(what + ": wrote past the end of the output (guard byte " + std::to_string(i) + " after element " +
                  std::to_string(n) + " changed)");
      return;
    }
  }
}

/// Compares got[0..n) against expected(i) within tolerance(i) (0 = exact).
template <typename T, typename Expected, typename Tolerance>
void compare(CaseResult& result, const std::string& what, const std::vector<T>& got, std::size_t n, Expected expected,
             Tolerance tolerance) {
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < n; ++i) {
    const auto want = expected(i);
    bool ok = false;
    double tol = 0;
    if constexpr (std::is_floating_point_v<T>) {
      tol = tolerance(i);
      ok = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want)) <= tol;  // NaN (poison) fails
    } else {
      ok = got[i] == static_cast<T>(want);
    }
    if (!ok) {
      if (bad == 0) {
        std::ostringstream out;
        out.precision(17);
        out << "first at [" << i << "]: got " << +got[i] << ", expected " << +want;
        if (tol != 0) {
          out << " (tolerance " << tol << ")";
        }
        first = out.str();
      }
      ++bad;
    }
  }
  if (bad != 0) {
    result.fail(what + ": " + std::to_string(bad) + " of " + std::to_string(n) + " outputs wrong; " + first);
  }
  check_guard(result, what, got, n);
}

// ---- saxpy ----

void run_saxpy(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
               CaseResult& result) {
  const kiln::Kernel kernel = builtin_program(engine, "saxpy.cu", device).kernel("saxpy");
  std::mt19937_64 rng(seed);
  const float a = 2.0f * nonzero_real<float>(rng);
  std::vector<float> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = nonzero_real<float>(rng);
    y[i] = nonzero_real<float>(rng);
  }
  DeviceBuffer dx(engine, n * sizeof(float), device);
  DeviceBuffer dy(engine, (n + kGuard) * sizeof(float), device);
  engine.copy_to_device(dx.get(), x.data(), n * sizeof(float), stream, device);
  const std::vector<kiln::LaunchConfig> shapes = {launch_config(blocks_for(n, 256), 256, stream),
                                                  launch_config(7, 128, stream)};
  std::vector<float> got;
  for (const kiln::LaunchConfig& config : shapes) {
    poison(engine, device, stream, dy);
    engine.copy_to_device(dy.get(), y.data(), n * sizeof(float), stream, device);
    kernel.launch(config, static_cast<int>(n), a, dx.as<const float>(), dy.as<float>());
    fetch(engine, device, stream, dy, n, got);
    compare(
        result, describe_launch("saxpy", n, config), got, n,
        [&](std::size_t i) { return static_cast<double>(a) * x[i] + y[i]; },
        [&](std::size_t i) { return 2.0 * FLT_EPSILON * (std::fabs(double{a} * x[i]) + std::fabs(double{y[i]})); });
    result.digest = fnv1a(result.digest, got.data(), n * sizeof(float));
  }
}

// ---- kiln::map<T, ItemsPerThread> ----

template <typename T, int ItemsPerThread>
void run_map(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
             CaseResult& result) {
  const std::string expression = std::string("kiln::map<") + (std::is_same_v<T, float> ? "float" : "double") + ", " +
                                 std::to_string(ItemsPerThread) + ">";
  const kiln::Kernel kernel = builtin_program(engine, "map.cu", device).kernel(expression);
  std::mt19937_64 rng(seed);
  const T a = nonzero_real<T>(rng);
  const T b = nonzero_real<T>(rng);
  std::vector<T> in(n);
  for (T& value : in) {
    value = nonzero_real<T>(rng);
  }
  DeviceBuffer din(engine, n * sizeof(T), device);
  DeviceBuffer dout(engine, (n + kGuard) * sizeof(T), device);
  engine.copy_to_device(din.get(), in.data(), n * sizeof(T), stream, device);
  const double eps = std::is_same_v<T, float> ? FLT_EPSILON : DBL_EPSILON;
  const std::vector<kiln::LaunchConfig> shapes = {launch_config(blocks_for(n, 256 * ItemsPerThread), 256, stream),
                                                  launch_config(5, 96, stream)};
  std::vector<T> got;
  for (const kiln::LaunchConfig& config : shapes) {
    poison(engine, device, stream, dout);
    kernel.launch(config, static_cast<int>(n), a, b, din.as<const T>(), dout.as<T>());
    fetch(engine, device, stream, dout, n, got);
    compare(
        result, describe_launch(expression, n, config), got, n,
        [&](std::size_t i) { return static_cast<double>(a) * in[i] + b; },
        [&](std::size_t i) { return 2.0 * eps * (std::fabs(double(a) * in[i]) + std::fabs(double(b))); });
    result.digest = fnv1a(result.digest, got.data(), n * sizeof(T));
  }
}

// ---- reduce_sum_* ----

/// One reduction: *out starts at `initial` (the kernel adds to it), then the sum must match.
/// `exact`: the sum is exact in T (integers), else within the rounding bound of the summation tree.
template <typename T>
void reduce_once(kiln::Engine& engine, int device, kiln::StreamHandle stream, const kiln::Kernel& kernel,
                 const std::string& name, const std::vector<T>& values, T initial, bool exact, CaseResult& result) {
  const std::size_t n = values.size();
  DeviceBuffer din(engine, n * sizeof(T), device);
  DeviceBuffer dout(engine, (1 + kGuard) * sizeof(T), device);
  engine.copy_to_device(din.get(), values.data(), n * sizeof(T), stream, device);

  long double sum = initial;
  long double abs_sum = std::fabs(static_cast<long double>(initial));
  std::uint32_t wrapped = static_cast<std::uint32_t>(initial);
  for (const T value : values) {
    sum += value;
    abs_sum += std::fabs(static_cast<long double>(value));
    wrapped += static_cast<std::uint32_t>(value);
  }
  const std::vector<kiln::LaunchConfig> shapes = {
      launch_config(blocks_for(n, 256), 256, stream), launch_config(3, 1000, stream), launch_config(5, 32, stream),
      launch_config(std::min<std::uint32_t>(blocks_for(n, 1024), 64), 1024, stream)};
  std::vector<T> got;
  for (const kiln::LaunchConfig& config : shapes) {
    poison(engine, device, stream, dout);
    engine.copy_to_device(dout.get(), &initial, sizeof(T), stream, device);
    kernel.launch(config, static_cast<int>(n), din.as<const T>(), dout.as<T>());
    fetch(engine, device, stream, dout, 1, got);
    const std::string what = describe_launch(name, n, config);
    if constexpr (std::is_floating_point_v<T>) {
      // Longest chain of roundings: each thread's serial loop, the two shuffle trees, the block
      // partials' atomics. Error <= chain * eps * sum|x| (first-order bound).
      const double per_thread = std::ceil(double(n) / (double(config.grid.x) * config.block.x));
      const double chain = per_thread + config.grid.x + 2 * 10 + 4;
      const double eps = std::is_same_v<T, float> ? FLT_EPSILON : DBL_EPSILON;
      const double tolerance = exact ? 0.0 : chain * eps * static_cast<double>(abs_sum);
      compare(
          result, what, got, 1, [&](std::size_t) { return static_cast<double>(sum); },
          [&](std::size_t) { return tolerance; });
      if (exact) {
        result.digest = fnv1a(result.digest, got.data(), sizeof(T));
      }
    } else {
      compare(
          result, what, got, 1, [&](std::size_t) { return wrapped; }, [](std::size_t) { return 0.0; });
      result.digest = fnv1a(result.digest, got.data(), sizeof(T));
    }
  }
}

void run_reduce(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
                CaseResult& result) {
  const kiln::Program program = builtin_program(engine, "reduce.cu", device);
  std::mt19937_64 rng(seed);
  {  // f32 on small integers: every partial sum is exact, so the result must be exact.
    std::vector<float> values(n);
    for (float& value : values) {
      value = small_integer<float>(rng);
    }
    reduce_once<float>(engine, device, stream, program.kernel("reduce_sum_f32"), "reduce_sum_f32 (integers)", values,
                       static_cast<float>(1 + rng() % 1000), true, result);
  }
  {  // f32 on reals of both signs.
    std::vector<float> values(n);
    for (float& value : values) {
      value = nonzero_real<float>(rng);
    }
    reduce_once<float>(engine, device, stream, program.kernel("reduce_sum_f32"), "reduce_sum_f32 (reals)", values,
                       nonzero_real<float>(rng), false, result);
  }
  {  // f64 on reals: the bound is tight enough to catch one missing element.
    std::vector<double> values(n);
    for (double& value : values) {
      value = nonzero_real<double>(rng);
    }
    reduce_once<double>(engine, device, stream, program.kernel("reduce_sum_f64"), "reduce_sum_f64", values,
                        nonzero_real<double>(rng), false, result);
  }
  {  // u32 over the full range: exact modulo 2^32.
    std::vector<std::uint32_t> values(n);
    for (std::uint32_t& value : values) {
      value = static_cast<std::uint32_t>(rng());
    }
    reduce_once<std::uint32_t>(engine, device, stream, program.kernel("reduce_sum_u32"), "reduce_sum_u32", values,
                               static_cast<std::uint32_t>(rng()), true, result);
  }
}

// ---- scan_blocks_* + scan_add_* ----

/// Inclusive scan of `count` elements of `in` into `out` (may alias) with the three-pass scheme of
/// scan.cu, recursing on the block sums. `scratch` keeps the block-sum buffers alive until the caller
/// synchronizes.
template <typename T>
void scan_on_device(kiln::Engine& engine, int device, kiln::StreamHandle stream, const kiln::Kernel& scan_blocks,
                    const kiln::Kernel& scan_add, std::uint32_t block, const T* in, T* out, std::size_t count,
                    std::vector<std::unique_ptr<DeviceBuffer>>& scratch) {
  const std::uint32_t blocks = blocks_for(count, block);
  const kiln::LaunchConfig config = launch_config(blocks, block, stream);
  if (blocks == 1) {
    scan_blocks.launch(config, static_cast<int>(count), in, out, static_cast<T*>(nullptr));
    return;
  }
  scratch.push_back(std::make_unique<DeviceBuffer>(engine, blocks * sizeof(T), device));
  T* sums = scratch.back()->as<T>();
  scan_blocks.launch(config, static_cast<int>(count), in, out, sums);
  scan_on_device<T>(engine, device, stream, scan_blocks, scan_add, block, sums, sums, blocks, scratch);
  scan_add.launch(config, static_cast<int>(count), out, static_cast<const T*>(sums));
}

template <typename T>
void scan_once(kiln::Engine& engine, int device, kiln::StreamHandle stream, const kiln::Program& program,
               const std::string& suffix, const std::string& label, const std::vector<T>& values, bool exact,
               CaseResult& result) {
  const std::size_t n = values.size();
  const kiln::Kernel scan_blocks = program.kernel("scan_blocks_" + suffix);
  const kiln::Kernel scan_add = program.kernel("scan_add_" + suffix);
  DeviceBuffer din(engine, n * sizeof(T), device);
  DeviceBuffer dout(engine, (n + kGuard) * sizeof(T), device);
  engine.copy_to_device(din.get(), values.data(), n * sizeof(T), stream, device);

  std::vector<long double> prefix(n);
  std::vector<double> abs_prefix(n);
  std::vector<std::uint32_t> wrapped(n);
  long double running = 0;
  double running_abs = 0;
  std::uint32_t running_wrapped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    running += values[i];
    running_abs += std::fabs(static_cast<double>(values[i]));
    running_wrapped += static_cast<std::uint32_t>(values[i]);
    prefix[i] = running;
    abs_prefix[i] = running_abs;
    wrapped[i] = running_wrapped;
  }
  std::vector<T> got;
  for (const std::uint32_t block : {256U, 100U, 1024U}) {
    std::vector<std::unique_ptr<DeviceBuffer>> scratch;
    poison(engine, device, stream, dout);
    scan_on_device<T>(engine, device, stream, scan_blocks, scan_add, block, din.as<const T>(), dout.as<T>(), n,
                      scratch);
    fetch(engine, device, stream, dout, n, got);
    const std::string what = "scan_blocks_" + suffix + "/scan_add_" + suffix + " " + label + " n=" + std::to_string(n) +
                             " block=" + std::to_string(block);
    if constexpr (std::is_floating_point_v<T>) {
      // Each output goes through at most ~12 additions per recursion level (<= 4 levels here).
      compare(
          result, what, got, n, [&](std::size_t i) { return static_cast<double>(prefix[i]); },
          [&](std::size_t i) { return exact ? 0.0 : 64.0 * FLT_EPSILON * abs_prefix[i]; });
    } else {
      compare(
          result, what, got, n, [&](std::size_t i) { return wrapped[i]; }, [](std::size_t) { return 0.0; });
    }
    if (exact) {
      result.digest = fnv1a(result.digest, got.data(), n * sizeof(T));
    }
  }
}

void run_scan_f32(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
                  CaseResult& result) {
  const kiln::Program program = builtin_program(engine, "scan.cu", device);
  std::mt19937_64 rng(seed);
  std::vector<float> values(n);
  for (float& value : values) {
    value = small_integer<float>(rng);  // prefix sums <= 8 * 2^20: exact in float
  }
  scan_once<float>(engine, device, stream, program, "f32", "(integers)", values, true, result);
  for (float& value : values) {
    value = nonzero_real<float>(rng);
  }
  scan_once<float>(engine, device, stream, program, "f32", "(reals)", values, false, result);
}

void run_scan_u32(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
                  CaseResult& result) {
  const kiln::Program program = builtin_program(engine, "scan.cu", device);
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> values(n);
  for (std::uint32_t& value : values) {
    value = static_cast<std::uint32_t>(rng());
  }
  scan_once<std::uint32_t>(engine, device, stream, program, "u32", "(full range)", values, true, result);
}

// ---- sgemm ----

struct GemmShape {
  int m, n, k;
};

/// A matrix shape for problem size n: none a multiple of the 16x16 tile, k below and above it.
GemmShape gemm_shape(std::size_t n) {
  if (n <= 1) return {1, 1, 1};
  if (n <= 255) return {17, 255, 33};
  if (n <= 1000) return {100, 10, 1000};
  if (n <= 65537) return {257, 255, 129};
  return {1024, 1000, 67};
}

void run_sgemm(kiln::Engine& engine, int device, std::size_t size, std::uint64_t seed, kiln::StreamHandle stream,
               CaseResult& result) {
  const kiln::Kernel kernel = builtin_program(engine, "matmul.cu", device).kernel("sgemm");
  const GemmShape shape = gemm_shape(size);
  const auto m = static_cast<std::size_t>(shape.m);
  const auto n = static_cast<std::size_t>(shape.n);
  const auto k = static_cast<std::size_t>(shape.k);
  std::mt19937_64 rng(seed);
  std::vector<float> a(m * k), b(k * n);
  for (float& value : a) value = nonzero_real<float>(rng);
  for (float& value : b) value = nonzero_real<float>(rng);
  std::vector<double> expected(m * n), abs_sum(m * n);
  for (std::size_t row = 0; row < m; ++row) {
    for (std::size_t col = 0; col < n; ++col) {
      double sum = 0, sum_abs = 0;
      for (std::size_t e = 0; e < k; ++e) {
        const double product = double(a[row * k + e]) * b[e * n + col];
        sum += product;
        sum_abs += std::fabs(product);
      }
      expected[row * n + col] = sum;
      abs_sum[row * n + col] = sum_abs;
    }
  }
  DeviceBuffer da(engine, a.size() * sizeof(float), device);
  DeviceBuffer db(engine, b.size() * sizeof(float), device);
  DeviceBuffer dc(engine, (m * n + kGuard) * sizeof(float), device);
  engine.copy_to_device(da.get(), a.data(), a.size() * sizeof(float), stream, device);
  engine.copy_to_device(db.get(), b.data(), b.size() * sizeof(float), stream, device);
  poison(engine, device, stream, dc);
  const kiln::LaunchConfig config =
      launch_config(kiln::Dim3(blocks_for(n, 16), blocks_for(m, 16)), kiln::Dim3(16, 16), stream);
  kernel.launch(config, shape.m, shape.n, shape.k, da.as<const float>(), db.as<const float>(), dc.as<float>());
  std::vector<float> got;
  fetch(engine, device, stream, dc, m * n, got);
  const std::string what = "sgemm m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  compare(
      result, what, got, m * n, [&](std::size_t i) { return expected[i]; },
      [&](std::size_t i) { return double(k + 2) * FLT_EPSILON * abs_sum[i]; });
  result.digest = fnv1a(result.digest, got.data(), m * n * sizeof(float));
}

// ---- histogram256_u8, histogram_u32 ----

void run_histogram256(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
                      CaseResult& result) {
  const kiln::Kernel kernel = builtin_program(engine, "histogram.cu", device).kernel("histogram256_u8");
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> data(n);
  for (std::uint8_t& value : data) value = static_cast<std::uint8_t>(rng());
  std::vector<std::uint32_t> initial(256), expected(256);
  for (std::size_t bin = 0; bin < 256; ++bin) initial[bin] = static_cast<std::uint32_t>(rng() % 1000);
  DeviceBuffer ddata(engine, n, device);
  DeviceBuffer dbins(engine, (256 + kGuard) * sizeof(std::uint32_t), device);
  engine.copy_to_device(ddata.get(), data.data(), n, stream, device);
  expected = initial;
  for (const std::uint8_t value : data) ++expected[value];
  const std::vector<kiln::LaunchConfig> shapes = {launch_config(blocks_for(n, 256), 256, stream),
                                                  launch_config(3, 64, stream), launch_config(2, 1024, stream)};
  std::vector<std::uint32_t> got;
  for (const kiln::LaunchConfig& config : shapes) {
    poison(engine, device, stream, dbins);
    engine.copy_to_device(dbins.get(), initial.data(), 256 * sizeof(std::uint32_t), stream, device);
    kernel.launch(config, static_cast<int>(n), ddata.as<const std::uint8_t>(), dbins.as<std::uint32_t>());
    fetch(engine, device, stream, dbins, 256, got);
    compare(
        result, describe_launch("histogram256_u8", n, config), got, 256, [&](std::size_t i) { return expected[i]; },
        [](std::size_t) { return 0.0; });
    result.digest = fnv1a(result.digest, got.data(), 256 * sizeof(std::uint32_t));
  }
}

void run_histogram_u32(kiln::Engine& engine, int device, std::size_t n, std::uint64_t seed, kiln::StreamHandle stream,
                       CaseResult& result) {
  const kiln::Kernel kernel = builtin_program(engine, "histogram.cu", device).kernel("histogram_u32");
  std::mt19937_64 rng(seed);
  for (const std::uint32_t num_bins : {1000U, 7U}) {
    // About a fifth of the values are out of range and must be ignored.
    std::vector<std::uint32_t> values(n);
    for (std::uint32_t& value : values) value = static_cast<std::uint32_t>(rng() % (num_bins + num_bins / 4 + 1));
    std::vector<std::uint32_t> initial(num_bins);
    for (std::uint32_t& count : initial) count = static_cast<std::uint32_t>(rng() % 1000);
    std::vector<std::uint32_t> expected = initial;
    for (const std::uint32_t value : values) {
      if (value < num_bins) ++expected[value];
    }
    DeviceBuffer dvalues(engine, n * sizeof(std::uint32_t), device);
    DeviceBuffer dbins(engine, (num_bins + kGuard) * sizeof(std::uint32_t), device);
    engine.copy_to_device(dvalues.get(), values.data(), n * sizeof(std::uint32_t), stream, device);
    const std::uint32_t shared = num_bins * static_cast<std::uint32_t>(sizeof(std::uint32_t));
    const std::vector<kiln::LaunchConfig> shapes = {launch_config(blocks_for(n, 256), 256, stream, shared),
                                                    launch_config(5, 128, stream, shared)};
    std::vector<std::uint32_t> got;
    for (const kiln::LaunchConfig& config : shapes) {
      poison(engine, device, stream, dbins);
      engine.copy_to_device(dbins.get(), initial.data(), num_bins * sizeof(std::uint32_t), stream, device);
      kernel.launch(config, static_cast<int>(n), dvalues.as<const std::uint32_t>(), num_bins,
                    dbins.as<std::uint32_t>());
      fetch(engine, device, stream, dbins, num_bins, got);
      compare(
          result, describe_launch("histogram_u32 bins=" + std::to_string(num_bins), n, config), got, num_bins,
          [&](std::size_t i) { return expected[i]; }, [](std::size_t) { return 0.0; });
      result.digest = fnv1a(result.digest, got.data(), num_bins * sizeof(std::uint32_t));
    }
  }
}

}  // namespace

const std::vector<KernelCase>& kernel_cases() {
  static const std::vector<KernelCase> cases = {
      {"saxpy.cu", {"saxpy"}, run_saxpy},
      {"map.cu", {"kiln::map<float, 1>"}, run_map<float, 1>},
      {"map.cu", {"kiln::map<float, 4>"}, run_map<float, 4>},
      {"map.cu", {"kiln::map<double, 2>"}, run_map<double, 2>},
      {"reduce.cu", {"reduce_sum_f32", "reduce_sum_f64", "reduce_sum_u32"}, run_reduce},
      {"scan.cu", {"scan_blocks_f32", "scan_add_f32"}, run_scan_f32},
      {"scan.cu", {"scan_blocks_u32", "scan_add_u32"}, run_scan_u32},
      {"matmul.cu", {"sgemm"}, run_sgemm},
      {"histogram.cu", {"histogram256_u8"}, run_histogram256},
      {"histogram.cu", {"histogram_u32"}, run_histogram_u32},
  };
  return cases;
}

}  // namespace kiln_test
