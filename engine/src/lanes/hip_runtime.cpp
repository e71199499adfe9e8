// The AMD block: HIPRTC (compile) and the HIP module API (load, look up, launch, memory).
// Every library is dlopen'ed; types come from HIP's hiprtc.h / hip_runtime_api.h at build time.
// Search order for each library: $ROCM_PATH/lib (default /opt/rocm/lib), then the loader's path.
// HIPRTC: libhiprtc.so.{7,6,5}, then the HIPRTC symbols inside libamdhip64.so.{7,6,5} (HIP 5.x has
// no separate libhiprtc; HIP 7 has them only there).
#include <fmt/format.h>
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <hip/hiprtc.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "amdgpu_metadata.hpp"
#include "kiln/error.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"

namespace kiln::vendor {
namespace {

// Pointer types the headers cannot give through decltype (see hip_symbols.hpp).
using HipMallocFn = hipError_t (*)(void**, std::size_t);                 // overloaded by a template
using HipGetDevicePropertiesFn = hipError_t (*)(hipDeviceProp_t*, int);  // layout of these headers
using HipStreamGetDeviceFn = hipError_t (*)(hipStream_t, hipDevice_t*);  // not in HIP 5.x headers
using ComgrGetVersionFn = void (*)(std::size_t*, std::size_t*);          // amd_comgr.h is optional
using ComgrGetIsaCountFn = int (*)(std::size_t*);
using ComgrGetIsaNameFn = int (*)(std::size_t, const char**);

}  // namespace
}  // namespace kiln::vendor

#include "hot_path.hpp"
#include "lanes/hip_symbols.hpp"

