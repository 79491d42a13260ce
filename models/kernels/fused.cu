// decide's fused CUDA kernels for the bf16 forward pass (see models/src/forward/fused.rs).
//
// Why our own kernels: with candle's ops a decoder layer was ~40 kernel launches (casts,
// copies, a materialised mask and score matrix), so a short read was bound by launch
// overhead (15 ms for one question on an H200) and a long prefill by the f32 score matrix.
// Four kernels replace most of it:
//   - add_rms_norm: residual add (f32 stream) and the next RMSNorm, one launch;
//   - qkv_rope: bias + rotary embedding + split of the fused QKV projection, one launch;
//   - silu_mul: the SwiGLU gate of the fused gate/up projection, one launch;
//   - attention: flash-style attention (scores never leave registers) over keys that come
//     from several cached prefixes plus this pass's own rows, each query row seeing two
//     bands of key columns (its prefix, and its own segment causally); two block shapes.
// And label_logprobs reads the answer: the log-softmax over the vocabulary at the labels.
//
// Built to PTX by models/build.rs with the toolkit's nvcc when the `cuda` feature is on.

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// ---------------------------------------------------------------------------------------------
// qkv_rope: qkv (M, H + 2*KV heads, D) bf16, the output of h @ [Wq | Wk | Wv].
// Adds the bias (f32, nullable), rotates q and k by the position of each row, and writes
//   q (M, H, D), k (KV, M, D), v (KV, M, D), all bf16.
// interleaved: rotary pairs (2i, 2i+1) (GGUF llama); else (i, i + D/2) (qwen2, NEOX).
// The formulas are candle's rope / rope_i kernels.
extern "C" __global__ void qkv_rope_bf16(const bf16* __restrict__ qkv,
                                         const float* __restrict__ bias,
                                         const float* __restrict__ cos_table,
                                         const float* __restrict__ sin_table,
                                         const uint32_t* __restrict__ positions,
                                         bf16* __restrict__ q, bf16* __restrict__ k,
                                         bf16* __restrict__ v, int M, int H, int KV, int D,
                                         int interleaved) {
    const int half = D / 2;
    const int slots = H + 2 * KV;
    const long total = (long)M * slots * half;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x) {
        const int p = (int)(i % half);
        const long t = i / half;
        const int slot = (int)(t % slots);
        const int r = (int)(t / slots);
        const bf16* src = qkv + ((long)r * slots + slot) * D;
        const int i0 = interleaved ? 2 * p : p;
        const int i1 = interleaved ? 2 * p + 1 : p + half;
        float x0 = __bfloat162float(src[i0]);
        float x1 = __bfloat162float(src[i1]);
        if (bias) {
            x0 += bias[slot * D + i0];
            x1 += bias[slot * D + i1];
        }
        bf16* dst;
        if (slot < H) {
            dst = q + ((long)r * H + slot) * D;
        } else if (slot < H + KV) {
            dst = k + ((long)(slot - H) * M + r) * D;
        } else {
            dst = v + ((long)(slot - H - KV) * M + r) * D;
        }
        if (slot < H + KV) {
            const long at = (long)positions[r] * half + p;
            const float c = cos_table[at], s = sin_table[at];
            const float y0 = x0 * c - x1 * s;
            const float y1 = x0 * s + x1 * c;
            x0 = y0;
            x1 = y1;
        }
        dst[i0] = __float2bfloat16(x0);
        dst[i1] = __float2bfloat16(x1);
    }
}

