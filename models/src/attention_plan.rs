//! How one launch of the fused attention kernels is laid out on the GPU: into how many parts
//! each block's keys are split (each part writes f32 partials that `attention_combine` merges)
//! and whether blocks start longest first across heads (`block_place` in
//! attention_common.cuh). Its own module because the choice is host arithmetic over the
//! pass's row bounds, testable without a GPU, and the launcher only carries it out.
//!
//! Why a model of the block scheduler: the rule before (`legacy_splits`) estimated every
//! block at the keys of the whole pass and a split's partials at ~1 tile per 12k row-heads.
//! That is right for questions over a cached input, where every block reads the whole prefix,
//! but a causal prefill chunk's blocks read from one tile to all of them, and a batch of short
//! prompts' blocks read a tile or two. Both were split anyway: the 28k read's first chunk
//! (3,712 rows, nothing cached) went out in 3 parts and took 0.262 ms a layer against 0.095
//! unsplit, and kernel_check found every split of 64 questions over a 4.4k input slower than
//! none (0.202 ms unsplit, 0.331 in the 5 parts the old rule chose; H100,
//! bench/reports/kernel-lease-1). Here each row block's tiles are counted from the bounds as
//! the kernel counts them, and the blocks are dealt to the multiprocessors in launch order
//! (one at a time as slots free up, as the hardware does), for each split and both orders; a
//! split's partials are charged at what they measured. The 28k read's attention: 120.0 ms
//! against 126.1 over 28 layers, its prefill 238.9 against 245.0 ms (p50), the read at the
//! client 243.6 against 249.6 (an H200, bench/reports/kernel-lease-2).
//!
//! Passes of at most [`SHAPE_RULE_MAX_ROWS`] rows are planned from their shape alone (every
//! block at all the keys): CUDA graphs replay them with other bounds, and a split changes
//! the rounding of a result, so their plan must follow their shape (a graph's first sighting
//! runs eagerly, and both must agree).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::switch::{Number, Switch};

/// Passes of at most this many rows are planned from their shape alone: the CUDA graphs'
/// largest pass (`MAX_ROWS` in forward/graphs.rs is this constant).
pub const SHAPE_RULE_MAX_ROWS: usize = 512;

/// The layout of one attention launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionPlan {
    /// Parts each block's key tiles are split into (1: none; the results are then written
    /// directly, without partials).
    pub splits: usize,
    /// Whether blocks start longest first across heads (the same results bit for bit).
    pub longest_first: bool,
}

/// What the plan needs to know of a block shape (`AttentionBlock` in kernels.rs).
#[derive(Clone, Copy, Debug)]
pub struct BlockShape {
    /// Query rows per block.
    pub rows: usize,
    /// Key columns per tile.
    pub key_tile: usize,
    /// Blocks resident on one multiprocessor at once.
    pub per_multiprocessor: usize,
    /// Nanoseconds a resident block takes per key tile at 128-wide heads (scaled by the head
    /// width), estimated from kernel_check's TFLOP/s on long passes on an H200.
    pub tile_ns: u64,
}

/// Multiprocessors of an H200 (the GPU the estimates come from). A constant, not the
/// device's count, so a pass gets the same plan (and so the same rounding) on every card.
pub const MULTIPROCESSORS: usize = 132;

/// A block's cost apart from its tiles: its setup (the key table, its rows' bounds), the
/// queries' and first tile's loads before any multiply, and writing its rows.
const BLOCK_NS: u64 = 2_000;

/// Launching `attention_combine` after a split call.
const COMBINE_NS: u64 = 4_000;

/// Bytes per nanosecond at which a split's partials are written and read back, as measured:
/// each extra part cost ~1 ns per row and head in kernel_check on an H100 (3,712 causal rows
/// 56 µs a part, 64 x 47 rows over 4,352 cached keys 35, 64 x 24 over 4,608 15;
/// bench/reports/kernel-lease-1/kernel-check.txt), ~1 KB of partials each.
const PARTIAL_BYTES_PER_NS: u64 = 1_000;

/// Most parts a block's keys are split into.
const MAX_SPLITS: usize = 64;

/// Whether launches are planned here; `DECIDE_ATTENTION_PLAN=0` plans every launch by the
/// rule before ([`legacy_splits`]), for A/B runs on a GPU.
static FROM_BOUNDS: Switch = Switch::new("DECIDE_ATTENTION_PLAN", true);

