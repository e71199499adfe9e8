// The NVIDIA block: NVRTC (compile) and the CUDA driver API (load, look up, launch, memory).
// Both libraries are dlopen'ed; types come from the toolkit's cuda.h / nvrtc.h at build time.
// Driver symbols are resolved through cuGetProcAddress with the CUDA version built against, which
// picks the right ABI for names cuda.h remaps (cuMemAlloc -> cuMemAlloc_v2, ...).
#include <cuda.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <span>
#include <string_view>

#include "hot_path.hpp"
#include "kiln/cache/log.hpp"
#include "kiln/error.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"
#include "ptx.hpp"

namespace kiln::vendor {
namespace {

// ---- symbol lists (one per library): each generates the pointer table and the loader -----------

#define KILN_NVRTC_SYMBOLS(REQUIRED)                                                                   \
  REQUIRED(nvrtcVersion) REQUIRED(nvrtcGetErrorString) REQUIRED(nvrtcGetNumSupportedArchs)             \
  REQUIRED(nvrtcGetSupportedArchs) REQUIRED(nvrtcCreateProgram) REQUIRED(nvrtcDestroyProgram)          \
  REQUIRED(nvrtcCompileProgram) REQUIRED(nvrtcGetProgramLogSize) REQUIRED(nvrtcGetProgramLog)          \
  REQUIRED(nvrtcGetCUBINSize) REQUIRED(nvrtcGetCUBIN) REQUIRED(nvrtcGetPTXSize) REQUIRED(nvrtcGetPTX)  \
  REQUIRED(nvrtcAddNameExpression) REQUIRED(nvrtcGetLoweredName)

#define KILN_CUDA_SYMBOLS(REQUIRED, OPTIONAL)                                                           \
  REQUIRED(cuInit) REQUIRED(cuDriverGetVersion) REQUIRED(cuGetErrorName) REQUIRED(cuGetErrorString)     \
  REQUIRED(cuDeviceGetCount) REQUIRED(cuDeviceGet) REQUIRED(cuDeviceGetName) REQUIRED(cuDeviceGetAttribute) \
  REQUIRED(cuDeviceTotalMem) REQUIRED(cuDevicePrimaryCtxRetain) REQUIRED(cuCtxSetCurrent)               \
  REQUIRED(cuCtxGetCurrent) REQUIRED(cuModuleLoadData) REQUIRED(cuModuleUnload)                         \
  REQUIRED(cuModuleGetFunction) REQUIRED(cuFuncGetAttribute) REQUIRED(cuFuncSetAttribute)              \
  REQUIRED(cuLaunchKernel) REQUIRED(cuMemAlloc) REQUIRED(cuMemFree) REQUIRED(cuMemcpyHtoD)              \
  REQUIRED(cuMemcpyDtoH) REQUIRED(cuMemcpyHtoDAsync) REQUIRED(cuMemcpyDtoHAsync) REQUIRED(cuMemsetD8)   \
  REQUIRED(cuMemsetD8Async) REQUIRED(cuStreamCreate) REQUIRED(cuStreamDestroy) REQUIRED(cuStreamSynchronize) \
  REQUIRED(cuCtxSynchronize) OPTIONAL(cuFuncGetParamInfo) OPTIONAL(cuStreamGetCtx)

struct NvrtcApi {
#define KILN_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_NVRTC_SYMBOLS(KILN_DECLARE)
};

struct CudaApi {
  KILN_CUDA_SYMBOLS(KILN_DECLARE, KILN_DECLARE)
#undef KILN_DECLARE
};

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

std::string join_searched(const std::vector<std::string>& searched) { return fmt::format("{}", fmt::join(searched, "; ")); }

// ---- NVRTC ---------------------------------------------------------------------------------------

class Nvrtc final : public Compiler {
 public:
  Nvrtc(DynamicLibrary library, NvrtcApi api) : m_library(std::move(library)), m_api(api) {
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
    std::vector<const char*> header_texts, header_names;
    for (const Header& h : input.headers) {
      header_texts.push_back(h.text.c_str());
      header_names.push_back(h.name.c_str());
    }
    const std::string source(input.source);
    const std::string name(input.source_name);
    nvrtcProgram program = nullptr;
    check(m_api.nvrtcCreateProgram(&program, source.c_str(), name.c_str(), static_cast<int>(header_texts.size()),
                                   header_texts.data(), header_names.data()),
          "nvrtcCreateProgram", input);
    // The program is destroyed on every path (a skipped destroy is a leak of hundreds of MB).
    struct Destroy {
      const NvrtcApi& api;
      nvrtcProgram& program;
      ~Destroy() { api.nvrtcDestroyProgram(&program); }
    } destroy{m_api, program};

    for (const std::string& expression : input.name_expressions) {
      check(m_api.nvrtcAddNameExpression(program, expression.c_str()), "nvrtcAddNameExpression", input);
    }
    std::vector<const char*> flags;
    for (const std::string& f : input.flags) flags.push_back(f.c_str());
    const nvrtcResult compiled = m_api.nvrtcCompileProgram(program, static_cast<int>(flags.size()), flags.data());

    CompileOutput out;
    std::size_t log_size = 0;
    if (m_api.nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      out.log.resize(log_size);
      m_api.nvrtcGetProgramLog(program, out.log.data());
      while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    }
    if (compiled != NVRTC_SUCCESS) {
      throw CompileError(compile_failure_message(input, m_api.nvrtcGetErrorString(compiled), out.log), out.log,
                         name, std::vector<std::string>(input.flags.begin(), input.flags.end()));
    }
    std::size_t cubin_size = 0;
    check(m_api.nvrtcGetCUBINSize(program, &cubin_size), "nvrtcGetCUBINSize", input);
    if (cubin_size > 0) {  // 0 (with SUCCESS) for compute_XX targets
      out.binary.resize(cubin_size);
      check(m_api.nvrtcGetCUBIN(program, reinterpret_cast<char*>(out.binary.data())), "nvrtcGetCUBIN", input);
    }
    std::size_t ptx_size = 0;
    check(m_api.nvrtcGetPTXSize(program, &ptx_size), "nvrtcGetPTXSize", input);
    std::vector<std::byte> ptx(ptx_size);  // includes the terminating NUL the driver needs
    if (ptx_size > 0) check(m_api.nvrtcGetPTX(program, reinterpret_cast<char*>(ptx.data())), "nvrtcGetPTX", input);
    if (out.binary.empty()) {
      out.kind = PayloadKind::ptx;
      out.binary = std::move(ptx);
    } else {
      out.kind = PayloadKind::cubin;
      out.ptx = std::move(ptx);
    }
    for (const std::string& expression : input.name_expressions) {
      const char* lowered = nullptr;
      check(m_api.nvrtcGetLoweredName(program, expression.c_str(), &lowered), "nvrtcGetLoweredName", input);
      out.lowered.push_back({expression, lowered});  // copied: the string belongs to the program
    }
    return out;
  }