// ---------------------------------------------------------------------------------------------
// add_rms_norm: the residual stream stays f32 (so a read rounds like the candle-op path);
// blocks hand back bf16 outputs. x_out = x + delta (delta bf16, nullable), and when w is
// given, h = x_out / sqrt(mean(x_out^2) + eps) * w as bf16 (candle's rms_norm formula): the
// next block's input. One block of threads per row.
extern "C" __global__ void add_rms_norm(const float* __restrict__ x, const bf16* __restrict__ delta,
                                        const float* __restrict__ w, float* __restrict__ x_out,
                                        bf16* __restrict__ h, int hidden, float eps) {
    __shared__ float warp_sums[32];
    const long row = blockIdx.x;
    const float* xr = x + row * hidden;
    const bf16* dr = delta ? delta + row * hidden : nullptr;
    float* xo = x_out + row * hidden;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = xr[i] + (dr ? __bfloat162float(dr[i]) : 0.f);
        xo[i] = v;
        ss += v * v;
    }
    if (!w) return;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        if (threadIdx.x == 0) warp_sums[0] = v;
    }
    __syncthreads();
    const float scale = rsqrtf(warp_sums[0] / hidden + eps);
    bf16* hr = h + row * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        hr[i] = __float2bfloat16(xo[i] * scale * w[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// silu_mul: gu (M, 2*I) bf16 = h @ [Wgate | Wup]; out (M, I) = silu(gate) * up, in f32, one
// rounding to bf16. I is even (pairs are processed together).
extern "C" __global__ void silu_mul_bf16(const __nv_bfloat162* __restrict__ gu,
                                         __nv_bfloat162* __restrict__ out, int M, int I) {
    const int pairs = I / 2;
    const long total = (long)M * pairs;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x) {
        const long r = i / pairs;
        const int j = (int)(i % pairs);
        const float2 g = __bfloat1622float2(gu[r * 2 * pairs + j]);
        const float2 u = __bfloat1622float2(gu[r * 2 * pairs + pairs + j]);
        const float a = g.x / (1.f + __expf(-g.x)) * u.x;
        const float b = g.y / (1.f + __expf(-g.y)) * u.y;
        out[i] = __floats2bfloat162_rn(a, b);
    }
}

// ---------------------------------------------------------------------------------------------
// attention: flash-attention-2 style, bf16 tensor cores (mma.sync m16n8k16), f32 softmax.
//
// Queries q (M, H, D) bf16 (row stride q_stride elements). Key columns form one index space:
//   - prefix s covers columns [prefix_start[s], prefix_start[s] + prefix_len[s]); its K and V
//     are (KV, prefix_len[s], D) bf16 at prefix_k[s] / prefix_v[s] (device addresses),
//     prefix_start ascending;
//   - this pass's own rows cover [own_start, own_start + M), K and V (KV, M, D) bf16.
// Row r sees the columns in [bounds[4r], bounds[4r+1]) and [bounds[4r+2], bounds[4r+3]).
// Output (M, H*D) bf16: the layout the output projection reads.
//
// A block is 4 warps over 64 query rows of one head; each warp owns 16 rows. Key tiles of
// BN columns are staged in shared memory with cp.async, two stages deep so the next tile
// loads while this one is computed (rows padded by 8 elements, so the ldmatrix fragment loads
// are conflict-free). The warp's queries are held in registers, or (QS) staged in shared
// memory and reloaded per tile: with 32-key tiles that frees enough registers and shared
// memory for four blocks per multiprocessor instead of three, which the latency-bound loop
// needs (ncu on the H200: ~0.6 eligible warps per scheduler with three). Only tiles that
// meet the block's two column ranges are visited, and only tiles some row of a warp sees in
// part are masked element by element. Dynamic shared memory:
// attention_smem_bytes<D, BN, QS>(), above the default 48 KiB limit (the launcher raises it).
//
// Split over keys (grid.z = n_splits > 1, for few query rows over many keys, e.g. a question
// over a long cached input): split z visits its share of the tiles and writes unnormalised
// f32 partials (part_o (n_splits, M, H, D); part_ml (n_splits, M, H, 2) = running max and
// sum), which attention_combine merges.

#define ATT_BM 64
#define ATT_THREADS 128
#define ATT_SMEM_PREFIXES 64

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// 16 bytes global -> shared without registers; zero-filled when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem),
                 "r"(bytes));
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

__device__ __forceinline__ bool sees(int col, const int* b) {
    return (col >= b[0] && col < b[1]) || (col >= b[2] && col < b[3]);
}

/// Shared memory of one attention block: two stages of (K tile, V tile) of BN keys, and with
/// QS the block's queries.
template <int D, int BN, bool QS>
constexpr int attention_smem_bytes() {
    return (2 * 2 * BN + (QS ? ATT_BM : 0)) * (D + 8) * (int)sizeof(bf16);
}

