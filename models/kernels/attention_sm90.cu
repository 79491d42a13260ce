// decide's attention kernel for Hopper (sm_90a): the same arguments and results as the
// mma.sync kernel in fused.cu (see the comment above attention_impl there), on warpgroup
// matrix multiplies (wgmma), which issue twice the tensor-core work per instruction and run
// asynchronously.
//
// Why: a long prefill is mostly attention (a 28k-token prefill of q15 is ~69 of 143 TFLOP),
// and the mma.sync kernels top out near 190 TFLOP/s on an H200.
//
// A block is two warpgroups over 128 query rows of one head; each warpgroup owns 64 rows
// (each warp 16, in the fragment layout the mma.sync kernel uses, so the mask, the online
// softmax and the output code are shared: attention_common.cuh). Q and two stages of 128-key
// K and V tiles are staged with cp.async in the 128-byte-swizzled layout wgmma reads (both
// K-major for S = Q K^T; V read N-major, transposed, for O += P V, with P from registers).
// The next tile is staged while the scores' multiplies run, and the two warpgroups take
// turns at the tensor cores (named barrier 1), so one's softmax overlaps the other's
// multiplies. Heads 128 or 64 wide; 161 (81) KiB of dynamic shared memory, one block per
// multiprocessor.
//
// Built to PTX for compute_90a by models/build.rs when the `cuda` feature targets sm_90; the
// launcher uses it only on a device of compute capability 9.0.

#include "attention_common.cuh"
#include "sm90_common.cuh"

#define WG_BM 128
#define WG_BN 128
#define WG_THREADS 256

// D (+)= A B for a 64x128 tile and k 16, A and B in shared memory (descriptors), both
// K-major; accumulate 0 overwrites D.
__device__ __forceinline__ void wgmma_n128_ss(float (&d)[64], uint64_t a, uint64_t b,
                                              int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D64_TEXT
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WGMMA_D64_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
}

// D += A B for a 64x128 tile (D 64 registers) or a 64x64 one (32) and k 16, A in registers
// (the layout of mma.sync's A fragment, per warp of the group), B in shared memory N-major
// (transposed).
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[64], const uint32_t (&a)[4],
                                            uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D64_TEXT
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : WGMMA_D64_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_tb(float (&d)[32], const uint32_t (&a)[4],
                                            uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32_TEXT
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Byte offset of 16-byte piece `part` of row `row` in an operand of `rows` rows, in the
// 128-byte swizzle layout: 64-column blocks one after another, rows of 128 bytes, the pieces
// of row r permuted by r % 8 (so eight rows read at one column hit every bank once).
__device__ __forceinline__ uint32_t swizzled(int row, int part, int rows) {
    return (part >> 3) * rows * 128 + row * 128 + (((part & 7) ^ (row & 7)) << 4);
}

// Named barrier 1 between the two warpgroups (FlashAttention-3's ping-pong): warpgroup 0
// arrives once it has issued its scores' multiplies, warpgroup 1 waits for that before
// issuing its own.
__device__ __forceinline__ void turn_arrive() {
    asm volatile("bar.arrive 1, 256;\n" ::: "memory");
}
__device__ __forceinline__ void turn_wait() {
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

// Issues S = Q K^T for one warpgroup's 64 query rows (q_desc: their descriptor) and a 128-key
// tile (k_desc), both in the 128-byte swizzle: D / 16 k-steps of 16 over the head (4 steps of
// 32 bytes in each 64-column block), 8-row groups 1024 bytes apart. The caller fences and
// commits.
template <int D, int BM, int BN>
__device__ __forceinline__ void issue_scores(float (&sf)[BN / 2], uint64_t q_desc,
                                             uint64_t k_desc) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t step = (kk & 3) * 32;
        wgmma_n128_ss(sf, descriptor_plus(q_desc, (kk >> 2) * BM * 128 + step),
                      descriptor_plus(k_desc, (kk >> 2) * BN * 128 + step), kk > 0);
    }
}

