// The HIP runtime lane: devices, modules (AMDGPU code objects), kernel metadata, launches, memory and
// streams, through the HIP module API. libamdhip64 is dlopen'ed from $ROCM_PATH/lib (default
// /opt/rocm/lib), then the loader's path, newest soname first; types come from HIP's
// hip_runtime_api.h at build time.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "amdgpu_metadata.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/error.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/hip_symbols.hpp"
#include "lanes/lane.hpp"
#include "lanes/rocm.hpp"
#include "lanes/runtime_common.hpp"
#include "lanes/symbols.hpp"

namespace kiln::vendor {
namespace {

KILN_SYMBOL_TABLE(HipApi, KILN_HIP_RUNTIME_SYMBOLS)

class HipRuntime final : public LaneRuntime {
 public:
  HipRuntime(DynamicLibrary library, HipApi api)
      : LaneRuntime(Vendor::hip, "HIP", "hip runtime", std::move(library)), m_api(api) {
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
    if (!try_make_current(device)) return;
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
      const std::string message = fmt::format("hipMalloc failed: {} allocating {} bytes on device {} ({} bytes total)",
                                              describe(result), bytes, device, device_info(device).total_memory);
      if (result == hipErrorOutOfMemory) throw OutOfMemory(message);
      throw LaunchError(message);
    }
    return pointer;
  }

  void free(int device, void* pointer) noexcept override {
    if (pointer == nullptr || !try_make_current(device)) return;
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
    if (stream == nullptr || !try_make_current(device)) return;
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
    return describe_error(name, text, "hipErrorUnknown");
  }

  template <typename ErrorType>
  KILN_HOT void check(hipError_t result, const char* call, std::string_view context = {}) const {
    if (result == hipSuccess) return;
    const std::string message = call_failed_message(call, describe(result), context);
    if (result == hipErrorNoDevice || result == hipErrorInvalidDevice || result == hipErrorInsufficientDriver) {
      throw DeviceUnavailable(message);
    }
    if (result == hipErrorOutOfMemory) throw OutOfMemory(message);
    throw ErrorType(message);
  }

  HipApi m_api;
  mutable std::mutex m_mutex;
  std::unordered_map<void*, int> m_module_device;
  std::unordered_map<void*, FunctionHome> m_functions;
  std::unordered_map<void*, int> m_stream_device;
};

}  // namespace

std::unique_ptr<Runtime> load_hip_runtime() {
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(
      search_list(rocm_dirs(), {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}), searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(fmt::format("no HIP runtime found (searched: {}); set ROCM_PATH", join_searched(searched)));
  }
  const std::string what = "HIP runtime " + library.path();
  HipApi api;
  api.require([&](const char* name) { return library.symbol(name); }, what);
  // The device properties: one of the symbols KILN_HIP_PROPERTIES_SYMBOLS lists is required.
#if HIP_VERSION_MAJOR >= 6
  if (api.hipGetDevicePropertiesR0600 == nullptr) throw_missing_symbol(what, "hipGetDevicePropertiesR0600");
#else
  if (api.hipGetDevicePropertiesR0000 == nullptr && api.hipGetDeviceProperties == nullptr) {
    throw_missing_symbol(what, "hipGetDeviceProperties");
  }
#endif
  return std::make_unique<HipRuntime>(std::move(library), api);
}

}  // namespace kiln::vendor
