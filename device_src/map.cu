//! kiln-kernels: kiln::map<float, 1>; kiln::map<float, 4>; kiln::map<double, 2>
// An elementwise affine map, out[i] = a * in[i] + b for 0 <= i < n, as a template: T is the element
// type, ItemsPerThread how many elements each thread handles per tile (a tile is
// blockDim.x * ItemsPerThread consecutive elements; neighbouring threads touch neighbouring
// elements). Any grid and block: blocks stride over the tiles. Instantiate through name expressions,
// e.g. "kiln::map<float, 4>".
#include <kiln/rtc.h>

namespace kiln {

template <typename T, int ItemsPerThread>
__global__ void map(int n, T a, T b, const T* in, T* out) {
  static_assert(ItemsPerThread >= 1, "ItemsPerThread must be positive");
  const long long tile = (long long)blockDim.x * ItemsPerThread;
  for (long long base = (long long)blockIdx.x * tile; base < n; base += (long long)gridDim.x * tile) {
#pragma unroll
    for (int item = 0; item < ItemsPerThread; ++item) {
      const long long i = base + (long long)item * blockDim.x + threadIdx.x;
      if (i < n) {
        out[i] = a * in[i] + b;
      }
    }
  }
}

}  // namespace kiln
