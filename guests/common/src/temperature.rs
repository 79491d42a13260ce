//! The `temperature` calibration policy: `softmax(scores / T)`, with `T` fitted by
//! golden-section search over `log T` minimising the mean negative log-likelihood.
//!
//! A fit that ends at an edge of `[T_MIN, T_MAX]` is rejected (`failure`): the optimum lies
//! outside the range, so the returned value would be an artefact of the range, not a measurement
//! (typically scores that carry no signal, or labels that contradict them).

use crate::{Error, Result};

/// Search interval of `T` for `fit`.
pub const T_MIN: f64 = 0.05;
/// Search interval of `T` for `fit`.
pub const T_MAX: f64 = 20.0;

/// Parameters for "temperature t, nothing fitted".
pub fn default_params(t: f64) -> Vec<f64> {
    vec![t]
}

fn temperature(params: &[f64]) -> Result<f64> {
    match params {
        [t] if t.is_finite() && *t > 0.0 => Ok(*t),
        [t] => Err(Error::Invalid(format!(
            "params[0]: temperature must be finite and > 0, got {t}"
        ))),
        _ => Err(Error::Invalid(format!(
            "params: expected 1 parameter (the temperature), got {}",
            params.len()
        ))),
    }
}

/// The largest score, after refusing what no policy can calibrate: no scores, a NaN or
/// `+inf` score, or only `-inf` scores.
pub(crate) fn check_scores(scores: &[f64]) -> Result<f64> {
    if scores.is_empty() {
        return Err(Error::Failure("no scores".into()));
    }
    if let Some(i) = scores
        .iter()
        .position(|s| s.is_nan() || *s == f64::INFINITY)
    {
        return Err(Error::Failure(format!("score {i} is {}", scores[i])));
    }
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return Err(Error::Failure("every score is -inf".into()));
    }
    Ok(max)
}

/// Log-softmax of `scores / t`; `-inf` scores (impossible options) stay impossible.
fn log_softmax(scores: &[f64], t: f64) -> Result<Vec<f64>> {
    let max = check_scores(scores)?;
    let z: Vec<f64> = scores.iter().map(|s| (s - max) / t).collect();
    // ln(1 + sum of the others) keeps the NLL of a confident right answer precise (not 0.0),
    // so the fit can tell confident from very confident.
    let top = z.iter().position(|x| *x == 0.0).unwrap_or(0);
    let rest: f64 = z
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != top)
        .map(|(_, x)| x.exp())
        .sum();
    let lse = rest.ln_1p();
    Ok(z.into_iter().map(|x| x - lse).collect())
}

/// Probabilities `softmax(scores / T)` with `params = [T]`.
pub fn apply(scores: &[f64], params: &[f64]) -> Result<Vec<f64>> {
    let t = temperature(params)?;
    Ok(log_softmax(scores, t)?.into_iter().map(f64::exp).collect())
}

fn mean_nll(samples: &[(Vec<f64>, u32)], t: f64) -> f64 {
    let mut total = 0.0;
    for (scores, expected) in samples {
        match log_softmax(scores, t) {
            Ok(lp) => total -= lp[*expected as usize],
            Err(_) => return f64::INFINITY,
        }
    }
    total / samples.len() as f64
}

/// Fit `[T]` on `(scores, expected index)` samples.
pub fn fit(samples: &[(Vec<f64>, u32)]) -> Result<Vec<f64>> {
    if samples.is_empty() {
        return Err(Error::Invalid(
            "samples: at least one labelled sample is needed to fit a temperature".into(),
        ));
    }
    for (i, (scores, expected)) in samples.iter().enumerate() {
        if *expected as usize >= scores.len() {
            return Err(Error::Invalid(format!(
                "samples[{i}].expected: {expected} is out of range for {} scores",
                scores.len()
            )));
        }
        if let Err(Error::Failure(m)) | Err(Error::Invalid(m)) = log_softmax(scores, 1.0) {
            return Err(Error::Invalid(format!("samples[{i}].scores: {m}")));
        }
    }
    let f = |log_t: f64| mean_nll(samples, log_t.exp());
    let (mut a, mut b) = (T_MIN.ln(), T_MAX.ln());
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - g * (b - a);
    let mut d = a + g * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..100 {
        if (b - a).abs() < 1e-9 {
            break;
        }
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = f(d);
        }
    }
    let log_t = (a + b) / 2.0;
    reject_edge(log_t)?;
    Ok(vec![log_t.exp()])
}

