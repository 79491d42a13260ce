//! The CPU's bf16 matmul on Intel AMX tiles (`tdpbf16ps`): detection, the packed weight
//! layout and `y = x @ W^T`.
//!
//! Why: on CPU the forward is compute bound in its projections, and candle's f32 gemm prefills
//! Qwen2.5-1.5B at ~50 tokens/s on 2 cores; AMX multiplies bf16 tiles with f32 accumulation at
//! many times the f32 SIMD rate (here ~400-700 GFLOP/s on 2 cores against ~80 for the same
//! shapes, `examples/amx_bench.rs`; 2x2 tiles over the whole of K, no cache blocking yet). Weights are rounded to bf16 once at load, activations at each
//! matmul; the output, and everything between the projections, stays f32.
//!
//! Split invariance (see [`crate::forward::KV_PAD`]): every output element is one row of `x`
//! times one column of `W`, accumulated by `tdpbf16ps` over `K` in steps of 32 from 0 to `K`,
//! whatever the number of rows; rows are blocked only into tiles of 16, and a tile's other rows
//! (padding zeros included) never enter a row's sums. So a row's result is bit-for-bit the same
//! alone or among any number of others (a test checks 1 to 100 rows).
//!
//! Availability: CPUID must report AMX-TILE and AMX-BF16 and Linux must grant the process the
//! tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), asked once; if any
//! step fails [`available`] is false and the f32 path is used. The instructions are written as
//! inline assembly (the `core::arch` AMX intrinsics and `is_x86_feature_detected!("amx-*")` are
//! unstable on Rust 1.95). Tile registers are used only here: C accumulators `tmm0`-`tmm3`, A
//! tiles `tmm4`-`tmm5`, B tiles `tmm6`-`tmm7`; each task loads the configuration on the thread
//! it runs on and releases the tiles when done.

use std::sync::OnceLock;

use rayon::prelude::*;

/// Output columns of a B tile (and of a C tile).
pub const TILE_N: usize = 16;
/// Rows of an A tile (and of a C tile).
pub const TILE_M: usize = 16;
/// Inputs one `tdpbf16ps` consumes (32 bf16 = 64 bytes per tile row).
pub const TILE_K: usize = 32;

/// Whether this process can run AMX bf16 tiles (detected and permitted once).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use core::arch::x86_64::__cpuid_count;
    // CPUID leaf 7, sub-leaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
    if __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a syscall with integer arguments; it changes only which xsave states this
    // process may use. It fails (non-zero) where the kernel does not support AMX.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if granted != 0 {
        tracing::info!("AMX present but not granted by the kernel: f32 matmuls on CPU");
        return false;
    }
    true
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// Whether a weight of `n` outputs by `k` inputs can be packed into whole tiles.
pub fn fits(n: usize, k: usize) -> bool {
    n > 0 && k > 0 && n.is_multiple_of(TILE_N) && k.is_multiple_of(TILE_K)
}

/// f32 to bf16 bits, rounding to nearest even (NaN stays a quiet NaN).
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    // Branch-free (a select), so that the loops over rows vectorise.
    let u = x.to_bits();
    let rounded = u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16;
    let quiet_nan = (u >> 16) | 0x40;
    (if u & 0x7fff_ffff > 0x7f80_0000 {
        quiet_nan
    } else {
        rounded
    }) as u16
}

/// bf16 bits to f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// A weight `(out = n, in = k)` rounded to bf16 and laid out as AMX B tiles ("VNNI"): for
/// each block of 16 output columns, for each step of 32 inputs, one tile of 16 rows of 64
/// bytes, row `r` holding for each column `c` the pair `W[c][k0 + 2r]`, `W[c][k0 + 2r + 1]`.
/// A column block's tiles are contiguous, in input order.
pub struct AmxWeight {
    n: usize,
    k: usize,
    packed: Vec<u16>,
}

impl std::fmt::Debug for AmxWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AmxWeight({} x {})", self.n, self.k)
    }
}

