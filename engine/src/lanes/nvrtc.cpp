// The NVRTC lane: compiles CUDA C++ to a CUBIN for sm_XX targets, and keeps the PTX of the same compile
// beside it (the CUDA driver lane JIT-compiles it for GPUs the CUBIN does not serve); compute_XX
// targets give PTX only. libnvrtc is dlopen'ed; its types come from the toolkit's nvrtc.h.
#include <cuda.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include "kiln/error.hpp"
#include "lanes/cuda_symbols.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"
#include "lanes/rtc_compile.hpp"
#include "lanes/symbols.hpp"

namespace kiln::vendor {
namespace {

KILN_SYMBOL_TABLE(NvrtcApi, KILN_NVRTC_SYMBOLS)
KILN_RTC_CALLS(NvrtcCalls, NvrtcApi, nvrtc, nvrtcProgram, nvrtcResult, NVRTC_SUCCESS)

/// Where NVRTC is looked for. KILN_CUDA_PATH names the one toolkit to use (only it is searched);
/// otherwise $CUDA_HOME, /usr/local/cuda, then the loader's path.
std::vector<std::string> nvrtc_candidates(const std::string& soname) {
  std::vector<std::string> candidates;
  std::vector<std::string> dirs = env_dirs("KILN_CUDA_PATH", {"lib64", "lib"});
  const bool exclusive = !dirs.empty();
  if (!exclusive) {
    dirs = env_dirs("CUDA_HOME", {"lib64", "lib"});
    dirs.emplace_back("/usr/local/cuda/lib64");
  }
  for (const std::string& dir : dirs) candidates.push_back(dir + "/" + soname);
  if (!exclusive) candidates.push_back(soname);
  return candidates;
}

class Nvrtc final : public Compiler {
 public:
  Nvrtc(DynamicLibrary library, NvrtcApi api)
      : m_library(std::move(library)), m_api(api), m_calls(NvrtcCalls::of(m_api)) {
    int major = 0, minor = 0;
    m_api.nvrtcVersion(&major, &minor);
    m_version = fmt::format("{}.{}", major, minor);
    m_identity = "nvrtc " + m_version;
    int count = 0;
    if (m_api.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      std::vector<int> archs(static_cast<std::size_t>(count));
      if (m_api.nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS) {
        for (int arch : archs) m_targets.push_back(fmt::format("sm_{}", arch));
      }
    }
  }

  Vendor vendor() const noexcept override { return Vendor::cuda; }
  const std::string& identity() const noexcept override { return m_identity; }
  std::vector<LibraryInfo> libraries() const override { return {{"nvrtc", m_library.path(), m_version}}; }
  std::vector<std::string> supported_targets() const override { return m_targets; }

  CompileOutput compile(const CompileInput& input) const override {
    rtc::Program program(m_calls, input);
    std::vector<const char*> flags = rtc::c_strings(input.flags);
    CompileOutput out;
    out.log = program.compile(flags);
    // An sm_XX target gives a CUBIN; a compute_XX target none (its size is 0), only the PTX.
    out.binary = program.fetch(m_api.nvrtcGetCUBINSize, m_api.nvrtcGetCUBIN, "GetCUBINSize", "GetCUBIN");
    // The PTX keeps its terminating NUL: the driver needs it.
    std::vector<std::byte> ptx = program.fetch(m_api.nvrtcGetPTXSize, m_api.nvrtcGetPTX, "GetPTXSize", "GetPTX");
    if (out.binary.empty()) {
      out.kind = PayloadKind::ptx;
      out.binary = std::move(ptx);
    } else {
      out.kind = PayloadKind::cubin;
      out.ptx = std::move(ptx);
    }
    out.lowered = program.lowered_names();
    return out;
  }

 private:
  DynamicLibrary m_library;
  NvrtcApi m_api;
  NvrtcCalls m_calls;
  std::string m_version;
  std::string m_identity;
  std::vector<std::string> m_targets;
};

}  // namespace

std::vector<std::string> nvrtc_search_list() {
  return nvrtc_candidates(fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000));
}

std::unique_ptr<Compiler> load_nvrtc() {
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(nvrtc_search_list(), searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(
        fmt::format("no NVRTC found (searched: {}); set CUDA_HOME or KILN_CUDA_PATH", join_searched(searched)));
  }
  NvrtcApi api;
  api.require([&](const char* name) { return library.symbol(name); }, "NVRTC at " + library.path());
  return std::make_unique<Nvrtc>(std::move(library), api);
}

}  // namespace kiln::vendor
