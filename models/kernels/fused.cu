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

#include "attention_common.cuh"

// ---------------------------------------------------------------------------------------------
// qkv_rope: qkv (M, H + 2*KV heads, D) bf16, the output of h @ [Wq | Wk | Wv].
// Adds the bias (f32, nullable), rotates q and k by the position of each row, and writes
//   q (M, H, D), k (KV, M, D), v (KV, M, D), all bf16.
// interleaved: rotary pairs (2i, 2i+1) (GGUF llama); else (i, i + R/2) (qwen2, NEOX).
// Only a head's first R elements rotate (R = D but for partial rotary, Phi-4-mini's 0.75);
// the rest pass through. The formulas are candle's rope / rope_i kernels (the tables are
// (positions, R/2)).
// Where row r's head `slot` of the fused projection goes: q (M, H, D), else k or v
// (KV, M, D).
__device__ __forceinline__ bf16* qkv_destination(bf16* q, bf16* k, bf16* v, long r, int slot,
                                                 int M, int H, int KV, int D) {
    if (slot < H) return q + (r * H + slot) * D;
    if (slot < H + KV) return k + ((long)(slot - H) * M + r) * D;
    return v + ((long)(slot - H - KV) * M + r) * D;
}

extern "C" __global__ void qkv_rope_bf16(const bf16* __restrict__ qkv,
                                         const float* __restrict__ bias,
                                         const float* __restrict__ cos_table,
                                         const float* __restrict__ sin_table,
                                         const uint32_t* __restrict__ positions,
                                         bf16* __restrict__ q, bf16* __restrict__ k,
                                         bf16* __restrict__ v, int M, int H, int KV, int D,
                                         int interleaved, int R) {
    const int half = D / 2, rotary_half = R / 2;
    const int slots = H + 2 * KV;
    const long total = (long)M * slots * half;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x) {
        const int p = (int)(i % half);
        const long t = i / half;
        const int slot = (int)(t % slots);
        const int r = (int)(t / slots);
        const bf16* src = qkv + ((long)r * slots + slot) * D;
        // Pairs past R/2 are the elements [R, D), two by two, passed through.
        const bool rotary_pair = p < rotary_half;
        const int i0 = interleaved || !rotary_pair ? 2 * p : p;
        const int i1 = interleaved || !rotary_pair ? 2 * p + 1 : p + rotary_half;
        float x0 = __bfloat162float(src[i0]);
        float x1 = __bfloat162float(src[i1]);
        if (bias) {
            x0 += bias[slot * D + i0];
            x1 += bias[slot * D + i1];
        }
        bf16* dst = qkv_destination(q, k, v, r, slot, M, H, KV, D);
        if (slot < H + KV && rotary_pair) {
            const long at = (long)positions[r] * rotary_half + p;
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

// Token rows a thread of qkv_rope_bf16x2 handles per step, its loads for all of them issued
// before any result is computed: with one row per thread each thread had two 4-byte loads
// in flight (layer_bench on 8192 rows, one run: 0.0485 -> 0.0417 ms; 2624 rows 0.0254 ->
// 0.0170). The same for silu_mul_bf16x8 and loads-first in add_rms_norm_v4 measured no
// gain in that run and were left as they were. The launcher's grid rows are
// ceil(M / ROW_GROUP).
#define ROW_GROUP 4

// qkv_rope_bf16x2: qkv_rope for D % 4 == 0 and R = D, two rotary pairs per thread with 4- and 8-byte
// accesses, ROW_GROUP token rows per grid row (rows beyond the grid's height in steps of
// it). The scalar kernel above spends its time on 64-bit index division and 2-byte
// accesses: 0.077 ms for 8192 rows of q15 on an H200, ~870 GB/s (layer_bench). Same
// formulas, same results.
extern "C" __global__ void qkv_rope_bf16x2(const bf16* __restrict__ qkv,
                                           const float* __restrict__ bias,
                                           const float* __restrict__ cos_table,
                                           const float* __restrict__ sin_table,
                                           const uint32_t* __restrict__ positions,
                                           bf16* __restrict__ q, bf16* __restrict__ k,
                                           bf16* __restrict__ v, int M, int H, int KV, int D,
                                           int interleaved) {
    const int half = D / 2;
    const int quarter = D / 4;
    const int slots = H + 2 * KV;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= slots * quarter) return;
    const int slot = j / quarter;
    const int p = (j % quarter) * 2;  // this thread's rotary pairs: p and p + 1
    const bool rotate = slot < H + KV;
    // Element indices of pair p's two values (a) and pair p + 1's (b).
    const int a0 = interleaved ? 2 * p : p, a1 = interleaved ? 2 * p + 1 : p + half;
    const int b0 = interleaved ? 2 * p + 2 : p + 1, b1 = interleaved ? 2 * p + 3 : p + 1 + half;
    float4 bs = make_float4(0.f, 0.f, 0.f, 0.f);  // the bias at a0, a1, b0, b1
    if (bias) {
        const float* b = bias + slot * D;
        bs = make_float4(b[a0], b[a1], b[b0], b[b1]);
    }
    for (long r0 = (long)blockIdx.y * ROW_GROUP; r0 < M; r0 += (long)gridDim.y * ROW_GROUP) {
        // .x: pair p, .y: pair p + 1; x0 the first value of each pair. Rows past M load row
        // r0 again and write nothing.
        float2 x0[ROW_GROUP], x1[ROW_GROUP], c[ROW_GROUP], sn[ROW_GROUP];
#pragma unroll
        for (int g = 0; g < ROW_GROUP; ++g) {
            const long r = r0 + g < M ? r0 + g : r0;
            const bf16* src = qkv + (r * slots + slot) * D;
            if (interleaved) {
                const uint2 raw = *reinterpret_cast<const uint2*>(src + 2 * p);
                const float2 lo =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
                const float2 hi =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
                x0[g] = make_float2(lo.x, hi.x);
                x1[g] = make_float2(lo.y, hi.y);
            } else {
                x0[g] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + p));
                x1[g] = __bfloat1622float2(
                    *reinterpret_cast<const __nv_bfloat162*>(src + p + half));
            }
            if (rotate) {
                const long at = (long)positions[r] * half + p;
                c[g] = *reinterpret_cast<const float2*>(cos_table + at);
                sn[g] = *reinterpret_cast<const float2*>(sin_table + at);
            }
        }
#pragma unroll
        for (int g = 0; g < ROW_GROUP; ++g) {
            const long r = r0 + g;
            if (r >= M) break;
            float2 y0 = x0[g], y1 = x1[g];
            if (bias) {
                y0.x += bs.x;
                y1.x += bs.y;
                y0.y += bs.z;
                y1.y += bs.w;
            }
            if (rotate) {
                const float2 cc = c[g], ss = sn[g];
                const float2 z0 = make_float2(y0.x * cc.x - y1.x * ss.x, y0.y * cc.y - y1.y * ss.y);
                const float2 z1 = make_float2(y0.x * ss.x + y1.x * cc.x, y0.y * ss.y + y1.y * cc.y);
                y0 = z0;
                y1 = z1;
            }
            bf16* dst = qkv_destination(q, k, v, r, slot, M, H, KV, D);
            if (interleaved) {
                __nv_bfloat162 lo = __floats2bfloat162_rn(y0.x, y1.x);
                __nv_bfloat162 hi = __floats2bfloat162_rn(y0.y, y1.y);
                uint2 raw;
                raw.x = *reinterpret_cast<uint32_t*>(&lo);
                raw.y = *reinterpret_cast<uint32_t*>(&hi);
                *reinterpret_cast<uint2*>(dst + 2 * p) = raw;
            } else {
                *reinterpret_cast<__nv_bfloat162*>(dst + p) = __floats2bfloat162_rn(y0.x, y0.y);
                *reinterpret_cast<__nv_bfloat162*>(dst + p + half) =
                    __floats2bfloat162_rn(y1.x, y1.y);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// qk_norm: Qwen3's per-head RMSNorm of the queries and keys, in place in the fused QKV
// projection's output (M, H + 2*KV heads, D) bf16, before qkv_rope rotates them: head slot s
// < H + KV of row r becomes y / sqrt(mean(y^2) + eps) * w, y = qkv[r, s] (+ the slot's bias,
// f32, nullable: the bias comes before the norm, so qkv_rope is then given v's alone), w =
// q_w for query heads and k_w for key heads (f32, (D)); candle's rms_norm formula, f32
// inside. One warp per (row, head), D <= 256 (8 values a lane).
extern "C" __global__ void qk_norm_bf16(bf16* __restrict__ qkv, const float* __restrict__ bias,
                                        const float* __restrict__ q_w,
                                        const float* __restrict__ k_w, int M, int H, int KV,
                                        int D, float eps) {
    const int slots = H + 2 * KV, normed = H + KV;
    const int lane = threadIdx.x & 31;
    const long warps = ((long)gridDim.x * blockDim.x) >> 5;
    for (long item = (blockIdx.x * (long)blockDim.x + threadIdx.x) >> 5; item < (long)M * normed;
         item += warps) {
        const int r = (int)(item / normed), s = (int)(item % normed);
        bf16* x = qkv + ((long)r * slots + s) * D;
        const float* w = s < H ? q_w : k_w;
        const float* b = bias ? bias + (long)s * D : nullptr;
        float y[8];
        float squares = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int i = lane + 32 * j;
            y[j] = 0.f;
            if (i < D) {
                y[j] = __bfloat162float(x[i]) + (b ? b[i] : 0.f);
                squares += y[j] * y[j];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
        const float scale = 1.f / sqrtf(squares / D + eps);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int i = lane + 32 * j;
            if (i < D) x[i] = __float2bfloat16(y[j] * scale * w[i]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// add_rms_norm: the residual stream stays f32 (so a read rounds like the candle-op path);
// blocks hand back bf16 outputs. x_out = x + delta (delta bf16, nullable), and when w is
// given, h = x_out / sqrt(mean(x_out^2) + eps) * w as bf16 (candle's rms_norm formula): the
// next block's input. x_out is nullable too: a stream the projection's GEMM already added
// to is only normed. One block of threads per row.
extern "C" __global__ void add_rms_norm(const float* __restrict__ x, const bf16* __restrict__ delta,
                                        const float* __restrict__ w, float* __restrict__ x_out,
                                        bf16* __restrict__ h, int hidden, float eps) {
    __shared__ float warp_sums[32];
    const long row = blockIdx.x;
    const float* xr = x + row * hidden;
    const bf16* dr = delta ? delta + row * hidden : nullptr;
    float* xo = x_out ? x_out + row * hidden : nullptr;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = xr[i] + (dr ? __bfloat162float(dr[i]) : 0.f);
        if (xo) xo[i] = v;
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
        const float v = xr[i] + (dr ? __bfloat162float(dr[i]) : 0.f);
        hr[i] = __float2bfloat16(v * scale * w[i]);
    }
}

// add_rms_norm_v4: add_rms_norm for hidden % 4 == 0 and at most 4 float4 per thread (the
// launcher sizes the block), the row held in registers between the sum and the norm, 16-byte
// accesses. The scalar kernel above runs at ~2 TB/s on an H200 (layer_bench).
#define NORM_VECS 4
extern "C" __global__ void add_rms_norm_v4(const float4* __restrict__ x, const uint2* __restrict__ delta,
                                           const float4* __restrict__ w, float4* __restrict__ x_out,
                                           uint2* __restrict__ h, int hidden4, float eps) {
    __shared__ float warp_sums[32];
    const long row = blockIdx.x;
    float4 vals[NORM_VECS];
    float ss = 0.f;
#pragma unroll
    for (int n = 0; n < NORM_VECS; ++n) {
        const int i = threadIdx.x + n * blockDim.x;
        if (i >= hidden4) break;
        float4 a = x[row * hidden4 + i];
        if (delta) {
            const uint2 raw = delta[row * hidden4 + i];
            const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
            const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
            a.x += lo.x;
            a.y += lo.y;
            a.z += hi.x;
            a.w += hi.y;
        }
        vals[n] = a;
        if (x_out) x_out[row * hidden4 + i] = a;
        ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
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
    const float scale = rsqrtf(warp_sums[0] / (hidden4 * 4) + eps);
#pragma unroll
    for (int n = 0; n < NORM_VECS; ++n) {
        const int i = threadIdx.x + n * blockDim.x;
        if (i >= hidden4) break;
        const float4 a = vals[n];
        const float4 wv = w[i];
        __nv_bfloat162 lo = __floats2bfloat162_rn(a.x * scale * wv.x, a.y * scale * wv.y);
        __nv_bfloat162 hi = __floats2bfloat162_rn(a.z * scale * wv.z, a.w * scale * wv.w);
        uint2 raw;
        raw.x = *reinterpret_cast<uint32_t*>(&lo);
        raw.y = *reinterpret_cast<uint32_t*>(&hi);
        h[row * hidden4 + i] = raw;
    }
}

// ---------------------------------------------------------------------------------------------
// silu_mul: gu (M, 2*I) bf16 = h @ W, its columns gate and up in alternating blocks of B
// (B = I: all gate, then all up; B = 128: the interleaved weight of gemm_sm90.cu);
// out (M, I) = silu(gate) * up, in f32, one rounding to bf16. I and B are even (pairs are
// processed together).
extern "C" __global__ void silu_mul_bf16(const __nv_bfloat162* __restrict__ gu,
                                         __nv_bfloat162* __restrict__ out, int M, int I, int B) {
    const int pairs = I / 2, block_pairs = B / 2;
    const long total = (long)M * pairs;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x) {
        const long r = i / pairs;
        const int j = (int)(i % pairs);
        const long at = r * 2 * pairs + (j / block_pairs) * 2 * block_pairs + j % block_pairs;
        const float2 g = __bfloat1622float2(gu[at]);
        const float2 u = __bfloat1622float2(gu[at + block_pairs]);
        const float a = g.x / (1.f + __expf(-g.x)) * u.x;
        const float b = g.y / (1.f + __expf(-g.y)) * u.y;
        out[i] = __floats2bfloat162_rn(a, b);
    }
}

// gather_rows_u32: dst row i = src row idx[i], for i < n, rows of `words` 4-byte words (a
// pass's queries or residual stream at the rows it reads out, in its last layer). One grid
// row per output row (rows beyond the grid's height in steps of it). Why not candle's
// index_select: it uploads the ids' shape from host memory on every call, which a CUDA graph
// cannot replay (the graph would read the freed host buffer again).
extern "C" __global__ void gather_rows_u32(const uint32_t* __restrict__ src,
                                           const uint32_t* __restrict__ idx,
                                           uint32_t* __restrict__ dst, int words, int n) {
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const uint32_t* s = src + (long)idx[i] * words;
        uint32_t* d = dst + (long)i * words;
        for (int j = threadIdx.x; j < words; j += blockDim.x) d[j] = s[j];
    }
}

// silu_mul_bf16x8: silu_mul for I % 8 == 0 and B % 8 == 0, eight outputs per thread with
// 16-byte accesses, one grid row per token row (rows beyond the grid's height in steps of
// it). The pair kernel above runs at ~2.2 TB/s on an H200, bound by its 64-bit index
// division (layer_bench).
extern "C" __global__ void silu_mul_bf16x8(const uint4* __restrict__ gu, uint4* __restrict__ out,
                                           int M, int I, int B) {
    const int vecs = I / 8, block_vecs = B / 8;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= vecs) return;
    // This thread's gate vector in a row; its up vector is block_vecs after it.
    const int at = (j / block_vecs) * 2 * block_vecs + j % block_vecs;
    for (long r = blockIdx.y; r < M; r += gridDim.y) {
        const uint4 g = gu[r * 2 * vecs + at];
        const uint4 u = gu[r * 2 * vecs + at + block_vecs];
        const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
        const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
        uint4 o;
        __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            const float2 gf = __bfloat1622float2(g2[n]);
            const float2 uf = __bfloat1622float2(u2[n]);
            const float a = gf.x / (1.f + __expf(-gf.x)) * uf.x;
            const float b = gf.y / (1.f + __expf(-gf.y)) * uf.y;
            o2[n] = __floats2bfloat162_rn(a, b);
        }
        out[r * vecs + j] = o;
    }
}

// ---------------------------------------------------------------------------------------------
// attention: flash-attention-2 style, bf16 tensor cores (mma.sync m16n8k16), f32 softmax.
//
// Queries q (M, H, D) bf16 (row stride q_stride elements). Key columns form one index space:
//   - prefix s covers columns [prefix_start[s], prefix_start[s] + prefix_len[s]); its K and V
//     are (KV, prefix_len[s], D) bf16 at prefix_k[s] / prefix_v[s] (device addresses), kv
//     head h's rows starting h * prefix_len[n_prefix + s] rows in (its head stride: its
//     length, or more for a view of a longer cache), prefix_start ascending;
//   - this pass's own rows cover [own_start, own_start + own_rows), K and V (KV, own_rows, D)
//     bf16. own_rows is M, or more when only some rows' queries are asked for (the last
//     layer of a pass needs only the rows read out; every row's keys are still seen).
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

/// Shared memory of one attention block: two stages of (K tile, V tile) of BN keys, and with
/// QS the block's queries.
template <int D, int BN, bool QS>
constexpr int attention_smem_bytes() {
    return (2 * 2 * BN + (QS ? ATT_BM : 0)) * (D + 8) * (int)sizeof(bf16);
}

template <int D, int BN, bool QS>
__device__ __forceinline__ void attention_impl(ATTENTION_PARAMS) {
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
    __shared__ __align__(16) int s_bounds[ATT_BM * 4];
    __shared__ SharedPrefixTable s_table;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    // Last rows first (block_place): in a causal pass they see the most keys.
    int row0, h;
    block_place<ATT_BM>(H, KV, D, own_start + own_rows, row0, h);
    const int kvh = h / (H / KV);
    const int wrow = warp * 16;  // the warp's first row in the block
    // This thread's two rows.
    const int r0 = row0 + wrow + g, r1 = r0 + 8;

    const KeyTable keys = stage_key_table(s_table, prefix_k, prefix_v, prefix_start, prefix_len,
                                          n_prefix, k_own, v_own, own_start, own_rows, kvh);
    const BlockTiles tiles = block_tiles<ATT_BM>(s_bounds, range, bounds, row0, M, BN);
    const WarpBands bands = warp_bands(s_bounds, wrow, row0, M);
    // The bounds of this thread's rows r0 and r1.
    const int4 b0 = row_bounds(s_bounds, wrow + g), b1 = row_bounds(s_bounds, wrow + g + 8);

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
    RowState st;

    const int z = blockIdx.z;
    int it_begin, it_end;
    tiles.share(z, n_splits, it_begin, it_end);

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
        const int col0 = tiles.col0(it, BN);
        bf16* const Kt = smem + stage * 2 * TILE;
        bf16* const Vt = Kt + TILE;
        for_key_rows<BN / ROWS_PER_PASS>(
            keys, col0, BN, tid / CHUNKS, ROWS_PER_PASS, part, D,
            [&](int j, const bf16* kp, const bf16* vp) {
                cp_async16(Kt + j * STRIDE + part * 8, kp ? kp : k_own, kp != nullptr);
                cp_async16(Vt + j * STRIDE + part * 8, vp ? vp : v_own, vp != nullptr);
            });
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
        const int col0 = tiles.col0(it, BN);

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

        softmax_update(s, o, st, bands.whole(col0, col0 + BN), col0, b0, b1, tq, scale_log2);

        // O += P V, P straight from the score registers (their layout is the A operand's).
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t a[4];
            p_fragment(a, s, kk);
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

    write_rows(o, st, r0, r1, tq, h, M, H, z, n_splits, scale_log2, out, part_o, part_ml);
}

// MIN_BLOCKS: blocks per multiprocessor the registers must allow (shared memory allows as
// many). attention_bf16_d{D}: queries in registers, 64-key tiles (three blocks fit on a
// multiprocessor); attention_bf16_d{D}_k32: queries in shared memory, 32-key tiles (fewer
// registers and less shared memory, so four fit).
#define ATTENTION_KERNEL(D, BN, QS, MIN_BLOCKS, SUFFIX)                                 \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS, MIN_BLOCKS)               \
        attention_bf16_d##D##SUFFIX(ATTENTION_PARAMS) {                                 \
        attention_impl<D, BN, QS>(ATTENTION_ARGS);                                      \
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