/// Plans every later launch by the rule through run 13 (`true`) or as this module plans
/// (`false`), whatever `DECIDE_ATTENTION_PLAN` says; `kernel_check` times both.
pub fn use_legacy_plan(legacy: bool) {
    FROM_BOUNDS.set(!legacy);
}

/// Key columns up to which a short pass (at most [`SHAPE_RULE_MAX_ROWS`] rows, replayed by
/// CUDA graphs) runs the plain wgmma kernel rather than the warp-specialized one
/// (`DECIDE_SHORT_ATTENTION_MAX_KEYS`; 0: never).
static SHORT_PLAIN_MAX_KEYS: Number = Number::new("DECIDE_SHORT_ATTENTION_MAX_KEYS", 512);

/// Whether a pass of `rows` query rows over `keys` key columns (cached and its own) is short
/// enough that its blocks do better without the warp-specialized kernel's pipeline, on a GPU
/// that has both wgmma kernels. Why: such a pass's blocks are one per head (or a few) over a
/// tile or a few, so each block's fixed latency is the launch's time, and the producer's
/// mbarrier hand-offs add to it where there is no later tile to overlap. A lone short
/// question (71 rows over 87 keys, 12 blocks of one tile) took 20.8 µs a layer on the
/// warp-specialized kernel and 10.5 on the plain one (Nsight Compute, H100), and its whole
/// read 2.24 against 2.56 ms synced (forward_bench `short`). The two kernels compute alike,
/// operation for operation, so results are bit-identical wherever the plan splits the keys
/// alike (it may not: their costs per tile differ). Over a long cached input the pipeline wins
/// (one question of 3 rows over 28k keys: 0.051 against 0.066 ms a layer, kernel_check). On
/// 71 rows the plain kernel stayed ahead up to 4,080 cached keys (0.025 against 0.029 ms,
/// kernel_check's "71 after N", H100, bench/reports/h100-side-by-side-21), so 512 keys (four
/// tiles) is a cautious bound that no server run has moved yet.
pub fn short_pass_runs_plain(rows: usize, keys: usize) -> bool {
    rows <= SHAPE_RULE_MAX_ROWS && keys <= SHORT_PLAIN_MAX_KEYS.get()
}

/// Forced block order: 0 not read yet, 1 always longest first, 2 never, 3 as planned.
static ORDER: AtomicU8 = AtomicU8::new(0);

/// `DECIDE_ATTENTION_LONGEST_FIRST=1` starts every launch's blocks longest first, `=0` none;
/// unset, passes planned from their bounds take whichever order the model of the scheduler
/// finds shorter, and shape-planned passes (short ones) head by head as before.
fn forced_order() -> Option<bool> {
    let mut state = ORDER.load(Ordering::Relaxed);
    if state == 0 {
        state = match std::env::var("DECIDE_ATTENTION_LONGEST_FIRST").as_deref() {
            Ok("1") => 1,
            Ok("0") => 2,
            _ => 3,
        };
        ORDER.store(state, Ordering::Relaxed);
    }
    match state {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    }
}

/// Forces the block order of later plans (`Some`), or leaves it to the plan (`None`);
/// `kernel_check` times both orders.
pub fn force_longest_first(order: Option<bool>) {
    let state = match order {
        Some(true) => 1,
        Some(false) => 2,
        None => 3,
    };
    ORDER.store(state, Ordering::Relaxed);
}

impl AttentionPlan {
    /// The plan of a launch of `m` query rows and `heads` heads `dim` wide, whose own keys
    /// start at column `own_start` and are `own_rows` long: from `bounds` (4 per row, as the
    /// kernel reads them) when given, else from the shape alone (every block at all the
    /// keys). `DECIDE_ATTENTION_PLAN=0`: the rule through run 13 for every launch
    /// ([`legacy_splits`], head by head).
    pub fn new(
        shape: BlockShape,
        heads: usize,
        dim: usize,
        m: usize,
        (own_start, own_rows): (usize, usize),
        bounds: Option<&[u32]>,
    ) -> Self {
        let forced = forced_order();
        let keys = own_start + own_rows;
        if !FROM_BOUNDS.on() {
            return Self::legacy(shape, heads, m, keys, forced);
        }
        match bounds {
            Some(b) => {
                let tiles = block_tiles(&b[..4 * m], shape.rows, shape.key_tile);
                Self::planned(shape, heads, dim, m, Work::Blocks(&tiles), forced)
            }
            None => {
                let tiles = keys.div_ceil(shape.key_tile) as u32;
                let work = Work::Uniform(m.div_ceil(shape.rows), tiles);
                Self::planned(shape, heads, dim, m, work, forced)
            }
        }
    }