impl AmxWeight {
    /// Packs `w`, row-major `(n, k)`; `None` unless [`fits`]`(n, k)`.
    pub fn pack(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if !fits(n, k) || w.len() != n * k {
            return None;
        }
        let steps = k / TILE_K;
        let block_len = steps * TILE_M * TILE_K;
        let mut packed = vec![0u16; n * k];
        packed
            .par_chunks_mut(block_len)
            .enumerate()
            .for_each(|(j, block)| {
                for (s, tile) in block.chunks_mut(TILE_M * TILE_K).enumerate() {
                    for r in 0..TILE_M {
                        for c in 0..TILE_N {
                            let row = &w[(j * TILE_N + c) * k + s * TILE_K + 2 * r..];
                            tile[r * TILE_K + 2 * c] = bf16_bits(row[0]);
                            tile[r * TILE_K + 2 * c + 1] = bf16_bits(row[1]);
                        }
                    }
                }
            });
        Some(AmxWeight { n, k, packed })
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Inputs.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `x @ W^T` for `x` row-major `(m, k)` f32: `(m, n)` f32, row-major. Needs
    /// [`available`].
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        assert!(available(), "AMX matmul without AMX");
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "x is not (m, k)");
        if m == 0 {
            return Vec::new();
        }
        let row_tiles = m.div_ceil(TILE_M);
        let mp = row_tiles * TILE_M;
        // Activations in bf16, padded with zero rows to whole tiles.
        let mut a = vec![0u16; mp * k];
        a.par_chunks_mut(k)
            .zip(x.par_chunks(k))
            .with_min_len(8)
            .for_each(|(dst, src)| {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = bf16_bits(s);
                }
            });
        // Every element is written by a tile store (padding rows included) before it is read.
        let mut y: Vec<f32> = Vec::with_capacity(mp * n);
        let col_blocks = n / TILE_N;
        // Work units of two column blocks (the last may hold one), each over every row tile.
        let units = col_blocks.div_ceil(2);
        let out = SharedOut(y.as_mut_ptr());
        let a = &a;
        (0..units).into_par_iter().for_each(|u| {
            let blocks = (2 * u)..(2 * u + 2).min(col_blocks);
            // SAFETY: AMX is available (asserted) and permitted; `a` holds `row_tiles` tiles
            // of rows of `k` bf16, `packed` the B tiles of these blocks, and this unit writes
            // only its own columns of `y`, `(mp, n)`, which no other unit touches.
            unsafe { self.unit(a, row_tiles, blocks, &out) };
        });
        // SAFETY: the units stored all `mp * n` elements (every row tile of every column
        // block); the padding rows past `m` are dropped.
        unsafe { y.set_len(m * n) };
        y
    }

    /// One unit: the column blocks `blocks` (one or two) for every row tile.
    ///
    /// # Safety
    /// AMX available; `a` is `(row_tiles * 16, k)` bf16; `out` points at `(row_tiles * 16, n)`
    /// f32 whose columns of `blocks` no other thread touches meanwhile.
    unsafe fn unit(
        &self,
        a: &[u16],
        row_tiles: usize,
        blocks: std::ops::Range<usize>,
        out: &SharedOut,
    ) {
        let (n, k) = (self.n, self.k);
        let steps = k / TILE_K;
        let block_len = steps * TILE_M * TILE_K;
        let two_cols = blocks.len() == 2;
        let a_stride = k * 2;
        let c_stride = n * 4;
        let b0 = self.packed.as_ptr().add(blocks.start * block_len);
        let b1 = if two_cols { b0.add(block_len) } else { b0 };
        tiles::configure();
        let mut i = 0;
        while i < row_tiles {
            let two_rows = i + 1 < row_tiles;
            let a0 = a.as_ptr().add(i * TILE_M * k);
            let a1 = if two_rows { a0.add(TILE_M * k) } else { a0 };
            tiles::zero_all();
            for s in 0..steps {
                let (a_off, b_off) = (s * TILE_K, s * TILE_M * TILE_K);
                tiles::step(
                    a0.add(a_off),
                    a1.add(a_off),
                    a_stride,
                    b0.add(b_off),
                    b1.add(b_off),
                    two_rows,
                    two_cols,
                );
            }
            let c00 = out.0.add(i * TILE_M * n + blocks.start * TILE_N);
            tiles::store(c00, c_stride, two_rows, two_cols, TILE_M * n, TILE_N);
            i += if two_rows { 2 } else { 1 };
        }
        tiles::release();
    }
}

