//! Where a long prefill is cut into chunks: how many rows each pass takes, in which order,
//! and on which rows the cuts fall. Its own module because three callers must cut alike
//! ([`crate::Model::prefill`], [`crate::Model::read_and_cache`] and the host's scheduler,
//! which runs the same chunks one call at a time), and both choices here are A/B settings
//! for GPU runs (`DECIDE_PREFILL_REMAINDER_FIRST`, `DECIDE_PREFILL_ALIGN`).

use crate::switch::Switch;

/// Whether long prefills cut their chunks with the remainder first ([`chunk_lengths`]);
/// `DECIDE_PREFILL_REMAINDER_FIRST=0` puts it last, as before, for A/B runs on a GPU
/// (forward_bench's `long` and the server alike). On until an H200 run measures it.
static REMAINDER_FIRST: Switch = Switch::new("DECIDE_PREFILL_REMAINDER_FIRST", true);

/// Whether the cuts of a remainder-first prefill fall on multiples of [`PREFILL_ALIGN`] rows
/// (of the cache, not of the call); `DECIDE_PREFILL_ALIGN=0` cuts where the plain lengths
/// fall, as before, for A/B runs on a GPU.
static ALIGN: Switch = Switch::new("DECIDE_PREFILL_ALIGN", true);

/// Rows the cuts between prefill chunks fall on multiples of, counted from the cache's first
/// row: the fused attention kernels' key tile (`WG_BN` in `kernels/attention_sm90.cu`).
///
/// Why: those kernels cut the keys into tiles at multiples of 128 of the whole key range. A
/// tile that straddles two sources (two pieces of the cache, or the cache and the pass's own
/// keys) cannot be one TMA copy and is staged row by row, and a chunk whose first row is off
/// a tile boundary meets its causal diagonal in two tiles instead of one. The 28,259-token
/// prefill cut [3683, 8192, 8192, 8192] puts every later chunk's boundaries 99 rows into a
/// tile. On an H100 (bench/reports/h200-side-by-side-12/probes/kernel-check.txt), 8,192 rows
/// after pieces 3683 + 8192 took 1.479 ms against 1.423 after one prefix of 11,875 rows (one
/// straddling tile fewer per query block); after 8,192 and 16,384 rows (aligned, one prefix)
/// the same chunk ran at 568 and 584 TFLOP/s, after 11,875 and 20,067 at 565 and 573.
/// kernel_check times the 28k prefill's chunks both ways ("28k prefill attention").
pub const PREFILL_ALIGN: usize = 128;

/// The lengths of the chunks that the rows `held..held + total` of a cache are cut into, at
/// most `chunk` each: the remainder first, then whole chunks (the remainder last with
/// `DECIDE_PREFILL_REMAINDER_FIRST=0`). With the remainder first, every cut falls on a
/// multiple of [`PREFILL_ALIGN`] rows of the cache where that costs no extra chunk (`chunk`
/// a multiple of it): the first chunk grows to the next boundary and the last one shrinks,
/// e.g. 28,259 rows in chunks of 8,192 as [3712, 8192, 8192, 8163].
///
/// Why the remainder first: a chunk's attention reads every key before it, and a short chunk
/// fills the GPU's last wave of attention blocks less evenly (or is split over the keys,
/// with partial results to merge), so the short chunk costs least where it sees the fewest
/// keys. `bench/attention_schedule.py` models the 28k-token prefill's attention on an H200
/// at 113.6 ms this way against 115.0 ms with the remainder last. The sum is the same work.
pub fn chunk_lengths(held: usize, total: usize, chunk: usize) -> Vec<usize> {
    cut(held, total, chunk, REMAINDER_FIRST.on(), ALIGN.on())
}

/// Where the last of [`chunk_lengths`]'s chunks starts, counted from `held`: the rows a read
/// takes its answer from, prefilled before it in [`chunk_lengths`]`(held, start, chunk)`, which
/// are the same cuts.
pub fn last_chunk_start(held: usize, total: usize, chunk: usize) -> usize {
    let lengths = chunk_lengths(held, total, chunk);
    total - lengths.last().copied().unwrap_or(0)
}

/// Whether [`chunk_lengths`] puts the remainder first (`DECIDE_PREFILL_REMAINDER_FIRST`), for
/// benchmarks' reports.
pub fn prefill_remainder_first() -> bool {
    REMAINDER_FIRST.on()
}

/// Whether [`chunk_lengths`] aligns its cuts (`DECIDE_PREFILL_ALIGN`), for benchmarks' reports.
pub fn prefill_aligned() -> bool {
    ALIGN.on()
}

