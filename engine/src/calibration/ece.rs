//! Expected calibration error and bootstrap intervals over groups.
//!
//! ECE: answers are binned by the top option's probability into 10 equal-width bins; ECE is
//! the answer-weighted mean over bins of |accuracy - mean confidence|. Intervals: 95% percentile
//! bootstrap, resampling whole groups (questions about one text are not independent) with a
//! fixed seed, so a run is reproducible. Raw and calibrated ECE are resampled together.

use serde::{Deserialize, Serialize};

/// Bins of the ECE.
pub const BINS: usize = 10;
/// Bootstrap resamples.
pub const RESAMPLES: usize = 1000;
/// Seed of the bootstrap (and of the fold assignment).
pub const SEED: u64 = 0x5eed_ca11_b4a7_e000;

/// The top option's probability and whether it was the expected option.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Top {
    pub confidence: f64,
    pub correct: bool,
}

impl Top {
    /// From probabilities over options and the expected index (ties: the first option).
    pub fn of(probabilities: &[f64], expected: usize) -> Top {
        let mut best = 0;
        for (i, p) in probabilities.iter().enumerate() {
            if *p > probabilities[best] {
                best = i;
            }
        }
        Top {
            confidence: probabilities[best],
            correct: best == expected,
        }
    }
}

/// ECE of the answers at `indices` (each index may repeat, as in a bootstrap resample).
pub fn ece_of(tops: &[Top], indices: impl IntoIterator<Item = usize>) -> f64 {
    let mut count = [0usize; BINS];
    let mut confidence = [0f64; BINS];
    let mut correct = [0f64; BINS];
    let mut total = 0usize;
    for i in indices {
        let top = tops[i];
        let bin = ((top.confidence * BINS as f64).floor() as usize).min(BINS - 1);
        count[bin] += 1;
        confidence[bin] += top.confidence;
        correct[bin] += f64::from(u8::from(top.correct));
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    (0..BINS)
        .filter(|&b| count[b] > 0)
        .map(|b| (correct[b] - confidence[b]).abs())
        .sum::<f64>()
        / total as f64
}

/// ECE of all answers.
pub fn ece(tops: &[Top]) -> f64 {
    ece_of(tops, 0..tops.len())
}

/// One bin of a reliability diagram: the answers whose top probability fell in
/// `[low, high)` (the last bin includes 1.0), how many there were, their mean stated
/// confidence and the share of them that was right. The ECE is the count-weighted mean of
/// `|accuracy - confidence|` over these bins; a person reads the same thing as the distance
/// of each bar from the diagonal, which is why the bins are kept next to the ECE.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReliabilityBin {
    /// Lower edge of the bin's confidence range.
    pub low: f64,
    /// Upper edge (exclusive, but 1.0 belongs to the last bin).
    pub high: f64,
    /// Answers in the bin.
    pub count: usize,
    /// Their mean top-option probability.
    pub confidence: f64,
    /// The share of them whose top option was the expected one.
    pub accuracy: f64,
}

/// The reliability diagram of `tops`: the [`BINS`] equal-width bins the ECE uses, only those
/// holding at least one answer, lowest first.
pub fn reliability(tops: &[Top]) -> Vec<ReliabilityBin> {
    let mut count = [0usize; BINS];
    let mut confidence = [0f64; BINS];
    let mut correct = [0f64; BINS];
    for top in tops {
        let bin = ((top.confidence * BINS as f64).floor() as usize).min(BINS - 1);
        count[bin] += 1;
        confidence[bin] += top.confidence;
        correct[bin] += f64::from(u8::from(top.correct));
    }
    (0..BINS)
        .filter(|&b| count[b] > 0)
        .map(|b| ReliabilityBin {
            low: b as f64 / BINS as f64,
            high: (b + 1) as f64 / BINS as f64,
            count: count[b],
            confidence: confidence[b] / count[b] as f64,
            accuracy: correct[b] / count[b] as f64,
        })
        .collect()
}

/// A point estimate with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Interval {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} [{:.3}, {:.3}]", self.value, self.low, self.high)
    }
}

/// A small deterministic generator (splitmix64): reproducible resamples without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// ECE of several score sets (e.g. raw and calibrated) over the same answers, with 95%
/// bootstrap intervals from resampling `groups` (each a list of answer indices).
pub fn with_intervals(sets: &[&[Top]], groups: &[Vec<usize>]) -> Vec<Interval> {
    let mut rng = Rng::new(SEED);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(RESAMPLES); sets.len()];
    let mut indices = Vec::new();
    for _ in 0..RESAMPLES {
        indices.clear();
        for _ in 0..groups.len() {
            indices.extend_from_slice(&groups[rng.below(groups.len())]);
        }
        for (set, out) in sets.iter().zip(draws.iter_mut()) {
            out.push(ece_of(set, indices.iter().copied()));
        }
    }
    sets.iter()
        .zip(draws)
        .map(|(set, mut values)| {
            values.sort_by(f64::total_cmp);
            Interval {
                value: ece(set),
                low: percentile(&values, 0.025),
                high: percentile(&values, 0.975),
            }
        })
        .collect()
}