// The descriptor of a K tile (or of the queries) at `addr`, for issue_scores.
__device__ __forceinline__ uint64_t k_major_descriptor(uint32_t addr) {
    return descriptor(addr, 16, 1024);
}
// The descriptor of a BN-key V tile at `addr`, read N-major, for issue_values.
template <int BN>
__device__ __forceinline__ uint64_t values_descriptor(uint32_t addr) {
    return descriptor(addr, BN * 128, 1024);
}

// Issues O += P V for a 128-key V tile (v_desc, read N-major: 8 k-steps of 16 keys, its
// 64-column blocks BN * 128 bytes apart), P from registers. The caller fences and commits.
template <int BN, int N>
__device__ __forceinline__ void issue_values(float (&of)[N], const uint32_t (&p)[BN / 16][4],
                                             uint64_t v_desc) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        wgmma_rs_tb(of, p[kk], descriptor_plus(v_desc, kk * 16 * 128));
    }
}

template <int D>
__device__ __forceinline__ void attention_wgmma(ATTENTION_PARAMS) {
    constexpr int BM = WG_BM, BN = WG_BN;
    constexpr int NT = BN / 8;     // 8-column tiles of a score tile
    constexpr int OT = D / 8;      // 8-column tiles of the output
    constexpr int PIECES = D / 8;  // 16-byte pieces per row
    constexpr int ROWS_PER_PASS = WG_THREADS / PIECES;
    constexpr uint32_t Q_BYTES = BM * D * 2, TILE_BYTES = BN * D * 2;
    // The 128-byte swizzle repeats every 1024 bytes, and wgmma applies it to the address:
    // operands start on a 1024-byte boundary (the launcher adds 1 KiB of slack).
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_addr = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024 - (raw_addr & 1023)) & 1023;
    unsigned char* const q_s = smem_raw + pad;  // then two stages of (K tile, V tile)
    const uint32_t q_addr = raw_addr + pad;
    __shared__ int range[4];
    __shared__ __align__(16) int s_bounds[BM * 4];
    __shared__ SharedPrefixTable s_table;

    const int tid = threadIdx.x, wg = tid >> 7, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    int row0, h;
    block_place<BM>(H, KV, D, own_start + own_rows, row0, h);
    const int kvh = h / (H / KV);
    const int wrow = warp * 16;
    const int r0 = row0 + wrow + g, r1 = r0 + 8;

    const KeyTable keys = stage_key_table(s_table, prefix_k, prefix_v, prefix_start, prefix_len,
                                          n_prefix, k_own, v_own, own_start, own_rows, kvh);
    const BlockTiles tiles = block_tiles<BM>(s_bounds, range, bounds, row0, M, BN);
    const WarpBands bands = warp_bands(s_bounds, wrow, row0, M);
    // The bounds of this thread's rows r0 and r1.
    const int4 b0 = row_bounds(s_bounds, wrow + g), b1 = row_bounds(s_bounds, wrow + g + 8);

    float o[OT][4];
