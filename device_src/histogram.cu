//! kiln-kernels: histogram256_u8; histogram_u32
// Histograms with 32-bit counts: each block counts into shared memory with atomics, then adds its
// non-zero counts to the global bins with atomics. The caller zeroes `bins` first (counts add up
// across launches). Any grid and block (blocks stride over the input).
//   histogram256_u8(n, data, bins):           256 bins, bins[v] counts the bytes equal to v.
//   histogram_u32(n, values, num_bins, bins): bins[v] counts values equal to v; values >= num_bins are
//                                             ignored. Needs num_bins * 4 bytes of dynamic shared memory.
#include <kiln/rtc.h>

KILN_KERNEL void histogram256_u8(int n, const uint8_t* data, uint32_t* bins) {
  __shared__ uint32_t counts[256];
  for (unsigned bin = threadIdx.x; bin < 256; bin += blockDim.x) {
    counts[bin] = 0;
  }
  __syncthreads();
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    atomicAdd(&counts[data[i]], 1u);
  }
  __syncthreads();
  for (unsigned bin = threadIdx.x; bin < 256; bin += blockDim.x) {
    if (counts[bin] != 0) {
      atomicAdd(&bins[bin], counts[bin]);
    }
  }
}

KILN_KERNEL void histogram_u32(int n, const uint32_t* values, uint32_t num_bins, uint32_t* bins) {
  extern __shared__ uint32_t kiln_histogram_counts[];
  for (uint32_t bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    kiln_histogram_counts[bin] = 0;
  }
  __syncthreads();
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t value = values[i];
    if (value < num_bins) {
      atomicAdd(&kiln_histogram_counts[value], 1u);
    }
  }
  __syncthreads();
  for (uint32_t bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    if (kiln_histogram_counts[bin] != 0) {
      atomicAdd(&bins[bin], kiln_histogram_counts[bin]);
    }
  }
}
