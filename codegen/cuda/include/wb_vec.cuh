// Element conversion and 16-byte vector loads/stores for generated kernels.
// Arithmetic runs in f32 (as the reference interpreter does); storage types are converted on
// load and rounded once on store (round to nearest even, like numpy's astype).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace wb {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
// int32 (ids, masks) is computed in f32 as the interpreter does: exact below 2^24 in magnitude.
__device__ __forceinline__ float to_float(int x) { return __int2float_rn(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// toward zero, as numpy's astype(int32) truncates
template <> __device__ __forceinline__ int from_float<int>(float x) { return __float2int_rz(x); }

// The value a statement of dtype T holds once stored: f32 arithmetic rounded once to T.
template <typename T> __device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// numpy's float32 power goes through libm's powf, which is correctly rounded for nearly all
// arguments; CUDA's powf is within 2 ulp. Through double the result is correctly rounded too,
// so Adam's bias corrections (1 - beta^step, which amplify errors) match the reference.
__device__ __forceinline__ float pow_ref(float a, float b) {
  return static_cast<float>(pow(static_cast<double>(a), static_cast<double>(b)));
}

// Cache hints of load_vec/store_vec (the H template argument): kPlain is an ordinary access;
// kStream the evict-first streaming hint (ld.global.cs / st.global.cs, CUDA's __ldcs/__stcs),
// for operands touched once per launch (codegen.tuning, design note 55).
constexpr int kPlain = 0;
constexpr int kStream = 1;

template <int H, typename W> __device__ __forceinline__ W ld_hint(const W* p) {
  if constexpr (H == kStream) return __ldcs(p);
  else return *p;
}

template <int H, typename W> __device__ __forceinline__ void st_hint(W* p, const W& v) {
  if constexpr (H == kStream) __stcs(p, v);
  else *p = v;
}

// V consecutive elements of T starting at p, widened to f32. p must be aligned to
// min(16, V * sizeof(T)) bytes; the loads are 16 bytes wide when V * sizeof(T) allows it.
template <int V, int H = kPlain, typename T>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    uint4 raw[kBytes / 16];
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) raw[k] = ld_hint<H>(reinterpret_cast<const uint4*>(p) + k);
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(e[j]);
  } else if constexpr (kBytes % 8 == 0) {
    uint2 raw[kBytes / 8];
#pragma unroll
    for (int k = 0; k < kBytes / 8; ++k) raw[k] = ld_hint<H>(reinterpret_cast<const uint2*>(p) + k);
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(ld_hint<H>(p + j));
  }
}

// Round V f32 values to T and store them at p (same alignment rule as load_vec).
template <int V, int H = kPlain, typename T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    uint4 raw[kBytes / 16];
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int j = 0; j < V; ++j) e[j] = from_float<T>(in[j]);
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) st_hint<H>(reinterpret_cast<uint4*>(p) + k, raw[k]);
  } else if constexpr (kBytes % 8 == 0) {
    uint2 raw[kBytes / 8];
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int j = 0; j < V; ++j) e[j] = from_float<T>(in[j]);
#pragma unroll
    for (int k = 0; k < kBytes / 8; ++k) st_hint<H>(reinterpret_cast<uint2*>(p) + k, raw[k]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) st_hint<H>(p + j, from_float<T>(in[j]));
  }
}

// True when every address in the list is 16-byte aligned (the vector path's precondition).
__device__ __forceinline__ bool aligned16(uintptr_t bits) { return (bits & 15u) == 0; }

}  // namespace wb