#pragma unroll
    for (int n = 0; n < OT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    RowState st;

    const int z = blockIdx.z;
    int it_begin, it_end;
    tiles.share(z, n_splits, it_begin, it_end);

    const int part = tid % PIECES;
    if (it_begin < it_end) {
        // The block's queries, in the first tile's commit group.
#pragma unroll
        for (int i = 0; i < BM / ROWS_PER_PASS; ++i) {
            const int j = tid / PIECES + i * ROWS_PER_PASS;
            const bool valid = row0 + j < M;
            const bf16* src = q + (long)(valid ? row0 + j : 0) * q_stride + h * D + part * 8;
            cp_async16(q_s + swizzled(j, part, BM), src, valid);
        }
    }

    // Stages tile `it` into buffer `stage` (zeros where no source covers a column), and
    // commits the group.
    auto load = [&](int it, int stage) {
        const int col0 = tiles.col0(it, BN);
        unsigned char* const Kt = q_s + Q_BYTES + stage * 2 * TILE_BYTES;
        unsigned char* const Vt = Kt + TILE_BYTES;
        for_key_rows<BN / ROWS_PER_PASS>(
            keys, col0, BN, tid / PIECES, ROWS_PER_PASS, part, D,
            [&](int j, const bf16* kp, const bf16* vp) {
                const uint32_t at = swizzled(j, part, BN);
                cp_async16(Kt + at, kp ? kp : k_own, kp != nullptr);
                cp_async16(Vt + at, vp ? vp : v_own, vp != nullptr);
            });
        cp_async_commit();
    };

    // This warpgroup's 64 query rows, in each 64-column block of Q.
    const uint32_t q_rows = q_addr + wg * 64 * 128;
    if (it_begin < it_end) load(it_begin, 0);
    float(&of)[OT * 4] = reinterpret_cast<float(&)[OT * 4]>(o);
    for (int it = it_begin; it < it_end; ++it) {
        const int stage = (it - it_begin) & 1;
        // Tile `it` (the only group in flight) has landed, for every thread.
        cp_async_wait<0>();
        fence_async_shared();
        __syncthreads();
        const uint32_t k_addr = q_addr + Q_BYTES + stage * 2 * TILE_BYTES;
        const uint32_t v_addr = k_addr + TILE_BYTES;
        const int col0 = tiles.col0(it, BN);

        // S = Q K^T: D / 16 k-steps of 16 over the head (4 steps of 32 bytes in each
        // 64-column block); 8-row groups 1024 bytes apart.
        float s[NT][4];
        float(&sf)[NT * 4] = reinterpret_cast<float(&)[NT * 4]>(s);
        wgmma_fence();
        // Warpgroup 1 issues after warpgroup 0, so its multiplies queue behind 0's and 0's
        // softmax runs while the tensor cores work for 1 (and 1's softmax during 0's
        // O += P V): without this both did their softmax at once, the tensor cores idle.
        if (wg == 1) turn_wait();
        issue_scores<D, BM, BN>(sf, k_major_descriptor(q_rows), k_major_descriptor(k_addr));
        wgmma_commit();
        if (wg == 0) turn_arrive();
        // While the tensor cores work: stage the next tile into the other buffer (the
        // previous iteration's reads of it ended before its closing barrier).
        if (it + 1 < it_end) load(it + 1, stage ^ 1);
        wgmma_wait<0>();
        fence_registers(sf);

        softmax_update(s, o, st, bands.whole(col0, col0 + BN), col0, b0, b1, tq, scale_log2);

        // O += P V: 8 k-steps of 16 keys (two 8-key groups, 1024 bytes apart); V is read
        // N-major, its 64-column blocks BN * 128 bytes apart.
        uint32_t p[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) p_fragment(p[kk], s, kk);
        wgmma_fence();
        issue_values<BN>(of, p, values_descriptor<BN>(v_addr));
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(of);
        // Everyone is done with this stage before the next iteration refills it.
        __syncthreads();
    }

    write_rows(o, st, r0, r1, tq, h, M, H, z, n_splits, scale_log2, out, part_o, part_ml);
}

// ---- The warp-specialized kernel (FlashAttention-3's schedule) ----
//
// Why a second kernel: in the one above every thread both stages tiles and multiplies, and
// two block-wide barriers per tile hold the warpgroups in step, so the tensor cores wait for
// the loads and for each softmax. Here a block is three warpgroups over the same 128 query
// rows: a producer that only stages tiles and two consumers of 64 rows each that only
// multiply. The producer's copies arrive on a slot's mbarrier by themselves once they land
// (cp.async.mbarrier.arrive), so it never waits for its own loads, only for free slots:
// 5-9% faster on long prefills than when each thread waited for its copies, fenced them and
// arrived (kernel_check, bench/reports/h200-side-by-side-3/kernel-check-producer.txt). A tile
// inside one source is staged with one copy instruction per row at constant offsets (stage()
// below): with the general per-row walk the producer issued 31% of the kernel's instructions
// (~15 per copy), the consumers' most sampled stall was the wait for a K tile, and the 28k
// prefill's attention took 153.6 ms against 129.2 with this path (one run; an ablation with
// no copies at all took 100 ms: bench/reports/h200-side-by-side-5/attention-probe.txt).
// Where the launch carries tensor maps over that source (KeyMaps below), such a tile is one
// TMA copy per 64-column block instead, issued by one thread: 2-3% faster again on the 28k
// prefill's chunks (bench/reports/h200-side-by-side-10/probes/kernel-check.txt); tiles that
// straddle sources, and passes over several prefixes, keep the copies.
// K and V tiles have their own two-slot pipelines (full and empty mbarriers per slot), so a
// consumer releases a K tile as soon as its scores are computed. Two ways of landing K tiles
// earlier were measured and not kept (the consumers found a K tile not landed at their first
// look in 43% of tiles, Nsight in run 17): the producer staging K one tile ahead of V (the
// 28k read's attention 132.4 against 117.8 ms, H100, bench/reports/h100-side-by-side-18) and
// the producer split into K stagers with three slots and V stagers with two (117.5 against
// 117.4 ms, 1-6% slower on most shapes, kernel_check on an H100, session 35): the loads are
// not what holds the consumers back. Each consumer overlaps
// within itself: it issues S = Q K^T for tile i together with O += P V for tile i - 1, and
// runs the softmax of tile i while the latter multiplies; the two consumers take turns at
// issuing (named barriers 1 and 2), so one's softmax runs during the other's multiplies.
// The producer gives up registers for the consumers (setmaxnreg: 128 x 72 + 256 x 216 is the
// 64,512 the block starts with at 168 each; with less than 72 the producer spills, ptxas -v).
// Results are those of the kernel above, operation for operation (the same rescales and sums
// in the same order).

