// Cross-GPU synchronization for fused collectives over NVLink peer memory.
//
// Every rank owns a flag array in its own memory, mapped into every peer (CUDA IPC):
//   flags[slot][block][src]  (slot 0: start barrier, 1: end barrier)
// Block b of rank r signals block b of every rank q by a system-scope release store of the
// launch's epoch into q's flags[slot][b][r], then spins with system-scope acquire loads on its
// own flags[slot][b][*]. Epochs only grow (one per launch, the same on every rank), so flags
// never need resetting and a fast rank cannot be confused by a slow one's previous launch.
#pragma once
#include <stdint.h>

namespace wb {

__device__ __forceinline__ void store_release_sys(uint32_t* addr, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* addr) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A peer that never arrives (its process died or hung) must not hang this GPU forever:
// after kSpinLimitNs the kernel traps, the launch fails, and the runtime reports the fault.
constexpr uint64_t kSpinLimitNs = 20ull * 1000 * 1000 * 1000;

// Block-level barrier with the blocks of the same index on all P ranks.
// Before it: every thread's global writes of this block (peer stores included) are made
// visible system-wide; after it: this block sees every peer block's writes before its signal.
template <int P>
__device__ __forceinline__ void block_barrier(uint32_t* const (&flags)[P], int rank, int slot,
                                              uint32_t epoch) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < P) {
    // Cumulativity: __syncthreads ordered the block's writes before this fence and release.
    __threadfence_system();
    uint32_t* dst = flags[t] + (static_cast<size_t>(slot) * gridDim.x + blockIdx.x) * P + rank;
    store_release_sys(dst, epoch);
    const uint32_t* mine =
        flags[rank] + (static_cast<size_t>(slot) * gridDim.x + blockIdx.x) * P + t;
    const uint64_t start = globaltimer_ns();
    while (static_cast<int32_t>(load_acquire_sys(mine) - epoch) < 0) {
      if (globaltimer_ns() - start > kSpinLimitNs) __trap();
    }
  }
  __syncthreads();
}

// --- Arrival flags of a pipelined fused AllReduce (rows.cu.j2) ------------------------------
//
// Moving block x of rank r, once its summed rows of row group k are stored into every rank,
// sets entry (r, k, x) of every rank's arrival flags to the launch's epoch; a computing block
// waits for the entries of every moving block that had rows in the group before it reads
// them. Epochs only grow, as the barriers' do, so the flags never need resetting.

// This block's arrival at `entry` of every rank's flags (its stores before it land first).
template <int P>
__device__ __forceinline__ void block_signal(uint32_t* const (&flags)[P], long long entry,
                                             uint32_t epoch) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < P) {
    // Cumulativity: __syncthreads ordered the block's writes before this fence and release.
    __threadfence_system();
    store_release_sys(flags[t] + entry, epoch);
  }
}

// Threads first, first + step, ... below n each spin until their entry has reached the epoch;
// the caller then syncs the threads that read what the entries guard.
__device__ __forceinline__ void wait_entries(const uint32_t* entries, long long n, int first,
                                             int step, uint32_t epoch) {
  for (long long x = first; x < n; x += step) {
    const uint64_t start = globaltimer_ns();
    while (static_cast<int32_t>(load_acquire_sys(entries + x) - epoch) < 0) {
      if (globaltimer_ns() - start > kSpinLimitNs) __trap();
    }
  }
}

// --- One-directional handshakes of a fused Send (pipeline stages) ---------------------------
//
// The sender stores its data straight into the receiver's buffer, then raises a flag in the
// receiver's memory; the receiver's wait kernel spins on that flag. Values are the run's
// sequence number (1, 2, ...), so flags never need resetting.

// The whole block waits until *flag >= value (thread 0 spins with system-scope acquire loads).
__device__ __forceinline__ void block_wait_at_least(const uint32_t* flag, uint32_t value) {
  if (threadIdx.x == 0) {
    const uint64_t start = globaltimer_ns();
    while (static_cast<int32_t>(load_acquire_sys(flag) - value) < 0) {
      if (globaltimer_ns() - start > kSpinLimitNs) __trap();
    }
  }
  __syncthreads();
}

// After every block's stores to the peer: the last block of the grid to arrive (counted in
// *count, this GPU's memory) raises *flag = value in the peer's memory. Each block fences its
// own stores system-wide before counting itself (the threadFenceReduction pattern), so the
// flag's release follows every block's data. The last block zeroes the counter for the next
// launch that uses it (stream order: that launch starts after this one ends).
__device__ __forceinline__ void grid_signal_peer(uint32_t* count, uint32_t* flag,
                                                 uint32_t value) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    const uint32_t arrived = atomicAdd(count, 1u);
    if (arrived == gridDim.x - 1) {
      *count = 0;
      __threadfence_system();
      store_release_sys(flag, value);
    }
  }
}

}  // namespace wb
