#pragma once
// The NVIDIA lanes' symbol lists, one per library, in the shape symbols.hpp describes:
//   KILN_NVRTC_SYMBOLS        libnvrtc (nvrtc.cpp), looked up with dlsym
//   KILN_CUDA_DRIVER_SYMBOLS  libcuda (cuda_driver.cpp), looked up with cuGetProcAddress
// Pointer types come from the toolkit's headers. cuda.h #defines some names to their versioned
// symbols (cuMemAlloc -> cuMemAlloc_v2): the members and types follow the header, while the name the
// driver is asked for is the list's un-suffixed one, whose ABI cuGetProcAddress picks by version.
// The PCH calls (NVRTC 12.8+) and the LTO-IR calls (12.0+) are optional and typed here, not from
// nvrtc.h: an older NVRTC lacks them and an older toolkit's header does not declare them.
#include <cuda.h>
#include <nvrtc.h>

#include <cstddef>

namespace kiln::vendor {
using NvrtcGetPchHeapSize = nvrtcResult (*)(std::size_t*);
using NvrtcSetPchHeapSize = nvrtcResult (*)(std::size_t);
using NvrtcGetPchCreateStatus = nvrtcResult (*)(nvrtcProgram);
using NvrtcGetPchHeapSizeRequired = nvrtcResult (*)(nvrtcProgram, std::size_t*);
// LTO-IR (NVRTC 12.0+), optional: an NVRTC without them compiles everything but lto_XY targets.
using NvrtcGetLtoIrSize = nvrtcResult (*)(nvrtcProgram, std::size_t*);
using NvrtcGetLtoIr = nvrtcResult (*)(nvrtcProgram, char*);
}  // namespace kiln::vendor

#define KILN_NVRTC_SYMBOLS(X)                                                    \
  X(required, nvrtcVersion, decltype(&::nvrtcVersion))                           \
  X(required, nvrtcGetErrorString, decltype(&::nvrtcGetErrorString))             \
  X(required, nvrtcGetNumSupportedArchs, decltype(&::nvrtcGetNumSupportedArchs)) \
  X(required, nvrtcGetSupportedArchs, decltype(&::nvrtcGetSupportedArchs))       \
  X(required, nvrtcCreateProgram, decltype(&::nvrtcCreateProgram))               \
  X(required, nvrtcDestroyProgram, decltype(&::nvrtcDestroyProgram))             \
  X(required, nvrtcCompileProgram, decltype(&::nvrtcCompileProgram))             \
  X(required, nvrtcGetProgramLogSize, decltype(&::nvrtcGetProgramLogSize))       \
  X(required, nvrtcGetProgramLog, decltype(&::nvrtcGetProgramLog))               \
  X(required, nvrtcGetCUBINSize, decltype(&::nvrtcGetCUBINSize))                 \
  X(required, nvrtcGetCUBIN, decltype(&::nvrtcGetCUBIN))                         \
  X(required, nvrtcGetPTXSize, decltype(&::nvrtcGetPTXSize))                     \
  X(required, nvrtcGetPTX, decltype(&::nvrtcGetPTX))                             \
  X(required, nvrtcAddNameExpression, decltype(&::nvrtcAddNameExpression))       \
  X(required, nvrtcGetLoweredName, decltype(&::nvrtcGetLoweredName))           \
  X(optional, nvrtcGetPCHHeapSize, ::kiln::vendor::NvrtcGetPchHeapSize)         \
  X(optional, nvrtcSetPCHHeapSize, ::kiln::vendor::NvrtcSetPchHeapSize)         \
  X(optional, nvrtcGetPCHCreateStatus, ::kiln::vendor::NvrtcGetPchCreateStatus) \
  X(optional, nvrtcGetPCHHeapSizeRequired, ::kiln::vendor::NvrtcGetPchHeapSizeRequired) \
  X(optional, nvrtcGetLTOIRSize, ::kiln::vendor::NvrtcGetLtoIrSize)                     \
  X(optional, nvrtcGetLTOIR, ::kiln::vendor::NvrtcGetLtoIr)

#define KILN_CUDA_DRIVER_SYMBOLS(X)                                            \
  X(required, cuInit, decltype(&::cuInit))                                     \
  X(required, cuDriverGetVersion, decltype(&::cuDriverGetVersion))             \
  X(required, cuGetErrorName, decltype(&::cuGetErrorName))                     \
  X(required, cuGetErrorString, decltype(&::cuGetErrorString))                 \
  X(required, cuDeviceGetCount, decltype(&::cuDeviceGetCount))                 \
  X(required, cuDeviceGet, decltype(&::cuDeviceGet))                           \
  X(required, cuDeviceGetName, decltype(&::cuDeviceGetName))                   \
  X(required, cuDeviceGetAttribute, decltype(&::cuDeviceGetAttribute))         \
  X(required, cuDeviceTotalMem, decltype(&::cuDeviceTotalMem))                 \
  X(required, cuDevicePrimaryCtxRetain, decltype(&::cuDevicePrimaryCtxRetain)) \
  X(required, cuCtxSetCurrent, decltype(&::cuCtxSetCurrent))                   \
  X(required, cuCtxGetCurrent, decltype(&::cuCtxGetCurrent))                   \
  X(required, cuModuleLoadData, decltype(&::cuModuleLoadData))                 \
  X(required, cuModuleUnload, decltype(&::cuModuleUnload))                     \
  X(required, cuModuleGetFunction, decltype(&::cuModuleGetFunction))           \
  X(required, cuFuncGetAttribute, decltype(&::cuFuncGetAttribute))             \
  X(required, cuFuncSetAttribute, decltype(&::cuFuncSetAttribute))             \
  X(required, cuLaunchKernel, decltype(&::cuLaunchKernel))                     \
  X(required, cuMemAlloc, decltype(&::cuMemAlloc))                             \
  X(required, cuMemFree, decltype(&::cuMemFree))                               \
  X(required, cuMemcpyHtoD, decltype(&::cuMemcpyHtoD))                         \
  X(required, cuMemcpyDtoH, decltype(&::cuMemcpyDtoH))                         \
  X(required, cuMemcpyHtoDAsync, decltype(&::cuMemcpyHtoDAsync))               \
  X(required, cuMemcpyDtoHAsync, decltype(&::cuMemcpyDtoHAsync))               \
  X(required, cuMemsetD8, decltype(&::cuMemsetD8))                             \
  X(required, cuMemsetD8Async, decltype(&::cuMemsetD8Async))                   \
  X(required, cuStreamCreate, decltype(&::cuStreamCreate))                     \
  X(required, cuStreamDestroy, decltype(&::cuStreamDestroy))                   \
  X(required, cuStreamSynchronize, decltype(&::cuStreamSynchronize))           \
  X(required, cuCtxSynchronize, decltype(&::cuCtxSynchronize))                 \
  X(optional, cuFuncGetParamInfo, decltype(&::cuFuncGetParamInfo))             \
  X(optional, cuStreamGetCtx, decltype(&::cuStreamGetCtx))
