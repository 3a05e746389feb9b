// Dropout mask: a counter-based hash of (seed, global element index), bit-exact with
// workbench/interpreter.py (_mix32, dropout_keep), so the mask does not depend on slicing,
// chunking or the thread that computes an element.
#pragma once
#include <stdint.h>

namespace wb {

// lowbias32 (Chris Wellons' integer hash), the same constants as interpreter._mix32.
__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// u = top 24 bits of the hash / 2^24 (exact in f32); keep when u >= p.
__device__ __forceinline__ bool dropout_keep(uint32_t seed, unsigned long long index, float p) {
  const uint32_t h = mix32(static_cast<uint32_t>(index) ^ mix32(seed));
  const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  return u >= p;
}

__device__ __forceinline__ float dropout(float x, uint32_t seed, unsigned long long index,
                                         float p, float scale) {
  return dropout_keep(seed, index, p) ? x * scale : 0.0f;
}

}  // namespace wb
