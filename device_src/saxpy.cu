//! kiln-kernels: saxpy
// y[i] = a * x[i] + y[i] for 0 <= i < n. Any grid and block: the loop strides over the whole grid.
#include <kiln/rtc.h>

KILN_KERNEL void saxpy(int n, float a, const float* x, float* y) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = a * x[i] + y[i];
  }
}
