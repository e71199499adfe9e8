// A synthetic HIP runtime (+ HIPRTC) for CONTRACT tests of kiln's AMD block: it exports the entry
// points the block uses with the vendor headers' signatures, records every call (thread, name,
// arguments) and returns scripted results. It runs no kernel and proves nothing about hardware.
//
// Control (exported, C linkage, looked up by the tests with dlsym on the same file the block loads):
//   fake_hip_reset()                     forget calls and script
//   fake_hip_set(key, value)             script: "devices" N, "arch.<i>" gcnArchName, "warp.<i>" N,
//                                        "version" HIP_VERSION number, "fail.<call>" hipError_t /
//                                        hiprtcResult returned by that call, "rtc_log" log text
//   fake_hip_set_code(bytes, size)       what hiprtcGetCode returns
//   fake_hip_calls()                     the call log, one line per call: "t<thread> <call> <args>"
//   fake_hip_last_launch(out, capacity)  the packed argument bytes of the last launch; returns its size
//
// Build variants (compile definitions): FAKE_HIP_NO_LAUNCH omits hipModuleLaunchKernel and
// hiprtcGetLoweredName (a library missing required symbols); FAKE_HIP_NO_RTC omits every hiprtc* entry
// (a HIP 7 style libamdhip64).
#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct State {
  std::mutex mutex;
  std::string calls;
  std::map<std::string, std::string> script;
  std::vector<unsigned char> code = {'F', 'A', 'K', 'E'};
  std::vector<unsigned char> last_launch;
};

State& state() {
  static State* s = new State;  // never destroyed: calls may arrive during exit
  return *s;
}

int thread_number() {
  static std::atomic<int> next{1};
  thread_local int number = next++;
  return number;
}

std::string setting(const std::string& key, const std::string& fallback = {}) {
  const std::lock_guard lock(state().mutex);
  const auto it = state().script.find(key);
  return it == state().script.end() ? fallback : it->second;
}

int setting_int(const std::string& key, int fallback) {
  const std::string value = setting(key);
  return value.empty() ? fallback : std::atoi(value.c_str());
}

/// Records a call; returns the scripted failure for it (0 = success).
int record(const char* call, const std::string& args = {}) {
  std::ostringstream line;
  line << 't' << thread_number() << ' ' << call;
  if (!args.empty()) line << ' ' << args;
  line << '\n';
  {
    const std::lock_guard lock(state().mutex);
    state().calls += line.str();
  }
  return setting_int(std::string("fail.") + call, 0);
}

thread_local int t_current_device = 0;

struct FakeModule {
  std::string image;  // enough of the code object to look kernel names up
};
struct FakeFunction {
  std::string name;
};
struct FakeProgram {
  std::vector<std::string> expressions;
};

const char* error_name(int e) {
  switch (e) {
    case 0:
      return "hipSuccess";
    case 1:
      return "hipErrorInvalidValue";
    case 2:
      return "hipErrorOutOfMemory";
    case 9:
      return "hipErrorInvalidConfiguration";
    case 98:
      return "hipErrorInvalidDeviceFunction";
    case 100:
      return "hipErrorNoDevice";
    case 101:
      return "hipErrorInvalidDevice";
    case 200:
      return "hipErrorInvalidImage";
    case 209:
      return "hipErrorNoBinaryForGpu";
    case 500:
      return "hipErrorNotFound";
    case 719:
      return "hipErrorLaunchFailure";
    default:
      return "hipErrorUnknown";
  }
}

const char* error_text(int e) {
  switch (e) {
    case 0:
      return "no error";
    case 1:
      return "invalid argument";
    case 2:
      return "out of memory";
    case 9:
      return "invalid configuration argument";
    case 100:
      return "no ROCm-capable device is detected";
    case 209:
      return "no kernel image is available for execution on the device";
    case 500:
      return "named symbol not found";
    default:
      return "unknown error";
  }
}

}  // namespace