namespace kiln::vendor {
namespace {

enum class Requirement : bool { optional, required };

// ---- pointer tables, loader and reset, generated from the lists --------------------------------

#define KILN_DECLARE(requirement, name, type) type name = nullptr;
#define KILN_RESOLVE(requirement, name, type)           \
  name = reinterpret_cast<type>(library.symbol(#name)); \
  if (name == nullptr && Requirement::requirement == Requirement::required && missing == nullptr) missing = #name;
#define KILN_RESET(requirement, name, type) name = nullptr;
#define KILN_TABLE(Table, LIST)                                                         \
  struct Table {                                                                        \
    LIST(KILN_DECLARE)                                                                  \
    /** Resolves every entry; returns the first missing required symbol, or nullptr. */ \
    const char* resolve(const DynamicLibrary& library) {                                \
      const char* missing = nullptr;                                                    \
      LIST(KILN_RESOLVE)                                                                \
      return missing;                                                                   \
    }                                                                                   \
    void reset() noexcept { LIST(KILN_RESET) }                                          \
  };
KILN_TABLE(HipApi, KILN_HIP_RUNTIME_SYMBOLS)
KILN_TABLE(HiprtcApi, KILN_HIPRTC_SYMBOLS)
KILN_TABLE(ComgrApi, KILN_COMGR_SYMBOLS)
#undef KILN_TABLE
#undef KILN_RESET
#undef KILN_RESOLVE
#undef KILN_DECLARE

// ---- finding the libraries ------------------------------------------------------------------------

std::vector<std::string> rocm_dirs() {
  std::vector<std::string> dirs = env_dirs("ROCM_PATH", {"lib"});
  if (dirs.empty()) dirs.emplace_back("/opt/rocm/lib");
  return dirs;
}

/// Every directory in `dirs` with every name, then every bare name (the loader's path).
std::vector<std::string> candidates(const std::vector<std::string>& dirs, std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (const std::string& dir : dirs) {
    for (const char* name : names) out.push_back(dir + "/" + name);
  }
  for (const char* name : names) out.emplace_back(name);
  return out;
}

std::string join(const std::vector<std::string>& items) { return fmt::format("{}", fmt::join(items, "; ")); }

/// The version a library's real file name carries: libamdhip64.so.5 -> libamdhip64.so.5.2.21153 ->
/// "5.2.21153". Empty when the name carries no "major.minor".
std::string version_from_file_name(const std::string& path) {
  char resolved[PATH_MAX];
  std::string name = realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
  name = name.substr(name.find_last_of('/') + 1);
  const std::size_t so = name.find(".so.");
  if (so == std::string::npos) return {};
  std::string version = name.substr(so + 4);
  return version.find('.') == std::string::npos ? std::string() : version;
}

/// HIP_VERSION-style number (major * 10^7 + minor * 10^5 + patch) as "major.minor.patch".
std::string hip_version_text(int version) {
  return fmt::format("{}.{}.{}", version / 10000000, (version / 100000) % 100, version % 100000);
}

/// The directory part of a path ("." when none).
std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

/// HIPRTC emits diagnostics against a temporary file ("/tmp/comgr-1a2b3c/input/CompileSource:3:5:");
/// this names the caller's source instead.
std::string name_source(std::string text, std::string_view source_name) {
  constexpr std::string_view kTemporary = "CompileSource";
  for (std::size_t at = text.find(kTemporary); at != std::string::npos; at = text.find(kTemporary, at)) {
    std::size_t begin = at;
    while (begin > 0 && text[begin - 1] != ' ' && text[begin - 1] != '\n' && text[begin - 1] != '\t') --begin;
    text.replace(begin, at + kTemporary.size() - begin, source_name);
    at = begin + source_name.size();
  }
  return text;
}

// ---- HIPRTC -----------------------------------------------------------------------------------------

/// Targets per HIP major, used only when the loaded comgr cannot list its ISAs. Conservative: an
/// unknown target can abort the process inside HIPRTC 5.2 (measured with gfx940 and gfx942).
std::vector<std::string> fallback_targets(int hip_major) {
  std::vector<std::string> targets = {
      "gfx600",  "gfx601",  "gfx602",  "gfx700",  "gfx701",  "gfx702",  "gfx703",  "gfx704",  "gfx705",
      "gfx801",  "gfx802",  "gfx803",  "gfx805",  "gfx810",  "gfx900",  "gfx902",  "gfx904",  "gfx906",
      "gfx908",  "gfx909",  "gfx90a",  "gfx90c",  "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030",
      "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"};  // comgr 2.4 (HIP 5.2), measured
  if (hip_major >= 6) {
    for (const char* t : {"gfx940", "gfx941", "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1103"})
      targets.emplace_back(t);
  }
  if (hip_major >= 7) {
    for (const char* t : {"gfx950", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}) targets.emplace_back(t);
  }
  return targets;
}

/// Serializes HIPRTC compiles in this process (all Compiler instances share the library's state).
std::mutex& compile_mutex() {
  static std::mutex mutex;
  return mutex;
}

class Hiprtc final : public Compiler {
 public:
  Hiprtc(DynamicLibrary library, HiprtcApi api, DynamicLibrary comgr, ComgrApi comgr_api)
      : m_library(std::move(library)), m_api(api), m_comgr(std::move(comgr)), m_comgr_api(comgr_api) {
    m_version = version_from_file_name(m_library.path());
    int runtime_version = 0;
    if (m_version.empty() && m_api.hipRuntimeGetVersion != nullptr &&
        m_api.hipRuntimeGetVersion(&runtime_version) == hipSuccess && runtime_version > 0) {
      m_version = hip_version_text(runtime_version);
    }
    if (m_version.empty()) m_version = "unknown";
    m_identity = "hiprtc hip-" + m_version;
    if (m_comgr.loaded()) {
      std::size_t major = 0, minor = 0;
      m_comgr_api.amd_comgr_get_version(&major, &minor);
      m_comgr_version = fmt::format("{}.{}", major, minor);
      m_identity += " comgr-" + m_comgr_version;
      std::size_t count = 0;
      if (m_comgr_api.amd_comgr_get_isa_count != nullptr && m_comgr_api.amd_comgr_get_isa_name != nullptr &&
          m_comgr_api.amd_comgr_get_isa_count(&count) == 0) {
        for (std::size_t i = 0; i < count && i < 4096; ++i) {
          const char* isa = nullptr;
          if (m_comgr_api.amd_comgr_get_isa_name(i, &isa) != 0 || isa == nullptr) continue;
          // "amdgcn-amd-amdhsa--gfx90a[:xnack+]" -> "gfx90a"
          std::string_view name(isa);
          if (const std::size_t dashes = name.rfind("--"); dashes != std::string_view::npos)
            name.remove_prefix(dashes + 2);
          name = name.substr(0, name.find(':'));
          if (name.starts_with("gfx") && std::find(m_targets.begin(), m_targets.end(), name) == m_targets.end()) {
            m_targets.emplace_back(name);
          }
        }
      }
    }
    if (m_targets.empty()) m_targets = fallback_targets(std::atoi(m_version.c_str()));
  }

  Vendor vendor() const noexcept override { return Vendor::hip; }
  const std::string& identity() const noexcept override { return m_identity; }
  std::vector<LibraryInfo> libraries() const override {
    std::vector<LibraryInfo> out = {{"hiprtc", m_library.path(), m_version}};
    if (m_comgr.loaded()) out.push_back({"comgr", m_comgr.path(), m_comgr_version});
    return out;
  }
  std::vector<std::string> supported_targets() const override { return m_targets; }

  CompileOutput compile(const CompileInput& input) const override {
    const std::vector<std::string> options(input.flags.begin(), input.flags.end());
    const std::string name(input.source_name);
    // HIPRTC 5.2 crashes (SIGSEGV) on an empty source, and aborts on a target it does not know.
    if (input.source.empty()) {
      throw CompileError(fmt::format("cannot compile '{}': the source is empty", name), "", name, options);
    }
    const std::string_view base = input.target.substr(0, input.target.find(':'));
    if (std::find(m_targets.begin(), m_targets.end(), base) == m_targets.end()) {
      throw ConfigError(fmt::format("target '{}' is not supported by {} (supported: {})", input.target, m_identity,
                                    fmt::join(m_targets, " ")));
    }
    std::vector<const char*> flags;
    bool has_arch = false;
    for (const std::string& f : input.flags) {
      flags.push_back(f.c_str());
      has_arch = has_arch || f.starts_with("--offload-arch=") || f.starts_with("--gpu-architecture=");
    }
    // Without an arch HIPRTC asks the HIP runtime for the current GPU (and fails without one).
    const std::string arch = fmt::format("--offload-arch={}", input.target);
    if (!has_arch) flags.push_back(arch.c_str());

    std::vector<const char*> header_texts, header_names;
    for (const Header& h : input.headers) {
      header_texts.push_back(h.text.c_str());
      header_names.push_back(h.name.c_str());
    }
    const std::string source(input.source);
    // One compile at a time per process. Two HIPRTC 5.2 compiles running at once produced a different
    // code object about once in 75 tries (unused device-library functions linked in: LLVM keeps
    // global state), and HIPRTC gains nothing from threads anyway; worker processes scale.
    const std::lock_guard serial(compile_mutex());
    hiprtcProgram program = nullptr;
    check(m_api.hiprtcCreateProgram(&program, source.c_str(), name.c_str(), static_cast<int>(header_texts.size()),
                                    header_texts.data(), header_names.data()),
          "hiprtcCreateProgram", input);
    struct Destroy {  // on every path, exceptions included
      const HiprtcApi& api;
      hiprtcProgram& program;
      ~Destroy() { api.hiprtcDestroyProgram(&program); }
    } destroy{m_api, program};

    for (const std::string& expression : input.name_expressions) {
      check(m_api.hiprtcAddNameExpression(program, expression.c_str()), "hiprtcAddNameExpression", input);
    }
    const hiprtcResult compiled = m_api.hiprtcCompileProgram(program, static_cast<int>(flags.size()), flags.data());
    CompileOutput out;
    out.kind = PayloadKind::amdgpu_code_object;
    std::size_t log_size = 0;
    if (m_api.hiprtcGetProgramLogSize(program, &log_size) == HIPRTC_SUCCESS && log_size > 1) {
      out.log.resize(log_size);
      m_api.hiprtcGetProgramLog(program, out.log.data());
      while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    }
    if (compiled != HIPRTC_SUCCESS) {
      throw CompileError(failure_message(input, m_api.hiprtcGetErrorString(compiled), out.log), out.log, name, options);
    }
    std::size_t code_size = 0;
    check(m_api.hiprtcGetCodeSize(program, &code_size), "hiprtcGetCodeSize", input);
    if (code_size == 0) {
      throw CompileError(fmt::format("hiprtcGetCodeSize returned 0 bytes for '{}' ({})", name, input.target), out.log,
                         name, options);
    }
    out.binary.resize(code_size);
    check(m_api.hiprtcGetCode(program, reinterpret_cast<char*>(out.binary.data())), "hiprtcGetCode", input);
    for (const std::string& expression : input.name_expressions) {
      const char* lowered = nullptr;
      check(m_api.hiprtcGetLoweredName(program, expression.c_str(), &lowered), "hiprtcGetLoweredName", input,
            expression);
      if (lowered == nullptr) {
        throw CompileError(fmt::format("hiprtcGetLoweredName gave no name for '{}' in '{}'", expression, name), out.log,
                           name, options);
      }
      out.lowered.push_back({expression, lowered});  // copied: the string belongs to the program
    }
    return out;
  }

 private:
  void check(hiprtcResult result, const char* call, const CompileInput& input, std::string_view what = {}) const {
    if (result == HIPRTC_SUCCESS) return;
    throw CompileError(
        fmt::format("{} failed: {}{}{} (source '{}', target {})", call, m_api.hiprtcGetErrorString(result),
                    what.empty() ? "" : " for ", what, input.source_name, input.target),
        "", std::string(input.source_name), std::vector<std::string>(input.flags.begin(), input.flags.end()));
  }

  static std::string failure_message(const CompileInput& input, const char* status, const std::string& log) {
    const std::string named = name_source(log, input.source_name);
    std::string first;  // the first diagnostic names the source and line: "saxpy.cu:12:5: error: ..."
    for (std::size_t start = 0; start < named.size();) {
      const std::size_t end = std::min(named.find('\n', start), named.size());
      const std::string_view line(named.data() + start, end - start);
      if (line.find("error") != std::string_view::npos) {
        first = std::string(line);
        break;
      }
      start = end + 1;
    }
    if (log.empty()) {
      return fmt::format(
          "hiprtcCompileProgram failed: {} compiling '{}' for {} (empty log: HIPRTC 5.x gives none when "
          "it cannot resolve the target)",
          status, input.source_name, input.target);
    }
    return fmt::format("hiprtcCompileProgram failed: {} compiling '{}' for {}{}{}\n{}", status, input.source_name,
                       input.target, first.empty() ? "" : ": ", first, named);
  }

  DynamicLibrary m_library;
  HiprtcApi m_api;
  DynamicLibrary m_comgr;
  ComgrApi m_comgr_api;
  std::string m_version;
  std::string m_comgr_version;
  std::string m_identity;
  std::vector<std::string> m_targets;
};

// ---- HIP module API ---------------------------------------------------------------------------------

class HipRuntime final : public Runtime {
 public:
  HipRuntime(DynamicLibrary library, HipApi api) : m_library(std::move(library)), m_api(api) {
    int version = 0;
    check<DeviceUnavailable>(m_api.hipRuntimeGetVersion(&version), "hipRuntimeGetVersion");
    m_version = hip_version_text(version);
    // No device is not an error here: the lane is loaded and reports zero devices.
    const hipError_t init = m_api.hipInit(0);
    if (init == hipErrorNoDevice || init == hipErrorInvalidDevice) return;
    check<DeviceUnavailable>(init, "hipInit");
    int count = 0;
    const hipError_t counted = m_api.hipGetDeviceCount(&count);
    if (counted == hipErrorNoDevice) return;
    check<DeviceUnavailable>(counted, "hipGetDeviceCount");
    const HipGetDevicePropertiesFn get_properties =
#if HIP_VERSION_MAJOR >= 6
        m_api.hipGetDevicePropertiesR0600;
#else
        m_api.hipGetDevicePropertiesR0000 != nullptr ? m_api.hipGetDevicePropertiesR0000 : m_api.hipGetDeviceProperties;
#endif
    for (int i = 0; i < count; ++i) {
      // Room beyond the struct: a runtime newer than these headers may write a longer one.
      struct alignas(16) Buffer {
        hipDeviceProp_t properties;
        std::byte spare[4096];
      };
      auto buffer = std::make_unique<Buffer>();
      std::memset(buffer.get(), 0, sizeof(Buffer));
      const hipDeviceProp_t& p = buffer->properties;
      check<DeviceUnavailable>(get_properties(&buffer->properties, i), "hipGetDeviceProperties");
      DeviceInfo info;
      info.vendor = Vendor::hip;
      info.ordinal = i;
      info.name.assign(p.name, strnlen(p.name, sizeof p.name));
      info.target.assign(p.gcnArchName, strnlen(p.gcnArchName, sizeof p.gcnArchName));
      if (info.target.empty() && p.gcnArch > 0) info.target = fmt::format("gfx{}", p.gcnArch);
      info.warp_size = p.warpSize;
      info.total_memory = p.totalGlobalMem;
      info.max_threads_per_block = p.maxThreadsPerBlock;
      info.max_shared_per_block_optin = p.sharedMemPerBlock;  // no opt-in on AMD: all of it, always
      info.multiprocessors = p.multiProcessorCount;
      m_devices.push_back(std::move(info));
    }
  }

  Vendor vendor() const noexcept override { return Vendor::hip; }
  std::vector<LibraryInfo> libraries() const override { return {{"hip runtime", m_library.path(), m_version}}; }
  const std::vector<DeviceInfo>& devices() const noexcept override { return m_devices; }

  void make_current(int device) override {
    (void)device_info(device);
    // The device is per thread in HIP; another library may have changed it, so ask rather than cache.
    int current = -1;
    if (m_api.hipGetDevice(&current) == hipSuccess && current == device) return;
    check<DeviceUnavailable>(m_api.hipSetDevice(device), "hipSetDevice", fmt::format("device {}", device));
  }

  KILN_HOT void* load_module(int device, const cache::Entry& entry) override {
    const std::string& device_target = device_info(device).target;
    if (entry.payload_kind != PayloadKind::amdgpu_code_object) {
      throw LoadError(
          fmt::format("entry {} holds a {} ({}), not an AMDGPU code object: it cannot load on HIP device {} ({})",
                      entry.key_hash.hex(), to_string(entry.payload_kind), entry.target, device, device_target));
    }
    make_current(device);
    hipModule_t module = nullptr;
    const hipError_t result = m_api.hipModuleLoadData(&module, entry.payload.data());
    if (result != hipSuccess) {
      throw LoadError(fmt::format("hipModuleLoadData failed: {} for entry {} ({} code object on device {}, {})",
                                  describe(result), entry.key_hash.hex(), entry.target, device, device_target));
    }
    const std::lock_guard lock(m_mutex);
    m_module_device[module] = device;
    return module;
  }

  void unload_module(int device, void* module) noexcept override {
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    static_cast<void>(m_api.hipModuleUnload(static_cast<hipModule_t>(module)));  // nothing to report from noexcept
    const std::lock_guard lock(m_mutex);
    m_module_device.erase(module);
    std::erase_if(m_functions, [module](const auto& item) { return item.second.module == module; });
  }

  KILN_HOT void* get_function(void* module, const std::string& lowered_name) override {
    const int device = device_of_module(module);
    make_current(device);
    hipFunction_t function = nullptr;
    const hipError_t result =
        m_api.hipModuleGetFunction(&function, static_cast<hipModule_t>(module), lowered_name.c_str());
    if (result == hipErrorNotFound || result == hipErrorInvalidDeviceFunction) return nullptr;
    if (result != hipSuccess) {
      throw LoadError(
          fmt::format("hipModuleGetFunction failed: {} for '{}' on device {}", describe(result), lowered_name, device));
    }
    const std::lock_guard lock(m_mutex);
    m_functions[function] = {module, device};
    return function;
  }

  KILN_HOT FunctionInfo function_info(void* function, const cache::Entry& entry,
                                      const std::string& lowered_name) override {
    FunctionInfo info;
    // The code object's metadata is the reference (it exists without a GPU and on every HIP version);
    // the runtime's attributes refine it where they answer.
    auto metadata = amdgpu::read_metadata(entry.payload);
    if (const auto* parsed = std::get_if<amdgpu::CodeObjectMetadata>(&metadata)) {
      if (const amdgpu::KernelMetadata* kernel = amdgpu::find_kernel(*parsed, lowered_name)) {
        info.max_threads_per_block = static_cast<int>(kernel->max_flat_workgroup_size);
        info.num_regs = static_cast<int>(kernel->vgpr_count);
        info.static_shared_bytes = static_cast<std::size_t>(kernel->group_segment_fixed_size);
        std::vector<ParamInfo> params;
        for (const amdgpu::KernelArg& arg : kernel->args) {
          if (!arg.hidden())
            params.push_back({static_cast<std::size_t>(arg.offset), static_cast<std::size_t>(arg.size)});
        }
        info.params = std::move(params);
      }
    }
    make_current(device_of_function(function));
    const auto attribute = [&](hipFunction_attribute which, auto& field) {
      int value = 0;
      if (m_api.hipFuncGetAttribute(&value, which, static_cast<hipFunction_t>(function)) == hipSuccess && value > 0) {
        field = static_cast<std::remove_reference_t<decltype(field)>>(value);
      }
    };
    attribute(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, info.max_threads_per_block);
    attribute(HIP_FUNC_ATTRIBUTE_NUM_REGS, info.num_regs);
    attribute(HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, info.static_shared_bytes);
    return info;
  }

  /// Nothing to do: AMD kernels need no opt-in; each may use the device's whole LDS (the launch fails
  /// beyond it).
  void set_max_dynamic_shared(void* /*function*/, std::size_t /*bytes*/) override {}

  void launch(int device, void* function, const LaunchConfig& c, const ArgPack& args, bool /*checked*/) override {
    make_current(device);
    // Only the packed-buffer form: passing kernelParams too is hipErrorInvalidValue.
    std::size_t packed_size = args.size();
    void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, const_cast<std::byte*>(args.data()), HIP_LAUNCH_PARAM_BUFFER_SIZE,
                     &packed_size, HIP_LAUNCH_PARAM_END};
    const hipError_t result = m_api.hipModuleLaunchKernel(static_cast<hipFunction_t>(function), c.grid.x, c.grid.y,
                                                          c.grid.z, c.block.x, c.block.y, c.block.z, c.shared_bytes,
                                                          static_cast<hipStream_t>(c.stream), nullptr, extra);
    if (result != hipSuccess) {
      throw LaunchError(
          fmt::format("hipModuleLaunchKernel failed: {} (grid {}x{}x{}, block {}x{}x{}, {} B dynamic shared, "
                      "{} B of arguments)",
                      describe(result), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared_bytes,
                      packed_size));
    }
  }

  void* allocate(int device, std::size_t bytes) override {
    make_current(device);
    void* pointer = nullptr;
    const hipError_t result = m_api.hipMalloc(&pointer, bytes);
    if (result != hipSuccess) {
      throw LaunchError(fmt::format("hipMalloc failed: {} allocating {} bytes on device {} ({} bytes total)",
                                    describe(result), bytes, device, device_info(device).total_memory));
    }
    return pointer;
  }

  void free(int device, void* pointer) noexcept override {
    if (pointer == nullptr) return;
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    static_cast<void>(m_api.hipFree(pointer));
  }

  void copy_to_device(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    void* source = const_cast<void*>(src);  // HIP 5.x declares the host source non-const
    check<LaunchError>(stream == nullptr
                           ? m_api.hipMemcpyHtoD(dst, source, bytes)
                           : m_api.hipMemcpyHtoDAsync(dst, source, bytes, static_cast<hipStream_t>(stream)),
                       "hipMemcpyHtoD", fmt::format("{} bytes to device {}", bytes, device));
  }

  void copy_to_host(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    void* source = const_cast<void*>(src);
    check<LaunchError>(stream == nullptr
                           ? m_api.hipMemcpyDtoH(dst, source, bytes)
                           : m_api.hipMemcpyDtoHAsync(dst, source, bytes, static_cast<hipStream_t>(stream)),
                       "hipMemcpyDtoH", fmt::format("{} bytes from device {}", bytes, device));
  }

  void memset(int device, void* dst, int value, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    const auto byte = static_cast<unsigned char>(value);
    check<LaunchError>(stream == nullptr ? m_api.hipMemsetD8(dst, byte, bytes)
                                         : m_api.hipMemsetD8Async(dst, byte, bytes, static_cast<hipStream_t>(stream)),
                       "hipMemsetD8", fmt::format("{} bytes on device {}", bytes, device));
  }

  StreamHandle create_stream(int device) override {
    make_current(device);
    hipStream_t stream = nullptr;
    check<LaunchError>(m_api.hipStreamCreate(&stream), "hipStreamCreate", fmt::format("device {}", device));
    const std::lock_guard lock(m_mutex);
    m_stream_device[stream] = device;
    return stream;
  }

  void destroy_stream(int device, StreamHandle stream) noexcept override {
    if (stream == nullptr) return;
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    static_cast<void>(m_api.hipStreamDestroy(static_cast<hipStream_t>(stream)));
    const std::lock_guard lock(m_mutex);
    m_stream_device.erase(stream);
  }

  void synchronize(int device, StreamHandle stream) override {
    make_current(device);
    if (stream == nullptr) {
      check<LaunchError>(m_api.hipDeviceSynchronize(), "hipDeviceSynchronize", fmt::format("device {}", device));
    } else {
      check<LaunchError>(m_api.hipStreamSynchronize(static_cast<hipStream_t>(stream)), "hipStreamSynchronize",
                         fmt::format("device {}", device));
    }
  }

  std::optional<int> stream_device(StreamHandle stream) override {
    if (stream == nullptr || stream == hipStreamPerThread) return std::nullopt;
    {
      const std::lock_guard lock(m_mutex);
      if (auto it = m_stream_device.find(stream); it != m_stream_device.end()) return it->second;
    }
    hipDevice_t device = -1;
    if (m_api.hipStreamGetDevice != nullptr &&
        m_api.hipStreamGetDevice(static_cast<hipStream_t>(stream), &device) == hipSuccess && device >= 0) {
      return static_cast<int>(device);
    }
    return std::nullopt;
  }

 private:
  const DeviceInfo& device_info(int device) const {
    if (device < 0 || static_cast<std::size_t>(device) >= m_devices.size()) {
      throw ConfigError(fmt::format("HIP device {} does not exist ({} device(s))", device, m_devices.size()));
    }
    return m_devices[static_cast<std::size_t>(device)];
  }

  struct FunctionHome {
    void* module = nullptr;
    int device = 0;
  };

  int device_of_module(void* module) const {
    const std::lock_guard lock(m_mutex);
    const auto it = m_module_device.find(module);
    if (it == m_module_device.end()) throw LoadError("HIP module handle not loaded by this runtime (unloaded?)");
    return it->second;
  }

  int device_of_function(void* function) const {
    const std::lock_guard lock(m_mutex);
    const auto it = m_functions.find(function);
    if (it == m_functions.end())
      throw LaunchError("HIP function handle not obtained from this runtime (module unloaded?)");
    return it->second.device;
  }

  std::string describe(hipError_t result) const {
    const char* name = m_api.hipGetErrorName(result);
    const char* text = m_api.hipGetErrorString(result);
    return fmt::format("{} ({})", name != nullptr ? name : "hipErrorUnknown",
                       text != nullptr ? text : "no description");
  }

  template <typename ErrorType>
  KILN_HOT void check(hipError_t result, const char* call, std::string_view context = {}) const {
    if (result == hipSuccess) return;
    std::string message = fmt::format("{} failed: {}", call, describe(result));
    if (!context.empty()) message += fmt::format(" ({})", context);
    if (result == hipErrorNoDevice || result == hipErrorInvalidDevice || result == hipErrorInsufficientDriver) {
      throw DeviceUnavailable(message);
    }
    throw ErrorType(message);
  }

  DynamicLibrary m_library;
  HipApi m_api;
  std::string m_version;
  std::vector<DeviceInfo> m_devices;
  mutable std::mutex m_mutex;
  std::unordered_map<void*, int> m_module_device;
  std::unordered_map<void*, FunctionHome> m_functions;
  std::unordered_map<void*, int> m_stream_device;
};

}  // namespace

std::vector<std::string> hiprtc_search_list() {
  return candidates(rocm_dirs(), {"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libamdhip64.so.7",
                                  "libamdhip64.so.6", "libamdhip64.so.5"});
}

std::unique_ptr<Compiler> load_hiprtc() {
  const std::vector<std::string> dirs = rocm_dirs();
  std::vector<std::string> searched;
  DynamicLibrary library;
  for (const std::string& candidate : hiprtc_search_list()) {
    DynamicLibrary attempt = DynamicLibrary::open_first({candidate}, searched);
    if (!attempt.loaded()) continue;
    // libamdhip64 carries HIPRTC only up to HIP 6.
    if (candidate.find("libamdhip64") != std::string::npos && attempt.symbol("hiprtcCreateProgram") == nullptr) {
      searched.push_back(attempt.path() + " (no HIPRTC symbols)");
      continue;
    }
    library = std::move(attempt);
    break;
  }
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no HIPRTC found (searched: {}); set ROCM_PATH", join(searched)));
  }
  HiprtcApi api;
  if (const char* missing = api.resolve(library)) {
    api.reset();
    throw DeviceUnavailable(fmt::format("HIPRTC library {} lacks required symbol {}", library.path(), missing));
  }
  // comgr: beside the HIPRTC library first (the one it uses), then the usual places. Optional.
  std::vector<std::string> comgr_dirs = {directory_of(library.path())};
  for (const std::string& d : dirs) comgr_dirs.push_back(d);
  std::vector<std::string> comgr_searched;
  DynamicLibrary comgr =
      DynamicLibrary::open_first(candidates(comgr_dirs, {"libamd_comgr.so.3", "libamd_comgr.so.2"}), comgr_searched);
  ComgrApi comgr_api;
  const bool comgr_usable = comgr.loaded() && comgr_api.resolve(comgr) == nullptr;
  if (!comgr_usable) comgr_api.reset();
  return std::make_unique<Hiprtc>(std::move(library), api, comgr_usable ? std::move(comgr) : DynamicLibrary(),
                                  comgr_api);
}

std::unique_ptr<Runtime> load_hip_runtime() {
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(
      candidates(rocm_dirs(), {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}), searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no HIP runtime found (searched: {}); set ROCM_PATH", join(searched)));
  }
  HipApi api;
  const char* missing = api.resolve(library);
#if HIP_VERSION_MAJOR >= 6
  if (missing == nullptr && api.hipGetDevicePropertiesR0600 == nullptr) missing = "hipGetDevicePropertiesR0600";
#else
  if (missing == nullptr && api.hipGetDevicePropertiesR0000 == nullptr && api.hipGetDeviceProperties == nullptr) {
    missing = "hipGetDeviceProperties";
  }
#endif
  if (missing != nullptr) {
    api.reset();
    throw DeviceUnavailable(fmt::format("HIP runtime {} lacks required symbol {}", library.path(), missing));
  }
  return std::make_unique<HipRuntime>(std::move(library), api);
}

}  // namespace kiln::vendor
