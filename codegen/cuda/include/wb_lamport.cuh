// Flag-free (Lamport-style) exchange of a fused AllReduce (codegen.lower_rows, algorithm
// "lamport"): every rank stores its input straight into its part of every rank's receive
// buffer, and a reader spins on the data itself until every element has landed. No barrier,
// no flag round trip: the data is the signal.
//
// The poison. A receive buffer element holds the all-zero bit pattern until data lands. Data
// is stored encoded: its sign bit flipped, after -0.0 is made +0.0. An encoded value is then
// never all-zero bits (only -0.0 would encode to it, and none is stored), so a freshly zeroed
// buffer (the runtime zeroes u32 buffers at allocation) is already poisoned, and re-poisoning
// is a store of zeros. Summing +0.0 for -0.0 changes no value (their sum with anything is the
// same number; only the sign of an exact zero sum may differ, which compares equal).
// (TensorRT-LLM's and vLLM's Lamport kernels poison with -0.0 and store the data as it is,
// which needs an explicit fill of the buffers; the flipped sign bit makes zeroed memory the
// poison instead.)
//
// Memory ordering on Hopper (PTX memory consistency model):
// - Stores into peers are st.volatile (treated as st.relaxed.sys from sm_70 on) and polls are
//   ld.volatile (ld.relaxed.sys): both are morally strong at system scope, so a poll that
//   races with the peer's store over NVLink is not a data race, and each poll reads the
//   memory (L2 of the owning GPU), never a stale L1 line: L1 is not coherent with NVLink
//   writes, and a plain or ld.global.nc load could spin on a cached poison forever.
// - No acquire is needed: a reader consumes only the bits it polled, and each lane (2- or
//   4-byte element) is checked on its own, so no ordering between locations is relied on. A
//   16-byte vector access is single-copy atomic only per element, not as a whole; a torn
//   vector (some lanes landed, some not) fails the check and is polled again.
// - Buffers rotate over 3 launches (epoch % 3). In launch e a rank reads buffer e % 3 and
//   zeroes buffer (e + 2) % 3, whose data (launch e - 1's) it read in launch e - 1. A peer
//   writes that buffer again only in launch e + 2, which it starts after finishing launch
//   e + 1, which needs this rank's launch-(e + 1) data, which this rank stores after its
//   launch e ended: the zeroing is ordered before it by the kernel boundary (a kernel's writes
//   are complete and visible before the next kernel of the stream starts) and the peer's
//   stores come after the peer observed data this rank wrote after that boundary. A peer can
//   run at most one launch ahead, so buffers e % 3 and (e + 1) % 3 may be written while this
//   rank is in launch e, never (e + 2) % 3.
#pragma once
#include <stdint.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "wb_peer.cuh"
#include "wb_vec.cuh"

namespace wb {

template <typename T> struct LamportBits;
template <> struct LamportBits<__half> { using U = uint16_t; static constexpr U kSign = 0x8000u; };
template <> struct LamportBits<__nv_bfloat16> {
  using U = uint16_t;
  static constexpr U kSign = 0x8000u;
};
template <> struct LamportBits<float> { using U = uint32_t; static constexpr U kSign = 0x80000000u; };

template <typename U> __device__ __forceinline__ U lamport_encode(U bits, U sign) {
  return (bits == sign ? U(0) : bits) ^ sign;  // -0.0 -> +0.0, then the sign flipped
}

__device__ __forceinline__ void st_volatile(uint4* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ void st_volatile(uint16_t* p, uint16_t v) {
  asm volatile("st.volatile.global.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ void st_volatile(uint32_t* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_volatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint16_t ld_volatile(const uint16_t* p) {
  uint16_t v;
  asm volatile("ld.volatile.global.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_volatile(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Store L values (f32 holding values of T exactly) encoded at p: one 16-byte store when the
// L elements are 16 bytes (the vector path), else one store per element.
template <int L, typename T>
__device__ __forceinline__ void lamport_store(T* p, const float (&v)[L]) {
  using B = LamportBits<T>;
  using U = typename B::U;
  U bits[L];
#pragma unroll
  for (int j = 0; j < L; ++j) {
    const T x = from_float<T>(v[j]);
    bits[j] = lamport_encode<U>(*reinterpret_cast<const U*>(&x), B::kSign);
  }
  if constexpr (L * sizeof(T) == 16) {
    st_volatile(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(bits));
  } else {
#pragma unroll
    for (int j = 0; j < L; ++j) st_volatile(reinterpret_cast<U*>(p) + j, bits[j]);
  }
}

// Spin until all L elements at p have landed (no lane is the poison), then decode them.
// A peer that never stores (its process died) must not hang this GPU: trap after
// kSpinLimitNs, as the barriers do (wb_peer.cuh).
template <int L, typename T>
__device__ __forceinline__ void lamport_load(const T* p, float (&out)[L]) {
  using B = LamportBits<T>;
  using U = typename B::U;
  U bits[L];
  const uint64_t start = globaltimer_ns();
  for (;;) {
    bool landed = true;
    if constexpr (L * sizeof(T) == 16) {
      *reinterpret_cast<uint4*>(bits) = ld_volatile(reinterpret_cast<const uint4*>(p));
    } else {
#pragma unroll
      for (int j = 0; j < L; ++j) bits[j] = ld_volatile(reinterpret_cast<const U*>(p) + j);
    }
#pragma unroll
    for (int j = 0; j < L; ++j) landed = landed && bits[j] != U(0);
    if (landed) break;
    if (globaltimer_ns() - start > kSpinLimitNs) __trap();
  }
#pragma unroll
  for (int j = 0; j < L; ++j) {
    const U b = bits[j] ^ B::kSign;
    out[j] = to_float(*reinterpret_cast<const T*>(&b));
  }
}

// Re-poison L elements at p (a receive buffer of two launches ahead): plain stores of zeros.
template <int L, typename T> __device__ __forceinline__ void lamport_clear(T* p) {
  using U = typename LamportBits<T>::U;
  if constexpr (L * sizeof(T) == 16) {
    *reinterpret_cast<uint4*>(p) = make_uint4(0u, 0u, 0u, 0u);
  } else {
#pragma unroll
    for (int j = 0; j < L; ++j) reinterpret_cast<U*>(p)[j] = U(0);
  }
}

}  // namespace wb
