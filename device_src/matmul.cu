//! kiln-kernels: sgemm
// C = A * B in single precision, row-major: A is m x k, B is k x n, C is m x n (leading dimensions k,
// n and n). Shared-memory tiles of 16 x 16; any m, n, k (edge tiles are padded with zeros).
// Launch with block = (16, 16) and grid = (ceil(n / 16), ceil(m / 16)); blockIdx.x walks columns.
// A block of any other shape does nothing.
#include <kiln/rtc.h>

namespace kiln {
namespace matmul_detail {
constexpr int kTile = 16;
}  // namespace matmul_detail
}  // namespace kiln

KILN_KERNEL KILN_LAUNCH_BOUNDS(256) void sgemm(int m, int n, int k, const float* a, const float* b, float* c) {
  constexpr int kTile = kiln::matmul_detail::kTile;
  if (blockDim.x != kTile || blockDim.y != kTile || blockDim.z != 1) {
    return;
  }
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile];

  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty;
  const int col = blockIdx.x * kTile + tx;

  float sum = 0.0f;
  for (int t = 0; t < k; t += kTile) {
    const int a_col = t + tx;
    const int b_row = t + ty;
    a_tile[ty][tx] = (row < m && a_col < k) ? a[(long long)row * k + a_col] : 0.0f;
    b_tile[ty][tx] = (b_row < k && col < n) ? b[(long long)b_row * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kTile; ++e) {
      sum += a_tile[ty][e] * b_tile[e][tx];
    }
    __syncthreads();
  }
  if (row < m && col < n) {
    c[(long long)row * n + col] = sum;
  }
}