/// [`chunk_lengths`] with its two settings given.
fn cut(held: usize, total: usize, chunk: usize, remainder_first: bool, align: bool) -> Vec<usize> {
    let chunk = chunk.max(1);
    let plain = plain_lengths(total, chunk, remainder_first);
    let aligned = remainder_first && align && chunk.is_multiple_of(PREFILL_ALIGN);
    if !aligned || total <= chunk {
        return plain;
    }
    // The last chunk starts on the first boundary at or after `end - chunk` (before `end`, as
    // `chunk` is at least one tile), every cut before it one whole chunk earlier, and the
    // first chunk takes what is left from `held`.
    let end = held + total;
    let mut at = (end - chunk).next_multiple_of(PREFILL_ALIGN);
    let mut lengths = vec![end - at];
    while at > held {
        let from = at.saturating_sub(chunk).max(held);
        lengths.push(at - from);
        at = from;
    }
    lengths.reverse();
    if lengths.len() > plain.len() {
        return plain;
    }
    lengths
}

/// `total` rows in whole chunks and the remainder, first or last.
fn plain_lengths(total: usize, chunk: usize, remainder_first: bool) -> Vec<usize> {
    let rest = total % chunk;
    let remainder = (rest > 0).then_some(rest);
    let whole = std::iter::repeat_n(chunk, total / chunk);
    let (first, last) = if remainder_first {
        (remainder, None)
    } else {
        (None, remainder)
    };
    first.into_iter().chain(whole).chain(last).collect()
}

#[cfg(test)]
mod tests {
    use super::{cut, PREFILL_ALIGN};

    #[test]
    fn chunk_lengths_put_the_remainder_first_and_cover_every_row() {
        let plain = |total, chunk| cut(0, total, chunk, true, false);
        assert_eq!(plain(28_259, 8192), [3683, 8192, 8192, 8192]);
        assert_eq!(plain(16_384, 8192), [8192, 8192]);
        assert_eq!(plain(5, 8192), [5]);
        assert_eq!(plain(0, 8192), Vec::<usize>::new());
        assert_eq!(plain(3, 0), [1, 1, 1], "a zero chunk is one row");
    }

    #[test]
    fn chunk_lengths_can_put_the_remainder_last() {
        let last = |total, chunk| cut(0, total, chunk, false, true);
        assert_eq!(last(28_259, 8192), [8192, 8192, 8192, 3683]);
        assert_eq!(last(16_384, 8192), [8192, 8192]);
        assert_eq!(last(5, 8192), [5]);
        assert_eq!(last(0, 8192), Vec::<usize>::new());
    }

    #[test]
    fn aligned_cuts_fall_on_tile_boundaries_of_the_cache() {
        assert_eq!(cut(0, 28_259, 8192, true, true), [3712, 8192, 8192, 8163]);
        // The prefill before a read's last chunk: the same cuts.
        assert_eq!(cut(0, 20_096, 8192, true, true), [3712, 8192, 8192]);
        // After a cached prefix of 1,000 rows: cuts at rows 4,480, 12,672 and 20,864.
        assert_eq!(
            cut(1000, 28_000, 8192, true, true),
            [3480, 8192, 8192, 8136]
        );
        assert_eq!(cut(0, 16_384, 8192, true, true), [8192, 8192]);
        assert_eq!(
            cut(0, 8000, 8192, true, true),
            [8000],
            "one chunk is not cut"
        );
        assert_eq!(
            cut(0, 300, 100, true, true),
            [100, 100, 100],
            "chunk off the tile"
        );
    }

    #[test]
    fn aligned_cuts_never_add_a_chunk_and_cover_every_row() {
        // 16,384 rows after 50 cached: aligned cuts would need three chunks, plain ones two.
        assert_eq!(cut(50, 16_384, 8192, true, true), [8192, 8192]);
        for held in [0usize, 1, 50, 99, 127, 128, 1000, 4095, 12_345] {
            for total in [
                1usize, 127, 128, 129, 8191, 8192, 8193, 16_384, 16_500, 28_259, 40_000,
            ] {
                for chunk in [128usize, 256, 4096, 8192] {
                    let plain = cut(held, total, chunk, true, false);
                    let aligned = cut(held, total, chunk, true, true);
                    assert_eq!(
                        aligned.iter().sum::<usize>(),
                        total,
                        "{held} {total} {chunk}"
                    );
                    assert!(aligned.len() <= plain.len(), "{held} {total} {chunk}");
                    assert!(aligned.iter().all(|&n| 0 < n && n <= chunk), "{aligned:?}");
                    if aligned != plain {
                        let mut at = held;
                        for &n in &aligned[..aligned.len() - 1] {
                            at += n;
                            assert!(at.is_multiple_of(PREFILL_ALIGN), "{held} {total} {chunk}");
                        }
                    }
                }
            }
        }
    }
}
