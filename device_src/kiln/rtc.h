// kiln/rtc.h: the macro layer every kernel source includes. Every difference between the four
// compilers kiln supports (NVRTC, HIPRTC, nvcc, hipcc) lives here; kernel sources never test a
// vendor macro (the facts this rests on: docs/design.md §2).
//
// Contract for kernel sources that include this header:
//  - KILN_RTC, KILN_CUDA, KILN_HIP are always defined, to 0 or 1 (test them with #if, not #ifdef).
//  - The eight fixed-width integer types exist under every compiler (neither RTC ships <stdint.h>;
//    HIPRTC 5.x lacks uint8_t). Under the RTCs the 64-bit ones are `long long`, so a mangled name that
//    contains uint64_t differs between JIT (`y`) and offline (`m`) builds: never share mangled names
//    between the two.
//  - Helpers callable from device code are annotated KILN_HOST_DEVICE or __device__: offline nvcc has
//    no default execution space, and HIPRTC ignores -default-device. KILN_HD_BEGIN / KILN_HD_END make
//    a region host+device by default where clang allows it (HIPRTC, hipcc); elsewhere they are empty.
//  - KILN_WARP_SIZE is the device's warp/wavefront size. The engine passes -DKILN_WARP_SIZE=32/64;
//    write warp code against it, never against a literal 32.
//  - Warp intrinsics go through KILN_SHFL_* / KILN_BALLOT: they name every lane of the warp (full
//    mask on CUDA) and the whole warp width. Every lane of the warp that exists must execute them.
//  - KILN_LAUNCH_BOUNDS(n) takes one argument: the maximum block size (the second CUDA argument means
//    something else on HIP).
#ifndef KILN_RTC_H
#define KILN_RTC_H

// ---- Which compiler -------------------------------------------------------------------------------
// HIPRTC also defines __HIP__ and NVRTC also defines __CUDACC__, so the RTCs are tested first.
#if defined(__HIPCC_RTC__)
#define KILN_RTC 1
#define KILN_CUDA 0
#define KILN_HIP 1
#elif defined(__CUDACC_RTC__)
#define KILN_RTC 1
#define KILN_CUDA 1
#define KILN_HIP 0
#elif defined(__HIP__)
// hipcc (clang) for AMD. hipcc on the NVIDIA platform runs nvcc, which lands in the next branch.
#define KILN_RTC 0
#define KILN_CUDA 0
#define KILN_HIP 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define KILN_RTC 0
#define KILN_CUDA 1
#define KILN_HIP 0
#include <cuda_runtime.h>
#else
#error "kiln/rtc.h is device code: compile it with NVRTC, HIPRTC, nvcc or hipcc"
#endif

// ---- Fixed-width integers -------------------------------------------------------------------------
#if KILN_RTC
// Repeating an identical typedef is legal, so these coexist with HIPRTC's built-in ones.
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
static_assert(sizeof(int8_t) == 1 && sizeof(int16_t) == 2 && sizeof(int32_t) == 4 && sizeof(int64_t) == 8,
              "kiln/rtc.h: signed fixed-width types have the wrong size");
static_assert(sizeof(uint8_t) == 1 && sizeof(uint16_t) == 2 && sizeof(uint32_t) == 4 && sizeof(uint64_t) == 8,
              "kiln/rtc.h: unsigned fixed-width types have the wrong size");
#else
#include <stdint.h>
#endif

// ---- Execution spaces -----------------------------------------------------------------------------
#define KILN_HOST_DEVICE __host__ __device__
#define KILN_DEVICE_INLINE __device__ __forceinline__
#define KILN_HOST_DEVICE_INLINE __host__ __device__ __forceinline__

#if defined(__clang__) && (defined(__HIP__) || defined(__CUDA__))
#define KILN_HD_BEGIN _Pragma("clang force_cuda_host_device begin")
#define KILN_HD_END _Pragma("clang force_cuda_host_device end")
#else
#define KILN_HD_BEGIN
#define KILN_HD_END
#endif

/// A kernel with an unmangled name (not for templates: those are found through name expressions).
#define KILN_KERNEL extern "C" __global__
/// The maximum number of threads per block the kernel is compiled for. One argument only.
#define KILN_LAUNCH_BOUNDS(max_threads) __launch_bounds__(max_threads)