    /// The rule through run 13: [`legacy_splits`], head by head unless `forced`.
    fn legacy(
        shape: BlockShape,
        heads: usize,
        m: usize,
        keys: usize,
        forced: Option<bool>,
    ) -> Self {
        let blocks = m.div_ceil(shape.rows) * heads;
        let key_tiles = keys.div_ceil(64);
        Self {
            splits: legacy_splits(blocks, shape.per_multiprocessor, key_tiles, m * heads),
            longest_first: forced.unwrap_or(false),
        }
    }

    /// The split and order with the least estimated time for this work (the order `forced`
    /// when given).
    fn planned(
        shape: BlockShape,
        heads: usize,
        dim: usize,
        m: usize,
        work: Work<'_>,
        forced: Option<bool>,
    ) -> Self {
        let slots = shape.per_multiprocessor * MULTIPROCESSORS;
        let blocks = work.row_blocks() * heads;
        let most = work.most() as usize;
        let tile_ns = shape.tile_ns * dim as u64 / 128;
        // Partials per split: each row and head's dim f32 outputs, maximum and sum, written
        // once and read back once.
        let partial_ns = (m * heads * (dim + 2) * 4 * 2) as u64 / PARTIAL_BYTES_PER_NS;
        let cost = |splits: usize, longest_first: bool| {
            let run = work.makespan(heads, splits, longest_first, tile_ns, slots);
            if splits > 1 {
                run + splits as u64 * partial_ns + COMBINE_NS
            } else {
                run
            }
        };
        // A split pays only while blocks are few next to the slots; each part keeps two
        // tiles at least.
        let split_candidates = (1..=MAX_SPLITS)
            .take_while(|&s| s == 1 || (blocks * s <= 8 * slots && most >= 2 * s))
            .take(if blocks >= 4 * slots { 1 } else { MAX_SPLITS });
        // Blocks of one length start in either order alike.
        let orders: &[bool] = match (forced, work) {
            (Some(f), _) => {
                if f {
                    &[true]
                } else {
                    &[false]
                }
            }
            (None, Work::Uniform(..)) => &[false],
            (None, Work::Blocks(_)) => &[false, true],
        };
        let mut best = (
            u64::MAX,
            Self {
                splits: 1,
                longest_first: orders[0],
            },
        );
        for splits in split_candidates {
            for &longest_first in orders {
                let mut ns = cost(splits, longest_first);
                // Longest first only where the model finds it shorter by more than its noise.
                if longest_first && forced.is_none() {
                    ns += ns / 200;
                }
                if ns < best.0 {
                    best = (
                        ns,
                        Self {
                            splits,
                            longest_first,
                        },
                    );
                }
            }
        }
        best.1
    }
}

/// The key tiles a launch's blocks visit: per row block, counted from the rows' bounds, or
/// `(row blocks, tiles)` for every block alike (a plan from the shape alone).
#[derive(Clone, Copy)]
enum Work<'a> {
    Blocks(&'a [u32]),
    Uniform(usize, u32),
}

impl Work<'_> {
    fn row_blocks(self) -> usize {
        match self {
            Work::Blocks(t) => t.len(),
            Work::Uniform(n, _) => n,
        }
    }

    fn most(self) -> u32 {
        match self {
            Work::Blocks(t) => t.iter().copied().max().unwrap_or(0),
            Work::Uniform(_, t) => t,
        }
    }

    /// [`makespan`]; for blocks of one length in closed form (waves of the longest part),
    /// which a short pass (planned on every call) can afford.
    fn makespan(
        self,
        heads: usize,
        splits: usize,
        longest_first: bool,
        tile_ns: u64,
        slots: usize,
    ) -> u64 {
        match self {
            Work::Blocks(t) => makespan(t, heads, splits, longest_first, tile_ns, slots),
            Work::Uniform(n, t) => {
                let waves = (n * heads * splits).div_ceil(slots) as u64;
                waves * (BLOCK_NS + tile_ns * u64::from(t).div_ceil(splits as u64))
            }
        }
    }
}

