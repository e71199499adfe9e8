// The CUDA driver lane: devices, primary contexts, modules (CUBIN, or the PTX kept beside it),
// parameter layouts, launches, memory and streams, through the driver API. libcuda is dlopen'ed; its
// types come from the toolkit's cuda.h. Symbols are resolved through cuGetProcAddress at one fixed ABI
// version (kDriverApiVersion), which picks the right symbol for the names cuda.h remaps
// (cuMemAlloc -> cuMemAlloc_v2, ...).
#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <span>
#include <string_view>

#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "kiln/error.hpp"
#include "lanes/cuda_symbols.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"
#include "lanes/runtime_common.hpp"
#include "lanes/symbols.hpp"
#include "ptx.hpp"

namespace kiln::vendor {
namespace {

// The ABI version every driver symbol is resolved at (through cuGetProcAddress, by the list's
// un-suffixed names): CUDA 12.4, not the CUDA_VERSION built against. It must give the prototype cuda.h
// declares under the un-suffixed name, which is NOT always what CUDA_VERSION gives: at 13000
// cuGetProcAddress returns cuCtxSynchronize_v2(CUcontext) for "cuCtxSynchronize" and
// cuStreamGetCtx_v2(.., CUgreenCtx*) for "cuStreamGetCtx" (from 12050), while cuda.h declares
// cuCtxSynchronize(void) and the 2-argument cuStreamGetCtx. 12040 is the newest version that matches
// cuda.h for every symbol in the list and still has cuFuncGetParamInfo (12040). Check cudaTypedefs.h
// (PFN_<name>_v<version>) when adding one.
constexpr int kDriverApiVersion = 12040;

KILN_SYMBOL_TABLE(CudaApi, KILN_CUDA_DRIVER_SYMBOLS)

class CudaDriver final : public LaneRuntime {
 public:
  CudaDriver(DynamicLibrary library, CudaApi api)
      : LaneRuntime(Vendor::cuda, "CUDA", "driver", std::move(library)), m_api(api) {
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
    if (entry.payload_kind != PayloadKind::cubin && entry.payload_kind != PayloadKind::ptx) {
      // Never handed to the driver (the engine refuses LTO-IR before asking a runtime; this is the lane's
      // own word for anything else that is not a CUBIN or PTX).
      throw LoadError(fmt::format("entry {} holds {} ({}), not a CUBIN or PTX: it cannot load on CUDA device {}",
                                  entry.key_hash.hex(), to_string(entry.payload_kind), entry.target, device));
    }
    make_current(device);
    CUmodule module = nullptr;
    std::string attempts;
    CUresult result = m_api.cuModuleLoadData(&module, entry.payload.data());
    if (result == CUDA_SUCCESS) return module;
    attempts = fmt::format("{} {}: {}", entry.target, to_string(entry.payload_kind), describe(result));
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
    if (!try_make_current(device)) return;
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
    // tells the count, and that failing call is its slowest answer (bench/RESULTS.md, section 2,
    // `launch_bench`). The PTX kept
    // beside the CUBIN, from the same compile,
    // declares the count: with it the driver is asked only for indices that exist, and each size it
    // gives must equal the declared one. Without PTX, or on any disagreement, the driver is probed.
    // (A PTX that declares fewer parameters than its CUBIN takes cannot come out of one compile; only
    // someone who can write the cache owner's entries could plant one, and such a writer controls the
    // kernel's code anyway.)
    const std::span<const std::byte> ptx_bytes =
        entry.payload_kind == PayloadKind::ptx ? std::span(entry.payload) : std::span(entry.aux);
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
      for (std::size_t i = 0; i < args.count(); ++i)
        params[i] = const_cast<std::byte*>(args.data()) + args.arg_offset(i);
      result =
          m_api.cuLaunchKernel(static_cast<CUfunction>(function), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y,
                               c.block.z, c.shared_bytes, static_cast<CUstream>(c.stream), params, nullptr);
    } else {
      // Layout unknown (a driver without cuFuncGetParamInfo): the packed buffer, whose size the driver
      // is told, so a wrong argument list cannot make it read past what was given.
      std::size_t size = args.size();
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<std::byte*>(args.data()), CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &size, CU_LAUNCH_PARAM_END};
      result =
          m_api.cuLaunchKernel(static_cast<CUfunction>(function), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y,
                               c.block.z, c.shared_bytes, static_cast<CUstream>(c.stream), nullptr, extra);
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
      const std::string message =
          fmt::format("cuMemAlloc failed: {} allocating {} bytes on device {} ({} bytes total)", describe(result), bytes,
                      device, m_devices.at(static_cast<std::size_t>(device)).total_memory);
      if (result == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(message);
      throw LaunchError(message);
    }
    return reinterpret_cast<void*>(pointer);
  }

  void free(int device, void* pointer) noexcept override {
    if (pointer == nullptr || !try_make_current(device)) return;
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
    if (stream == nullptr || !try_make_current(device)) return;
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
    const std::size_t index = device_index(device);
    std::atomic<CUcontext>& slot = m_contexts[index];
    if (CUcontext context = slot.load(std::memory_order_acquire)) return context;  // every launch: no lock
    const std::lock_guard lock(m_mutex);
    CUcontext context = slot.load(std::memory_order_relaxed);
    if (context == nullptr) {
      // The primary context is shared with the runtime API, CuPy and PyTorch; it is retained for the
      // process's lifetime (never released: other libraries may still use it at exit).
      check(m_api.cuDevicePrimaryCtxRetain(&context, m_handles[index]), "cuDevicePrimaryCtxRetain");
      slot.store(context, std::memory_order_release);
    }
    return context;
  }

  std::string describe(CUresult result) const {
    const char* name = nullptr;
    const char* text = nullptr;
    m_api.cuGetErrorName(result, &name);
    m_api.cuGetErrorString(result, &text);
    return describe_error(name, text, "CUDA_ERROR_UNKNOWN");
  }

  KILN_HOT void check(CUresult result, const char* call, std::string_view context = {}) const {
    if (result == CUDA_SUCCESS) return;
    const std::string message = call_failed_message(call, describe(result), context);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(message);
    if (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_LAUNCH_FAILED || result == CUDA_ERROR_ILLEGAL_ADDRESS) {
      throw LaunchError(message);
    }
    if (result == CUDA_ERROR_NO_DEVICE || result == CUDA_ERROR_NOT_INITIALIZED || result == CUDA_ERROR_INVALID_DEVICE ||
        result == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH || result == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) {
      throw DeviceUnavailable(message);
    }
    throw LaunchError(message);
  }

  CudaApi m_api;
  std::vector<CUdevice> m_handles;
  std::mutex m_mutex;
  std::unique_ptr<std::atomic<CUcontext>[]> m_contexts;  ///< per device; set once, under m_mutex
};

}  // namespace

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
    throw DeviceUnavailable(
        fmt::format("CUDA driver at {} lacks cuGetProcAddress_v2 (driver older than CUDA 12?)", library.path()));
  }
  // Every symbol through cuGetProcAddress at kDriverApiVersion, asked for by the list's name.
  const auto lookup = [&](const char* name) -> void* {
    void* address = nullptr;
    CUdriverProcAddressQueryResult status{};
    const CUresult result = get_proc(name, &address, kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    return result == CUDA_SUCCESS ? address : nullptr;
  };
  CudaApi api;
  api.require(lookup, "CUDA driver at " + library.path(), fmt::format("ABI of CUDA {}", kDriverApiVersion));
  return std::make_unique<CudaDriver>(std::move(library), api);
}

}  // namespace kiln::vendor