// ---- Warp size ------------------------------------------------------------------------------------
#ifndef KILN_WARP_SIZE
#if KILN_HIP
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define KILN_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define KILN_WARP_SIZE 64
#endif
#else
#define KILN_WARP_SIZE 32
#endif
#endif

#if KILN_WARP_SIZE != 32 && KILN_WARP_SIZE != 64
#error "KILN_WARP_SIZE must be 32 or 64"
#endif
#if KILN_CUDA && KILN_WARP_SIZE != 32
#error "KILN_WARP_SIZE must be 32 on CUDA"
#endif
// Device passes of the AMD compilers know the target's wavefront size: a mismatch would give wrong
// results silently, so it is an error here.
#if KILN_HIP && defined(__AMDGCN_WAVEFRONT_SIZE)
#if KILN_WARP_SIZE != __AMDGCN_WAVEFRONT_SIZE
#error "KILN_WARP_SIZE differs from the target's wavefront size (__AMDGCN_WAVEFRONT_SIZE)"
#endif
#endif

// ---- Lane masks, shuffles, ballot -----------------------------------------------------------------
// CUDA: the *_sync intrinsics with a 32-bit full mask (the legacy unsynchronised ones do not exist for
// sm_70+ in NVRTC 13). HIP 5.x: the unsynchronised intrinsics (the *_sync ones are missing in 5.x
// and want a 64-bit mask where they exist). The width is passed explicitly: the whole warp.
#if KILN_HIP
typedef unsigned long long kiln_lanemask_t;
#define KILN_SHFL(v, src_lane) __shfl((v), (src_lane), KILN_WARP_SIZE)
#define KILN_SHFL_XOR(v, lane_mask) __shfl_xor((v), (lane_mask), KILN_WARP_SIZE)
#define KILN_SHFL_UP(v, delta) __shfl_up((v), (unsigned)(delta), KILN_WARP_SIZE)
#define KILN_SHFL_DOWN(v, delta) __shfl_down((v), (unsigned)(delta), KILN_WARP_SIZE)
#define KILN_BALLOT(predicate) ((kiln_lanemask_t)__ballot((int)(predicate)))
#define KILN_POPC_LANEMASK(mask) __popcll(mask)
#else
typedef unsigned int kiln_lanemask_t;
#define KILN_SHFL(v, src_lane) __shfl_sync(0xffffffffu, (v), (src_lane), KILN_WARP_SIZE)
#define KILN_SHFL_XOR(v, lane_mask) __shfl_xor_sync(0xffffffffu, (v), (lane_mask), KILN_WARP_SIZE)
#define KILN_SHFL_UP(v, delta) __shfl_up_sync(0xffffffffu, (v), (unsigned)(delta), KILN_WARP_SIZE)
#define KILN_SHFL_DOWN(v, delta) __shfl_down_sync(0xffffffffu, (v), (unsigned)(delta), KILN_WARP_SIZE)
#define KILN_BALLOT(predicate) ((kiln_lanemask_t)__ballot_sync(0xffffffffu, (predicate)))
#define KILN_POPC_LANEMASK(mask) __popc(mask)
#endif

// ---- Small helpers (std:: is not available under the RTCs) ---------------------------------------
namespace kiln {

/// The smaller of two values (std::min is missing under NVRTC and HIPRTC).
template <typename T>
KILN_HOST_DEVICE_INLINE T min(T a, T b) {
  return b < a ? b : a;
}

/// The larger of two values (std::max is missing under NVRTC and HIPRTC).
template <typename T>
KILN_HOST_DEVICE_INLINE T max(T a, T b) {
  return a < b ? b : a;
}

/// ceil(a / b) for positive b.
template <typename T>
KILN_HOST_DEVICE_INLINE T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

/// This thread's lane in its warp (blocks are one-dimensional in kiln's kernels).
KILN_DEVICE_INLINE unsigned lane_id() { return threadIdx.x % KILN_WARP_SIZE; }

/// This thread's warp in its block.
KILN_DEVICE_INLINE unsigned warp_id() { return threadIdx.x / KILN_WARP_SIZE; }

}  // namespace kiln

#endif  // KILN_RTC_H