/// The mean of `candidate[i] - baseline[i]` over answers (e.g. 1.0 for a right answer, 0.0
/// for a wrong one: the accuracy gain) with its 95% paired bootstrap interval from resampling
/// whole `groups`, with the same seed and resample count as the ECE intervals. "A clear gain"
/// is an interval whose low end is above zero.
pub fn paired_gain(candidate: &[f64], baseline: &[f64], groups: &[Vec<usize>]) -> Interval {
    let diff: Vec<f64> = candidate.iter().zip(baseline).map(|(a, b)| a - b).collect();
    let mean_of = |indices: &[usize]| {
        indices.iter().map(|&i| diff[i]).sum::<f64>() / indices.len().max(1) as f64
    };
    let all: Vec<usize> = (0..diff.len()).collect();
    let mut rng = Rng::new(SEED);
    let mut values = Vec::with_capacity(RESAMPLES);
    let mut indices = Vec::new();
    for _ in 0..RESAMPLES {
        indices.clear();
        for _ in 0..groups.len() {
            indices.extend_from_slice(&groups[rng.below(groups.len())]);
        }
        values.push(mean_of(&indices));
    }
    values.sort_by(f64::total_cmp);
    Interval {
        value: mean_of(&all),
        low: percentile(&values, 0.025),
        high: percentile(&values, 0.975),
    }
}

/// Linear-interpolated percentile of sorted values.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let position = q * (sorted.len() - 1) as f64;
    let (low, high) = (position.floor() as usize, position.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(confidence: f64, correct: bool) -> Top {
        Top {
            confidence,
            correct,
        }
    }

    #[test]
    fn ece_is_the_weighted_gap_per_bin() {
        // Bin 9: confidence 0.95 twice, one right: gap 0.45 over 2 answers. Bin 5: 0.55, right: gap 0.45.
        let tops = [top(0.95, true), top(0.95, false), top(0.55, true)];
        assert!((ece(&tops) - (0.9 + 0.45) / 3.0).abs() < 1e-12);
        // Perfectly calibrated in each bin.
        let fair = [top(0.5, true), top(0.5, false), top(1.0, true)];
        assert!(ece(&fair).abs() < 1e-12);
        assert_eq!(Top::of(&[0.2, 0.5, 0.3], 1), top(0.5, true));
        assert_eq!(Top::of(&[0.5, 0.5], 1), top(0.5, false));
    }

    #[test]
    fn reliability_bins_are_the_eces_bins() {
        let tops = [
            top(0.95, true),
            top(0.95, false),
            top(0.55, true),
            top(1.0, true),
        ];
        let bins = reliability(&tops);
        assert_eq!(bins.len(), 2);
        assert_eq!((bins[0].low, bins[0].high, bins[0].count), (0.5, 0.6, 1));
        assert!((bins[0].confidence - 0.55).abs() < 1e-12 && bins[0].accuracy == 1.0);
        // 1.0 belongs to the last bin.
        assert_eq!((bins[1].low, bins[1].count), (0.9, 3));
        assert!((bins[1].confidence - (0.95 + 0.95 + 1.0) / 3.0).abs() < 1e-12);
        assert!((bins[1].accuracy - 2.0 / 3.0).abs() < 1e-12);
        // The ECE is the count-weighted gap over these bins.
        let weighted: f64 = bins
            .iter()
            .map(|b| b.count as f64 * (b.accuracy - b.confidence).abs())
            .sum::<f64>()
            / tops.len() as f64;
        assert!((weighted - ece(&tops)).abs() < 1e-12);
        assert!(reliability(&[]).is_empty());
    }

    #[test]
    fn a_paired_gain_is_clear_only_when_the_candidate_wins_across_groups() {
        let groups: Vec<Vec<usize>> = (0..100).map(|g| vec![2 * g, 2 * g + 1]).collect();
        let baseline: Vec<f64> = (0..200).map(|i| f64::from(u8::from(i % 2 == 0))).collect();
        // Right on every question the baseline gets right, and on a fifth of the others.
        let better: Vec<f64> = (0..200)
            .map(|i| f64::from(u8::from(i % 2 == 0 || i % 10 == 1)))
            .collect();
        let gain = paired_gain(&better, &baseline, &groups);
        assert!((gain.value - 0.1).abs() < 1e-12 && gain.low > 0.0, "{gain}");
        // Wins and losses that cancel: no clear gain either way.
        let mixed: Vec<f64> = (0..200)
            .map(|i| f64::from(u8::from((i % 2 == 0) != (i % 20 == 0 || i % 20 == 3))))
            .collect();
        let gain = paired_gain(&mixed, &baseline, &groups);
        assert!(gain.low < 0.0 && gain.high > 0.0, "{gain}");
        assert_eq!(gain, paired_gain(&mixed, &baseline, &groups));
    }

    #[test]
    fn intervals_bracket_the_estimate_and_are_reproducible() {
        let mut rng = Rng::new(1);
        let tops: Vec<Top> = (0..200)
            .map(|_| top(0.5 + rng.below(50) as f64 / 100.0, rng.below(2) == 0))
            .collect();
        let groups: Vec<Vec<usize>> = (0..100).map(|g| vec![2 * g, 2 * g + 1]).collect();
        let a = with_intervals(&[&tops], &groups)[0];
        let b = with_intervals(&[&tops], &groups)[0];
        assert_eq!(a, b);
        assert!(
            a.low <= a.value && a.value <= a.high + 0.02 && a.low < a.high,
            "{a}"
        );
    }
}
