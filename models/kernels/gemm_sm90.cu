// decide's gate/up projection for Hopper (sm_90a) with the SwiGLU gate in its epilogue:
// out (M, I) = silu(h Wgate) * (h Wup), one kernel instead of a cuBLAS matmul writing the
// (M, 2I) gate/up product and silu_mul reading it back.
//
// Why: on a long prefill of q15 silu_mul alone is ~14 ms of a 28k read (0.147 ms per 8k-row
// chunk and layer, ~3 TB/s: it moves 440 MB), and the matmul writes 290 MB that only
// silu_mul reads. Here each tile's gate and up columns come out of the same block's
// accumulators, and only the gated product is written (half the bytes). H200, q15, 8,192
// rows: 0.637 ms (708 TFLOP/s) against 0.786 for cuBLAS's matmul and silu_mul, and faster
// than that matmul alone (0.66-0.69 ms); the 28k prefill 244.3 against 254.0 ms
// (bench/reports/h200-side-by-side-11/).
//
// The weight is stored (2I, K), K contiguous, its rows interleaved in blocks of 128: rows
// [256 t, 256 t + 128) are gate rows 128 t.. and the next 128 the matching up rows
// (`gate_up_interleaved` in models/src/forward/fused.rs). A block computes 128 rows of h
// against one such 256-row block: a 128 x 256 tile whose columns c and c + 128 are one
// output's gate and up, held by the same thread (the wgmma accumulator layout repeats every
// 8 columns), so the epilogue needs no exchange.
//
// Schedule (CUTLASS's persistent warp-specialized "cooperative" kernel): one block per
// multiprocessor, looping over tiles, of three warpgroups. The producer
// (one thread) loads 64-column slices of h and of the weight block with TMA into a ring of
// STAGES slots (mbarriers: full when a slot's bytes have landed, empty once both consumers'
// multiplies have read it); the two consumers each multiply 64 of the 128 rows
// (wgmma m64n256k16, both operands from shared memory in the 128-byte swizzle) and keep one
// slot's multiplies in flight while waiting for the next. Tiles are taken along M first, so
// the blocks share a few weight blocks at a time (in bands of rows where asked: `tile_at`).
// The served variant (`_overlap`, `OVERLAP` below) writes each tile's output while the next
// tile's first weight slices multiply.
//
// Rounding follows the unfused path: gate and up are rounded to bf16 (what the matmul wrote)
// before silu(gate) * up in f32, rounded once more (the division is the fast one,
// __fdividef, ~1 f32 ulp from silu_mul's).

#include <cuda_bf16.h>
#include <stdint.h>

#include "sm90_common.cuh"

typedef __nv_bfloat16 bf16;

#define GU_BM 128      // rows of h per block
#define GU_BN 256      // weight rows per block: 128 gate + 128 up
#define GU_BK 64       // columns of K per slot (128 bytes: one swizzle row)
#define GU_STAGES 4
#define GU_THREADS 384
#define GU_A_BYTES (GU_BM * GU_BK * 2)
#define GU_B_BYTES (GU_BN * GU_BK * 2)

// D (+)= A B for a 64x256 tile and k 16, A and B in shared memory (descriptors), both
// K-major; accumulate 0 overwrites D.
__device__ __forceinline__ void wgmma_n256_ss(float (&d)[128], uint64_t a, uint64_t b,
                                              int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_D128_TEXT
        ", %128, %129, p, 1, 1, 0, 0;\n}\n"
        : WGMMA_D128_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
}

// The tensor maps of a launch (`GateUpMaps` in models/src/kernels/tensor_maps.rs): h (K, M)
// in boxes of 64 x 128, the weight (K, 2I) in boxes of 64 x 256, the output (I, M) in boxes of
// 64 x 128 (written only with `tma_store`), 128-byte swizzle.
struct __align__(64) GateUpMaps {
    TensorMap h, w, out;
};