 private:
  void check(nvrtcResult result, const char* call, const CompileInput& input) const {
    if (result == NVRTC_SUCCESS) return;
    throw CompileError(fmt::format("{} failed: {} (source '{}', target {})", call, m_api.nvrtcGetErrorString(result),
                                   input.source_name, input.target),
                       "", std::string(input.source_name), std::vector<std::string>(input.flags.begin(), input.flags.end()));
  }

  static std::string compile_failure_message(const CompileInput& input, const char* status, const std::string& log) {
    // The first diagnostic line names the source and line ("saxpy.cu(12): error: ...").
    std::string first;
    for (std::size_t start = 0; start < log.size();) {
      const std::size_t end = std::min(log.find('\n', start), log.size());
      const std::string_view line(log.data() + start, end - start);
      if (line.find("error") != std::string_view::npos) {
        first = std::string(line);
        break;
      }
      start = end + 1;
    }
    return fmt::format("nvrtcCompileProgram failed: {} compiling '{}' for {}{}{}\n{}", status, input.source_name,
                       input.target, first.empty() ? "" : ": ", first, log);
  }

  DynamicLibrary m_library;
  NvrtcApi m_api;
  std::string m_version;
  std::string m_identity;
  std::vector<std::string> m_targets;
};

// ---- CUDA driver ----------------------------------------------------------------------------------

class CudaDriver final : public Runtime {
 public:
  CudaDriver(DynamicLibrary library, CudaApi api) : m_library(std::move(library)), m_api(api) {
    check(m_api.cuInit(0), "cuInit");
    int version = 0;
    check(m_api.cuDriverGetVersion(&version), "cuDriverGetVersion");
    m_version = fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
    int count = 0;
    check(m_api.cuDeviceGetCount(&count), "cuDeviceGetCount");
    for (int i = 0; i < count; ++i) {
      CUdevice device = 0;
      check(m_api.cuDeviceGet(&device, i), "cuDeviceGet");
      DeviceInfo info;
      info.vendor = Vendor::cuda;
      info.ordinal = i;
      char name[256] = {};
      check(m_api.cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName");
      info.name = name;
      const int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
      const int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
      info.target = fmt::format("sm_{}{}", major, minor);
      info.warp_size = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
      info.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
      info.max_shared_per_block_optin =
          static_cast<std::uint64_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device));
      info.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
      std::size_t bytes = 0;
      check(m_api.cuDeviceTotalMem(&bytes, device), "cuDeviceTotalMem");
      info.total_memory = bytes;
      m_devices.push_back(info);
      m_handles.push_back(device);
    }
    m_contexts = std::make_unique<std::atomic<CUcontext>[]>(m_devices.size());
  }

