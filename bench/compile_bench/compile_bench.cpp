// compile_bench: compile time of every built-in kernel through kiln (Engine::prewarm, memory-only
// cache, so every request compiles) vs a bare call of the same compiler with the same source,
// in-memory headers, name expressions and flags, in the same process. Runs alternate (kiln, bare,
// bare, kiln, ...) so drift hits both sides; the median of N runs is reported.
//   compile_bench [--runs N] [--lanes nvrtc,hiprtc]
// The flags come from the request's own canonical key, so both sides compile exactly the same input.
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/cache/key.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

#if KILN_BENCH_NVRTC
#include <cuda.h>
#include <nvrtc.h>
#endif
#if KILN_BENCH_HIPRTC
#include <hip/hiprtc.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Request {
  kiln::Source source;
  std::vector<std::string> names;
  std::vector<std::string> flags;
  std::string target;
};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find('\n', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Request make_request(kiln::Engine& engine, const kiln::Source& source, const std::string& target) {
  const std::vector<std::string> names = source.listed_kernels();
  const auto [hash, canonical] = engine.describe_key(source, {}, names, target);
  Request r{source, names, {}, target};
  const auto parts = kiln::cache::CanonicalKey::parse(canonical);
  for (const auto& part : *parts) {
    if (part.name == "options") r.flags = split_lines(part.value);
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// A bare compile: the vendor API called directly (library opened once, outside the timing).
struct Bare {
  void* library = nullptr;
  virtual ~Bare() = default;
  virtual void compile(const Request& r) = 0;
};

template <typename F>
F sym(void* library, const char* name) {
  void* p = dlsym(library, name);
  if (p == nullptr) throw std::runtime_error(fmt::format("missing symbol {}", name));
  return reinterpret_cast<F>(p);
}

#if KILN_BENCH_NVRTC
struct BareNvrtc final : Bare {
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcCompileProgram) compile_program;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) get_cubin;
  decltype(&nvrtcGetPTXSize) ptx_size;
  decltype(&nvrtcGetPTX) get_ptx;
  decltype(&nvrtcGetLoweredName) lowered;
  decltype(&nvrtcDestroyProgram) destroy;
  BareNvrtc() {
    library = dlopen(fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000).c_str(), RTLD_NOW);
    if (library == nullptr) throw std::runtime_error("libnvrtc not found");
    create = sym<decltype(create)>(library, "nvrtcCreateProgram");
    add_name = sym<decltype(add_name)>(library, "nvrtcAddNameExpression");
    compile_program = sym<decltype(compile_program)>(library, "nvrtcCompileProgram");
    cubin_size = sym<decltype(cubin_size)>(library, "nvrtcGetCUBINSize");
    get_cubin = sym<decltype(get_cubin)>(library, "nvrtcGetCUBIN");
    ptx_size = sym<decltype(ptx_size)>(library, "nvrtcGetPTXSize");
    get_ptx = sym<decltype(get_ptx)>(library, "nvrtcGetPTX");
    lowered = sym<decltype(lowered)>(library, "nvrtcGetLoweredName");
    destroy = sym<decltype(destroy)>(library, "nvrtcDestroyProgram");
  }
  void compile(const Request& r) override {
    std::vector<const char*> texts, names, flags;
    for (const auto& h : r.source.headers()) {
      texts.push_back(h.text.c_str());
      names.push_back(h.name.c_str());
    }
    for (const auto& f : r.flags) flags.push_back(f.c_str());
    const std::string text(r.source.text());
    nvrtcProgram p = nullptr;
    create(&p, text.c_str(), r.source.name().c_str(), static_cast<int>(texts.size()), texts.data(), names.data());
    for (const auto& n : r.names) add_name(p, n.c_str());
    if (compile_program(p, static_cast<int>(flags.size()), flags.data()) != NVRTC_SUCCESS) {
      throw std::runtime_error(fmt::format("bare compile of {} failed (flags: {})", r.source.name(), fmt::join(r.flags, " ")));
    }
    std::size_t size = 0;
    cubin_size(p, &size);
    std::vector<char> cubin(size);
    get_cubin(p, cubin.data());
    ptx_size(p, &size);
    std::vector<char> ptx(size);
    get_ptx(p, ptx.data());
    for (const auto& n : r.names) {
      const char* l = nullptr;
      lowered(p, n.c_str(), &l);
    }
    destroy(&p);
  }
};
#endif

