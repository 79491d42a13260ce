// What decide's two attention kernels share: the mma.sync one in fused.cu (any GPU from
// sm_80) and the wgmma one in attention_sm90.cu (Hopper). Both read the same arguments (see
// the comment above attention_impl in fused.cu), keep the same per-thread score and output
// fragments (rows g and g + 8 of the warp's 16, columns 2 tq and 2 tq + 1 of each 8-column
// tile: the accumulator layout of mma.sync m16n8 and of wgmma m64nN alike), and differ only
// in how tiles are staged and multiplied.

#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// Prefix tables up to this long are copied to shared memory (read for every key row staged).
#define ATT_SMEM_PREFIXES 64

// The most cached prefixes the warp-specialized kernel reads through tensor maps
// (`MAPPED_PREFIXES` in models/src/kernels/tensor_maps.rs).
#define ATT_MAPPED_PREFIXES 4

// 16 bytes global -> shared without registers; zero-filled when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem),
                 "r"(bytes));
}

// 16 bytes global -> shared (a shared-space address), every byte from the source.
__device__ __forceinline__ void cp_async16_shared(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Whether a row with bounds b (two bands [x, y) and [z, w)) sees column col.
__device__ __forceinline__ bool sees(int col, int4 b) {
    return (col >= b.x && col < b.y) || (col >= b.z && col < b.w);
}

// 2^x on the special-function unit, subnormal results flushed to zero (exp2f adds a range
// check and two multiplies per call to keep them; a probability below 2^-126 of the row's
// largest changes no sum).
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// KeyTable::source_of for columns in the pass's own rows, and for columns in more than one
// source (or none).
#define KEYS_OWN -1
#define KEYS_MIXED -2

// Where the keys and values of a column lie: a cached prefix (address tables, sorted by first
// column, side by side) or the pass's own rows.
struct KeyTable {
    const unsigned long long* pk;
    const unsigned long long* pv;
    const int* pstart;
    const int* plen;
    // Per prefix, the rows from one kv head's keys to the next's: its length, or more where
    // the prefix is a view of a longer cache (a prompt's rows cut from the pass that read
    // them, or a run of blocks cut from a longer one, shared without a copy).
    const int* pstride;
    int n_prefix;
    const bf16* k_own;
    const bf16* v_own;
    // The pass's own keys and values cover columns [own_start, own_start + own_rows).
    int own_start, own_rows, kvh;

    // The last prefix starting at or before col (-1: none), by binary search.
    __device__ __forceinline__ int prefix_at(int col) const {
        int s = -1, lo = 0, hi = n_prefix - 1;
        while (lo <= hi) {
            const int mid = (lo + hi) >> 1;
            if (pstart[mid] <= col) {
                s = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return s;
    }

    // Which one source holds all of columns [col0, col0 + n) (the usual case: a tile inside
    // one prefix or inside the own rows): KEYS_OWN, a prefix's index, or KEYS_MIXED.
    __device__ __forceinline__ int source_of(int col0, int n) const {
        if (col0 >= own_start && col0 + n <= own_start + own_rows) return KEYS_OWN;
        const int s = prefix_at(col0);
        return s >= 0 && col0 + n <= pstart[s] + plen[s] ? s : KEYS_MIXED;
    }

    // For columns from col0 in `source` (not KEYS_MIXED): k and v point at piece `part` of
    // column col0's key and value rows, and column col0 + j's are j * D elements further.
    __device__ __forceinline__ void span_in(int source, int col0, int part, const bf16*& k,
                                            const bf16*& v, int D) const {
        if (source == KEYS_OWN) {
            const long off = ((long)kvh * own_rows + (col0 - own_start)) * D + part * 8;
            k = k_own + off;
            v = v_own + off;
        } else {
            const int s = source;
            const long off = ((long)kvh * pstride[s] + (col0 - pstart[s])) * D + part * 8;
            k = reinterpret_cast<const bf16*>(pk[s]) + off;
            v = reinterpret_cast<const bf16*>(pv[s]) + off;
        }
    }

    // Whether columns [col0, col0 + n) all lie in one source; then span_in's k and v.
    __device__ __forceinline__ bool span(int col0, int n, int part, const bf16*& k,
                                         const bf16*& v, int D) const {
        const int source = source_of(col0, n);
        if (source == KEYS_MIXED) return false;
        span_in(source, col0, part, k, v, D);
        return true;
    }

    // The 16-byte piece `part` of column col's key and value rows (null when no source covers
    // the column). s is prefix_at of an earlier column; it is stepped forward, so a thread
    // asking for increasing columns searches once.
    __device__ __forceinline__ void row(int col, int part, int& s, const bf16*& kp,
                                        const bf16*& vp, int D) const {
        kp = vp = nullptr;
        if (col >= own_start && col < own_start + own_rows) {
            const long off = ((long)kvh * own_rows + (col - own_start)) * D + part * 8;
            kp = k_own + off;
            vp = v_own + off;
            return;
        }
        while (s + 1 < n_prefix && pstart[s + 1] <= col) ++s;
        if (s >= 0 && col < pstart[s] + plen[s]) {
            const long off = ((long)kvh * pstride[s] + (col - pstart[s])) * D + part * 8;
            kp = reinterpret_cast<const bf16*>(pk[s]) + off;
            vp = reinterpret_cast<const bf16*>(pv[s]) + off;
        }
    }
};

// Calls put(j, k, v) with the addresses of piece `part` of the key and value rows of tile
// columns col0 + j, for j = first + i * step, i < COUNT (k, v null where no source covers the
// column): one lookup for a tile inside one source, else a walk along the prefixes.
template <int COUNT, typename Put>
__device__ __forceinline__ void for_key_rows(const KeyTable& keys, int col0, int n, int first,
                                             int step, int part, int D, Put put) {
    const bf16 *k, *v;
    if (keys.span(col0, n, part, k, v, D)) {
#pragma unroll
        for (int i = 0; i < COUNT; ++i) {
            const int j = first + i * step;
            put(j, k + (long)j * D, v + (long)j * D);
        }
        return;
    }
    int s = keys.prefix_at(col0 + first);
#pragma unroll
    for (int i = 0; i < COUNT; ++i) {
        const int j = first + i * step;
        keys.row(col0 + j, part, s, k, v, D);
        put(j, k, v);
    }
}

// The prefix tables, copied to shared memory when they fit (the caller syncs before use).
struct SharedPrefixTable {
    unsigned long long pk[ATT_SMEM_PREFIXES], pv[ATT_SMEM_PREFIXES];
    int pstart[ATT_SMEM_PREFIXES], plen[ATT_SMEM_PREFIXES], pstride[ATT_SMEM_PREFIXES];
};

__device__ __forceinline__ KeyTable stage_key_table(
    SharedPrefixTable& t, const unsigned long long* __restrict__ prefix_k,
    const unsigned long long* __restrict__ prefix_v, const int* __restrict__ prefix_start,
    const int* __restrict__ prefix_len, int n_prefix, const bf16* k_own, const bf16* v_own,
    int own_start, int own_rows, int kvh) {
    // prefix_len holds the lengths, then the head strides (KeyTable::pstride).
    KeyTable kt{prefix_k, prefix_v, prefix_start, prefix_len, prefix_len + n_prefix, n_prefix,
                k_own, v_own, own_start, own_rows, kvh};
    if (n_prefix <= ATT_SMEM_PREFIXES) {
        for (int i = threadIdx.x; i < n_prefix; i += blockDim.x) {
            t.pk[i] = prefix_k[i];
            t.pv[i] = prefix_v[i];
            t.pstart[i] = prefix_start[i];
            t.plen[i] = prefix_len[i];
            t.pstride[i] = prefix_len[n_prefix + i];
        }
        kt.pk = t.pk;
        kt.pv = t.pv;
        kt.pstart = t.pstart;
        kt.plen = t.plen;
        kt.pstride = t.pstride;
    }
    return kt;
}

// The most bytes of K and V that the heads running side by side in the longest-first order
// below should read: FlashAttention-3's SingleTileLPTScheduler's budget, 32 MiB of the
// H200's 50 MiB L2.
#define ATT_L2_BUDGET (32l << 20)

// The query rows (the first, row0) and the head a block of BM rows takes, from the launch's
// grid, of one of two shapes (the launcher's choice, kernels.rs `attention`):
// - (row blocks, H, splits): head blockIdx.y, and within a head the last rows first. In a
//   causal pass they see the most keys, so within a head the longest blocks start first.
//   But every head's short blocks start before the next head's long ones, so the last wave
//   of a prefill chunk holds long blocks beside idle multiprocessors.
// - (row blocks x H, 1, splits): longest first across heads, as FlashAttention-3's
//   SingleTileLPTScheduler orders them: heads in sections whose kv heads' K and V fit in
//   ATT_L2_BUDGET (`keys`: the key columns of the pass), and within a section the last row
//   block of every head, then the one before, and so on.
// Which block computes what changes, not how: the results are the same bit for bit.
template <int BM>
__device__ __forceinline__ void block_place(int H, int KV, int D, int keys, int& row0, int& h) {
    if (gridDim.y == H) {
        h = blockIdx.y;
        row0 = (gridDim.x - 1 - blockIdx.x) * BM;
        return;
    }
    const int blocks = gridDim.x / H;
    const long kv_bytes = (long)max(keys, 1) * D * 2 * (long)sizeof(bf16);
    const int fit = kv_bytes >= ATT_L2_BUDGET ? 1 : 1 << (31 - __clz((int)(ATT_L2_BUDGET / kv_bytes)));
    const int section = min(H, fit * (H / KV));
    const int s = blockIdx.x / (section * blocks);
    const int in_section = blockIdx.x - s * section * blocks;
    const int heads_here = min(section, H - s * section);
    const int b = in_section / heads_here;
    h = s * section + in_section - b * heads_here;
    row0 = (blocks - 1 - b) * BM;
}

// The key tiles (of BN columns) a block of BM rows visits: those meeting the union of its
// rows' first bands, then those meeting the union of their second bands, as one list.
// Also stages the rows' bounds in shared memory (rows past M see nothing). Syncs.
struct BlockTiles {
    int ta0, na, tb0, nb;

    __device__ __forceinline__ int count() const { return na + nb; }
    // The tiles [begin, end) that split z of n_splits visits.
    __device__ __forceinline__ void share(int z, int n_splits, int& begin, int& end) const {
        begin = (int)((long)count() * z / n_splits);
        end = (int)((long)count() * (z + 1) / n_splits);
    }
    __device__ __forceinline__ int col0(int it, int BN) const {
        return (it < na ? ta0 + it : tb0 + it - na) * BN;
    }
};

template <int BM>
__device__ __forceinline__ BlockTiles block_tiles(int* s_bounds, int* range,
                                                      const int* __restrict__ bounds, int row0,
                                                      int M, int BN) {
    const int tid = threadIdx.x;
    if (tid == 0) {
        range[0] = 0x7fffffff;
        range[1] = 0;
        range[2] = 0x7fffffff;
        range[3] = 0;
    }
    for (int i = tid; i < BM * 4; i += blockDim.x) {
        s_bounds[i] = row0 + i / 4 < M ? bounds[4 * row0 + i] : 0;
    }
    __syncthreads();
    // The union of the rows' bands: each thread's rows, then each warp's (a reduction in
    // registers), then one atomic per warp and bound. (One atomic per row contended for the
    // same four words: 4 x 128 serialized atomics at the start of every block.) Every warp
    // takes part, whole (blockDim.x is a multiple of 32); rows past BM add nothing.
    int lo0 = 0x7fffffff, hi0 = 0, lo1 = 0x7fffffff, hi1 = 0;
    for (int r = tid; r < BM; r += blockDim.x) {
        const int* b = s_bounds + 4 * r;
        if (b[1] > b[0]) {
            lo0 = min(lo0, b[0]);
            hi0 = max(hi0, b[1]);
        }
        if (b[3] > b[2]) {
            lo1 = min(lo1, b[2]);
            hi1 = max(hi1, b[3]);
        }
    }
    lo0 = __reduce_min_sync(0xffffffff, lo0);
    hi0 = __reduce_max_sync(0xffffffff, hi0);
    lo1 = __reduce_min_sync(0xffffffff, lo1);
    hi1 = __reduce_max_sync(0xffffffff, hi1);
    if ((tid & 31) == 0 && tid < BM) {
        atomicMin(&range[0], lo0);
        atomicMax(&range[1], hi0);
        atomicMin(&range[2], lo1);
        atomicMax(&range[3], hi1);
    }
    __syncthreads();
    int ta0 = 0, ta1 = 0, tb0 = 0, tb1 = 0;
    if (range[1] > range[0]) {
        ta0 = range[0] / BN;
        ta1 = (range[1] + BN - 1) / BN;
    }
    if (range[3] > range[2]) {
        tb0 = range[2] / BN;
        tb1 = (range[3] + BN - 1) / BN;
        if (ta1 > ta0 && tb0 <= ta1 && ta0 <= tb1) {
            // The bands share or touch a tile: visit their union once.
            ta0 = min(ta0, tb0);
            ta1 = max(ta1, tb1);
            tb0 = tb1 = 0;
        }
    }
    return BlockTiles{ta0, ta1 - ta0, tb0, tb1 - tb0};
}

// Row r's bounds (of the block's, staged by block_tiles).
__device__ __forceinline__ int4 row_bounds(const int* s_bounds, int r) {
    return *reinterpret_cast<const int4*>(s_bounds + 4 * r);
}

// The columns every row of a warp's 16 (from s_bounds row wrow) sees through its first band
// ([lo0, hi0)) and through its second ([lo1, hi1)): a tile inside either needs no mask.
// Rows past M are never written, so they do not count.
struct WarpBands {
    int lo0, hi0, lo1, hi1;

    __device__ __forceinline__ bool whole(int col0, int col1) const {
        return (col0 >= lo0 && col1 <= hi0) || (col0 >= lo1 && col1 <= hi1);
    }
};

__device__ __forceinline__ WarpBands warp_bands(const int* s_bounds, int wrow, int row0, int M) {
    WarpBands w{0, 0x7fffffff, 0, 0x7fffffff};
    for (int r = wrow; r < wrow + 16 && row0 + r < M; ++r) {
        const int* b = s_bounds + 4 * r;
        w.lo0 = max(w.lo0, b[0]);
        w.hi0 = min(w.hi0, b[1]);
        w.lo1 = max(w.lo1, b[2]);
        w.hi1 = min(w.hi1, b[3]);
    }
    return w;
}

// A thread's online-softmax state for its two rows: running maxima of the raw scores, and
// sums of exp2((s - max) * scale_log2).
struct RowState {
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
};

// How the output fragments must be rescaled after a softmax step: by alpha0 (row g) and
// alpha1 (row g + 8), unless no row of the warp found a new maximum (`needed` false, the
// usual case once a row has seen a few tiles).
struct Rescale {
    bool needed;
    float alpha0, alpha1;
};

// Multiplies the output fragments o (OT tiles) by r's factors, if needed.
template <int OT>
__device__ __forceinline__ void rescale_output(float (&o)[OT][4], Rescale r) {
    if (!r.needed) return;
#pragma unroll
    for (int n = 0; n < OT; ++n) {
        o[n][0] *= r.alpha0;
        o[n][1] *= r.alpha0;
        o[n][2] *= r.alpha1;
        o[n][3] *= r.alpha1;
    }
}

// Masks a tile of scores s (NT 8-column tiles from col0; unless `whole`), updates the running
// maxima and sums, and turns s into the unnormalised probabilities, in base 2 with the scale
// folded into one FMA per score. Returns how the output accumulated so far must be rescaled
// before these probabilities are added to it (the Hopper kernel defers that until its previous
// tile's O += P V has finished). b0, b1: the bounds of the thread's two rows.
template <int NT>
__device__ __forceinline__ Rescale softmax_scores(float (&s)[NT][4], RowState& st, bool whole,
                                                  int col0, int4 b0, int4 b1, int tq,
                                                  float scale_log2) {
    if (!whole) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = col0 + j * 8 + 2 * tq + e;
                if (!sees(col, b0)) s[j][e] = -INFINITY;
                if (!sees(col, b1)) s[j][2 + e] = -INFINITY;
            }
        }
    }
    // Two chains per row, so the maxima do not wait on one another NT * 2 times.
    float mx0 = -INFINITY, mx1 = -INFINITY, my0 = -INFINITY, my1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        mx0 = fmaxf(mx0, s[j][0]);
        my0 = fmaxf(my0, s[j][1]);
        mx1 = fmaxf(mx1, s[j][2]);
        my1 = fmaxf(my1, s[j][3]);
    }
    mx0 = fmaxf(mx0, my0);
    mx1 = fmaxf(mx1, my1);
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 2));
    const float n0 = fmaxf(st.m0, mx0), n1 = fmaxf(st.m1, mx1);
    // A row that has seen nothing yet keeps max -inf; subtract 0 then (all p are 0).
    const float base0 = n0 == -INFINITY ? 0.f : n0 * scale_log2;
    const float base1 = n1 == -INFINITY ? 0.f : n1 * scale_log2;
    // Rescale what was summed so far, unless no row of the warp found a new maximum (the
    // usual case once a row has seen a few tiles). A row whose maximum did not change keeps
    // exactly 1: computed, m * scale - n * scale may round to a tiny nonzero (contracted into
    // an FMA), which would make a row's result depend on whether another row of its warp
    // rescaled (on how rows were batched and padded).
    Rescale r{!__all_sync(0xffffffff, n0 == st.m0 && n1 == st.m1), 1.f, 1.f};
    if (r.needed) {
        r.alpha0 = n0 == st.m0 ? 1.f : exp2_ftz(st.m0 * scale_log2 - base0);
        r.alpha1 = n1 == st.m1 ? 1.f : exp2_ftz(st.m1 * scale_log2 - base1);
        st.l0 *= r.alpha0;
        st.l1 *= r.alpha1;
    }
    st.m0 = n0;
    st.m1 = n1;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        s[j][0] = exp2_ftz(fmaf(s[j][0], scale_log2, -base0));
        s[j][1] = exp2_ftz(fmaf(s[j][1], scale_log2, -base0));
        s[j][2] = exp2_ftz(fmaf(s[j][2], scale_log2, -base1));
        s[j][3] = exp2_ftz(fmaf(s[j][3], scale_log2, -base1));
        st.l0 += s[j][0] + s[j][1];
        st.l1 += s[j][2] + s[j][3];
    }
    return r;
}