// Named barrier 1 over the two consumer warpgroups (256 threads; the producer never joins).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// One box of a 2-D tensor map at (x, y) written from shared memory at `src`, in the bulk
// group this thread commits next.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, uint32_t src, int x, int y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
            reinterpret_cast<unsigned long long>(map)),
        "r"(x), "r"(y), "r"(src)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until this thread's committed bulk stores have read their shared memory.
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Waits until this thread's committed bulk stores have completed.
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ float silu_times(float g, float u) {
    g = __bfloat162float(__float2bfloat16(g));
    u = __bfloat162float(__float2bfloat16(u));
    return __fdividef(g, 1.f + __expf(-g)) * u;
}

// OVERLAP: a consumer's epilogue of tile t runs during tile t + 1's first GU_SLICES weight
// slices, in as many slices, instead of between the two main loops with the tensor cores
// idle. The epilogue is ~2,000 cycles of special-function work (an exp2 and a reciprocal per
// output, 16 a cycle per multiprocessor) against ~25,000 of multiplies a tile (q15, K 1,536):
// ~8% of the kernel (kernel_check on an H200: 0.663 ms against 0.735 at 8,192 rows). At the
// end of a tile's main loop, each thread's gate and up accumulators are rounded to bf16 (as
// the plain epilogue does first) and packed in pairs, 64 registers that the next tile's
// multiplies leave alone; the slices then read those and write the outputs while the wgmma
// run. The same values bit for bit. Needs K / GU_BK >= GU_SLICES.
#define GU_SLICES 8

// Slice s of a packed epilogue (output pairs 4 s .. 4 s + 3 of a thread's 32: pair q is row
// half q / 16, 8-column tile q % 16): silu(gate) * up, written at `row` (the thread's first
// row of the tile, m0 + tile_row) and column `col0` (the tile's first + 2 tq).
// (s is a constant once the callers' loops are unrolled, so pk stays in registers.)
__device__ __forceinline__ void gate_up_slice(const uint32_t (&pk)[64], int s,
                                              bf16* __restrict__ out, int row, int M, int I,
                                              long col0) {
#pragma unroll
    for (int q = 4 * s; q < 4 * s + 4; ++q) {
        const int half = q / 16, j = q % 16;
        const int r = row + 8 * half;
        float o[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const uint32_t gu = pk[2 * q + e];
            const float g = __uint_as_float(gu << 16), u = __uint_as_float(gu & 0xffff0000u);
            o[e] = __fdividef(g, 1.f + __expf(-g)) * u;
        }
        if (r < M) {
            *reinterpret_cast<__nv_bfloat162*>(out + (long)r * I + col0 + 8 * j) =
                __floats2bfloat162_rn(o[0], o[1]);
        }
    }
}

// The first row m0 and the weight block nb of tile t. Tiles go along M first, in bands of
// `band` 128-row tiles (the last band what is left): every weight block for one band's rows,
// then the next band. Without bands (band >= the M tiles) the blocks running at once read
// all of h, which stays in L2 only while it is small: kernel_check timed 8,192 rows at 642
// TFLOP/s against 717 at 4,096 (bench/reports/kernel-lease-3), where the tile counts fill
// their last waves about as well; a band of 4,096 rows keeps 12.5 MiB of h in L2 at the cost
// of reading the weight once per band.
__device__ __forceinline__ void tile_at(int t, int m_tiles, int n_blocks, int band, int& m0,
                                        int& nb) {
    const int per_band = band * n_blocks;
    const int b = t / per_band;
    const int rows = min(band, m_tiles - b * band);  // tiles of this band
    const int r = t - b * per_band;
    nb = r / rows;
    m0 = (b * band + r % rows) * GU_BM;
}

