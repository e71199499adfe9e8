// expr_jit: a toy language runtime on kiln's C API. Each expression becomes a kernel source, kiln
// compiles it (or finds it in its disk cache), and the result on the GPU is checked against a CPU
// evaluation. Without a GPU the kernels are compiled for a named target (prewarm) but not run.
//
//   expr_jit                      the built-in demo expressions
//   expr_jit 'out = a*x + y' ...  your own
//   options: --target <t> (prewarm target without a GPU, default sm_90), --n <count> (default 1048576)
//
// Exit status: 0 when every expression parsed and matched the CPU, 1 otherwise, 2 on a usage error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "expr.hpp"
#include "kiln/kiln.h"

namespace {

constexpr const char* kDemos[] = {
    "out = a * x + sin(y) / (1 + z*z)",         "r = sqrt(x*x + y*y)",
    "g = exp(-x*x / 2) * cos(3 * y)",           "t = tanh(a - b) + log(1 + abs(c))",
    "p = pow(x, 2.5) - max(y, z) + min(x, -y)", "q = -(a + b) * (a - b) / (1 + fabs(a * b))",
};

constexpr double kTolerance = 1e-4;  // relative to max(1, |cpu|): a few ulp of float libm differences
constexpr std::uint32_t kBlock = 256;

/// Prints kiln's message for a failed call (and the compile log, if any) and returns false.
bool check(kiln_status status, const char* what) {
  if (status == KILN_OK) return true;
  std::fprintf(stderr, "  %s failed: %s: %s\n", what, kiln_status_name(status), kiln_last_error());
  if (status == KILN_ERROR_COMPILE && kiln_last_compile_log()[0] != '\0') {
    std::fprintf(stderr, "  compiler log:\n%s\n", kiln_last_compile_log());
  }
  return false;
}

const char* origin_name(kiln_origin origin) {
  switch (origin) {
    case KILN_ORIGIN_MEMORY:
      return "memory hit";
    case KILN_ORIGIN_DISK:
      return "disk hit";
    case KILN_ORIGIN_COMPILED:
      return "compiled";
    case KILN_ORIGIN_PACK:
      return "pack hit";
    case KILN_ORIGIN_REMOTE:
      return "remote hit";
  }
  return "?";
}

struct Job {
  expr_jit::Statement statement;
  std::string name;
  std::string source_text;
  std::vector<std::vector<float>> inputs;
  std::vector<float> expected;
};

Job make_job(expr_jit::Statement statement, std::size_t count) {
  Job job;
  job.name = expr_jit::kernel_name(statement);
  job.source_text = expr_jit::kernel_source(statement, job.name);
  for (const std::string& input : statement.inputs) job.inputs.push_back(expr_jit::make_input(input, count));
  job.expected.resize(count);
  for (std::size_t i = 0; i < count; ++i) job.expected[i] = expr_jit::evaluate(statement, job.inputs, i);
  job.statement = std::move(statement);
  return job;
}

/// Compiles, runs and checks one expression on the device. Returns true when it matched.
bool run_on_device(kiln_engine engine, const Job& job) {
  const std::size_t count = job.expected.size();
  const std::string file = job.name + ".cu";
  kiln_source source = nullptr;
  if (!check(kiln_source_from_text(file.c_str(), job.source_text.c_str(), nullptr, 0, &source),
             "kiln_source_from_text")) {
    return false;
  }
  bool ok = false;
  kiln_program program = nullptr;
  kiln_kernel kernel = nullptr;
  std::vector<void*> buffers(job.inputs.size() + 1, nullptr);
  std::vector<float> result(count);
  do {
    if (!check(kiln_program_create(engine, source, nullptr, 0, nullptr, 0, -1, &program), "kiln_program_create")) break;
    kiln_program_info info;
    kiln_program_info_init(&info);
    if (!check(kiln_program_get_info(program, &info), "kiln_program_get_info")) break;
    if (!check(kiln_program_get_kernel(program, job.name.c_str(), &kernel), "kiln_program_get_kernel")) break;

    bool allocated = true;
    for (void*& buffer : buffers)
      allocated = allocated && check(kiln_malloc(engine, count * sizeof(float), -1, &buffer), "kiln_malloc");
    if (!allocated) break;
    bool copied = true;
    for (std::size_t k = 0; k < job.inputs.size(); ++k) {
      copied = copied && check(kiln_copy_to_device(engine, buffers[k + 1], job.inputs[k].data(), count * sizeof(float),
                                                   nullptr, -1),
                               "kiln_copy_to_device");
    }
    if (!copied) break;

    // Arguments: out, each input, n. args[i] points at the value (for pointers: at the pointer).
    const auto n = static_cast<std::uint32_t>(count);
    std::vector<const void*> args;
    std::vector<std::size_t> sizes;
    for (void*& buffer : buffers) {
      args.push_back(&buffer);
      sizes.push_back(sizeof(void*));
    }
    args.push_back(&n);
    sizes.push_back(sizeof n);
    const auto grid = static_cast<std::uint32_t>((count + kBlock - 1) / kBlock);
    if (!check(kiln_kernel_launch(kernel, grid, 1, 1, kBlock, 1, 1, 0, nullptr, args.data(), sizes.data(), args.size()),
               "kiln_kernel_launch")) {
      break;
    }
    if (!check(kiln_copy_to_host(engine, result.data(), buffers[0], count * sizeof(float), nullptr, -1),
               "kiln_copy_to_host") ||
        !check(kiln_synchronize(engine, nullptr, -1), "kiln_synchronize")) {
      break;
    }
    double worst = 0;
    std::size_t worst_index = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double error = expr_jit::relative_error(result[i], job.expected[i]);
      if (error > worst || std::isnan(error)) {
        worst = error;
        worst_index = i;
      }
    }
    ok = worst <= kTolerance;
    std::printf("  kernel %s (%s, %s, key %.12s...)\n", job.name.c_str(), origin_name(info.origin), info.target,
                info.key);
    std::printf("  %s[0..2] = %.6g %.6g %.6g   (cpu %.6g %.6g %.6g)\n", job.statement.output.c_str(),
                static_cast<double>(result[0]), static_cast<double>(result[1]), static_cast<double>(result[2]),
                static_cast<double>(job.expected[0]), static_cast<double>(job.expected[1]),
                static_cast<double>(job.expected[2]));
    std::printf("  max error %.3g over %zu elements (at %zu: gpu %.9g, cpu %.9g): %s\n", worst, count, worst_index,
                static_cast<double>(result[worst_index]), static_cast<double>(job.expected[worst_index]),
                ok ? "OK" : "MISMATCH");
  } while (false);
  for (void* buffer : buffers) {
    if (buffer != nullptr) check(kiln_free(engine, buffer), "kiln_free");
  }
  if (kernel != nullptr) kiln_kernel_destroy(kernel);
  if (program != nullptr) kiln_program_destroy(program);
  kiln_source_destroy(source);
  return ok;
}

