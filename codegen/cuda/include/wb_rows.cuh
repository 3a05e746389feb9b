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

// The threads of a block that take one row at a time together: `n` consecutive threads (a
// power of two from 32 to blockDim), group `index` of `count` in the block, this thread `t`
// of the group. Rows of up to n x per_thread elements: a group as small as that lets a block
// work on several rows at once, so more loads are in flight per SM and fewer threads wait at
// each row's reduction (design note 80).
struct RowGroup {
  int n;
  int index;
  int count;
  int t;
};

// The smallest group whose threads hold `cols` elements at `per_thread` each (the whole block
// when per_thread is 0, or when no smaller group does). Depends only on cols and blockDim, so
// every rank splits its blocks alike.
__device__ __forceinline__ RowGroup row_group(long long cols, int per_thread) {
  int n = 32;
  while (n < static_cast<int>(blockDim.x) &&
         (per_thread == 0 || static_cast<long long>(n) * per_thread < cols)) {
    n *= 2;
  }
  if (n > static_cast<int>(blockDim.x) || blockDim.x % n != 0) n = blockDim.x;
  return {n, static_cast<int>(threadIdx.x) / n, static_cast<int>(blockDim.x) / n,
          static_cast<int>(threadIdx.x) % n};
}

// Every thread of group g waits for the others (a named barrier, 1 + the group's index: 0 is
// __syncthreads'; a single warp needs none beyond __syncwarp).
__device__ __forceinline__ void group_sync(const RowGroup& g) {
  if (g.count == 1) {
    __syncthreads();
  } else if (g.n > 32) {
    asm volatile("bar.sync %0, %1;" ::"r"(g.index + 1), "r"(g.n) : "memory");
  } else {
    __syncwarp();
  }
}

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

// prefetch_row_l2 by the threads of a row group.
template <typename T>
__device__ __forceinline__ void prefetch_row_l2(const T* p, long long n, const RowGroup& g) {
  const char* b = reinterpret_cast<const char*>(p);
  const long long bytes = n * static_cast<long long>(sizeof(T));
  for (long long o = static_cast<long long>(g.t) * 128; o < bytes;
       o += static_cast<long long>(g.n) * 128) {
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

// The sum (kind kRowSum), max or min of x over the group's threads, returned to each of
// them; every thread of the group must call it. The order of additions depends only on the
// group's size, as block_sum's on blockDim.
template <int K> __device__ __forceinline__ double group_combine(double a, double b) {
  if constexpr (K == kRowMax) return fmax(a, b);
  if constexpr (K == kRowMin) return fmin(a, b);
  return a + b;
}

template <int K> __device__ __forceinline__ double group_reduce(double x, const RowGroup& g) {
  __shared__ double warp_vals[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = group_combine<K>(x, __shfl_down_sync(0xffffffffu, x, o));
  if (g.n <= 32) return __shfl_sync(0xffffffffu, x, 0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  group_sync(g);  // warp_vals may still be read by the group's previous call
  if (lane == 0) warp_vals[warp] = x;
  group_sync(g);
  const int first = g.index * (g.n >> 5), nwarps = g.n >> 5;
  double r = warp_vals[first];
  for (int k = 1; k < nwarps; ++k) r = group_combine<K>(r, warp_vals[first + k]);
  return r;
}

// row_finish over a row group (lower_rows.ROW_GROUPS): the group's sum, max or min, then the
// mean or the norm, as f32. Every thread of the group must call it.
template <int K> __device__ __forceinline__ float row_finish(double acc, long long n,
                                                             const RowGroup& g) {
  double r = group_reduce<(K == kRowMax || K == kRowMin) ? K : kRowSum>(acc, g);
  if constexpr (K == kRowMean) r = r / static_cast<double>(n);
  if constexpr (K == kRowNorm) r = sqrt(r);
  return static_cast<float>(r);
}

}  // namespace wb
