// Hopper (sm_90a) primitives that decide's wgmma kernels share (attention_sm90.cu,
// gemm_sm90.cu): warpgroup matrix multiply fences, shared-memory matrix descriptors in the
// 128-byte swizzle, mbarriers, and TMA tensor maps and copies. Inline PTX, each a few
// instructions; the PTX ISA's sections of the same names say what they do.

#pragma once

#include <stdint.h>

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Orders this thread's shared-memory writes (cp.async) before reads by wgmma (the async proxy).
__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of d across the asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride
// byte offsets (PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t leading, uint32_t stride) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// A tensor map for the tensor memory accelerator (TMA): CUtensorMap, 128 opaque bytes encoded
// on the host (cuTensorMapEncodeTiled), 64-byte aligned.
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Arrives on `bar` once every cp.async this thread has issued so far has landed, without
// waiting for them: the producer goes on to its next copies at once (`.noinc`: the arrival
// is one of the barrier's expected count).
__device__ __forceinline__ void mbar_arrive_on_copies(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar))
                 : "memory");
}
// Waits until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
// Adds `bytes` to the transactions the current phase of `bar` waits for (TMA copies
// complete them), without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Arrives on `bar` and adds `bytes` to the transactions its current phase waits for, in one
// instruction (the TMA copies issued next complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}
// One box of a 2-D tensor map at coordinates (x, y) (x the contiguous dimension) into shared
// memory at `dst`, completing its bytes' transactions on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TensorMap* map, int x, int y,
                                            uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
        : "memory");
}