#if KILN_BENCH_HIPRTC
struct BareHiprtc final : Bare {
  decltype(&hiprtcCreateProgram) create;
  decltype(&hiprtcAddNameExpression) add_name;
  decltype(&hiprtcCompileProgram) compile_program;
  decltype(&hiprtcGetCodeSize) code_size;
  decltype(&hiprtcGetCode) get_code;
  decltype(&hiprtcGetLoweredName) lowered;
  decltype(&hiprtcDestroyProgram) destroy;
  BareHiprtc() {
    for (const char* name : {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libamdhip64.so.5"}) {
      library = dlopen(name, RTLD_NOW);
      if (library != nullptr && dlsym(library, "hiprtcCreateProgram") != nullptr) break;
    }
    if (library == nullptr) throw std::runtime_error("no HIPRTC found");
    create = sym<decltype(create)>(library, "hiprtcCreateProgram");
    add_name = sym<decltype(add_name)>(library, "hiprtcAddNameExpression");
    compile_program = sym<decltype(compile_program)>(library, "hiprtcCompileProgram");
    code_size = sym<decltype(code_size)>(library, "hiprtcGetCodeSize");
    get_code = sym<decltype(get_code)>(library, "hiprtcGetCode");
    lowered = sym<decltype(lowered)>(library, "hiprtcGetLoweredName");
    destroy = sym<decltype(destroy)>(library, "hiprtcDestroyProgram");
  }
  void compile(const Request& r) override {
    std::vector<const char*> texts, names, flags;
    for (const auto& h : r.source.headers()) {
      texts.push_back(h.text.c_str());
      names.push_back(h.name.c_str());
    }
    for (const auto& f : r.flags) flags.push_back(f.c_str());
    const std::string text(r.source.text());
    hiprtcProgram p = nullptr;
    create(&p, text.c_str(), r.source.name().c_str(), static_cast<int>(texts.size()), texts.data(), names.data());
    for (const auto& n : r.names) add_name(p, n.c_str());
    if (compile_program(p, static_cast<int>(flags.size()), flags.data()) != HIPRTC_SUCCESS) throw std::runtime_error("bare compile failed");
    std::size_t size = 0;
    code_size(p, &size);
    std::vector<char> code(size);
    get_code(p, code.data());
    for (const auto& n : r.names) {
      const char* l = nullptr;
      lowered(p, n.c_str(), &l);
    }
    destroy(&p);
  }
};
#endif

void run_lane(const char* lane, Bare& bare, const std::string& target, int runs) {
  kiln::EngineConfig config;
  config.cache.disabled = true;  // every kiln request compiles
  kiln::Engine engine(config);
  fmt::print("\n### {} ({}), median of {} runs, ms\n\n", lane, target, runs);
  fmt::print("| source | kernels | kiln ms | bare ms | kiln / bare |\n|---|---|---|---|---|\n");
  std::vector<double> ratios;
  for (const std::string& name : kiln::Source::builtin_names()) {
    const kiln::Source source = kiln::Source::builtin(name);
    const Request r = make_request(engine, source, target);
    // Warm both paths once (library initialisation, first-compile costs).
    (void)engine.prewarm(source, {}, r.names, target);
    bare.compile(r);
    std::vector<double> kiln_ms, bare_ms;
    for (int i = 0; i < runs; ++i) {
      const auto time_kiln = [&] {
        const auto t0 = Clock::now();
        (void)engine.prewarm(source, {}, r.names, target);
        kiln_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      };
      const auto time_bare = [&] {
        const auto t0 = Clock::now();
        bare.compile(r);
        bare_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      };
      if (i % 2 == 0) {
        time_kiln();
        time_bare();
      } else {
        time_bare();
        time_kiln();
      }
    }
    const double k = median(kiln_ms), b = median(bare_ms);
    ratios.push_back(k / b);
    fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.3f} |\n", name, r.names.size(), k, b, k / b);
  }
  fmt::print("\n{}: median kiln/bare over all sources = {:.3f} (goal <= 1.03)\n", lane, median(ratios));
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 7;
  std::string lanes = "nvrtc,hiprtc";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--lanes" && i + 1 < argc) lanes = argv[++i];
    else {
      fmt::print(stderr, "usage: compile_bench [--runs N] [--lanes nvrtc,hiprtc]\n");
      return 2;
    }
  }
  fmt::print("compile_bench: {} runs per kernel; kiln = Engine::prewarm with the cache disabled\n", runs);
  int failures = 0;
#if KILN_BENCH_NVRTC
  if (lanes.find("nvrtc") != std::string::npos) {
    try {
      BareNvrtc bare;
      run_lane("NVRTC", bare, "sm_90", runs);
    } catch (const std::exception& e) {
      fmt::print("NVRTC: not measured: {}\n", e.what());
      ++failures;
    }
  }
#endif
#if KILN_BENCH_HIPRTC
  if (lanes.find("hiprtc") != std::string::npos) {
    try {
      BareHiprtc bare;
      run_lane("HIPRTC", bare, "gfx90a", runs);
    } catch (const std::exception& e) {
      fmt::print("HIPRTC: not measured: {}\n", e.what());
      ++failures;
    }
  }
#endif
  return failures == 0 ? 0 : 1;
}
