//! The `contextual` calibration policy: contextual calibration, then a temperature.
//!
//! A small model has a prior over the labels that has nothing to do with the input (it likes
//! answering "A", or "Yes"). Contextual calibration estimates that prior by reading the same
//! question over neutral states with no content ([`NEUTRAL_STATES`]) and divides it out:
//! `p(option) ∝ p_content(option) / p_neutral(option)`. In scores (log-probabilities) that is
//! a subtraction, and a temperature fitted on the corrected scores makes the result calibrated:
//! `apply(scores, [T]) = softmax((s - s_cf) / T)`.
//!
//! Scores: the policy exports `content-free` (contract 0.1.1), so every score list holds `2k`
//! numbers: the `k` option scores of the real read, then the `k` content-free scores `s_cf`
//! (the log of the mean over the neutral states of the neutral reads' distributions,
//! renormalised over the options; computed by the host). `apply` returns `k` probabilities.
//!
//! Fit: the temperature policy's golden-section search on the mean NLL
//! ([`crate::temperature::fit`]) over the corrected scores `s - s_cf`, with its range and its
//! edge rule (a fit at the edge of `[T_MIN, T_MAX]` is a `failure`).
//!
//! Errors: scores that break the convention (none, an odd count, a NaN or `+inf` score, a
//! content-free score that is not finite: a prior of 0 cannot be divided out) and a parameter
//! list that is not `[T]` are `failure`s: the host sent them, not the caller. A real-read score
//! of `-inf` is an impossible option and stays impossible. A temperature that is not finite and
//! positive is `invalid-question`, as in the temperature policy (it is the caller's setting).

use crate::temperature;
use crate::{Error, Result};

/// The neutral states the host reads each question over (`content-free.neutral-states`): a
/// placeholder, nothing, and a mask token, so that no one wording's own bias dominates the prior.
pub const NEUTRAL_STATES: &[&str] = &["N/A", "", "[MASK]"];

/// [`NEUTRAL_STATES`] as the WIT export returns them.
pub fn neutral_states() -> Vec<String> {
    NEUTRAL_STATES.iter().map(|s| s.to_string()).collect()
}

/// Parameters for "temperature t, nothing fitted": the prior is still divided out.
pub fn default_params(t: f64) -> Vec<f64> {
    vec![t]
}

/// The corrected scores `s - s_cf` of one `2k` score list.
pub fn corrected(scores: &[f64]) -> Result<Vec<f64>> {
    if scores.is_empty() {
        return Err(Error::Failure(
            "no scores (expected 2k: the k option scores of the real read, then k content-free scores)".into(),
        ));
    }
    if !scores.len().is_multiple_of(2) {
        return Err(Error::Failure(format!(
            "got {} scores, an odd count; a contextual policy takes 2k: the k option scores of the real read, then k content-free scores",
            scores.len()
        )));
    }
    let k = scores.len() / 2;
    let (real, content_free) = scores.split_at(k);
    if let Some(i) = real.iter().position(|s| s.is_nan() || *s == f64::INFINITY) {
        return Err(Error::Failure(format!("score {i} is {}", real[i])));
    }
    if let Some(i) = content_free.iter().position(|s| !s.is_finite()) {
        return Err(Error::Failure(format!(
            "content-free score {i} (scores[{}]) is {}; the prior of every option must be finite to be divided out",
            k + i,
            content_free[i]
        )));
    }
    Ok(real
        .iter()
        .zip(content_free)
        .map(|(s, cf)| s - cf)
        .collect())
}

fn check_params(params: &[f64]) -> Result<()> {
    if params.len() != 1 {
        return Err(Error::Failure(format!(
            "params: expected 1 parameter (the temperature), got {}",
            params.len()
        )));
    }
    Ok(())
}

/// Probabilities `softmax((s - s_cf) / T)` over the `k` options, from `2k` scores and `[T]`.
pub fn apply(scores: &[f64], params: &[f64]) -> Result<Vec<f64>> {
    check_params(params)?;
    temperature::apply(&corrected(scores)?, params)
}