/// Compiles one expression for a named target into the disk cache (no GPU needed).
bool prewarm(kiln_engine engine, const Job& job, const char* target) {
  const std::string file = job.name + ".cu";
  kiln_source source = nullptr;
  if (!check(kiln_source_from_text(file.c_str(), job.source_text.c_str(), nullptr, 0, &source),
             "kiln_source_from_text")) {
    return false;
  }
  kiln_prewarm_result result;
  kiln_prewarm_result_init(&result);
  const bool ok = check(kiln_prewarm(engine, source, nullptr, 0, nullptr, 0, target, &result), "kiln_prewarm");
  if (ok) {
    std::printf("  kernel %s compiled for %s: %s, %llu bytes, %.3f s, key %.12s...\n", job.name.c_str(), result.target,
                origin_name(result.origin), static_cast<unsigned long long>(result.binary_bytes), result.seconds,
                result.key);
    std::printf("  %s[0..2] on the cpu = %.6g %.6g %.6g\n", job.statement.output.c_str(),
                static_cast<double>(job.expected[0]), static_cast<double>(job.expected[1]),
                static_cast<double>(job.expected[2]));
  }
  kiln_source_destroy(source);
  return ok;
}

void print_stats(const kiln_stats& s) {
  std::printf(
      "\nkiln statistics: memory hits %llu, disk hits %llu, misses %llu, compiles %llu (%.3f s), "
      "compile failures %llu, bytes read %llu, bytes written %llu\n",
      static_cast<unsigned long long>(s.memory_hits), static_cast<unsigned long long>(s.disk_hits),
      static_cast<unsigned long long>(s.misses), static_cast<unsigned long long>(s.compiles),
      static_cast<double>(s.compile_nanoseconds) * 1e-9, static_cast<unsigned long long>(s.compile_failures),
      static_cast<unsigned long long>(s.bytes_read), static_cast<unsigned long long>(s.bytes_written));
  if (s.compiles == 0 && s.compile_failures == 0 && s.disk_hits > 0) {
    std::printf("second run: 0 compiles (all disk hits)\n");
  } else if (s.compiles > 0) {
    std::printf("first run: %llu compiles (run again: every kernel comes from the disk cache)\n",
                static_cast<unsigned long long>(s.compiles));
  }
}

