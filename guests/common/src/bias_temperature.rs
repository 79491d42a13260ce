//! The `bias-temperature` calibration policy: a temperature plus one bias per label position,
//! `softmax(scores / T + b)`, addressing label bias (a small model that prefers answering "A").
//!
//! Parameters: `[T, b_0, b_1, ..., b_{m-1}]`, where `b_i` is added to the scaled score of the
//! option at label position `i` (A = 0, B = 1, ...). Positions beyond the list get bias 0, so
//! `default_params(t) = [t]` means "temperature t, no bias". `b_0` is fixed at 0: softmax does
//! not change when every bias moves by the same amount, and questions always start at position 0,
//! so pinning `b_0` makes the fit unique.
//!
//! Fit: with `u = 1/T` the logits `u * s_i + b_i` are linear in `(u, b)`, so the mean negative
//! log-likelihood is convex; Newton's method with a backtracking line search minimises it plus a
//! small ridge penalty on the biases (positions seen in few questions stay near 0). A fitted `T`
//! outside, or at the edge of, `[T_MIN, T_MAX]` is rejected like the temperature policy's.

use crate::temperature::{check_scores, reject_edge, T_MAX, T_MIN};
use crate::{Error, Result};

/// Ridge penalty `RIDGE * sum(b_i^2)` added to the mean NLL.
pub const RIDGE: f64 = 0.01;

/// Parameters for "temperature t, no bias".
pub fn default_params(t: f64) -> Vec<f64> {
    vec![t]
}

fn check_params(params: &[f64]) -> Result<(f64, &[f64])> {
    let Some((&t, biases)) = params.split_first() else {
        return Err(Error::Invalid(
            "params: expected at least 1 parameter (the temperature), got 0".into(),
        ));
    };
    if !t.is_finite() || t <= 0.0 {
        return Err(Error::Invalid(format!(
            "params[0]: temperature must be finite and > 0, got {t}"
        )));
    }
    if let Some(i) = biases.iter().position(|b| !b.is_finite()) {
        return Err(Error::Invalid(format!(
            "params[{}]: a bias must be finite, got {}",
            i + 1,
            biases[i]
        )));
    }
    Ok((t, biases))
}

/// Probabilities `softmax(scores / T + b)`; `-inf` scores (impossible options) stay impossible.
pub fn apply(scores: &[f64], params: &[f64]) -> Result<Vec<f64>> {
    let (t, biases) = check_params(params)?;
    let max = check_scores(scores)?;
    let z: Vec<f64> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| (s - max) / t + biases.get(i).copied().unwrap_or(0.0))
        .collect();
    let zmax = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|x| (x - zmax).exp()).collect();
    let sum: f64 = e.iter().sum();
    Ok(e.into_iter().map(|x| x / sum).collect())
}

/// A sample with scores shifted so the largest finite score is 0.
struct Shifted {
    scores: Vec<f64>,
    expected: usize,
}

/// Mean NLL + ridge, its gradient and Hessian at `theta = (u, b_1, ..., b_{m-1})`.
fn objective(
    samples: &[Shifted],
    theta: &[f64],
    with_derivatives: bool,
) -> (f64, Vec<f64>, Vec<f64>) {
    let d = theta.len();
    let n = samples.len() as f64;
    let u = theta[0];
    let bias = |i: usize| if i == 0 { 0.0 } else { theta[i] };
    let mut value = 0.0;
    let mut grad = vec![0.0; if with_derivatives { d } else { 0 }];
    let mut hess = vec![0.0; if with_derivatives { d * d } else { 0 }];
    let mut p = Vec::new();
    for sample in samples {
        let k = sample.scores.len();
        p.clear();
        let z: Vec<f64> = sample
            .scores
            .iter()
            .enumerate()
            .map(|(i, s)| u * s + bias(i))
            .collect();
        let zmax = z
            .iter()
            .cloned()
            .filter(|x| x.is_finite())
            .fold(f64::NEG_INFINITY, f64::max);
        let top = z.iter().position(|x| *x == zmax).unwrap_or(0);
        let mut sum = 0.0;
        let mut rest = 0.0;
        for (i, x) in z.iter().enumerate() {
            let e = if x.is_finite() { (x - zmax).exp() } else { 0.0 };
            p.push(e);
            sum += e;
            if i != top {
                rest += e;
            }
        }
        for e in p.iter_mut() {
            *e /= sum;
        }
        // ln(1 + rest): precise when the top option is nearly certain (see temperature.rs).
        value += -(z[sample.expected] - zmax) + f64::ln_1p(rest);
        if !with_derivatives {
            continue;
        }
        // Features of option i: x_i = (s_i, e_i) with e_i the indicator of bias i (i >= 1).
        let feature = |i: usize, j: usize| -> f64 {
            if j == 0 {
                if sample.scores[i].is_finite() {
                    sample.scores[i]
                } else {
                    0.0
                }
            } else if i == j {
                1.0
            } else {
                0.0
            }
        };
        let dims: Vec<usize> = std::iter::once(0).chain(1..k.min(d)).collect();
        let mean: Vec<f64> = dims
            .iter()
            .map(|&j| (0..k).map(|i| p[i] * feature(i, j)).sum())
            .collect();
        for (a, &ja) in dims.iter().enumerate() {
            grad[ja] += (mean[a] - feature(sample.expected, ja)) / n;
            for (b, &jb) in dims.iter().enumerate() {
                let second: f64 = (0..k).map(|i| p[i] * feature(i, ja) * feature(i, jb)).sum();
                hess[ja * d + jb] += (second - mean[a] * mean[b]) / n;
            }
        }
    }
    value /= n;
    for j in 1..d {
        value += RIDGE * theta[j] * theta[j];
        if with_derivatives {
            grad[j] += 2.0 * RIDGE * theta[j];
            hess[j * d + j] += 2.0 * RIDGE;
        }
    }
    (value, grad, hess)
}