extern "C" {

// ---- control ----------------------------------------------------------------------------------------
__attribute__((visibility("default"))) void fake_hip_reset() {
  const std::lock_guard lock(state().mutex);
  state().calls.clear();
  state().script.clear();
  state().code = {'F', 'A', 'K', 'E'};
  state().last_launch.clear();
}
__attribute__((visibility("default"))) void fake_hip_set(const char* key, const char* value) {
  const std::lock_guard lock(state().mutex);
  state().script[key] = value;
}
__attribute__((visibility("default"))) void fake_hip_set_code(const void* bytes, size_t size) {
  const std::lock_guard lock(state().mutex);
  const auto* b = static_cast<const unsigned char*>(bytes);
  state().code.assign(b, b + size);
}
__attribute__((visibility("default"))) const char* fake_hip_calls() {
  static thread_local std::string copy;
  const std::lock_guard lock(state().mutex);
  copy = state().calls;
  return copy.c_str();
}
__attribute__((visibility("default"))) size_t fake_hip_last_launch(void* out, size_t capacity) {
  const std::lock_guard lock(state().mutex);
  const size_t n = state().last_launch.size();
  if (out != nullptr) std::memcpy(out, state().last_launch.data(), n < capacity ? n : capacity);
  return n;
}

// ---- HIP runtime ------------------------------------------------------------------------------------
hipError_t hipInit(unsigned int flags) { return static_cast<hipError_t>(record("hipInit", std::to_string(flags))); }

hipError_t hipRuntimeGetVersion(int* version) {
  *version = setting_int("version", 50221153);
  return static_cast<hipError_t>(record("hipRuntimeGetVersion"));
}

const char* hipGetErrorName(hipError_t e) { return error_name(e); }
const char* hipGetErrorString(hipError_t e) { return error_text(e); }

hipError_t hipGetDeviceCount(int* count) {
  *count = setting_int("devices", 1);
  const int failure = record("hipGetDeviceCount");
  if (failure != 0) *count = 0;
  return static_cast<hipError_t>(failure);
}

hipError_t hipSetDevice(int device) {
  const int failure = record("hipSetDevice", std::to_string(device));
  if (failure == 0) t_current_device = device;
  return static_cast<hipError_t>(failure);
}

hipError_t hipGetDevice(int* device) {
  *device = t_current_device;
  return hipSuccess;  // not recorded: the block may ask often
}

static hipError_t fill_properties(const char* call, hipDeviceProp_t* p, int device) {
  const int failure = record(call, std::to_string(device));
  if (failure != 0) return static_cast<hipError_t>(failure);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "Fake AMD GPU %d", device);
  const std::string arch = setting("arch." + std::to_string(device), "gfx90a:sramecc+:xnack-");
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", arch.c_str());
  p->warpSize = setting_int("warp." + std::to_string(device), 64);
  p->totalGlobalMem = size_t{64} << 30;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 65536;
  p->multiProcessorCount = 104;
  return hipSuccess;
}
hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int device) {
  return fill_properties("hipGetDeviceProperties", p, device);
}
hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t* p, int device) {
  return fill_properties("hipGetDevicePropertiesR0000", p, device);
}

hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  const int failure = record("hipModuleLoadData", "device=" + std::to_string(t_current_device));
  if (failure != 0) return static_cast<hipError_t>(failure);
  // A code object is an ELF64 image; its size is where the section table ends.
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (std::memcmp(bytes,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return hipErrorInvalidImage;
  std::uint64_t section_offset = 0;
  std::uint16_t entry_size = 0, count = 0;
  std::memcpy(&section_offset, bytes + 40, 8);
  std::memcpy(&entry_size, bytes + 58, 2);
  std::memcpy(&count, bytes + 60, 2);
  auto* m = new FakeModule;
  m->image.assign(static_cast<const char*>(image),
                  static_cast<size_t>(section_offset + std::uint64_t{entry_size} * count));
  *module = reinterpret_cast<hipModule_t>(m);
  return hipSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
  delete reinterpret_cast<FakeModule*>(module);
  return static_cast<hipError_t>(record("hipModuleUnload"));
}

hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* name) {
  const int failure = record("hipModuleGetFunction", name);
  if (failure != 0) return static_cast<hipError_t>(failure);
  const auto* m = reinterpret_cast<FakeModule*>(module);
  if (m->image.find(std::string(name) + ".kd") == std::string::npos) return hipErrorNotFound;
  *function = reinterpret_cast<hipFunction_t>(new FakeFunction{name});
  return hipSuccess;
}

