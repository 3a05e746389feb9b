// Kernels of benchmarks/gpu/link_probe.py: the ways one GPU can move bytes to or from its
// NVLink peer (SM loads, SM stores, TMA bulk copies), each as simple as it can be, so that the
// probe measures the link and not the kernel. Compiled with nvcc -arch=sm_90 -cubin.
#include <cstdint>

// SM copy: 16-byte loads and stores, grid-stride. With src on the peer it is a pull (peer
// loads); with dst on the peer it is a push (peer stores).
extern "C" __global__ void sm_copy(const int4* __restrict__ src, int4* __restrict__ dst,
                                   long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride)
    dst[i] = src[i];
}

// SM stores of values made in registers: the link's write rate with no local read beside it.
extern "C" __global__ void sm_store_only(int4* __restrict__ dst, long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride)
    dst[i] = make_int4((int)i, (int)(i >> 32), 1, 2);
}

// An HBM-bound local kernel to run beside a copy: y = a * x + y over n16 vectors of 4 floats.
extern "C" __global__ void axpy(const float4* __restrict__ x, float4* __restrict__ y,
                                long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
    float4 a = x[i], b = y[i];
    y[i] = make_float4(1.0001f * a.x + b.x, 1.0001f * a.y + b.y, 1.0001f * a.z + b.z,
                       1.0001f * a.w + b.w);
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// TMA bulk copy: one thread per block moves `chunk`-byte pieces global -> shared -> global
// through two shared-memory stages (cp.async.bulk; the load completes on an mbarrier, the
// store is a bulk group read out before its stage is refilled). Blocks take pieces
// round-robin. nbytes and chunk are multiples of 16; dynamic shared memory is 2 * chunk.
extern "C" __global__ void tma_copy(const char* __restrict__ src, char* __restrict__ dst,
                                    long long nbytes, int chunk) {
  extern __shared__ __align__(128) char stage[];
  __shared__ __align__(8) uint64_t bar[2];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < 2; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const long long pieces = nbytes / chunk;
  int k = 0;
  for (long long p = blockIdx.x; p < pieces; p += gridDim.x, ++k) {
    const int s = k & 1;
    const uint32_t buf = smem_addr(stage + s * chunk), b = smem_addr(&bar[s]);
    // the store issued from this stage two pieces ago must have read it out
    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(chunk)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(buf), "l"(src + p * chunk), "r"(chunk), "r"(b) : "memory");
    const uint32_t parity = (k >> 1) & 1;
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; "
          "selp.u32 %0, 1, 0, q; }"
          : "=r"(done) : "r"(b), "r"(parity) : "memory");
    }
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst + p * chunk), "r"(buf), "r"(chunk) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// TMA bulk stores of one shared-memory piece, over and over: the link's write rate through
// TMA with no load beside it (the contents do not matter).
extern "C" __global__ void tma_store_only(char* __restrict__ dst, long long nbytes, int chunk) {
  extern __shared__ __align__(128) char stage[];
  if (threadIdx.x != 0) return;
  const uint32_t buf = smem_addr(stage);
  const long long pieces = nbytes / chunk;
  int k = 0;
  for (long long p = blockIdx.x; p < pieces; p += gridDim.x, ++k) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst + p * chunk), "r"(buf), "r"(chunk) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if ((k & 7) == 7) asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