// softmax_scores, then the rescale of the output fragments o (OT tiles) at once.
template <int NT, int OT>
__device__ __forceinline__ void softmax_update(float (&s)[NT][4], float (&o)[OT][4],
                                               RowState& st, bool whole, int col0, int4 b0,
                                               int4 b1, int tq, float scale_log2) {
    rescale_output(o, softmax_scores(s, st, whole, col0, b0, b1, tq, scale_log2));
}

// The A fragment (16 keys) of P = s for k-step kk: the score layout is the A operand's.
template <int NT>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[NT][4], int kk) {
    a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Writes a thread's two rows r0, r1 of head h: normalised bf16 into out (M, H*D), or with
// n_splits > 1 the unnormalised f32 partials of split z for attention_combine (maxima in the
// scaled, base 2, units).
template <int OT>
__device__ __forceinline__ void write_rows(const float (&o)[OT][4], RowState st, int r0, int r1,
                                           int tq, int h, int M, int H, int z, int n_splits,
                                           float scale_log2, bf16* __restrict__ out,
                                           float* __restrict__ part_o,
                                           float* __restrict__ part_ml) {
    constexpr int D = OT * 8;
    st.l0 += __shfl_xor_sync(0xffffffff, st.l0, 1);
    st.l0 += __shfl_xor_sync(0xffffffff, st.l0, 2);
    st.l1 += __shfl_xor_sync(0xffffffff, st.l1, 1);
    st.l1 += __shfl_xor_sync(0xffffffff, st.l1, 2);
    if (n_splits > 1) {
#pragma unroll
        for (int n = 0; n < OT; ++n) {
            const int d = n * 8 + 2 * tq;
            if (r0 < M) {
                float* po = part_o + (((long)z * M + r0) * H + h) * D + d;
                po[0] = o[n][0];
                po[1] = o[n][1];
            }
            if (r1 < M) {
                float* po = part_o + (((long)z * M + r1) * H + h) * D + d;
                po[0] = o[n][2];
                po[1] = o[n][3];
            }
        }
        if (tq == 0) {
            if (r0 < M) {
                float* ml = part_ml + (((long)z * M + r0) * H + h) * 2;
                ml[0] = st.m0 * scale_log2;
                ml[1] = st.l0;
            }
            if (r1 < M) {
                float* ml = part_ml + (((long)z * M + r1) * H + h) * 2;
                ml[0] = st.m1 * scale_log2;
                ml[1] = st.l1;
            }
        }
        return;
    }
    const float inv0 = st.l0 > 0.f ? 1.f / st.l0 : 0.f;
    const float inv1 = st.l1 > 0.f ? 1.f / st.l1 : 0.f;
    const long out_stride = (long)H * D;
#pragma unroll
    for (int n = 0; n < OT; ++n) {
        const int d = h * D + n * 8 + 2 * tq;
        if (r0 < M) {
            *reinterpret_cast<uint32_t*>(out + r0 * out_stride + d) =
                pack_bf16(o[n][0] * inv0, o[n][1] * inv0);
        }
        if (r1 < M) {
            *reinterpret_cast<uint32_t*>(out + r1 * out_stride + d) =
                pack_bf16(o[n][2] * inv1, o[n][3] * inv1);
        }
    }
}

// The kernel arguments both attention kernels take (see fused.cu).
#define ATTENTION_PARAMS                                                                      \
    const bf16 *__restrict__ q, int q_stride, const bf16 *__restrict__ k_own,                 \
        const bf16 *__restrict__ v_own, int own_start, int own_rows, int M,                   \
        const unsigned long long *__restrict__ prefix_k,                                      \
        const unsigned long long *__restrict__ prefix_v, const int *__restrict__ prefix_start, \
        const int *__restrict__ prefix_len, int n_prefix, const int *__restrict__ bounds,     \
        bf16 *__restrict__ out, int H, int KV, float scale_log2, int n_splits,                \
        float *__restrict__ part_o, float *__restrict__ part_ml
#define ATTENTION_ARGS                                                                      \
    q, q_stride, k_own, v_own, own_start, own_rows, M, prefix_k, prefix_v, prefix_start,   \
        prefix_len, n_prefix, bounds, out, H, KV, scale_log2, n_splits, part_o, part_ml
