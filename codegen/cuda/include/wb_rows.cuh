// Row reductions of row kernels (codegen/lower_rows.py): every thread folds its columns of a
// row into an f64 accumulator, then the block combines them and every thread gets the row's
// result. f64, as the reference interpreter accumulates: an f32 sum over a 16384-wide row
// would drift from it by more than the f32 check tolerance where the row mean is near zero.
#pragma once
#include <math.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "wb_reduce.cuh"

namespace wb {

// The row cache of one value: N elements per thread kept in registers between passes (every
// index a compile-time constant: the loops over it unroll). Values of 16-bit types are rounded
// to the type already, so they are kept exactly, two per 32-bit register: a 512-thread block
// then fits two per SM at 64 registers a thread (__launch_bounds__(512, 2)).
template <typename T, int N> struct RowCache {
  float v[N];
  __device__ __forceinline__ void put(int n, float x) { v[n] = x; }
  __device__ __forceinline__ float get(int n) const { return v[n]; }
};

template <int N> struct RowCache16 {
  uint32_t w[(N + 1) / 2] = {};
  __device__ __forceinline__ void put_bits(int n, uint32_t b) {
    w[n >> 1] = (n & 1) ? ((w[n >> 1] & 0xffffu) | (b << 16)) : ((w[n >> 1] & 0xffff0000u) | b);
  }
  __device__ __forceinline__ uint32_t bits(int n) const {
    return (n & 1) ? (w[n >> 1] >> 16) : (w[n >> 1] & 0xffffu);
  }
};

template <int N> struct RowCache<__half, N> : RowCache16<N> {
  __device__ __forceinline__ void put(int n, float x) {
    this->put_bits(n, __half_as_ushort(__float2half_rn(x)));
  }
  __device__ __forceinline__ float get(int n) const {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(this->bits(n))));
  }
};

template <int N> struct RowCache<__nv_bfloat16, N> : RowCache16<N> {
  __device__ __forceinline__ void put(int n, float x) {
    this->put_bits(n, __bfloat16_as_ushort(__float2bfloat16_rn(x)));
  }
  __device__ __forceinline__ float get(int n) const {
    return __uint_as_float(this->bits(n) << 16);  // bf16 is an f32's upper half
  }
};

// Asks L2 for the n elements at p, one 128-byte line a thread (a hint: nothing waits on it).
template <typename T>
__device__ __forceinline__ void prefetch_row_l2(const T* p, long long n) {
  const char* b = reinterpret_cast<const char*>(p);
  const long long bytes = n * static_cast<long long>(sizeof(T));
  for (long long o = static_cast<long long>(threadIdx.x) * 128; o < bytes;
       o += static_cast<long long>(blockDim.x) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(b + o));
  }
}

// The reductions, as ir.AXIS_REDUCTIONS names them.
enum RowKind { kRowSum = 0, kRowMax = 1, kRowMin = 2, kRowMean = 3, kRowNorm = 4 };

template <int K> __device__ __forceinline__ double row_identity() {
  if constexpr (K == kRowMax) return -INFINITY;
  if constexpr (K == kRowMin) return INFINITY;
  return 0.0;
}

// acc combined with one element's f32 value v (a norm folds v^2).
template <int K> __device__ __forceinline__ double row_combine(double acc, float v) {
  const double x = static_cast<double>(v);
  if constexpr (K == kRowMax) return fmax(acc, x);
  if constexpr (K == kRowMin) return fmin(acc, x);
  if constexpr (K == kRowNorm) return acc + x * x;
  return acc + x;
}

// Max (min when kMin) over the block, returned to every thread; every thread must call it.
template <bool kMin> __device__ __forceinline__ double block_extremum(double x) {
  __shared__ double warp_vals[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double y = __shfl_down_sync(0xffffffffu, x, o);
    x = kMin ? fmin(x, y) : fmax(x, y);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_vals may still be read by a previous call
  if (lane == 0) warp_vals[warp] = x;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  double r = warp_vals[0];
  for (int k = 1; k < nwarps; ++k) r = kMin ? fmin(r, warp_vals[k]) : fmax(r, warp_vals[k]);
  return r;
}

// The row's result from every thread's accumulator: the block's sum, max or min, then the
// mean (sum / n) or the norm (sqrt of the sum of squares), as f32. Every thread must call it.
template <int K> __device__ __forceinline__ float row_finish(double acc, long long n) {
  double r;
  if constexpr (K == kRowMax) {
    r = block_extremum<false>(acc);
  } else if constexpr (K == kRowMin) {
    r = block_extremum<true>(acc);
  } else {
    r = block_sum(acc);
  }
  if constexpr (K == kRowMean) r = r / static_cast<double>(n);
  if constexpr (K == kRowNorm) r = sqrt(r);
  return static_cast<float>(r);
}

}  // namespace wb
