// Block-wide f64 sums for norms (sum of squares per block, then a finishing reduction).
// f64 because the reference interpreter sums squares in f64: an f32 accumulator over 2^28
// elements would drift far outside the f32 check tolerance.
#pragma once
#include <math.h>
#include <stdint.h>

namespace wb {

// Sum of `x` over the block, returned to every thread. Every thread of the block must call
// it (it synchronizes); the order of additions depends only on blockDim, so every rank that
// runs it on the same data gets the same bits.
__device__ __forceinline__ double block_sum(double x) {
  __shared__ double warp_sums[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  double total = 0.0;
  for (int k = 0; k < nwarps; ++k) total += warp_sums[k];
  return total;
}

// End of a streaming kernel's norm: this block's sum of squares into partials[blockIdx.x];
// block 0 zeroes the entries of blocks this grid does not have, so a finisher sums `count`.
__device__ __forceinline__ void write_block_partial(double acc, double* partials, int count) {
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
  if (blockIdx.x == 0) {
    for (int b = gridDim.x + threadIdx.x; b < count; b += blockDim.x) partials[b] = 0.0;
  }
}

// Sum of `count` partials (one rank's), by one block, returned to every thread.
__device__ __forceinline__ double sum_partials(const double* partials, int count) {
  double acc = 0.0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) acc += partials[b];
  return block_sum(acc);
}

// The larger (Max) or smaller (Min) of two values: a ReduceTensor(Max/Min) in a fused kernel.
template <bool Max>
__device__ __forceinline__ double extreme(double a, double b) {
  return Max ? fmax(a, b) : fmin(a, b);
}

// The maximum (Max) or minimum of `x` over the block, returned to every thread; as block_sum.
template <bool Max>
__device__ __forceinline__ double block_extreme(double x) {
  __shared__ double warp_vals[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = extreme<Max>(x, __shfl_down_sync(0xffffffffu, x, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) warp_vals[warp] = x;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  double total = warp_vals[0];
  for (int k = 1; k < nwarps; ++k) total = extreme<Max>(total, warp_vals[k]);
  return total;
}

// End of a streaming kernel's ReduceTensor(Max/Min): this block's extreme into
// partials[blockIdx.x]; block 0 fills the entries of blocks this grid does not have with the
// identity (-inf for Max, +inf for Min), so a finisher reduces `count`.
template <bool Max>
__device__ __forceinline__ void write_block_extreme(double acc, double* partials, int count) {
  const double total = block_extreme<Max>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
  if (blockIdx.x == 0) {
    for (int b = gridDim.x + threadIdx.x; b < count; b += blockDim.x)
      partials[b] = Max ? -INFINITY : INFINITY;
  }
}

// The extreme of `count` partials (one rank's), by one block, returned to every thread.
template <bool Max>
__device__ __forceinline__ double extreme_partials(const double* partials, int count) {
  double acc = Max ? -INFINITY : INFINITY;
  for (int b = threadIdx.x; b < count; b += blockDim.x) acc = extreme<Max>(acc, partials[b]);
  return block_extreme<Max>(acc);
}

// The product of `x` over the block, returned to every thread; as block_sum (a ReduceTensor(Prod)
// in a fused kernel: f64 products, combined in a fixed tree order within the block).
__device__ __forceinline__ double block_product(double x) {
  __shared__ double warp_prods[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x *= __shfl_down_sync(0xffffffffu, x, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) warp_prods[warp] = x;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  double total = 1.0;
  for (int k = 0; k < nwarps; ++k) total *= warp_prods[k];
  return total;
}

// End of a streaming kernel's ReduceTensor(Prod): this block's product into partials[blockIdx.x];
// block 0 fills the entries of blocks this grid does not have with 1 (the identity), so a
// finisher multiplies `count`.
__device__ __forceinline__ void write_block_product(double acc, double* partials, int count) {
  const double total = block_product(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
  if (blockIdx.x == 0) {
    for (int b = gridDim.x + threadIdx.x; b < count; b += blockDim.x) partials[b] = 1.0;
  }
}

// The product of `count` partials (one rank's), by one block, returned to every thread.
__device__ __forceinline__ double product_partials(const double* partials, int count) {
  double acc = 1.0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) acc *= partials[b];
  return block_product(acc);
}

}  // namespace wb