#define WS_THREADS 384
#define WS_SLOTS 2

// The tensor maps of one launch of the warp-specialized kernel (`KeyMaps` in
// models/src/kernels/tensor_maps.rs): over the pass's own keys and values and over each of
// its cached prefixes (at this layer; the pieces of one cache held in several, or the
// prefixes of a packed pass), each 3-D (head_dim, rows, kv heads), in boxes of 64 columns x
// 128 rows with the 128-byte swizzle, so one box lands as one 64-column block of a tile in
// exactly the layout the cp.async path writes (swizzled() above). `present`: bit 0 the own
// maps, bit 1 + p prefix p's (encoded only for a pass with at most ATT_MAPPED_PREFIXES
// prefixes; none inside a CUDA graph, whose replays change the prefixes). Passed as a
// __grid_constant__ parameter, so TMA reads the maps from parameter memory.
struct __align__(64) KeyMaps {
    TensorMap k_own, v_own;
    TensorMap k_prefix[ATT_MAPPED_PREFIXES], v_prefix[ATT_MAPPED_PREFIXES];
    int present;
};

// Stages a BN-row tile of a key or value source with TMA: rows [row, row + BN) of kv head
// kvh, one box per 64-column block of the tile (D / 64), each landing BN * 128 bytes after
// the last (the layout swizzled() describes). The copies complete transactions on `bar`.
template <int D, int BN>
__device__ __forceinline__ void tma_tile(uint32_t dst, const TensorMap* map, int row, int kvh,
                                         uint64_t* bar) {
    const unsigned long long m = reinterpret_cast<unsigned long long>(map);
#pragma unroll
    for (int b = 0; b < D / 64; ++b) {
        asm volatile(
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst + b * BN * 128),
            "l"(m), "r"(b * 64), "r"(row), "r"(kvh), "r"(smem_u32(bar))
            : "memory");
    }
}
// Named barrier 1 + c of the two consumer warpgroups (256 threads); c is 0 or 1 (immediate
// ids, so the compiler reserves two barriers, not all sixteen).
__device__ __forceinline__ void consumers_sync(int c) {
    if (c == 0) {
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
    } else {
        asm volatile("bar.sync 2, 256;\n" ::: "memory");
    }
}
__device__ __forceinline__ void consumers_arrive(int c) {
    if (c == 0) {
        asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    } else {
        asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    }
}

