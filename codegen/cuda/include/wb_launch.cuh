// Launch counting in device memory: the epoch of a collective row kernel's barriers and of
// its Lamport buffers, read by the kernel instead of passed as an argument, so that a CUDA
// graph that captured the launch once replays it with a fresh epoch each time.
//
// counter[0]: launches finished so far; counter[1]: blocks of the current launch that have
// finished (back to 0 at its end). Every block reads counter[0] at its start; the last block
// to finish increments it. No block can read it late: the last block finishes only after
// every block has started (and read it), and the next launch of the kernel is stream-ordered
// after this one's end (kernel boundaries order and publish its global writes).
#pragma once
#include <stdint.h>

namespace wb {

// This launch's epoch (1, 2, ...), the same in every block and, as every rank launches the
// kernel equally often, on every rank. A volatile load: the value is another launch's write.
__device__ __forceinline__ uint32_t launch_epoch(uint32_t* counter) {
  return *reinterpret_cast<volatile uint32_t*>(counter) + 1u;
}

// At the end of every block: the last one to arrive counts the launch.
__device__ __forceinline__ void launch_done(uint32_t* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's reads of counter[0] come before its arrival
    if (atomicAdd(counter + 1, 1u) == gridDim.x - 1) {
      counter[1] = 0u;
      atomicAdd(counter, 1u);
    }
  }
}

}  // namespace wb