/// Solves `a x = b` by Gaussian elimination with partial pivoting (`a` is `n x n`, row-major).
fn solve(mut a: Vec<f64>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&x, &y| a[x * n + col].abs().total_cmp(&a[y * n + col].abs()))?;
        if a[pivot * n + col].abs() < 1e-300 {
            return None;
        }
        if pivot != col {
            for j in 0..n {
                a.swap(pivot * n + j, col * n + j);
            }
            b.swap(pivot, col);
        }
        for row in col + 1..n {
            let f = a[row * n + col] / a[col * n + col];
            if f != 0.0 {
                for j in col..n {
                    a[row * n + j] -= f * a[col * n + j];
                }
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|j| a[row * n + j] * x[j]).sum();
        x[row] = (b[row] - s) / a[row * n + row];
    }
    Some(x)
}

/// Fit `[T, 0, b_1, ..., b_{m-1}]` on `(scores, expected index)` samples; `m` is the most
/// options any sample has.
pub fn fit(samples: &[(Vec<f64>, u32)]) -> Result<Vec<f64>> {
    if samples.is_empty() {
        return Err(Error::Invalid(
            "samples: at least one labelled sample is needed to fit".into(),
        ));
    }
    let mut shifted = Vec::with_capacity(samples.len());
    for (i, (scores, expected)) in samples.iter().enumerate() {
        let expected = *expected as usize;
        if expected >= scores.len() {
            return Err(Error::Invalid(format!(
                "samples[{i}].expected: {expected} is out of range for {} scores",
                scores.len()
            )));
        }
        let max = check_scores(scores).map_err(|e| match e {
            Error::Failure(m) | Error::Invalid(m) => {
                Error::Invalid(format!("samples[{i}].scores: {m}"))
            }
        })?;
        if !scores[expected].is_finite() {
            return Err(Error::Invalid(format!(
                "samples[{i}].scores: the expected option's score is -inf"
            )));
        }
        shifted.push(Shifted {
            scores: scores.iter().map(|s| s - max).collect(),
            expected,
        });
    }
    let m = shifted.iter().map(|s| s.scores.len()).max().unwrap_or(1);
    let d = m.max(1);
    let mut theta = vec![0.0; d];
    theta[0] = 1.0;
    for _ in 0..200 {
        let (value, grad, mut hess) = objective(&shifted, &theta, true);
        // Damping relative to each coordinate's own curvature: an absolute floor would stall
        // the step on separable data, where the curvature in u decays like the loss itself.
        for j in 0..d {
            hess[j * d + j] = hess[j * d + j] * (1.0 + 1e-10) + 1e-300;
        }
        let Some(step) = solve(hess, grad.iter().map(|g| -g).collect()) else {
            break;
        };
        // Converged: Newton steps shrink quadratically near a finite optimum (on separable
        // data they do not, and u runs off to the rejection below).
        if step.iter().all(|s| s.abs() < 1e-9) {
            break;
        }
        let slope: f64 = step.iter().zip(&grad).map(|(s, g)| s * g).sum();
        let mut alpha = 1.0;
        let mut moved = false;
        for _ in 0..40 {
            let trial: Vec<f64> = theta
                .iter()
                .zip(&step)
                .map(|(t, s)| t + alpha * s)
                .collect();
            let (v, _, _) = objective(&shifted, &trial, false);
            if v.is_finite() && v <= value + 1e-4 * alpha * slope {
                theta = trial;
                moved = true;
                break;
            }
            alpha /= 2.0;
        }
        if !moved {
            break;
        }
        // Perfectly separable data drives u to infinity; stop once far outside the range.
        if theta[0] > 10.0 / T_MIN {
            break;
        }
    }
    let u = theta[0];
    if u <= 0.0 || !u.is_finite() {
        return Err(Error::Failure(format!(
            "the fitted inverse temperature is {u:.4}: the scores do not rank the expected options above the others; the fit is rejected"
        )));
    }
    let t = 1.0 / u;
    if !(T_MIN..=T_MAX).contains(&t) {
        return Err(Error::Failure(format!(
            "the fitted temperature {t:.4} is outside the range [{T_MIN}, {T_MAX}]; the fit is rejected"
        )));
    }
    reject_edge(t.ln())?;
    let mut params = Vec::with_capacity(d + 1);
    params.push(t);
    params.push(0.0);
    params.extend_from_slice(&theta[1..]);
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnd(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    fn draw(p: &[f64], u: f64) -> u32 {
        let mut acc = 0.0;
        for (i, x) in p.iter().enumerate() {
            acc += x;
            if u < acc {
                return i as u32;
            }
        }
        (p.len() - 1) as u32
    }

    #[test]
    fn apply_defaults_to_a_plain_temperature() {
        let p = apply(&[0.0, 1.0], &default_params(1.0)).unwrap();
        let q = crate::temperature::apply(&[0.0, 1.0], &[1.0]).unwrap();
        assert!((p[1] - q[1]).abs() < 1e-12);
        let biased = apply(&[0.0, 0.0, f64::NEG_INFINITY], &[1.0, 0.0, 2f64.ln()]).unwrap();
        assert!((biased[1] - 2.0 / 3.0).abs() < 1e-12 && biased[2] == 0.0);
        assert!(matches!(apply(&[0.0, 1.0], &[]), Err(Error::Invalid(_))));
        assert!(matches!(
            apply(&[0.0, 1.0], &[1.0, f64::NAN]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            apply(&[0.0, 1.0], &[-1.0]),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn fit_recovers_temperature_and_position_bias() {
        // Truth: T = 2, position B favoured by +0.8, C disfavoured by -0.5, over 2- and 3-option questions.
        let truth = [2.0, 0.0, 0.8, -0.5];
        let mut seed = 7u64;
        let mut samples = Vec::new();
        for n in 0..6000 {
            let k = 2 + n % 2;
            let s: Vec<f64> = (0..k).map(|_| rnd(&mut seed) * 6.0 - 3.0).collect();
            let p = apply(&s, &truth).unwrap();
            samples.push((s, draw(&p, rnd(&mut seed))));
        }
        let fitted = fit(&samples).unwrap();
        assert_eq!(fitted.len(), 4);
        assert!((fitted[0] - 2.0).abs() < 0.25, "{fitted:?}");
        assert_eq!(fitted[1], 0.0);
        assert!((fitted[2] - 0.8).abs() < 0.15, "{fitted:?}");
        assert!((fitted[3] + 0.5).abs() < 0.2, "{fitted:?}");
        // Without bias in the data, the biases stay near 0 and T matches the temperature fit.
        let mut plain = Vec::new();
        for _ in 0..3000 {
            let s: Vec<f64> = (0..3).map(|_| rnd(&mut seed) * 6.0).collect();
            let p = apply(&s, &[3.0]).unwrap();
            plain.push((s, draw(&p, rnd(&mut seed))));
        }
        let fitted = fit(&plain).unwrap();
        let t = crate::temperature::fit(&plain).unwrap()[0];
        assert!(
            (fitted[0] - t).abs() < 0.3 && fitted[2].abs() < 0.15,
            "{fitted:?} vs T = {t}"
        );
    }

    #[test]
    fn bad_samples_and_edge_fits_are_refused() {
        assert!(matches!(fit(&[]), Err(Error::Invalid(_))));
        assert!(matches!(
            fit(&[(vec![0.0, 1.0], 2)]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            fit(&[(vec![f64::NEG_INFINITY, 1.0], 0)]),
            Err(Error::Invalid(_))
        ));
        // The higher score always loses, whatever the position: u < 0, rejected.
        let wrong: Vec<(Vec<f64>, u32)> = (0..60)
            .map(|i| {
                if i % 2 == 0 {
                    (vec![0.0, 2.0], 0)
                } else {
                    (vec![2.0, 0.0], 1)
                }
            })
            .collect();
        let w = fit(&wrong);
        assert!(matches!(w, Err(Error::Failure(_))), "{w:?}");
        // Perfectly separated: T -> 0, rejected.
        let right: Vec<(Vec<f64>, u32)> = (0..60)
            .map(|i| {
                if i % 2 == 0 {
                    (vec![0.0, 2.0], 1)
                } else {
                    (vec![2.0, 0.0], 0)
                }
            })
            .collect();
        let r = fit(&right);
        assert!(matches!(r, Err(Error::Failure(_))), "{r:?}");
    }
}