/// Fit `[T]` on `(2k scores, expected index)` samples: the temperature fit on the corrected
/// scores.
pub fn fit(samples: &[(Vec<f64>, u32)]) -> Result<Vec<f64>> {
    let corrected = samples
        .iter()
        .enumerate()
        .map(|(i, (scores, expected))| match corrected(scores) {
            Ok(c) => Ok((c, *expected)),
            Err(Error::Failure(m) | Error::Invalid(m)) => {
                Err(Error::Failure(format!("samples[{i}].scores: {m}")))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    temperature::fit(&corrected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn apply_divides_out_the_prior() {
        // The read equals the prior: no evidence either way.
        let (a, b) = (0.8f64.ln(), 0.2f64.ln());
        assert!(close(&apply(&[a, b, a, b], &[1.0]).unwrap(), &[0.5, 0.5]));
        // p ∝ p_content / p_neutral: (0.6 / 0.8) : (0.4 / 0.2) = 0.75 : 2.
        let p = apply(&[0.6f64.ln(), 0.4f64.ln(), a, b], &[1.0]).unwrap();
        assert!(close(&p, &[0.75 / 2.75, 2.0 / 2.75]), "{p:?}");
        // Then the temperature: softmax((s - s_cf) / T).
        let p = apply(&[0.0, 1.0, 0.5, -0.5], &[2.0]).unwrap();
        let (z0, z1) = ((0.0 - 0.5) / 2.0, (1.0 + 0.5) / 2.0);
        let e = [f64::exp(z0), f64::exp(z1)];
        assert!(
            close(&p, &[e[0] / (e[0] + e[1]), e[1] / (e[0] + e[1])]),
            "{p:?}"
        );
        // An impossible option stays impossible.
        let p = apply(&[0.0, f64::NEG_INFINITY, -1.0, -1.0], &[1.0]).unwrap();
        assert_eq!(p, vec![1.0, 0.0]);
        assert_eq!(default_params(0.7), vec![0.7]);
        assert_eq!(neutral_states(), vec!["N/A", "", "[MASK]"]);
    }

    #[test]
    fn input_that_breaks_the_convention_is_a_failure() {
        let failure = |r: Result<Vec<f64>>| match r {
            Err(Error::Failure(m)) => m,
            other => panic!("expected a failure, got {other:?}"),
        };
        assert!(failure(apply(&[0.0, 1.0, 2.0], &[1.0])).contains("odd count"));
        assert!(failure(apply(&[], &[1.0])).contains("no scores"));
        assert!(failure(apply(&[0.0, 1.0], &[1.0, 0.0])).contains("expected 1 parameter"));
        assert!(failure(apply(&[0.0, 1.0], &[])).contains("expected 1 parameter"));
        assert!(failure(apply(&[f64::NAN, 0.0, 0.0, 0.0], &[1.0])).contains("score 0 is NaN"));
        let m = failure(apply(&[0.0, 0.0, 0.0, f64::NEG_INFINITY], &[1.0]));
        assert!(m.contains("content-free score 1 (scores[3])"), "{m}");
        assert!(failure(apply(&[0.0, 0.0, f64::INFINITY, 0.0], &[1.0])).contains("content-free"));
        // Every real score -inf: nothing to calibrate (the temperature policy's rule).
        assert!(failure(apply(
            &[f64::NEG_INFINITY; 2]
                .into_iter()
                .chain([0.0, 0.0])
                .collect::<Vec<_>>(),
            &[1.0]
        ))
        .contains("-inf"));
        // A bad temperature is the caller's, as in the temperature policy.
        assert!(matches!(apply(&[0.0, 1.0], &[0.0]), Err(Error::Invalid(_))));
        assert!(
            matches!(fit(&[(vec![0.0, 1.0, 2.0], 0)]), Err(Error::Failure(m)) if m.starts_with("samples[0].scores"))
        );
        assert!(matches!(fit(&[]), Err(Error::Invalid(_))));
        assert!(matches!(
            fit(&[(vec![0.0, 1.0, 0.0, 0.0], 2)]),
            Err(Error::Invalid(_))
        ));
    }

    /// Deterministic uniform numbers in [0, 1).
    fn rng(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn fit_recovers_the_temperature_under_a_label_prior() {
        // A model with a strong prior for the first label (+2 on its score, seen by the neutral
        // reads too, with some noise) whose evidence is 3x too confident: the labels come from
        // softmax(evidence / 3).
        let mut rnd = rng(7);
        let mut samples = Vec::new();
        for _ in 0..4000 {
            let evidence = [rnd() * 6.0, rnd() * 6.0, rnd() * 6.0];
            let prior = [2.0 + rnd() * 0.2, rnd() * 0.2, rnd() * 0.2];
            let truth = temperature::apply(&evidence, &[3.0]).unwrap();
            let u = rnd();
            let expected = if u < truth[0] {
                0
            } else if u < truth[0] + truth[1] {
                1
            } else {
                2
            };
            let mut scores: Vec<f64> = evidence.iter().zip(&prior).map(|(e, p)| e + p).collect();
            scores.extend(prior);
            samples.push((scores, expected));
        }
        let t = fit(&samples).unwrap()[0];
        assert!((t - 3.0).abs() < 0.4, "fitted T = {t}");
        // The calibrated probabilities no longer favour the first label: its mean is near a third.
        let mean0 = samples
            .iter()
            .map(|(s, _)| apply(s, &[t]).unwrap()[0])
            .sum::<f64>()
            / samples.len() as f64;
        assert!((mean0 - 1.0 / 3.0).abs() < 0.03, "mean p(first) = {mean0}");
    }

    #[test]
    fn a_fit_at_the_edge_is_rejected() {
        // After the correction the higher score is always wrong: the optimum is T -> inf.
        let wrong: Vec<(Vec<f64>, u32)> = (0..50)
            .map(|i| (vec![0.0, 1.0 + (i % 3) as f64, 0.5, 0.0], 0))
            .collect();
        match fit(&wrong) {
            Err(Error::Failure(m)) => assert!(m.contains("edge"), "{m}"),
            other => panic!("expected an edge rejection, got {other:?}"),
        }
    }
}
