//! kiln-kernels: reduce_sum_f32; reduce_sum_f64; reduce_sum_u32
// Sums: *out += sum(in[0..n)). Each block reduces its share (grid-stride) with warp shuffles and one
// shared-memory step, then adds its partial to *out with one atomic. The caller zeroes *out first.
// Float results depend on the order the block partials arrive in (atomics); the unsigned sum is exact
// (modulo 2^32). Any grid; any block of up to 1024 threads (a last partial warp is handled).
// Written against KILN_WARP_SIZE: correct for warps of 32 and wavefronts of 64.
#include <kiln/rtc.h>

namespace kiln {
namespace reduce_detail {

constexpr int kMaxBlock = 1024;
constexpr int kMaxWarps = kMaxBlock / KILN_WARP_SIZE;

/// Sum over the first `lanes` lanes of the warp; the result is valid in lane 0. Every existing lane of
/// the warp must call it (the shuffles name the whole warp); lanes >= `lanes` contribute nothing.
template <typename T>
__device__ T warp_sum(T value, unsigned lanes) {
  const unsigned lane = lane_id();
#pragma unroll
  for (int offset = KILN_WARP_SIZE / 2; offset > 0; offset /= 2) {
    const T other = KILN_SHFL_DOWN(value, offset);
    if (lane + offset < lanes) {
      value += other;
    }
  }
  return value;
}

/// Sum over the whole block; the result is valid in thread 0. Every thread of the block must call it.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warp_sums[kMaxWarps];
  const unsigned warp = warp_id();
  const unsigned warps = ceil_div<unsigned>(blockDim.x, KILN_WARP_SIZE);
  const unsigned lanes_here = min<unsigned>(KILN_WARP_SIZE, blockDim.x - warp * KILN_WARP_SIZE);
  value = warp_sum(value, lanes_here);
  if (lane_id() == 0) {
    warp_sums[warp] = value;
  }
  __syncthreads();
  T total = T(0);
  if (warp == 0) {
    // kMaxWarps <= KILN_WARP_SIZE for both warp sizes, so one warp finishes the job.
    total = lane_id() < warps ? warp_sums[lane_id()] : T(0);
    total = warp_sum(total, min<unsigned>(warps, KILN_WARP_SIZE));
  }
  return total;
}

template <typename T>
__device__ void reduce_sum(int n, const T* in, T* out) {
  T sum = T(0);
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    sum += in[i];
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    atomicAdd(out, sum);
  }
}

}  // namespace reduce_detail
}  // namespace kiln

KILN_KERNEL KILN_LAUNCH_BOUNDS(1024) void reduce_sum_f32(int n, const float* in, float* out) {
  kiln::reduce_detail::reduce_sum(n, in, out);
}

KILN_KERNEL KILN_LAUNCH_BOUNDS(1024) void reduce_sum_f64(int n, const double* in, double* out) {
  kiln::reduce_detail::reduce_sum(n, in, out);
}

KILN_KERNEL KILN_LAUNCH_BOUNDS(1024) void reduce_sum_u32(int n, const uint32_t* in, uint32_t* out) {
  kiln::reduce_detail::reduce_sum(n, in, out);
}