template <int D, int BN, bool QS>
__device__ __forceinline__ void attention_impl(
    const bf16* __restrict__ q, int q_stride, const bf16* __restrict__ k_own,
    const bf16* __restrict__ v_own, int own_start, int M,
    const unsigned long long* __restrict__ prefix_k,
    const unsigned long long* __restrict__ prefix_v, const int* __restrict__ prefix_start,
    const int* __restrict__ prefix_len, int n_prefix, const int* __restrict__ bounds,
    bf16* __restrict__ out, int H, int KV, float scale_log2, int n_splits,
    float* __restrict__ part_o, float* __restrict__ part_ml) {
    constexpr int STRIDE = D + 8;
    constexpr int KSTEPS = D / 16;  // k-steps of Q K^T
    constexpr int NT = BN / 8;      // n-tiles of a score tile
    constexpr int OT = D / 8;       // n-tiles of the output
    constexpr int CHUNKS = D / 8;   // 16-byte pieces per key row
    constexpr int ROWS_PER_PASS = ATT_THREADS / CHUNKS;
    constexpr int TILE = BN * STRIDE;  // elements of one K or V tile
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* const smem = reinterpret_cast<bf16*>(smem_raw);
    bf16* const q_smem = smem + 4 * TILE;  // QS: (ATT_BM, STRIDE)
    __shared__ int range[4];
    // Each row's bounds, read when a tile is masked element by element.
    __shared__ int s_bounds[ATT_BM * 4];
    // The prefix table, in shared memory when it fits (read for every key row staged).
    __shared__ unsigned long long s_pk[ATT_SMEM_PREFIXES], s_pv[ATT_SMEM_PREFIXES];
    __shared__ int s_pstart[ATT_SMEM_PREFIXES], s_plen[ATT_SMEM_PREFIXES];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int h = blockIdx.y;
    const int kvh = h / (H / KV);
    // Last rows first: in a causal pass they see the most keys, so the longest blocks start
    // first and the short ones fill the tail.
    const int row0 = (gridDim.x - 1 - blockIdx.x) * ATT_BM;
    const int wrow = warp * 16;  // the warp's first row in the block
    // This thread's two rows.
    const int r0 = row0 + wrow + g, r1 = r0 + 8;

    const bool table_in_smem = n_prefix <= ATT_SMEM_PREFIXES;
    if (table_in_smem) {
        for (int i = tid; i < n_prefix; i += ATT_THREADS) {
            s_pk[i] = prefix_k[i];
            s_pv[i] = prefix_v[i];
            s_pstart[i] = prefix_start[i];
            s_plen[i] = prefix_len[i];
        }
    }
    const unsigned long long* pk = table_in_smem ? s_pk : prefix_k;
    const unsigned long long* pv = table_in_smem ? s_pv : prefix_v;
    const int* pstart = table_in_smem ? s_pstart : prefix_start;
    const int* plen = table_in_smem ? s_plen : prefix_len;

    if (tid == 0) {
        range[0] = 0x7fffffff;
        range[1] = 0;
        range[2] = 0x7fffffff;
        range[3] = 0;
    }
    // Rows past M see nothing.
    for (int i = tid; i < ATT_BM * 4; i += ATT_THREADS) {
        s_bounds[i] = row0 + i / 4 < M ? bounds[4 * row0 + i] : 0;
    }
    __syncthreads();
    for (int r = tid; r < ATT_BM; r += ATT_THREADS) {
        const int* b = s_bounds + 4 * r;
        if (b[1] > b[0]) {
            atomicMin(&range[0], b[0]);
            atomicMax(&range[1], b[1]);
        }
        if (b[3] > b[2]) {
            atomicMin(&range[2], b[2]);
            atomicMax(&range[3], b[3]);
        }
    }
    __syncthreads();

    // The columns every row of this warp sees through its first band ([lo0, hi0)) and
    // through its second ([lo1, hi1)): a tile inside either needs no mask. (Rows past M
    // are never written, so they do not count.)
    int lo0 = 0, hi0 = 0x7fffffff, lo1 = 0, hi1 = 0x7fffffff;
    for (int r = wrow; r < wrow + 16 && row0 + r < M; ++r) {
        const int* b = s_bounds + 4 * r;
        lo0 = max(lo0, b[0]);
        hi0 = min(hi0, b[1]);
        lo1 = max(lo1, b[2]);
        hi1 = min(hi1, b[3]);
    }
    const int* const b0 = s_bounds + 4 * (wrow + g);  // row r0's bounds
    const int* const b1 = b0 + 4 * 8;                  // row r1's

    // !QS: the warp's query fragments, held for the whole kernel.
    uint32_t qreg[QS ? 1 : KSTEPS][4];
    if constexpr (!QS) {
        const uint32_t* q0 = reinterpret_cast<const uint32_t*>(q + (long)r0 * q_stride + h * D);
        const uint32_t* q1 = reinterpret_cast<const uint32_t*>(q + (long)r1 * q_stride + h * D);
#pragma unroll
        for (int kd = 0; kd < KSTEPS; ++kd) {
            const int c = (kd * 16 + 2 * tq) / 2;
            qreg[kd][0] = r0 < M ? q0[c] : 0u;
            qreg[kd][1] = r1 < M ? q1[c] : 0u;
            qreg[kd][2] = r0 < M ? q0[c + 4] : 0u;
            qreg[kd][3] = r1 < M ? q1[c + 4] : 0u;
        }
    }

    float o[OT][4];
#pragma unroll
    for (int n = 0; n < OT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    // Running maxima of the raw scores, and sums of exp2((s - max) * scale_log2).
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    // Key tiles to visit: those meeting [range0, range1), then those meeting [range2, range3).
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
    const int na = ta1 - ta0, nb = tb1 - tb0;
    const int tiles = na + nb;
    const int z = blockIdx.z;
    const int it_begin = (int)((long)tiles * z / n_splits);
    const int it_end = (int)((long)tiles * (z + 1) / n_splits);

    const int part = tid % CHUNKS;
    if constexpr (QS) {
        // The block's queries, one commit group ahead of the first key tile.
        if (it_begin < it_end) {
#pragma unroll
            for (int i = 0; i < ATT_BM / ROWS_PER_PASS; ++i) {
                const int j = tid / CHUNKS + i * ROWS_PER_PASS;
                const bool valid = row0 + j < M;
                const bf16* src = q + (long)(valid ? row0 + j : 0) * q_stride + h * D + part * 8;
                cp_async16(q_smem + j * STRIDE + part * 8, src, valid);
            }
            cp_async_commit();
        }
    }

    // Stages tile `it` into buffer `stage` with cp.async (zeros where no source covers a
    // column), as one commit group.
    auto load = [&](int it, int stage) {
        const int col0 = (it < na ? ta0 + it : tb0 + it - na) * BN;
        bf16* const Kt = smem + stage * 2 * TILE;
        bf16* const Vt = Kt + TILE;
        // This thread's rows are increasing columns: find the prefix of the first by binary
        // search (prefixes are sorted and side by side), then step forward from there.
        int s = -1;
        {
            const int first = col0 + tid / CHUNKS;
            int lo = 0, hi = n_prefix - 1;
            while (lo <= hi) {
                const int mid = (lo + hi) >> 1;
                if (pstart[mid] <= first) {
                    s = mid;
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < BN / ROWS_PER_PASS; ++i) {
            const int j = tid / CHUNKS + i * ROWS_PER_PASS;
            const int col = col0 + j;
            const bf16* kp = nullptr;
            const bf16* vp = nullptr;
            if (col >= own_start && col < own_start + M) {
                const long off = ((long)kvh * M + (col - own_start)) * D + part * 8;
                kp = k_own + off;
                vp = v_own + off;
            } else {
                while (s + 1 < n_prefix && pstart[s + 1] <= col) ++s;
                if (s >= 0 && col < pstart[s] + plen[s]) {
                    const long off = ((long)kvh * plen[s] + (col - pstart[s])) * D + part * 8;
                    kp = reinterpret_cast<const bf16*>(pk[s]) + off;
                    vp = reinterpret_cast<const bf16*>(pv[s]) + off;
                }
            }
            cp_async16(Kt + j * STRIDE + part * 8, kp ? kp : k_own, kp != nullptr);
            cp_async16(Vt + j * STRIDE + part * 8, vp ? vp : v_own, vp != nullptr);
        }
        cp_async_commit();
    };

    if (it_begin < it_end) load(it_begin, 0);
    for (int it = it_begin; it < it_end; ++it) {
        const int stage = (it - it_begin) & 1;
        if (it + 1 < it_end) {
            load(it + 1, stage ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16* const Kt = smem + stage * 2 * TILE;
        const bf16* const Vt = Kt + TILE;
        const int col0 = (it < na ? ta0 + it : tb0 + it - na) * BN;

        // Scores S = Q K^T for this warp's 16 rows x BN columns.
        float s[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KSTEPS; ++kd) {
            uint32_t qa[4];
            if constexpr (QS) {
                ldmatrix_x4(qa, q_smem + (wrow + (lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE +
                                    kd * 16 + (lane >> 4) * 8);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) qa[e] = qreg[kd][e];
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, Kt + ((j + (lane >> 4)) * 8 + (lane & 7)) * STRIDE + kd * 16 +
                                   ((lane >> 3) & 1) * 8);
                mma_bf16_16816(s[j], qa, b[0], b[1]);
                mma_bf16_16816(s[j + 1], qa, b[2], b[3]);
            }
        }

        // Mask (unless every row of the warp sees the whole tile), then the online softmax
        // update in base 2 with the scale folded into one FMA per score.
        const int col1 = col0 + BN;
        const bool whole = (col0 >= lo0 && col1 <= hi0) || (col0 >= lo1 && col1 <= hi1);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if (!whole) {
                    const int col = col0 + j * 8 + 2 * tq + e;
                    if (!sees(col, b0)) s[j][e] = -INFINITY;
                    if (!sees(col, b1)) s[j][2 + e] = -INFINITY;
                }
                mx0 = fmaxf(mx0, s[j][e]);
                mx1 = fmaxf(mx1, s[j][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffff, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffff, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        // A row that has seen nothing yet keeps max -inf; subtract 0 then (all p are 0).
        const float base0 = n0 == -INFINITY ? 0.f : n0 * scale_log2;
        const float base1 = n1 == -INFINITY ? 0.f : n1 * scale_log2;
        // Rescale what was summed so far, unless no row of the warp found a new maximum
        // (the usual case once a row has seen a few tiles). A row whose maximum did not
        // change keeps exactly 1: computed, m * scale - n * scale may round to a tiny
        // nonzero (contracted into an FMA), which would make a row's result depend on
        // whether another row of its warp rescaled (on how rows were batched and padded).
        if (!__all_sync(0xffffffff, n0 == m0 && n1 == m1)) {
            const float alpha0 = n0 == m0 ? 1.f : exp2f(m0 * scale_log2 - base0);
            const float alpha1 = n1 == m1 ? 1.f : exp2f(m1 * scale_log2 - base1);
            l0 *= alpha0;
            l1 *= alpha1;
#pragma unroll
            for (int n = 0; n < OT; ++n) {
                o[n][0] *= alpha0;
                o[n][1] *= alpha0;
                o[n][2] *= alpha1;
                o[n][3] *= alpha1;
            }
        }
        m0 = n0;
        m1 = n1;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            s[j][0] = exp2f(fmaf(s[j][0], scale_log2, -base0));
            s[j][1] = exp2f(fmaf(s[j][1], scale_log2, -base0));
            s[j][2] = exp2f(fmaf(s[j][2], scale_log2, -base1));
            s[j][3] = exp2f(fmaf(s[j][3], scale_log2, -base1));
            l0 += s[j][0] + s[j][1];
            l1 += s[j][2] + s[j][3];
        }

        // O += P V, P straight from the score registers (their layout is the A operand's).
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t a[4];
            a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int n = 0; n < OT; n += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * STRIDE +
                                         (n + (lane >> 4)) * 8);
                mma_bf16_16816(o[n], a, b[0], b[1]);
                mma_bf16_16816(o[n + 1], a, b[2], b[3]);
            }
        }
        // Everyone is done with this stage before the next iteration refills it.
        __syncthreads();
    }

    l0 += __shfl_xor_sync(0xffffffff, l0, 1);
    l0 += __shfl_xor_sync(0xffffffff, l0, 2);
    l1 += __shfl_xor_sync(0xffffffff, l1, 1);
    l1 += __shfl_xor_sync(0xffffffff, l1, 2);
    if (n_splits > 1) {
        // Unnormalised partials for attention_combine; maxima in the scaled (base 2) units.
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
                ml[0] = m0 * scale_log2;
                ml[1] = l0;
            }
            if (r1 < M) {
                float* ml = part_ml + (((long)z * M + r1) * H + h) * 2;
                ml[0] = m1 * scale_log2;
                ml[1] = l1;
            }
        }
        return;
    }
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f;
    const float inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
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

// MIN_BLOCKS: blocks per multiprocessor the registers must allow (shared memory allows as
// many). attention_bf16_d{D}: queries in registers, 64-key tiles (three blocks fit on a
// multiprocessor); attention_bf16_d{D}_k32: queries in shared memory, 32-key tiles (fewer
// registers and less shared memory, so four fit).
#define ATTENTION_KERNEL(D, BN, QS, MIN_BLOCKS, SUFFIX)                                         \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS, MIN_BLOCKS)                       \
        attention_bf16_d##D##SUFFIX(                                                            \
            const bf16* __restrict__ q, int q_stride, const bf16* __restrict__ k_own,           \
            const bf16* __restrict__ v_own, int own_start, int M,                               \
            const unsigned long long* __restrict__ prefix_k,                                    \
            const unsigned long long* __restrict__ prefix_v,                                    \
            const int* __restrict__ prefix_start, const int* __restrict__ prefix_len,           \
            int n_prefix, const int* __restrict__ bounds, bf16* __restrict__ out, int H,        \
            int KV, float scale_log2, int n_splits, float* __restrict__ part_o,                 \
            float* __restrict__ part_ml) {                                                      \
        attention_impl<D, BN, QS>(q, q_stride, k_own, v_own, own_start, M, prefix_k, prefix_v,  \
                                  prefix_start, prefix_len, n_prefix, bounds, out, H, KV,       \
                                  scale_log2, n_splits, part_o, part_ml);                       \
    }

ATTENTION_KERNEL(64, 64, false, 3, )
ATTENTION_KERNEL(128, 64, false, 3, )
ATTENTION_KERNEL(64, 32, true, 4, _k32)
ATTENTION_KERNEL(128, 32, true, 4, _k32)

// Merges the n_splits partials of a split attention call into out (M, H*D) bf16.
extern "C" __global__ void attention_combine(const float* __restrict__ part_o,
                                             const float* __restrict__ part_ml,
                                             bf16* __restrict__ out, int n_splits, int M, int H,
                                             int D) {
    const long total = (long)M * H * D;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x) {
        const long rh = i / D;  // row * H + head
        float mx = -INFINITY;
        for (int z = 0; z < n_splits; ++z) {
            const float* ml = part_ml + ((long)z * M * H + rh) * 2;
            if (ml[1] > 0.f) mx = fmaxf(mx, ml[0]);
        }
        float num = 0.f, den = 0.f;
        for (int z = 0; z < n_splits; ++z) {
            const float* ml = part_ml + ((long)z * M * H + rh) * 2;
            if (ml[1] > 0.f) {
                const float w = exp2f(ml[0] - mx);
                num += part_o[(long)z * total + i] * w;
                den += ml[1] * w;
            }
        }
        out[i] = __float2bfloat16(den > 0.f ? num / den : 0.f);
    }
}

// ---------------------------------------------------------------------------------------------
// label_logprobs: logits (R, V) f32. For each of the n flat indices idx[i] = row * V + id,
// out[i] = logits[idx[i]] - log(sum_j exp(logits[row, j])): the log-softmax over the whole
// vocabulary, read at the labels only (one launch instead of a materialised log-softmax and
// a gather). One block per row; the block writes the entries of its row.
extern "C" __global__ void label_logprobs(const float* __restrict__ logits,
                                          const uint32_t* __restrict__ idx,
                                          float* __restrict__ out, int V, int n) {
    __shared__ float red[32];
    __shared__ float lse;
    const long row = blockIdx.x;
    const float* x = logits + row * V;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    if (warp == 0) {
        float v = lane < warps ? red[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    mx = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(x[j] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = 0.f;
        for (int w = 0; w < warps; ++w) v += red[w];
        lse = mx + logf(v);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if ((long)(idx[i] / (uint32_t)V) == row) out[i] = logits[idx[i]] - lse;
    }
}