/// The rule through run 13 (`DECIDE_ATTENTION_PLAN=0`): how many parts to split the keys of
/// an attention call into, from its shape alone, when few blocks meet many keys: one question
/// over a long cached input (12 blocks for 28k keys otherwise), or 64 short questions over
/// one 4k-token input (~560 blocks, 1.4 waves of `per_sm` blocks on every multiprocessor,
/// the second mostly idle). Picks the split with the
/// least estimated time: waves of blocks times key tiles per split, plus the f32 partials of
/// each extra split, written and merged (estimated: a 64x64 tile takes a block ~5 µs; 3k rows
/// x 12 heads of 128 partials take ~15 µs to write and read back, so ~1 tile per 12k
/// row-heads). Each part keeps at least 8 key tiles.
fn legacy_splits(blocks: usize, per_sm: usize, key_tiles: usize, row_heads: usize) -> usize {
    let resident = per_sm * MULTIPROCESSORS;
    if blocks >= 4 * resident || key_tiles < 16 {
        return 1;
    }
    let cost = |s: usize| {
        let waves = (blocks * s).div_ceil(resident);
        (waves * key_tiles.div_ceil(s)) as f64 + (s - 1) as f64 * row_heads as f64 / 12_000.0
    };
    (1..=(key_tiles / 8).min(MAX_SPLITS))
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(1)
}

/// Per block of `rows` query rows, the key tiles of `tile` columns it visits, as
/// `block_tiles` in attention_common.cuh counts them: those meeting the union of its rows'
/// first bands, then those meeting the union of their second bands (their union once, where
/// the two share or touch a tile). `bounds`: 4 per row.
pub fn block_tiles(bounds: &[u32], rows: usize, tile: usize) -> Vec<u32> {
    let tile = tile as u32;
    bounds
        .chunks(4 * rows)
        .map(|block| {
            let (mut a, mut b) = ((u32::MAX, 0), (u32::MAX, 0));
            for r in block.chunks_exact(4) {
                if r[1] > r[0] {
                    a = (a.0.min(r[0]), a.1.max(r[1]));
                }
                if r[3] > r[2] {
                    b = (b.0.min(r[2]), b.1.max(r[3]));
                }
            }
            let tiles = |(lo, hi): (u32, u32)| {
                if hi > lo {
                    (lo / tile, hi.div_ceil(tile))
                } else {
                    (0, 0)
                }
            };
            let (mut ta, tb) = (tiles(a), tiles(b));
            if tb.1 > tb.0 && ta.1 > ta.0 && tb.0 <= ta.1 && ta.0 <= tb.1 {
                ta = (ta.0.min(tb.0), ta.1.max(tb.1));
                return ta.1 - ta.0;
            }
            (ta.1 - ta.0) + (tb.1 - tb.0)
        })
        .collect()
}

