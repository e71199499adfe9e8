#pragma once
// The AMD lanes' symbol lists, one per library, in the shape symbols.hpp describes:
//   KILN_HIP_RUNTIME_SYMBOLS  libamdhip64, the HIP module API (hip_runtime.cpp)
//   KILN_HIPRTC_SYMBOLS       libhiprtc, or libamdhip64 where it still carries HIPRTC (hiprtc.cpp)
//   KILN_COMGR_SYMBOLS        libamd_comgr, its version and ISA list only (hiprtc.cpp)
// The contract tests expand them too, to check that the synthetic runtime exports what the lanes use.
// Pointer types come from the HIP headers (decltype) except where the headers overload a name or may
// not declare it: those have the aliases below.
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>
#include <hip/hiprtc.h>

#include <cstddef>

namespace kiln::vendor {

using HipMallocFn = hipError_t (*)(void**, std::size_t);                 // overloaded by a template
using HipGetDevicePropertiesFn = hipError_t (*)(hipDeviceProp_t*, int);  // layout of these headers
using HipStreamGetDeviceFn = hipError_t (*)(hipStream_t, hipDevice_t*);  // not in HIP 5.x headers
using ComgrGetVersionFn = void (*)(std::size_t*, std::size_t*);          // amd_comgr.h is optional
using ComgrGetIsaCountFn = int (*)(std::size_t*);
using ComgrGetIsaNameFn = int (*)(std::size_t, const char**);

}  // namespace kiln::vendor

#define KILN_HIP_RUNTIME_SYMBOLS(X)                                      \
  X(required, hipInit, decltype(&::hipInit))                             \
  X(required, hipRuntimeGetVersion, decltype(&::hipRuntimeGetVersion))   \
  X(required, hipGetErrorName, decltype(&::hipGetErrorName))             \
  X(required, hipGetErrorString, decltype(&::hipGetErrorString))         \
  X(required, hipGetDeviceCount, decltype(&::hipGetDeviceCount))         \
  X(required, hipSetDevice, decltype(&::hipSetDevice))                   \
  X(required, hipGetDevice, decltype(&::hipGetDevice))                   \
  KILN_HIP_PROPERTIES_SYMBOLS(X)                                         \
  X(required, hipModuleLoadData, decltype(&::hipModuleLoadData))         \
  X(required, hipModuleUnload, decltype(&::hipModuleUnload))             \
  X(required, hipModuleGetFunction, decltype(&::hipModuleGetFunction))   \
  X(required, hipFuncGetAttribute, decltype(&::hipFuncGetAttribute))     \
  X(required, hipModuleLaunchKernel, decltype(&::hipModuleLaunchKernel)) \
  X(required, hipMalloc, HipMallocFn)                                    \
  X(required, hipFree, decltype(&::hipFree))                             \
  X(required, hipMemcpyHtoD, decltype(&::hipMemcpyHtoD))                 \
  X(required, hipMemcpyDtoH, decltype(&::hipMemcpyDtoH))                 \
  X(required, hipMemcpyHtoDAsync, decltype(&::hipMemcpyHtoDAsync))       \
  X(required, hipMemcpyDtoHAsync, decltype(&::hipMemcpyDtoHAsync))       \
  X(required, hipMemsetD8, decltype(&::hipMemsetD8))                     \
  X(required, hipMemsetD8Async, decltype(&::hipMemsetD8Async))           \
  X(required, hipStreamCreate, decltype(&::hipStreamCreate))             \
  X(required, hipStreamDestroy, decltype(&::hipStreamDestroy))           \
  X(required, hipStreamSynchronize, decltype(&::hipStreamSynchronize))   \
  X(required, hipDeviceSynchronize, decltype(&::hipDeviceSynchronize))   \
  X(optional, hipStreamGetDevice, HipStreamGetDeviceFn)

// hipRuntimeGetVersion here: the version of a HIPRTC inside libamdhip64 when its file name carries none.
#define KILN_HIPRTC_SYMBOLS(X)                                               \
  X(required, hiprtcGetErrorString, decltype(&::hiprtcGetErrorString))       \
  X(required, hiprtcCreateProgram, decltype(&::hiprtcCreateProgram))         \
  X(required, hiprtcDestroyProgram, decltype(&::hiprtcDestroyProgram))       \
  X(required, hiprtcAddNameExpression, decltype(&::hiprtcAddNameExpression)) \
  X(required, hiprtcCompileProgram, decltype(&::hiprtcCompileProgram))       \
  X(required, hiprtcGetProgramLogSize, decltype(&::hiprtcGetProgramLogSize)) \
  X(required, hiprtcGetProgramLog, decltype(&::hiprtcGetProgramLog))         \
  X(required, hiprtcGetCodeSize, decltype(&::hiprtcGetCodeSize))             \
  X(required, hiprtcGetCode, decltype(&::hiprtcGetCode))                     \
  X(required, hiprtcGetLoweredName, decltype(&::hiprtcGetLoweredName))       \
  X(optional, hipRuntimeGetVersion, decltype(&::hipRuntimeGetVersion))

#define KILN_COMGR_SYMBOLS(X)                              \
  X(required, amd_comgr_get_version, ComgrGetVersionFn)    \
  X(optional, amd_comgr_get_isa_count, ComgrGetIsaCountFn) \
  X(optional, amd_comgr_get_isa_name, ComgrGetIsaNameFn)

// Device properties: the symbol whose struct layout matches the headers kiln is built against.
// HIP 6 changed hipDeviceProp_t and added hipGetDevicePropertiesR0600; the 5.x layout stays exported as
// hipGetDevicePropertiesR0000 (HIP 6+) and as the plain name (HIP 5.x, and HIP 6/7 for compatibility).
// At least one of them is required (checked by the loader).
#if defined(HIP_VERSION_MAJOR) && HIP_VERSION_MAJOR >= 6
#define KILN_HIP_PROPERTIES_SYMBOLS(X) X(optional, hipGetDevicePropertiesR0600, HipGetDevicePropertiesFn)
#else
#define KILN_HIP_PROPERTIES_SYMBOLS(X)                               \
  X(optional, hipGetDevicePropertiesR0000, HipGetDevicePropertiesFn) \
  X(optional, hipGetDeviceProperties, HipGetDevicePropertiesFn)
#endif
