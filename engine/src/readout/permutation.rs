//! `permutation`: the distribution averaged over cyclic label shifts.
//!
//! A model prefers some labels and list positions over others (label-order bias). Shifting
//! the option list cyclically moves every option to other labels and positions; reading the
//! question once per shift (all shifts in one batched read: they share the state prefix) and
//! averaging the per-shift distributions cancels much of that bias, at K reads per question.
//! The per-shift top answers are kept too: how often they differ measures the bias
//! (`decide eval --permute K`).

use crate::plugins::CompiledQuestion;

/// Shifts read when the request asks for `permutation` without a count.
pub const DEFAULT_PERMUTATIONS: usize = 4;

/// `k` distinct shifts spread evenly over `count` positions, the first one 0 (the original
/// order). At most `count` shifts exist.
pub fn shifts(count: usize, k: usize) -> Vec<usize> {
    let k = k.clamp(1, count.max(1));
    (0..k).map(|j| j * count / k).collect()
}

/// The question with its option list rotated by `shift`: list position `j` shows option
/// `(j + shift) % n`.
pub fn rotated(question: &CompiledQuestion, shift: usize) -> CompiledQuestion {
    let n = question.options.len();
    CompiledQuestion {
        instructions: question.instructions.clone(),
        options: (0..n)
            .map(|j| question.options[(j + shift) % n].clone())
            .collect(),
    }
}

/// Label log-probabilities read in list order (labels in list position order) as a
/// distribution over the options in their original order, normalised over the labels.
pub fn to_option_order(logprobs: &[f32], shift: usize) -> Vec<f64> {
    let n = logprobs.len();
    let max = logprobs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logprobs.iter().map(|&l| f64::from(l - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut probs = vec![0.0; n];
    for (j, w) in weights.iter().enumerate() {
        probs[(j + shift) % n] = w / total;
    }
    probs
}

/// The element-wise mean of distributions of equal length.
pub fn average(distributions: &[Vec<f64>]) -> Vec<f64> {
    let n = distributions.first().map_or(0, Vec::len);
    let k = distributions.len() as f64;
    (0..n)
        .map(|i| distributions.iter().map(|d| d[i]).sum::<f64>() / k)
        .collect()
}

/// Index of the largest value (the first of equals).
pub fn argmax(values: &[f64]) -> usize {
    values
        .iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::OptionDef;

    #[test]
    fn shifts_are_distinct_and_spread() {
        assert_eq!(shifts(10, 4), [0, 2, 5, 7]);
        assert_eq!(shifts(3, 8), [0, 1, 2]);
        assert_eq!(shifts(5, 1), [0]);
    }

    #[test]
    fn rotation_and_back() {
        let q = CompiledQuestion {
            instructions: None,
            options: ["a", "b", "c"]
                .iter()
                .map(|t| OptionDef {
                    key: format!("\"{t}\""),
                    text: t.to_string(),
                    description: None,
                })
                .collect(),
        };
        let r = rotated(&q, 1);
        let shown: Vec<&str> = r.options.iter().map(|o| o.text.as_str()).collect();
        assert_eq!(shown, ["b", "c", "a"]);
        // The model puts 0.5 on label A (list position 0), which shows option b.
        let probs = to_option_order(&[0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()], 1);
        assert!((probs[1] - 0.5).abs() < 1e-6, "{probs:?}");
        assert!((probs[2] - 0.25).abs() < 1e-6, "{probs:?}");
        let mean = average(&[vec![1.0, 0.0, 0.0], vec![0.0, 0.5, 0.5]]);
        assert_eq!(mean, [0.5, 0.25, 0.25]);
        assert_eq!(argmax(&mean), 0);
    }
}