/// How close (in `log T`) to an edge of the search range a fit counts as "at the edge".
pub const EDGE_TOLERANCE: f64 = 1e-3;

/// Rejects a fitted `log T` at an edge of `[T_MIN, T_MAX]`.
pub fn reject_edge(log_t: f64) -> Result<()> {
    if !log_t.is_finite()
        || log_t - T_MIN.ln() < EDGE_TOLERANCE
        || T_MAX.ln() - log_t < EDGE_TOLERANCE
    {
        return Err(Error::Failure(format!(
            "the fitted temperature {:.4} is at the edge of the search range [{T_MIN}, {T_MAX}]; the fit is rejected",
            log_t.exp()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_is_a_stable_softmax() {
        let p = apply(&[0.0, 1.0], &[1.0]).unwrap();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((p[1] - 1.0 / (1.0 + (-1f64).exp())).abs() < 1e-12);
        let big = apply(&[1000.0, 999.0, f64::NEG_INFINITY], &[1.0]).unwrap();
        assert!(big.iter().all(|x| x.is_finite()));
        assert_eq!(big[2], 0.0);
        let flat = apply(&[0.0, 1.0], &[1e6]).unwrap();
        assert!((flat[0] - 0.5).abs() < 1e-5);
    }

    #[test]
    fn bad_temperature_is_invalid() {
        assert!(matches!(apply(&[0.0, 1.0], &[0.0]), Err(Error::Invalid(_))));
        assert!(matches!(
            apply(&[0.0, 1.0], &[f64::NAN]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            apply(&[0.0, 1.0], &[1.0, 2.0]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            apply(&[f64::NAN, 1.0], &[1.0]),
            Err(Error::Failure(_))
        ));
    }

    #[test]
    fn fit_recovers_a_temperature() {
        // Scores that are 3x too confident: the labels come from softmax(scores / 3).
        let mut samples = Vec::new();
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..4000 {
            let s = vec![rnd() * 6.0, rnd() * 6.0, rnd() * 6.0];
            let p = apply(&s, &[3.0]).unwrap();
            let u = rnd();
            let expected = if u < p[0] {
                0
            } else if u < p[0] + p[1] {
                1
            } else {
                2
            };
            samples.push((s, expected));
        }
        let t = fit(&samples).unwrap()[0];
        assert!((t - 3.0).abs() < 0.4, "fitted T = {t}");
        assert!(matches!(fit(&[]), Err(Error::Invalid(_))));
        assert!(matches!(
            fit(&[(vec![0.0, 1.0], 2)]),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn a_fit_at_the_edge_is_rejected() {
        // The higher score is always wrong: the NLL falls as T grows, the optimum is T -> inf.
        let wrong: Vec<(Vec<f64>, u32)> = (0..50)
            .map(|i| (vec![0.0, 1.0 + (i % 3) as f64], 0))
            .collect();
        match fit(&wrong) {
            Err(Error::Failure(m)) => assert!(m.contains("edge"), "{m}"),
            other => panic!("expected an edge rejection, got {other:?}"),
        }
        // Always right with large margins: the optimum is T -> 0.
        let right: Vec<(Vec<f64>, u32)> = (0..50)
            .map(|i| (vec![0.0, 5.0 + (i % 3) as f64], 1))
            .collect();
        assert!(matches!(fit(&right), Err(Error::Failure(_))));
        assert!(reject_edge(1.0f64.ln()).is_ok());
    }
}