  Vendor vendor() const noexcept override { return Vendor::cuda; }
  std::vector<LibraryInfo> libraries() const override { return {{"driver", m_library.path(), m_version}}; }
  const std::vector<DeviceInfo>& devices() const noexcept override { return m_devices; }

  void make_current(int device) override {
    thread_local CUcontext current = nullptr;
    const CUcontext context = primary_context(device);
    if (current == context) {
      // Another library on this thread may have switched contexts behind our back; cheap to verify.
      CUcontext actual = nullptr;
      if (m_api.cuCtxGetCurrent(&actual) == CUDA_SUCCESS && actual == context) return;
    }
    check(m_api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    current = context;
  }

  KILN_HOT void* load_module(int device, const cache::Entry& entry) override {
    make_current(device);
    CUmodule module = nullptr;
    CUresult result = CUDA_ERROR_INVALID_IMAGE;
    std::string attempts;
    if (entry.payload_kind == PayloadKind::cubin || entry.payload_kind == PayloadKind::ptx) {
      result = m_api.cuModuleLoadData(&module, entry.payload.data());
      if (result == CUDA_SUCCESS) return module;
      attempts = fmt::format("{} {}: {}", entry.target, to_string(entry.payload_kind), describe(result));
    }
    // The PTX kept beside the CUBIN serves GPUs the CUBIN does not (newer arch, or a foreign CUBIN).
    if (entry.payload_kind == PayloadKind::cubin && !entry.aux.empty() && entry.aux.back() == std::byte{0}) {
      const CUresult ptx_result = m_api.cuModuleLoadData(&module, entry.aux.data());
      if (ptx_result == CUDA_SUCCESS) return module;
      attempts += fmt::format("; PTX fallback: {}", describe(ptx_result));
      result = ptx_result;
    }
    throw LoadError(fmt::format("cuModuleLoadData failed: {} for entry {} (device {} is {})", attempts,
                                entry.key_hash.hex(), device, m_devices.at(static_cast<std::size_t>(device)).target));
  }

  void unload_module(int device, void* module) noexcept override {
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    m_api.cuModuleUnload(static_cast<CUmodule>(module));
  }

  KILN_HOT void* get_function(void* module, const std::string& lowered_name) override {
    CUfunction function = nullptr;
    const CUresult result = m_api.cuModuleGetFunction(&function, static_cast<CUmodule>(module), lowered_name.c_str());
    if (result == CUDA_ERROR_NOT_FOUND) return nullptr;
    check(result, "cuModuleGetFunction", lowered_name);
    return function;
  }

  KILN_HOT FunctionInfo function_info(void* function, const cache::Entry& entry,
                                      const std::string& lowered_name) override {
    auto f = static_cast<CUfunction>(function);
    FunctionInfo info;
    const auto get = [&](CUfunction_attribute attribute) {
      int value = 0;
      check(m_api.cuFuncGetAttribute(&value, attribute, f), "cuFuncGetAttribute", lowered_name);
      return value;
    };
    info.max_threads_per_block = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info.num_regs = get(CU_FUNC_ATTRIBUTE_NUM_REGS);
    info.static_shared_bytes = static_cast<std::size_t>(get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
    if (m_api.cuFuncGetParamInfo != nullptr) info.params = param_layout(f, entry, lowered_name);
    return info;
  }

  /// The kernel's parameters (offset, size) from cuFuncGetParamInfo; nullopt when the driver cannot tell.
  KILN_HOT std::optional<std::vector<ParamInfo>> param_layout(CUfunction f, const cache::Entry& entry,
                                                              const std::string& lowered_name) const {
    std::vector<ParamInfo> params;
    // CUDA 13.0 has no parameter-count query; asking for the index past the last is how the driver
    // tells the count, and that failing call is its slowest answer (driver 580 on the H200 host: ~20 us
    // the first time in a process, ~2 us after). The PTX kept beside the CUBIN, from the same compile,
    // declares the count: with it the driver is asked only for indices that exist, and each size it
    // gives must equal the declared one. Without PTX, or on any disagreement, the driver is probed.
    // (A PTX that declares fewer parameters than its CUBIN takes cannot come out of one compile; only
    // someone who can write the cache owner's entries could plant one, and such a writer controls the
    // kernel's code anyway.)
    const std::span<const std::byte> ptx_bytes = entry.payload_kind == PayloadKind::ptx ? std::span(entry.payload)
                                                                                         : std::span(entry.aux);
    const std::string_view ptx(reinterpret_cast<const char*>(ptx_bytes.data()), ptx_bytes.size());
    if (const auto declared = ptx::entry_param_sizes(ptx, lowered_name)) {
      for (const std::size_t declared_size : *declared) {
        std::size_t offset = 0, size = 0;
        if (m_api.cuFuncGetParamInfo(f, params.size(), &offset, &size) != CUDA_SUCCESS || size != declared_size) break;
        params.push_back({offset, size});
      }
      if (params.size() == declared->size()) return params;
      KILN_LOG(debug, "kernel {}: the PTX's parameter list disagrees with the driver's; asking the driver",
               lowered_name);
      params.clear();
    }
    for (std::size_t i = 0; i < 4096; ++i) {
      std::size_t offset = 0, size = 0;
      const CUresult result = m_api.cuFuncGetParamInfo(f, i, &offset, &size);
      if (result == CUDA_ERROR_INVALID_VALUE) return params;
      if (result != CUDA_SUCCESS) return std::nullopt;  // the driver cannot tell: launches go unchecked
      params.push_back({offset, size});
    }
    return std::nullopt;
  }

  void set_max_dynamic_shared(void* function, std::size_t bytes) override {
    check(m_api.cuFuncSetAttribute(static_cast<CUfunction>(function), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }

  void launch(int device, void* function, const LaunchConfig& c, const ArgPack& args, bool checked) override {
    make_current(device);
    CUresult result;
    if (checked) {
      // kernelParams: one pointer per argument into the pack; the driver copies each by the kernel's
      // own layout, which the pack was checked against.
      void* params[ArgPack::kMaxArgs];
      for (std::size_t i = 0; i < args.count(); ++i) params[i] = const_cast<std::byte*>(args.data()) + args.arg_offset(i);
      result = m_api.cuLaunchKernel(static_cast<CUfunction>(function), c.grid.x, c.grid.y, c.grid.z, c.block.x,
                                    c.block.y, c.block.z, c.shared_bytes, static_cast<CUstream>(c.stream), params,
                                    nullptr);
    } else {
      // Layout unknown (a driver without cuFuncGetParamInfo): the packed buffer, whose size the driver
      // is told, so a wrong argument list cannot make it read past what was given.
      std::size_t size = args.size();
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<std::byte*>(args.data()), CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &size, CU_LAUNCH_PARAM_END};
      result = m_api.cuLaunchKernel(static_cast<CUfunction>(function), c.grid.x, c.grid.y, c.grid.z, c.block.x,
                                    c.block.y, c.block.z, c.shared_bytes, static_cast<CUstream>(c.stream), nullptr,
                                    extra);
    }
    if (result != CUDA_SUCCESS) {
      throw LaunchError(fmt::format("cuLaunchKernel failed: {} (grid {}x{}x{}, block {}x{}x{}, {} B dynamic shared)",
                                    describe(result), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
                                    c.shared_bytes));
    }
  }

  void* allocate(int device, std::size_t bytes) override {
    make_current(device);
    CUdeviceptr pointer = 0;
    const CUresult result = m_api.cuMemAlloc(&pointer, bytes);
    if (result != CUDA_SUCCESS) {
      throw LaunchError(fmt::format("cuMemAlloc failed: {} allocating {} bytes on device {} ({} bytes total)",
                                    describe(result), bytes, device, m_devices.at(static_cast<std::size_t>(device)).total_memory));
    }
    return reinterpret_cast<void*>(pointer);
  }

  void free(int device, void* pointer) noexcept override {
    if (pointer == nullptr) return;
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    m_api.cuMemFree(reinterpret_cast<CUdeviceptr>(pointer));
  }

  void copy_to_device(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    const auto d = reinterpret_cast<CUdeviceptr>(dst);
    check(stream == nullptr ? m_api.cuMemcpyHtoD(d, src, bytes)
                            : m_api.cuMemcpyHtoDAsync(d, src, bytes, static_cast<CUstream>(stream)),
          "cuMemcpyHtoD");
  }

  void copy_to_host(int device, void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    const auto s = reinterpret_cast<CUdeviceptr>(src);
    check(stream == nullptr ? m_api.cuMemcpyDtoH(dst, s, bytes)
                            : m_api.cuMemcpyDtoHAsync(dst, s, bytes, static_cast<CUstream>(stream)),
          "cuMemcpyDtoH");
  }

  void memset(int device, void* dst, int value, std::size_t bytes, StreamHandle stream) override {
    make_current(device);
    const auto d = reinterpret_cast<CUdeviceptr>(dst);
    const auto byte = static_cast<unsigned char>(value);
    check(stream == nullptr ? m_api.cuMemsetD8(d, byte, bytes)
                            : m_api.cuMemsetD8Async(d, byte, bytes, static_cast<CUstream>(stream)),
          "cuMemsetD8");
  }

  StreamHandle create_stream(int device) override {
    make_current(device);
    CUstream stream = nullptr;
    check(m_api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return stream;
  }

  void destroy_stream(int device, StreamHandle stream) noexcept override {
    if (stream == nullptr) return;
    try {
      make_current(device);
    } catch (...) {
      return;
    }
    m_api.cuStreamDestroy(static_cast<CUstream>(stream));
  }

  void synchronize(int device, StreamHandle stream) override {
    make_current(device);
    if (stream == nullptr) {
      check(m_api.cuCtxSynchronize(), "cuCtxSynchronize");
    } else {
      check(m_api.cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
    }
  }

  std::optional<int> stream_device(StreamHandle stream) override {
    if (stream == nullptr || m_api.cuStreamGetCtx == nullptr) return std::nullopt;
    // Special handles (legacy / per-thread default streams) have no context of their own.
    if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return std::nullopt;
    CUcontext context = nullptr;
    if (m_api.cuStreamGetCtx(static_cast<CUstream>(stream), &context) != CUDA_SUCCESS) return std::nullopt;
    for (std::size_t i = 0; i < m_devices.size(); ++i) {
      if (m_contexts[i].load(std::memory_order_acquire) == context) return static_cast<int>(i);
    }
    return std::nullopt;
  }

 private:
  int attribute(CUdevice_attribute attribute, CUdevice device) const {
    int value = 0;
    check(m_api.cuDeviceGetAttribute(&value, attribute, device), "cuDeviceGetAttribute");
    return value;
  }

  CUcontext primary_context(int device) {
    if (device < 0 || static_cast<std::size_t>(device) >= m_devices.size()) {
      throw ConfigError(fmt::format("CUDA device {} does not exist ({} device(s))", device, m_devices.size()));
    }
    std::atomic<CUcontext>& slot = m_contexts[static_cast<std::size_t>(device)];
    if (CUcontext context = slot.load(std::memory_order_acquire)) return context;  // every launch: no lock
    const std::lock_guard lock(m_mutex);
    CUcontext context = slot.load(std::memory_order_relaxed);
    if (context == nullptr) {
      // The primary context is shared with the runtime API, CuPy and PyTorch; it is retained for the
      // process's lifetime (never released: other libraries may still use it at exit).
      check(m_api.cuDevicePrimaryCtxRetain(&context, m_handles[static_cast<std::size_t>(device)]),
            "cuDevicePrimaryCtxRetain");
      slot.store(context, std::memory_order_release);
    }
    return context;
  }

  std::string describe(CUresult result) const {
    const char* name = nullptr;
    const char* text = nullptr;
    m_api.cuGetErrorName(result, &name);
    m_api.cuGetErrorString(result, &text);
    return fmt::format("{} ({})", name != nullptr ? name : "CUDA_ERROR_UNKNOWN", text != nullptr ? text : "no description");
  }

  KILN_HOT void check(CUresult result, const char* call, std::string_view context = {}) const {
    if (result == CUDA_SUCCESS) return;
    std::string message = fmt::format("{} failed: {}", call, describe(result));
    if (!context.empty()) message += fmt::format(" ({})", context);
    if (result == CUDA_ERROR_OUT_OF_MEMORY || result == CUDA_ERROR_INVALID_VALUE ||
        result == CUDA_ERROR_LAUNCH_FAILED || result == CUDA_ERROR_ILLEGAL_ADDRESS) {
      throw LaunchError(message);
    }
    if (result == CUDA_ERROR_NO_DEVICE || result == CUDA_ERROR_NOT_INITIALIZED || result == CUDA_ERROR_INVALID_DEVICE ||
        result == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH || result == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) {
      throw DeviceUnavailable(message);
    }
    throw LaunchError(message);
  }

  DynamicLibrary m_library;
  CudaApi m_api;
  std::string m_version;
  std::vector<DeviceInfo> m_devices;
  std::vector<CUdevice> m_handles;
  std::mutex m_mutex;
  std::unique_ptr<std::atomic<CUcontext>[]> m_contexts;  ///< per device; set once, under m_mutex
};

}  // namespace

std::vector<std::string> nvrtc_search_list() {
  return nvrtc_candidates(fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000));
}

std::unique_ptr<Compiler> load_nvrtc() {
  const std::vector<std::string> candidates = nvrtc_search_list();
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(candidates, searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no NVRTC found (searched: {}); set CUDA_HOME or KILN_CUDA_PATH", join_searched(searched)));
  }
  NvrtcApi api;
#define KILN_RESOLVE(name)                                                                                \
  api.name = reinterpret_cast<decltype(api.name)>(library.symbol(#name));                                 \
  if (api.name == nullptr) {                                                                              \
    throw DeviceUnavailable(fmt::format("NVRTC at {} lacks required symbol {}", library.path(), #name)); \
  }
  KILN_NVRTC_SYMBOLS(KILN_RESOLVE)
#undef KILN_RESOLVE
  return std::make_unique<Nvrtc>(std::move(library), api);
}

std::unique_ptr<Runtime> load_cuda_runtime() {
  // The driver is the system's (it must match the kernel module): the loader's path only.
  const std::vector<std::string> candidates = {"libcuda.so.1"};
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(candidates, searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no CUDA driver found (searched: {})", join_searched(searched)));
  }
  using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProcAddress>(library.symbol("cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    throw DeviceUnavailable(fmt::format("CUDA driver at {} lacks cuGetProcAddress_v2 (driver older than CUDA 12?)", library.path()));
  }
  // The ABI version every symbol is resolved at. It must give the prototype cuda.h declares under the
  // un-suffixed name, which is NOT always what CUDA_VERSION gives: at 13000 cuGetProcAddress returns
  // cuCtxSynchronize_v2(CUcontext) for "cuCtxSynchronize" and cuStreamGetCtx_v2(.., CUgreenCtx*) for
  // "cuStreamGetCtx" (from 12050), while cuda.h declares cuCtxSynchronize(void) and the 2-argument
  // cuStreamGetCtx. 12040 is the newest version that matches cuda.h for every symbol in the list and
  // still has cuFuncGetParamInfo (12040). Check cudaTypedefs.h (PFN_<name>_v<version>) when adding one.
  constexpr int kDriverApiVersion = 12040;
  CudaApi api;
  const auto resolve = [&](const char* name, void** slot, bool required) {
    CUdriverProcAddressQueryResult status{};
    const CUresult result = get_proc(name, slot, kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || *slot == nullptr) {
      *slot = nullptr;
      if (required) {
        throw DeviceUnavailable(fmt::format("CUDA driver at {} lacks required symbol {} (ABI of CUDA {})", library.path(), name, kDriverApiVersion));
      }
    }
  };
#define KILN_RESOLVE_REQUIRED(name) resolve(#name, reinterpret_cast<void**>(&api.name), true);
#define KILN_RESOLVE_OPTIONAL(name) resolve(#name, reinterpret_cast<void**>(&api.name), false);
  KILN_CUDA_SYMBOLS(KILN_RESOLVE_REQUIRED, KILN_RESOLVE_OPTIONAL)
#undef KILN_RESOLVE_REQUIRED
#undef KILN_RESOLVE_OPTIONAL
  return std::make_unique<CudaDriver>(std::move(library), api);
}

}  // namespace kiln::vendor