hipError_t hipFuncGetAttribute(int* value, hipFunction_attribute attribute, hipFunction_t) {
  *value = attribute == HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? setting_int("max_threads", 1024)
           : attribute == HIP_FUNC_ATTRIBUTE_NUM_REGS            ? 12
                                                                 : 0;
  return static_cast<hipError_t>(record("hipFuncGetAttribute", std::to_string(static_cast<int>(attribute))));
}

#ifndef FAKE_HIP_NO_LAUNCH
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shared, hipStream_t stream, void** params, void** extra) {
  std::ostringstream args;
  args << reinterpret_cast<FakeFunction*>(f)->name << " grid=" << gx << 'x' << gy << 'x' << gz << " block=" << bx << 'x'
       << by << 'x' << bz << " shared=" << shared << " stream=" << stream << " device=" << t_current_device
       << " kernelParams=" << (params == nullptr ? "null" : "set");
  const bool extra_form = extra != nullptr && extra[0] == HIP_LAUNCH_PARAM_BUFFER_POINTER &&
                          extra[2] == HIP_LAUNCH_PARAM_BUFFER_SIZE && extra[4] == HIP_LAUNCH_PARAM_END;
  args << " extra=" << (extra_form ? "buffer" : "malformed");
  if (extra_form) {
    const size_t size = *static_cast<size_t*>(extra[3]);
    args << " size=" << size;
    const auto* bytes = static_cast<const unsigned char*>(extra[1]);
    const std::lock_guard lock(state().mutex);
    state().last_launch.assign(bytes, bytes + size);
  }
  const int failure = record("hipModuleLaunchKernel", args.str());
  if (failure != 0) return static_cast<hipError_t>(failure);
  return (params != nullptr && extra != nullptr) || !extra_form ? hipErrorInvalidValue : hipSuccess;
}
#endif

hipError_t hipMalloc(void** pointer, size_t size) {
  const int failure = record("hipMalloc", std::to_string(size) + " device=" + std::to_string(t_current_device));
  if (failure != 0) return static_cast<hipError_t>(failure);
  *pointer = std::malloc(size == 0 ? 1 : size);
  return hipSuccess;
}
hipError_t hipFree(void* pointer) {
  std::free(pointer);
  return static_cast<hipError_t>(record("hipFree"));
}
hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void* src, size_t n) {
  std::memcpy(dst, src, n);
  return static_cast<hipError_t>(record("hipMemcpyHtoD", std::to_string(n)));
}
hipError_t hipMemcpyDtoH(void* dst, hipDeviceptr_t src, size_t n) {
  std::memcpy(dst, src, n);
  return static_cast<hipError_t>(record("hipMemcpyDtoH", std::to_string(n)));
}
hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t n, hipStream_t) {
  std::memcpy(dst, src, n);
  return static_cast<hipError_t>(record("hipMemcpyHtoDAsync", std::to_string(n)));
}
hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t n, hipStream_t) {
  std::memcpy(dst, src, n);
  return static_cast<hipError_t>(record("hipMemcpyDtoHAsync", std::to_string(n)));
}
hipError_t hipMemsetD8(hipDeviceptr_t dst, unsigned char value, size_t n) {
  std::memset(dst, value, n);
  return static_cast<hipError_t>(record("hipMemsetD8", std::to_string(n)));
}
hipError_t hipMemsetD8Async(hipDeviceptr_t dst, unsigned char value, size_t n, hipStream_t) {
  std::memset(dst, value, n);
  return static_cast<hipError_t>(record("hipMemsetD8Async", std::to_string(n)));
}
hipError_t hipStreamCreate(hipStream_t* stream) {
  static std::atomic<std::uintptr_t> next{0x1000};
  *stream = reinterpret_cast<hipStream_t>(next.fetch_add(0x10));
  return static_cast<hipError_t>(record("hipStreamCreate", "device=" + std::to_string(t_current_device)));
}
hipError_t hipStreamDestroy(hipStream_t) { return static_cast<hipError_t>(record("hipStreamDestroy")); }
hipError_t hipStreamSynchronize(hipStream_t) { return static_cast<hipError_t>(record("hipStreamSynchronize")); }
hipError_t hipDeviceSynchronize() { return static_cast<hipError_t>(record("hipDeviceSynchronize")); }