template <int D>
__device__ __forceinline__ void attention_wgmma_ws(ATTENTION_PARAMS, const KeyMaps& maps) {
    constexpr int BM = WG_BM, BN = WG_BN;
    constexpr int NT = BN / 8, OT = D / 8, PIECES = D / 8;
    constexpr int ROWS_PER_PASS = 128 / PIECES;  // key rows the producer's 128 threads stage at once
    constexpr uint32_t Q_BYTES = BM * D * 2, TILE_BYTES = BN * D * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_addr = smem_u32(smem_raw);
    const uint32_t pad = (1024 - (raw_addr & 1023)) & 1023;
    // Q, then the two K slots, then the two V slots.
    unsigned char* const q_s = smem_raw + pad;
    const uint32_t q_addr = raw_addr + pad;
    const uint32_t k_base = q_addr + Q_BYTES, v_base = k_base + WS_SLOTS * TILE_BYTES;
    __shared__ int range[4];
    __shared__ __align__(16) int s_bounds[BM * 4];
    __shared__ SharedPrefixTable s_table;
    // full_k, full_v (the producer's 128 threads arrive), empty_k, empty_v (the consumers'
    // eight warps arrive), per slot.
    __shared__ __align__(8) uint64_t bars[4 * WS_SLOTS];
    uint64_t* const full_k = bars;
    uint64_t* const full_v = bars + WS_SLOTS;
    uint64_t* const empty_k = bars + 2 * WS_SLOTS;
    uint64_t* const empty_v = bars + 3 * WS_SLOTS;

    const int tid = threadIdx.x, role = tid >> 7, warp = tid >> 5, lane = tid & 31;
    int row0, h;
    block_place<BM>(H, KV, D, own_start + own_rows, row0, h);
    const int kvh = h / (H / KV);
    if (tid < WS_SLOTS) {
        mbar_init(&full_k[tid], 128);
        mbar_init(&full_v[tid], 128);
        mbar_init(&empty_k[tid], 8);
        mbar_init(&empty_v[tid], 8);
    }
    if (role == 0) {
        // The producer's queries first, in K tile 0's group: they load while the block reads
        // its rows' bounds below (they depend on the rows and the head alone).
        const int part = tid % PIECES, first = tid / PIECES;
#pragma unroll 1
        for (int i = 0; i < BM / ROWS_PER_PASS; ++i) {
            const int j = first + i * ROWS_PER_PASS;
            const bool valid = row0 + j < M;
            const bf16* src = q + (long)(valid ? row0 + j : 0) * q_stride + h * D + part * 8;
            cp_async16(q_s + swizzled(j, part, BM), src, valid);
        }
    }
    const KeyTable keys = stage_key_table(s_table, prefix_k, prefix_v, prefix_start, prefix_len,
                                          n_prefix, k_own, v_own, own_start, own_rows, kvh);
    // Syncs the block (after the barriers' initialisation and the key table too).
    const BlockTiles tiles = block_tiles<BM>(s_bounds, range, bounds, row0, M, BN);
    int it_begin, it_end;
    tiles.share(blockIdx.z, n_splits, it_begin, it_end);
    const int n = it_end - it_begin;

    if (role == 0) {
        // The producer.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;\n");
        if (n == 0) {
            // The queries' copies land before the block's shared memory goes (committed
            // first: wait_group waits for committed groups only).
            cp_async_commit();
            cp_async_wait<0>();
            return;
        }
        const int part = tid % PIECES, first = tid / PIECES;
        // Stages the K (or V) rows of a tile into `slot_addr`, and commits the group. When
        // the tile lies in one source (`whole`: src is piece `part` of its first row), this
        // thread's rows first + i * ROWS_PER_PASS are i * ROWS_PER_PASS rows apart in global
        // memory and, ROWS_PER_PASS being a multiple of 8, i * ROWS_PER_PASS * 128 bytes apart
        // in the swizzled layout with the same piece permutation: one copy instruction per
        // row at constant offsets. Else row by row along the sources.
        auto stage = [&](int col0, bool whole, const bf16* src, uint32_t slot_addr,
                         bool values) {
            if (whole) {
                const uint32_t dst = slot_addr + swizzled(first, part, BN);
                const bf16* from = src + (long)first * D;
#pragma unroll
                for (int i = 0; i < BN / ROWS_PER_PASS; ++i) {
                    cp_async16_shared(dst + i * ROWS_PER_PASS * 128,
                                      from + (long)i * ROWS_PER_PASS * D);
                }
            } else {
                unsigned char* const dst = smem_raw + (slot_addr - raw_addr);
                for_key_rows<BN / ROWS_PER_PASS>(
                    keys, col0, BN, first, ROWS_PER_PASS, part, D,
                    [&](int j, const bf16* kp, const bf16* vp) {
                        const bf16* from = values ? vp : kp;
                        cp_async16(dst + swizzled(j, part, BN), from ? from : k_own,
                                   from != nullptr);
                    });
            }
            cp_async_commit();
        };
        // The tensor maps of a tile inside `source` (KeyTable::source_of) when it has them
        // (null: none), and the tile's first row in that source.
        auto tile_maps = [&](int source, int col0, int& row,
                             const TensorMap*& mv) -> const TensorMap* {
            if (source == KEYS_OWN && (maps.present & 1)) {
                row = col0 - own_start;
                mv = &maps.v_own;
                return &maps.k_own;
            }
            if (source >= 0 && source < ATT_MAPPED_PREFIXES && (maps.present & (2 << source))) {
                row = col0 - keys.pstart[source];
                mv = maps.v_prefix + source;
                return maps.k_prefix + source;
            }
            mv = nullptr;
            return nullptr;
        };
        // Each slot's barrier completes when the copies of its 128 threads have landed; the
        // producer never waits for its own copies, only for free slots, so a tile's loads
        // start as soon as its slot is released. (The consumers fence the async proxy after
        // their wait, as the writes were made by the copies, not by an instruction of a
        // thread that could fence them.) A tile with tensor maps is one TMA copy per
        // 64-column block, issued by thread 0, whose barrier phase then also waits for the
        // copy's bytes (set before thread 0 arrives, so the phase cannot complete first);
        // every thread still arrives once its earlier copies (the queries) have landed.
        // Stages tile i's K tile and then its V tile, each into its slot once the consumers
        // have released it.
        auto fill_tile = [&](int i) {
            const int slot = i % WS_SLOTS, use = i / WS_SLOTS;
            const int col0 = tiles.col0(it_begin + i, BN);
            const bf16 *k = nullptr, *v = nullptr;
            const int source = keys.source_of(col0, BN);
            const bool whole = source != KEYS_MIXED;
            if (whole) keys.span_in(source, col0, part, k, v, D);
            int row = 0;
            const TensorMap* mv = nullptr;
            const TensorMap* mk = whole ? tile_maps(source, col0, row, mv) : nullptr;
            auto fill = [&](uint64_t* empty, uint64_t* full, uint32_t base, const TensorMap* map,
                            const bf16* src, bool values) {
                if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
                if (map) {
                    if (tid == 0) {
                        mbar_expect_tx(&full[slot], TILE_BYTES);
                        tma_tile<D, BN>(base + slot * TILE_BYTES, map, row, kvh, &full[slot]);
                    }
                } else {
                    stage(col0, whole, src, base + slot * TILE_BYTES, values);
                }
                mbar_arrive_on_copies(&full[slot]);
            };
            fill(empty_k, full_k, k_base, mk, k, false);
            fill(empty_v, full_v, v_base, mv, v, true);
        };
        for (int i = 0; i < n; ++i) fill_tile(i);
        cp_async_wait<0>();
        return;
    }

    // A consumer: 64 query rows.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n");
    const int c = role - 1;
    const int g = lane >> 2, tq = lane & 3;
    const int wrow = (warp - 4) * 16;
    const int r0 = row0 + wrow + g, r1 = r0 + 8;
    const WarpBands bands = warp_bands(s_bounds, wrow, row0, M);
    const int4 b0 = row_bounds(s_bounds, wrow + g), b1 = row_bounds(s_bounds, wrow + g + 8);

    float o[OT][4];
#pragma unroll
    for (int t = 0; t < OT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float(&of)[OT * 4] = reinterpret_cast<float(&)[OT * 4]>(o);
    RowState st;
    uint32_t p[BN / 16][4];
    // The descriptors of this consumer's queries and of the first K and V slots, made once:
    // a tile's are these plus constant offsets (descriptor_plus). The consumer's index goes
    // through a shuffle from lane 0 so that the compiler knows it is one value across the warp
    // and keeps the queries' descriptors in uniform registers, where wgmma reads them (from a
    // per-thread value each multiply cost two moves). With per-multiply descriptors the
    // consumers spent ~210 instructions a tile issuing 16 multiplies; now ~100 (ptxas 13.0,
    // nvdisasm: the loop from the K wait to the scores' wait), and the 28k read's attention
    // took 116.0 against 119.3 ms on an H200 (run 17), 117.8 against 121.7 on an H100 (run
    // 18), results bit-identical.
    const uint64_t q_desc = k_major_descriptor(q_addr + __shfl_sync(0xffffffff, c, 0) * 64 * 128);
    const uint64_t k_desc = k_major_descriptor(k_base);
    const uint64_t v_desc = values_descriptor<BN>(v_base);
    float s[NT][4];
    float(&sf)[NT * 4] = reinterpret_cast<float(&)[NT * 4]>(s);
    // Issues S = Q K^T for tile i (its K slot full), in turns with the other consumer.
    auto scores = [&](int i) {
        const int slot = i % WS_SLOTS;
        mbar_wait(&full_k[slot], (i / WS_SLOTS) & 1);
        fence_async_shared();
        consumers_sync(c);
        wgmma_fence();
        issue_scores<D, BM, BN>(sf, q_desc, descriptor_plus(k_desc, slot * TILE_BYTES));
        wgmma_commit();
    };
    // Issues O += P V for tile i (its V slot full), P from the registers p.
    auto values = [&](int i) {
        const int slot = i % WS_SLOTS;
        mbar_wait(&full_v[slot], (i / WS_SLOTS) & 1);
        fence_async_shared();
        issue_values<BN>(of, p, descriptor_plus(v_desc, slot * TILE_BYTES));
        wgmma_commit();
    };
    // The softmax of tile i's scores (landed), K slot released; the output's rescale is
    // left pending until the previous O += P V has finished.
    Rescale pending{false, 1.f, 1.f};
    auto softmax = [&](int i) {
        fence_registers(sf);
        if (lane == 0) mbar_arrive(&empty_k[i % WS_SLOTS]);
        const int col0 = tiles.col0(it_begin + i, BN);
        pending = softmax_scores(s, st, bands.whole(col0, col0 + BN), col0, b0, b1, tq,
                                 scale_log2);
    };
    // Tile i's O += P V has finished: V slot released.
    auto values_done = [&](int i) {
        fence_registers(of);
        if (lane == 0) mbar_arrive(&empty_v[i % WS_SLOTS]);
    };
    auto probabilities = [&] {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) p_fragment(p[kk], s, kk);
    };
    if (n > 0) {
        // Consumer 0 issues first.
        if (c == 1) consumers_arrive(0);
        scores(0);
        consumers_arrive(c ^ 1);
        wgmma_wait<0>();
        softmax(0);
        probabilities();
        for (int i = 1; i < n; ++i) {
            // Tile i - 1's probabilities go into an output rescaled by its softmax first.
            rescale_output(o, pending);
            scores(i);
            values(i - 1);
            consumers_arrive(c ^ 1);
            wgmma_wait<1>();  // the scores (O += P V may still run)
            softmax(i);
            wgmma_wait<0>();
            values_done(i - 1);
            probabilities();
        }
        rescale_output(o, pending);
        wgmma_fence();
        values(n - 1);
        wgmma_wait<0>();
        values_done(n - 1);
        // Consumer 1's last arrive on barrier 1 has no issue of consumer 0 left to gate.
        if (c == 0) consumers_sync(0);
    }
    write_rows(o, st, r0, r1, tq, h, M, H, blockIdx.z, n_splits, scale_log2, out, part_o,
               part_ml);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS, 1)
    attention_bf16_d128_wgmma_ws(ATTENTION_PARAMS, const __grid_constant__ KeyMaps maps) {
    attention_wgmma_ws<128>(ATTENTION_ARGS, maps);
}
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1)
    attention_bf16_d64_wgmma_ws(ATTENTION_PARAMS, const __grid_constant__ KeyMaps maps) {
    attention_wgmma_ws<64>(ATTENTION_ARGS, maps);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    attention_bf16_d128_wgmma(ATTENTION_PARAMS) {
    attention_wgmma<128>(ATTENTION_ARGS);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    attention_bf16_d64_wgmma(ATTENTION_PARAMS) {
    attention_wgmma<64>(ATTENTION_ARGS);
}