// tma_store: the epilogue writes each tile's output into shared memory (the 128-byte
// swizzle, two 64-column boxes) and one thread stores it with TMA while the consumers go on
// to the next tile, instead of each thread storing its 4-byte pairs to global memory (which
// use half of each 32-byte sector: Nsight Compute, bench/reports/kernel-lease-1). The same
// values either way.
template <bool OVERLAP>
__device__ __forceinline__ void gate_up_body(const GateUpMaps& maps, bf16* __restrict__ out,
                                             int M, int I, int K, int tma_store, int band) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_addr = smem_u32(smem_raw);
    const uint32_t base = raw_addr + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t a_base = base, b_base = base + GU_STAGES * GU_A_BYTES;
    const uint32_t out_base = b_base + GU_STAGES * GU_B_BYTES;
    __shared__ __align__(8) uint64_t bars[2 * GU_STAGES];
    uint64_t* const full = bars;
    uint64_t* const empty = bars + GU_STAGES;

    const int tid = threadIdx.x, role = tid >> 7, warp = tid >> 5, lane = tid & 31;
    const int k_blocks = K / GU_BK;
    const int m_tiles = (M + GU_BM - 1) / GU_BM;
    const int n_blocks = I / (GU_BN / 2);
    const int units = m_tiles * n_blocks;
    if (tid < GU_STAGES) {
        mbar_init(&full[tid], 1);
        // The consumers' eight warps.
        mbar_init(&empty[tid], 8);
    }
    __syncthreads();

    // Persistent: block b computes tiles b, b + gridDim.x, ... (M fastest), and slot uses
    // count on across them, so the producer fills the next tile's first slots while the
    // consumers finish this one's epilogue.
    if (role == 0) {
        // The producer: one thread issues every copy.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int step = 0;
            for (int t = blockIdx.x; t < units; t += gridDim.x) {
                int m0, nb;
                tile_at(t, m_tiles, n_blocks, band, m0, nb);
                const int w0 = nb * GU_BN;
                for (int kb = 0; kb < k_blocks; ++kb, ++step) {
                    const int slot = step % GU_STAGES, use = step / GU_STAGES;
                    if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
                    mbar_arrive_expect_tx(&full[slot], GU_A_BYTES + GU_B_BYTES);
                    tma_load_2d(a_base + slot * GU_A_BYTES, &maps.h, kb * GU_BK, m0, &full[slot]);
                    tma_load_2d(b_base + slot * GU_B_BYTES, &maps.w, kb * GU_BK, w0, &full[slot]);
                }
            }
        }
        return;
    }

    // A consumer: rows c * 64.. of each tile, all 256 weight rows.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = role - 1;
    const int g = lane >> 2, tq = lane & 3;
    // Releases a slot to the producer.
    auto release = [&](int slot) { mbar_arrive(&empty[slot]); };
    float acc[128];
    int step = 0;
    // Weight slice kb of a tile: waits for it, issues its multiplies (then `between`,
    // while they run), and releases the slot before it, whose multiplies have finished.
    auto k_step = [&](int kb, auto between) {
        const int slot = step % GU_STAGES;
        mbar_wait(&full[slot], (step / GU_STAGES) & 1);
        const uint32_t a = a_base + slot * GU_A_BYTES + c * 64 * 128;
        const uint32_t b = b_base + slot * GU_B_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < GU_BK / 16; ++kk) {
            wgmma_n256_ss(acc, descriptor(a + kk * 32, 16, 1024),
                          descriptor(b + kk * 32, 16, 1024), kb > 0 || kk > 0);
        }
        wgmma_commit();
        between();
        wgmma_wait<1>();
        fence_registers(acc);
        if (kb > 0 && lane == 0) release((step - 1) % GU_STAGES);
        ++step;
    };
    if constexpr (OVERLAP) {
        // The packed gate/up pairs of the last tile, its first row for this thread and its
        // first column; `pending` while they are unwritten.
        uint32_t pk[64];
        bool pending = false;
        int p_row = 0;
        long p_col = 0;
        const int tile_row = c * 64 + (warp & 3) * 16 + g;
        for (int t = blockIdx.x; t < units; t += gridDim.x) {
            int m0, nb;
            tile_at(t, m_tiles, n_blocks, band, m0, nb);
#pragma unroll
            for (int s = 0; s < GU_SLICES; ++s) {
                k_step(s, [&] {
                    if (pending) gate_up_slice(pk, s, out, p_row, M, I, p_col);
                });
            }
            for (int kb = GU_SLICES; kb < k_blocks; ++kb) k_step(kb, [] {});
            wgmma_wait<0>();
            fence_registers(acc);
            if (lane == 0) release((step - 1) % GU_STAGES);
            // Gate and up rounded to bf16 (what the unfused matmul writes), in pairs.
#pragma unroll
            for (int q = 0; q < 32; ++q) {
                const int half = q / 16, j = q % 16;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * j + 2 * half + e],
                                                                   acc[4 * (j + 16) + 2 * half + e]);
                    pk[2 * q + e] = *reinterpret_cast<const uint32_t*>(&v);
                }
            }
            pending = true;
            p_row = m0 + tile_row;
            p_col = (long)nb * (GU_BN / 2) + 2 * tq;
        }
        if (pending) {
#pragma unroll
            for (int s = 0; s < GU_SLICES; ++s) gate_up_slice(pk, s, out, p_row, M, I, p_col);
        }
    } else {
        for (int t = blockIdx.x; t < units; t += gridDim.x) {
            int m0, nb;
            tile_at(t, m_tiles, n_blocks, band, m0, nb);
            for (int kb = 0; kb < k_blocks; ++kb) k_step(kb, [] {});
            wgmma_wait<0>();
            fence_registers(acc);
            if (lane == 0) release((step - 1) % GU_STAGES);

            // Epilogue: rows g and g + 8 of this warp's 16, columns 2 tq, 2 tq + 1 of each
            // 8-column tile; tiles 0..15 are gate, 16..31 the matching up.
            const int tile_row = c * 64 + (warp & 3) * 16 + g;
            if (tma_store) {
                // The staging buffer is free once the last tile's store has read it (a whole
                // main loop ago, so this seldom waits).
                if (tid == 128) bulk_wait_read();
                consumers_sync();
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int r = tile_row + 8 * half;
#pragma unroll
                    for (int j = 0; j < 16; ++j) {
                        const float* gv = &acc[4 * j + 2 * half];
                        const float* uv = &acc[4 * (j + 16) + 2 * half];
                        const __nv_bfloat162 v =
                            __floats2bfloat162_rn(silu_times(gv[0], uv[0]), silu_times(gv[1], uv[1]));
                        // Columns 8 j.. are 16-byte piece j % 8 of box j / 8, row r's pieces
                        // permuted by r % 8 (the 128-byte swizzle the map writes from).
                        const uint32_t at = out_base + (j >> 3) * (GU_BM * 128) + r * 128 +
                                            (((j & 7) ^ (r & 7)) << 4) + tq * 4;
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at),
                                     "r"(*reinterpret_cast<const uint32_t*>(&v))
                                     : "memory");
                    }
                }
                // The writes, made by threads, are seen by the TMA unit (the async proxy) after
                // this fence and the barrier.
                fence_async_shared();
                consumers_sync();
                if (tid == 128) {
                    const int x = nb * (GU_BN / 2);
                    tma_store_2d(&maps.out, out_base, x, m0);
                    tma_store_2d(&maps.out, out_base + GU_BM * 128, x + 64, m0);
                    bulk_commit();
                }
                continue;
            }
            const int r0 = m0 + tile_row;
            const long col0 = (long)nb * (GU_BN / 2) + 2 * tq;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = r0 + 8 * half;
                if (r >= M) continue;
                bf16* row = out + (long)r * I + col0;
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    const float* gv = &acc[4 * j + 2 * half];
                    const float* uv = &acc[4 * (j + 16) + 2 * half];
                    *reinterpret_cast<__nv_bfloat162*>(row + 8 * j) =
                        __floats2bfloat162_rn(silu_times(gv[0], uv[0]), silu_times(gv[1], uv[1]));
                }
            }
        }
        // The last stores complete before the block's shared memory goes.
        if (tma_store && tid == 128) bulk_wait();
    }
}

extern "C" __global__ void __launch_bounds__(GU_THREADS, 1)
    gate_up_silu_sm90(const __grid_constant__ GateUpMaps maps, bf16* __restrict__ out, int M,
                      int I, int K, int tma_store, int band) {
    gate_up_body<false>(maps, out, M, I, K, tma_store, band);
}

extern "C" __global__ void __launch_bounds__(GU_THREADS, 1)
    gate_up_silu_sm90_overlap(const __grid_constant__ GateUpMaps maps, bf16* __restrict__ out,
                              int M, int I, int K, int tma_store, int band) {
    gate_up_body<true>(maps, out, M, I, K, tma_store, band);
}