// ---- HIPRTC -------------------------------------------------------------------------------------------
#ifndef FAKE_HIP_NO_RTC
const char* hiprtcGetErrorString(hiprtcResult r) {
  return r == HIPRTC_SUCCESS             ? "HIPRTC_SUCCESS"
         : r == HIPRTC_ERROR_COMPILATION ? "HIPRTC_ERROR_COMPILATION"
                                         : "HIPRTC_ERROR";
}
hiprtcResult hiprtcCreateProgram(hiprtcProgram* program, const char*, const char* name, int headers, const char**,
                                 const char**) {
  const int failure = record("hiprtcCreateProgram", std::string(name) + " headers=" + std::to_string(headers));
  if (failure != 0) return static_cast<hiprtcResult>(failure);
  *program = reinterpret_cast<hiprtcProgram>(new FakeProgram);
  return HIPRTC_SUCCESS;
}
hiprtcResult hiprtcDestroyProgram(hiprtcProgram* program) {
  delete reinterpret_cast<FakeProgram*>(*program);
  *program = nullptr;
  return static_cast<hiprtcResult>(record("hiprtcDestroyProgram"));
}
hiprtcResult hiprtcAddNameExpression(hiprtcProgram program, const char* expression) {
  reinterpret_cast<FakeProgram*>(program)->expressions.emplace_back(expression);
  return static_cast<hiprtcResult>(record("hiprtcAddNameExpression", expression));
}
hiprtcResult hiprtcCompileProgram(hiprtcProgram, int count, const char** options) {
  std::string args;
  for (int i = 0; i < count; ++i) args += std::string(i == 0 ? "" : " ") + options[i];
  return static_cast<hiprtcResult>(record("hiprtcCompileProgram", args));
}
hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram, size_t* size) {
  *size = setting("rtc_log").size() + 1;
  return HIPRTC_SUCCESS;
}
hiprtcResult hiprtcGetProgramLog(hiprtcProgram, char* log) {
  const std::string text = setting("rtc_log");
  std::memcpy(log, text.c_str(), text.size() + 1);
  return HIPRTC_SUCCESS;
}
hiprtcResult hiprtcGetCodeSize(hiprtcProgram, size_t* size) {
  const std::lock_guard lock(state().mutex);
  *size = state().code.size();
  return HIPRTC_SUCCESS;
}
hiprtcResult hiprtcGetCode(hiprtcProgram, char* code) {
  const std::lock_guard lock(state().mutex);
  std::memcpy(code, state().code.data(), state().code.size());
  return HIPRTC_SUCCESS;
}
#ifndef FAKE_HIP_NO_LAUNCH
hiprtcResult hiprtcGetLoweredName(hiprtcProgram program, const char* expression, const char** lowered) {
  // Plain (extern "C") names lower to themselves, as with the real compiler; templates get a marker.
  static thread_local std::string name;
  const std::string e = expression[0] == '&' ? expression + 1 : expression;
  name = e.find_first_of("<(:") == std::string::npos ? e : "_Z_fake_" + e;
  (void)program;
  *lowered = name.c_str();
  return static_cast<hiprtcResult>(record("hiprtcGetLoweredName", expression));
}
#endif
#endif

}  // extern "C"