int usage(const char* program) {
  std::fprintf(stderr, "usage: %s [--target T] [--n COUNT] [expression ...]\n", program);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> texts;
  const char* target = "sm_90";
  std::size_t count = std::size_t{1} << 20;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--target" && a + 1 < argc) {
      target = argv[++a];
    } else if (arg == "--n" && a + 1 < argc) {
      count = std::strtoull(argv[++a], nullptr, 10);
      if (count < 3 || count > (std::size_t{1} << 30)) return usage(argv[0]);
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return 0;
    } else if (arg.starts_with("--")) {
      return usage(argv[0]);
    } else {
      texts.push_back(arg);
    }
  }
  if (texts.empty()) texts.assign(std::begin(kDemos), std::end(kDemos));

  kiln_engine engine = nullptr;
  if (!check(kiln_engine_create(nullptr, &engine), "kiln_engine_create")) return 1;
  int devices = 0;
  int device = -1;
  check(kiln_engine_device_count(engine, &devices, &device), "kiln_engine_device_count");
  if (devices > 0) {
    kiln_device_info info;
    kiln_device_info_init(&info);
    if (check(kiln_engine_device_info(engine, device, &info), "kiln_engine_device_info")) {
      std::printf("expr_jit: device %d: %s (%s), %zu elements per array\n", device, info.name, info.target, count);
    }
  } else {
    std::printf("expr_jit: no GPU: compiling for %s into the kiln cache (prewarm); the kernels cannot run here\n",
                target);
  }

  int failures = 0;
  int ran = 0;
  for (std::size_t e = 0; e < texts.size(); ++e) {
    std::printf("\n[%zu] %s\n", e + 1, texts[e].c_str());
    expr_jit::Statement statement;
    try {
      statement = expr_jit::parse(texts[e]);
    } catch (const expr_jit::ParseError& error) {
      std::printf("%s\n", expr_jit::describe(error, texts[e]).c_str());
      ++failures;
      continue;
    }
    const Job job = make_job(std::move(statement), count);
    const bool ok = devices > 0 ? run_on_device(engine, job) : prewarm(engine, job, target);
    failures += ok ? 0 : 1;
    ran += ok ? 1 : 0;
  }

  kiln_stats stats;
  kiln_stats_init(&stats);
  if (check(kiln_engine_stats(engine, &stats), "kiln_engine_stats")) print_stats(stats);
  if (devices == 0) {
    std::printf("compiled %d kernel%s for %s; cannot run them: no GPU device was found\n", ran, ran == 1 ? "" : "s",
                target);
  } else {
    std::printf("%d of %zu expressions matched the CPU\n", ran, texts.size());
  }
  kiln_engine_destroy(engine);
  return failures == 0 ? 0 : 1;
}
