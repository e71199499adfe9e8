//! kiln-kernels: scan_blocks_f32; scan_add_f32; scan_blocks_u32; scan_add_u32
// Inclusive prefix sum, out[i] = in[0] + ... + in[i], for any n, in passes the caller drives:
//   1. scan_blocks_T(n, in, out, block_sums): block b scans its tile in[b*B .. b*B+B) (B = blockDim.x,
//      one element per thread) into out and, when block_sums is not null, writes the tile's total to
//      block_sums[b]. Launch with grid = ceil(n / B) blocks (one tile per block).
//   2. Scan block_sums (ceil(n / B) values) inclusively the same way; recurse while it needs more
//      than one block.
//   3. scan_add_T(n, out, scanned_block_sums): block b > 0 adds scanned_block_sums[b - 1] to its tile.
//      Launch with the same grid and block as step 1.
// in and out may be the same buffer. Blocks of up to 1024 threads; a last partial warp is handled.
// Written against KILN_WARP_SIZE: correct for warps of 32 and wavefronts of 64.
#include <kiln/rtc.h>

namespace kiln {
namespace scan_detail {

constexpr int kMaxBlock = 1024;
constexpr int kMaxWarps = kMaxBlock / KILN_WARP_SIZE;

/// Inclusive scan across the lanes of one warp. Every existing lane of the warp must call it; a lane
/// only reads lanes below it, which exist whenever it does.
template <typename T>
__device__ T warp_inclusive_scan(T value) {
  const unsigned lane = lane_id();
#pragma unroll
  for (int offset = 1; offset < KILN_WARP_SIZE; offset *= 2) {
    const T other = KILN_SHFL_UP(value, offset);
    if (lane >= (unsigned)offset) {
      value += other;
    }
  }
  return value;
}

/// Inclusive scan across the block (one value per thread). Every thread of the block must call it.
/// `block_total` receives the sum over the whole block in every thread.
template <typename T>
__device__ T block_inclusive_scan(T value, T& block_total) {
  __shared__ T warp_totals[kMaxWarps];
  const unsigned lane = lane_id();
  const unsigned warp = warp_id();
  const unsigned warps = ceil_div<unsigned>(blockDim.x, KILN_WARP_SIZE);
  const unsigned lanes_here = min<unsigned>(KILN_WARP_SIZE, blockDim.x - warp * KILN_WARP_SIZE);

  value = warp_inclusive_scan(value);
  if (lane == lanes_here - 1) {
    warp_totals[warp] = value;
  }
  __syncthreads();
  if (warp == 0) {
    // kMaxWarps <= KILN_WARP_SIZE for both warp sizes, so one warp scans the warp totals.
    T total = lane < warps ? warp_totals[lane] : T(0);
    total = warp_inclusive_scan(total);
    if (lane < warps) {
      warp_totals[lane] = total;
    }
  }
  __syncthreads();
  if (warp > 0) {
    value += warp_totals[warp - 1];
  }
  block_total = warp_totals[warps - 1];
  return value;
}

template <typename T>
__device__ void scan_blocks(int n, const T* in, T* out, T* block_sums) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const T value = i < n ? in[i] : T(0);
  T block_total;
  const T scanned = block_inclusive_scan(value, block_total);
  if (i < n) {
    out[i] = scanned;
  }
  if (block_sums != nullptr && threadIdx.x == 0) {
    block_sums[blockIdx.x] = block_total;
  }
}

template <typename T>
__device__ void scan_add(int n, T* out, const T* scanned_block_sums) {
  if (blockIdx.x == 0) {
    return;
  }
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] += scanned_block_sums[blockIdx.x - 1];
  }
}

}  // namespace scan_detail
}  // namespace kiln

KILN_KERNEL KILN_LAUNCH_BOUNDS(1024) void scan_blocks_f32(int n, const float* in, float* out, float* block_sums) {
  kiln::scan_detail::scan_blocks(n, in, out, block_sums);
}

KILN_KERNEL void scan_add_f32(int n, float* out, const float* scanned_block_sums) {
  kiln::scan_detail::scan_add(n, out, scanned_block_sums);
}

KILN_KERNEL KILN_LAUNCH_BOUNDS(1024) void scan_blocks_u32(int n, const uint32_t* in, uint32_t* out,
                                                          uint32_t* block_sums) {
  kiln::scan_detail::scan_blocks(n, in, out, block_sums);
}

KILN_KERNEL void scan_add_u32(int n, uint32_t* out, const uint32_t* scanned_block_sums) {
  kiln::scan_detail::scan_add(n, out, scanned_block_sums);
}