/// The output buffer, written by several threads in disjoint columns.
struct SharedOut(*mut f32);
// SAFETY: units write disjoint columns (see `AmxWeight::matmul`).
unsafe impl Sync for SharedOut {}

/// The AMX instructions, as inline assembly. Register use: C `tmm0` (rows 0, cols 0),
/// `tmm1` (rows 0, cols 1), `tmm2` (rows 1, cols 0), `tmm3` (rows 1, cols 1); A `tmm4`,
/// `tmm5`; B `tmm6`, `tmm7`.
#[cfg(target_arch = "x86_64")]
mod tiles {
    use std::arch::asm;

    /// Palette 1, all eight tiles 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
            t += 1;
        }
        Config(c)
    };

    /// Loads the tile configuration on this thread.
    #[inline(always)]
    pub(super) unsafe fn configure() {
        let cfg = &CONFIG;
        asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
    }

    #[inline(always)]
    pub(super) unsafe fn zero_all() {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
    }

    /// One step of 32 inputs: C += A x B for the (up to) 2 x 2 tiles.
    #[inline(always)]
    pub(super) unsafe fn step(
        a0: *const u16,
        a1: *const u16,
        a_stride: usize,
        b0: *const u16,
        b1: *const u16,
        two_rows: bool,
        two_cols: bool,
    ) {
        let b_stride = 64usize;
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            a0 = in(reg) a0, b0 = in(reg) b0, sa = in(reg) a_stride, sb = in(reg) b_stride,
            options(nostack, readonly)
        );
        if two_cols {
            asm!(
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                b1 = in(reg) b1, sb = in(reg) b_stride,
                options(nostack, readonly)
            );
        }
        if two_rows {
            asm!(
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                a1 = in(reg) a1, sa = in(reg) a_stride,
                options(nostack, readonly)
            );
            if two_cols {
                asm!("tdpbf16ps tmm3, tmm5, tmm7", options(nostack, nomem));
            }
        }
    }

    /// Stores the accumulators: C tile (r, c) at `c00 + r * row_step + c * col_step`.
    #[inline(always)]
    pub(super) unsafe fn store(
        c00: *mut f32,
        stride: usize,
        two_rows: bool,
        two_cols: bool,
        row_step: usize,
        col_step: usize,
    ) {
        asm!("tilestored [{p} + {s}*1], tmm0", p = in(reg) c00, s = in(reg) stride,
            options(nostack));
        if two_cols {
            asm!("tilestored [{p} + {s}*1], tmm1", p = in(reg) c00.add(col_step),
                s = in(reg) stride, options(nostack));
        }
        if two_rows {
            asm!("tilestored [{p} + {s}*1], tmm2", p = in(reg) c00.add(row_step),
                s = in(reg) stride, options(nostack));
            if two_cols {
                asm!("tilestored [{p} + {s}*1], tmm3", p = in(reg) c00.add(row_step + col_step),
                    s = in(reg) stride, options(nostack));
            }
        }
    }

    #[inline(always)]
    pub(super) unsafe fn release() {
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// Without x86-64 there are no tiles; [`available`] is false, so these never run.
#[cfg(not(target_arch = "x86_64"))]
mod tiles {
    pub(super) unsafe fn configure() {}
    pub(super) unsafe fn zero_all() {}
    pub(super) unsafe fn step(
        _: *const u16,
        _: *const u16,
        _: usize,
        _: *const u16,
        _: *const u16,
        _: bool,
        _: bool,
    ) {
    }
    pub(super) unsafe fn store(_: *mut f32, _: usize, _: bool, _: bool, _: usize, _: usize) {}
    pub(super) unsafe fn release() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random f32 in [-1, 1).
    fn noise(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len).map(|_| noise(&mut s)).collect()
    }

    fn skip() -> bool {
        if !available() {
            eprintln!("skipping: no AMX bf16 on this CPU (or not granted by the kernel)");
            return true;
        }
        false
    }

    #[test]
    fn packing_needs_whole_tiles() {
        assert!(fits(32, 64));
        assert!(!fits(40, 64));
        assert!(!fits(32, 48));
        assert!(AmxWeight::pack(&[0.0; 24 * 64], 24, 64).is_none());
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
        assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16_bits(1.0 + 1.0 / 256.0 + 1e-6), 0x3f81);
        assert_eq!(bf16_to_f32(bf16_bits(-2.5)), -2.5);
        assert!(bf16_to_f32(bf16_bits(f32::NAN)).is_nan());
    }

    /// Each output against the f64 product of the bf16-rounded inputs, within the f32
    /// rounding of a K-long accumulation; and against the f32 weights within bf16 error.
    #[test]
    fn matches_reference() {
        if skip() {
            return;
        }
        for &(m, n, k) in &[(1, 16, 32), (5, 48, 96), (33, 64, 256), (20, 96, 1536)] {
            let x = random(m * k, 1 + m as u64);
            let w = random(n * k, 2 + n as u64);
            let packed = AmxWeight::pack(&w, n, k).unwrap();
            let y = packed.matmul(&x, m);
            assert_eq!(y.len(), m * n);
            let r = |v: f32| bf16_to_f32(bf16_bits(v)) as f64;
            for i in 0..m {
                for j in 0..n {
                    let (xs, ws) = (&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                    let exact: f64 = xs.iter().zip(ws).map(|(&a, &b)| r(a) * r(b)).sum();
                    let mag: f64 = xs.iter().zip(ws).map(|(&a, &b)| (r(a) * r(b)).abs()).sum();
                    let got = y[i * n + j] as f64;
                    // f32 accumulation: k additions, each off by at most half an ulp of the sum.
                    let tol = mag * k as f64 * f32::EPSILON as f64;
                    assert!(
                        (got - exact).abs() <= tol,
                        "({m}, {n}, {k}) [{i}][{j}]: {got} vs {exact} (tol {tol})"
                    );
                    let f32_ref: f64 = xs.iter().zip(ws).map(|(&a, &b)| a as f64 * b as f64).sum();
                    // bf16 keeps 8 significant bits: each product off by < 2 * 2^-8.
                    let tol = mag * 2.0 * 2f64.powi(-8) + 1e-6;
                    assert!(
                        (got - f32_ref).abs() <= tol,
                        "({m}, {n}, {k}) [{i}][{j}]: {got} vs f32 {f32_ref} (tol {tol})"
                    );
                }
            }
        }
    }

    /// A row's outputs are bit-for-bit the same whatever rows come with it.
    #[test]
    fn rows_are_split_invariant() {
        if skip() {
            return;
        }
        let (n, k) = (80, 192);
        let w = AmxWeight::pack(&random(n * k, 7), n, k).unwrap();
        let x = random(100 * k, 8);
        let alone: Vec<Vec<f32>> = (0..100)
            .map(|i| w.matmul(&x[i * k..(i + 1) * k], 1))
            .collect();
        for &m in &[1, 5, 16, 17, 100] {
            // Rows starting at an offset too, so a row sits at different places in its tile.
            for start in [0, 3] {
                let m = m.min(100 - start);
                let y = w.matmul(&x[start * k..(start + m) * k], m);
                for i in 0..m {
                    let row = &y[i * n..(i + 1) * n];
                    assert!(
                        row.iter()
                            .zip(&alone[start + i])
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "row {} of a {m}-row pass differs from its lone product",
                        start + i
                    );
                }
            }
        }
    }
}