/// Nanoseconds until the last block ends when the launch's blocks (each row block of `tiles`
/// for every head, its tiles cut into `splits` parts as `BlockTiles::share` cuts them) start
/// in launch order on `slots` slots, each as soon as one is free. The order is that of
/// `block_place`: head by head (within a head the last rows first) or longest first (the last
/// row block of every head, then the one before, ...); split z of every block after split
/// z - 1 (the grid's z).
fn makespan(
    tiles: &[u32],
    heads: usize,
    splits: usize,
    longest_first: bool,
    tile_ns: u64,
    slots: usize,
) -> u64 {
    let mut free: BinaryHeap<Reverse<u64>> = (0..slots).map(|_| Reverse(0)).collect();
    let mut end = 0;
    let mut start = |ns: u64| {
        let Reverse(at) = free.pop().expect("at least one slot");
        let done = at + ns;
        end = end.max(done);
        free.push(Reverse(done));
    };
    let part = |count: u32, z: usize| {
        let (count, s) = (count as u64, splits as u64);
        let z = z as u64;
        BLOCK_NS + tile_ns * (count * (z + 1) / s - count * z / s)
    };
    for z in 0..splits {
        if longest_first {
            for &count in tiles.iter().rev() {
                for _ in 0..heads {
                    start(part(count, z));
                }
            }
        } else {
            for _ in 0..heads {
                for &count in tiles.iter().rev() {
                    start(part(count, z));
                }
            }
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warp-specialized Hopper kernel's shape (`AttentionBlock::WgmmaSpecialized`).
    const WS: BlockShape = BlockShape {
        rows: 128,
        key_tile: 128,
        per_multiprocessor: 1,
        tile_ns: 2_000,
    };

    /// Bounds of `segments`, each `(prefix columns, rows)`: every row sees its segment's
    /// prefix `[0, prefix)` and its own segment causally, own keys from `own_start`.
    fn bounds(own_start: usize, segments: &[(usize, usize)]) -> Vec<u32> {
        let mut b = Vec::new();
        let mut row = 0;
        for &(prefix, rows) in segments {
            for j in 0..rows {
                b.extend([0, prefix, own_start + row, own_start + row + j + 1].map(|x| x as u32));
            }
            row += rows;
        }
        b
    }

    fn plan(own_start: usize, segments: &[(usize, usize)]) -> AttentionPlan {
        let b = bounds(own_start, segments);
        let m = b.len() / 4;
        let tiles = block_tiles(&b, WS.rows, WS.key_tile);
        AttentionPlan::planned(WS, 12, 128, m, Work::Blocks(&tiles), None)
    }

    /// The plan of `m` rows from their shape alone, the keys `keys` long.
    fn shaped(m: usize, keys: usize, forced: Option<bool>) -> AttentionPlan {
        let work = Work::Uniform(m.div_ceil(WS.rows), keys.div_ceil(WS.key_tile) as u32);
        AttentionPlan::planned(WS, 12, 128, m, work, forced)
    }

    #[test]
    fn only_short_passes_over_few_keys_run_the_plain_kernel() {
        // A lone short question after a cached header, and a few of them packed.
        assert!(short_pass_runs_plain(71, 87));
        assert!(short_pass_runs_plain(4 * 71, 16 + 4 * 71));
        // Over a long cached input, and passes the graphs do not replay.
        assert!(!short_pass_runs_plain(3, 28_259));
        assert!(!short_pass_runs_plain(384, 4_608 + 384));
        assert!(!short_pass_runs_plain(SHAPE_RULE_MAX_ROWS + 1, 100));
    }

    #[test]
    fn block_tiles_count_what_the_kernel_visits() {
        // A causal chunk from nothing: block i sees tiles 0..=i.
        let b = bounds(0, &[(0, 3712)]);
        let t = block_tiles(&b, 128, 128);
        assert_eq!(t.len(), 29);
        assert_eq!(t[0], 1);
        assert_eq!(t[28], 29);
        // After 4,352 cached columns (34 tiles), 300 own rows: the prefix band and the own
        // band meet in tile 34, visited once.
        let b = bounds(4352, &[(4352, 300)]);
        assert_eq!(block_tiles(&b, 128, 128), [35, 36, 37]);
        // Apart: the prefix ends in tile 0, own keys from tile 10.
        let b = bounds(1280, &[(100, 128)]);
        assert_eq!(block_tiles(&b, 128, 128), [2]);
    }

    // The cases below are kernel_check's, whose timings on an H100 (bench/reports/
    // kernel-lease-1) set the partials' cost.

    #[test]
    fn a_causal_chunk_from_nothing_is_not_split() {
        // The 28k read's first chunk, which the old rule split in 3 (0.262 ms; unsplit 0.095).
        assert_eq!(legacy_splits(29 * 12, 1, 3712 / 64, 3712 * 12), 3);
        let p = plan(0, &[(0, 3712)]);
        assert_eq!(p.splits, 1);
        assert!(p.longest_first, "causal blocks differ in length: {p:?}");
    }

    #[test]
    fn questions_over_a_4k_input_are_not_split() {
        // Measured: 64 x 47 rows over 4,352 keys 0.202 ms unsplit, 0.260 in 2 parts, 0.331
        // in 5 (the old rule's); 64 x 24 over 4,608 0.139 unsplit, 0.151 in 2, 0.171 in 3.
        assert_eq!(plan(4352, &vec![(4352, 47); 64]).splits, 1);
        assert_eq!(plan(4608, &vec![(4608, 24); 64]).splits, 1);
    }

    #[test]
    fn long_chunks_after_the_cache_start_longest_first_unsplit() {
        // 8,192 rows after 11,904: 1.416 ms longest first, 1.435 head by head.
        let p = plan(11_904, &[(11_904, 8192)]);
        assert_eq!(
            p,
            AttentionPlan {
                splits: 1,
                longest_first: true
            }
        );
    }

    #[test]
    fn a_batch_of_short_prompts_is_not_split() {
        // 64 prompts of 60 rows, nothing cached: a block visits a tile or two.
        let segments = vec![(0, 60); 64];
        let own: usize = segments.iter().map(|s| s.1).sum();
        assert!(legacy_splits(own.div_ceil(128) * 12, 1, own.div_ceil(64), own * 12) > 1);
        assert_eq!(plan(0, &segments).splits, 1);
    }

    #[test]
    fn few_rows_over_a_long_prefix_are_split_to_fill_the_gpu() {
        // One question's last rows over a 28k cached input: 12 blocks alone would leave 120
        // multiprocessors idle. From the bounds and from the shape alike.
        for p in [plan(28_256, &[(28_256, 3)]), shaped(3, 28_259, None)] {
            assert!(p.splits >= 8, "{p:?}");
            // Every part keeps two tiles at least.
            assert!(p.splits <= 221 / 2);
        }
    }

    #[test]
    fn short_passes_over_an_input_split_less_than_before() {
        // 16 questions of 24 rows over 4,608 cached keys (a CUDA graph's pass, planned from
        // its shape): the old rule split them in 7.
        assert_eq!(
            legacy_splits(3 * 12, 1, (4608 + 384usize).div_ceil(64), 384 * 12),
            7
        );
        let p = shaped(384, 4608 + 384, None);
        assert!((2..=4).contains(&p.splits), "{p:?}");
        // A short prompt alone is never split.
        assert_eq!(shaped(60, 60, None).splits, 1);
        assert_eq!(shaped(512, 512, None).splits, 1);
    }

    #[test]
    fn the_schedule_model_deals_blocks_in_launch_order() {
        // Four equal blocks on two slots: two waves.
        assert_eq!(
            makespan(&[1, 1], 2, 1, false, 1_000, 2),
            2 * (BLOCK_NS + 1_000)
        );
        // A long block started last ends last; started first, the short ones fill around it.
        // (Within a head the last rows start first.)
        let long_first = makespan(&[1, 1, 4], 1, 1, false, 1_000, 2);
        let long_last = makespan(&[4, 1, 1], 1, 1, false, 1_000, 2);
        assert_eq!(long_first, BLOCK_NS + 4_000);
        assert_eq!(long_last, 2 * BLOCK_NS + 5_000);
        // Splitting one long block in two halves its time on an idle machine.
        let whole = makespan(&[40], 1, 1, false, 1_000, 4);
        let halves = makespan(&[40], 1, 2, false, 1_000, 4);
        assert_eq!(whole, BLOCK_NS + 40_000);
        assert_eq!(halves, BLOCK_NS + 20_000);
    }

    #[test]
    fn the_closed_form_for_blocks_of_one_length_is_the_schedule() {
        for (n, t, splits) in [
            (3usize, 39u32, 1usize),
            (3, 39, 3),
            (1, 221, 11),
            (24, 36, 2),
        ] {
            let tiles = vec![t; n];
            let dealt = makespan(&tiles, 12, splits, false, 2_000, 132);
            let closed = Work::Uniform(n, t).makespan(12, splits, false, 2_000, 132);
            assert_eq!(dealt, closed, "{n} blocks of {t} tiles in {splits}");
        }
    }

    #[test]
    fn a_forced_order_wins_over_the_plan() {
        let b = bounds(0, &[(0, 3712)]);
        let tiles = block_tiles(&b, WS.rows, WS.key_tile);
        let forced = |f| AttentionPlan::planned(WS, 12, 128, 3712, Work::Blocks(&tiles), f);
        assert!(!forced(Some(false)).longest_first);
        assert!(forced(Some(true)).longest_first);
        assert!(shaped(100, 100, Some(true)).longest_first);
        assert!(!shaped(100, 100, None).longest_first);
        assert!(!AttentionPlan::legacy(WS, 12, 100, 100, None).longest_first);
    }
}
